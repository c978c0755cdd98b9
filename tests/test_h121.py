"""Round-27 precision wave, helper h121: model-private kernels behind capability flags kept on
`self` (issue #16; attrflags27.py).

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

_OPS = '''\
import torch

from pkg.triton_utils import tl, triton


@triton.jit
def _scale(x):
    return x * 2.0


@triton.jit
def _dequant(q, s):
    return _scale(q) * s


@triton.jit
def _dequant_rows(q, s, BN: tl.constexpr):
    return _dequant(q, s)


@triton.jit
def _gemv_kernel(x_ptr, s_ptr, BN: tl.constexpr):
    i = tl.program_id(0)
    tl.store(x_ptr + i, _dequant_rows(tl.load(x_ptr + i), tl.load(s_ptr + i), BN))


@triton.jit
def _router_kernel(x_ptr, BN: tl.constexpr):
    i = tl.program_id(0)
    tl.store(x_ptr + i, tl.load(x_ptr + i) + 1)


def gate_up(x):
    import cutlass

    return cutlass.run(x)


def _workspace(device):
    import cutlass

    return cutlass.alloc(device)


def fast_moe(x, s):
    _gemv_kernel[(x.numel(),)](x, s, 16)
    return x


class FastExperts(torch.nn.Module):
    def forward(self, x, s):
        return fast_moe(x, s)


def fast_moe_ll(x):
    _router_kernel[(x.numel(),)](x, 16)
    _workspace(x.device)
    return gate_up(x)
'''

_MODEL = '''\
import torch

from pkg.model.ops.moe import FastExperts, fast_moe_ll
from pkg.platforms import current_platform


def _fast_kernels(quant_config):
    if not current_platform.is_device_capability_family(100):
        return False
    return quant_config is None or quant_config.get("nvfp4", False)


class MLP(torch.nn.Module):
    def __init__(self, proj):
        super().__init__()
        self.proj = proj

    def forward(self, x):
        gate_up, _ = self.proj(x)
        return gate_up * 2


class Cache:
    def __init__(self, device):
        self._workspace = torch.empty(16, device=device)


class Block(torch.nn.Module):
    def __init__(self, config, quant_config):
        super().__init__()
        is_nvfp4 = quant_config is not None
        use_fast = FLAG
        self.use_fast_kernel = use_fast and is_nvfp4
        if self.use_fast_kernel:
            self.experts = FastExperts()
            return
        self.experts = torch.nn.Linear(4, 4)

    def forward_ll(self, x):
        if not self.use_fast_kernel or x.shape[0] > 8:
            return None
        return fast_moe_ll(x)

    def forward(self, x):
        return self.experts(x)
'''

_OPS_PATH = "pkg/model/ops/moe.py"


def _project(tmp_path, flag: str, extra: dict | None = None):
    files = {
        "pkg/__init__.py": "",
        "pkg/platforms.py": _PLATFORMS,
        "pkg/triton_utils.py": _TRITON_UTILS,
        "pkg/model/__init__.py": "",
        "pkg/model/ops/__init__.py": "",
        _OPS_PATH: _OPS,
        "pkg/model/model.py": _MODEL.replace("FLAG", flag),
        **(extra or {}),
    }
    return migrate_json(write_project(tmp_path, files))


def _line(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def _open(report, path=_OPS_PATH):
    """{line: finding} of every place (anchor and `also` lines) of the report-only findings of
    `path` still at warning or error."""
    out = {}
    for f in report["findings"]:
        if f["path"] == path and not f["fixable"] and f["severity"] != "info":
            out[f["line"]] = f
            for place in f.get("also", []) or []:
                out[place[0] if isinstance(place, list) else place] = f
            msg = f["message"]
            if "(also at line" in msg:
                tail = msg.split("(also at line", 1)[1].split(")", 1)[0]
                for word in tail.replace("s", " ").replace(",", " ").replace("and", " ").split():
                    if word.isdigit():
                        out[int(word)] = f
    return out


def _scopes(report, path=_OPS_PATH):
    return {line: s["reason"] for s in report["skipped"] if s.get("path") == path and "start_line" in s
            for line in range(s["start_line"], s["end_line"] + 1)}


_KERNEL_LINES = {name: _line(_OPS, f"def {name}(") - 1 for name in
                 ("_scale", "_dequant", "_dequant_rows", "_gemv_kernel", "_router_kernel")}
_IMPORTS = [n for n, line in enumerate(_OPS.splitlines(), 1) if line.strip() == "import cutlass"]


def test_kernels_behind_a_capability_flag_kept_on_self_are_named_scopes(tmp_path):
    """BV#3/BV#11/BV#13: the flag is a local (`use_fast = _fast_kernels(q)`, False off SM10x)
    combined into `self.use_fast_kernel`; the kernels' class is built only under it, the launcher
    called only after `if not self.use_fast_kernel ...: return None`; device functions three calls
    deep; a model's local `gate_up` and another class's `self._workspace` are no references."""
    report = _project(tmp_path, "_fast_kernels(quant_config)")
    still = _open(report)
    scopes = _scopes(report)
    for name, line in _KERNEL_LINES.items():
        assert line not in still, (name, still.get(line))
        assert line in scopes, name
    for line in _IMPORTS:
        assert line not in still and line in scopes
    assert "`self.use_fast_kernel` is False there" in scopes[_KERNEL_LINES["_gemv_kernel"]]
    assert "use_fast = _fast_kernels(quant_config)" in scopes[_KERNEL_LINES["_gemv_kernel"]]
    assert "device function `_scale`" in scopes[_KERNEL_LINES["_scale"]]


def test_pair_a_flag_from_a_plain_config_option_keeps_the_kernels_reported(tmp_path):
    """The same shape where the flag is a user's config option (true on an NPU host if chosen)."""
    report = _project(tmp_path, 'config.get("use_fast_kernels", False)')
    still = _open(report)
    for name, line in _KERNEL_LINES.items():
        assert line in still, name
    for line in _IMPORTS:
        assert line in still


def test_pair_a_kernel_also_launched_ungated_stays_reported(tmp_path):
    """The capability-gated shape, but library code also calls the launcher with no gate."""
    other = '''\
from pkg.model.ops.moe import fast_moe_ll


def decode(x):
    return fast_moe_ll(x)
'''
    report = _project(tmp_path, "_fast_kernels(quant_config)", {"pkg/model/decode.py": other})
    still = _open(report)
    assert _KERNEL_LINES["_router_kernel"] in still
    assert all(line in still for line in _IMPORTS)
    # (the other launcher's kernels, only behind the flag, are still scopes)
    assert _KERNEL_LINES["_gemv_kernel"] not in still


def test_pair_an_imported_name_is_a_reference_not_a_local(tmp_path):
    """`from ops import gate_up` inside a function binds the function itself: its ungated call keeps
    the import it reaches reported (the local-name reading skips only plain stores and parameters)."""
    other = '''\
def project(x):
    from pkg.model.ops.moe import gate_up

    return gate_up(x)
'''
    report = _project(tmp_path, "_fast_kernels(quant_config)", {"pkg/model/proj.py": other})
    still = _open(report)
    assert _IMPORTS[0] in still
    assert _IMPORTS[1] not in still


_PROJ = '''\
import functools

import torch
import torch.nn.functional as F

from pkg.platforms import current_platform


@functools.cache
def _tinygemm():
    from flashinfer.jit import gen_tinygemm_module

    return gen_tinygemm_module().build_and_load()


def use_fast_gemm(weight):
    return weight.dtype == torch.bfloat16 and current_platform.is_device_capability_family(100)


def warmup_packed(weight):
    _tinygemm()


def packed_projection(x, weight, low_latency):
    if not low_latency:
        return F.linear(x, weight)
    out = x.new_empty((x.shape[0], weight.shape[0]))
    _tinygemm().tinygemm_op(x, weight, out)
    return out
'''

_ATTN = '''\
import torch

from pkg.model.proj import packed_projection, use_fast_gemm, warmup_packed


class Attention(torch.nn.Module):
    def __init__(self, proj):
        super().__init__()
        self.proj = proj
        self.low_latency = False

    def warmup(self):
        weight = self.proj.weight
        self.low_latency = LATER
        if self.low_latency:
            warmup_packed(weight)

    def forward(self, x):
        if self.low_latency:
            return packed_projection(x, self.proj.weight, True)
        return self.proj(x)
'''


def _proj_project(tmp_path, later: str):
    return migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/platforms.py": _PLATFORMS,
        "pkg/model/__init__.py": "",
        "pkg/model/proj.py": _PROJ,
        "pkg/model/attention.py": _ATTN.replace("LATER", later),
    }))


_LOADER = _line(_PROJ, "from flashinfer.jit import")


def test_bu19_a_flag_every_store_of_which_is_false_there_gates_the_loader(tmp_path):
    """BU#19: `self.low_latency = False` in `__init__`, then `= isinstance(...) and use_fast_gemm(w)`
    (capability family 100) in a warm-up method: False there whichever runs; the cached loader's
    CUDA-package import is reached only under `if self.low_latency:`."""
    report = _proj_project(tmp_path, "isinstance(weight, torch.Tensor) and use_fast_gemm(weight)")
    assert _LOADER not in _open(report, "pkg/model/proj.py")
    reason = _scopes(report, "pkg/model/proj.py")[_LOADER]
    assert "`self.low_latency` is False there, set at pkg/model/attention.py:" in reason


def test_bu19_pair_a_store_a_user_option_decides_keeps_the_loader_reported(tmp_path):
    """One store a user's option decides (true on an NPU host if chosen): the import stays."""
    report = _proj_project(tmp_path, "getattr(self.proj, 'low_latency', False)")
    assert _LOADER in _open(report, "pkg/model/proj.py")


_RING = '''\
import torch

from pkg.triton_utils import tl, triton


@triton.jit
def _ring_kernel(x_ptr, n: tl.constexpr):
    i = tl.program_id(0)
    tl.store(x_ptr + i, tl.load(x_ptr + i) + 1)


class TailRing:
    def __init__(self, size):
        self.buf = torch.zeros(size)

    def append(self, x):
        _ring_kernel[(x.numel(),)](x, x.numel())
        return x
'''

_LAYER = '''\
import torch

from pkg.platforms import current_platform


class Layer(torch.nn.Module):
    def __init__(self, sparse_config, sliding_window, head_dim):
        super().__init__()
        self.use_dsa_backend = sparse_config is not None and sliding_window is None
        if self.use_dsa_backend:
            capability = current_platform.get_device_capability()
            if REFUSAL:
                raise NotImplementedError(f"DSA requires SM90 or SM100; got {capability}.")
        if self.use_dsa_backend:
            from pkg.model.ring import TailRing

            self.ring = TailRing(16)
        self.scale = head_dim ** -0.5

    def forward(self, x):
        if self.use_dsa_backend:
            return self.ring.append(x)
        return x * self.scale
'''


def _ring_project(tmp_path, refusal: str):
    return migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/platforms.py": _PLATFORMS,
        "pkg/triton_utils.py": _TRITON_UTILS,
        "pkg/model/__init__.py": "",
        "pkg/model/ring.py": _RING,
        "pkg/model/layer.py": _LAYER.replace("REFUSAL", refusal),
    }))


_RING_KERNEL = _line(_RING, "@triton.jit")


def test_bu17_objects_built_only_under_a_flag_whose_true_raises_first_are_named_scopes(tmp_path):
    """BU#16/BU#17: `self.use_dsa_backend` is a config answer, but its `if` in `__init__` refuses
    any capability but a few first (None on an NPU host): no instance with it True exists there."""
    report = _ring_project(tmp_path, "capability is None or capability[0] not in (9, 10)")
    assert _RING_KERNEL not in _open(report, "pkg/model/ring.py")
    reason = _scopes(report, "pkg/model/ring.py")[_RING_KERNEL]
    assert "raises first there" in reason


def test_bu17_pair_a_refusal_that_lets_an_npu_host_through_keeps_the_kernel(tmp_path):
    """The same layer where the refusal is about something else (a head size): the kernel stays."""
    report = _ring_project(tmp_path, "head_dim not in (128, 192)")
    assert _RING_KERNEL in _open(report, "pkg/model/ring.py")


def test_bu19_pair_a_class_level_default_keeps_the_flag_unknown(tmp_path):
    """A class-level `low_latency = True` is read until a store runs: the stores alone say nothing."""
    attn = _ATTN.replace("LATER", "isinstance(weight, torch.Tensor) and use_fast_gemm(weight)").replace(
        "class Attention(torch.nn.Module):\n", "class Attention(torch.nn.Module):\n    low_latency = True\n\n")
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/platforms.py": _PLATFORMS,
        "pkg/model/__init__.py": "",
        "pkg/model/proj.py": _PROJ,
        "pkg/model/attention.py": attn,
    }))
    assert _LOADER in _open(report, "pkg/model/proj.py")
