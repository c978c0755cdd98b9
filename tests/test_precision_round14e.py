"""Issue #16, round-13 audits: findings that restate another finding of the run (redundant14.py).

- a CUDA-memory call that only consumes what a reported CUDA build of the same function produced
  (`load_inline(..., with_cuda=True)` then `CUDAPluggableAllocator(<the .so>)`, AH#24) is folded
  into the build's finding, with the module-level import only it reads; the same call before the
  build, or after an `if` that holds the build, stays;
- a kernel-less Triton helper (an autotuner class) imported only after its importers' own Triton
  imports, each reported (AH#5), is a named scope naming them; the same helper imported by a file
  without a Triton finding of its own stays a finding;
- a guarded `try: import apex.amp except ImportError: pass` whose names only a class reads that
  the run builds only after importing apex itself, reported there (AI#13), is a named scope; one
  read outside the class stays a finding.
Each fixture is our own.
"""

from __future__ import annotations

from .precision_helpers import AS_WRITTEN_PREFIX, migrate_json, write_project

ALLOCATOR = """\
import os

import torch
from torch.cuda.memory import CUDAPluggableAllocator

SOURCE = "extern \\"C\\" { void* my_alloc(long n, int d, void* s) { return 0; } }"
_pool = None


def get_pool(out_dir):
    global _pool
    if _pool is None:
        import torch.utils.cpp_extension

        torch.utils.cpp_extension.load_inline(
            name="my_alloc", cpp_sources=SOURCE, with_cuda=True, is_python_module=False, build_directory=out_dir)
        alloc = CUDAPluggableAllocator(os.path.join(out_dir, "my_alloc.so"), "my_alloc", "my_free").allocator()
        _pool = alloc
    return _pool


def early_pool(out_dir):
    alloc = torch.cuda.memory.CUDAPluggableAllocator(os.path.join(out_dir, "x.so"), "a", "f")
    torch.utils.cpp_extension.load_inline(name="x", cpp_sources=SOURCE, with_cuda=True)
    return alloc


def maybe_pool(out_dir, build):
    if build:
        torch.utils.cpp_extension.load_inline(name="y", cpp_sources=SOURCE, with_cuda=True)
    return torch.cuda.memory.CUDAPluggableAllocator(os.path.join(out_dir, "y.so"), "a", "f")
"""


def _line(text: str, needle: str, start: int = 0) -> int:
    lines = text.splitlines()
    return next(i for i in range(start, len(lines)) if needle in lines[i]) + 1


def test_allocator_after_own_cuda_build_folds_into_it(tmp_path):
    root = write_project(tmp_path, {"pkg/alloc.py": ALLOCATOR, "pkg/__init__.py": ""})
    report = migrate_json(root)
    findings = [f for f in report["findings"] if f["path"] == "pkg/alloc.py" and not f["fixable"]]
    build = _line(ALLOCATOR, "torch.utils.cpp_extension.load_inline(")
    consumer = _line(ALLOCATOR, "alloc = CUDAPluggableAllocator(")
    imported = _line(ALLOCATOR, "from torch.cuda.memory import")
    anchor = next(f for f in findings if f["line"] == build)
    assert anchor["code"] == "NPU911" and anchor["severity"] == "error"
    assert {consumer, imported} <= {a[0] for a in anchor["also"]}
    assert "reached only after this function's CUDA build" in anchor["message"]
    assert not [f for f in findings if f["line"] in (consumer, imported) and f["code"] == "NPU202"]
    # nearby true cases: the allocator built before the build, and after an `if` holding it, stay
    early = _line(ALLOCATOR, "alloc = torch.cuda.memory.CUDAPluggableAllocator(")
    after_if = _line(ALLOCATOR, "return torch.cuda.memory.CUDAPluggableAllocator(")
    kept = {f["line"] for f in findings if f["code"] == "NPU202" and f["severity"] == "error"}
    kept |= {a[0] for f in findings if f["code"] == "NPU202" and f["severity"] == "error" for a in f["also"]}
    assert {early, after_if} <= kept


AUTOTUNE = """\
import time

import triton


class Tuner(triton.KernelInterface):
    def __init__(self, fn, configs):
        self.fn = fn
        self.configs = configs or [triton.Config({}, num_warps=4)]

    def run(self, *args, **kwargs):
        try:
            return triton.testing.do_bench(lambda: self.fn.run(*args, **kwargs))
        except triton.OutOfResources:
            return float("inf")


def autotune(configs):
    return lambda fn: Tuner(fn, configs)
"""

KERNELS = """\
import torch
import triton
import triton.language as tl

from . import tuner


@tuner.autotune(configs=[])
@triton.jit
def add_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
"""

FUSED = """\
from ..utils import HAS_TRITON

if HAS_TRITON:
    import triton

    from .ops import tuner

    @tuner.autotune(configs=[])
    @triton.jit
    def mul_kernel(x_ptr, n):
        pass
"""

PLAIN = """\
from .ops import tuner


def pick(configs):
    return tuner.autotune(configs)
"""


def _triton_helper(report: dict, path: str):
    findings = [f for f in report["findings"] if f["path"] == path and f["code"] == "NPU910"]
    scopes = [s for s in report["skipped"] if s.get("path") == path and s["reason"].startswith(AS_WRITTEN_PREFIX)]
    return findings, scopes


def _triton_project(tmp_path, extra: dict | None = None):
    files = {"pkg/__init__.py": "", "pkg/utils.py": "import importlib.util\nHAS_TRITON = importlib.util.find_spec('triton') is not None\n",
             "pkg/nn/__init__.py": "", "pkg/nn/ops/__init__.py": "", "pkg/nn/ops/tuner.py": AUTOTUNE,
             "pkg/nn/ops/kernels.py": KERNELS, "pkg/nn/fused.py": FUSED}
    files.update(extra or {})
    return write_project(tmp_path / ("b" if extra else "a"), files)


def test_triton_helper_of_reported_importers_is_a_named_scope(tmp_path):
    report = migrate_json(_triton_project(tmp_path))
    findings, scopes = _triton_helper(report, "pkg/nn/ops/tuner.py")
    assert not findings, findings
    (scope,) = scopes
    assert "a Triton helper without kernels, imported only after its importers' own Triton imports" in scope["reason"]
    assert "pkg/nn/ops/kernels.py:5" in scope["reason"] and "pkg/nn/fused.py:6" in scope["reason"]
    assert "benchmark harness" not in scope["reason"]
    # the importers keep their own Triton findings
    assert [f for f in report["findings"] if f["path"] == "pkg/nn/ops/kernels.py" and f["code"] == "NPU910"]
    assert [f for f in report["findings"] if f["path"] == "pkg/nn/fused.py" and f["code"] == "NPU910"]


def test_triton_helper_with_an_importer_without_triton_stays(tmp_path):
    report = migrate_json(_triton_project(tmp_path, {"pkg/nn/plain.py": PLAIN}))
    findings, scopes = _triton_helper(report, "pkg/nn/ops/tuner.py")
    assert findings and not [s for s in scopes if "a Triton helper without kernels" in s["reason"]]


AMP_INIT = """\
def convert_to_amp(model, optimizer, config):
    import apex.amp as amp

    model, optimizer = amp.initialize(model, optimizer, **config)
    from .amp_optimizer import AmpOptimizer

    return model, AmpOptimizer(optimizer)
"""

AMP_OPTIMIZER = """\
try:
    import apex.amp as amp
except ImportError:
    pass


class AmpOptimizer:
    def __init__(self, optimizer):
        self.optimizer = optimizer

    def backward(self, loss):
        with amp.scale_loss(loss, self.optimizer) as scaled:
            scaled.backward()
"""


def test_guarded_apex_import_read_by_a_class_built_after_apex_is_a_named_scope(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/amp/__init__.py": AMP_INIT,
                                    "pkg/amp/amp_optimizer.py": AMP_OPTIMIZER})
    report = migrate_json(root)
    assert not [f for f in report["findings"] if f["path"] == "pkg/amp/amp_optimizer.py" and f["code"] == "NPU902"]
    scopes = [s for s in report["skipped"] if s.get("path") == "pkg/amp/amp_optimizer.py"]
    assert [s for s in scopes if s["reason"].startswith(AS_WRITTEN_PREFIX + "NPU902): guarded import whose names only `AmpOptimizer`")]
    # nearby true case: the builder's own import of apex stays an error
    assert [f for f in report["findings"] if f["path"] == "pkg/amp/__init__.py" and f["code"] == "NPU902"
            and f["severity"] == "error"]


def test_guarded_apex_import_read_outside_the_class_stays(tmp_path):
    text = AMP_OPTIMIZER + "\n\ndef scale(loss, optimizer):\n    return amp.scale_loss(loss, optimizer)\n"
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/amp/__init__.py": AMP_INIT,
                                    "pkg/amp/amp_optimizer.py": text})
    report = migrate_json(root)
    assert [f for f in report["findings"] if f["path"] == "pkg/amp/amp_optimizer.py" and f["code"] == "NPU902"]
