"""Issue #16, round-13 audits: dispatch values and capability tests the class itself settles.

- a backend branch (`elif backend == "fastlib":`) whose value comes from a method of the class that
  never returns "fastlib" on an NPU host (it returns other literals, another method's literals, or
  the configured value only after a validation that fails off CUDA) is a branch an NPU host does
  not take (AJ#4): its CUDA-only import is a named skipped scope. The same branch stays reported
  where the resolver may return the value unvalidated, or picks it on a default path;
- an `isinstance(self, CUDAOpBuilder)` test is false on an NPU host (its builders are other
  classes): the CUDA check it guards is a named skipped scope (AI#18); the same check without that
  test stays reported.
Each fixture is our own.
"""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

RESOLVER = """\
import torch
from mypkg.platforms import current_platform


class TopK(torch.nn.Module):
    def __init__(self, backend="auto"):
        super().__init__()
        self._backend = backend
        self._is_cuda = current_platform.is_cuda()

    def resolve(self, n):
        if self._backend == "auto":
            return self._auto(n)
        failures = []
        if self._backend == "fused":
            if n > 4:
                failures.append("n too large")
        elif self._backend == "fastlib":
            if not self._is_cuda:
                failures.append("requires a CUDA platform")
        if failures:
            raise RuntimeError("; ".join(failures))
        return self._backend

    def _auto(self, n):
        if n > 8:
            return "fused"
        return "plain"

    def forward(self, x, n):
        backend = self.resolve(n)
        if backend == "fused":
            return x.topk(n)
        elif backend == "fastlib":
            from flashinfer.topk import top_k_fast
            return top_k_fast(x, n)
        return x.sort()[0][:n]
"""

# the same class whose auto path may pick the CUDA library, and whose validation does not fail off CUDA
DEFAULT_PATH = RESOLVER.replace('        return "plain"\n', '        return "fastlib"\n')
UNVALIDATED = RESOLVER.replace("            if not self._is_cuda:\n", "            if n > 16:\n")

BUILDER = """\
import torch


class OpBuilder:
    def is_rocm_pytorch(self):
        return False

    def nvcc_args(self):
        return ["-O3", "--use_fast_math"]

    def jit_load(self):
        if isinstance(self, CUDAOpBuilder) and not self.is_rocm_pytorch():
            self.build_for_cpu = not torch.cuda.is_available()
        if isinstance(self, OpBuilder):
            self.build_for_cpu = not torch.cuda.is_available()
        from torch.utils.cpp_extension import load
        return load(name="op", sources=["op.cu"], extra_cuda_cflags=self.nvcc_args())


class CUDAOpBuilder(OpBuilder):
    pass
"""


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _flashinfer(text: str, tmp_path) -> tuple[list, list]:
    root = write_project(tmp_path, {"mypkg/topk.py": text})
    report = migrate_json(root)
    line = _line(text, "from flashinfer")
    findings = [f for f in report["findings"] if f["path"] == "mypkg/topk.py" and f["line"] == line]
    scopes = [s for s in report["skipped"] if s.get("path") == "mypkg/topk.py"
              and s["start_line"] <= line <= s["end_line"]]
    return findings, scopes


def test_backend_its_resolver_never_gives_on_npu_is_a_named_scope(tmp_path):
    findings, scopes = _flashinfer(RESOLVER, tmp_path / "a")
    assert not findings
    (scope,) = scopes
    assert "in a branch an NPU host does not take" in scope["reason"]
    assert '`TopK.resolve` never returns "fastlib" on an NPU host' in scope["reason"]
    assert "(NPU911)" in scope["reason"]


def test_backend_picked_on_the_default_path_stays_reported(tmp_path):
    findings, scopes = _flashinfer(DEFAULT_PATH, tmp_path / "b")
    assert [(f["code"], f["severity"]) for f in findings] == [("NPU911", "error")]
    assert not scopes


def test_backend_returned_without_a_cuda_validation_stays_reported(tmp_path):
    findings, scopes = _flashinfer(UNVALIDATED, tmp_path / "c")
    assert [(f["code"], f["severity"]) for f in findings] == [("NPU911", "error")]
    assert not scopes


def test_isinstance_cuda_op_builder_is_an_untaken_branch(tmp_path):
    root = write_project(tmp_path, {"ops/builder.py": BUILDER})
    report = migrate_json(root)
    gated = _line(BUILDER, "self.build_for_cpu = not torch.cuda")
    plain = gated + 2
    findings = [f for f in report["findings"] if f["path"] == "ops/builder.py"]
    assert not [f for f in findings if f["line"] == gated and f["severity"] != "info"]
    scopes = [s for s in report["skipped"] if s.get("path") == "ops/builder.py" and s["start_line"] <= gated <= s["end_line"]]
    assert scopes and "isinstance(self, CUDAOpBuilder)" in scopes[0]["reason"]
    # nearby true case: the same check behind an isinstance test of the generic builder stays reported
    assert not [s for s in report["skipped"] if s.get("path") == "ops/builder.py"
                and s["start_line"] <= plain <= s["end_line"]]
    assert [(f["code"], f["severity"]) for f in findings if f["line"] == plain] == [("NPU110", "warning")]
