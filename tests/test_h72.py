"""Precision wave 19 (issue #16), probes the tool did not read as probes (npu_migrate/probes19.py).

A module-level guarded import of a CUDA extension whose `except` binds None and clears a flag, its
names read only in a private helper that the module calls only under `if <flag>:` (through a method
of a class, or a second helper): the import is a named scope. The nearest true cases keep the error:
the helper also called once outside the branch, called on the branch where the probe failed, a
public helper, a flag the handler does not clear."""

from __future__ import annotations

from npu_migrate import probes19
from npu_migrate.findings import Finding

from .precision_helpers import migrate_json, write_project

_GATED = '''\
import torch

try:
    from fastkern.ops.gemm import gemm_w4_cuda as _gemm_w4
    from fastkern.ops.quantize import quantize_w4_cuda as _quantize_w4

    _fused_ok = True
except Exception:
    _gemm_w4 = None
    _quantize_w4 = None
    _fused_ok = False


def _fused_mlp(x, fc1, fc2):
    q, scales = _quantize_w4(x, fc1.smooth)
    out = torch.empty_like(x)
    _gemm_w4(q, fc1.weight, out, scales)
    return out


def _outer(x, fc1, fc2):
    return _fused_mlp(x, fc1, fc2) * 2


class Block(torch.nn.Module):
    def forward(self, x):
        if _fused_ok:
            y = _outer(x, self.fc1, self.fc2)
        else:
            y = self.mlp(x)
        return y
'''


def _import_findings(report: dict, path: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == "NPU911"]


def _scopes(report: dict, path: str, line: int) -> list[str]:
    return [s["reason"] for s in report["skipped"] if s["path"] == path and "start_line" in s
            and s["start_line"] <= line <= s["end_line"]]


def test_import_read_only_in_a_helper_called_under_the_flag_is_a_scope(tmp_path):
    """SGLang-shaped (wave 19): the names are read only in `_fused_mlp`, reached only through
    `_outer` under `if _fused_ok:` in a method: on an NPU host the helper never runs."""
    report = migrate_json(write_project(tmp_path, {"block.py": _GATED}))
    assert not _import_findings(report, "block.py"), report["findings"]
    reasons = _scopes(report, "block.py", 4)
    assert any("runs as written on an NPU host (NPU911)" in r and "`_fused_mlp`" in r and "line 27" in r
               for r in reasons), report["skipped"]


def test_helper_also_called_outside_the_flag_keeps_the_error(tmp_path):
    """The nearest true case: one call of the helper after the `if` runs on an NPU host and calls
    the None the handler bound."""
    text = _GATED.replace("        return y\n", "        return y + _fused_mlp(x, self.fc1, self.fc2)\n")
    report = migrate_json(write_project(tmp_path, {"block.py": text}))
    found = _import_findings(report, "block.py")
    assert found and found[0]["severity"] == "error" and found[0]["line"] == 4, found


def _review(text: str) -> list[Finding]:
    findings = [Finding(path="m.py", line=4, column=5, code="NPU911", message="import of `fastkern`",
                        fixable=False, source="", severity="error")]
    return probes19.review(findings, text)


def test_helper_called_on_the_failed_branch_keeps_the_error():
    text = _GATED.replace("        if _fused_ok:\n", "        if not _fused_ok:\n")
    assert _review(text)[0].severity == "error"


def test_public_helper_keeps_the_error():
    """Another module may import a public helper and call it unguarded."""
    text = _GATED.replace("_outer", "outer")
    assert _review(text)[0].severity == "error"


def test_helper_passed_as_a_value_keeps_the_error():
    text = _GATED.replace("        return y\n", "        self.hook = _fused_mlp\n        return y\n")
    assert _review(text)[0].severity == "error"


def test_flag_the_handler_does_not_clear_keeps_the_error():
    text = _GATED.replace("    _fused_ok = False\n", "    pass\n")
    assert _review(text)[0].severity == "error"


def test_inverted_flag_and_early_return_are_read_the_right_way_round():
    """A flag the `try` body sets False (`_missing = False`, True in the handler): `if _missing:
    return` before the call gates it; `if _missing:` around the call does not."""
    inverted = _GATED.replace("_fused_ok = True", "_missing = False").replace("_fused_ok = False", "_missing = True")
    early = inverted.replace("        if _fused_ok:\n            y = _outer(x, self.fc1, self.fc2)\n        else:\n"
                             "            y = self.mlp(x)\n",
                             "        if _missing:\n            return self.mlp(x)\n        y = _outer(x, self.fc1, self.fc2)\n")
    assert "_outer(x" in early and "if _missing:" in early
    lowered = _review(early)[0]
    assert lowered.severity == "info" and "called only where the probe's test says the import worked" in lowered.message
    wrong = inverted.replace("        if _fused_ok:\n", "        if _missing:\n")
    assert _review(wrong)[0].severity == "error"


def test_none_test_of_the_name_gates_the_helper():
    text = _GATED.replace("        if _fused_ok:\n", "        if _gemm_w4 is not None:\n")
    assert _review(text)[0].severity == "info"
    text = _GATED.replace("        if _fused_ok:\n", "        if _gemm_w4 is None:\n")
    assert _review(text)[0].severity == "error"


_AVAILABILITY = '''\
import importlib.util

from packaging import version

from .utils import is_torch_available


def is_bnb_available():
    return importlib.util.find_spec("bitsandbytes") is not None


is_bitsandbytes_available = is_bnb_available


def is_bnb_4bit_available():
    if not is_bnb_available():
        return False

    import bitsandbytes as bnb

    return hasattr(bnb.nn, "Linear4bit")


def is_bnb_recent():
    if is_bitsandbytes_available():
        import bitsandbytes

        return version.parse(bitsandbytes.__version__) >= version.parse("0.45")
    return False


def make_layer(n):
    if not is_bnb_available():
        return None

    import bitsandbytes as bnb

    return bnb.nn.Linear4bit(n, n)


def unguarded_probe():
    if not is_torch_available():
        return False
    import bitsandbytes as bnb

    return hasattr(bnb.nn, "Linear4bit")
'''


def test_availability_function_import_is_a_scope(tmp_path):
    """peft-shaped `is_bnb_4bit_available()` (wave 19): bitsandbytes imported only after the
    function's own availability test, read only by `hasattr` / `__version__`: a named scope. A
    function that builds a 4-bit layer after the same test keeps its NPU914, and so does the same
    probe after a test of another package only (it fails where bitsandbytes is missing)."""
    report = migrate_json(write_project(tmp_path, {"import_utils.py": _AVAILABILITY}))
    kept = [f for f in report["findings"] if f["path"] == "import_utils.py" and f["code"] == "NPU914"]
    places = {line for f in kept for line in (f["line"], *(p[0] for p in f.get("also") or ()))}
    assert 19 not in places and 26 not in places, kept
    assert 36 in places and 44 in places, kept
    for line in (19, 26):
        reasons = _scopes(report, "import_utils.py", line)
        assert any("runs as written on an NPU host (NPU914)" in r and "an availability probe" in r
                   for r in reasons), (line, report["skipped"])


def test_availability_probe_that_calls_the_package_keeps_the_finding():
    text = _AVAILABILITY.replace('return hasattr(bnb.nn, "Linear4bit")\n\n\ndef is_bnb_recent',
                                 'return bnb.nn.Linear4bit is not None\n\n\ndef is_bnb_recent', 1)
    finding = Finding(path="m.py", line=19, column=5, code="NPU914", message="import of `bitsandbytes`",
                      fixable=False, source="", severity="error")
    assert probes19.review([finding], text)[0].severity == "error"
    assert probes19.review([finding], _AVAILABILITY)[0].severity == "info"


_BACKEND_FALLBACK = '''\
import torch.distributed as dist

from mypkg.platforms import current_platform


def init_env(world_size: int = 1, rank: int = 0, backend: str = "nccl"):
    if backend == "nccl" and not current_platform.is_cuda_alike():
        backend = "gloo"
    dist.init_process_group(backend=backend, world_size=world_size, rank=rank)


def main(args):
    init_env(2, 0)
    init_env(2, 1, backend=current_platform.get_torch_distributed_backend_str())
'''


def _nccl_990(report: dict, path: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == "NPU990" and "nccl" in f["source"]]


def test_nccl_comparison_over_a_rewritten_default_is_no_port_work(tmp_path):
    """sglang-shaped (wave 19): `if backend == "nccl" and not <platform is CUDA>: backend = "gloo"`,
    the "nccl" default rewritten to the shim's backend and every call passing none or the platform's:
    on an NPU host the test is false. The string is a named "no port work" scope."""
    report = migrate_json(write_project(tmp_path, {"pstate.py": _BACKEND_FALLBACK}))
    assert not _nccl_990(report, "pstate.py"), report["findings"]
    assert any("no port work on an NPU host (NPU990)" in r and "compared with \"nccl\"" in r
               for r in _scopes(report, "pstate.py", 7)), report["skipped"]


def test_nccl_comparison_an_npu_host_may_still_meet_keeps_the_finding(tmp_path):
    """The nearest true cases: a caller passes a backend from elsewhere (it may be "nccl"), or the
    default is not the rewritten literal: the comparison may hold on an NPU host."""
    passed = _BACKEND_FALLBACK.replace("backend=current_platform.get_torch_distributed_backend_str()",
                                       "backend=args.backend")
    other = _BACKEND_FALLBACK.replace('backend: str = "nccl"', "backend: str = None")
    report = migrate_json(write_project(tmp_path, {"passed.py": passed, "other.py": other}))
    for path in ("passed.py", "other.py"):
        found = _nccl_990(report, path)
        assert found and found[0]["line"] == 7 and found[0]["severity"] != "info", (path, report["findings"])


def test_nccl_comparison_whose_else_raises_or_that_tests_inequality_is_not_read():
    """`if backend == "nccl": ... else: raise ValueError(...)` raises on an NPU host, and `!=`
    holds there: neither is an untaken branch."""
    import ast

    from npu_migrate import astcache

    for text, expected in (('if backend == "nccl" and x:\n    y = 1\n', "backend"),
                           ('if backend == "nccl":\n    y = 1\nelse:\n    raise ValueError(backend)\n', None),
                           ('if backend != "nccl":\n    y = 1\n', None)):
        tree = ast.parse(text)
        constant = next(n for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value == "nccl")
        found = probes19._comparison_if(constant, astcache.parents(tree))
        assert (found[0] if found else None) == expected, text


_NCCL_PIN = '''\
import ctypes
import os

import torch

_unpinned = None


def _lib_has_no_cache() -> bool:
    if torch.version.cuda is None:
        return False
    version = ctypes.c_int()
    try:
        ctypes.CDLL("libnccl.so.2").ncclGetVersion(ctypes.byref(version))
    except Exception:
        return False
    return version.value >= 22907


def pin(pins):
    global _unpinned
    saved = dict(pins)
    if _unpinned is not None:
        return
    _unpinned = saved if _lib_has_no_cache() else {}
    if _unpinned:
        os.environ["NCCL_NO_CACHE"] = ",".join(pins)


def pin_always(pins, wanted):
    chosen = saved_pins(pins) if wanted else {}
    if chosen:
        os.environ["NCCL_NO_CACHE"] = ",".join(pins)
    os.environ["NCCL_SOCKET_IFNAME"] = "eth0"
'''


def test_nccl_write_behind_a_value_an_npu_probe_empties_is_an_untaken_branch(tmp_path):
    """vLLM-shaped (wave 19): `_env = launch_env if _lib_has_no_cache() else {}` then `if _env:`,
    the probe False wherever torch has no CUDA: the NCCL_NO_CACHE write never runs on an NPU host (a
    named scope). The same write behind a value chosen by the caller's flag, and a write of an NCCL
    variable with an HCCL counterpart, stay reported."""
    report = migrate_json(write_project(tmp_path, {"pins.py": _NCCL_PIN}))
    assert any("in a branch an NPU host does not take" in r and "`_unpinned`" in r
               for r in _scopes(report, "pins.py", 27)), report["skipped"]
    kept = [f for f in report["findings"] if f["path"] == "pins.py" and f["code"] == "NPU602"]
    places = {line for f in kept for line in (f["line"], *(p[0] for p in f.get("also") or ()))}
    assert 27 not in places and {33, 34} <= places, kept


def test_a_checked_read_in_a_method_beside_the_gated_helper_still_counts():
    text = _GATED.replace("            y = _outer(x, self.fc1, self.fc2)\n",
                          "            y = _outer(x, self.fc1, self.fc2) + _gemm_w4(x, self.fc1.weight, x, 1)\n")
    assert _review(text)[0].severity == "info"
    unchecked = _GATED.replace("        return y\n", "        return y + _gemm_w4(x, self.fc1.weight, x, 1)\n")
    assert _review(unchecked)[0].severity == "error"
