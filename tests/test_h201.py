"""Round 34 rows judged false under policy P1 (opt-in code reported as an error or warning), h201.
Each false case is paired with its nearest true case, which stays reported."""

from __future__ import annotations

from .precision_helpers import findings_at, migrate_json, write_project

# IA#3 (vLLM's kernels/helion/ops/silu_mul_fp8.py): a library op module that raises ImportError at
# import unless the probed optional package is installed; its FP8 compute runs only past the guard.
PROBES = """\
import importlib.util


def _has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def has_fancyopt() -> bool:
    return _has_module("fancyopt")


def has_triton() -> bool:
    return _has_module("triton")
"""

OP = """\
import torch

from pkg.probes import has_{pkg}

if not has_{pkg}():
    raise ImportError("this kernel requires {pkg}. Install it with: pip install {pkg}")

import {pkg}.language as hl


def silu_mul_fp8(x):
    out = torch.empty(x.shape, device=x.device, dtype=torch.float8_e4m3fn)
    for tile in hl.tile(x.shape):
        out[tile] = x[tile]
    return out


def baseline(x):
    return torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
"""


def test_op_module_raising_unless_a_probed_optional_package_imports_is_opt_in_info(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/probes.py": PROBES,
                                    "pkg/ops/__init__.py": "", "pkg/ops/silu.py": OP.format(pkg="fancyopt")})
    found = findings_at(migrate_json(root), "pkg/ops/silu.py", "NPU913")
    assert found and all(f["severity"] == "info" for f in found.values()), found
    message = next(iter(found.values()))["message"]
    assert "only when the optional package `fancyopt` is installed" in message, message
    assert "`if not has_fancyopt(): raise`, line 5" in message, message


def test_op_module_raising_unless_a_package_an_npu_host_has_keeps_its_error(tmp_path):
    # the nearest true case: the same guard on Triton (installed on an NPU host): the module loads there
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/probes.py": PROBES,
                                    "pkg/ops/__init__.py": "", "pkg/ops/silu.py": OP.format(pkg="triton")})
    found = findings_at(migrate_json(root), "pkg/ops/silu.py", "NPU913")
    assert found and all(f["severity"] == "error" for f in found.values()), found


# IA#36 (SGLang's srt/checkpoint_engine/checkpoint_engine_worker.py): a worker extension that re-raises
# ImportError with the install hint of one of the project's extras.
WORKER = """\
import torch

try:
    from ckptengine.worker import update_weights_from_ipc
except ImportError:
    raise ImportError(
        "ckptengine is not installed. "
        "Please install it with: {hint}"
    )


class WorkerExtension:
    def get_device_uuid(self) -> str:
        device_id = torch.cuda.current_device()
        return f"GPU-{{torch.cuda.get_device_properties(device_id).uuid!s}}"

    def update(self, handles):
        update_weights_from_ipc(handles)
"""


def test_module_raising_unless_an_extra_of_the_project_is_installed_is_opt_in_info(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "",
                                    "pkg/worker.py": WORKER.format(hint="pip install pkg[ckpt-engine]")})
    found = findings_at(migrate_json(root), "pkg/worker.py", "NPU931")
    assert found and all(f["severity"] == "info" for f in found.values()), found
    message = next(iter(found.values()))["message"]
    assert "only when the optional package `ckptengine` is installed" in message, message
    assert "pip install pkg[ckpt-engine]" in message, message


def test_module_raising_unless_a_plain_dependency_imports_keeps_its_error(tmp_path):
    # the nearest true case: the hint names a plain package (no extra, no probe): a required
    # dependency, installed wherever the project is
    root = write_project(tmp_path, {"pkg/__init__.py": "",
                                    "pkg/worker.py": WORKER.format(hint="pip install ckptengine")})
    found = findings_at(migrate_json(root), "pkg/worker.py", "NPU931")
    assert found and all(f["severity"] != "info" for f in found.values()), found


# IB#20 (vLLM's model_executor/determinism/batch_invariant.py:1381/1441): CUDA matmul switches set
# inside a function's `if envs.VLLM_BATCH_INVARIANT:` block (off by default), and in the one function
# only that block calls
DET_ENVS = """\
import os

environment_variables = {
    "PKG_BATCH_INVARIANT": lambda: bool(int(os.getenv("PKG_BATCH_INVARIANT", "0"))),
}
"""

DET = """\
import torch

from pkg import envs


def enable_mode():
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False


def init_invariance():
    if {test}:
        enable_mode()
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_fp16_accumulation = False
"""

WORKER_INIT = """\
from pkg.det import init_invariance


def init_worker():
    init_invariance()
"""


def _det(tmp_path, default="0", test="envs.PKG_BATCH_INVARIANT"):
    return write_project(tmp_path / f"{default}{len(test)}", {
        "pkg/__init__.py": "", "pkg/envs.py": DET_ENVS.replace('"0"', f'"{default}"'),
        "pkg/det.py": DET.format(test=test), "pkg/worker.py": WORKER_INIT})


def test_code_in_a_functions_default_off_env_block_and_what_only_it_calls_is_opt_in_info(tmp_path):
    found = findings_at(migrate_json(_det(tmp_path)), "pkg/det.py", "NPU404")
    opt = {line: f for line, f in found.items() if "PKG_BATCH_INVARIANT" in f["message"]}
    assert opt and all(f["severity"] == "info" for f in opt.values()), found
    message = " ".join(f["message"] for f in found.values())
    assert "only when the environment variable `PKG_BATCH_INVARIANT` is set" in message, message
    assert "`enable_mode` runs only from line 12, under `if envs.PKG_BATCH_INVARIANT:` (line 11)" in message, message
    assert "the code runs only under `if envs.PKG_BATCH_INVARIANT:` (line 11) in `init_invariance`" in message, message
    # the statement after the `if` runs on every call: kept
    after = [f for f in found.values() if f["severity"] != "info"]
    assert [f["line"] for f in after] == [14], found


def test_the_same_block_under_a_switch_on_by_default_or_negated_keeps_its_warning(tmp_path):
    # the nearest true cases: the switch is on by default, or the block runs while it is unset
    for root in (_det(tmp_path, default="1"), _det(tmp_path, test="not envs.PKG_BATCH_INVARIANT")):
        found = findings_at(migrate_json(root), "pkg/det.py", "NPU404")
        assert found and all(f["severity"] != "info" for f in found.values()), (root, found)
        assert all("only when the environment variable" not in f["message"] for f in found.values()), found


# IC#3 (ColossalAI's examples/language/performance_evaluator.py:77): a helper picks between a profiler
# asked for CUDA activity and a no-op stand-in by its flag, and nothing of the run calls it
PROFILE_HELPER = """\
from torch.profiler import ProfilerActivity, profile


class DummyProfiler:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def get_profile_context(enable_flag, save_dir):
    if enable_flag:
        return profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    else:
        return DummyProfiler()
"""

TRAIN = """\
from examples.perf import get_profile_context


def train(step):
    with get_profile_context(True, "/tmp/prof") as prof:
        step()
"""


def test_profiler_an_uncalled_helper_builds_only_when_its_flag_is_passed_is_opt_in_info(tmp_path):
    root = write_project(tmp_path, {"examples/__init__.py": "", "examples/perf.py": PROFILE_HELPER})
    found = findings_at(migrate_json(root), "examples/perf.py", "NPU935")
    assert found and all(f["severity"] == "info" for f in found.values()), found
    message = next(iter(found.values()))["message"]
    assert "only when `enable_flag` is passed true to `get_profile_context`" in message, message
    assert "otherwise it uses `DummyProfiler()`, line 16" in message, message


def test_profiler_helper_a_file_of_the_run_calls_or_without_a_no_op_branch_keeps_its_warning(tmp_path):
    # the nearest true cases: a training script calls the helper with the flag on, or the helper
    # profiles on both branches (no stand-in: the flag picks how, not whether)
    called = write_project(tmp_path / "a", {"examples/__init__.py": "", "examples/perf.py": PROFILE_HELPER,
                                            "examples/train.py": TRAIN})
    both = write_project(tmp_path / "b", {"examples/__init__.py": "", "examples/perf.py": PROFILE_HELPER.replace(
        "return DummyProfiler()", "return profile(activities=[ProfilerActivity.CPU])")})
    for root in (called, both):
        found = findings_at(migrate_json(root), "examples/perf.py", "NPU935")
        assert found and all(f["severity"] == "warning" for f in found.values()), (root, found)


# IA#35 (vLLM's multimodal/video_decoders/deepstream.py:25): a decoder module its package imports only
# by the backend name a user chooses (`import_module(f".{backend}", __name__)`), offered by a Literal,
# the default another backend
DECODERS_INIT = """\
from importlib import import_module
from typing import Literal

DecoderBackend = Literal["plain", "nvdecode"]


def decode(backend: str, data: bytes):
    module = import_module(f".{backend}", __name__)
    return getattr(module, f"decode_{backend}")(data)
"""

PLAIN = """\
def decode_plain(data):
    return list(data)
"""

NVDECODE = """\
def decode_nvdecode(data):
    from nvidia.videodecode import decode_bytes

    return decode_bytes(data)
"""

LOADER = """\
from pkg.decoders import DecoderBackend, decode


def load(data: bytes, backend: DecoderBackend = "{default}"):
    return decode(backend, data)
"""


def _decoders(tmp_path, default="plain"):
    return write_project(tmp_path / default, {
        "pkg/__init__.py": "", "pkg/decoders/__init__.py": DECODERS_INIT, "pkg/decoders/plain.py": PLAIN,
        "pkg/decoders/nvdecode.py": NVDECODE, "pkg/loader.py": LOADER.format(default=default)})


def test_backend_module_loaded_only_by_a_chosen_name_is_opt_in_info(tmp_path):
    found = findings_at(migrate_json(_decoders(tmp_path)), "pkg/decoders/nvdecode.py", "NPU990")
    assert found and all(f["severity"] == "info" for f in found.values()), found
    message = next(iter(found.values()))["message"]
    assert "only when the backend `nvdecode` is chosen by name" in message, message
    assert "`DecoderBackend` offers it (line 4)" in message, message


def test_backend_module_a_default_names_keeps_its_warning(tmp_path):
    # the nearest true case: the loader's default is that backend: every load on an NPU host reaches it
    found = findings_at(migrate_json(_decoders(tmp_path, default="nvdecode")), "pkg/decoders/nvdecode.py", "NPU990")
    assert found and all(f["severity"] == "warning" for f in found.values()), found
