"""Round-14 audits (issue #16): probes whose answer on an NPU host is "no" (npu_migrate/probes15.py,
fallbacks.py, versionprobes.py): an availability check of an NVIDIA-only package, a
`pytest.importorskip`, a None check of `torch.version.cuda` or CUDA_HOME, a fallback flag. Each
test writes a small project of its own, checks that the false finding is gone (a named skipped
scope, with its reason) and that a nearby true case stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project


def _open(report: dict, path: str, code: str) -> list[dict]:
    """The findings of `code` in `path` above info."""
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code and f["severity"] != "info"]


def _scopes(report: dict, path: str, code: str) -> dict[int, str]:
    """{line: reason} of the skipped scopes of `code` in `path`."""
    return {line: s["reason"] for s in report["skipped"]
            if s.get("path") == path and "start_line" in s and f"({code})" in s["reason"]
            for line in range(s["start_line"], s["end_line"] + 1)}


def _line(report: dict, path: str, needle: str, root) -> int:
    """The first line of `path` (under the project `root`) that holds `needle`."""
    lines = (root / path).read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if needle in text)


_IMPORTS = '''
import importlib.util


def is_transformer_engine_available():
    return importlib.util.find_spec("transformer_engine") is not None


def is_te_available():
    return is_transformer_engine_available()


def is_flash_attn_available():
    return importlib.util.find_spec("flash_attn") is not None
'''


def test_import_behind_a_raise_on_unavailable_te(tmp_path):
    """AM#32: every function first raises ImportError when `not is_transformer_engine_available()`,
    then imports transformer_engine (TE has no NPU build): a named scope naming the check. A
    function that imports it with no such check keeps its error."""
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/imports.py": _IMPORTS,
        "pkg/te_utils.py": '''
import torch.nn as nn

from .imports import is_transformer_engine_available


def convert(model):
    if not is_transformer_engine_available():
        raise ImportError("convert requires transformer_engine")
    import transformer_engine.pytorch as te

    for name, module in model.named_children():
        if isinstance(module, nn.Linear):
            setattr(model, name, te.Linear(module.in_features, module.out_features))
    return model
''',
        "pkg/te_plain.py": '''
def convert(model):
    import transformer_engine.pytorch as te

    return te.Linear(4, 4)
''',
    })
    report = migrate_json(root)
    assert not _open(report, "pkg/te_utils.py", "NPU913")
    reason = _scopes(report, "pkg/te_utils.py", "NPU913")[_line(report, "pkg/te_utils.py", "import transformer_engine", root)]
    assert reason.startswith("not run on an NPU host (NPU913): behind an availability check an NPU host fails")
    assert "`is_transformer_engine_available()`" in reason
    assert _open(report, "pkg/te_plain.py", "NPU913")


def test_import_under_if_te_available(tmp_path):
    """AK#30: `if is_te_available(): import transformer_engine as te` (the check named by the
    package's initials) is never taken on an NPU host, where TE has no build. The same import
    behind a setting (not an availability check) keeps its error."""
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/imports.py": _IMPORTS,
        "tests/test_te.py": '''
import pytest

from pkg.imports import is_te_available

if is_te_available():
    import transformer_engine as te


@pytest.mark.skipif(not is_te_available(), reason="no TE")
def test_linear():
    assert te.pytorch.Linear(4, 4) is not None
''',
        "pkg/te_other.py": '''
import os

if os.environ.get("USE_TE") == "1":
    import transformer_engine as te
''',
    })
    report = migrate_json(root)
    assert not _open(report, "tests/test_te.py", "NPU913")
    assert "`is_te_available()`" in _scopes(report, "tests/test_te.py", "NPU913")[_line(report, "tests/test_te.py", "import transformer_engine", root)]
    assert _open(report, "pkg/te_other.py", "NPU913")  # (a setting, not an availability check)


def test_import_after_importorskip(tmp_path):
    """AM#10: `pytest.importorskip("flashinfer")` right above `from flashinfer... import ...` skips
    the test where flashinfer is missing; an importorskip of another package does not."""
    root = write_project(tmp_path, {
        "tests/test_cache.py": '''
import pytest


def test_metadata_gate():
    pytest.importorskip("flashinfer")
    from flashinfer.autotuner import collect

    assert collect() is not None


def test_other_package():
    pytest.importorskip("numpy")
    from flashinfer.autotuner import collect as c2

    assert c2() is not None
''',
    })
    report = migrate_json(root)
    findings = _open(report, "tests/test_cache.py", "NPU911")
    assert [f["line"] for f in findings] == [_line(report, "tests/test_cache.py", "import collect as c2", root)]
    assert 'importorskip("flashinfer")' in _scopes(report, "tests/test_cache.py", "NPU911")[_line(report, "tests/test_cache.py", "from flashinfer.autotuner import collect", root)]


def test_cuda_version_checked_for_none(tmp_path):
    """AK#6: `v = torch.version.cuda; return v is not None and Version(v) >= ...` is a clean probe
    (None on an NPU host, the answer is False); the version split unchecked keeps its warning."""
    root = write_project(tmp_path, {
        "pkg/versions.py": '''
import torch
from packaging.version import Version


def has_jit_cache_wheels() -> bool:
    cuda_version = torch.version.cuda
    return cuda_version is not None and Version(cuda_version) >= Version("12.9")


def toolkit_major() -> int:
    version = torch.version.cuda
    if version is None:
        return 0
    return int(version.split(".")[0])


def short_tag() -> str:
    tag = torch.version.cuda
    if not tag:
        return ""
    return "cu" + tag.replace(".", "")


def cuda_major() -> int:
    cuda_version = torch.version.cuda
    return int(cuda_version.split(".")[0])
''',
    })
    report = migrate_json(root)
    assert [f["line"] for f in _open(report, "pkg/versions.py", "NPU990")] == [_line(report, "pkg/versions.py", "return int(cuda_version", root) - 1]
    scopes = _scopes(report, "pkg/versions.py", "NPU990")
    assert scopes[_line(report, "pkg/versions.py", "cuda_version = torch.version.cuda", root)].startswith("runs as written on an NPU host (NPU990): `torch.version.cuda` read where")
    assert _line(report, "pkg/versions.py", "    version = torch.version.cuda", root) in scopes  # (after `if version is None: return 0`)
    assert _line(report, "pkg/versions.py", "tag = torch.version.cuda", root) in scopes  # (after `if not tag: return ""`)


def test_optional_baseline_with_a_flag(tmp_path):
    """AK#20: `try: from vllm import _custom_ops as ops; VLLM_AVAILABLE = True except ImportError:
    ops = None; VLLM_AVAILABLE = False`, and the only function that calls `ops` returns its
    fallback first when the flag is False: the fallback runs on an NPU host. Where `ops` is called
    in a function that never tests the flag, the import keeps its error."""
    guarded = '''
import torch

try:
    from vllm import _custom_ops as ops

    VLLM_AVAILABLE = True
except ImportError:
    ops = None
    VLLM_AVAILABLE = False


def fallback_quant(x):
    return x.to(torch.float16)


def vllm_quant(x):
    if not VLLM_AVAILABLE:
        return fallback_quant(x)
    return ops.scaled_fp8_quant(x)
'''
    root = write_project(tmp_path, {
        "pkg/bench.py": guarded,
        "pkg/bench_unchecked.py": guarded + '''

def direct(x):
    return ops.scaled_fp8_quant(x)
''',
    })
    report = migrate_json(root)
    assert not _open(report, "pkg/bench.py", "NPU911")
    assert "guarded import with a fallback" in _scopes(report, "pkg/bench.py", "NPU911")[_line(report, "pkg/bench.py", "from vllm", root)]
    assert _open(report, "pkg/bench_unchecked.py", "NPU911")


def test_cuda_home_guarded_at_every_use(tmp_path):
    """AM#11: setup.py imports CUDA_HOME and reads it only under `CUDA_HOME is not None`, as the
    first operand of `CUDA_HOME and get_nvcc_cuda_version()`, and in a function that first asserts
    it is set: the no-toolkit path runs on an NPU host. `os.path.join(CUDA_HOME, ...)` unchecked
    keeps the error."""
    root = write_project(tmp_path, {
        "setup.py": '''
import os
import subprocess

from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME


def _is_cuda() -> bool:
    return os.environ.get("TARGET_DEVICE", "cuda") == "cuda"


def get_nvcc_cuda_version():
    assert CUDA_HOME is not None, "CUDA_HOME is not set"
    return subprocess.check_output([CUDA_HOME + "/bin/nvcc", "-V"], text=True)


def build_args():
    args = []
    if _is_cuda() and CUDA_HOME is not None:
        args.append("-DCUDA_TOOLKIT_ROOT_DIR=" + CUDA_HOME)
    return args


def version_suffix():
    version = CUDA_HOME and get_nvcc_cuda_version()
    return version or ""


setup(name="pkg", version="0.1" + version_suffix())
''',
        "tools/setup_plain.py": '''
import os

from torch.utils.cpp_extension import CUDA_HOME

NVCC = os.path.join(CUDA_HOME, "bin", "nvcc")
''',
    })
    report = migrate_json(root)
    assert not _open(report, "setup.py", "NPU911")
    assert "a CUDA toolkit path whose absence the file handles" in _scopes(report, "setup.py", "NPU911")[_line(report, "setup.py", "import CUDA_HOME", root)]
    assert _open(report, "tools/setup_plain.py", "NPU911")
