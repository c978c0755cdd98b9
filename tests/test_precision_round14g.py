"""Round-14 audits (issue #16): info notes whose own text says nothing is to be done, and device
labels (npu_migrate/labels7.py, moot.py). Each test writes a small project of its own, checks that
the false finding is gone (a named skipped scope with its reason, or a corrected message) and that
a nearby true case stays reported."""

from __future__ import annotations

from .precision_helpers import findings_at as _findings
from .precision_helpers import migrate_json, write_project
from .precision_helpers import scopes_at as _scopes

_OWN_CUDA = '''\
import torch


class Lazy:
    def to(self, device=None, non_blocking=False):
        return self

    def cuda(self, device=None, non_blocking=False):
        device = torch.device(device or "cuda")
        return self.to(device=device, non_blocking=non_blocking)


def place(x):
    return x.to("cuda")
'''


def test_default_device_of_own_cuda_method_is_a_named_scope(tmp_path):
    """AK#16: the "cuda" default of a class's own `cuda()` method is reached only by `.cuda()`
    calls, which the migration rewrites: a named scope; a "cuda" a function moves data to stays
    rewritten."""
    report = migrate_json(write_project(tmp_path, {"pkg/lazy.py": _OWN_CUDA}))
    assert 9 not in _findings(report, "pkg/lazy.py", "NPU990")
    assert "the device of the class's own `cuda()` method" in _scopes(report, "pkg/lazy.py", "NPU990")[9]
    assert any(f["line"] == 14 and f["fixable"] for f in report["findings"] if f["path"] == "pkg/lazy.py")


_HANDLER = '''\
import torch

HANDLERS = {}


def implements_torch_function(func):
    def register(handler):
        HANDLERS[func] = handler
        return handler
    return register


@implements_torch_function(torch.Tensor.cuda)
def function_cuda(*args, **kwargs):
    tensor = args[0]
    inner = {name: getattr(tensor, name).cuda(*args[1:], **kwargs) for name in ("data", "scale")}
    return type(tensor)(**inner)


@implements_torch_function(torch.Tensor.to)
def function_to(*args, **kwargs):
    return args[0].data.cuda(*args[1:])
'''


def test_forwarding_in_a_tensor_cuda_handler_is_a_named_scope(tmp_path):
    """AM#7: a `@implements_torch_function(torch.Tensor.cuda)` handler forwarding `.cuda(*args)`
    to inner tensors runs only by a caller's `.cuda()`: a named scope; the same forwarding in the
    handler of another method keeps its warning."""
    report = migrate_json(write_project(tmp_path, {"pkg/subclass.py": _HANDLER}))
    found = _findings(report, "pkg/subclass.py", "NPU990")
    assert 16 not in found
    assert "a handler of `Tensor.cuda` itself" in _scopes(report, "pkg/subclass.py", "NPU990")[16]
    assert found[22]["severity"] == "warning"


_GUARDED_KERNELS = '''\
try:
    import triton
    import triton.language as tl
    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False

if HAS_TRITON:

    @triton.jit
    def qkv_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(x_ptr + offsets, tl.load(x_ptr + offsets), mask=offsets < n)
'''


def test_guarded_triton_module_nothing_imports_is_a_named_scope(tmp_path):
    """AK#32: a guarded Triton module that no module imports: a named scope "a module nothing
    imports"; the same module imported by another module stays a finding."""
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/dead_kernel.py": _GUARDED_KERNELS,
        "pkg/used_kernel.py": _GUARDED_KERNELS + "\n\nUSED = True\n",  # (not a byte-identical copy)
        "pkg/api.py": "from pkg.used_kernel import HAS_TRITON\n\n\ndef ready():\n    return HAS_TRITON\n",
    }))
    assert not _findings(report, "pkg/dead_kernel.py", "NPU910")
    assert "a module nothing imports" in _scopes(report, "pkg/dead_kernel.py", "NPU910")[2]
    used = _findings(report, "pkg/used_kernel.py", "NPU910")
    assert used and "a module nothing imports" not in used[2]["message"]


_PERF_MODEL = '''\
import torch
from triton import cdiv
from triton.runtime import driver
from triton.testing import get_dram_gbps, nvsmi


def estimate(M, N):
    device = driver.active.get_current_device()
    return cdiv(M, 128) * cdiv(N, 128) / get_dram_gbps(device) + nvsmi(["clocks.max.sm"])[0]
'''

_MATMUL = '''\
import torch
from triton import Config, autotune, jit
from triton import language as tl

from .perf_model import estimate


@jit
def kernel(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)
'''

_BENCH = '''\
import torch
import triton
from triton.testing import do_bench


def bench(fn):
    return do_bench(fn)
'''


def test_perf_model_is_no_harness_and_folds_into_its_importer(tmp_path):
    """AM#16: a module importing `cdiv` and `triton.runtime.driver` is not "only `triton.testing`";
    imported only by a module whose own unguarded Triton import fails first, it folds into that
    importer's error (a named scope naming it); the importer keeps its error, a module that only
    times kernels keeps its host-helper scope."""
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/triton_mm/__init__.py": "",
        "pkg/triton_mm/perf_model.py": _PERF_MODEL,
        "pkg/triton_mm/matmul.py": _MATMUL,
        "pkg/bench.py": _BENCH,
    }))
    perf = _findings(report, "pkg/triton_mm/perf_model.py", "NPU910")
    assert all("benchmark harness" not in f["message"] for f in perf.values())
    assert all(f["severity"] == "info" for f in perf.values())
    assert (any("its importer's own unguarded Triton import fails first" in f["message"] for f in perf.values())
            or any("its importer's own unguarded Triton import fails first" in r
                   for r in _scopes(report, "pkg/triton_mm/perf_model.py", "NPU910").values()))
    assert _findings(report, "pkg/triton_mm/matmul.py", "NPU910")[2]["severity"] == "error"
    # (a module that only times kernels with `do_bench`: Triton's host helpers, as before)
    assert "uses only Triton's host helpers" in _scopes(report, "pkg/bench.py", "NPU910")[2]


_REGISTRY = '''\
import torch
from torch.nn.parallel import DataParallel

from pkg.registry import MODEL_WRAPPERS

MODEL_WRAPPERS.register_module(module=DataParallel)


def wrap(model):
    return DataParallel(model)
'''


def test_registry_registration_is_a_named_scope(tmp_path):
    """AM#29: `MODEL_WRAPPERS.register_module(module=DataParallel)` only registers a name: a named
    scope; building a DataParallel stays an error."""
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/registry.py": "MODEL_WRAPPERS = None\n",
        "pkg/wrappers.py": _REGISTRY,
    }))
    found = _findings(report, "pkg/wrappers.py", "NPU901")
    assert 6 not in found
    assert "a registration, not a use" in _scopes(report, "pkg/wrappers.py", "NPU901")[6]
    assert found[10]["severity"] == "error"


_PROJECT_INIT = '''\
import os

import torch


def _is_triton_available():
    if os.environ.get("PKG_ENABLE_TRITON", "0") == "1":
        return True
    if not torch.cuda.is_available():
        return False
    try:
        import triton  # noqa

        return True
    except ImportError:
        return False


def _has_triton():
    try:
        import triton  # noqa

        return True
    except ImportError:
        return False
'''

_TRITON_TEST = '''\
import pytest
import torch

import pkg

try:
    import triton
    import triton.language as tl

    _triton_available = pkg.{probe}()
except ImportError:
    _triton_available = False

enable_tests = _triton_available and torch.cuda.is_available()


@pytest.mark.skipif(not enable_tests, reason="no triton")
def test_kernel():
    @triton.jit
    def kernel(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)

    kernel[(1,)](torch.zeros(16, device="cuda"), BLOCK=16)
'''


def test_triton_tests_gated_by_a_probe_that_needs_cuda_are_a_named_scope(tmp_path):
    """AK#18: tests gated on a project probe that returns False where `torch.cuda.is_available()`
    is False (left as written) skip on an NPU host: a named scope naming the probe; a probe that
    only imports Triton keeps the "verify them there" note."""
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": _PROJECT_INIT,
        "tests/test_gated.py": _TRITON_TEST.format(probe="_is_triton_available"),
        "tests/test_plain.py": _TRITON_TEST.format(probe="_has_triton"),
    }))
    assert not _findings(report, "tests/test_gated.py", "NPU910")
    reason = " ".join(_scopes(report, "tests/test_gated.py", "NPU910").values())
    assert "in tests an NPU host skips" in reason and "pkg._is_triton_available()" in reason
    assert "pkg/__init__.py:9" in reason and "PKG_ENABLE_TRITON" in reason
    plain = _findings(report, "tests/test_plain.py", "NPU910")
    assert plain and all("verify them there" in f["message"] for f in plain.values())


_TILED = '''\
import torch
import triton
import triton.language as tl

from pkg.perf_model import estimate


@triton.jit
def tiled_kernel(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)
'''

_TILED_API = '''\
import torch


def is_triton_available():
    try:
        import triton  # noqa

        return True
    except ImportError:
        return False


if is_triton_available():
    from pkg.tiled import tiled_kernel
'''


def test_perf_model_behind_a_gated_importer_keeps_its_gated_note(tmp_path):
    """AM#16 (its copy in another project): no longer "a benchmark harness", the performance model
    is imported only by a kernel module itself imported only behind a Triton-availability test: a
    named scope pointing at that importer's info note (which names the gate), not an error."""
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/perf_model.py": _PERF_MODEL,
        "pkg/tiled.py": _TILED,
        "pkg/api.py": _TILED_API,
    }))
    # the helper itself: a named scope pointing at its importer's finding (redundant14.py, merged
    # after this test was written: the importer's note already covers it), never "a benchmark harness"
    assert _findings(report, "pkg/perf_model.py", "NPU910") == {}
    (scope,) = [s for s in report["skipped"] if s["path"] == "pkg/perf_model.py" and "start_line" in s]
    assert "a Triton helper without kernels" in scope["reason"] and "reported at pkg/tiled.py:" in scope["reason"]
    assert "benchmark harness" not in scope["reason"]
    tiled = _findings(report, "pkg/tiled.py", "NPU910")
    assert tiled and all(f["severity"] == "info" and "pkg/api.py:14 under" in f["message"] for f in tiled.values())


_DEVICE_UTILS = '''\
import torch


class DeviceSupport:
    device_type = "cuda"


def get_device_support():
    return DeviceSupport()


def _setup_device(device: torch.device) -> torch.device:
    local_rank = 0
    device_type = get_device_support().device_type
    if device.index is None:
        device = torch.device(type=device_type, index=local_rank)
    return device


def get_device(device=None):
    if device is None:
        device = "cpu"
    device = torch.device(device)
    if device.type in ["cuda", "npu", "xpu"]:
        device = _setup_device(device)
    return device


def keep_device(device):
    return torch.device(device)
'''

_DISTRIBUTED = '''\
import torch
import torch.distributed as dist

from pkg.utils import get_device, keep_device


def broadcast(tensor):
    if dist.get_backend() == "nccl":
        tensor = tensor.to(get_device("cuda"))
    dist.broadcast(tensor, src=0)
    return tensor


def gather(tensor):
    return tensor.to(keep_device("cuda"))


def home():
    return torch.device("cuda")
'''


def test_cuda_given_to_a_resolver_of_the_detected_device_is_a_label(tmp_path):
    """AK#7: "cuda" passed to a project `get_device` whose `_setup_device` rebuilds a device without
    an index with the detected accelerator's type is a label (a named scope); "cuda" passed to a
    project function that keeps it as the device stays a finding, and "cuda" given to
    `torch.device` stays rewritten."""
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/utils.py": _DEVICE_UTILS,
        "pkg/distributed.py": _DISTRIBUTED,
    }))
    found = _findings(report, "pkg/distributed.py", "NPU990")
    assert 9 not in found
    reason = _scopes(report, "pkg/distributed.py", "NPU990")[9]
    assert "a label the code resolves, not a device" in reason and "`_setup_device`, pkg/utils.py:16" in reason
    assert found[15]["severity"] == "warning"
    assert any(f["line"] == 19 and f["fixable"] for f in report["findings"] if f["path"] == "pkg/distributed.py")


_FP64_CAST = '''\
import torch


def test_cast_is_traceable():
    def convert_like(x, like):
        return x.to(device=like.device, dtype=like.dtype)

    compiled = torch.compile(convert_like, fullgraph=True)
    result = compiled(
        torch.ones(4, device="cuda", dtype=torch.float64),
        torch.ones(4, device="cuda", dtype=torch.float32),
    )
    assert result.dtype == torch.float32


def test_double_sum():
    def total(x, like):
        return x.sum() + like.sum()

    return total(
        torch.ones(4, device="cuda", dtype=torch.float64),
        torch.ones(4, device="cuda", dtype=torch.float32),
    )
'''


def test_float64_made_only_to_be_cast_is_a_named_scope(tmp_path):
    """AM#3: a float64 tensor passed only to a compiled function that returns it converted to the
    dtype of an fp32 tensor: nothing computes in float64 (a named scope); a float64 tensor a
    function sums stays a finding."""
    report = migrate_json(write_project(tmp_path, {"tests/test_cast.py": _FP64_CAST}))
    found = _findings(report, "tests/test_cast.py", "NPU930")
    assert 10 not in found
    assert "the source of a dtype conversion only" in _scopes(report, "tests/test_cast.py", "NPU930")[10]
    assert 21 in found and found[21]["severity"] != "info"
