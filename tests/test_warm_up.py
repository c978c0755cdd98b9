"""A file's time budget pays for migrating that file, not for the imports the rules make lazily
on the first file a process sees (CI flake of session 39: a two-line file over a 0.2 s budget in
a freshly forked worker). Checked in a fresh interpreter, by what is imported, not by a clock."""

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    os.environ["NPU_MIGRATE_FILE_TIMEOUT"] = BUDGET
    from npu_migrate import catalogue, model, run

    seen = []
    real = run.migrate_file

    def spy(source, relpath, options):
        before = set(sys.modules)
        result = real(source, relpath, options)
        seen.append([relpath, sorted(set(sys.modules) - before)])
        return result

    run.migrate_file = spy
    path = sys.argv[1]
    options = model.Options(enabled=catalogue.enabled_codes())
    results = run.run_files([(path, "good.py")], options, jobs=1)
    print(json.dumps({"seen": seen, "codes": [f.code for r in results for f in r.findings]}))
    """
)


def run_script(tmp_path, budget):
    good = tmp_path / "good.py"
    good.write_text("import torch\ntorch.cuda.synchronize()\n")
    script = SCRIPT.replace("BUDGET", repr(budget))
    out = subprocess.run([sys.executable, "-c", script, str(good)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_with_a_budget_the_first_file_imports_nothing(tmp_path):
    data = run_script(tmp_path, "0.2")
    names = [relpath for relpath, _ in data["seen"]]
    assert names[-1] == "good.py" and len(names) == 2, names  # the warm-up came first
    assert data["seen"][0][1], "the warm-up loaded the lazily imported rule modules"
    assert data["seen"][-1][1] == [], data["seen"][-1][1]  # nothing left to import in its budget
    assert "NPU001" not in data["codes"]


def test_without_a_budget_there_is_no_warm_up(tmp_path):
    """(No budget, nothing to protect: the first file loads what it needs, as before.)"""
    data = run_script(tmp_path, "0")
    assert [relpath for relpath, _ in data["seen"]] == ["good.py"]
    assert data["seen"][0][1], "the first file loads the lazily imported modules itself"
