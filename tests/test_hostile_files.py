"""Safe on hostile repositories and corrupt state: no crash, no hang.

Wrong-typed and deeply nested pyproject.toml values, FIFOs and devices where files are expected,
files too large to read, a file name at the 255-byte limit, inputs that fail after `check --fix`
would have written, Ctrl-C outside a command's own handling, and outputs in folders that do not
exist. Everything that could hang runs the CLI in a subprocess with a timeout, so that a
regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import click
import pytest

from npu_migrate import cli as cli_mod
from npu_migrate import config, pins, report, run, source
from npu_migrate.baseline import BaselineError
from npu_migrate.baseline import load as load_baseline
from npu_migrate.render import RunSummary
from npu_migrate.runplan import make_options
from tests.test_cli import LEFT, SYNC, clean_env, put, snapshot

SYNC_DONE = "import npu_compat\nnpu_compat.synchronize()\n"
TIMEOUT = 60  # seconds; every run here takes a few
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


def npu(*args, cwd: Path, timeout: int = TIMEOUT) -> subprocess.CompletedProcess:
    """`npu-migrate ARGS` in a subprocess: a hang is a TimeoutExpired, never a stuck suite."""
    return subprocess.run([sys.executable, "-m", "npu_migrate", *map(str, args)], cwd=cwd, check=False,
                          capture_output=True, text=True, env=clean_env(), timeout=timeout)


def python(code: str, cwd: Path, timeout: int = TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, check=False, capture_output=True,
                          text=True, env=clean_env(), timeout=timeout)


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout, proc.stdout


# ------------------------------------------------------------ 1. wrong-typed pyproject.toml

DEEP = "x = " + "[" * 3000 + "]" * 3000 + "\n"

HOSTILE_PYPROJECTS = {
    "tool-is-a-number": 'tool = 1\n[project]\nname = "x"\ndependencies = ["torch==2.1.0"]\n',
    "dependencies-is-a-number": '[project]\nname = "x"\ndependencies = 5\n',
    "dependencies-hold-non-strings": '[project]\nname = "x"\ndependencies = [1, {}, "torch==2.1.0"]\n',
    "optional-dependencies-is-a-string": '[project]\nname = "x"\noptional-dependencies = "x"\n',
    "optional-group-is-a-table": '[project]\nname = "x"\n[project.optional-dependencies]\ngpu = {a = 1}\n',
    "project-is-an-array": 'project = [1, 2]\n',
    "dependency-groups-is-a-number": 'dependency-groups = 3\n[project]\nname = "x"\n',
    "poetry-wrong-types": ('[tool.poetry]\nname = "x"\ndependencies = {torch = {version = 5}}\n'
                           'dev-dependencies = "y"\ngroup = {a = 1, b = {dependencies = 2}}\n'),
    "poetry-is-a-string": 'tool = {poetry = "z"}\n',
    "deep-tables": "[" + ".".join(["a"] * 3000) + "]\nb = 1\n",
    "deeply-nested-array": DEEP,
    "deeply-nested-inline-table": "x = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n",
    "setuptools-wrong-types": ('[project]\nname = "x"\n[tool.setuptools]\npackages = 5\n'
                               'package-dir = [1]\n[tool.setuptools.packages.find]\nwhere = 3\n'),
    "build-system-is-a-number": 'build-system = 7\n[project]\nname = "x"\n',
}


@pytest.mark.parametrize("name", sorted(HOSTILE_PYPROJECTS))
def test_pins_ignore_values_of_the_wrong_type(tmp_path, name):
    put(tmp_path, "pyproject.toml", HOSTILE_PYPROJECTS[name])
    advice = pins.suggest_requirements(tmp_path)  # never raises
    assert advice.requirement_lines()
    assert pins.requirements_text(advice).startswith(pins.HEADER)


def test_pins_name_what_they_ignored(tmp_path):
    put(tmp_path, "pyproject.toml", HOSTILE_PYPROJECTS["dependencies-hold-non-strings"]
        + 'optional-dependencies = "x"\n')
    advice = pins.suggest_requirements(tmp_path)
    assert advice.pin is not None and advice.pin.requirement == "torch==2.1.0"  # the good string is kept
    assert advice.pin.source == "pyproject.toml:3"
    assert any("[project] dependencies: 2 items that are not strings; ignored" in n for n in advice.notes)
    assert any("optional-dependencies should be a table but is a string; ignored" in n for n in advice.notes)
    put(tmp_path, "pyproject.toml", 'tool = 1\n[project]\ndependencies = 5\n')
    notes = pins.suggest_requirements(tmp_path).notes
    assert "pyproject.toml: [tool] should be a table but is a number; ignored" in notes
    assert "pyproject.toml: [project] dependencies should be an array of strings but is a number; ignored" in notes
    put(tmp_path, "pyproject.toml", DEEP)
    assert any("nested too deeply" in n for n in pins.suggest_requirements(tmp_path).notes)


def test_pins_still_read_a_good_poetry_table_next_to_bad_ones(tmp_path):
    put(tmp_path, "pyproject.toml", '[tool.poetry]\ngroup = 1\n[tool.poetry.dependencies]\ntorch = "^2.1"\n')
    advice = pins.suggest_requirements(tmp_path)
    assert advice.pin is not None and advice.pin.requirement == "torch>=2.1,<3"
    assert any("[tool.poetry] group should be a table" in n for n in advice.notes)


def test_pins_many_strings_are_read_in_linear_time(tmp_path):
    """The line of a requirement is looked up for torch's only (per string, it was quadratic)."""
    deps = ",\n".join(f'"pkg{i}>=1"' for i in range(60000))
    put(tmp_path, "pyproject.toml", f'[project]\nname = "x"\ndependencies = [\n{deps},\n"torch==2.1.0"]\n')
    put(tmp_path, "setup.py", "x = [" + ", ".join(f"'s{i}'" for i in range(60000)) + "]\n'torch==2.1.0'\n")
    proc = python("from npu_migrate.pins import find_torch_pins; "
                  "print([p.source for p in find_torch_pins('.')])", tmp_path, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "pyproject.toml:60004" in proc.stdout and "setup.py:2" in proc.stdout


@pytest.mark.parametrize("name", [
    n for n in sorted(HOSTILE_PYPROJECTS)
])
def test_whole_cli_on_a_hostile_pyproject(tmp_path, name):
    """Layout (packaging), pins, report and requirements together: the run finishes with its
    summary (JSON), its report and requirements-npu.txt; the code is migrated."""
    root = tmp_path / "repo"
    put(root, "pyproject.toml", HOSTILE_PYPROJECTS[name])
    put(root, "train.py", SYNC)
    proc = npu(root, "--emit-requirements", "--report", tmp_path / "report.md",
               "--report-csv", tmp_path / "csv", "--output-format", "json", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["changed_files"] == ["train.py"]
    assert (root / "train.py").read_text() == SYNC_DONE
    assert (root / "requirements-npu.txt").read_text().startswith(pins.HEADER)
    assert "## Requirements" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "csv" / "change_list.csv").is_file()


def test_check_on_a_hostile_pyproject(tmp_path):
    root = tmp_path / "repo"
    put(root, "pyproject.toml", HOSTILE_PYPROJECTS["poetry-wrong-types"])
    put(root, "a.py", LEFT)
    proc = npu("check", root, "--output-format", "json", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 1, proc.stderr
    assert [f["code"] for f in json.loads(proc.stdout)["findings"]] == ["NPU202"]


@pytest.mark.parametrize("text, expected", [
    ("tool = 1\n", "`tool` must be a table, got 1"),
    ("tool = {npu-migrate = 5}\n", "[tool.npu-migrate] must be a table, got 5"),
    ("[tool]\nnpu-migrate = [1, 2]\n", "[tool.npu-migrate] must be a table, got [1, 2]"),
    ("[tool.npu-migrate]\nselect = 5\n", "select: expected a list of strings, got 5"),
    ("[tool.npu-migrate]\nbaseline = [1]\n", "baseline: expected a string, got [1]"),
    ("[tool.npu-migrate]\n" + DEEP.replace("x =", "exclude ="), "nested too deeply"),
])
def test_our_own_table_of_the_wrong_type_is_a_clear_error(tmp_path, text, expected):
    put(tmp_path, "pyproject.toml", text)
    with pytest.raises(config.ConfigError) as caught:
        config.load(tmp_path / "pyproject.toml")
    assert expected in str(caught.value)
    assert str(tmp_path / "pyproject.toml") in str(caught.value)
    put(tmp_path, "a.py", LEFT)
    for command in (("check",), ()):
        proc = npu(*command, "a.py", "--config", "pyproject.toml", *(() if command else ("--dry-run",)),
                   cwd=tmp_path)
        no_traceback(proc)
        assert proc.returncode == 2, proc.stderr
        assert expected in proc.stderr


def test_a_non_utf8_pyproject_with_our_table_is_an_error(tmp_path):
    put(tmp_path, "pyproject.toml", '[tool.npu-migrate]\nignore = ["NPU202"]\n# caf\xe9\n'.encode("latin-1"))
    put(tmp_path, "a.py", LEFT)
    proc = npu("check", ".", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr  # not silently run without the configuration
    assert "pyproject.toml: not UTF-8 text (byte 44); TOML files must be UTF-8" in proc.stderr
    assert str(tmp_path / "pyproject.toml") in proc.stderr


def test_a_non_utf8_pyproject_without_our_table_is_a_warning(tmp_path):
    put(tmp_path, "pyproject.toml", '[project]\nname = "caf\xe9"\n'.encode("latin-1"))
    put(tmp_path, "a.py", LEFT)
    proc = npu("check", ".", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # the finding is reported
    assert (f"warning: {tmp_path / 'pyproject.toml'}: not UTF-8 text (byte 21); TOML files must be "
            "UTF-8, so it was not read (it names no [tool.npu-migrate] table)") in proc.stderr
    proc = npu(".", "--dry-run", "-q", cwd=tmp_path)
    assert proc.returncode == 1 and "not UTF-8 text (byte 21)" in proc.stderr, proc.stderr


# ------------------------------------------------------------ 2. FIFOs, devices, huge files

@needs_fifo
def test_check_skips_a_named_fifo(tmp_path):
    fifo(tmp_path / "x.py")
    put(tmp_path, "a.py", LEFT)
    proc = npu("check", "x.py", "a.py", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 1, proc.stderr  # a.py is still checked
    assert f"warning: {tmp_path / 'x.py'}: not a regular file; skipped" in proc.stderr
    proc = npu("check", "x.py", cwd=tmp_path)  # nothing left to check: exit 2, as `npu-migrate x.py`
    assert proc.returncode == 2, proc.stderr
    assert "nothing to check" in proc.stderr


@needs_fifo
def test_migrate_skips_a_named_fifo_and_one_in_a_folder(tmp_path):
    fifo(tmp_path / "x.py")
    fifo(tmp_path / "pkg_fifo.py")
    put(tmp_path, "a.py", SYNC)
    proc = npu("x.py", "a.py", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert "x.py: not a regular file; skipped" in proc.stderr
    assert (tmp_path / "a.py").read_text() == SYNC_DONE
    put(tmp_path, "b.py", SYNC)
    proc = npu(".", cwd=tmp_path)  # discovery lists regular files only
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert (tmp_path / "b.py").read_text() == SYNC_DONE


@needs_fifo
def test_engine_reports_a_fifo_as_npu002_without_opening_it(tmp_path):
    fifo(tmp_path / "x.py")
    code = ("from npu_migrate.model import Options\nfrom npu_migrate.run import migrate_path\n"
            "r = migrate_path(('x.py', 'x.py', Options(enabled=frozenset({'NPU002'}))))\n"
            "print([(f.code, f.message) for f in r.findings])\n")
    proc = python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "('NPU002'," in proc.stdout and "not a regular file" in proc.stdout


def test_engine_reports_a_file_over_the_limit_without_reading_it(tmp_path):
    huge = tmp_path / "huge.py"
    with open(huge, "wb") as handle:
        handle.truncate(source.MAX_INPUT_BYTES + 1)  # sparse: no disk used
    result = run.migrate_path((str(huge), "huge.py", make_options(tmp_path, [], frozenset({"NPU002"}), "npu_compat")))
    assert [f.code for f in result.findings] == ["NPU002"]
    assert "too large (67108865 bytes; the limit is 64 MiB)" in result.findings[0].message
    assert result.original is None and not result.changed


def test_read_regular_refuses_devices_and_growth(tmp_path):
    with pytest.raises(source.NotRegularFile):
        source.read_regular("/dev/zero")  # stat says so: never opened, never read
    with pytest.raises(source.NotRegularFile):
        source.read_regular(tmp_path)
    put(tmp_path, "f", b"12345")
    assert source.read_regular(tmp_path / "f", limit=5) == b"12345"
    with pytest.raises(source.FileTooLarge):
        source.read_regular(tmp_path / "f", limit=4)
    with pytest.raises(FileNotFoundError):
        source.read_regular(tmp_path / "missing")
    with pytest.raises(OSError):
        source.read_regular(str(tmp_path / "nul\0byte"))


@needs_fifo
def test_emit_requirements_onto_a_fifo_is_refused_before_anything_is_written(tmp_path):
    fifo(tmp_path / "requirements-npu.txt")
    put(tmp_path, "a.py", SYNC)
    proc = npu(".", "--emit-requirements", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    assert f"error: {tmp_path / 'requirements-npu.txt'}: not a regular file; not overwritten" in proc.stderr
    assert (tmp_path / "a.py").read_text() == SYNC  # refused up front: nothing migrated
    proc = npu(".", "--emit-requirements", "--dry-run", cwd=tmp_path)  # a dry run writes no such file
    assert proc.returncode == 0 and "requirements-npu.txt not written (dry run)" in proc.stdout, proc.stderr
    # the library call refuses as well (another caller, or a FIFO that appears during the run)
    with pytest.raises(pins.RequirementsConflict, match="not a regular file"):
        pins.write_requirements(tmp_path, pins.suggest_requirements(tmp_path))


@needs_fifo
def test_fifo_requirements_and_pyproject_files_are_not_read(tmp_path):
    for name in ("requirements.txt", "pyproject.toml", "setup.py", "setup.cfg", "environment.yml"):
        fifo(tmp_path / name)
    put(tmp_path, "requirements-dev.txt", "torch==2.1.0\n")
    put(tmp_path, "a.py", SYNC)
    proc = npu(".", "--emit-requirements", "--report", "r.md", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert "torch_npu==2.1.0" in (tmp_path / "requirements-npu.txt").read_text()
    proc = npu("check", ".", "--config", "pyproject.toml", cwd=tmp_path)
    assert proc.returncode == 2 and "pyproject.toml: not a regular file" in proc.stderr, proc.stderr


@needs_fifo
@pytest.mark.parametrize("target", ["fifo", "/dev/zero", "/dev/null", "folder"])
def test_baseline_that_is_not_a_regular_file_is_a_tool_error(tmp_path, target):
    if target == "fifo":
        target = str(fifo(tmp_path / "base.json"))
    elif target == "folder":
        target = "."
    put(tmp_path, "pyproject.toml", f'[tool.npu-migrate]\nbaseline = "{target}"\n')
    put(tmp_path, "a.py", LEFT)
    proc = npu("check", ".", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    assert "cannot read baseline: not a regular file" in proc.stderr
    with pytest.raises(BaselineError, match="not a regular file"):
        load_baseline(Path(target) if target != "." else tmp_path)


def test_baseline_over_the_limit_is_a_tool_error(tmp_path, monkeypatch):
    big = tmp_path / "base.json"
    with open(big, "wb") as handle:
        handle.truncate(source.MAX_INPUT_BYTES + 1)
    with pytest.raises(BaselineError, match="too large"):
        load_baseline(big)
    big.write_text('{"npu-migrate-baseline": 1, "entries": [{"path": "a", "code": "X", '
                   '"source": "s", "count": Infinity}]}')
    with pytest.raises(BaselineError, match="malformed entry"):
        load_baseline(big)
    big.write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(BaselineError, match="nested too deeply"):
        load_baseline(big)


@needs_fifo
def test_write_baseline_onto_a_fifo_is_a_tool_error(tmp_path):
    fifo(tmp_path / "base.json")
    put(tmp_path, "a.py", LEFT)
    proc = npu("check", ".", "--write-baseline", "base.json", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr, proc.stderr


@needs_fifo
@pytest.mark.parametrize("option", ["--report", "--report-csv"])
def test_report_onto_a_fifo_is_refused_before_anything_is_written(tmp_path, option):
    put(tmp_path, "a.py", SYNC)
    (tmp_path / "out").mkdir()
    target = tmp_path / "out" / ("report.md" if option == "--report" else "change_list.csv")
    fifo(target)
    proc = npu(tmp_path / "a.py", option, target if option == "--report" else target.parent, cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    assert f"error: {target}: not a regular file; not overwritten" in proc.stderr
    assert (tmp_path / "a.py").read_text() == SYNC


def test_report_and_csv_refuse_special_targets_in_the_library_too(tmp_path):
    summary = RunSummary(root=str(tmp_path), dry_run=True, results=[])
    with pytest.raises(source.WriteError, match="not a regular file"):
        report.write_report(summary, Path("/dev/null"))
    (tmp_path / "dir.md").mkdir()
    with pytest.raises(source.WriteError, match="not a regular file"):
        report.write_report(summary, tmp_path / "dir.md")
    put(tmp_path, "file", "x")
    with pytest.raises(source.WriteError, match="not a folder"):
        report.write_csv(summary, tmp_path / "file")


# ------------------------------------------------------------ 3. small ones

def test_a_file_name_at_the_length_limit_is_written(tmp_path):
    name = "m" * 252 + ".py"  # 255 bytes: the most a name may have on most file systems
    put(tmp_path, name, SYNC)
    proc = npu(name, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert (tmp_path / name).read_text() == SYNC_DONE
    source.write_atomic(tmp_path / name, b"x = 1\n")  # the temp file's name stays short
    assert (tmp_path / name).read_bytes() == b"x = 1\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(source.TEMP_SUFFIX)] == []


@pytest.mark.parametrize("problem", ["bad-baseline", "config-baseline", "missing-baseline",
                                     "bad-write-baseline", "bad-diff-base"])
def test_check_fix_validates_its_inputs_before_writing(tmp_path, problem):
    put(tmp_path, "a.py", SYNC)
    before = snapshot(tmp_path)
    args = ["check", ".", "--fix"]
    if problem == "bad-baseline":
        put(tmp_path, "base.json", "{not json")
        args += ["--baseline", "base.json"]
    elif problem == "config-baseline":
        put(tmp_path, "pyproject.toml", '[tool.npu-migrate]\nbaseline = "/dev/zero"\n')
    elif problem == "missing-baseline":
        args += ["--baseline", "gone.json"]
    elif problem == "bad-write-baseline":
        put(tmp_path, "base.json", '{"npu-migrate-baseline": 99}')
        args += ["--write-baseline", "base.json"]
    else:
        args += ["--diff-base", "no-such-ref"]
    before = snapshot(tmp_path)
    proc = npu(*args, cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    assert snapshot(tmp_path) == before  # nothing rewritten, no shim created
    assert not (tmp_path / "npu_compat").exists()


@pytest.fixture
def sigint_restored():
    previous = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("sigint_restored")
@pytest.mark.parametrize("raised", [KeyboardInterrupt, click.exceptions.Abort])
def test_run_turns_ctrl_c_into_one_line_and_130(monkeypatch, capsys, raised):
    def interrupted(**_kw):
        raise raised()

    monkeypatch.setattr(cli_mod, "main", interrupted)
    with pytest.raises(SystemExit) as caught:
        cli_mod.run()
    assert caught.value.code == 130
    assert capsys.readouterr().err == "interrupted\n"


@pytest.mark.usefixtures("sigint_restored")
def test_run_passes_exit_codes_and_usage_errors_through(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["npu-migrate", "--version"])
    with pytest.raises(SystemExit) as caught:
        cli_mod.run()
    assert caught.value.code == 0 and "npu-migrate 0." in capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["npu-migrate", "check", "--no-such-option"])
    with pytest.raises(SystemExit) as caught:
        cli_mod.run()
    assert caught.value.code == 2 and "No such option" in capsys.readouterr().err
    monkeypatch.setattr(cli_mod, "main", lambda **_kw: sys.exit(1))
    with pytest.raises(SystemExit) as caught:
        cli_mod.run()
    assert caught.value.code == 1


def test_ctrl_c_during_shutdown_prints_no_traceback(tmp_path):
    """After the command, a Ctrl-C (here: during an atexit handler) ends the run quietly."""
    code = ("import atexit, os, signal, sys, time\n"
            "from npu_migrate import cli\n"
            "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(5)))\n"
            "sys.argv = ['npu-migrate', '--version']\n"
            "cli.run()\n")
    proc = python(code, tmp_path)
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr
    assert "npu-migrate 0." in proc.stdout  # flushed before the quiet exit


def test_report_in_a_missing_folder_is_refused_before_anything_is_written(tmp_path):
    put(tmp_path, "a.py", SYNC)
    proc = npu("a.py", "--report", tmp_path / "no" / "such" / "report.md", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    assert f"the folder {tmp_path / 'no' / 'such'} does not exist; create it first" in proc.stderr
    assert not (tmp_path / "no").exists()
    assert (tmp_path / "a.py").read_text() == SYNC
    proc = npu("a.py", "--report-csv", tmp_path / "no" / "csv", cwd=tmp_path)
    assert proc.returncode == 2 and f"the folder {tmp_path / 'no'} does not exist" in proc.stderr
    assert not (tmp_path / "no").exists()
    proc = npu("a.py", "--report-csv", tmp_path / "csv", "--report", "r.md", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr  # the CSV folder itself is created when its parent exists
    assert (tmp_path / "csv" / "change_list.csv").is_file() and (tmp_path / "r.md").is_file()


def test_write_report_and_write_csv_create_no_folders(tmp_path):
    summary = RunSummary(root=str(tmp_path), dry_run=True, results=[])
    with pytest.raises(source.WriteError, match="does not exist"):
        report.write_report(summary, tmp_path / "missing" / "r.md")
    with pytest.raises(source.WriteError, match="does not exist"):
        report.write_csv(summary, tmp_path / "missing" / "csv")
    assert not (tmp_path / "missing").exists()
