"""Round-14 audits (issue #16, AL#23, AL#1): code reached only from the CUDA method of a
platform-dispatched op (vLLM's `CustomOp`, SGLang's `MultiPlatformOp`: the base class's
dispatch_forward sends an NPU host to `forward_npu` / `forward_oot` → `forward_native`, never to
`forward_cuda`). npu_migrate/dispatchops.py, read by callersonly.py (helpers whose every reference
is such code) and othersources.py (JIT sources whose loader only such code calls). Each test
writes a small project of its own, checks that the false finding is gone (a named skipped scope
with its reason) and that a nearby true case stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, moot_lines, write_project

_BASE = '''\
import torch

_is_cuda = torch.version.cuda is not None


class PlatformOp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self._forward = self.dispatch_forward()

    def forward(self, *args):
        return self._forward(*args)

    def dispatch_forward(self):
        if _is_cuda:
            return self.forward_cuda
        return self.forward_npu
'''

_HEADER = """\
#pragma once
#include <cuda_runtime.h>

template <typename T>
__global__ void {name}_kernel(T* out, const T* x, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] * T(2);
}}
"""

_LOADER = """\
import torch

from toyjit.build import load_jit


def {name}(x):
    module = load_jit("{name}", cuda_files=["{folder}/{name}_jit.cuh"])
    out = torch.empty_like(x)
    module.{name}(x, out)
    return out
"""

_INDEXER = '''\
import torch

from toyjit.ops.base import PlatformOp


def rotate(x):
    from toyjit.spin import spin

    return spin(x)


def mirror(x):
    from toyjit.flip import flip

    return flip(x)


class Indexer(PlatformOp):
    def _prepare(self, x):
        return rotate(x) + 1

    def _keys_only(self, x):
        return self._prepare(x)

    def forward_cuda(self, x, keys=False):
        if keys:
            return self._keys_only(x)
        return self._prepare(x) * 2

    def forward_npu(self, x, keys=False):
        return x * 2


class Mirror(PlatformOp):
    def forward_cuda(self, x):
        return mirror(x)
'''


def _npu912(report: dict, path: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == "NPU912"]


def test_jit_source_reached_only_from_a_dispatched_ops_cuda_method_is_a_named_scope(tmp_path):
    """AL#23: a JIT `.cuh` compiled only by a loader that one helper imports lazily, the helper
    reached only through private methods from `forward_cuda` of an op that also has `forward_npu`:
    a named scope naming the chain; the same shape in an op with no NPU/OOT/native method keeps
    its error."""
    root = write_project(tmp_path, {
        "toyjit/__init__.py": "",
        "toyjit/build.py": "def load_jit(name, cuda_files=()):\n    raise NotImplementedError(name)\n",
        "toyjit/csrc/transform/spin_jit.cuh": _HEADER.format(name="spin"),
        "toyjit/csrc/mirror/flip_jit.cuh": _HEADER.format(name="flip"),
        "toyjit/spin.py": _LOADER.format(name="spin", folder="transform"),
        "toyjit/flip.py": _LOADER.format(name="flip", folder="mirror"),
        "toyjit/ops/__init__.py": "",
        "toyjit/ops/base.py": _BASE,
        "toyjit/ops/indexer.py": _INDEXER,
    })
    report = migrate_json(root)
    path = "toyjit/csrc/transform/spin_jit.cuh"
    assert not _npu912(report, path)
    scopes = moot_lines(report["skipped"], "NPU912", path)
    assert 1 in scopes
    assert "`rotate`, reached only from" in scopes[1]
    assert "`Indexer.forward_cuda`, a platform-dispatched op (`PlatformOp`) that also has `forward_npu`" in scopes[1]
    # nearby true case: `Mirror` has only `forward_cuda`, which is what an NPU host would run
    (kept,) = _npu912(report, "toyjit/csrc/mirror/flip_jit.cuh")
    assert kept["severity"] == "error"


_ROPE = '''\
import torch

from toyjit.ops.base import PlatformOp


def fused_rope(q, k):
    import flashinfer.rope

    return flashinfer.rope.apply_rope(q, k)


class Rotary(PlatformOp):
    def forward_native(self, q, k):
        return q, k

    def forward_cuda(self, q, k):
        return fused_rope(q, k)
'''

_NORM = '''\
import torch

from toyjit.ops.base import PlatformOp


def fused_norm(x):
    import flashinfer.norm

    return flashinfer.norm.rmsnorm(x)


class Norm(PlatformOp):
    def forward_native(self, x):
        return fused_norm(x)

    def forward_cuda(self, x):
        return fused_norm(x)
'''

_SCALE = '''\
import torch

from toyjit.ops.base import PlatformOp


def fused_scale(x):
    import flashinfer.scale

    return flashinfer.scale.apply(x)


class Scale(PlatformOp):
    def forward_native(self, x):
        return self.forward_cuda(x)

    def forward_cuda(self, x):
        return fused_scale(x)
'''


def test_lazy_import_in_a_helper_only_forward_cuda_calls_is_a_named_scope(tmp_path):
    """AL#1 (its Python part): a helper's lazy CUDA-only import, the helper called only from
    `forward_cuda` of an op that also has `forward_native`: a named scope; a helper that
    `forward_native` calls too, or whose op's `forward_native` calls `forward_cuda`, keeps its
    finding."""
    root = write_project(tmp_path, {
        "toyjit/__init__.py": "",
        "toyjit/ops/__init__.py": "",
        "toyjit/ops/base.py": _BASE,
        "toyjit/ops/rope.py": _ROPE,
        "toyjit/ops/norm.py": _NORM,
        "toyjit/ops/scale.py": _SCALE,
    })
    report = migrate_json(root)
    path = "toyjit/ops/rope.py"
    found = {f["line"]: f for f in report["findings"] if f["path"] == path and f["code"] == "NPU911"}
    assert 7 not in found
    scopes = moot_lines(report["skipped"], "NPU911", path)
    assert 7 in scopes and "`Rotary.forward_cuda`" in scopes[7]
    # nearby true case: `fused_norm` runs on an NPU host through `Norm.forward_native`
    (kept,) = [f for f in report["findings"] if f["path"] == "toyjit/ops/norm.py" and f["code"] == "NPU911"]
    assert kept["line"] == 7 and kept["severity"] != "info"
    # nor does a helper whose op's `forward_native` delegates to `forward_cuda` (an NPU host runs it)
    (kept,) = [f for f in report["findings"] if f["path"] == "toyjit/ops/scale.py" and f["code"] == "NPU911"]
    assert kept["line"] == 7 and kept["severity"] != "info"


_TRITON = '''\
import torch

from toyjit.ops.base import PlatformOp
from toyjit.triton_utils import tl, triton


@triton.jit
def _shift_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def shift_triton(x):
    _shift_kernel[(triton.cdiv(x.numel(), 128),)](x, x.numel(), BLOCK=128)
    return x


class Shift(PlatformOp):
    def forward_native(self, x):
        return x + 1

    def forward_cuda(self, x):
        return shift_triton(x)
'''

_TRITON_SHARED = '''\
import torch

from toyjit.ops.base import PlatformOp
from toyjit.triton_utils import tl, triton


@triton.jit
def _scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def scale_triton(x):
    _scale_kernel[(triton.cdiv(x.numel(), 128),)](x, x.numel(), BLOCK=128)
    return x


class Scale(PlatformOp):
    def forward_native(self, x):
        return scale_triton(x)

    def forward_cuda(self, x):
        return scale_triton(x)
'''


def test_triton_kernel_launched_only_from_forward_cuda_is_a_named_scope(tmp_path):
    """vLLM's `BailingMRotaryEmbedding` / `FusedMMInputNorm` shape: a `@triton.jit` kernel
    launched only by a helper that only `forward_cuda` of an op with `forward_native` calls: a
    named scope; the same kernel launched from `forward_native` too keeps its error."""
    root = write_project(tmp_path, {
        "toyjit/__init__.py": "",
        "toyjit/ops/__init__.py": "",
        "toyjit/ops/base.py": _BASE,
        "toyjit/triton_utils.py": "import triton\nimport triton.language as tl\n",
        "toyjit/ops/shift.py": _TRITON,
        "toyjit/ops/scale.py": _TRITON_SHARED,
    })
    report = migrate_json(root)
    path = "toyjit/ops/shift.py"
    assert not [f for f in report["findings"] if f["path"] == path and f["code"] == "NPU910" and f["line"] == 7]
    scopes = moot_lines(report["skipped"], "NPU910", path)
    assert 7 in scopes
    assert "`_shift_kernel` is referenced only at" in scopes[7] and "`Shift.forward_cuda`" in scopes[7]
    # nearby true case: `Scale.forward_native` launches the kernel on an NPU host
    kept = [f for f in report["findings"] if f["path"] == "toyjit/ops/scale.py" and f["code"] == "NPU910" and f["line"] == 7]
    assert kept and kept[0]["severity"] == "error"
