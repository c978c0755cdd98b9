"""Issue #16, precision: device checks kept meaning CUDA whose other path is the code's own
fallback (npu_migrate/keptgates.py).

NPU110 keeps a check meaning CUDA when the code it guards is CUDA-only. On an NPU host the check is
false and the code's own `else`, fall-through, other arm or `False` answer runs; where that is a
fallback, the check runs as written there and becomes a named skipped scope ("runs as written on an
NPU host (NPU110): ..."). Where the NPU host's path raises, exits, skips, needs what the CUDA branch
set up, or reaches a reported CUDA-only call, it stays a warning. Each test pairs the two. Fixtures
are written for these tests.
"""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import AS_WRITTEN_PREFIX, migrate_json, write_project


def _run(tmp_path: Path, files: dict[str, str]) -> tuple[dict, dict]:
    """({(path, line): finding} of NPU110's findings and the places merged into them,
    {(path, line): reason} of the NPU110 scopes named "runs as written on an NPU host")."""
    report = migrate_json(write_project(tmp_path, files))
    found = {}
    for finding in report["findings"]:
        if finding["code"] == "NPU110" and not finding["fixable"]:
            found[(finding["path"], finding["line"])] = finding
            for line, _column, _source in finding.get("also", ()):
                found[(finding["path"], line)] = finding
    scopes = {}
    for entry in report["skipped"]:
        reason = entry.get("reason", "")
        if "start_line" in entry and reason.startswith(AS_WRITTEN_PREFIX + "NPU110)"):
            for line in range(entry["start_line"], entry["end_line"] + 1):
                scopes[(entry["path"], line)] = reason
    return found, scopes


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


BACKEND_IMPORT = '''\
import torch

if torch.cuda.is_available():
    from .backends.cuda import ops as cuda_ops

if hasattr(torch, "xpu") and torch.xpu.is_available():
    from .backends.xpu import ops as xpu_ops
'''

BACKEND_IMPORT_USED = '''\
import torch

if torch.cuda.is_available():
    from .backends.cuda import ops

ops.register_all()
'''

BACKEND_IMPORT_READ_BY_A_FUNCTION = '''\
import torch


def register():
    ops.register_all()


if torch.cuda.is_available():
    from .backends.cuda import ops
'''


def test_backend_import_under_a_cuda_check_runs_as_written(tmp_path):
    found, scopes = _run(tmp_path, {"pkg/__init__.py": BACKEND_IMPORT,
                                    "pkg/backends/cuda/ops.py": "def register_all():\n    pass\n",
                                    "other/__init__.py": BACKEND_IMPORT_USED,
                                    "third/__init__.py": BACKEND_IMPORT_READ_BY_A_FUNCTION})
    gate = _line(BACKEND_IMPORT, "torch.cuda.is_available()")
    assert ("pkg/__init__.py", gate) not in found
    assert "whose fallback an NPU host runs" in scopes[("pkg/__init__.py", gate)]
    assert "skips the CUDA branch" in scopes[("pkg/__init__.py", gate)]
    # the module is used after the check, unguarded: an NPU host reaches `ops` unbound
    used = _line(BACKEND_IMPORT_USED, "torch.cuda.is_available()")
    assert found[("other/__init__.py", used)]["severity"] == "warning"
    assert ("other/__init__.py", used) not in scopes
    # ... or a function of the module reads it when called, wherever it is defined
    read = _line(BACKEND_IMPORT_READ_BY_A_FUNCTION, "torch.cuda.is_available()")
    assert found[("third/__init__.py", read)]["severity"] == "warning"


TOOLCHAIN_PROBE = '''\
import torch
from .base import CUDAOpBuilder, installed_cuda_version


class RaggedBuilder(CUDAOpBuilder):
    def is_compatible(self, verbose=False):
        cuda_okay = True
        if torch.cuda.is_available():
            sys_cuda_major, _ = installed_cuda_version()
            torch_cuda_major = int(torch.version.cuda.split(".")[0])
            if torch_cuda_major < 11 or sys_cuda_major < 11:
                cuda_okay = False
        return super().is_compatible(verbose) and cuda_okay
'''

TOOLCHAIN_REQUIRED = '''\
import torch
from .base import CUDAOpBuilder, installed_cuda_version


class StrictBuilder(CUDAOpBuilder):
    def is_compatible(self, verbose=False):
        if not torch.cuda.is_available():
            raise RuntimeError("this op needs the CUDA toolchain")
        sys_cuda_major, _ = installed_cuda_version()
        return sys_cuda_major >= 11
'''


def test_toolchain_probe_in_is_compatible_runs_as_written(tmp_path):
    found, scopes = _run(tmp_path, {"ops/ragged.py": TOOLCHAIN_PROBE, "ops/strict.py": TOOLCHAIN_REQUIRED})
    gate = _line(TOOLCHAIN_PROBE, "torch.cuda.is_available()")
    version = _line(TOOLCHAIN_PROBE, "torch.version.cuda")
    assert ("ops/ragged.py", gate) not in found and ("ops/ragged.py", version) not in found
    # the scope covers the check and the CUDA-only probe it guards (folded into it)
    assert "whose fallback an NPU host runs" in scopes[("ops/ragged.py", gate)]
    assert ("ops/ragged.py", version) in scopes
    # `raise` unless CUDA: the NPU host's path fails, the check stays a finding
    strict = _line(TOOLCHAIN_REQUIRED, "torch.cuda.is_available()")
    assert found[("ops/strict.py", strict)]["severity"] == "warning"
    assert ("ops/strict.py", strict) not in scopes


DISPATCH = '''\
import ctypes as ct

import torch


def stream_of(tensor):
    if tensor.device.type == "cuda":
        return ct.c_void_p(torch._C._cuda_getCurrentRawStream(tensor.device.index))
    return None
'''

DISPATCH_NEEDS_BRANCH = '''\
import ctypes as ct

import torch


def handle_of(tensor):
    if tensor.device.type == "cuda":
        raw = torch._C._cuda_getCurrentRawStream(tensor.device.index)
    return ct.c_void_p(raw)
'''


def test_device_type_dispatch_with_a_generic_path_after_runs_as_written(tmp_path):
    found, scopes = _run(tmp_path, {"pkg/streams.py": DISPATCH, "pkg/handles.py": DISPATCH_NEEDS_BRANCH})
    gate = _line(DISPATCH, 'tensor.device.type == "cuda"')
    assert ("pkg/streams.py", gate) not in found
    assert "whose fallback an NPU host runs" in scopes[("pkg/streams.py", gate)]
    # the code after the check reads what only the CUDA branch binds (`raw`)
    needs = _line(DISPATCH_NEEDS_BRANCH, 'tensor.device.type == "cuda"')
    assert found[("pkg/handles.py", needs)]["severity"] == "warning"
    assert ("pkg/handles.py", needs) not in scopes


SETUP = '''\
import os

import torch
from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, CppExtension, CUDAExtension


def get_cuda_version(home):
    return 1208


def get_extensions():
    extension = CppExtension
    sources = ["csrc/ops.cpp"]
    flags = {"cxx": ["-O2"]}
    if (torch.cuda.is_available() and CUDA_HOME is not None) or os.getenv("FORCE_CUDA", "0") == "1":
        cuda_version = get_cuda_version(CUDA_HOME)
        extension = CUDAExtension
        sources += ["csrc/ops_cuda.cu"]
        flags["nvcc"] = ["-O3"]
    return [extension("pkg._C", sources, extra_compile_args=flags)]


setup(name="pkg", ext_modules=get_extensions())
'''

BUILD_REQUIRES_CUDA = '''\
import sys

import torch
from torch.utils.cpp_extension import CUDA_HOME, CUDAExtension


def get_cuda_version(home):
    return 1208


def get_extensions():
    if not (torch.cuda.is_available() and CUDA_HOME is not None):
        sys.exit("the CUDA toolchain is required to build")
    cuda_version = get_cuda_version(CUDA_HOME)
    return [CUDAExtension("pkg._C", ["csrc/ops_cuda.cu"])]
'''


def test_setup_cuda_build_choice_runs_as_written_and_the_build_stays_reported(tmp_path):
    found, scopes = _run(tmp_path, {"setup.py": SETUP, "tools/build.py": BUILD_REQUIRES_CUDA})
    gate = _line(SETUP, "torch.cuda.is_available()")
    assert ("setup.py", gate) not in found
    assert "whose fallback an NPU host runs" in scopes[("setup.py", gate)]
    report = migrate_json(write_project(tmp_path / "again", {"setup.py": SETUP}))
    # the CUDA build itself stays a finding (NPU911)
    assert any(f["code"] == "NPU911" and f["path"] == "setup.py" for f in report["findings"])
    # exits unless CUDA: the NPU host's path stops there
    strict = _line(BUILD_REQUIRES_CUDA, "torch.cuda.is_available()")
    assert found[("tools/build.py", strict)]["severity"] == "warning"
    assert ("tools/build.py", strict) not in scopes


PREDICATE = '''\
import torch

try:
    import triton  # noqa: F401
    _TRITON_AVAILABLE = True
except ImportError:
    _TRITON_AVAILABLE = False


def rows_supported(rows):
    return _TRITON_AVAILABLE and rows.device.type == "cuda" and rows.dim() == 2


def resolve(backend, logits):
    on_cuda = logits.device.type == "cuda"
    if backend == "auto":
        return "triton" if on_cuda and _TRITON_AVAILABLE else "torch"
    if backend == "triton" and not (on_cuda and _TRITON_AVAILABLE):
        raise RuntimeError("the Triton backend needs CUDA logits")
    return backend
'''


def test_triton_predicate_answers_false_but_a_raise_on_the_npu_path_stays(tmp_path):
    found, scopes = _run(tmp_path, {"pkg/kernels.py": PREDICATE})
    predicate = _line(PREDICATE, "return _TRITON_AVAILABLE and rows.device.type")
    assert ("pkg/kernels.py", predicate) not in found
    assert "`rows_supported()` answers False" in scopes[("pkg/kernels.py", predicate)]
    # `on_cuda` is also tested in front of a `raise`: an NPU host asking for Triton gets the project's
    # own error, and "auto" picks the torch path there: no port work (round-9 audit; samefile.py)
    kept = _line(PREDICATE, "on_cuda = ")
    assert ("pkg/kernels.py", kept) not in found
    assert "a fast-path selector kept meaning CUDA" in scopes[("pkg/kernels.py", kept)]


PROFILER = '''\
import torch


class Recipe:
    def train(self, steps):
        for idx in range(steps):
            if self.profile_memory and idx == 0 and self._device.type == "cuda":
                torch.cuda.memory._record_memory_history()
            self.step(idx)
'''

PROFILER_UNGUARDED = '''\
import torch


class Recipe:
    def train(self, steps):
        if self._device.type == "cuda":
            torch.cuda.memory._record_memory_history()
        self.run(steps)
        torch.cuda.memory._dump_snapshot("snapshot.pickle")
'''


def test_memory_history_gate_folds_its_branch_unless_cuda_code_follows_unguarded(tmp_path):
    """A gate around a CUDA-only call without an NPU counterpart (`torch.cuda._sleep`) runs as
    written; torchtune's memory-history gate stays a warning: torch_npu has
    torch.npu.memory._record_memory_history, and the NPU host would silently skip it (round 8)."""
    sleeper = PROFILER.replace("self.profile_memory and idx == 0", "self.delay").replace(
        "torch.cuda.memory._record_memory_history()", "torch.cuda._sleep(1000)")
    report = migrate_json(write_project(tmp_path, {"recipe.py": PROFILER, "sleeper.py": sleeper,
                                                   "unguarded.py": PROFILER_UNGUARDED}))
    gate = _line(sleeper, 'self._device.type == "cuda"')
    call = _line(sleeper, "_sleep")
    # neither the check nor the CUDA-only call it guards is a finding: both in the named scope
    assert not [f for f in report["findings"] if f["path"] == "sleeper.py" and not f["fixable"]]
    scope = next(e for e in report["skipped"] if e["path"] == "sleeper.py" and "start_line" in e)
    assert scope["start_line"] == gate and scope["end_line"] == call
    assert scope["reason"].startswith(AS_WRITTEN_PREFIX + "NPU110)")
    # the NPU has the guarded feature: the kept check stays a warning, with the call folded in
    (history,) = [f for f in report["findings"] if f["path"] == "recipe.py" and not f["fixable"]]
    assert history["code"] == "NPU110" and history["severity"] == "warning"
    assert [a[0] for a in history["also"]] == [_line(PROFILER, "_record_memory_history")]
    # an unguarded CUDA-only call after the check: the NPU host reaches it, the check stays
    kept = [f for f in report["findings"] if f["path"] == "unguarded.py" and f["code"] == "NPU110"]
    assert kept and kept[0]["severity"] == "warning"
    assert any(f["path"] == "unguarded.py" and f["line"] == _line(PROFILER_UNGUARDED, "_dump_snapshot")
               and not f["fixable"] for f in report["findings"])



ELSE_FALLBACK = '''\
import torch


def kernel_version(x):
    if x.device.type == "cuda":
        version = int(torch.version.cuda.split(".")[0])
    else:
        version = 0
    return version
'''

NPU_PATH_NOT_A_FALLBACK = '''\
import torch


def toolkit(x):
    if x.device.type == "cuda":
        version = int(torch.version.cuda.split(".")[0])
    else:
        version = torch.version.cuda.split(".")
    return version


def probe():
    if torch.cuda.is_available():
        major = int(torch.version.cuda.split(".")[0])
        return major
    raise RuntimeError("the CUDA toolchain is required")


def test_toolkit():
    if torch.cuda.is_available():
        assert int(torch.version.cuda.split(".")[0]) >= 11
'''


def test_else_fallback_runs_as_written_but_a_cuda_else_a_raise_after_or_a_test_body_stay(tmp_path):
    found, scopes = _run(tmp_path, {"pkg/fallback.py": ELSE_FALLBACK, "pkg/strict.py": NPU_PATH_NOT_A_FALLBACK})
    gate = _line(ELSE_FALLBACK, 'x.device.type == "cuda"')
    assert ("pkg/fallback.py", gate) not in found
    assert "the `else` branch runs there" in scopes[("pkg/fallback.py", gate)]
    # the `else` reaches CUDA-only code, a `raise` follows the check, a test would check nothing
    lines = [i for i, text in enumerate(NPU_PATH_NOT_A_FALLBACK.splitlines(), 1)
             if 'x.device.type == "cuda"' in text or "torch.cuda.is_available()" in text]
    assert len(lines) == 3
    for line in lines:
        assert found[("pkg/strict.py", line)]["severity"] == "warning", (line, found)
        assert ("pkg/strict.py", line) not in scopes


NVIDIA_OPS_GATE = '''\
import torch


def forward(x):
    fused = None
    if x.is_cuda and x.dtype == torch.bfloat16:
        from vllm.models.m.nvidia.ops.towers import rmsnorm_gelu

        fused = rmsnorm_gelu
    if fused is not None:
        return fused(x)
    return torch.nn.functional.gelu(x)


def place(x):
    if x.is_cuda:
        return x.half()
    return x
'''


def test_check_guarding_the_projects_nvidia_code_is_not_widened(tmp_path):
    # round-13 audit AJ#11 (vLLM's inkling towers): widened to "on an accelerator", the check
    # sent NPU tensors into the project's NVIDIA Triton kernels, where the original ran the
    # pure-torch path on an NPU host
    report = migrate_json(write_project(tmp_path, {"proj/models/m/towers.py": NVIDIA_OPS_GATE}))
    rewritten = {f["line"] for f in report["findings"] if f["fixable"] and f["path"] == "proj/models/m/towers.py"}
    assert _line(NVIDIA_OPS_GATE, "if x.is_cuda and") not in rewritten
    assert _line(NVIDIA_OPS_GATE, "    if x.is_cuda:") in rewritten  # a check guarding plain torch is widened


def test_nvidia_gate_kept_and_a_second_run_changes_nothing():
    from npu_migrate import catalogue
    from npu_migrate.engine import migrate_source
    from npu_migrate.model import Options

    options = Options(enabled=catalogue.enabled_codes(), hot_slices=True)
    new = migrate_source(NVIDIA_OPS_GATE.encode(), "vllm/models/m/towers.py", options).new
    assert new is not None and b"if x.is_cuda and x.dtype == torch.bfloat16:" in new
    assert migrate_source(new, "vllm/models/m/towers.py", options).new is None


KERNEL_MODULE = '''\
import cutlass
import torch


def fused(x, weight):
    return cutlass.fused_norm(x, weight)
'''

REBOUND_AFTER = '''\
import torch


def norm(x, weight, residual):
    if x.is_cuda:
        from .kernels import fused

        output = fused(x + residual, weight)
        return output, residual
    residual_out = x + residual
    output = residual_out * weight
    return output, residual_out
'''

READ_BEFORE_REBOUND = '''\
import torch


def norm(x, weight, residual):
    if x.is_cuda:
        from .kernels import fused

        output = fused(x + residual, weight)
    total = output.sum()
    output = x * weight
    return output, total
'''


def test_a_name_the_fall_through_binds_again_does_not_need_the_cuda_branch(tmp_path):
    """vLLM's Step5 `apply_step5_add_rms_norm`: the CUDA branch binds `output` and returns it; the
    torch path after the `if` assigns `output` anew before reading it: a fallback. Where the
    fall-through reads `output` before binding it again, an NPU host reads it unbound: kept."""
    found, scopes = _run(tmp_path, {"pkg/__init__.py": "", "pkg/kernels.py": KERNEL_MODULE,
                                    "pkg/norm.py": REBOUND_AFTER, "pkg/strict.py": READ_BEFORE_REBOUND})
    gate = _line(REBOUND_AFTER, "x.is_cuda")
    assert ("pkg/norm.py", gate) not in found
    assert "whose fallback an NPU host runs" in scopes[("pkg/norm.py", gate)]
    strict = _line(READ_BEFORE_REBOUND, "x.is_cuda")
    assert found[("pkg/strict.py", strict)]["severity"] == "warning"
    assert ("pkg/strict.py", strict) not in scopes
