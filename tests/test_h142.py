"""Round-30 precision wave, helper h142: kernels behind capability gates in another module, read
one step further (issue #16; capchains30.py, for callgates21.py and methods29.py).

Each false shape is paired with the nearest true one, which stays reported."""

from __future__ import annotations

from tests.precision_helpers import migrate_json, write_project

_PLATFORMS = """\
class _Platform:
    def is_cuda(self):
        return True

    def get_device_capability(self, device_id=0):
        return (10, 0)

    def is_device_capability_family(self, capability, device_id=0):
        current = self.get_device_capability(device_id)
        return current is not None and current[0] == capability // 10


current_platform = _Platform()
"""

_TRITON_UTILS = """\
try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None
    tl = None
"""


def _line(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def _open(report, path):
    """{line: finding} of every place of the report-only findings of `path` still at warning or error."""
    out = {}
    for f in report["findings"]:
        if f["path"] == path and not f["fixable"] and f["severity"] != "info":
            out[f["line"]] = f
            for place in f.get("also", []) or []:
                out[place[0] if isinstance(place, list) else place] = f
    return out


def _scopes(report, path):
    return {line: s["reason"] for s in report["skipped"] if s.get("path") == path and "start_line" in s
            for line in range(s["start_line"], s["end_line"] + 1)}


# ---------------------------------------------------------------- EA#11/EA#35: a refused flag in a conditional expression
_INDEXER = '''\
import torch

from pkg.triton_utils import tl, triton


@triton.jit
def _norm_rope_kernel(x_ptr, n: tl.constexpr):
    i = tl.program_id(0)
    tl.store(x_ptr + i, tl.load(x_ptr + i) * 2)


def indexer_norm_rope(x):
    _norm_rope_kernel[(x.numel(),)](x, x.numel())
    return x
'''

_MODEL = '''\
import torch

from pkg.platforms import current_platform

from .ops.indexer import indexer_norm_rope


class SparseAttention:
    def __init__(self, layer):
        self.layer = layer

    def _project_indexer(self, x):
        return indexer_norm_rope(x)


class Attention(torch.nn.Module):
    def __init__(self, sparse_config, sliding_window):
        super().__init__()
        self.use_dsa_backend = sparse_config is not None and sliding_window is None
        if self.use_dsa_backend:
            capability = current_platform.get_device_capability()
            if REFUSAL:
                raise NotImplementedError(f"DSA requires SM90 or SM100; got {capability}.")
        self.sparse_attn = (
            SparseAttention(self)
            if self.use_dsa_backend
            else None
        )

    def forward(self, x):
        if self.sparse_attn is not None:
            return self.sparse_attn._project_indexer(x)
        return x
'''

_INDEXER_KERNEL = _line(_INDEXER, "@triton.jit")


def _dsa_project(tmp_path, refusal: str):
    return migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/platforms.py": _PLATFORMS,
        "pkg/triton_utils.py": _TRITON_UTILS,
        "pkg/model/__init__.py": "",
        "pkg/model/ops/__init__.py": "",
        "pkg/model/ops/indexer.py": _INDEXER,
        "pkg/model/model.py": _MODEL.replace("REFUSAL", refusal),
    }))


def test_ea11_object_built_in_a_conditional_expression_on_a_refused_flag_is_a_named_scope(tmp_path):
    """EA#11/EA#35: `SparseAttention(self) if self.use_dsa_backend else None`, where the same
    `__init__` raised first for a capability of None (an NPU host's): the kernel its method
    launches is never reached there."""
    report = _dsa_project(tmp_path, "capability is None or capability[0] not in (9, 10)")
    assert _INDEXER_KERNEL not in _open(report, "pkg/model/ops/indexer.py")
    reason = _scopes(report, "pkg/model/ops/indexer.py")[_INDEXER_KERNEL]
    assert "raises first there" in reason


def test_ea11_pair_a_refusal_an_npu_host_passes_keeps_the_kernel(tmp_path):
    """The same constructor whose refusal is about something else: the flag stays a config answer,
    and the conditional expression's branch may run on an NPU host."""
    report = _dsa_project(tmp_path, "sliding_window == 0")
    assert _INDEXER_KERNEL in _open(report, "pkg/model/ops/indexer.py")


# ---------------------------------------------------------------- EA#18: a flag on a member the class builds
_FUSED = '''\
import torch


def _kernels():
    import cutlass

    return cutlass.compile()


def fused_qkv(x):
    return _kernels()(x)
'''

_FLINT = '''\
import torch

from pkg.platforms import current_platform

from .ops.fused import fused_qkv


def _fast_kernels(quant_config):
    if not current_platform.is_device_capability_family(100):
        return False
    return quant_config is None


class Attention(torch.nn.Module):
    def __init__(self, quant_config):
        super().__init__()
        self.fast_decode = FLAG

    def forward_ll(self, x):
        return fused_qkv(x)


class Mlp(torch.nn.Module):
    def forward(self, x):
        return x


class MoeBlock(torch.nn.Module):
    def forward_ll(self, x):
        return x


class DecoderLayer(torch.nn.Module):
    def __init__(self, quant_config, moe):
        super().__init__()
        self.self_attn = Attention(quant_config)
        self.mlp: torch.nn.Module
        if moe:
            self.mlp = MoeBlock()
        else:
            self.mlp = Mlp()

    def forward(self, x):
        if self.self_attn.fast_decode:
            out = self.self_attn.forward_ll(x)
            if out is not None:
                return out
        if isinstance(self.mlp, MoeBlock):
            return self.mlp.forward_ll(x)
        return x
'''

_FUSED_IMPORT = _line(_FUSED, "import cutlass")


def _flint_project(tmp_path, flag: str, flint: str = _FLINT):
    return migrate_json(write_project(tmp_path, {
        # (another model's test replacing its own layer's member: no store on this class's instances)
        "tests/test_other_layer.py": "def test_layer(layer, attn):\n    layer.self_attn = attn\n",
        "pkg/__init__.py": "",
        "pkg/platforms.py": _PLATFORMS,
        "pkg/model/__init__.py": "",
        "pkg/model/ops/__init__.py": "",
        "pkg/model/ops/fused.py": _FUSED,
        "pkg/model/model.py": flint.replace("FLAG", flag),
    }))


def test_ea18_flag_of_a_member_built_by_the_class_is_read_through_it(tmp_path):
    """EA#18: `if self.self_attn.fast_decode:` where `self.self_attn = Attention(...)` and Attention's
    `self.fast_decode = _fast_kernels(...)` is False off capability family 100; the other class's
    `self.mlp.forward_ll(...)` is not a call of the attention's method."""
    report = _flint_project(tmp_path, "_fast_kernels(quant_config)")
    assert _FUSED_IMPORT not in _open(report, "pkg/model/ops/fused.py")
    reason = _scopes(report, "pkg/model/ops/fused.py")[_FUSED_IMPORT]
    assert "`self.self_attn` is a `Attention`" in reason


def test_ea18_pair_a_member_flag_from_an_option_keeps_the_import(tmp_path):
    """The same member whose flag is a plain option (opt-in, unknown here): the import stays."""
    report = _flint_project(tmp_path, "quant_config is None")
    assert _FUSED_IMPORT in _open(report, "pkg/model/ops/fused.py")


def test_ea18_pair_a_member_that_may_be_the_method_s_class_keeps_the_import(tmp_path):
    """`self.mlp` may be an `Attention` too: its `self.mlp.forward_ll(x)` is a call of the
    attention's method on an NPU host, not gated by the flag."""
    flint = _FLINT.replace("self.mlp = Mlp()", "self.mlp = Attention(quant_config)")
    report = _flint_project(tmp_path, "_fast_kernels(quant_config)", flint)
    assert _FUSED_IMPORT in _open(report, "pkg/model/ops/fused.py")


# ---------------------------------------------------------------- EA#14: an `__init__` refusing the capability itself
_STAGE = '''\
import torch

from pkg.triton_utils import tl, triton


@triton.jit
def _stage_kernel(x_ptr, n: tl.constexpr):
    i = tl.program_id(0)
    tl.store(x_ptr + i, tl.load(x_ptr + i) + 1)


def stage_pages(x):
    _stage_kernel[(x.numel(),)](x, x.numel())
    return x
'''

_IMPL = '''\
import torch

from pkg.platforms import current_platform

from .ops.stage import stage_pages


class SparseImpl:
    def __init__(self, head_size):
        self.head_size = head_size
        capability = current_platform.get_device_capability()
        if REFUSAL:
            raise NotImplementedError("DSA requires SM90, SM100 or SM103")
        self.scale = head_size ** -0.5

    def forward(self, x):
        return self._forward_prefill(x) * self.scale

    def _forward_prefill(self, x):
        return stage_pages(x)
'''

_BUILDER = '''\
from pkg.model.impl import SparseImpl


def build(head_size):
    return SparseImpl(head_size)
'''

_STAGE_KERNEL = _line(_STAGE, "@triton.jit")


def _impl_project(tmp_path, refusal: str):
    return migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/platforms.py": _PLATFORMS,
        "pkg/triton_utils.py": _TRITON_UTILS,
        "pkg/model/__init__.py": "",
        "pkg/model/ops/__init__.py": "",
        "pkg/model/ops/stage.py": _STAGE,
        "pkg/model/impl.py": _IMPL.replace("REFUSAL", refusal),
        "pkg/model/builder.py": _BUILDER,
    }))


def test_ea14_kernel_launched_only_by_a_class_whose_init_refuses_the_capability_is_a_named_scope(tmp_path):
    """EA#14: the impl's own `__init__` raises when the capability is None (an NPU host's), so no
    instance exists there and `_forward_prefill`, the kernel's only launcher, never runs."""
    report = _impl_project(tmp_path, "capability is None or capability[0] not in (9, 10)")
    assert _STAGE_KERNEL not in _open(report, "pkg/model/ops/stage.py")
    reason = _scopes(report, "pkg/model/ops/stage.py")[_STAGE_KERNEL]
    assert "whose `__init__` raises on an NPU host" in reason


def test_ea14_pair_a_refusal_about_the_head_size_keeps_the_kernel(tmp_path):
    """The same `__init__` refusing only a head size: instances exist on an NPU host."""
    report = _impl_project(tmp_path, "head_size not in (128, 192)")
    assert _STAGE_KERNEL in _open(report, "pkg/model/ops/stage.py")


# ---------------------------------------------------------------- EA#13: a lazy import after a capability exit further down
_GEMM_RS_AR = '''\
import cutlass
import cutlass.cute as cute


class GemmRsAr:
    def __init__(self, n):
        self.kernel = cute.compile(n)
'''

_GEMM_RS = '''\
from typing import TYPE_CHECKING

from pkg.platforms import current_platform

if TYPE_CHECKING:
    from pkg.common.gemm_rs_ar import GemmRsAr


def maybe_create_gemm_rs(config) -> "GemmRsAr | None":
    pc = config.parallel
    GUARD
        return None
    from pkg.common.gemm_rs_ar import GemmRsAr

    return GemmRsAr(pc.size)
'''

_GEMM_IMPORT = _line(_GEMM_RS_AR, "import cutlass")


def _gemm_project(tmp_path, guard: str):
    return migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/platforms.py": _PLATFORMS,
        "pkg/common/__init__.py": "",
        "pkg/common/gemm_rs_ar.py": _GEMM_RS_AR,
        "pkg/model/__init__.py": "",
        "pkg/model/gemm_rs.py": _GEMM_RS.replace("GUARD", guard),
    }))


def test_ea13_module_imported_only_after_a_capability_exit_further_down_is_a_named_scope(tmp_path):
    """EA#13: the only run-time import of the module follows `if not is_cuda() or not
    is_device_capability(103) or ...: return None`, the function's second statement."""
    report = _gemm_project(tmp_path, "if (\n        not current_platform.is_cuda()\n"
                                     "        or not current_platform.is_device_capability(103)\n"
                                     "        or pc.size not in (4, 8)\n    ):")
    assert _GEMM_IMPORT not in _open(report, "pkg/common/gemm_rs_ar.py")
    assert "imported only where an NPU host does not go" in _scopes(report, "pkg/common/gemm_rs_ar.py")[_GEMM_IMPORT]


def test_ea13_pair_an_exit_an_npu_host_may_pass_keeps_the_import(tmp_path):
    """`and` with a config answer: an NPU host may go past the exit, so the import stays."""
    report = _gemm_project(tmp_path, "if not current_platform.is_device_capability(103) and pc.size == 1:")
    assert _GEMM_IMPORT in _open(report, "pkg/common/gemm_rs_ar.py")


def test_ea13_pair_a_test_through_a_local_bound_before_keeps_the_import(tmp_path):
    """The platform object is a local bound first (`current_platform = pc.platform`): not the
    project's platform the reading answers for, so the import stays."""
    report = _gemm_project(tmp_path, "current_platform = pc.platform\n"
                                     "    if not current_platform.is_cuda() or not current_platform.is_device_capability(103):")
    assert _GEMM_IMPORT in _open(report, "pkg/common/gemm_rs_ar.py")


# ---------------------------------------------------------------- EB#16: four callers below the flag
_GEMV = '''\
import torch


def _dequant_kernel():
    import cutlass

    return cutlass.compile()


def dequantize_rows(weight):
    return _dequant_kernel()(weight)
'''

_LINEAR = '''\
from pkg.model.ops import gemv


def _dequant_gemm(layer, x):
    return x @ gemv.dequantize_rows(layer.weight)


class FastLinearKernel:
    def apply_weights(self, layer, x):
        return _dequant_gemm(layer, x)


def install_fast_kernels(model):
    for layer in model.layers:
        layer.kernel = FastLinearKernel()
'''

_DENSE = '''\
import torch

from pkg.platforms import current_platform

from .ops import linear


def _fast_kernels(quant_config):
    if not current_platform.is_device_capability_family(100):
        return False
    return quant_config is None


class Model(torch.nn.Module):
    def __init__(self, quant_config, layers):
        super().__init__()
        self.layers = layers
        self.fast_dense = FLAG
        if self.fast_dense:
            linear.install_fast_kernels(self)

    def forward(self, x):
        for layer in self.layers:
            x = layer.kernel.apply_weights(layer, x)
        return x
'''

_GEMV_IMPORT = _line(_GEMV, "import cutlass")


def _dense_project(tmp_path, flag: str):
    return migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/platforms.py": _PLATFORMS,
        "pkg/model/__init__.py": "",
        "pkg/model/ops/__init__.py": "",
        "pkg/model/ops/gemv.py": _GEMV,
        "pkg/model/ops/linear.py": _LINEAR,
        "pkg/model/model.py": _DENSE.replace("FLAG", flag),
    }))


def test_eb16_import_four_callers_below_a_capability_flag_is_a_named_scope(tmp_path):
    """EB#16: `_dequant_kernel` <- `dequantize_rows` <- `_dequant_gemm` <- `FastLinearKernel` <-
    `install_fast_kernels`, called only `if self.fast_dense:` (False off capability family 100)."""
    report = _dense_project(tmp_path, "_fast_kernels(quant_config)")
    assert _GEMV_IMPORT not in _open(report, "pkg/model/ops/gemv.py")
    assert "`self.fast_dense` is False there" in _scopes(report, "pkg/model/ops/gemv.py")[_GEMV_IMPORT]


def test_eb16_pair_an_option_flag_keeps_the_import(tmp_path):
    """The same chain under a plain option: the import stays."""
    report = _dense_project(tmp_path, "quant_config is None")
    assert _GEMV_IMPORT in _open(report, "pkg/model/ops/gemv.py")
