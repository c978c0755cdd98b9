"""Round-14/15 audits (issue #16): SGLang shapes still read as false or redundant (AN#1, AL#40,
AN#20, AP#17, AM#33). Each test writes a small project of its own, checks that the false finding is
gone (a named skipped scope with its reason, or info with the reason) and that a nearby true case
stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project


def _findings(report: dict, path: str, code: str) -> list[dict]:
    return [f for f in report["findings"] if not f["fixable"] and f["path"] == path and f["code"] == code]


def _lines(finding: dict) -> set[int]:
    return {finding["line"], *(place[0] for place in finding.get("also", []))}


def test_nccl_only_settings_written_are_no_port_work(tmp_path):
    """AN#1: `os.environ["NCCL_CUMEM_ENABLE"] = ...` behind `"NCCL_CUMEM_ENABLE" not in os.environ`:
    HCCL never reads it and has no counterpart; a named scope. NCCL_SOCKET_IFNAME (HCCL_SOCKET_IFNAME)
    and a read of NCCL_CUMEM_ENABLE that decides what the code does stay reported."""
    root = write_project(tmp_path, {"engine.py": '''\
import os


def set_envs(args):
    if "NCCL_CUMEM_ENABLE" not in os.environ or args.symm:
        os.environ["NCCL_CUMEM_ENABLE"] = str(int(args.symm))
    if "NCCL_NVLS_ENABLE" not in os.environ or args.nvls:
        os.environ["NCCL_NVLS_ENABLE"] = str(int(args.nvls))
    os.environ["NCCL_SOCKET_IFNAME"] = args.ifname


def use_cumem():
    return os.environ.get("NCCL_CUMEM_ENABLE", "0") == "1"
'''})
    report = migrate_json(root)
    lines = set().union(*map(_lines, _findings(report, "engine.py", "NPU602")))
    assert not lines & {5, 6, 7, 8}, report["findings"]
    assert {9, 13} <= lines
    scopes = [s for s in report["skipped"] if s["path"] == "engine.py"
              and s["reason"].startswith("no port work on an NPU host (NPU602): an NCCL-only setting")]
    assert scopes and scopes[0]["start_line"] == 5 and scopes[0]["end_line"] == 8, report["skipped"]


_CHAIN = '''\
import torch

from mypkg.utils import is_cuda_alike, is_flashinfer_available

if is_flashinfer_available():
    from flashinfer import fp4_quantize
elif is_cuda_alike():
    from sgl_kernel import scaled_fp4_quant as fp4_quantize
else:
    fp4_quantize = None


def prepare(layer):
    from flashinfer import shuffle_matrix_a

    return shuffle_matrix_a(layer.weight, 64)


def quantize_fp4(x, scale):
    q, sf = fp4_quantize(x, scale, 16)
    sf = sf.float().to(torch.float8_e4m3fn).reshape(x.shape[0], -1)
    return q, sf


def quantize_fp8(x):
    scale = x.abs().amax() / 448.0
    return (x / scale).to(torch.float8_e4m3fn), scale
'''


def test_fp8_after_a_call_of_a_name_bound_only_to_a_failing_import_or_none(tmp_path):
    """AM#33: an FP8 cast of the scales after `fp4_quantize(...)`, a name the module binds only
    to a CUDA-only import (reported) or None: the call fails on an NPU host, so the FP8 line folds
    into the import's finding. FP8 compute in a function that does not call it stays NPU913."""
    root = write_project(tmp_path, {"runner.py": _CHAIN})
    report = migrate_json(root)
    imports = [f for f in _findings(report, "runner.py", "NPU911") if f["severity"] == "error"]
    assert imports and 21 in set().union(*map(_lines, imports)), report["findings"]
    fp8 = _findings(report, "runner.py", "NPU913")
    lines = set().union(*map(_lines, fp8))
    assert 21 not in lines and 27 in lines, fp8
    # the finding that stays names its own place, not a place folded elsewhere
    assert all(f["source"].split("(")[0] in f["message"] for f in fp8), fp8


def test_a_name_also_bound_otherwise_is_no_failing_callable(tmp_path):
    """The same shape where the `else:` binds a torch fallback: the call runs on an NPU host, and the
    FP8 after it stays reported."""
    text = _CHAIN.replace("    fp4_quantize = None\n", "    def fp4_quantize(x, scale, n):\n        return x, scale\n")
    root = write_project(tmp_path, {"runner.py": text})
    report = migrate_json(root)
    lines = set().union(*map(_lines, _findings(report, "runner.py", "NPU913")))
    assert 22 in lines, report["findings"]


def test_rebuilt_names_its_new_anchor():
    """AM#33: a merged finding whose first place moved away named that place's call; it names its
    new anchor once rebuilt."""
    from npu_migrate.findings import Finding
    from npu_migrate.folding import rebuilt

    finding = Finding(path="a.py", line=250, column=21, code="NPU913",
                      message="FP8 compute: `per_token_group_quant_fp8(...)` (also at line 387)",
                      fixable=False, source="per_token_group_quant_fp8(hidden_states, k)",
                      also=((387, 30, "torch.float8_e4m3fn"),))
    out = rebuilt(finding, [(387, 30, "torch.float8_e4m3fn")])
    assert out.line == 387 and "`torch.float8_e4m3fn`" in out.message and "per_token" not in out.message
    same = rebuilt(finding, [(250, 21, "per_token_group_quant_fp8(hidden_states, k)")])
    assert "`per_token_group_quant_fp8(...)`" in same.message


_DISPATCHER = '''\
import torch

from mypkg.utils import is_sm120_supported, should_use_flashinfer_cutlass_allgather, use_fast_path

try:
    if is_sm120_supported():
        from flashinfer import fp4_quantize
    else:
        from sgl_kernel import scaled_fp4_quant as fp4_quantize

    from flashinfer import fp4_quantize as fp4_quantize_flashinfer
except ImportError:
    fp4_quantize = None


class Dispatcher:
    def dispatch(self, x, scale):
        if should_use_flashinfer_cutlass_allgather():
            from flashinfer import nvfp4_block_scale_interleave

            q, sf = fp4_quantize_flashinfer(x, scale)
            return q, nvfp4_block_scale_interleave(sf)
        return x, None
'''

_COMBINER = '''\
from mypkg.utils import use_fast_path


def combine(x):
    if use_fast_path():
        from flashinfer import fused_combine

        return fused_combine(x)
    return x
'''


def test_import_behind_a_selector_of_the_package_backend(tmp_path):
    """AL#40: `if should_use_flashinfer_cutlass_allgather(): from flashinfer import ...` is behind a
    selector of flashinfer's own backend (a named scope), and the optional `try` at the top, whose
    `except ImportError` falls back, is no longer absorbed by it. The same import behind a selector
    that does not name the package stays an error."""
    root = write_project(tmp_path, {"dispatcher.py": _DISPATCHER, "combiner.py": _COMBINER})
    report = migrate_json(root)
    assert not [f for f in _findings(report, "dispatcher.py", "NPU911") if f["severity"] == "error"], report["findings"]
    kept = [f for f in _findings(report, "combiner.py", "NPU911") if f["severity"] == "error"]
    assert kept and kept[0]["line"] == 6, report["findings"]
    scopes = [s for s in report["skipped"] if s["path"] == "dispatcher.py" and "(NPU911)" in s["reason"]]
    assert any(s["start_line"] <= 9 and s["end_line"] >= 19 for s in scopes), report["skipped"]


_COMM = '''\
from mypkg.nccl_wrapper import NCCLLibrary


class Communicator:
    def __init__(self, path=None):
        try:
            self.nccl = NCCLLibrary(path)
        except Exception:
            self.disabled = True
            return
        self.disabled = False

    def all_reduce(self, buf, n):
        if self.disabled:
            return
        self.nccl.ncclAllReduce(buf, n)

    def group_start(self):
        self.nccl.ncclGroupStart()
'''


def test_unguarded_use_of_a_library_bound_only_where_it_loaded_stays_reported(tmp_path):
    """AP#17's shape, decided the other way at the merge: `group_start()` uses `self.nccl` without
    testing the flag the `except` sets. Where the library did not load, as on an NPU host, the call
    raises AttributeError, and whether every caller checks `disabled` first is for the callers (in
    SGLang, other files) to show: the unguarded use stays a finding (test_precision_disabled's rule);
    the flag-guarded use is a named scope."""
    report = migrate_json(write_project(tmp_path, {"comm.py": _COMM}))
    kept = set().union(*map(_lines, _findings(report, "comm.py", "NPU990")))
    assert 19 in kept and 16 not in kept, report["findings"]


def test_a_chain_without_a_none_branch_folds_nothing(tmp_path):
    """A chain with no `else: name = None` leaves the name unbound where no branch is taken: not the
    chained shape (fp8cpu's own reasons judge it), so the FP8 after its call stays its own finding."""
    text = _CHAIN.replace("else:\n    fp4_quantize = None\n", "")
    root = write_project(tmp_path, {"runner.py": text})
    report = migrate_json(root)
    imports = [f for f in _findings(report, "runner.py", "NPU911") if f["severity"] == "error"]
    assert not any(19 in _lines(f) for f in imports), report["findings"]


def test_rebuilt_import_finding_names_the_module_of_its_new_anchor():
    """Round-22 BI#2: a merged NPU911 whose first place (a guarded import of
    `flashinfer.comm.tp_finalize`) was dropped kept naming that module at its new anchor, a
    function-local import of `flashinfer.comm.cutedsl_finalize`."""
    from npu_migrate.findings import Finding
    from npu_migrate.folding import rebuilt

    message = ("C++/CUDA extension or CUDA-only compiled package: import from `flashinfer.comm.tp_finalize` "
               "(also at lines 19, 26)")
    finding = Finding(path="a.py", line=10, column=17, code="NPU911", message=message, fixable=False,
                      source="from flashinfer.comm.tp_finalize import (", also=(
                          (19, 13, "from flashinfer.comm.cutedsl_finalize import ("),
                          (26, 9, "from flashinfer.comm.tp_finalize import tp_finalize")))
    out = rebuilt(finding, [(19, 13, "from flashinfer.comm.cutedsl_finalize import ("),
                            (26, 9, "from flashinfer.comm.tp_finalize import tp_finalize")])
    assert out.line == 19 and "import from `flashinfer.comm.cutedsl_finalize`" in out.message, out.message
    assert "also at line 26" in out.message
