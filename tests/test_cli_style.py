"""One command-line style (issue 18, docs/cli.md): the same flags on every command, usage errors of
the command typed, a folder named like a command, `rule CODE` and the rule pages, SARIF/GitHub/
GitLab levels and extents, proposals in `check`, locations an editor follows, what a dry run and a
write outside git say, named files and empty folders, the configuration's spelling, the
pre-commit hooks' file selection, and a start-up that imports no engine for `--help`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from npu_migrate import __version__, catalogue
from npu_migrate.cli import LAZY_COMMANDS, main

REPO = Path(__file__).resolve().parent.parent
LEFT = "import torch\nx = torch.cuda.memory_usage()\n"  # reported only (NPU202)
FIXABLE = "import torch\nx = torch.zeros(1).cuda()\n"  # NPU101, rewritable
SCRIPT = "#!/bin/bash\nexport CUDA_VISIBLE_DEVICES=0\npython train.py\n"  # NPU701


def cli(*args, cwd: Path | None = None, monkeypatch=None, env=None):
    if cwd is not None:
        monkeypatch.chdir(cwd)
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False, env=env,
                              prog_name="npu-migrate")


def put(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def flat(text: str) -> str:
    return " ".join(text.split())


def notebook(*cells: str) -> str:
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                     "source": c.splitlines(True)} for c in cells],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, indent=1) + "\n"


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


# ------------------------------------------------------------------ start-up

def test_help_imports_neither_libcst_nor_rich_nor_the_engine():
    code = ("import sys\nfrom npu_migrate.cli import main\n"
            "try:\n    main(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('libcst', 'rich') or m in "
            "('npu_migrate.engine', 'npu_migrate.run', 'npu_migrate.check', 'npu_migrate.doctor'))\n"
            "print('HEAVY', heavy)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stdout, proc.stdout
    assert "check" in proc.stdout and "doctor" in proc.stdout  # listed without being imported


def test_a_warm_check_does_not_load_libcst(tmp_path):
    """A warm `check` answers from the cache: the whole-run passes read `ast`, never libcst, whose
    import alone costs a tenth of a warm check of the torch tree (labelflow.py once pulled it in
    through redundant.py)."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("import torch\n\nx = torch.zeros(2).cuda()\n")
    cache = tmp_path / "cache"
    code = ("import sys\nfrom npu_migrate.cli import main\n"
            f"args = ['check', {str(project)!r}, '--cache-dir', {str(cache)!r}, '--isolated', '-q']\n"
            "try:\n    main(args, standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            "print('LIBCST', sorted(m for m in sys.modules if m.split('.')[0] == 'libcst')[:3])\n")
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert first.returncode == 0, first.stderr
    warm = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert warm.returncode == 0, warm.stderr
    assert "LIBCST []" in warm.stdout, warm.stdout


@pytest.mark.parametrize("name", ["check", "doctor"])
def test_the_help_listed_for_a_lazy_command_is_its_own(name):
    import importlib

    module, attribute, shown = LAZY_COMMANDS[name]
    command = getattr(importlib.import_module(module), attribute)
    own = flat(command.help or "")
    assert own.startswith(flat(shown).removesuffix("...")), (shown, own)


# ------------------------------------------------------------------ the same flags everywhere

@pytest.mark.parametrize("command", [[], ["migrate"], ["check"], ["rule"], ["rules"], ["doctor"]])
@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version_on_every_command(command, flag):
    r = cli(*command, flag)
    assert r.exit_code == 0, r.output
    assert r.output.strip() == f"npu-migrate {__version__}"


def test_quiet_means_summary_only_on_both_commands(tmp_path, monkeypatch):
    put(tmp_path, "a.py", LEFT)
    check = cli("check", "a.py", "-q", "--no-cache", "--isolated", cwd=tmp_path, monkeypatch=monkeypatch)
    assert check.exit_code == 1
    assert "NPU202" not in check.stdout and "Found 1 new finding" in check.stdout
    migrate = cli("a.py", "-q", "--dry-run", "--no-cache", "--isolated", "--no-color")
    assert migrate.exit_code == 1
    assert "a.py:2:" not in migrate.stdout and "---" not in migrate.stdout and "summary" in migrate.stdout


def test_o_writes_the_output_to_a_file_on_both_commands(tmp_path, monkeypatch):
    put(tmp_path, "a.py", LEFT)
    check = cli("check", "a.py", "-o", "check.txt", "--no-cache", "--isolated", cwd=tmp_path, monkeypatch=monkeypatch)
    assert check.exit_code == 1 and check.stdout == ""
    assert "a.py:2:5: NPU202" in (tmp_path / "check.txt").read_text()
    migrate = cli("a.py", "--dry-run", "-o", "migrate.txt", "--no-cache", "--isolated")
    assert migrate.exit_code == 1 and migrate.stdout == ""
    text = (tmp_path / "migrate.txt").read_text()
    assert "a.py:2:5: NPU202" in text and "dry run: nothing was written" in text
    as_json = cli("a.py", "--dry-run", "--output-format", "json", "--output-file", "m.json", "--no-cache", "--isolated")
    assert as_json.exit_code == 1
    assert json.loads((tmp_path / "m.json").read_text())["findings_by_code"] == {"NPU202": 1}


def test_the_copy_is_output_dir_and_output_still_works(tmp_path):
    src = put(tmp_path, "src/a.py", FIXABLE).parent
    for flag, name in (("--output-dir", "one"), ("--output", "two")):
        r = cli(src, flag, tmp_path / name, "--no-cache", "--isolated")
        assert r.exit_code == 0, r.output
        assert "npu_compat" in (tmp_path / name / "a.py").read_text()
    assert (src / "a.py").read_text() == FIXABLE


def test_unknown_options_show_the_usage_of_the_command_typed(tmp_path):
    implicit = cli(tmp_path, "--bogus")
    assert implicit.exit_code == 2
    assert "Usage: npu-migrate [OPTIONS] PATHS..." in implicit.stderr
    assert "Try 'npu-migrate migrate --help' for help" in implicit.stderr
    explicit = cli("migrate", tmp_path, "--bogus")
    assert "Usage: npu-migrate migrate [OPTIONS] PATHS..." in explicit.stderr
    check = cli("check", "--bogus")
    assert check.exit_code == 2 and "Usage: npu-migrate check [OPTIONS] [PATHS]..." in check.stderr
    rules = cli("rules", "--bogus")
    assert rules.exit_code == 2 and "Usage: npu-migrate rules [OPTIONS]" in rules.stderr


def test_a_folder_named_like_a_command_is_a_path_when_written_as_one(tmp_path, monkeypatch):
    put(tmp_path, "rules/a.py", LEFT)
    put(tmp_path, "check/b.py", LEFT + "# another file (not a byte-identical copy)\n")
    monkeypatch.chdir(tmp_path)
    for args in (["./rules"], ["migrate", "rules"], ["rules/a.py"], ["./check"]):
        r = cli(*args, "--dry-run", "--no-cache", "--isolated")
        assert r.exit_code == 1, (args, r.output)
        assert "NPU202" in r.stdout
    r = cli("check", "rules", "check", "--no-cache", "--isolated")
    assert r.exit_code == 1 and "rules/a.py:2:5: NPU202" in r.stdout and "check/b.py:2:5" in r.stdout
    # the command's name is the command; given the folder's options it says how to name the folder
    r = cli("rules", "--dry-run")
    assert r.exit_code == 2
    assert "to migrate the folder rules/, write `npu-migrate ./rules`" in r.stderr
    assert cli("rules").exit_code == 0


# ------------------------------------------------------------------ rule CODE and the rule pages

def test_rule_explains_one_rule():
    r = cli("rule", "NPU101")
    assert r.exit_code == 0, r.output
    for part in ("NPU101 cuda-method-call", "severity error", "What it finds:", "Why:", "Example:",
                 "Before:", "After `npu-migrate`:", "Fix:", "docs/rules/NPU101.md"):
        assert part in r.output, part
    assert cli("rule", "npu202").exit_code == 0  # case does not matter
    unknown = cli("rule", "NPU10")
    assert unknown.exit_code == 2 and "unknown rule code 'NPU10'" in unknown.stderr
    assert cli("rule").exit_code == 2  # a code, or --all
    data = json.loads(cli("rule", "NPU701", "--output-format", "json").output)
    assert data["severity"] == catalogue.severity("NPU701") and data["example"]["file"] == "train.sh"
    every = cli("rule", "--all")
    assert every.exit_code == 0 and all(code in every.output for code in catalogue.rules())


def test_rule_says_a_report_only_severity_is_a_default():
    # NPU914's catalogue severity is error, while most of its findings on real projects are
    # warnings or info (bitsandbytes' default kernels run on NPU): the headline must not read as
    # if every finding were an error; a rewrite's severity is not a default
    report = cli("rule", "NPU914").output
    assert "severity error (default; each finding shows its own)" in report
    assert "Severity error by default" in report and "carries its own severity" in report
    rewrite = cli("rule", "NPU101").output
    assert "severity error, effort" in rewrite and "by default" not in rewrite


def test_rule_pages_are_current():
    from npu_migrate.families import FAMILIES
    from npu_migrate.ruledocs import PAGES_DIR, WRITE_ALL, rule_pages

    folder = REPO / PAGES_DIR
    expected = rule_pages(FAMILIES)
    actual = {p.name: p.read_text(encoding="utf-8") for p in folder.glob("*.md")}
    assert set(actual) == set(expected), f"docs/rules/ is out of date: regenerate it with `{WRITE_ALL}`"
    for name, page in expected.items():
        assert actual[name] == page, f"docs/rules/{name} is out of date: regenerate it with `{WRITE_ALL}`"


@pytest.mark.parametrize("code", sorted(__import__("npu_migrate.ruledocs", fromlist=["x"]).EXTRA_EXAMPLES))
def test_the_extra_examples_of_the_rule_pages_are_reported(tmp_path, code):
    """The examples of codes no family shows are real: npu-migrate reports their code."""
    from npu_migrate.ruledocs import EXTRA_EXAMPLES

    example = EXTRA_EXAMPLES[code]
    text = notebook(*example.cells) if example.name.endswith(".ipynb") else example.text
    put(tmp_path, example.name, text)
    r = cli(tmp_path, "--dry-run", "--output-format", "json", "--no-cache", "--isolated")
    assert r.exit_code in (0, 1), r.output
    codes = {f["code"] for f in json.loads(r.stdout)["findings"]}
    assert code in codes, codes


# ------------------------------------------------------------------ the report formats

@pytest.fixture
def mixed(tmp_path, monkeypatch):
    """A project with an error (NPU101 rewrite), a warning (NPU701) and an info finding."""
    put(tmp_path, "a.py", FIXABLE)
    put(tmp_path, "train.sh", SCRIPT)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_sarif_rules_carry_help_uri_and_a_level_from_the_severity(mixed, monkeypatch):
    monkeypatch.delenv("NPU_MIGRATE_DOCS_URL", raising=False)
    r = cli("check", ".", "--output-format", "sarif", "--no-cache", "--isolated")
    run = json.loads(r.stdout)["runs"][0]
    levels = {"error": "error", "warning": "warning", "info": "note"}
    for rule in run["tool"]["driver"]["rules"]:
        assert rule["helpUri"] == f"docs/rules/{rule['id']}.md"
        assert (REPO / rule["helpUri"]).is_file()
        assert rule["defaultConfiguration"]["level"] == levels[catalogue.severity(rule["id"])]
    results = {res["ruleId"]: res for res in run["results"]}
    assert results["NPU101"]["level"] == "error" and results["NPU701"]["level"] == "warning"
    region = results["NPU101"]["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 2, "startColumn": 5, "endLine": 2, "endColumn": 26}
    based = cli("check", ".", "--output-format", "sarif", "--no-cache", "--isolated",
                env={"NPU_MIGRATE_DOCS_URL": "https://example.org/npu-migrate/docs/rules"})
    uris = {r["id"]: r["helpUri"] for r in json.loads(based.stdout)["runs"][0]["tool"]["driver"]["rules"]}
    assert uris["NPU101"] == "https://example.org/npu-migrate/docs/rules/NPU101.md"


def test_github_annotations_carry_end_line_and_end_column(mixed):
    r = cli("check", ".", "--output-format", "github", "--no-cache", "--isolated")
    lines = r.stdout.splitlines()
    cuda = next(line for line in lines if "title=NPU101" in line)
    # `torch.zeros(1).cuda()` spans columns 5..25 of line 2
    assert cuda.startswith("::error file=a.py,line=2,col=5,endLine=2,endColumn=25,title=NPU101::")
    script = next(line for line in lines if "title=NPU701" in line)
    assert script.startswith("::warning file=train.sh,line=2,") and "endLine=2" in script


def test_gitlab_severities_follow_the_rule(mixed):
    r = cli("check", ".", "--output-format", "gitlab", "--no-cache", "--isolated")
    issues = {i["check_name"]: i for i in json.loads(r.stdout)}
    wanted = {"error": "critical", "warning": "major", "info": "info"}
    for code, issue in issues.items():
        assert issue["severity"] == wanted[catalogue.severity(code)]
    assert issues["NPU101"]["severity"] == "critical" and issues["NPU701"]["severity"] == "major"


def test_check_proposes_and_does_not_claim_a_rewrite(mixed):
    r = cli("check", ".", "--no-cache", "--isolated")
    line = next(line for line in r.stdout.splitlines() if "NPU101" in line)
    assert "can be rewritten to `.to(npu_compat.device(...))`" in line
    assert ": rewritten to" not in r.stdout
    github = cli("check", ".", "--output-format", "github", "--no-cache", "--isolated")
    assert "can be rewritten to" in github.stdout and ": rewritten to" not in github.stdout
    sarif = cli("check", ".", "--output-format", "sarif", "--no-cache", "--isolated")
    assert all(": rewritten to" not in res["message"]["text"] for res in json.loads(sarif.stdout)["runs"][0]["results"])


# ------------------------------------------------------------------ locations

def test_migrate_prints_paths_relative_to_the_working_directory(tmp_path, monkeypatch):
    put(tmp_path, "proj/pkg/a.py", LEFT)
    monkeypatch.chdir(tmp_path)
    r = cli("proj", "--dry-run", "--no-cache", "--isolated", "--no-color")
    assert "proj/pkg/a.py:2:5: NPU202" in r.stdout
    check = cli("check", "proj", "--no-cache", "--isolated")
    assert "proj/pkg/a.py:2:5: NPU202" in check.stdout


def test_notebook_findings_point_at_the_json_line_with_the_cell_in_the_message(tmp_path, monkeypatch):
    text = notebook("import torch\n", "!nvidia-smi\nx = torch.cuda.memory_usage()\n")
    put(tmp_path, "nb.ipynb", text)
    lines = text.splitlines()
    json_line = next(i for i, line in enumerate(lines, 1) if "memory_usage" in line)
    monkeypatch.chdir(tmp_path)
    for args in (("check", "nb.ipynb"), ("nb.ipynb", "--dry-run", "--no-color")):
        r = cli(*args, "--no-cache", "--isolated")
        assert f"nb.ipynb:{json_line}: NPU202" in r.stdout, r.stdout
        assert re.search(rf"nb\.ipynb:{json_line}: NPU202 .*\(cell 2, line 2, column 5\)", r.stdout)


# ------------------------------------------------------------------ what a run says

def test_a_dry_run_ends_saying_nothing_was_written_after_the_findings_and_their_guidance(tmp_path):
    put(tmp_path, "a.py", LEFT + FIXABLE.splitlines()[1] + "\n")
    r = cli(tmp_path, "--dry-run", "--no-cache", "--isolated", "--no-color")
    out = r.stdout
    assert out.rstrip().splitlines()[-1].startswith("dry run: nothing was written. To apply the change")
    diff_end = out.index("+x = torch.zeros(1).to(npu_compat.device())")
    heading = out.index("1 finding to review by hand")
    guidance = out.index("What to do")
    assert diff_end < heading < guidance < out.index("summary")
    assert " ".join(catalogue.rule("NPU202").guidance.split())[:60] in flat(out)
    as_json = cli(tmp_path, "--dry-run", "--output-format", "json", "--no-cache", "--isolated")
    json.loads(as_json.stdout)  # stdout stays JSON; the line goes to stderr
    assert "dry run: nothing was written" in as_json.stderr


def test_an_empty_folder_is_a_warning_on_both_commands(tmp_path):
    (tmp_path / "empty").mkdir()
    put(tmp_path, "empty/README.md", "nothing to read\n")
    for args in ((tmp_path / "empty", "--dry-run"), ("check", tmp_path / "empty")):
        r = cli(*args, "--no-cache", "--isolated")
        assert r.exit_code == 0, r.output
        assert "empty: no file to read in this folder" in flat(r.stderr)


def test_a_write_outside_git_warns_that_nothing_can_undo_it(tmp_path):
    put(tmp_path, "a.py", FIXABLE)
    r = cli(tmp_path, "--no-cache", "--isolated")
    assert r.exit_code == 0, r.output
    assert "is not in a git work tree" in flat(r.stderr) and "--dry-run" in r.stderr
    put(tmp_path, "b.py", FIXABLE)
    assert "git work tree" not in cli(tmp_path, "--dry-run", "--no-cache", "--isolated").stderr
    repo = tmp_path / "repo"
    put(repo, "c.py", FIXABLE)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base", "--no-verify")
    inside = cli(repo, "--no-cache", "--isolated")
    assert inside.exit_code == 0, inside.output
    assert "git work tree" not in inside.stderr


def test_fail_on_stale_never_says_all_checks_passed(tmp_path, monkeypatch):
    put(tmp_path, "a.py", LEFT)
    monkeypatch.chdir(tmp_path)
    assert cli("check", ".", "--write-baseline", "base.json", "--no-cache", "--isolated").exit_code == 0
    put(tmp_path, "a.py", "import torch\n")
    passing = cli("check", ".", "--baseline", "base.json", "--no-cache", "--isolated")
    assert passing.exit_code == 0 and "All checks passed" in passing.stdout
    failing = cli("check", ".", "--baseline", "base.json", "--fail-on-stale", "--no-cache", "--isolated")
    assert failing.exit_code == 1
    assert "All checks passed" not in failing.output
    assert "fails on stale baseline entries (--fail-on-stale)" in failing.stdout


def test_a_named_file_is_treated_alike_by_migrate_and_check(tmp_path, monkeypatch):
    put(tmp_path, "notes.txt", "call .cuda() on the model\n")
    put(tmp_path, "train.sh", SCRIPT)
    monkeypatch.chdir(tmp_path)
    for command in ([], ["check"]):
        skipped = cli(*command, "notes.txt", "--no-cache", "--isolated")
        assert skipped.exit_code == 2, (command, skipped.output)
        assert "notes.txt: not a Python file, notebook, shell script" in flat(skipped.stderr)
        assert "nothing to" in skipped.stderr
        script = cli(*command, "train.sh", "notes.txt", "--dry-run" if not command else "--no-cache",
                     "--no-cache", "--isolated")
        assert script.exit_code == 1, (command, script.output)
        assert "train.sh:2:8: NPU701" in script.stdout
        assert "notes.txt: not a Python file" in flat(script.stderr)


# ------------------------------------------------------------------ configuration

def test_tool_npu_migrate_with_an_underscore_is_refused_with_a_hint(tmp_path, monkeypatch):
    put(tmp_path, "pyproject.toml", '[tool.npu_migrate]\nignore = ["NPU202"]\n')
    put(tmp_path, "a.py", LEFT)
    monkeypatch.chdir(tmp_path)
    for command in (["check", "."], [".", "--dry-run"]):
        r = cli(*command, "--no-cache")
        assert r.exit_code == 2
        assert "[tool.npu_migrate] is not read: the table is [tool.npu-migrate]" in flat(r.stderr)
        assert "pyproject.toml" in r.stderr


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("ignore", "3", "expected a list of strings, got 3"),
    ("shim-name", "[1]", "expected a string, got [1]"),
    ("per-file-ignores", '"x"', "expected a table of glob = [codes]"),
])
def test_a_wrong_type_in_the_configuration_names_the_file_and_the_key(tmp_path, monkeypatch, key, value, expected):
    put(tmp_path, "pyproject.toml", f"[tool.npu-migrate]\n{key} = {value}\n")
    put(tmp_path, "a.py", LEFT)
    monkeypatch.chdir(tmp_path)
    for command in (["check", "."], [".", "--dry-run"]):
        r = cli(*command, "--no-cache")
        assert r.exit_code == 2
        message = flat(r.stderr)
        assert f"{tmp_path / 'pyproject.toml'}: [tool.npu-migrate] {key}: {expected}" in message


# ------------------------------------------------------------------ pre-commit

NAMES = [
    "a.py", "pkg/b.py", "A.PY", "c.pyi", "n.ipynb", "run.sh", "x/run.bash", "r.ZSH", "c.yaml", "c.yml",
    "pyproject.toml", "Dockerfile", "docker/Dockerfile.gpu", "x.dockerfile", "Containerfile",
    ".env", "prod.env", ".env.local", "k.cu", "k/k.cuh", "README.md", "setup.cfg", "data.json",
    "Makefile", "notes.txt", "venv/lib/a.py", ".venv/x.sh", "build/a.py", "dist/c.yaml",
    "node_modules/p/a.sh", "pkg.egg-info/a.py", "src/build_utils.py", "envs/a.py", "a/env/b.py",
    "__pycache__/a.py", ".git/hooks/pre-commit.sh", "dockerfiles/readme.md",
]


def _read_by_check(rel: str) -> bool:
    """What `npu-migrate check .` reads of a file at `rel` (discover.discover's test)."""
    from npu_migrate.discover import SKIP_DIRS, is_target

    folders = rel.split("/")[:-1]
    return is_target(rel) and not any(p in SKIP_DIRS or p.endswith(".egg-info") for p in folders)


@pytest.mark.parametrize("hook_id", ["npu-migrate-check", "npu-migrate-fix"])
def test_the_hooks_pass_every_file_check_reads(hook_id):
    hook = {h["id"]: h for h in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())}[hook_id]
    assert "types" not in hook and "types_or" not in hook  # the file names decide, as in discovery
    files, exclude = re.compile(hook["files"]), re.compile(hook["exclude"])
    for rel in NAMES:
        passed = bool(files.search(rel)) and not exclude.search(rel)
        assert passed == _read_by_check(rel), rel


def test_the_hook_file_list_against_a_real_discovery(tmp_path):
    """The same comparison through discover() itself, over a folder holding every name."""
    from npu_migrate.discover import discover

    hook = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())[0]
    files, exclude = re.compile(hook["files"]), re.compile(hook["exclude"])
    for rel in NAMES:
        if not rel.startswith(".git/"):
            put(tmp_path, rel, "x\n")
    found = {rel for _path, rel in discover(tmp_path)}
    passed = {rel for rel in NAMES if files.search(rel) and not exclude.search(rel) and not rel.startswith(".git/")}
    assert found == passed


def test_version_flag_in_a_real_process():
    proc = subprocess.run([sys.executable, "-m", "npu_migrate", "-V"], capture_output=True, text=True,
                          cwd=REPO, timeout=60, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0 and proc.stdout.strip() == f"npu-migrate {__version__}"
