"""Round 19 (h79): branches an NPU host never takes, read as the migrated code runs there."""

from __future__ import annotations

import ast

from npu_migrate import capraise19
from tests.precision_helpers import migrate_json, moot_lines, write_project

UTILS = '''import torch


def is_sm_at_least_100():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (10, 0)
'''

COMPOUND = '''import torch

from pkg.utils import is_sm_at_least_100


def quantize(x):
    before = torch.empty(2, dtype=torch.float8_e4m3fn, device=x.device)
    if torch.cuda.is_available() and not is_sm_at_least_100():
        raise NotImplementedError("needs SM100")
    scale = torch.empty(4, dtype=torch.float8_e4m3fn, device=x.device)
    return x.to(torch.float8_e4m3fn), scale, before
'''


def _open(report, path):
    return {f["line"]: f for f in report["findings"] if not f["fixable"] and f["path"] == path}


def test_compound_capability_raise_with_rewritten_availability_scopes_what_follows(tmp_path):
    # AZ#24: the rewritten `npu_compat.is_available()` is true on an NPU host, the capability
    # check false: the function always raises there, the FP8 after it never runs
    source = COMPOUND.replace("    before = torch.empty(2, dtype=torch.float8_e4m3fn, device=x.device)\n", "")
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/k.py": source})
    report = migrate_json(root)
    moot = moot_lines(report["skipped"], "NPU913", "pkg/k.py")
    assert 9 in moot and 10 in moot, report
    assert "after a capability raise" in moot[9] and "once migrated" in moot[9]
    assert "NPU913" not in {f["code"] for f in _open(report, "pkg/k.py").values()}


def test_fp8_before_the_compound_raise_stays_reported(tmp_path):
    # nearest true case: an FP8 buffer BEFORE the raise runs on an NPU host; the file's one FP8
    # finding stands for it too and keeps its severity
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/k.py": COMPOUND})
    report = migrate_json(root)
    reported = [f for f in report["findings"] if f["code"] == "NPU913" and f["path"] == "pkg/k.py"]
    assert reported and reported[0]["severity"] == "error", report
    assert 7 in [reported[0]["line"], *(p[0] for p in reported[0].get("also") or ())]


def test_plain_capability_raise_with_helper_in_another_module_is_scoped(tmp_path):
    # the /tmp/t24 fixture: a plain `if not is_sm_at_least_100(): raise` with the helper imported
    plain = COMPOUND.replace("torch.cuda.is_available() and not", "not").replace(
        "    before = torch.empty(2, dtype=torch.float8_e4m3fn, device=x.device)\n", "").replace(", before", "")
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/k.py": plain})
    report = migrate_json(root)
    assert "NPU913" not in {f["code"] for f in _open(report, "pkg/k.py").values()}, report
    assert moot_lines(report["skipped"], "NPU913", "pkg/k.py")


def test_raise_only_on_capable_hardware_stays_reported(tmp_path):
    # nearest true case: `is_available() and is_sm_at_least_100()` is false on an NPU host (the
    # capability check fails), so the raise never fires and the FP8 code runs there
    source = COMPOUND.replace("and not is_sm_at_least_100()", "and is_sm_at_least_100()")
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/k.py": source})
    report = migrate_json(root)
    reported = [f for f in report["findings"] if f["code"] == "NPU913" and f["path"] == "pkg/k.py"]
    assert reported and reported[0]["severity"] == "error", report
    assert not moot_lines(report["skipped"], "NPU913", "pkg/k.py")


def test_availability_kept_as_written_does_not_make_the_raise_fire():
    # an availability check the migration left as written (NPU110) is False on an NPU host: the
    # raise never fires, nothing after it is scoped
    tree = ast.parse(COMPOUND)
    lines = COMPOUND.splitlines(keepends=True)
    assert capraise19.raise_blocks(tree, lines, frozenset()) == []
    blocks = capraise19.raise_blocks(tree, lines, frozenset({8}))
    assert [(b[0], b[1]) for b in blocks] == [(10, 11)]


def test_or_form_and_bare_reraise():
    source = '''import torch


def f(x):
    if torch.cuda.is_available() and torch.cuda.get_device_capability() < (9, 0):
        raise RuntimeError("needs Hopper")
    return x.to(torch.float8_e4m3fn)


def g(x):
    try:
        pass
    except Exception:
        if torch.cuda.is_available() and not is_sm_at_least_100():
            raise
        return x.to(torch.float8_e4m3fn)
'''
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    # the rewritten availability is true, the shim's capability (0, 0) < (9, 0) true there
    blocks = capraise19.raise_blocks(tree, lines, frozenset({5, 14}))
    assert [(b[0], b[1]) for b in blocks] == [(7, 7)]  # (a bare re-raise is no capability raise)


GATED = '''import torch
from torch.utils._triton import has_triton

from pkg.utils import is_sm_at_least_100

if has_triton():
    import triton
    import triton.language as tl

    @triton.jit
    def _scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(out_ptr + offs, x * 2, mask=offs < n)

    def scale(x):
        out = torch.empty_like(x)
        _scale_kernel[(1,)](x, out, x.numel(), BLOCK=128)
        return out

else:

    def scale(x):
        raise AssertionError("needs triton")


_fast_kernels = has_triton() and is_sm_at_least_100()

if _fast_kernels:
    import triton
    import triton.language as tl

    @triton.jit
    def _round_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        y = tl.inline_asm_elementwise(
            asm="cvt.rn.satfinite.e4m3x2.f32 $0, $1, $1;",
            constraints="=h,r",
            args=[x],
            dtype=tl.int16,
            is_pure=True,
            pack=1,
        )
        tl.store(x_ptr + offs, y)
'''


def _triton_finding(report):
    return next(f for f in report["findings"] if f["code"] == "NPU910" and f["path"] == "pkg/kern.py")


def test_ptx_in_a_block_an_npu_host_never_runs_does_not_keep_the_gated_kernels_error(tmp_path):
    # BA#36: the kernels under `if has_triton(): ... else: <stubs>` hold no assembly; the PTX sits
    # under `if _fast_kernels:` (SM100 only), a block already named as not run on an NPU host
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/kern.py": GATED})
    finding = _triton_finding(migrate_json(root))
    assert finding["severity"] == "info" and "Triton-availability test" in finding["message"], finding


def test_ptx_in_the_gated_kernels_own_block_keeps_the_error(tmp_path):
    # nearest true case: the assembly is in the kernels' own block, which Triton-Ascend would run
    source = GATED.replace("        tl.store(out_ptr + offs, x * 2, mask=offs < n)\n",
                           "        y = tl.inline_asm_elementwise(asm=\"mov.b32 $0, $1;\", constraints=\"=r,r\",\n"
                           "                                      args=[x], dtype=tl.int32, is_pure=True, pack=1)\n"
                           "        tl.store(out_ptr + offs, y, mask=offs < n)\n")
    assert source != GATED
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/kern.py": source})
    finding = _triton_finding(migrate_json(root))
    assert finding["severity"] == "error"
    # (session 32, round-22 BJ#33: the kept error says why, naming the guard and the assembly)
    assert "kept an error because the kernels use inline assembly (`tl.inline_asm_elementwise`, line 14)" \
        in finding["message"] and "`has_triton()`" in finding["message"], finding["message"]


def test_ptx_in_a_module_level_helper_keeps_the_error(tmp_path):
    # a module-level `@triton.jit` helper with PTX, outside every untaken block: it may run
    source = GATED.replace("_fast_kernels = has_triton() and is_sm_at_least_100()", "_fast_kernels = has_triton()")
    assert source != GATED
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/kern.py": source})
    assert _triton_finding(migrate_json(root))["severity"] == "error"


LAMBDA_SKIP = '''import pytest
import torch

from proj import ops
from proj.platforms import current_platform


@pytest.mark.skipif(
    (lambda x: x is None or not ops.grouped_gemm_supported(x.to_int()))(
        current_platform.get_device_capability()),
    reason="grouped gemm needs SM90+",
)
def test_grouped_gemm_graph():
    graph = torch.cuda.CUDAGraph()
    graph.replay()


@pytest.mark.skipif(
    (lambda x: x is not None and x.to_int() < 80)(current_platform.get_device_capability()),
    reason="old GPU",
)
def test_graph_on_any_device():
    graph = torch.cuda.CUDAGraph()
    graph.replay()
'''


def test_skipif_lambda_over_a_capability_none_on_npu_skips_the_test(tmp_path):
    # BB#4: the platform's capability is None on an NPU host: `x is None or ...` is true, the test
    # is skipped there; the second test's lambda is false there (nearest true case): it runs
    root = write_project(tmp_path, {"proj/__init__.py": "", "proj/ops.py": "", "proj/platforms.py": "",
                                    "tests/test_graph.py": LAMBDA_SKIP})
    report = migrate_json(root)
    moot = moot_lines(report["skipped"], "NPU202", "tests/test_graph.py")
    assert 14 in moot and "in a test that does not run on an NPU host" in moot[14], report
    graphs = {f["line"]: f for f in report["findings"] if f["code"] == "NPU202" and f["path"] == "tests/test_graph.py"}
    assert 23 in graphs and graphs[23]["severity"] == "error"


def test_lambda_binding_shapes():
    from npu_migrate import lambdas19, testscopes

    def truth(source):
        return testscopes._truth(ast.parse(source, mode="eval").body)

    assert truth("(lambda x: x is None or f(x))(current_platform.get_device_capability())") is True
    assert truth("(lambda x: x is not None and f(x))(current_platform.get_device_capability())") is False
    assert truth("(lambda x: x is None)(other.query())") not in (True, False)
    # keywords, defaults, *args, a nested lambda: not bound
    for source in ("(lambda x: x)(y=1)", "(lambda x=1: x)()", "(lambda *a: a)(1)", "(lambda x: (lambda x: x)(2))(1)"):
        assert lambdas19.bind(ast.parse(source, mode="eval").body) is None
