"""Triton and CuTe-DSL module shapes an NPU host never runs (issue #16, round-20 audits BD#22,
BE#37): npu_migrate/tritonmods20.py. Each false case beside the nearest true case that stays."""

from __future__ import annotations

from .precision_helpers import migrate_json, with_as_written, write_project
from .test_h76 import CUSTOM_OP as _CUSTOM_OP

_SELECTOR = '''\
import torch
from transformers.utils import is_triton_available

if is_triton_available():
    import triton
    import triton.language as tl


def _jit(fn):
    return triton.jit(fn) if is_triton_available() else fn


_TRITON = is_triton_available()


def _use_triton(device: torch.device) -> bool:
    return _TRITON and device.type in ("cuda", "xpu")


def _use_triton_rewritten(device: torch.device) -> bool:
    return _TRITON and device.type == "cuda"


@_jit
def _square_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) ** 2, mask=offs < n)


def square(x):
    if _use_triton(x.device):
        _square_kernel[(1,)](x, x.numel(), BLOCK=1024)
        return x
    return x * x
'''

_KERNELS = '''\
from __future__ import annotations

import torch
from transformers.utils import is_triton_available

from .selector import _jit, {selector}

if is_triton_available():
    import triton
    import triton.language as tl


@_jit
def _div_kernel(a_ptr, b_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(a_ptr + offs, tl.load(a_ptr + offs) - tl.load(b_ptr + offs), mask=offs < n)


def _div_tile(a, b):
    return a - b


def divergence(a, b):
    n = a.numel()
    fold = {launch}
    return fold(a, b)
'''


def _findings(report: dict, path: str, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code]


def _project(tmp_path, files: dict[str, str]):
    return write_project(tmp_path, {"pkg/__init__.py": "", "pkg/kernels/__init__.py": "",
                                    "pkg/kernels/selector.py": _SELECTOR, **files})


def test_kernels_behind_an_imported_selector_are_a_named_scope(tmp_path):
    """BE#37: `_jit` and `_use_triton(device)` imported from a sibling module whose device
    allow-list the migration keeps: the torch tile runs on an NPU host."""
    report = migrate_json(_project(tmp_path, {"pkg/kernels/divergence.py": _KERNELS.format(
        selector="_use_triton", launch="_div_kernel[(n,)] if _use_triton(a.device) else _div_tile")}))
    assert not _findings(report, "pkg/kernels/divergence.py", "NPU910")
    scopes = [f for f in with_as_written(report) if f.get("scope") and f["code"] == "NPU910"
              and f["path"] == "pkg/kernels/divergence.py"]
    assert scopes and all("Triton kernels launched only on CUDA tensors" in f["message"]
                          and "`_use_triton` from pkg/kernels/selector.py:" in f["message"] for f in scopes)


def test_kernels_launched_without_the_imported_selector_stay_errors(tmp_path):
    """The nearest true case: the same imports, a launch with no device test in front of it."""
    report = migrate_json(_project(tmp_path, {"pkg/kernels/divergence.py": _KERNELS.format(
        selector="_use_triton", launch="_div_kernel[(n,)]")}))
    found = _findings(report, "pkg/kernels/divergence.py", "NPU910")
    assert found and found[0]["severity"] == "error"


def test_an_imported_selector_the_migration_rewrites_is_no_guard(tmp_path):
    """`device.type == "cuda"` is widened to the NPU by the rewrite: the kernel runs there."""
    report = migrate_json(_project(tmp_path, {"pkg/kernels/divergence.py": _KERNELS.format(
        selector="_use_triton_rewritten",
        launch="_div_kernel[(n,)] if _use_triton_rewritten(a.device) else _div_tile")}))
    found = _findings(report, "pkg/kernels/divergence.py", "NPU910")
    assert found and found[0]["severity"] == "error"


_PROBED = '''\
import importlib.util

_RUNTIME_PACKAGES = {{
    "cuda.bindings.driver": "cuda-python",
    "cutlass": "nvidia-cutlass-dsl",
}}


def _missing_runtime_packages():
    missing = []
    for module_name, package_name in _RUNTIME_PACKAGES.items():
        try:
            spec = importlib.util.find_spec(module_name)
        except (ModuleNotFoundError, ValueError):
            spec = None
        if spec is None:
            missing.append(package_name)
    return missing


def _runtime_available():
    return len(_missing_runtime_packages()) == 0


def _numpy_available():
    return importlib.util.find_spec("numpy") is not None


if {test}:
    import cutlass
    import cutlass.cute as cute

    SCALE = cutlass.Float32(448.0)
'''


def test_cute_code_under_a_module_level_probe_of_its_package_is_info(tmp_path):
    """BD#22: `if _runtime_available():` over find_spec of a table naming `cutlass`."""
    report = migrate_json(write_project(tmp_path, {"pkg/cute_utils.py": _PROBED.format(test="_runtime_available()")}))
    found = _findings(report, "pkg/cute_utils.py", "NPU911")
    assert len(found) == 1 and found[0]["severity"] == "info"
    assert "guarded by the module-level probe `_runtime_available()`" in found[0]["message"]
    assert "looks `cutlass` up with `importlib.util.find_spec`" in found[0]["message"]


def test_a_negated_probe_or_a_probe_of_another_package_keeps_the_error(tmp_path):
    for test in ("not _runtime_available()", "_numpy_available()"):
        report = migrate_json(write_project(tmp_path / test[:3], {"pkg/cute_utils.py": _PROBED.format(test=test)}))
        found = _findings(report, "pkg/cute_utils.py", "NPU911")
        assert found and found[0]["severity"] == "error", test


def test_an_import_outside_the_probed_block_keeps_the_error(tmp_path):
    text = _PROBED.format(test="_runtime_available()").replace("import importlib.util\n",
                                                              "import importlib.util\nimport cutlass.cute\n", 1)
    report = migrate_json(write_project(tmp_path, {"pkg/cute_utils.py": text}))
    found = _findings(report, "pkg/cute_utils.py", "NPU911")
    assert found and any(f["severity"] == "error" for f in found)



_CUTE_KERNEL = '''\
import cutlass
import cutlass.cute as cute

from pkg.{helper} import reduce_sum


def fused(x):
    return cute.compile(reduce_sum, x)
'''

_CUTE_HELPER = '''\
import cutlass
import cutlass.cute as cute


def reduce_sum(x):
    return cute.arch.warp_reduction(x)
'''


def _dispatched_project(tmp_path, extra: dict[str, str]):
    files = {"pkg/__init__.py": "", "pkg/layers/__init__.py": "", "pkg/cutedsl/__init__.py": "",
             "pkg/layers/custom_op.py": _CUSTOM_OP,
             "pkg/cutedsl/common.py": _CUTE_HELPER, "pkg/lib/__init__.py": "", "pkg/lib/shared.py": _CUTE_HELPER + "\n\nSHARED = True\n",
             "pkg/cutedsl/fused.py": _CUTE_KERNEL.format(helper="cutedsl.common"),
             "pkg/layers/norm.py": '''\
import torch

from pkg.layers.custom_op import CustomOp


class FusedNorm(CustomOp):
    def forward_cuda(self, x):
        from pkg.cutedsl.fused import fused
        return fused(x)

    def forward_native(self, x):
        return torch.nn.functional.layer_norm(x, x.shape[-1:])
''', **extra}
    return migrate_json(write_project(tmp_path, files))


def test_cute_modules_only_a_dispatched_cuda_method_loads_are_named_scopes(tmp_path):
    """BD#38: a CuTe-DSL kernel module imported only in `forward_cuda` of a dispatched op, and the
    helper only it imports: an NPU host never loads them, the package installed or not."""
    report = _dispatched_project(tmp_path, {})
    for path in ("pkg/cutedsl/fused.py", "pkg/cutedsl/common.py"):
        assert not _findings(report, path, "NPU911"), path
        reasons = [s["reason"] for s in report["skipped"] if s["path"] == path and "start_line" in s]
        assert any(r.startswith("not run on an NPU host (NPU911): imported only where an NPU host does not go")
                   and "platform-dispatched op's CUDA method" in r for r in reasons), reasons


def test_a_helper_a_loaded_module_also_imports_stays_reported(tmp_path):
    """The nearest true case: the same helper also imported at module level by a module an NPU host
    loads; and a kernel module imported in a class whose `forward_cuda` is all it has."""
    report = _dispatched_project(tmp_path, {
        "pkg/cutedsl/fused.py": _CUTE_KERNEL.format(helper="lib.shared"),
        "pkg/api.py": "from pkg.lib.shared import reduce_sum\n\n\ndef api(x):\n    return reduce_sum(x)\n",
        "pkg/layers/only.py": '''\
from pkg.layers.custom_op import CustomOp


class OnlyCuda(CustomOp):
    def forward_cuda(self, x):
        from pkg.cutedsl.common import reduce_sum
        return reduce_sum(x)
'''})
    for path in ("pkg/lib/shared.py", "pkg/cutedsl/common.py"):
        found = _findings(report, path, "NPU911")
        assert found and found[0]["severity"] == "error", (path, found)
    # (the kernel module itself is still only loaded by the dispatched op: a named scope)
    assert not _findings(report, "pkg/cutedsl/fused.py", "NPU911")


_DEVICE_HELPERS = '''\
import triton
import triton.language as tl


@triton.jit
def sync_threads():
    tl.inline_asm_elementwise("bar.sync 0;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def barrier(ptr, rank):
    tl.atomic_add(ptr + rank, 1)
'''

_COMMS = '''\
import torch
import triton
import triton.language as tl

from pkg.triton_utils import barrier, sync_threads


@triton.jit
def _exchange_kernel(ptr, rank, n, BLOCK: tl.constexpr):
    barrier(ptr, rank)
    sync_threads()
    offs = tl.arange(0, BLOCK)
    tl.store(ptr + offs, tl.load(ptr + offs), mask=offs < n)


def exchange(x, rank):
    _exchange_kernel[(1,)](x, rank, x.numel(), BLOCK=1024)
    return x
'''


def test_device_helpers_only_a_reported_kernel_module_calls_fold_into_it(tmp_path):
    """BD#14: a module of `@triton.jit` device functions (inline PTX), imported only by a module
    that reports its own unguarded Triton import and calls them only inside its kernels."""
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/triton_utils.py": _DEVICE_HELPERS,
                                                   "pkg/comms.py": _COMMS,
                                                   "tests/test_utils.py": "from pkg.triton_utils import barrier\n"}))
    assert not _findings(report, "pkg/triton_utils.py", "NPU910")
    found = _findings(report, "pkg/comms.py", "NPU910")
    assert len(found) == 1 and found[0]["severity"] == "error"
    assert "also the Triton device functions of pkg/triton_utils.py (its NPU910 at line 1)" in found[0]["message"]
    assert "`barrier`, `sync_threads`" in found[0]["message"] and "inline assembly" in found[0]["message"]


def test_device_helpers_a_host_function_also_calls_stay_reported(tmp_path):
    """The nearest true cases: the importer also calls a helper outside its kernels; another library
    module imports the helpers too.

    Since session 45 (tritonfirst34, round 33 HB#7 judged REDUNDANT) the first case's module, loaded
    only after the importer's own unguarded `import triton`, is folded into the importer's error with
    its lines listed (one root cause) instead of an error of its own: still reported, not dropped."""
    comms = _COMMS.replace("    return x\n", "    barrier(x, rank)\n    return x\n")
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/triton_utils.py": _DEVICE_HELPERS,
                                                   "pkg/comms.py": comms}))
    assert not _findings(report, "pkg/triton_utils.py", "NPU910")
    found = _findings(report, "pkg/comms.py", "NPU910")
    assert found and found[0]["severity"] == "error"
    assert "also covers `pkg/triton_utils.py`" in found[0]["message"] and "lines 1, 2, 5, 10" in found[0]["message"]
    report = migrate_json(write_project(tmp_path / "two", {
        "pkg/__init__.py": "", "pkg/triton_utils.py": _DEVICE_HELPERS, "pkg/comms.py": _COMMS,
        "pkg/api.py": "from pkg.triton_utils import barrier\n\nHELPERS = [barrier]\n"}))
    found = _findings(report, "pkg/triton_utils.py", "NPU910")
    assert found and found[0]["severity"] == "error"
