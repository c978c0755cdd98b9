"""`npu-migrate vnpu -- CMD` and `npu-migrate verify PATH -- CMD` (npu_migrate/vnpu/launch.py,
verify.py, cli_vnpu.py).

These tests do not need the virtual device itself: they point the launcher at a tiny fake
`torch_npu` (NPU_MIGRATE_VNPU_SITE) that imports nothing, so most runs are plain Python processes
without torch. One test uses tests/fake_npu (which registers `npu` with torch) to see a real
migration change what a program prints. The mini-projects on the real virtual device are the
device's own tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from npu_migrate.cli import main
from npu_migrate.vnpu import launch
from npu_migrate.vnpu.verify import compare_outputs

REPO_ROOT = Path(__file__).resolve().parent.parent
FAKE_NPU = REPO_ROOT / "tests" / "fake_npu"


@pytest.fixture(autouse=True)
def fake_site(tmp_path, monkeypatch):
    """A stand-in that imports nothing, first on PYTHONPATH; temporary copies under tmp_path."""
    site = tmp_path / "site"
    (site / "torch_npu").mkdir(parents=True)
    (site / "torch_npu" / "__init__.py").write_text('STAND_IN = "fake vnpu"\n')
    monkeypatch.setenv(launch.ENV_SITE, str(site))
    monkeypatch.delenv(launch.ENV_COUNT, raising=False)
    monkeypatch.delenv(launch.VISIBLE_ENV, raising=False)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return site


def project(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def cli_process(*args, env=None, cwd=None):
    """The CLI in a real process (vnpu hands its own standard streams to the command)."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "npu_migrate", *map(str, args)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)


# ----------------------------------------------------------------------------------- vnpu

ENV_REPORT = textwrap.dedent("""\
    import json, os, subprocess, sys
    import torch_npu
    child = subprocess.run([sys.executable, "-c", "import torch_npu; print(torch_npu.__file__)"],
                           capture_output=True, text=True)
    print(json.dumps({
        "PYTHONPATH": os.environ["PYTHONPATH"].split(os.pathsep),
        "count": os.environ["NPU_MIGRATE_VNPU_COUNT"],
        "cuda": os.environ["CUDA_VISIBLE_DEVICES"],
        "path0": os.environ["PATH"].split(os.pathsep)[0],
        "stand_in": torch_npu.STAND_IN,
        "child": child.stdout.strip(),
    }))
    sys.exit(7)
""")


def test_vnpu_sets_the_environment_and_passes_the_exit_code_through(tmp_path, fake_site):
    env = dict(os.environ, PYTHONPATH="/earlier/entry")
    proc = cli_process("vnpu", "--npus", 3, "--", "python", "-c", ENV_REPORT, env=env, cwd=tmp_path)
    assert proc.returncode == 7, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["PYTHONPATH"][0] == str(fake_site)  # the stand-in first
    assert "/earlier/entry" in seen["PYTHONPATH"][1:]  # the caller's PYTHONPATH kept after it
    assert seen["count"] == "3"
    assert seen["cuda"] == ""
    assert seen["path0"] == str(Path(sys.executable).absolute().parent)  # `python` is the tool's
    assert seen["stand_in"] == "fake vnpu"
    assert seen["child"] == str(fake_site / "torch_npu" / "__init__.py")  # subprocesses see it too


def test_vnpu_without_double_dash_takes_the_command_options_as_the_command_s(tmp_path):
    proc = cli_process("vnpu", "python", "-c", "import sys; sys.exit(int(sys.argv[1]))", "5", cwd=tmp_path)
    assert proc.returncode == 5, proc.stderr
    assert cli_process("vnpu", "--", "python", "-c", "pass", cwd=tmp_path).returncode == 0


def test_device_count_from_npus_else_visible_devices_else_one(monkeypatch):
    assert launch.vnpu_env(None, {})[launch.ENV_COUNT] == "1"
    assert launch.vnpu_env(None, {"ASCEND_RT_VISIBLE_DEVICES": "4,5"})[launch.ENV_COUNT] == "2"
    assert launch.vnpu_env(None, {"ASCEND_RT_VISIBLE_DEVICES": ""})[launch.ENV_COUNT] == "1"
    assert launch.vnpu_env(8, {"ASCEND_RT_VISIBLE_DEVICES": "0,1"})[launch.ENV_COUNT] == "8"


def test_cpu_environment_has_no_stand_in_and_no_cuda(fake_site):
    env = launch.cpu_env({"PYTHONPATH": os.pathsep.join([str(fake_site), "/mine"]), "PATH": "/usr/bin",
                          launch.ENV_COUNT: "2", launch.ENV_SITE: str(fake_site)})
    assert env["PYTHONPATH"] == "/mine"
    assert launch.ENV_COUNT not in env
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["PATH"].split(os.pathsep) == [str(Path(sys.executable).absolute().parent), "/usr/bin"]


def test_vnpu_command_not_found_is_exit_2():
    result = invoke("vnpu", "--", "no-such-command-npu-migrate")
    assert result.exit_code == 2
    assert "command not found: no-such-command-npu-migrate" in result.output


def test_vnpu_without_a_command_is_a_usage_error():
    assert invoke("vnpu").exit_code == 2


def test_vnpu_without_the_device_is_exit_2(tmp_path, monkeypatch):
    monkeypatch.setenv(launch.ENV_SITE, str(tmp_path / "empty"))
    result = invoke("vnpu", "--", "python", "-c", "pass")
    assert result.exit_code == 2
    assert "the virtual device is not installed" in result.output


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    """A virtual environment without torch (nor npu_migrate): its python."""
    folder = tmp_path_factory.mktemp("bare")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder / "env")], check=True)
    return folder / "env" / "bin" / "python"


def test_vnpu_with_an_interpreter_without_torch_is_exit_2(bare_python):
    result = invoke("vnpu", "--", bare_python, "-c", "pass")
    assert result.exit_code == 2
    assert f"torch is not installed for {bare_python}" in result.output


def test_an_interpreter_that_cannot_import_npu_migrate_cannot_run_the_device(bare_python, tmp_path):
    """The stand-in's torch_npu imports npu_migrate: the interpreter running CMD must have it."""
    fake_torch = tmp_path / "fake_torch"
    (fake_torch / "torch").mkdir(parents=True)
    (fake_torch / "torch" / "__init__.py").write_text("")
    (fake_torch / "torch-2.13.0.dist-info").mkdir()
    (fake_torch / "torch-2.13.0.dist-info" / "METADATA").write_text("Name: torch\nVersion: 2.13.0\n")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(fake_torch)}
    assert launch.check_torch(str(bare_python), env, tmp_path) == "2.13.0"
    with pytest.raises(launch.LaunchError, match="imports npu_migrate, which .* cannot import"):
        launch.check_torch(str(bare_python), env, tmp_path, needs_package=True)


def test_vnpu_with_an_unsupported_torch_is_exit_2(monkeypatch):
    monkeypatch.setattr(launch, "supported_torch", lambda: ("1.8", "99.0"))
    result = invoke("vnpu", "--", "python", "-c", "pass")
    assert result.exit_code == 2
    assert "is not supported by the virtual device, which runs on torch 1.8 or 99.0" in result.output


def test_the_interpreter_of_a_script_is_read_from_its_hash_bang(tmp_path):
    script = tmp_path / "tool"
    script.write_text(f"#!{sys.executable}\nprint(1)\n")
    assert launch.interpreter_of(str(script), os.environ) == sys.executable
    script.write_text("#!/usr/bin/env -S python3 -u\n")
    assert launch.interpreter_of(str(script), {"PATH": str(Path(sys.executable).parent)}) is not None
    script.write_text("#!/bin/sh\necho hi\n")
    assert launch.interpreter_of(str(script), os.environ) is None


# --------------------------------------------------------------------------------- verify

SAME = {"main.py": """\
    print("hello")
    print(6 * 7)
"""}


def test_verify_match(tmp_path):
    root = project(tmp_path / "proj", SAME)
    result = invoke("verify", root, "--", "python", "main.py")
    assert result.exit_code == 0, result.output
    assert "stdout: MATCH (2 lines)" in result.stdout
    assert "original (CPU):         exit 0 in" in result.stdout
    assert "migrated (virtual NPU): exit 0 in" in result.stdout
    for step in ("migrating ", "running original on the CPU: python main.py", "running migrated on the virtual NPU"):
        assert step in result.stderr
    assert list((tmp_path / "tmp").iterdir()) == []  # the temporary copy is gone


def test_verify_original_on_the_cpu_migrated_on_the_virtual_device(tmp_path, fake_site):
    """The same unchanged program sees the CPU environment, then the virtual device's."""
    root = project(tmp_path / "proj", {"main.py": """\
        import importlib.util, os
        # names built at run time: no trigger word, so the migration does not even parse the file
        print(os.environ.get("NPU_MIGRATE_VNPU_COUNT"), repr(os.environ.get("CU" + "DA_VISIBLE_DEVICES")))
        print(importlib.util.find_spec("torch" + "_npu") is not None)
    """})
    result = invoke("verify", root, "--npus", 2, "--", "python", "main.py")
    assert result.exit_code == 1, result.output
    assert "stdout: DIFFER at line 1" in result.stdout
    assert "  original: None ''" in result.stdout
    assert "  migrated: 2 ''" in result.stdout
    kept = list((tmp_path / "tmp").iterdir())
    assert len(kept) == 1 and f"migrated copy kept in {kept[0]}" in result.stderr


def test_verify_mismatch_in_a_migrated_copy_edited_by_hand(tmp_path):
    root = project(tmp_path / "proj", SAME)
    copy = project(tmp_path / "copy", {"main.py": 'print("hello")\nprint(6 * 9)\n'})
    result = invoke("verify", root, "--migrated", copy, "--", "python", "main.py")
    assert result.exit_code == 1, result.output
    assert "stdout: DIFFER at line 2\n  original: 42\n  migrated: 54\n" in result.stdout
    assert (copy / "main.py").read_text() == 'print("hello")\nprint(6 * 9)\n'  # never touched


def test_verify_a_shorter_output_differs_at_its_end(tmp_path):
    root = project(tmp_path / "proj", SAME)
    copy = project(tmp_path / "copy", {"main.py": 'print("hello")\n'})
    result = invoke("verify", root, "--migrated", copy, "--", "python", "main.py")
    assert result.exit_code == 1
    assert "  original: 42\n  migrated: (end of output)" in result.stdout


def test_verify_mismatch_made_by_the_migration(tmp_path, monkeypatch):
    """A real migration: `torch.device("cuda")` becomes the shim's device, which is `npu` where
    torch_npu reports a device (here tests/fake_npu, a test double registering `npu`)."""
    monkeypatch.setenv(launch.ENV_SITE, str(FAKE_NPU))
    root = project(tmp_path / "proj", {"main.py": """\
        import torch
        print("start")
        print(torch.device("cuda"))
    """})
    result = invoke("verify", root, "--", "python", "main.py")
    assert result.exit_code == 1, result.output
    assert "stdout: DIFFER at line 2\n  original: cuda\n  migrated: npu\n" in result.stdout


def test_verify_original_that_does_not_run_on_the_cpu(tmp_path):
    root = project(tmp_path / "proj", {"main.py": """\
        import sys
        print("loading")
        sys.stderr.write("RuntimeError: Found no NVIDIA driver on your system\\n")
        sys.exit(3)
    """})
    result = invoke("verify", root, "--", "python", "main.py")
    assert result.exit_code == 2
    assert "error: the original does not run on the CPU: exit 3" in result.stderr
    assert "Found no NVIDIA driver on your system" in result.stderr
    assert "running migrated" not in result.stderr
    assert list((tmp_path / "tmp").iterdir()) == []


def test_verify_migrated_run_that_fails_is_a_difference(tmp_path):
    root = project(tmp_path / "proj", SAME)
    copy = project(tmp_path / "copy", {"main.py": 'raise RuntimeError("Expected all tensors to be on the same device")\n'})
    result = invoke("verify", root, "--migrated", copy, "--", "python", "main.py")
    assert result.exit_code == 1
    assert "migrated (virtual NPU): exit 1 in" in result.stdout
    assert "DIFFER: the migrated run failed while the original succeeded" in result.stdout
    assert "Expected all tensors to be on the same device" in result.stdout


def test_verify_command_not_found(tmp_path):
    root = project(tmp_path / "proj", SAME)
    result = invoke("verify", root, "--", "no-such-command-npu-migrate", "x")
    assert result.exit_code == 2
    assert "error: command not found: no-such-command-npu-migrate" in result.stderr
    assert "running original" not in result.stderr


def test_verify_script_not_found_in_the_project(tmp_path):
    root = project(tmp_path / "proj", SAME)
    result = invoke("verify", root, "--", "./run.sh")
    assert result.exit_code == 2
    assert "command not found: ./run.sh" in result.stderr


def test_verify_compare_file(tmp_path):
    root = project(tmp_path / "proj", {"main.py": """\
        import time
        print("took", time.perf_counter_ns())  # stdout differs from run to run
        with open("out/result.txt", "w") as f:
            f.write("loss 0.25\\n")
    """, "out/.keep": ""})
    result = invoke("verify", root, "--compare", "out/result.txt", "--", "python", "main.py")
    assert result.exit_code == 0, result.output
    assert "out/result.txt: MATCH (1 line)" in result.stdout


def test_verify_compare_file_the_original_does_not_write(tmp_path):
    root = project(tmp_path / "proj", SAME)
    result = invoke("verify", root, "--compare", "result.txt", "--", "python", "main.py")
    assert result.exit_code == 2
    assert "the original run wrote no result.txt" in result.stderr


def test_verify_compare_file_left_from_before_is_not_an_output(tmp_path):
    writes = {"main.py": 'open("result.txt", "w").write("loss 0.25\\n")\n'}
    stale = {"main.py": 'print("no file written")\n', "result.txt": "loss 0.25\n"}
    root = project(tmp_path / "proj", writes)
    copy = project(tmp_path / "copy", stale)
    result = invoke("verify", root, "--migrated", copy, "--compare", "result.txt", "--", "python", "main.py")
    assert result.exit_code == 1, result.output
    assert "DIFFER: the migrated run wrote no result.txt" in result.stdout
    assert "(the file there is from before the run)" in result.stdout
    result = invoke("verify", copy, "--migrated", root, "--compare", "result.txt", "--", "python", "main.py")
    assert result.exit_code == 2, result.output
    assert "the original run wrote no result.txt" in result.stderr


def test_verify_migration_that_fails(tmp_path):
    root = project(tmp_path / "proj", {**SAME, "pyproject.toml": '[tool.npu-migrate]\nselect = ["BOGUS1"]\n'})
    result = invoke("verify", root, "--", "python", "main.py")
    assert result.exit_code == 2
    assert "error: the migration failed: exit 2" in result.stderr
    assert "BOGUS1" in result.stderr
    assert list((tmp_path / "tmp").iterdir()) == []


def test_verify_timeout_of_the_original(tmp_path):
    root = project(tmp_path / "proj", {"main.py": "import time\ntime.sleep(60)\n"})
    result = invoke("verify", root, "--timeout", "0.5", "--", "python", "main.py")
    assert result.exit_code == 2
    assert "the original does not run on the CPU: killed after 0.5 s (--timeout)" in result.stderr


def test_compare_outputs_line_endings():
    assert compare_outputs(b"a\nb\n", b"a\nb\n").same
    outcome = compare_outputs(b"a\nb\n", b"a\r\nb\n")
    assert not outcome.same and outcome.line == 1 and "line endings" in outcome.note
    outcome = compare_outputs(b"a\nb\n", b"a\nb")
    assert not outcome.same and outcome.line == 2


def test_a_long_differing_line_is_shown_around_its_first_difference(tmp_path):
    root = project(tmp_path / "proj", {"main.py": 'print("x" * 500 + "1.25" + "y" * 500)\n'})
    copy = project(tmp_path / "copy", {"main.py": 'print("x" * 500 + "1.26" + "y" * 500)\n'})
    result = invoke("verify", root, "--migrated", copy, "--", "python", "main.py")
    assert result.exit_code == 1
    assert "  (from column 504)" in result.stdout
    shown = next(line for line in result.stdout.splitlines() if line.startswith("  migrated: "))
    assert shown.startswith("  migrated: [423 characters] x") and "1.26" in shown
    assert shown.endswith(" [421 more characters]") and len(shown) < 240
