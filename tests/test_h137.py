"""Round-28 audit rows of small shapes outside vLLM's opt-in choices (h137): Triton's exception
classes caught by a host-side patch (CA#25), a script that exits unless a probed optional package
imports (CB#30, policy P1), `torch.version.cuda` shown in an environment report (CA#9). Each false
case is paired with its nearest true case, which stays reported as it was."""

from __future__ import annotations

from .precision_helpers import findings_at, migrate_json, scopes_at, write_project

# CA#25: a host-side patch of Triton's autotuner that catches Triton's exception classes (not the
# CUDA assembler's `PTXASError`, which Triton-Ascend need not have: test_h91's patcher keeps its error,
# and so does vLLM's force_first_config, which imports it)
TRITON_FLAG = """\
try:
    import triton

    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False
"""

TRITON_ERRORS = """\
from pkg.triton_flag import HAS_TRITON


def install() -> None:
    if not HAS_TRITON:
        return
    import importlib

    autotuner = importlib.import_module("triton.runtime.autotuner")
    from triton.compiler.errors import CompileTimeAssertionFailure
    from triton.runtime.errors import OutOfResources

    invalid = (OutOfResources, CompileTimeAssertionFailure)
    original = autotuner.Autotuner.run

    def run(self, *args, **kwargs):
        try:
            return original(self, *args, **kwargs)
        except invalid:
            return self.fn(*args, **kwargs)

    autotuner.Autotuner.run = run
"""

# the nearest true case: the same patch, which also queries the CUDA driver through Triton
TRITON_DRIVER = TRITON_ERRORS.replace(
    "    from triton.runtime.errors import OutOfResources\n",
    "    from triton.runtime.errors import OutOfResources\n    from triton.runtime.driver import driver\n\n"
    "    print(driver.active.utils.get_device_properties(0))\n")


def test_triton_exception_classes_run_as_written(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/triton_flag.py": TRITON_FLAG,
                                    "pkg/force_first.py": TRITON_ERRORS, "pkg/force_driver.py": TRITON_DRIVER})
    report = migrate_json(root)
    assert not findings_at(report, "pkg/force_first.py", "NPU910"), report["findings"]
    scope = scopes_at(report, "pkg/force_first.py", "NPU910")
    assert scope and "triton.compiler.errors.CompileTimeAssertionFailure" in next(iter(scope.values())), scope
    # (kept a finding, as before: the driver query is no exception class; the early return on
    # HAS_TRITON makes it info, which it was already)
    kept = findings_at(report, "pkg/force_driver.py", "NPU910")
    assert kept and "triton.runtime.driver.driver" in next(iter(kept.values()))["message"], report["findings"]
    assert not scopes_at(report, "pkg/force_driver.py", "NPU910")


# CB#30: a tool that exits where an optional package (which the project probes) is missing
PROBES = """\
import importlib.util


def _has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def has_fancyopt() -> bool:
    return _has_module("fancyopt")
"""

TOOL = """\
import sys

import torch

try:
    from fancyopt.accuracy import assert_close

    from pkg.probes import has_fancyopt
except ImportError as e:
    print(f"Error importing: {e}")
    sys.exit(1)


def check_requirements() -> bool:
    return has_fancyopt()


def bench(fn):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    assert_close(fn(), fn())


if __name__ == "__main__":
    if check_requirements():
        bench(lambda: torch.ones(4, device="cuda"))
"""

# the nearest true cases: the script exits where a package the project never probes is missing
# (a required dependency: the script runs wherever the project does) ...
TOOL_REQUIRED = TOOL.replace("from fancyopt.accuracy import assert_close", "from plainlib.accuracy import assert_close")
# ... and the same probed package, whose missing import falls back instead of exiting
TOOL_FALLBACK = TOOL.replace('    print(f"Error importing: {e}")\n    sys.exit(1)\n',
                             "    assert_close = None\n    has_fancyopt = None\n")


def test_script_exiting_without_a_probed_optional_package_is_opt_in_info(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/probes.py": PROBES, "tools/bench_opt.py": TOOL,
                                    "tools/bench_required.py": TOOL_REQUIRED,
                                    "tools/bench_fallback.py": TOOL_FALLBACK})
    report = migrate_json(root)
    opt = findings_at(report, "tools/bench_opt.py", "NPU202")
    assert opt and all(f["severity"] == "info" for f in opt.values()), opt
    message = next(iter(opt.values()))["message"]
    assert "reached on an NPU host only when the optional package `fancyopt` is installed" in message, message
    assert "`except ImportError: sys.exit(1)`, line 11" in message and "pkg/probes.py:8" in message, message
    for kept in ("tools/bench_required.py", "tools/bench_fallback.py"):
        found = findings_at(report, kept, "NPU202")
        assert found and next(iter(found.values()))["severity"] == "error", (kept, found)


# CA#9: `torch.version.cuda` recorded in an environment report that shows it and tests it only
# against values (None passes)
COLLECT_ENV = """\
from collections import namedtuple

import torch

SystemEnv = namedtuple("SystemEnv", ["torch_version", "cuda_compiled_version"])

TEMPLATE = \"\"\"
PyTorch version              : {torch_version}
CUDA used to build PyTorch   : {cuda_compiled_version}
\"\"\".strip()


def get_env_info(available: bool) -> SystemEnv:
    if available:
        version_str = torch.__version__
        cuda_version_str = torch.version.cuda
    else:
        version_str = cuda_version_str = "N/A"
    return SystemEnv(torch_version=version_str, cuda_compiled_version=cuda_version_str)


def pretty_str(envinfo: SystemEnv) -> str:
    fields = envinfo._asdict()
    if envinfo.cuda_compiled_version is None:
        fields["cuda_compiled_version"] = "None"
    if fields.get("cuda_compiled_version") not in {"N/A", "None"}:
        return TEMPLATE.format(**fields)
    return ""


if __name__ == "__main__":
    print(pretty_str(get_env_info(True)))
"""

# the nearest true case: the same report, which also parses the version (fails on None)
COLLECT_PARSED = COLLECT_ENV.replace(
    "    fields = envinfo._asdict()\n",
    "    fields = envinfo._asdict()\n    fields['major'] = int(envinfo.cuda_compiled_version.split('.')[0])\n")


def test_cuda_version_shown_in_an_environment_report_runs_as_written(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/collect_env.py": COLLECT_ENV,
                                    "pkg/collect_parsed.py": COLLECT_PARSED})
    report = migrate_json(root)
    assert not findings_at(report, "pkg/collect_env.py", "NPU990"), report["findings"]
    scope = scopes_at(report, "pkg/collect_env.py", "NPU990")
    assert scope and "`torch.version.cuda` stored only as a value of a record" in scope.get(16, ""), scope
    kept = findings_at(report, "pkg/collect_parsed.py", "NPU990")
    assert 16 in kept and kept[16]["severity"] in ("warning", "error"), report["findings"]


# CB#32: a worker module imported only when an enum predicate names the user's choice
SPEC_INFO = """\
from enum import Enum, auto


class Algorithm(Enum):
    AUTO = auto()
    EAGLE = auto()
    NGRAM = auto()

    def is_auto(self) -> bool:
        return self == Algorithm.AUTO

    def is_eagle(self) -> bool:
        return self == Algorithm.EAGLE

    def is_ngram(self) -> bool:
        return self == Algorithm.NGRAM

    def create_worker(self):
        if self.is_auto():
            from pkg.auto.worker import AutoWorker

            return AutoWorker
        if self.is_eagle():
            from pkg.eagle.worker import EagleWorker

            return EagleWorker
        elif self.is_ngram():
            from pkg.ngram.worker import NgramWorker

            return NgramWorker
        raise ValueError("unknown")
"""

WORKER = """\
from sgl_kernel.speculative import reconstruct_indices


class {name}:
    def step(self, mask):
        return reconstruct_indices(mask)
"""

SERVER_ARGS = """\
import argparse


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--speculative-algorithm", choices=["EAGLE", "NGRAM"], default=None)
    parser.add_argument("--disaggregation-mode", choices=["null", "prefill", "decode"], default="null")
"""

# the nearest true cases: a member that names the default (`AUTO`), a worker a default-loaded
# module also imports at its top, and a state the code goes through on its own (`Mode.DECODE`:
# no option offers that name, though one offers "decode")
SCHEDULER = """\
from enum import IntEnum, auto

from pkg.eagle.worker import EagleWorker


class Mode(IntEnum):
    EXTEND = auto()
    DECODE = auto()

    def is_decode(self) -> bool:
        return self == Mode.DECODE


def make():
    return EagleWorker()


def step(mode: Mode):
    if mode.is_decode():
        from pkg.decode.worker import DecodeWorker

        return DecodeWorker()
    return None
"""


def test_module_imported_only_under_an_enum_choice_is_opt_in_info(tmp_path):
    root = write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/spec_info.py": SPEC_INFO, "pkg/scheduler.py": SCHEDULER,
        "pkg/server_args.py": SERVER_ARGS, "pkg/decode/worker.py": WORKER.format(name="DecodeWorker"),
        "pkg/ngram/worker.py": WORKER.format(name="NgramWorker"),
        "pkg/eagle/worker.py": WORKER.format(name="EagleWorker"),
        "pkg/auto/worker.py": WORKER.format(name="AutoWorker")})
    report = migrate_json(root)
    opt = findings_at(report, "pkg/ngram/worker.py", "NPU911")
    assert opt and opt[1]["severity"] == "info", opt
    assert "pkg/spec_info.py:28 in `create_worker` under `self.is_ngram()` (the choice `Algorithm.NGRAM`)" \
        in opt[1]["message"], opt[1]["message"]
    for kept in ("pkg/eagle/worker.py", "pkg/auto/worker.py", "pkg/decode/worker.py"):
        found = findings_at(report, kept, "NPU911")
        assert found and found[1]["severity"] == "error", (kept, found)


# CA#12: a runner class built only when an enum predicate names the backend, whose method imports
# a kernel module lazily
BACKENDS = """\
from enum import Enum


class RunnerBackend(Enum):
    TRITON = "triton"
    TRITON_KERNELS = "triton_kernel"

    def is_triton(self) -> bool:
        return self == RunnerBackend.TRITON

    def is_triton_kernels(self) -> bool:
        return self == RunnerBackend.TRITON_KERNELS
"""

CORES = """\
class TritonKernelsCore:
    def run(self, x):
        from pkg.moe.kernels_moe import fused_experts

        return fused_experts(x)


class SharedCore:
    def run(self, x):
        from pkg.shared.shared_moe import fused_experts

        return fused_experts(x)
"""

RUNNER = """\
from pkg.moe.cores import SharedCore, TritonKernelsCore


class MoeRunner:
    def __init__(self, backend):
        if backend.is_triton():
            self.core = None
        elif backend.is_triton_kernels():
            self.core = TritonKernelsCore()
            self.shared = SharedCore()


def default_runner():
    return SharedCore()
"""

KERNELS = """\
from sgl_kernel import gelu_and_mul


def fused_experts(x):
    return gelu_and_mul(x)
"""


MOE_ARGS = """\
import argparse

MOE_RUNNER_BACKEND_CHOICES = ["auto", "triton", "triton_kernel"]


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--moe-runner-backend", choices=MOE_RUNNER_BACKEND_CHOICES, default="auto")
"""


def test_class_built_only_under_an_enum_choice_loads_its_kernels_opt_in(tmp_path):
    # (the nearest true case: `SharedCore`, built under the same choice and also by a plain function)
    root = write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/moe/__init__.py": "", "pkg/moe/utils.py": BACKENDS, "pkg/moe/args.py": MOE_ARGS, "pkg/moe/cores.py": CORES,
        "pkg/moe/runner.py": RUNNER, "pkg/moe/kernels_moe.py": KERNELS,
        "pkg/shared/shared_moe.py": KERNELS.replace("gelu_and_mul", "silu_and_mul")})
    report = migrate_json(root)
    opt = findings_at(report, "pkg/moe/kernels_moe.py", "NPU911")
    assert opt and opt[1]["severity"] == "info", opt
    assert ("pkg/moe/runner.py:9 in `run` of `TritonKernelsCore`, which the run builds only in `__init__` under "
            "`backend.is_triton_kernels()` (the choice `RunnerBackend.TRITON_KERNELS`)") in opt[1]["message"], opt
    kept = findings_at(report, "pkg/shared/shared_moe.py", "NPU911")
    assert kept and kept[1]["severity"] == "error", kept


# CA#36: an FP8 conversion a library runs only from a private method its `prepare` calls under an
# enum member a command-line option offers (`--fp8_backend ao`)
FP8_TYPES = """\
import enum


class FP8BackendType(str, enum.Enum):
    NO = "NO"
    TE = "TE"
    AO = "AO"
"""

LAUNCH = """\
import argparse


def launch_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp8_backend", type=str, choices=["ao", "te"])
    return parser
"""

CONVERT = """\
def convert_model_to_fp8_ao(model, config=None):
    from torchao.float8 import convert_to_float8_training

    convert_to_float8_training(model, config=config)
    return model
"""

CONVERT_PLAIN = CONVERT.replace("convert_model_to_fp8_ao", "convert_model_to_fp8_always")

ACCELERATOR = """\
from pkg.types import FP8BackendType
from pkg.ao import convert_model_to_fp8_ao
from pkg.ao_plain import convert_model_to_fp8_always


class Accelerator:
    def __init__(self, fp8_backend=None):
        self.fp8_backend = FP8BackendType((fp8_backend or "NO").upper())

    def prepare(self, *args):
        if self.fp8_backend == FP8BackendType.TE:
            args = tuple(args)
        elif self.fp8_backend == FP8BackendType.AO:
            args = self._prepare_ao(*args)
        return args

    def _prepare_ao(self, *args):
        for arg in args:
            if hasattr(arg, "weight"):
                convert_model_to_fp8_ao(arg)
        return args

    def prepare_model(self, model):
        return self._prepare_plain(model)

    def _prepare_plain(self, model):
        return convert_model_to_fp8_always(model)
"""


def test_library_code_reached_only_under_an_offered_enum_choice_is_opt_in_info(tmp_path):
    # (the nearest true case: `convert_model_to_fp8_always`, which a plain method reaches unasked)
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/types.py": FP8_TYPES, "pkg/launch.py": LAUNCH,
                                    "pkg/ao.py": CONVERT, "pkg/ao_plain.py": CONVERT_PLAIN,
                                    "pkg/accelerator.py": ACCELERATOR})
    report = migrate_json(root)
    opt = findings_at(report, "pkg/ao.py", "NPU913")
    assert opt and opt[2]["severity"] == "info", opt
    assert ("only when `self.fp8_backend == FP8BackendType.AO` (the choice `FP8BackendType.AO`) is chosen "
            "(`self._prepare_ao()`, line 14)") in opt[2]["message"], opt[2]["message"]
    kept = findings_at(report, "pkg/ao_plain.py", "NPU913")
    assert kept and kept[2]["severity"] == "error", kept


def test_enum_choice_of_an_option_that_resolves_auto_stays_reached(tmp_path):
    # (the nearest true case of the test above: the option defaults to "auto", which the code may
    # resolve to `ao` on its own: no explicit choice)
    launch = LAUNCH.replace('choices=["ao", "te"])', 'choices=["auto", "ao", "te"], default="auto")')
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/types.py": FP8_TYPES, "pkg/launch.py": launch,
                                    "pkg/ao.py": CONVERT, "pkg/ao_plain.py": CONVERT_PLAIN,
                                    "pkg/accelerator.py": ACCELERATOR})
    report = migrate_json(root)
    kept = findings_at(report, "pkg/ao.py", "NPU913")
    assert kept and kept[2]["severity"] == "error", kept
