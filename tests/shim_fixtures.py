"""Fixtures and helpers for the shim tests (tests/test_shim.py imports them).

The fake torch_npu renames PrivateUse1 and registers ``torch.npu`` process-wide, so every test
that needs "an NPU" runs in a subprocess; the pytest process itself stays a plain CPU/CUDA one.
"""

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHIM_TEMPLATE = REPO / "npu_migrate" / "shim"
FAKE_NPU = Path(__file__).resolve().parent / "fake_npu"

# Variables that would change what the shim detects; subprocesses start without them.
_DETECTION_ENV = (
    "NPU_COMPAT_DEVICE",
    "TORCH_NPU_DEVICE_CAPABILITY",
    "FAKE_TORCH_NPU_DEVICE_COUNT",
    "PYTHONPATH",
    "PYTHONSTARTUP",
)


def install_shim(root, name="npu_compat"):
    """Copy the shim template into ``root/name`` as the engine would; return that directory."""
    target = Path(root) / name
    target.mkdir(parents=True)
    for source in sorted(SHIM_TEMPLATE.glob("*.py")):
        shutil.copyfile(source, target / source.name)
    return target


def make_broken_torch_npu(root):
    """A torch_npu whose import fails, as on a CUDA torch build; return the dir to put on the path."""
    package = Path(root) / "broken_npu" / "torch_npu"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        'raise RuntimeError("Two accelerators cannot be used at the same time")\n'
    )
    return package.parent


def run_python(code=None, *, path, cwd, env=None, module=None):
    """Run ``python -c code`` (or ``python -m module``) with ``path`` as its whole PYTHONPATH.

    The child starts in ``cwd`` (a temp dir, so the repo is not importable) without any of the
    variables that steer detection, plus ``env``. Returns the CompletedProcess.
    """
    child_env = {k: v for k, v in os.environ.items() if k not in _DETECTION_ENV}
    child_env["PYTHONPATH"] = os.pathsep.join(str(p) for p in path)
    child_env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # a real torch_npu must not sneak in
    child_env["PYTHONDONTWRITEBYTECODE"] = "1"
    child_env.update(env or {})
    argv = [sys.executable, "-m", module] if module else [sys.executable, "-c", textwrap.dedent(code)]
    return subprocess.run(
        argv, cwd=str(cwd), env=child_env, capture_output=True, text=True, timeout=300
    )


def check(result):
    """Assert a child succeeded, showing its output if not; return its stdout."""
    assert result.returncode == 0, "child failed ({}):\n--- stdout\n{}\n--- stderr\n{}".format(
        result.returncode, result.stdout, result.stderr
    )
    return result.stdout


@pytest.fixture
def shim_root(tmp_path):
    """A temp dir holding the shim installed as ``npu_compat``."""
    root = tmp_path / "site"
    install_shim(root)
    return root


@pytest.fixture
def run_npu(shim_root, tmp_path):
    """Run code in a child where the fake torch_npu makes the shim see an NPU."""

    def run(code=None, env=None, module=None, extra_path=()):
        return run_python(
            code, path=[shim_root, *extra_path, FAKE_NPU], cwd=tmp_path, env=env, module=module
        )

    return run


@pytest.fixture
def run_cpu(shim_root, tmp_path):
    """Run code in a child with no torch_npu at all (this CPU machine as it is)."""

    def run(code=None, env=None, module=None, extra_path=()):
        return run_python(code, path=[shim_root, *extra_path], cwd=tmp_path, env=env, module=module)

    return run


@pytest.fixture
def shim(shim_root, monkeypatch):
    """The shim imported into this (CPU-only) process as ``npu_compat``: the CUDA/CPU path."""
    if importlib.util.find_spec("torch_npu") is not None:
        pytest.skip("a torch_npu is importable in the test process; CPU-mode tests need none")
    monkeypatch.delenv("NPU_COMPAT_DEVICE", raising=False)
    package = shim_root / "npu_compat"
    spec = importlib.util.spec_from_file_location(
        "npu_compat", str(package / "__init__.py"), submodule_search_locations=[str(package)]
    )
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "npu_compat", module)  # removed again after the test
    spec.loader.exec_module(module)
    return module
