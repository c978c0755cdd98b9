"""Round-20 audits (issue #16), helper h81: backends and kernels chosen in another file under a
condition false on an NPU host. Each test pairs the false case with the nearest true case that must
stay reported (npu_migrate/flagreads20.py, probes16.py's backend scopes)."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project
from .test_h71 import _UTILS


def _findings(report: dict, path: str, code: str | None = None) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and not f["fixable"]
            and (code is None or f["code"] == code)]


def _at(report: dict, path: str, line: int, code: str = "NPU911") -> list[dict]:
    return [f for f in _findings(report, path, code)
            if line == f["line"] or line in {place[0] for place in f.get("also") or ()}]


def _scoped(report: dict, path: str, line: int) -> list[dict]:
    return [s for s in report["skipped"] if s["path"] == path and "start_line" in s
            and s["start_line"] <= line <= s["end_line"]]



# (the only way out on an NPU host: `import deep_gemm` fails there)
_CONFIGURER = """\
import os

from pkg.utils import get_device_sm


def _compute_enable_jit():
    if get_device_sm() < 90:
        return False
    try:
        import deep_gemm  # noqa: F401
    except ImportError:
        return False
    return os.environ.get("ENABLE_JIT", "1") == "1"


ENABLE_JIT = _compute_enable_jit()
"""

_WRAPPER = """\
import torch

from pkg.configurer import ENABLE_JIT

if ENABLE_JIT:
    import deep_gemm


def compile_all(n):
    old = deep_gemm.get_compile_mode()
    deep_gemm.set_compile_mode(1)
    return old


class _Executor:
    def execute(self, m):
        return deep_gemm.fp8_gemm_nt(m)


def plain(x):
    return x * 2
"""


def _flag_project(tmp_path, wrapper: str):
    return write_project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": _UTILS,
                                    "pkg/configurer.py": _CONFIGURER, "pkg/wrapper.py": wrapper})


def test_import_under_another_modules_false_flag_read_only_in_functions_is_info(tmp_path):
    """BD#23: `if ENABLE_JIT: import deep_gemm`, the flag computed in configurer.py (False on an NPU
    host), the names read only in the module's functions: the import never runs there, so it is
    not an error worded as an import failure; info naming the functions that read its names."""
    report = migrate_json(_flag_project(tmp_path, _WRAPPER))
    found = _at(report, "pkg/wrapper.py", 6)
    assert found and found[0]["severity"] == "info", report["findings"]
    message = found[0]["message"]
    assert "does not run" in message and "ENABLE_JIT" in message and "configurer.py" in message, message
    assert "`compile_all` (lines 10, 11)" in message and "`_Executor.execute` (line 17)" in message, message
    assert "NameError" in message, message
    # (not a named scope: a call of these functions on an NPU host is a real failure)
    assert not _scoped(report, "pkg/wrapper.py", 6), report["skipped"]


def test_import_under_false_flag_read_at_import_time_stays_an_error(tmp_path):
    """The nearest true cases: a read at module level, or in a function the module calls at import,
    fails as soon as the module loads on an NPU host: the error stays."""
    top = _WRAPPER + "\nMODE = deep_gemm.get_compile_mode()\n"
    report = migrate_json(_flag_project(tmp_path / "top", top))
    found = _at(report, "pkg/wrapper.py", 6)
    assert found and found[0]["severity"] == "error", report["findings"]
    called = _WRAPPER + "\nOLD = compile_all(4)\n"
    report = migrate_json(_flag_project(tmp_path / "called", called))
    found = _at(report, "pkg/wrapper.py", 6)
    assert found and found[0]["severity"] == "error", report["findings"]
    decorated = _WRAPPER + "\n\n@compile_all\ndef tuned(n):\n    return n\n"
    report = migrate_json(_flag_project(tmp_path / "decorated", decorated))
    found = _at(report, "pkg/wrapper.py", 6)
    assert found and found[0]["severity"] == "error", report["findings"]
    default = _WRAPPER + "\n\ndef tuned(n, mode=deep_gemm.get_compile_mode()):\n    return n\n"
    report = migrate_json(_flag_project(tmp_path / "default", default))
    found = _at(report, "pkg/wrapper.py", 6)
    assert found and found[0]["severity"] == "error", report["findings"]


def test_import_under_a_flag_true_on_npu_stays_an_error(tmp_path):
    """A flag the configurer leaves on where the package is missing (no try-import probe, no SM test)
    is no gate: the import runs and fails there."""
    configurer = _CONFIGURER.replace("    if get_device_sm() < 90:\n        return False\n", "").replace(
        "    try:\n        import deep_gemm  # noqa: F401\n    except ImportError:\n        return False\n", "")
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": _UTILS,
                                    "pkg/configurer.py": configurer, "pkg/wrapper.py": _WRAPPER})
    report = migrate_json(root)
    found = _at(report, "pkg/wrapper.py", 6)
    assert found and found[0]["severity"] == "error", report["findings"]


_BACKEND = '''\
import torch

from mypkg.runner import get_moe_runner_backend

trtllm_moe = None
if get_moe_runner_backend().is_flashinfer_trtllm():
    try:
        from flashinfer.fused_moe import trtllm_moe
    except ImportError:
        trtllm_moe = None


class FusedMoE(torch.nn.Module):
    def forward(self, x):
        return x * 2


class FlashInferFP4MoE(FusedMoE):
    def forward(self, x):
        return trtllm_moe(x)

    def forward_bf16(self, x):
        from flashinfer.fused_moe import bf16_moe
        return bf16_moe(x)
'''


def test_backend_probe_is_a_named_scope_and_its_lazy_import_another(tmp_path):
    """BC#17: the probe under `get_moe_runner_backend().is_flashinfer_trtllm()` whose `except` binds
    a fallback, its names read only in `FlashInferFP4MoE`: the import fails nothing on an NPU host,
    so it is a named scope, not an info that concedes no work. The lazy import in that class is a
    scope of its own: each spans its own line, not the file between them."""
    report = migrate_json(write_project(tmp_path, {"layer.py": _BACKEND}))
    assert not _findings(report, "layer.py"), report["findings"]
    probe = _scoped(report, "layer.py", 8)
    assert probe and (probe[0]["start_line"], probe[0]["end_line"]) == (8, 8), probe
    assert "fails nothing" in probe[0]["reason"] and "`FlashInferFP4MoE`" in probe[0]["reason"], probe
    lazy = _scoped(report, "layer.py", 23)
    assert lazy and (lazy[0]["start_line"], lazy[0]["end_line"]) == (23, 23), lazy
    assert "backend code an NPU host runs only if that backend is selected" in lazy[0]["reason"], lazy
    assert not _scoped(report, "layer.py", 15), report["skipped"]


def test_backend_probe_read_in_generic_code_stays_an_error(tmp_path):
    """The nearest true case: the fallback's None called in the generic class an NPU host runs."""
    text = _BACKEND.replace("        return x * 2\n", "        return trtllm_moe(x)\n")
    report = migrate_json(write_project(tmp_path, {"layer.py": text}))
    found = _at(report, "layer.py", 8)
    assert found and found[0]["severity"] == "error", report["findings"]
    assert not _scoped(report, "layer.py", 8), report["skipped"]
