"""Round 22 (h95, issue #16): guards that dominate later code, and Triton-availability guards read
the same way everywhere (dominators22.py). Each false case is paired with the nearest true case
that stays reported."""

from __future__ import annotations

from .precision_helpers import findings_at, migrate_json, moot_lines, with_as_written, write_project
from .test_h71 import _open_lines, _project
from .test_precision_platforms import NPU_BACKEND


def _codes(report: dict, path: str, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code]


# ------------------------------------------------------------------------------------------------
# BK#26: a constructor that raises where a CUDA-only package is missing

PRECISION = '''\
import torch
from lightning_utilities.core.imports import RequirementCache

_TE_AVAILABLE = RequirementCache("transformer_engine>=0.11.0")


class TEPrecision:
    def __init__(self, dtype):
        if not _TE_AVAILABLE:
            raise ModuleNotFoundError(str(_TE_AVAILABLE))
        self.dtype = dtype

    def module_init_context(self):
        import transformer_engine.pytorch as te

        return te.fp8_autocast(enabled=True)

    def convert_module(self, module):
        _swap_layers(module)
        return module

    @staticmethod
    def recipe():
        from transformer_engine.common.recipe import DelayedScaling

        return DelayedScaling()


def _swap_layers(module):
    import transformer_engine.pytorch as te

    for name, child in module.named_children():
        if isinstance(child, torch.nn.Linear):
            setattr(module, name, te.Linear(child.in_features, child.out_features))
        _swap_layers(child)


def convert_all(module):
    import transformer_engine.pytorch as te

    return te.Linear(1, 1)
'''


def test_lazy_imports_in_methods_of_a_class_whose_constructor_raises_are_scoped(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/te_precision.py": PRECISION}))
    scopes = moot_lines(report["skipped"], path="pkg/te_precision.py")
    # a method and a private helper only the methods call: never reached on an NPU host
    assert 14 in scopes and 30 in scopes, (scopes, report["findings"])
    assert "`TEPrecision.__init__` raises first where `transformer_engine` is missing (line 9" in scopes[14]
    assert "`TEPrecision.module_init_context` never runs" in scopes[14]
    assert "`_swap_layers`, called only from its methods, never runs there" in scopes[30]
    assert "(line 9: `if not _TE_AVAILABLE: raise ModuleNotFoundError(...)`)" in scopes[14]
    # nearest true cases: a static method runs without an instance, a public function is the users'
    kept = {n for f in report["findings"] if f["path"] == "pkg/te_precision.py" and not f["fixable"]
            and f["severity"] != "info" for n in (f["line"], *(p[0] for p in f.get("also") or ()))}
    assert {24, 39} <= kept, report["findings"]
    assert not {14, 30} & kept


def test_without_the_constructor_guard_the_lazy_imports_stay_reported(tmp_path):
    source = PRECISION.replace("        if not _TE_AVAILABLE:\n            raise ModuleNotFoundError(str(_TE_AVAILABLE))\n", "")
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/te_precision.py": source}))
    kept = {n for f in report["findings"] if f["path"] == "pkg/te_precision.py" and not f["fixable"]
            and f["severity"] != "info" for n in (f["line"], *(p[0] for p in f.get("also") or ()))}
    assert {12, 28} <= kept, report["findings"]


def test_a_guard_of_a_package_an_npu_host_may_have_stays_reported(tmp_path):
    # xformers installs on an NPU host: the constructor may pass there
    source = (PRECISION.replace('RequirementCache("transformer_engine>=0.11.0")', 'RequirementCache("xformers")'))
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/te_precision.py": source}))
    assert 14 not in moot_lines(report["skipped"], path="pkg/te_precision.py")


# ------------------------------------------------------------------------------------------------
# BJ#1: the untaken arm of a conditional expression on a platform predicate

BENCH = '''\
import torch

from pkg.platforms import current_platform


def capture(fn):
    graph = (torch.cuda.CUDAGraph() if current_platform.is_cuda_alike() else {other})
    return graph
'''


def test_cuda_arm_of_a_platform_conditional_moves_to_the_other_vendors_arm(tmp_path):
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/platforms.py": "current_platform = None\n",
        "bench/bench_graph.py": BENCH.format(other="torch.xpu.XPUGraph()")}))
    [finding] = _codes(report, "bench/bench_graph.py", "NPU202")
    # the NPU host takes the `else` arm: another vendor's API that fails there (a silent miss before)
    assert finding["severity"] == "error" and finding["source"] == "torch.xpu.XPUGraph()", finding
    assert finding["column"] > 50
    assert "`torch.xpu.XPUGraph()` is what an NPU host runs here" in finding["message"]
    assert "CUDA arm (`torch.cuda.CUDAGraph`, line 7) is not reached there" in finding["message"]


def test_cuda_arm_with_a_portable_other_arm_is_a_scope(tmp_path):
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/platforms.py": "current_platform = None\n",
        "bench/bench_graph.py": BENCH.format(other="None")}))
    assert not [f for f in _codes(report, "bench/bench_graph.py", "NPU202") if f["severity"] != "info"]
    scopes = moot_lines(report["skipped"], "NPU202", "bench/bench_graph.py")
    assert 7 in scopes and "the true arm of the conditional expression on `current_platform.is_cuda_alike()`" \
        in scopes[7], scopes


def test_cuda_arm_an_npu_host_takes_stays_reported(tmp_path):
    # `torch.cuda.is_available()` is true on an NPU host once migrated: the CUDA graph is reached
    report = migrate_json(write_project(tmp_path, {
        "bench/bench_graph.py": "import torch\n\n\ndef capture():\n"
                                "    return torch.cuda.CUDAGraph() if torch.cuda.is_available() else None\n"}))
    [finding] = _codes(report, "bench/bench_graph.py", "NPU202")
    assert finding["severity"] == "error" and finding["line"] == 5


# ------------------------------------------------------------------------------------------------
# BI#15: a torch reference in a module-level Triton-availability block

MX = '''\
import torch
from torch.utils._triton import has_triton

from pkg.mx import to_mx

if has_triton():
    import triton
    import triton.language as tl

    def to_fp8_reference(x, block_size=32):
        scale, data = to_mx(x.t().contiguous(), torch.float8_e4m3fn, block_size)
        return data.t(), scale

    @triton.jit
    def _quant_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n), mask=i < n)

    def quant(x):
        y = torch.empty_like(x)
        _quant_kernel[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
        return y

else:

    def to_fp8_reference(x, block_size=32):
        raise AssertionError("needs triton")

    def quant(x):
        raise AssertionError("needs triton")
'''


def test_fp8_of_a_reference_defined_only_in_the_triton_block_folds_into_its_note(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/mx.py": "def to_mx(x, d, b):\n    return x, x\n",
                                                   "pkg/kernels.py": MX}))
    assert not _codes(report, "pkg/kernels.py", "NPU913"), report["findings"]
    [note] = _codes(report, "pkg/kernels.py", "NPU910")
    assert note["severity"] == "info" and 11 in [p[0] for p in note.get("also") or ()], note
    assert "handed to `to_mx` by `to_fp8_reference` (line 10)" in note["message"]


def test_fp8_of_a_reference_the_else_does_not_rebind_stays_reported(tmp_path):
    source = MX.replace("    def to_fp8_reference(x, block_size=32):\n        raise AssertionError(\"needs triton\")\n\n", "")
    cast = MX.replace("to_mx(x.t().contiguous(), torch.float8_e4m3fn, block_size)",
                      "x, x.to(torch.float8_e4m3fn)")
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/mx.py": "def to_mx(x, d, b):\n    return x, x\n",
                                                   "pkg/kernels.py": source, "pkg/kernels2.py": cast}))
    assert [f["severity"] for f in _codes(report, "pkg/kernels.py", "NPU913")] == ["error"]
    assert [f["severity"] for f in _codes(report, "pkg/kernels2.py", "NPU913")] == ["error"]


# ------------------------------------------------------------------------------------------------
# BI#33: the tuning helper of a guarded kernel builder

BSR = '''\
import torch
from torch.utils._triton import has_triton


def tune_addmm(x, w):
    import triton

    return triton.testing.do_bench(lambda: addmm(x, w, tune=False))


def _build_impls():
    if not has_triton():
        return None

    import triton
    import triton.language as tl

    @triton.jit
    def _addmm_kernel(x_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n), mask=i < n)

    return _addmm_kernel


def addmm(x, w, tune=True):
    impls = _build_impls()
    if impls is None:
        raise AssertionError("unsupported without triton")
    import triton.language as tl  # noqa: F401
    if tune:
        tune_addmm(x, w)
    impls[(1,)](x, x.numel(), BLOCK=128)
    return x
'''


def test_a_tuning_helper_called_only_after_the_availability_check_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/bsr.py": BSR}))
    [finding] = _codes(report, "pkg/bsr.py", "NPU910")
    assert finding["severity"] == "info", finding
    assert "guarded by the Triton-availability test at the top of `_build_impls`" in finding["message"]
    assert "the lazy Triton import of `tune_addmm` (line 6), a helper this module calls only after that check " \
           "(line 32)" in finding["message"]
    # (the lazy import after `addmm`'s own check is no helper's)
    assert "of `addmm`" not in finding["message"] and 30 in [p[0] for p in finding.get("also") or ()]


def test_a_tuning_helper_also_called_before_the_check_stays_an_error(tmp_path):
    source = BSR + "\n\ndef warm(x, w):\n    return tune_addmm(x, w)\n"
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/bsr.py": source}))
    assert [f["severity"] for f in _codes(report, "pkg/bsr.py", "NPU910")] == ["error"]


# ------------------------------------------------------------------------------------------------
# BJ#20: a flag-guarded import whose only callers sit under the same flag

_GATED = ("import torch\n\nfrom pkg.wrapper.configurer import ENABLE_FAST_GEMM\n\n"
          "if ENABLE_FAST_GEMM:\n    import deep_gemm\n\n\n"
          "def _mm_fast(a, b):\n    return deep_gemm.mm(a, b)\n\n\n"
          "def mm(a, b):\n    if torch.is_tensor(a) and ENABLE_FAST_GEMM:\n        return _mm_fast(a, b)\n"
          "    return a @ b\n")


def test_an_import_read_only_by_functions_called_under_the_same_flag_is_a_scope(tmp_path):
    report = _project(tmp_path, extra={"pkg/gemm.py": _GATED})
    scopes = moot_lines(report["skipped"], "NPU911", "pkg/gemm.py")
    assert 6 in scopes, (scopes, findings_at(report, "pkg/gemm.py", "NPU911"))
    assert "`_mm_fast` (line 15" in scopes[6] and "ENABLE_FAST_GEMM" in scopes[6]
    assert 6 not in _open_lines(report, "pkg/gemm.py", "NPU911")


def test_a_reader_called_outside_the_flag_keeps_the_info(tmp_path):
    ungated = _GATED + "\n\ndef mm_direct(a, b):\n    return _mm_fast(a, b)\n"
    elsewhere = _GATED.replace("_mm_fast", "mm_fast")
    report = _project(tmp_path, extra={"pkg/gemm.py": ungated, "pkg/gemm2.py": elsewhere,
                                       "pkg/user.py": "from pkg.gemm2 import mm_fast\n\n\ndef f(a):\n    return mm_fast(a, a)\n"})
    for path in ("pkg/gemm.py", "pkg/gemm2.py"):
        assert 6 not in moot_lines(report["skipped"], "NPU911", path), path
        kept = [f for f in findings_at(report, path, "NPU911").values() if f["line"] == 6]
        assert kept and "NameError" in kept[0]["message"], (path, kept)


# ------------------------------------------------------------------------------------------------
# BK#40: a Triton-Ascend project's kernels with TMA descriptors behind a probe

TMA_KERNEL = '''\
import torch
import triton
import triton.language as tl

{descriptor}


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + i, tl.load(src + i, mask=i < n), mask=i < n)


def copy(x, use_tma=False):
    y = torch.empty_like(x)
    desc = TensorDescriptor(x, x.shape, x.stride(), [128]) if use_tma else None
    _copy[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
    return y, desc
'''

PROBED = '''try:
    from triton.tools.tensor_descriptor import TensorDescriptor

    _has_descriptors = True
except ImportError:
    _has_descriptors = False'''


def test_probed_tma_descriptors_in_a_triton_ascend_project_get_the_verify_note(tmp_path):
    report = migrate_json(write_project(tmp_path, {
        "pkg/ops/tma.py": TMA_KERNEL.format(descriptor=PROBED),
        "pkg/ops/bare.py": TMA_KERNEL.format(descriptor="from triton.tools.tensor_descriptor import TensorDescriptor"),
        "pkg/backend/npu/attention.py": NPU_BACKEND,
    }))
    assert not [f for f in _codes(report, "pkg/ops/tma.py", "NPU910") if f["severity"] != "info"]
    kept = [f for f in with_as_written(report) if f["code"] == "NPU910" and f["path"] == "pkg/ops/tma.py"]
    assert kept and "the project runs Triton on its own NPU backend" in kept[0]["message"], kept
    assert "fails to import" not in kept[0]["message"]
    assert "`TensorDescriptor`, first used at line 21" in kept[0]["message"]
    assert "sets `_has_descriptors`" in kept[0]["message"]
    # nearest true case: an unprobed descriptor import keeps the error
    assert [f["severity"] for f in _codes(report, "pkg/ops/bare.py", "NPU910")] == ["error"]
