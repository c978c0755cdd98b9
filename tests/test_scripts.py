"""The benchmark and robustness scripts of issue #7, run as CI and a user run them (quick modes).

They are scripts, not library code, but CI depends on them: a checker that stops counting or
stops failing on a violation would let real regressions through. Timings are never asserted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"

pytestmark = pytest.mark.integration


def _run(script: str, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPTS / script), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, check=False)


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_script_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ robustness.py

COUNTS = re.compile(
    r"files (\d+) \(([\d,]+) lines\): parsed (\d+), changed (\d+), findings ([\d,]+), parse failures (\d+)"
)
SKIPPED = re.compile(r"skipped: (.+)")


def _skipped_total(out: str) -> int:
    line = SKIPPED.search(out).group(1)
    return 0 if line == "none" else sum(int(n.replace(",", "")) for n in re.findall(r" ([\d,]+)(?:;|$)", line))


@pytest.fixture(scope="module")
def stdlib_quick() -> subprocess.CompletedProcess:
    return _run("robustness.py", "--corpus", "stdlib", "--limit", "40")


def test_robustness_quick_stdlib_run_reports_every_file(stdlib_quick):
    out = stdlib_quick.stdout
    assert stdlib_quick.returncode == 0, out + stdlib_quick.stderr
    counts = COUNTS.search(out)
    assert counts, out
    files, _lines, parsed, changed, _findings, failures = (int(g.replace(",", "")) for g in counts.groups())
    assert files == 40
    # Every file is accounted for exactly once: parsed, skipped (with a reason) or failed to parse.
    assert parsed + _skipped_total(out) + failures == files
    assert changed <= parsed
    # Half of the sample has trigger words (the standard library has at least a few such files).
    assert parsed + failures >= 1
    assert re.search(r"rewritten files: (\d+) of \1 compile; second pass: \1 files migrated again", out)
    assert "violations: 0" in out
    assert re.search(r"^total: 40 files, 0 violations, [\d.]+ s with -j \d+$", out, re.MULTILINE)


def test_robustness_counts_a_small_folder_exactly(tmp_path):
    (tmp_path / "train.py").write_text("import torch\n\nx = torch.randn(2).cuda()\n")
    (tmp_path / "broken.py").write_text('def f(:\n    return "cuda"\n')
    (tmp_path / "plain.py").write_text('print("hello")\n')
    (tmp_path / "site-packages").mkdir()  # installed packages are not part of a corpus
    (tmp_path / "site-packages" / "dep.py").write_text("x = 'cuda'\n")
    result = _run("robustness.py", "--corpus", str(tmp_path), "--force-parse", "-j", "1")
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "files 3 (6 lines): parsed 1, changed 1, findings" in out
    assert "parse failures 1" in out
    assert "skipped: no CUDA trigger words 1" in out
    assert "rewritten files: 1 of 1 compile; second pass: 1 files migrated again" in out
    assert "probe (--force-parse): 1 files without trigger words, parsed 1, parse failures 0" in out


def test_robustness_rejects_an_unknown_corpus(tmp_path):
    result = _run("robustness.py", "--corpus", str(tmp_path / "missing"))
    assert result.returncode == 2
    assert "not a corpus name" in result.stderr


def test_robustness_checks_flag_broken_results(tmp_path):
    """The checks themselves, fed results no correct engine returns."""
    from npu_migrate import catalogue
    from npu_migrate.model import FileResult, Options
    from npu_migrate.findings import Finding

    rb = _load("robustness")
    tally = rb.Tally("fake", tmp_path)
    plain = b"x = 1\n"
    cuda = b"import torch\nx = torch.zeros(1).cuda()\n"
    results = [
        FileResult("plain.py", original=plain, new=b"x = 2\n"),  # no trigger words, yet rewritten
        FileResult("quiet.py", original=cuda, new=cuda + b"y = 1\n"),  # changed, no rewrite finding
        FileResult("skipped.py", original=cuda, new=cuda + b"\n", skipped="already NPU-aware"),
        FileResult("bad.py", original=cuda, new=b"x = (\n",
                   findings=[Finding("bad.py", 2, 5, "NPU101", "m", True, "x")]),
    ]
    paths = {r.relpath: str(tmp_path / r.relpath) for r in results}
    rewritten, _parsed = rb.check_results(results, paths, tally)
    text = "\n".join(tally.violations)
    assert "plain.py: no trigger words, yet the engine returned new bytes" in text
    assert "quiet.py: changed, but no rewrite finding says why" in text
    assert "skipped.py: skipped (already NPU-aware), yet the engine returned new bytes" in text
    assert "bad.py" not in text  # it has a rewrite finding; the second pass judges its bytes

    tally.violations.clear()
    options = Options(enabled=catalogue.enabled_codes())
    rb.second_pass([r for r in rewritten if r[1] == "bad.py"], options, 1, tally)
    assert len(tally.violations) == 1
    assert "bad.py: rewritten file does not compile" in tally.violations[0]


# ------------------------------------------------------------------ benchmark.py

def test_benchmark_precommit_run_prints_and_saves_every_figure(tmp_path):
    saved = tmp_path / "bench.json"
    result = _run("benchmark.py", "--only", "precommit", "--json", str(saved), "--markdown", "-q",
                  cwd=tmp_path)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert re.search(r"^machine: .+, \d+ cores \(\d+ usable\), [\d.]+ GiB RAM", out, re.MULTILINE)
    assert re.search(r"^software: Python [\d.]+, torch \S+, libcst \S+, npu-migrate \S+$", out, re.MULTILINE)
    for column in ("measurement", "wall s", "lines/s", "peak RSS (tree)", "x floor", "target", "met?"):
        assert column in out
    assert re.search(r"^precommit: 5 torch files \([\d,]+ lines\): ", out, re.MULTILINE)

    payload = json.loads(saved.read_text())
    assert payload["machine"]["cores"] >= 1
    rows = payload["results"]
    assert [(r["kind"], r["phase"]) for r in rows] == [("floor", ""), ("check", "cold"), ("check", "warm")]
    for row in rows:
        assert row["files"] == 5 and row["lines"] > 0
        assert row["status"] == "ok" and row["wall_s"] > 0
        assert row["rss_tree_peak"] >= row["rss_max_single"] > 0
    floor, cold, warm = rows
    assert floor["floor_ratio"] is None and floor["target_s"] is None
    for row in (cold, warm):
        assert row["exit_code"] in (0, 1)  # 1: findings in the torch files, not a failure
        assert row["target_s"] == 1.0 and isinstance(row["met"], bool)
        assert row["floor_ratio"] == pytest.approx(row["wall_s"] / floor["wall_s"])
    if not payload["cache_flags"]["check"]:
        assert "no cache" in warm["name"]

    table = [line for line in out.splitlines() if line.startswith("| precommit")]
    assert len(table) == 3


def test_benchmark_startup_times_help_and_one_file_checks_with_bytecode(tmp_path):
    """The start-up corpus (issue #18): --help and a one-file check with and without CUDA code,
    the median of 5 runs each, run without PYTHONDONTWRITEBYTECODE (as an installed tool runs)."""
    saved = tmp_path / "bench.json"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")  # the benchmark must not pass this on
    result = subprocess.run([sys.executable, str(SCRIPTS / "benchmark.py"), "--only", "startup", "--json",
                             str(saved), "-q"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = json.loads(saved.read_text())["results"]
    assert [(r["kind"], r["phase"]) for r in rows] == [("help", ""), ("check", "no cuda"), ("check", "cuda")]
    for row in rows:
        assert row["status"] == "ok" and row["wall_s"] > 0 and row["target_s"] == 0.3
        runs = re.search(r"runs: (.+) s", " ".join(row["notes"])).group(1).split(", ")
        assert len(runs) == 5  # the warm-up run is not counted
        assert row["wall_s"] == pytest.approx(sorted(float(x) for x in runs)[2], abs=1e-3)
    assert rows[1]["exit_code"] == 0  # no finding in a file without CUDA
    assert rows[2]["exit_code"] == 1  # the training script has findings
    bench = _load("benchmark")
    assert "PYTHONDONTWRITEBYTECODE" not in bench.USER_ENV


def test_benchmark_synthetic_file_has_the_requested_size_and_cuda_lines():
    bench = _load("benchmark")
    data = bench.synthetic_source(100_000)
    assert bench.count_lines(data) == 100_000
    from npu_migrate.engine import PREFILTER

    assert PREFILTER.search(data)  # parsed, not skipped by the prefilter
    compile(data, "generated_tables.py", "exec")


def test_benchmark_rejects_an_unknown_corpus():
    result = _run("benchmark.py", "--only", "everything")
    assert result.returncode == 2
    assert "unknown corpus everything" in result.stderr


def test_benchmark_against_runs_a_copy_of_this_checkout(tmp_path):
    """`--against` measures this checkout as it was when the run started: a copy the bootstrap
    imports npu_migrate and its rules from (an edit during a run of many minutes once changed
    the cache's fingerprint between the cold and the warm run, and every warm entry missed)."""
    bench = _load("benchmark")
    co = bench._compare_output()
    copy = bench.snapshot_checkout(co.REPO, tmp_path / "this")
    co.probe(copy)  # raises unless npu_migrate and rules/ come from the copy
    assert (copy / "npu_migrate" / "cache.py").read_bytes() == (REPO / "npu_migrate" / "cache.py").read_bytes()
    assert sorted(p.name for p in (copy / "rules").iterdir()) == sorted(
        p.name for p in (REPO / "rules").iterdir() if p.name != "__pycache__")


# ------------------------------------------------------------------ cuda_parity.py

def test_cuda_parity_compare_tells_identical_spread_and_different_apart():
    parity = _load("cuda_parity")
    base = "header\nstep 0 loss 1.25\nstep 1 loss 0.5\n"
    assert parity.compare(base, base, base) == ("identical", "")
    verdict, detail = parity.compare(base, base, base.replace("0.5", "0.5000001"))
    assert verdict == "DIFFERENT" and "line 3" in detail  # deterministic originals: bit for bit
    other = base.replace("0.5", "0.5002")  # the original itself moves by 4e-4 between runs
    verdict, detail = parity.compare(base, other, base.replace("0.5", "0.5001"))
    assert verdict == "within spread" and "4.00e-04" in detail
    assert parity.compare(base, other, base.replace("0.5", "0.51"))[0] == "DIFFERENT"  # outside spread + 1e-3
    assert parity.compare(base, other, base.replace("header", "other header"))[0] == "DIFFERENT"
    assert parity.compare(base, other, "header\nstep 0 loss 1.25\n")[0] == "DIFFERENT"  # a step missing


def test_cuda_parity_runs_a_prepared_project_and_reports_a_changed_output(tmp_path):
    out = tmp_path / "parity"
    assert _run("cuda_parity.py", "run", str(out)).returncode == 2  # not prepared
    prep = _run("cuda_parity.py", "prepare", str(out), "--project", "ddp_mini")
    assert prep.returncode == 0, prep.stderr
    migrated = out / "ddp_mini" / "migrated"
    assert (migrated / "npu_compat" / "__init__.py").is_file()
    assert "npu_compat" in (migrated / "scripts" / "launch.py").read_text()  # the launcher was migrated
    args = ("run", str(out), "--entry", "ddp_mini:launch_dry", "--json", str(tmp_path / "r.json"))
    proc = _run("cuda_parity.py", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert [(e["entry"], e["verdict"]) for e in report["entries"]] == [("launch_dry", "identical")]
    assert report["shim"]["ok"] and report["shim"]["device_type"] == "cuda" and len(report["shim"]["checked"]) > 20
    assert report["entries"][0]["runs"][2]["processes"] == 1  # the probe ran in the migrated process
    # a migration that changed what the program prints is caught
    launch = migrated / "scripts" / "launch.py"
    launch.write_text(launch.read_text().replace("\nimport argparse\n", "\nimport argparse\nprint('an extra line')\n", 1))
    proc = _run("cuda_parity.py", *args)
    assert proc.returncode == 1 and "DIFFERENT" in proc.stdout, proc.stdout
