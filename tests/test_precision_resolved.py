"""Issue #16, round-12 audits: values the code itself resolves (npu_migrate/resolved.py). A "cuda"
label its consumer only compares or indexes, a process-group backend picked for the device, an
SDPA switch that only enables defaults, bitsandbytes loaded for the caller's optimizer, the
generic bitsandbytes note once per package, FP8 in a test that an NPU host runs on the CPU. Each
test keeps a nearby true case reported."""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, write_project


def _findings(report: dict, path: str, code: str) -> dict[int, dict]:
    out = {}
    for f in report["findings"]:
        if f["path"] == path and f["code"] == code:
            out[f["line"]] = f
            for line, _column, _source in f.get("also") or ():
                out.setdefault(line, f)
    return out


def _scopes(report: dict, path: str, code: str) -> dict[int, str]:
    out = {}
    for scope in report["skipped"]:
        if scope.get("path") == path and f"({code})" in scope["reason"]:
            for line in range(scope["start_line"], scope["end_line"] + 1):
                out[line] = scope["reason"]
    return out


# ----------------------------------------------------------------------------- NPU990 labels
STATS = """\
class Stats:
    def __init__(self):
        self._acc_list = []
        self._host_list = []

    def data_list(self, device_type: str):
        if device_type == "cuda":
            return self._acc_list
        elif device_type == "cpu":
            return self._host_list
        raise TypeError(f"unknown {device_type}")

    def moved(self, device_type: str):
        return [t.to(device_type) for t in self._acc_list]


class PolicyFactory:
    @staticmethod
    def create(name: str):
        if name == "cpu":
            return HostPolicy
        elif name == "cuda":
            return AcceleratorPolicy
        raise TypeError(f"unknown policy {name}")


class HostPolicy:
    pass


def lookup(name):
    return name == "cuda"


class AcceleratorPolicy:
    pass
"""

MODEL = """\
import extlib
import torch
from stats import Stats, PolicyFactory


class Sharded:
    def __init__(self, module, policy: str = "cuda", place: str = "cuda"):
        self.stats = Stats()
        self.policy = PolicyFactory.create(policy)
        self.offload = policy != "cuda"
        self.place = torch.zeros(2, device=place)

    def dump(self, f):
        f.write(str(self.stats.data_list("cuda")))
        f.write(str(self.stats.data_list("cpu")))
        f.write(str(self.stats.moved("cuda")))
        torch.cuda.synchronize()
        return torch.device("cuda")


def device(name):
    return name == "cuda"


NIC = {
    "cuda:0": "eth1",
    "cuda:1": "eth2",
}

OTHER = {
    "cuda:0": "eth1",
    "cuda:1": "eth2",
}


def pick(gpu_id):
    return NIC["cuda:" + str(gpu_id)]


def pick_other(device):
    return OTHER[str(device)]


def probe():
    return extlib.lookup("cuda")
"""


def test_cuda_labels_resolved_by_their_consumers(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"stats.py": STATS, "model.py": MODEL}))
    scopes = _scopes(report, "model.py", "NPU990")
    found = {line: f for line, f in _findings(report, "model.py", "NPU990").items() if f["severity"] != "info"}
    # a key of the project's bookkeeping method, a policy name mapped to classes, a table looked up
    # with keys built from its own literal: labels, named as skipped scopes
    assert 14 in scopes and "a label the code resolves" in scopes[14]
    assert 7 in scopes and "`create`" in scopes[7]
    assert 26 in scopes and "`NIC`" in scopes[26]
    assert 14 not in _findings(report, "model.py", "NPU990")
    # still reported: a string the method moves tensors to, a device default, a table indexed by a device
    assert 16 in found and found[16]["severity"] == "warning"
    assert 31 in _findings(report, "model.py", "NPU990") and not any(line in scopes for line in (16, 18, 31, 45))
    # a "cuda" given to another package's function of the same name as a project one stays
    assert 45 in _findings(report, "model.py", "NPU990")


# ----------------------------------------------------------------------------- NPU304 backends
HELPERS = """\
import torch.distributed as dist


def get_distributed_backend(device_type: str) -> str:
    backend = "nccl"
    if device_type in dist.Backend.default_device_backend_map:
        backend = dist.Backend.default_device_backend_map[device_type]
    return backend


def configured_backend(cfg):
    return cfg.backend
"""

RECIPE = """\
import torch
import torch.distributed as dist
from helpers import get_distributed_backend, configured_backend


class Recipe:
    def __init__(self, cfg):
        device_type = cfg.device
        self.backend = get_distributed_backend(
            device_type,
        )
        dist.init_process_group(self.backend)


class Mesh:
    _BACKENDS = {"cuda": "nccl", "cpu": "gloo", "npu": "hccl"}

    def __init__(self, device: str = "cuda"):
        self._backend = self._BACKENDS[device]

    def groups(self, ranks):
        return dist.new_group(ranks=ranks, backend=self._backend)


class Unseen:
    def __init__(self, cfg):
        self.backend = configured_backend(cfg)

    def groups(self, ranks):
        return dist.new_group(ranks=ranks, backend=self.backend)


def init_env(world_size: int = 1, backend: str = "nccl"):
    if backend == "nccl" and not torch.cuda.is_available():
        backend = "gloo"
    dist.init_process_group(backend=backend, world_size=world_size)


def init_group(size, backend: str):
    return dist.new_group(ranks=list(range(size)), backend=backend)


class GroupCache:
    def get(self, ranks, backend: str = "nccl"):
        return dist.new_group(ranks=ranks, backend=backend)


def main(cfg, current_platform):
    GroupCache().get([0, 1], "nccl")
    init_env(world_size=2, backend=current_platform.get_torch_distributed_backend_str())
    init_group(2, cfg.backend)
"""


def test_backends_resolved_for_the_device(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"helpers.py": HELPERS, "recipe.py": RECIPE}))
    scopes = _scopes(report, "recipe.py", "NPU304")
    found = _findings(report, "recipe.py", "NPU304")
    # torch's device-to-backend map, a table with "npu": "hccl", a rewritten "nccl" default
    assert 12 in scopes and "`get_distributed_backend` (helpers.py:4)" in scopes[12]
    assert 22 in scopes and '"npu": "hccl"' in scopes[22]
    assert 36 in scopes and "rewritten to `npu_compat.dist_backend()`" in scopes[36]
    assert not {12, 22, 36} & set(found)
    # a configured backend and a parameter without a default stay unseen
    # and so does a rewritten default where a call of the file still passes "nccl" by position
    assert {30, 40, 45} <= set(found)
    assert all(found[line]["severity"] == "warning" for line in (30, 40, 45))


# ----------------------------------------------------------------------------- NPU405
def test_sdpa_switch_that_only_enables_is_no_finding(tmp_path: Path) -> None:
    code = """\
import torch
import torch.nn.functional as F


def attend(q, k, v):
    with torch.backends.cuda.sdp_kernel(enable_flash=True, enable_mem_efficient=True):
        return F.scaled_dot_product_attention(q, k, v)


def attend_math(q, k, v):
    with torch.backends.cuda.sdp_kernel(enable_flash=False, enable_math=True, enable_mem_efficient=False):
        return F.scaled_dot_product_attention(q, k, v)


BACKENDS = {"default": attend, "math": attend_math}
"""
    # (both helpers referenced: a switch in a helper nothing references is a named scope, labels8.py)
    report = migrate_json(write_project(tmp_path, {"attn.py": code}))
    found = _findings(report, "attn.py", "NPU405")
    assert 6 not in found and 6 in _scopes(report, "attn.py", "NPU405")
    assert 11 in found  # a switch that restricts the backends is still reported


# ----------------------------------------------------------------------------- NPU914
LORAPLUS = """\
from torch import nn


def create_optimizer(model, optimizer_cls, **kwargs):
    optimizer = optimizer_cls(model.parameters(), **kwargs)
    eight_bit_names = ["Adam8bit", "AdamW8bit", "PagedAdamW8bit"]
    if optimizer_cls.__name__ in eight_bit_names:
        import bitsandbytes

        manager = bitsandbytes.optim.GlobalOptimManager.get_instance()
        for module in model.modules():
            if isinstance(module, nn.Embedding):
                manager.register_module_override(module, "weight", {"optim_bits": 32})
    return optimizer


def quantize(weight):
    import bitsandbytes

    return bitsandbytes.functional.int8_vectorwise_quant(weight)
"""

LAYER = """\
import bitsandbytes as bnb
import torch


class Linear8bit{name}(torch.nn.Module):
    def forward(self, x):
        return bnb.nn.Linear8bitLt(4, 4)(x)
"""

INIT = """\
from utils import is_bnb_available


def __getattr__(name):
    if name == "Linear8bit{name}" and is_bnb_available():
        from .bnb import Linear8bit{name}

        return Linear8bit{name}
"""

OPTIMIZING = """\
import torch
from utils import is_bnb_available

if is_bnb_available():
    import bitsandbytes as bnb

    def build(params):
        return bnb.optim.PagedAdamW8bit(params)
"""

UTILS = """\
import importlib.util


def is_bnb_available():
    return importlib.util.find_spec("bitsandbytes") is not None
"""


def test_bitsandbytes_notes_resolved_and_folded(tmp_path: Path) -> None:
    files = {"pkg/__init__.py": "", "pkg/loraplus.py": LORAPLUS, "utils.py": UTILS,
             "pkg/optimizing.py": OPTIMIZING}
    for name in ("a", "b", "c"):
        files[f"pkg/{name}/__init__.py"] = INIT.replace("{name}", name.upper())
        files[f"pkg/{name}/bnb.py"] = LAYER.replace("{name}", name.upper())
    report = migrate_json(write_project(tmp_path, files))
    lora = _findings(report, "pkg/loraplus.py", "NPU914")
    assert 8 not in lora and 8 in _scopes(report, "pkg/loraplus.py", "NPU914")
    # a functional call is not folded into the optimizer's note: it runs as written on an NPU host
    # (round 15, AN#12: only a function the NPU backend has, gates16.py), a scope of its own
    assert 18 not in lora and "functions its NPU backend provides" in _scopes(report, "pkg/loraplus.py", "NPU914")[18]
    notes = {path: _findings(report, path, "NPU914") for path in
             ("pkg/a/bnb.py", "pkg/b/bnb.py", "pkg/c/bnb.py", "pkg/optimizing.py")}
    kept = [path for path in ("pkg/a/bnb.py", "pkg/b/bnb.py", "pkg/c/bnb.py") if 1 in notes[path]]
    # the layer-only note once per package, the other sites named in it and as skipped scopes
    assert kept == ["pkg/a/bnb.py"] and "2 more" in notes["pkg/a/bnb.py"][1]["message"]
    assert 1 in _scopes(report, "pkg/b/bnb.py", "NPU914") and 1 in _scopes(report, "pkg/c/bnb.py", "NPU914")
    assert "once for the package at pkg/a/bnb.py:1" in _scopes(report, "pkg/b/bnb.py", "NPU914")[1]
    # a file that uses an 8-bit optimizer keeps its own finding
    assert 5 in notes["pkg/optimizing.py"] or 8 in notes["pkg/optimizing.py"]


# ----------------------------------------------------------------------------- NPU913 in CPU-only tests
CONFTEST = """\
import pytest
import torch

devices = ["cpu"]
if torch.cuda.is_available():
    devices += ["cuda"]
elif torch.backends.mps.is_available():
    devices += ["mps"]


@pytest.fixture(scope="module", params=devices)
def device(request):
    return torch.device(request.param)
"""

TEST_MM = """\
import pytest
import torch


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.int8])
def test_mm(dtype, device):
    a = torch.randn(4, 4, device=device)
    assert a.to(dtype).to(torch.float32).shape == (4, 4)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn])
def test_mm_accelerator(dtype):
    a = torch.randn(4, 4, device="cuda")
    assert a.to(dtype).shape == (4, 4)
"""


def test_fp8_in_a_test_an_npu_host_runs_on_the_cpu(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"test/conftest.py": CONFTEST, "test/lib/test_mm.py": TEST_MM}))
    found = {line: f for line, f in _findings(report, "test/lib/test_mm.py", "NPU913").items()
             if f["severity"] != "info"}
    scopes = _scopes(report, "test/lib/test_mm.py", "NPU913")
    assert 5 not in found and 5 in scopes and "test/conftest.py" in scopes[5]
    assert 11 in found or 14 in found  # the test that puts FP8 on the accelerator stays reported
