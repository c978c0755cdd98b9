"""Single shapes in tests, labels and backend parameters, plus severity (issue #16, round 22, helper
h96: npu_migrate/singles22.py). Each shape is paired with the nearest case that stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

REGISTRY = '''\
import torch
import torch.distributed as dist


class EngineFactory:
    _registry = {}

    @classmethod
    def register_engine(cls, name, engine):
        if name in cls._registry:
            raise ValueError("already registered")
        cls._registry[name] = engine

    @classmethod
    def create(cls, name):
        return cls._registry[name]()


class NcclEngine:
    pass


def setup():
    EngineFactory.register_engine("nccl", NcclEngine)
    assert "nccl" in EngineFactory._registry
    engine = EngineFactory.create("nccl")
    return engine
'''

GETATTRS = '''\
import torch
import torch.distributed as dist


def device_of(model, batch):
    device = getattr(model, "device", "cuda")
    other = getattr(model, "place", "cuda")
    return batch.to(device), other


def accel_type(version_ok):
    if torch.__version__ >= "2.6.0":
        accelerator_type = torch.accelerator.current_accelerator().type
    else:
        accelerator_type = "cuda"
    return getattr(torch, accelerator_type).current_device()


def plain_type(flag):
    if flag:
        kind = "mps"
    else:
        kind = "cuda"
    return getattr(torch, kind).current_device()
'''

PG = '''\
import torch
import torch.distributed as dist


class PGDict:
    def __init__(self):
        self.dict = {}

    def get(self, ranks, backend: str = "nccl"):
        if ranks not in self.dict:
            self.dict[ranks] = dist.new_group(ranks=ranks, backend=backend)
        return self.dict[ranks]


PG = PGDict()


def build(ranks):
    PG.get(ranks, "nccl")
    PG.get(ranks, "nccl")
'''

TABLES = '''\
import torch
import torch.distributed as dist


def tolerance(device, out):
    rtol = {"cpu": 1e-2, "cuda": 2e-2, "xpu": 2e-2}[device.type]
    atol = {"cpu": 1e-2, "cuda": 2e-2}.get(device.type, 1e-3)
    return rtol, atol
'''

TEST_ROPE = '''\
import pytest
import torch


def _skip_unless_fp8():
    from vllm.platforms import current_platform

    if not current_platform.is_device_capability_family(100):
        pytest.skip("needs SM100")


def _skip_maybe():
    if not torch.cuda.is_available():
        pytest.skip("needs an accelerator")


def _make(x):
    return x.to(torch.float8_e4m3fn)


def test_fp8_skipped():
    _skip_unless_fp8()
    x = torch.ones(4, device="cuda")
    y = _make(x)
    assert torch._scaled_mm(y, y.t(), out_dtype=torch.float8_e4m3fn) is not None


def test_fp8_runs():
    _skip_maybe()
    x = torch.ones(4, device="cuda")
    assert torch._scaled_mm(x.to(torch.float8_e5m2), x, out_dtype=torch.bfloat16) is not None
'''


def _report(tmp_path, files):
    report = migrate_json(write_project(tmp_path, files))
    return ([f for f in report["findings"] if not f["fixable"]],
            [s for s in report["skipped"] if "start_line" in s])


def _at(findings, path, line):
    return [f for f in findings if f["path"] == path and (f["line"] == line or any(p[0] == line for p in f.get("also") or []))]


def _scope(skipped, path, line):
    return [s for s in skipped if s["path"] == path and s["start_line"] <= line <= s["end_line"]]


# ---- BI#1: a test skipped through a module-local helper's capability check (testscopes.py + singles22.helper_skip)

def test_skip_through_a_helper_makes_the_test_scope(tmp_path):
    findings, skipped = _report(tmp_path, {"tests/test_rope.py": TEST_ROPE})
    # the FP8 of the skipped test and of the helper only it calls: a named scope that names the helper
    assert not _at(findings, "tests/test_rope.py", 25) and not _at(findings, "tests/test_rope.py", 18)
    reason = _scope(skipped, "tests/test_rope.py", 25)[0]["reason"]
    assert "in `_skip_unless_fp8()`" in reason and "is_device_capability_family(100)" in reason
    # the helper itself runs on an NPU host (it decides the skip): its import stays a finding
    assert _at(findings, "tests/test_rope.py", 6)
    # nearest true case: a helper whose skip an NPU host fails (the rewritten is_available()): reported
    kept = _at(findings, "tests/test_rope.py", 31)
    assert kept and kept[0]["code"] == "NPU913" and kept[0]["severity"] == "error"


# ---- BI#6: "nccl" as a registry key

def test_registry_key_is_a_named_scope_and_a_lookup_stays(tmp_path):
    findings, skipped = _report(tmp_path, {"pkg/__init__.py": "", "pkg/registry.py": REGISTRY})
    for line in (24, 25):
        assert "a registry key naming an implementation, not a backend" in _scope(skipped, "pkg/registry.py", line)[0]["reason"]
    kept = [f for f in findings if f["path"] == "pkg/registry.py"]
    assert [(f["line"], f["code"], f["severity"]) for f in kept] == [(26, "NPU990", "warning")]  # create("nccl")


# ---- BI#27, BI#32: a getattr's device fallback, the old-torch branch beside torch.accelerator

def test_getattr_device_fallback_and_old_torch_branch(tmp_path):
    findings, skipped = _report(tmp_path, {"pkg/__init__.py": "", "pkg/getattrs.py": GETATTRS})
    assert "the fallback of a `getattr` of the object's `device`" in _scope(skipped, "pkg/getattrs.py", 6)[0]["reason"]
    old = [f for f in findings if f["path"] == "pkg/getattrs.py" and f["line"] == 15]
    assert old and old[0]["severity"] == "info" and "older than `torch.accelerator`" in old[0]["message"]
    # nearest true cases: another attribute's fallback, an `else:` of a test on anything else
    kept = [f for f in findings if f["path"] == "pkg/getattrs.py" and f["severity"] == "warning"]
    assert kept and {kept[0]["line"], *(p[0] for p in kept[0].get("also") or [])} == {7, 23}


# ---- BK#17, BK#31: certain failures reported as warnings

def test_nccl_passed_by_the_callers_is_an_error(tmp_path):
    findings, _ = _report(tmp_path, {"pkg/__init__.py": "", "pkg/pg.py": PG})
    backend = [f for f in findings if f["code"] == "NPU304"]
    assert backend and backend[0]["severity"] == "error" and "a certain failure" in backend[0]["message"]
    assert backend[0]["message"].endswith("(also at lines 19, 20)")


def test_nccl_default_only_keeps_the_warning(tmp_path):
    text = PG.replace('PG.get(ranks, "nccl")', "PG.get(ranks, cfg.backend)").replace("def build(ranks):", "def build(ranks, cfg):")
    findings, _ = _report(tmp_path, {"pkg/__init__.py": "", "pkg/pg.py": text})
    backend = [f for f in findings if f["code"] == "NPU304"]
    assert backend and backend[0]["severity"] == "warning"


def test_per_device_table_looked_up_on_the_spot_is_an_error(tmp_path):
    findings, _ = _report(tmp_path, {"pkg/__init__.py": "", "pkg/tables.py": TABLES})
    by_line = {f["line"]: f["severity"] for f in findings if f["path"] == "pkg/tables.py"}
    assert by_line == {6: "error", 7: "warning"}  # `.get(device.type, default)` has a default


# ---- BK#36: an SDPA switch keeping only math, under no_grad

SDPA = '''\
import torch


@torch.no_grad()
def generate(model, x):
    with torch.backends.cuda.sdp_kernel(enable_flash=False, enable_mem_efficient=False, enable_math=True):
        return model(x)


def train_step(model, x):
    with torch.backends.cuda.sdp_kernel(enable_flash=False, enable_mem_efficient=False, enable_math=True):
        loss = model(x).sum()
    loss.backward()


def _decode(model, x):
    with torch.backends.cuda.sdp_kernel(enable_flash=False, enable_mem_efficient=False, enable_math=True):
        return model(x)


def _forward(model, x):
    with torch.backends.cuda.sdp_kernel(enable_flash=False, enable_mem_efficient=False, enable_math=True):
        return model(x)


@torch.inference_mode()
def serve(model, x):
    return _decode(model, x), _forward(model, x)


def fit(model, x):
    _forward(model, x).sum().backward()
'''


def test_math_only_switch_under_no_grad_is_a_named_scope(tmp_path):
    findings, skipped = _report(tmp_path, {"bench.py": SDPA})
    for line in (6, 17):  # (in the decorated function, in a private helper only it calls)
        assert "an SDPA switch under `torch.no_grad()`" in _scope(skipped, "bench.py", line)[0]["reason"]
    kept = [(f["line"], f["code"], f["severity"]) for f in findings if f["path"] == "bench.py"]
    # a training step, a helper a training step calls too: the double-backward review stays
    assert kept == [(11, "NPU405", "info"), (22, "NPU405", "info")]


# ---- BJ#13: an inference capture the project's transfer_to_npu maps to NPUGraph

VIT_RUNNER = '''\
import torch


class VitGraphRunner:
    def __init__(self, vit):
        self.vit = vit
        self.graphs = {}

    def create(self, key, x):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = x
            for block in self.vit.blocks:
                y = block(y)
        self.graphs[key] = (graph, y)
'''

TRAINER_RUNNER = VIT_RUNNER + '''

    def step(self, optimizer, x):
        self.vit(x).sum().backward()
        optimizer.step()
'''


def test_inference_capture_under_the_patcher_is_a_named_scope(tmp_path):
    from .test_h75 import _project

    root = _project(tmp_path)
    (root / "proj/srt/models/vit_runner.py").write_text(VIT_RUNNER)
    (root / "proj/srt/models/train_runner.py").write_text(TRAINER_RUNNER)
    report = migrate_json(root)
    findings = [f for f in report["findings"] if not f["fixable"]]
    skipped = [s for s in report["skipped"] if "start_line" in s]
    reason = _scope(skipped, "proj/srt/models/vit_runner.py", 10)[0]["reason"]
    assert reason.startswith("runs as written on an NPU host (NPU202)") and "an inference capture" in reason
    # nearest true cases: a file that trains, a capture of a callable the caller hands in (test_h75)
    trains = [f for f in findings if f["path"] == "proj/srt/models/train_runner.py" and f["code"] == "NPU202"]
    assert trains and trains[0]["severity"] == "info" and "an inference capture" not in trains[0]["message"]
    assert [f["code"] for f in findings if f["path"] == "proj/srt/models/graphs.py"] == ["NPU202"]


# ---- BJ#5: a recipe strategy the same file marks unsupported on the NPU (yamlscopes.py + singles22)

RECIPE = '''\
model: example/big-model
strategy_hardware:
  multi_node_tp_dp:
    h200: supported
    ascend_910c: supported
  multi_node_tp_pp:
    b200: supported
    ascend_910c: unsupported
strategies:
  multi_node_tp_pp:
    extra_args:
      - "--max-num-batched-tokens"
      - "8192"
    extra_env:
      NCCL_CUMEM_ENABLE: "1"
      NCCL_P2P_LEVEL: "NVL"
  multi_node_tp_dp:
    extra_env:
      NCCL_CUMEM_ENABLE: "1"
'''


def test_strategy_marked_unsupported_on_npu_is_a_named_scope(tmp_path):
    findings, skipped = _report(tmp_path, {"recipes/model.yaml": RECIPE})
    reason = _scope(skipped, "recipes/model.yaml", 15)[0]["reason"]
    assert "marks unsupported on the NPU (`strategy_hardware: multi_node_tp_pp: ascend_910c: unsupported`, line 8)" in reason
    # nearest true case: the same variable under a strategy the file supports on the NPU
    kept = [(f["line"], f["code"]) for f in findings if f["path"] == "recipes/model.yaml"]
    assert kept == [(19, "NPU703")]


# ---- BI#29: a flag-guarded import of an extension whose sources are reported (folded into their NPU912)

EXT_SETUP = '''\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="lib",
    ext_modules=[
        CUDAExtension("fastops_cuda", ["csrc/fastops/fastops_kernel.cu", "csrc/fastops/repack.cu"]),
    ],
    cmdclass={"build_ext": BuildExtension},
)
'''

EXT_KERNEL = '''\
#include <torch/extension.h>
__global__ void {name}_k(float* x) {{ x[threadIdx.x] += 1.0f; }}
torch::Tensor {name}(torch::Tensor x) {{ {name}_k<<<1, 32>>>(x.data_ptr<float>()); return x; }}
'''


def _extension_project(tmp_path, sources=True):
    from .test_precision_optionalext import FLAGGED, PLAIN, PROBE

    files = {"lib/__init__.py": "", "lib/probe.py": PROBE, "lib/marlin.py": FLAGGED, "lib/plain.py": PLAIN}
    if sources:
        files.update({"setup.py": EXT_SETUP,
                      "csrc/fastops/fastops_kernel.cu": EXT_KERNEL.format(name="fastops_kernel"),
                      "csrc/fastops/repack.cu": EXT_KERNEL.format(name="repack")})
    return _report(tmp_path, files)


def test_flag_guarded_extension_import_folds_into_its_sources_finding(tmp_path):
    findings, _ = _extension_project(tmp_path)
    assert not [f for f in findings if f["path"] == "lib/marlin.py"]
    (source,) = [f for f in findings if f["code"] == "NPU912"]
    assert "also its import at `lib/marlin.py:6`, under `if FASTOPS_AVAILABLE:`" in source["message"]
    # nearest true case: the unguarded import stays an error of its own
    assert [(f["code"], f["severity"]) for f in findings if f["path"] == "lib/plain.py"] == [("NPU911", "error")]


def test_flag_guarded_extension_import_without_sources_stays(tmp_path):
    findings, _ = _extension_project(tmp_path, sources=False)
    assert [(f["code"], f["severity"]) for f in findings if f["path"] == "lib/marlin.py"] == [("NPU911", "info")]


# ---- BI#12, BI#28: a backend parameter passed straight to new_group, every caller in the run resolving it

PLATFORMS = '''\
class _Platform:
    def is_cuda_alike(self):
        return True

    def get_torch_distributed_backend_str(self):
        return "nccl"


current_platform = _Platform()
'''

COORDINATOR = '''\
from typing import Optional

import torch.distributed as dist


class GroupCoordinator:
    def __init__(self, group_ranks, local_rank, torch_distributed_backend, group_name: Optional[str] = None):
        self.groups = []
        for ranks in group_ranks:
            self.groups.append(dist.new_group(ranks, backend=torch_distributed_backend))
        self.local_rank = local_rank


class PipelineGroupCoordinator(GroupCoordinator):
    def __init__(self, group_ranks, local_rank, torch_distributed_backend, group_name=None):
        super().__init__(group_ranks=group_ranks, local_rank=local_rank,
                         torch_distributed_backend=torch_distributed_backend, group_name=group_name)
        for ranks in group_ranks:
            dist.new_group(ranks, backend=torch_distributed_backend)
'''

STATE = '''\
from typing import Optional

import torch
import torch.distributed as dist

from proj.distributed.coordinator import GroupCoordinator, PipelineGroupCoordinator
from proj.platforms import current_platform

_WORLD: Optional[GroupCoordinator] = None


def init_world_group(ranks, local_rank, backend: str) -> GroupCoordinator:
    return GroupCoordinator(group_ranks=[ranks], local_rank=local_rank, torch_distributed_backend=backend)


def init_group(group_ranks, local_rank, backend, mode):
    if mode == "pipeline":
        return PipelineGroupCoordinator(group_ranks, local_rank, backend)
    return GroupCoordinator(group_ranks=group_ranks, local_rank=local_rank, torch_distributed_backend=backend)


def init_distributed_environment(local_rank=0, backend: str = "nccl"):
    global _WORLD
    if backend == "nccl" and not current_platform.is_cuda_alike():
        backend = "gloo"
    dist.init_process_group(backend=backend)
    _WORLD = init_world_group(list(range(dist.get_world_size())), local_rank, backend)


def initialize_model_parallel(tp: int = 1, backend: Optional[str] = None):
    if backend is None:
        backend = current_platform.get_torch_distributed_backend_str()
    backend = backend or dist.get_backend(_WORLD.groups[0])
    assert isinstance(_WORLD, GroupCoordinator)
    init_group([[0]], 0, backend, "pipeline")
    init_group([[0]], 0, backend, "tensor")


def setup():
    init_distributed_environment(0, backend=current_platform.get_torch_distributed_backend_str())
    initialize_model_parallel(tp=1)
'''

LIGHTNING_LIKE = {
    "lib/__init__.py": "",
    "lib/dist_utils.py": (
        "import torch.distributed as dist\n\n\n"
        "def init_connection(env, torch_distributed_backend, **kwargs):\n"
        "    dist.init_process_group(torch_distributed_backend, rank=env.rank, **kwargs)\n"),
    "lib/strategy.py": (
        "from lib.dist_utils import init_connection\n\n\n"
        "class Strategy:\n"
        "    def __init__(self, process_group_backend=None):\n"
        "        self._process_group_backend = process_group_backend\n\n"
        "    def setup(self, env):\n"
        "        init_connection(env, self._process_group_backend)\n"),
}


def _backend_project(extra=None):
    files = {"proj/__init__.py": "", "proj/distributed/__init__.py": "", "proj/platforms.py": PLATFORMS,
             "proj/distributed/coordinator.py": COORDINATOR, "proj/distributed/state.py": STATE}
    files.update(extra or {})
    return files


def test_backend_parameter_every_caller_resolves_is_a_named_scope(tmp_path):
    findings, skipped = _report(tmp_path, _backend_project())
    assert not [f for f in findings if f["code"] == "NPU304" and f["path"] == "proj/distributed/coordinator.py"]
    for line in (10, 19):  # (the base class, and the subclass that also passes it to super().__init__)
        reason = _scope(skipped, "proj/distributed/coordinator.py", line)[0]["reason"]
        assert reason.startswith("runs as written on an NPU host (NPU304): a backend parameter whose every value is seen")


def test_backend_parameter_with_a_caller_passing_an_unseen_value_stays(tmp_path):
    launcher = ("from proj.distributed.state import initialize_model_parallel\n\n\n"
                "def main(args):\n    initialize_model_parallel(tp=2, backend=args.dist_backend)\n")
    findings, _ = _report(tmp_path, _backend_project({"proj/launch.py": launcher}))
    kept = [f for f in findings if f["code"] == "NPU304" and f["path"] == "proj/distributed/coordinator.py"]
    assert kept and all(f["severity"] == "warning" for f in kept)
    # a value read from an attribute the caller sets (lightning's strategies): kept too
    findings, _ = _report(tmp_path / "other", LIGHTNING_LIKE)
    assert [(f["path"], f["severity"]) for f in findings if f["code"] == "NPU304"] == [("lib/dist_utils.py", "warning")]


def test_backend_given_by_keyword_beside_kwargs_is_seen_and_one_inside_kwargs_is_not(tmp_path):
    with_kwargs = STATE.replace("def init_group(group_ranks, local_rank, backend, mode):",
                                "def init_group(group_ranks, local_rank, backend, mode, **kwargs):").replace(
        "torch_distributed_backend=backend)\n\n\ndef init_distributed_environment",
        "torch_distributed_backend=backend, **kwargs)\n\n\ndef init_distributed_environment")
    assert with_kwargs.count("**kwargs") == 2
    findings, _ = _report(tmp_path, _backend_project({"proj/distributed/state.py": with_kwargs}))
    assert not [f for f in findings if f["code"] == "NPU304" and f["path"] == "proj/distributed/coordinator.py"]
    # the backend only inside `**options`: not seen
    hidden = STATE.replace("return GroupCoordinator(group_ranks=[ranks], local_rank=local_rank, "
                           "torch_distributed_backend=backend)",
                           "options = {\"torch_distributed_backend\": backend}\n"
                           "    return GroupCoordinator(group_ranks=[ranks], local_rank=local_rank, **options)")
    assert "**options" in hidden
    findings, _ = _report(tmp_path / "hidden", _backend_project({"proj/distributed/state.py": hidden}))
    assert [f["severity"] for f in findings if f["code"] == "NPU304" and f["path"] == "proj/distributed/coordinator.py"]
