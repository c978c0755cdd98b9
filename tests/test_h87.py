"""Round 21 (issue #16): cross-file capability predicates and flags (helper h87). A function's
own flag parameter that every call of the run passes a value false on an NPU host (flagargs21.py,
read by flagcalls19.py): `if scale_ue8m0: from deep_gemm import ...` where the callers pass a
module constant another module computes from an SM check and an import probe. Each false case is
paired with the nearest true one that stays reported."""

from .precision_helpers import findings_at, migrate_json, moot_lines, write_project

_CONFIGURER = """\
import torch


def _compute_enable():
    if torch.cuda.get_device_capability()[0] < 9:
        return False
    try:
        import deep_gemm  # noqa: F401
    except ImportError:
        return False
    return True


ENABLE_FAST_GEMM = _compute_enable()
FAST_GEMM_SCALE = ENABLE_FAST_GEMM and torch.cuda.get_device_capability()[0] >= 10
"""

_KERNEL = """\
import torch


def _quant_raw(x, group_size, scale_ue8m0: bool = False):
    y = x * group_size
    if scale_ue8m0:
        from deep_gemm import transform_sf

        y = transform_sf(y)
    return y


def quant(x, group_size, scale_ue8m0: bool = False):
    return _quant_raw(x, group_size, scale_ue8m0=scale_ue8m0)


def quant_opt(x, use_fast=False):
    if use_fast:
        from deep_gemm import fast_quant

        return fast_quant(x)
    return x
"""

_RUNNER = """\
from pkg import wrapper
from pkg.kernel import quant, quant_opt


def run(x, args):
    a = quant(x, 128, scale_ue8m0=wrapper.FAST_GEMM_SCALE)
    b = quant(x, 64)
    return quant_opt(a + b, use_fast=args.use_fast)
"""


def _project(tmp_path, extra: dict | None = None):
    files = {"pkg/__init__.py": "", "pkg/wrapper/__init__.py": "from .configurer import *\n",
             "pkg/wrapper/configurer.py": _CONFIGURER, "pkg/kernel.py": _KERNEL, "pkg/runner.py": _RUNNER,
             **(extra or {})}
    return migrate_json(write_project(tmp_path, files))


def _open_lines(report: dict, path: str, code: str) -> set[int]:
    return {n for f in findings_at(report, path, code).values() if f["severity"] != "info"
            for n in (f["line"], *(line for line, _c, _s in f.get("also") or ()))}


def test_a_parameter_every_caller_passes_a_flag_false_on_npu_is_a_named_scope(tmp_path):
    """`if scale_ue8m0: from deep_gemm import ...` in `_quant_raw`, whose only caller hands on its
    own parameter, which the other module passes `wrapper.FAST_GEMM_SCALE` (False there) or leaves
    at its default: a named scope naming the parameter, the call and the flag. The same import
    under a parameter a user option sets (`use_fast=args.use_fast`) stays an error."""
    report = _project(tmp_path)
    scopes = moot_lines(report["skipped"], "NPU911", "pkg/kernel.py")
    assert 7 in scopes, (scopes, report["findings"])
    assert "`scale_ue8m0` of `_quant_raw` is False there at every call of the run (1 call, e.g. pkg/runner.py:6" in scopes[7]
    assert "pkg/runner.py:6 passes `wrapper.FAST_GEMM_SCALE`" in scopes[7]
    assert _open_lines(report, "pkg/kernel.py", "NPU911") == {19}


def test_a_caller_passing_true_or_handing_the_function_on_keeps_the_error(tmp_path):
    """One call passing `scale_ue8m0=True`, or the function handed on as a value (its callers
    unseen), and the import under `if scale_ue8m0:` stays reported."""
    true_call = {"pkg/other.py": "from pkg.kernel import quant\n\n\ndef f(x):\n    return quant(x, 8, True)\n"}
    report = _project(tmp_path, true_call)
    assert {7, 19} <= _open_lines(report, "pkg/kernel.py", "NPU911")
    assert not moot_lines(report["skipped"], "NPU911", "pkg/kernel.py")


def test_a_function_handed_on_as_a_value_keeps_the_error(tmp_path):
    handed = {"pkg/other.py": "import functools\n\nfrom pkg.kernel import quant\n\nQ = functools.partial(quant, group_size=8)\n"}
    report = _project(tmp_path, handed)
    assert {7, 19} <= _open_lines(report, "pkg/kernel.py", "NPU911")


def test_a_flag_another_file_sets_keeps_the_error(tmp_path):
    """`wrapper.FAST_GEMM_SCALE = True` in a file of the run: the flag may be on, nothing lowered."""
    setter = {"pkg/setup_fast.py": "from pkg import wrapper\n\nwrapper.FAST_GEMM_SCALE = True\n"}
    report = _project(tmp_path, setter)
    assert {7, 19} <= _open_lines(report, "pkg/kernel.py", "NPU911")


# ------------------------------------------------------------------ a predicate called with arguments
_SUPPORT = """\
import torch

HAS_FAST = True


def fast_supported(x):
    return HAS_FAST and torch.version.cuda is not None and x.is_cuda


def maybe_supported(x):
    return HAS_FAST and x.is_cuda
"""

_DISPATCH = """\
import torch

from pkg.support import fast_supported, maybe_supported


def forward(x):
    if fast_supported(x):
        from deep_gemm import fast_op

        return fast_op(x)
    return x * 2


def forward2(x):
    if maybe_supported(x):
        from deep_gemm import other_op

        return other_op(x)
    return x * 2
"""


def test_a_predicate_false_on_npu_for_any_argument_decides_the_block(tmp_path):
    """`if fast_supported(x):` where the other module's function returns `... and torch.version.cuda
    is not None and x.is_cuda` (False there whatever `x` is): the lazy import in its body is a
    named scope naming the function. `maybe_supported(x)`, whose answer depends on `x` alone,
    keeps the error."""
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/support.py": _SUPPORT,
                                                   "pkg/dispatch.py": _DISPATCH}))
    scopes = moot_lines(report["skipped"], "NPU911", "pkg/dispatch.py")
    assert 8 in scopes and "the project's `fast_supported()` in pkg/support.py returns False there" in scopes[8], scopes
    assert _open_lines(report, "pkg/dispatch.py", "NPU911") == {16}


# ------------------------------------------------------------------ a Triton flag imported from a probing sibling
_PROBE_MODULE = """\
try:
    import triton
    import triton.language as tl
    from triton.backends import backends

    _TRITON_AVAILABLE = any(b.driver.is_active() for b in backends.values())
except Exception:
    triton = None
    tl = None
    _TRITON_AVAILABLE = False
"""

_EP_KERNELS = """\
import torch

from pkg.ops._triton import _TRITON_AVAILABLE, tl, triton

if _TRITON_AVAILABLE:

    @triton.jit
    def _fill_kernel(x_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        tl.store(x_ptr + pid, n)


def fill_cpu(x):
    return x.fill_(1)


def fill(x):
    if not _TRITON_AVAILABLE:
        return fill_cpu(x)
    _fill_kernel[(x.numel(),)](x, 1, BLOCK=128)
    return x


def gather(x):
    _fill_kernel[(triton.cdiv(x.numel(), 128),)](x, 2, BLOCK=128)
    return x
"""


def _triton_project(tmp_path, kernels: str = _EP_KERNELS, extra: dict | None = None):
    files = {"pkg/__init__.py": "", "pkg/ops/__init__.py": "", "pkg/ops/_triton.py": _PROBE_MODULE,
             "pkg/moe/__init__.py": "", "pkg/moe/ep_kernels.py": kernels,
             "pkg/moe/layer.py": "from pkg.moe.ep_kernels import fill\n\n\ndef run(x):\n    return fill(x)\n",
             **(extra or {})}
    return migrate_json(write_project(tmp_path, files))


def test_kernels_under_a_triton_flag_a_sibling_probe_clears_are_info(tmp_path):
    """`from pkg.ops._triton import _TRITON_AVAILABLE, triton, tl` and the kernel only under `if
    _TRITON_AVAILABLE:`: info naming the probing module, and `gather`, which launches the kernel
    outside the block (a NameError there without Triton if called)."""
    report = _triton_project(tmp_path)
    found = findings_at(report, "pkg/moe/ep_kernels.py", "NPU910")
    assert found and all(f["severity"] == "info" for f in found.values()), found
    message = next(iter(found.values()))["message"]
    assert "imported from pkg/ops/_triton.py, which imports Triton in a `try`" in message
    assert "`gather` (lines 24)" in message or "`gather` (line" in message
    assert "`fill` (" not in message


def test_a_kernel_outside_the_block_or_a_flag_set_without_try_keeps_the_error(tmp_path):
    """A kernel defined outside `if _TRITON_AVAILABLE:`, or a sibling that binds the flag without a
    `try` clearing it, keeps the NPU910 error."""
    outside = _EP_KERNELS + "\n\n@triton.jit\ndef _other_kernel(x_ptr):\n    pass\n"
    report = _triton_project(tmp_path, outside)
    assert any(f["severity"] == "error" for f in findings_at(report, "pkg/moe/ep_kernels.py", "NPU910").values())


def test_a_flag_bound_without_clearing_try_keeps_the_error(tmp_path):
    plain = {"pkg/ops/_triton.py": "import triton\nimport triton.language as tl\n\n_TRITON_AVAILABLE = True\n"}
    report = _triton_project(tmp_path, extra=plain)
    assert any(f["severity"] == "error" for f in findings_at(report, "pkg/moe/ep_kernels.py", "NPU910").values())


def test_a_kernel_name_imported_by_another_module_keeps_the_error(tmp_path):
    importer = {"pkg/moe/direct.py": "from pkg.moe.ep_kernels import _fill_kernel\n"}
    report = _triton_project(tmp_path, extra=importer)
    assert any(f["severity"] == "error" for f in findings_at(report, "pkg/moe/ep_kernels.py", "NPU910").values())


_PLAIN_KERNEL = """\
def quant_plain(x, scale=False):
    if scale:
        from deep_gemm import transform_sf

        return transform_sf(x)
    return x


def local_only(x, scale=False):
    if scale:
        from deep_gemm import transform_sf_local

        return transform_sf_local(x)
    return x


def user(x):
    return local_only(x, scale=False)
"""


def test_a_parameter_no_call_sets_is_info_not_a_scope(tmp_path):
    """Every call (in another module) passes `scale=False`: info saying no call of the run sets it
    (a caller outside the project may), not a named scope; a function only its own file calls so
    is left to that file's reading (unchanged)."""
    files = {"pkg/__init__.py": "", "pkg/plain.py": _PLAIN_KERNEL,
             "pkg/use.py": "from pkg.plain import quant_plain\n\n\ndef f(x):\n    return quant_plain(x, scale=False)\n"}
    report = migrate_json(write_project(tmp_path, files))
    found = findings_at(report, "pkg/plain.py", "NPU911")
    assert not moot_lines(report["skipped"], "NPU911", "pkg/plain.py")
    infos = [f for f in found.values() if f["severity"] == "info"]
    assert infos and infos[0]["line"] == 3, found
    assert "under a parameter no call of the run sets" in infos[0]["message"]
    assert "pkg/use.py:5 passes `False`" in infos[0]["message"]
    assert _open_lines(report, "pkg/plain.py", "NPU911") == {11}


# ------------------------------------------------------------------ a function another module calls only under a false gate
_FUSED = """\
from vllm_like.platforms import current_platform

MAX_M = 64


class FusedGemm:
    def __init__(self, rank):
        self.rank = rank

    def compile(self, key):
        import cutlass.cute as cute

        return cute.compile(key)

    def __call__(self, x):
        return self.compile(x)


def _get_kernel(rank) -> FusedGemm:
    return FusedGemm(rank)


def fused(x, rank):
    return _get_kernel(rank)(x)


def warmup(sizes, rank):
    if not current_platform.has_device_capability(90):
        return
    _get_kernel(rank).compile(sizes)


__all__ = ["fused", "warmup"]
"""

_LAYER = """\
import torch

from vllm_like.platforms import current_platform

from .fused import MAX_M, fused, warmup


class Layer:
    def __init__(self, w):
        self.rank = 4
        self._use_fused = w.dtype == torch.bfloat16 and current_platform.has_device_capability(90)
        warmup([1, 2], self.rank)

    def forward(self, x):
        use_fused = self._use_fused and x.shape[0] <= MAX_M
        if use_fused:
            return fused(x, self.rank)
        return x
"""


def _gated_project(tmp_path, extra: dict | None = None):
    files = {"vllm_like/__init__.py": "", "vllm_like/platforms.py": "current_platform = None\n",
             "vllm_like/ops/__init__.py": "", "vllm_like/ops/fused.py": _FUSED, "vllm_like/ops/layer.py": _LAYER,
             **(extra or {})}
    return migrate_json(write_project(tmp_path, files))


_SKIPPED_TEST = """\
import pytest

from vllm_like.ops.fused import fused
from vllm_like.platforms import current_platform


@pytest.mark.skipif(not current_platform.is_cuda(), reason="CUDA only")
def test_fused():
    assert fused(1, 2) is not None
"""


def test_a_method_reached_only_through_calls_under_a_false_capability_flag_is_a_named_scope(tmp_path):
    """`import cutlass.cute` in `FusedGemm.compile`: the class is built only by `_get_kernel`, used by
    `fused` (called in layer.py only under `if use_fused:`, `use_fused = self._use_fused and ...`,
    `self._use_fused` set once from `has_device_capability(90)`) and by `warmup` after its capability
    exit: a named scope naming the gate."""
    report = _gated_project(tmp_path, {"tests/test_fused.py": _SKIPPED_TEST})
    scopes = moot_lines(report["skipped"], "NPU911", "vllm_like/ops/fused.py")
    assert 11 in scopes, (scopes, findings_at(report, "vllm_like/ops/fused.py", "NPU911"))
    assert "`FusedGemm` is reached only from code an NPU host does not run" in scopes[11]
    assert "vllm_like/ops/layer.py:17" in scopes[11]
    report = _gated_project(tmp_path / "b", {"tests/test_fused.py": _SKIPPED_TEST.replace("@pytest.mark.skipif(not current_platform.is_cuda(), reason=\"CUDA only\")\n", "")})
    # a test an NPU host runs still reaches it: reported, as info naming the test since wave 27's
    # policy P2 (library code only tests/benchmarks reach is no port of the library: testcallers27.py)
    (kept,) = findings_at(report, "vllm_like/ops/fused.py", "NPU911").values()
    assert kept["line"] == 11 and kept["severity"] == "info", kept
    assert "reached on an NPU host only from tests/benchmarks (tests/test_fused.py:" in kept["message"], kept


def test_a_flag_another_file_sets_or_an_ungated_call_keeps_the_error(tmp_path):
    """`layer._use_fused = True` in another file, or one call of `fused` outside any gate: kept."""
    setter = {"vllm_like/ops/force.py": "def force(layer):\n    layer._use_fused = True\n"}
    report = _gated_project(tmp_path, setter)
    assert _open_lines(report, "vllm_like/ops/fused.py", "NPU911") == {11}
    caller = {"vllm_like/ops/direct.py": "from .fused import fused\n\n\ndef go(x):\n    return fused(x, 2)\n"}
    report = _gated_project(tmp_path / "b", caller)
    assert _open_lines(report, "vllm_like/ops/fused.py", "NPU911") == {11}


def test_a_gate_on_a_method_of_a_parameter_a_user_chooses_keeps_the_error(tmp_path):
    """`if backend.is_deep_gemm():` over a parameter (a runner backend a user option picks): not
    decided, even where testscopes reads the name as a probe of a package with no NPU build."""
    chooser = {"vllm_like/ops/layer.py": "from .fused import fused\n\n\ndef build(backend, x):\n"
                                         "    if backend.is_deep_gemm():\n        return fused(x, 2)\n    return x\n"}
    report = _gated_project(tmp_path, chooser)
    assert _open_lines(report, "vllm_like/ops/fused.py", "NPU911") == {11}


_QUANT = """\
def _replace_layers(model):
    import cutlass.cute as cute

    return cute.compile(model)


def load_and_quantize(model):
    return _replace_layers(model)
"""

_QUANT_TEST = """\
import pytest
import torch

from qpkg.utils.quant import {name}


@pytest.mark.skipif(torch.version.cuda is None, reason="CUDA only")
def test_quantize():
    assert {name}(object()) is not None
"""


def test_a_public_function_only_skipped_tests_call_keeps_the_error(tmp_path):
    """Session 32, found on accelerate's `load_and_quantize_model` (bnb.py): a library's public
    function whose only callers in the run are tests skipped on an NPU host is still called by the
    library's users, so the finding in the private helper it calls stays. The same chain under a
    private name, only the skipped test calling it, is a named scope."""
    files = {"qpkg/__init__.py": "", "qpkg/utils/__init__.py": "", "qpkg/utils/quant.py": _QUANT,
             "tests/test_quant.py": _QUANT_TEST.format(name="load_and_quantize")}
    report = migrate_json(write_project(tmp_path, files))
    assert _open_lines(report, "qpkg/utils/quant.py", "NPU911") == {2}, report["skipped"]
    private = {**files, "qpkg/utils/quant.py": _QUANT.replace("load_and_quantize", "_load_and_quantize"),
               "tests/test_quant.py": _QUANT_TEST.format(name="_load_and_quantize")}
    report = migrate_json(write_project(tmp_path / "b", private))
    assert not _open_lines(report, "qpkg/utils/quant.py", "NPU911"), report["findings"]
    scopes = moot_lines(report["skipped"], "NPU911", "qpkg/utils/quant.py")
    assert 2 in scopes and "`_replace_layers` is reached only from code an NPU host does not run" in scopes[2], scopes
