"""Round-16 audit (issue #16), flags16.py: CUDA-only imports under a module-level platform flag an
NPU host answers False, whose predicate is defined in another module of the project (AQ#14, AQ#15,
AQ#20, AQ#27), and the names they bind read where an NPU host goes (a NameError there)."""

from __future__ import annotations

from .precision_helpers import migrate_json, moot_lines, write_project

UTILS = '''\
import functools

import torch


@functools.lru_cache(maxsize=1)
def is_cuda():
    return torch.cuda.is_available() and torch.version.cuda


def is_hip() -> bool:
    return torch.version.hip is not None


def is_xpu() -> bool:
    return hasattr(torch, "xpu") and torch.xpu.is_available()


def use_intel_xpu_backend():
    return bool(1) and is_xpu()


def is_npu() -> bool:
    if not hasattr(torch, "npu"):
        return False
    return True
'''

FLAGS = '''\
from pkg.utils import is_cuda, is_npu

_is_cuda = is_cuda()
_is_npu = is_npu()
'''

MOE = '''\
import torch

from pkg.utils import is_cuda, is_hip, is_xpu, use_intel_xpu_backend

_is_cuda = is_cuda()
_is_hip = is_hip()
_is_xpu = is_xpu()
_use_xpu = use_intel_xpu_backend()

if _is_cuda:
    from sgl_kernel import silu_and_mul
elif _is_hip:
    from sgl_kernel import moe_sum
elif _is_xpu:
    from sgl_kernel import moe_sum_reduce


def act(x, out):
    if _is_cuda:
        silu_and_mul(x, out)
    elif _is_xpu:
        moe_sum_reduce(x, out)
    else:
        out.copy_(torch.nn.functional.silu(x))


def combine(x, out):
    if _is_cuda:
        out.copy_(x.sum(1))
    elif _is_hip:
        moe_sum(x, out)
    else:
        moe_sum(x, out)


def experts(x):
    if _use_xpu:
        from sgl_kernel import fused_experts

        return fused_experts(x)
    return x
'''

ATTN = '''\
from pkg.flags import _is_cuda, _is_npu

if _is_cuda:
    from sgl_kernel import concat_mla_k

if not _is_npu and _is_cuda:
    from sgl_kernel import merge_state

if _is_npu or _is_cuda:
    from sgl_kernel import rotary


def concat(k, out):
    if _is_cuda:
        concat_mla_k(k, out)
    return rotary(k)


def merged(a, b):
    return merge_state(a, b)
'''

PLAIN = '''\
from sgl_kernel import topk_softmax


def route(x):
    return topk_softmax(x)
'''


def _run(tmp_path, files: dict[str, str]):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/flags.py": FLAGS, **files})
    report = migrate_json(root)
    return [f for f in report["findings"] if not f["fixable"]], report["skipped"]


def _at(findings, path, line, code="NPU911"):
    return [f for f in findings if f["path"] == path and f["code"] == code and (
        f["line"] == line or any(a[0] == line for a in f.get("also") or ()))]


def test_imports_under_flags_bound_to_false_project_predicates_are_scopes(tmp_path):
    """AQ#14, AQ#20: `_is_cuda = is_cuda()`, `_is_xpu = is_xpu()` and `_use_xpu =
    use_intel_xpu_backend()` (false through `is_xpu()`) with the predicates in the project's
    utils: the imports under them never run on an NPU host; an unguarded import stays an error."""
    findings, skipped = _run(tmp_path, {"pkg/moe.py": MOE, "pkg/plain.py": PLAIN})
    moot = moot_lines(skipped, "NPU911", "pkg/moe.py")
    assert "`is_cuda()` is false or None there" in moot[11]
    assert "`is_xpu()` is false or None there" in moot[15]
    assert "`use_intel_xpu_backend()` is false or None there" in moot[38]
    for line in (11, 15, 38):
        assert not _at(findings, "pkg/moe.py", line)
    kept = _at(findings, "pkg/plain.py", 1)
    assert kept and kept[0]["severity"] == "error"


def test_flag_imported_from_the_module_that_binds_it(tmp_path):
    """AQ#15, AQ#27: `from pkg.flags import _is_cuda` with `_is_cuda = is_cuda()` in pkg/flags.py:
    the imports under `if _is_cuda:` and `if not _is_npu and _is_cuda:` are scopes (a name read in
    a function an NPU host may never call proves nothing); an import under a flag true on an NPU
    host (`_is_npu or _is_cuda`) stays an error."""
    findings, skipped = _run(tmp_path, {"pkg/attn.py": ATTN})
    moot = moot_lines(skipped, "NPU911", "pkg/attn.py")
    assert 4 in moot and "is_cuda()" in moot[4]
    assert 7 in moot
    assert not _at(findings, "pkg/attn.py", 4) and not _at(findings, "pkg/attn.py", 7)
    kept = _at(findings, "pkg/attn.py", 10)
    assert kept and kept[0]["severity"] == "error" and 10 not in moot


def test_name_bound_only_for_another_platform_read_in_the_npu_branch_is_reported(tmp_path):
    """AQ#20's note: `moe_sum` imported only under `elif _is_hip:` and read in the last `else:` of
    `if _is_cuda: ... elif _is_hip: ... else:`, the branch an NPU host takes: a NameError there,
    reported at the read (error); the read under `elif _is_hip:` is not."""
    findings, _skipped = _run(tmp_path, {"pkg/moe.py": MOE})
    reads = [f for f in findings if f["path"] == "pkg/moe.py" and f["code"] == "NPU911" and f["severity"] == "error"]
    assert [f["line"] for f in reads] == [33]
    assert "NameError" in reads[0]["message"] and "`moe_sum`" in reads[0]["message"]


def test_cuda_runtime_call_inside_a_try_that_logs_and_goes_on_is_a_warning(tmp_path):
    """AQ#29: `torch.cuda.cudart().cudaProfilerStart()` inside `try` / `except Exception as e:
    print(...)` does not fail on an NPU host: a warning with the reason; the same call outside a
    `try` stays an error."""
    root = write_project(tmp_path, {"bench.py": '''\
import torch


def start_profile(modes, rank_print=print):
    if modes:  # (selected by the tool's name, `"CUDA_PROFILER" in modes`, it is info: wording21.py, BG#37)
        try:
            torch.cuda.cudart().cudaProfilerStart()
            rank_print("started")
        except Exception as e:
            rank_print(f"Failed to start CUDA profiler: {e}")
        return None
    return 1


def stop_profile():
    torch.cuda.cudart().cudaProfilerStop()


def quiet_stop():
    try:
        torch.cuda.cudart().cudaProfilerStop()
    except Exception:
        pass
'''})
    findings = [f for f in migrate_json(root)["findings"] if f["code"] == "NPU202"]
    by_line = {f["line"]: f for f in findings}
    assert by_line[7]["severity"] == "warning" and "`except Exception` only reports or ignores the failure" in by_line[7]["message"]
    assert by_line[16]["severity"] == "error"
    # (the two caught places are one warning, vLLM's alloc_conf.py shape: not one warning each)
    assert len(findings) == 2 and [a[0] for a in by_line[7].get("also") or []] == [21], findings


def test_backend_from_a_project_helper_with_an_hccl_branch(tmp_path):
    """AQ#24: `init_process_group(backend=helper.get_process_group_backend())` where the helper of
    a directly imported module returns "hccl" for the NPU: resolved (a named scope); a helper
    without such a branch keeps its NPU304 warning."""
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/helper.py": '''\
import torch


def get_process_group_backend() -> str:
    if torch.accelerator.current_accelerator().type == "npu":
        return "hccl"
    elif torch.accelerator.current_accelerator().type == "cuda":
        return "nccl"
    return "gloo"


def get_other_backend() -> str:
    return load_setting("backend")


def load_setting(name):
    return name
''', "pkg/interface.py": '''\
from torch.distributed import init_process_group

from . import helper


def setup():
    init_process_group(backend=helper.get_process_group_backend())


def setup_other():
    init_process_group(backend=helper.get_other_backend())
'''})
    report = migrate_json(root)
    lines = [f["line"] for f in report["findings"] if f["code"] == "NPU304" and f["severity"] != "info"]
    assert lines == [11]
    scopes = [s for s in report["skipped"] if s.get("path") == "pkg/interface.py" and s.get("start_line") == 7]
    assert scopes and "get_process_group_backend" in scopes[0]["reason"]


def test_cuda_key_echoing_an_argument_of_its_name_is_a_label(tmp_path):
    """AQ#4: `{"cpu": cpu, "cuda": cuda, "xpu": xpu, ...}`, a record of the function's arguments
    each under its own name: "cuda" names the boolean `cuda`, not reported; a per-device table
    looked up by a tensor's device type is still reported."""
    root = write_project(tmp_path, {"prof.py": '''\
def setup_profiler(enabled, output_dir, cpu, cuda, xpu, profile_memory):
    cfg = dict({"enabled": enabled, "cpu": cpu, "cuda": cuda, "xpu": xpu, "profile_memory": profile_memory})
    return cfg


def per_device(x):
    table = {"cpu": 1, "cuda": 2}
    return table[x.device.type]
'''})
    lines = [f["line"] for f in migrate_json(root)["findings"] if f["code"] == "NPU990"]
    assert lines == [7]


def test_a_read_inside_a_function_defined_in_the_taken_branch_is_no_certain_name_error(tmp_path):
    """The `else:` of `if _is_hip:` at module level defines a function that reads a name imported
    only under `if _is_cuda:`: whether an NPU host calls it is not known, so no NameError finding;
    the import is a scope, as the file's own flag makes it."""
    findings, _skipped = _run(tmp_path, {"pkg/quant.py": '''\
from pkg.utils import is_cuda, is_hip

_is_cuda = is_cuda()
_is_hip = is_hip()

if _is_cuda:
    from sgl_kernel import per_token_quant

if _is_hip:
    def quant(x):
        return x
else:
    def quant(x):
        return per_token_quant(x)
'''})
    assert not [f for f in findings if f["path"] == "pkg/quant.py" and f["code"] == "NPU911"]
    assert 7 in moot_lines(_skipped, "NPU911", "pkg/quant.py")


def test_gated_import_with_only_folded_uses_left_is_a_scope_and_its_fp8_uses_their_own(tmp_path):
    """A merged NPU911 whose only import is gated but which also stands for FP8 uses of the
    package's ops in a class: the import is a scope (round 17, AT#36/AT#32: flags16.unfold_fp8), and
    the FP8 uses, which no longer stand under the import's message, are their own NPU913 error
    (never dropped); a lone gated import is a scope."""
    findings, skipped = _run(tmp_path, {"pkg/model.py": '''\
import torch

from pkg.utils import is_cuda

if is_cuda():
    from sgl_kernel import bmm_fp8


class Attention(torch.nn.Module):
    def forward(self, q, w, scale):
        if w.dtype == torch.float8_e4m3fn:
            q8 = q.to(torch.float8_e4m3fn)
            return bmm_fp8(q8, w, scale, scale, torch.bfloat16)
        return q @ w
''', "pkg/lone.py": '''\
from pkg.utils import is_cuda

_is_cuda = is_cuda()

if _is_cuda:
    from sgl_kernel import bmm_fp8


def mm(a, b):
    if _is_cuda:
        return bmm_fp8(a, b)
    return a @ b
'''})
    assert not [f for f in findings if f["path"] == "pkg/model.py" and f["code"] == "NPU911"]
    assert 6 in moot_lines(skipped, "NPU911", "pkg/model.py")
    fp8 = [f for f in findings if f["path"] == "pkg/model.py" and f["code"] == "NPU913"]
    assert [(f["line"], f["severity"]) for f in fp8] == [(12, "error")], fp8
    assert 6 in moot_lines(skipped, "NPU911", "pkg/lone.py")


def test_flag_bound_twice_alike_and_a_rocm_modules_own_predicate(tmp_path):
    """SGLang's topk.py binds `_is_xpu = is_xpu()` twice (the same call): still a flag; its
    ngram_info.py asks `is_hip()`, which a ROCm module (`rocm_decode.py`) also defines by asking
    Triton's backend: that definition is the ROCm module's own, the predicate stays false. A split
    place names its own module; an import outside every block stays an error."""
    findings, skipped = _run(tmp_path, {"pkg/topk.py": '''\
from pkg.utils import is_cuda, is_hip, is_xpu

_is_cuda = is_cuda()
_is_xpu = is_xpu()
_is_xpu = is_xpu()

if _is_cuda or _is_xpu:
    from sgl_kernel import topk_softmax

if not _is_cuda:
    try:
        from vllm import _custom_ops as ops
    except ImportError:
        ops = None
''', "pkg/rocm_decode.py": '''\
import triton


def is_hip():
    return triton.runtime.driver.active.get_current_target().backend == "hip"
''', "pkg/spec.py": '''\
from pkg.utils import is_cuda, is_hip

if is_cuda():
    from sgl_kernel import verify_tree
elif is_hip():
    from sgl_kernel import verify_tree_hip
'''})
    assert 8 in moot_lines(skipped, "NPU911", "pkg/topk.py")
    assert not _at(findings, "pkg/topk.py", 8)
    spec = moot_lines(skipped, "NPU911", "pkg/spec.py")
    assert 4 in spec and 6 in spec
    assert not [f for f in findings if f["path"] == "pkg/spec.py" and f["code"] == "NPU911"]
    kept = [f for f in findings if f["path"] == "pkg/topk.py" and f["code"] == "NPU911" and f["severity"] != "info"]
    for f in kept:
        assert "`sgl_kernel`" not in f["message"] or f["line"] == 8
