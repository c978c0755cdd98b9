"""Round-24 precision (issue #16), helper h103: the project's own device resolver and accelerator
abstraction read for what they do on an NPU host (npu_migrate/resolvers24.py).

- BQ#30: configs setting `device: cuda`, read only through a resolver that rebuilds an index-less
  device from the detected device type: a named "runs as written" scope; the nearest true cases
  (the value also handed to a backend choice or `torch.device` without the resolver, an indexed
  value) stay findings;
- BQ#28: `if device.type != "cuda": raise ValueError("... CUDA graph ...")` in front of code that
  captures through the project's accelerator, whose NPU class implements the graph methods: the
  NPU108 message says the check should be widened; a capture through `torch.cuda` itself, or a
  graph method the NPU class lacks, keeps the CUDA-only message.
"""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, write_project

RECIPE = "model:\n  name: tiny-{n}\ndevice: {value}\ndtype: bf16\n"

# a resolver like torchtune's: an index-less device is rebuilt from the detected type
RESOLVER = """\
import torch

try:
    import torch_npu  # noqa: F401
    HAS_NPU = True
except ImportError:
    HAS_NPU = False


def _detected_type():
    if torch.cuda.is_available():
        return "cuda"
    if HAS_NPU:
        return "npu"
    return "cpu"


def _setup_device(device):
    device_type = _detected_type()
    if device.index is None:
        device = torch.device(type=device_type, index=0)
    return device


def get_device(device=None):
    if device is None:
        device = _detected_type()
    device = torch.device(device)
    if device.type in ["cuda", "npu"]:
        device = _setup_device(device)
    return device
"""

TRAIN = """\
from pkg.utils import get_device


class Recipe:
    def __init__(self, cfg):
        self._device = get_device(device=cfg.device)
        if cfg.device == "npu" and cfg.compile:
            raise ValueError("no compile on NPU")
"""

# the value handed on without the resolver: "cuda" picks NCCL there
DIST = """\
import torch.distributed as dist

from pkg.utils import get_device


def backend_for(device_type):
    return dist.Backend.default_device_backend_map.get(device_type, "gloo")


class Recipe:
    def __init__(self, cfg):
        device_type = cfg.device
        self._device = get_device(device=device_type)
        dist.init_process_group(backend_for(device_type))
"""


def _configs(value: str = "cuda") -> dict:
    return {f"recipes/configs/model_{n}.yaml": RECIPE.format(n=n, value=value) for n in range(3)}


def _device_findings(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == "NPU706"]


def test_config_device_read_only_through_a_remapping_resolver_runs_as_written(tmp_path: Path) -> None:
    files = _configs()
    files.update({"pkg/__init__.py": "", "pkg/utils.py": RESOLVER, "recipes/train.py": TRAIN})
    report = migrate_json(write_project(tmp_path, files))
    assert not _device_findings(report)
    [scope] = [s for s in report["skipped"] if s.get("path") == "recipes/configs/model_0.yaml"]
    assert scope["reason"].startswith("runs as written on an NPU host (NPU706): a config device the "
                                      "project's resolver maps to the detected device")
    assert "`get_device` (pkg/utils.py:" in scope["reason"] and "`_setup_device`" in scope["reason"]
    assert "3 config files set it" in scope["reason"]


def test_config_device_also_read_without_the_resolver_stays_a_warning(tmp_path: Path) -> None:
    files = _configs()
    files.update({"pkg/__init__.py": "", "pkg/utils.py": RESOLVER, "recipes/train.py": TRAIN,
                  "recipes/dist.py": DIST})
    report = migrate_json(write_project(tmp_path, files))
    [finding] = _device_findings(report)
    assert finding["severity"] == "warning"
    assert "also reads `device` without it, in recipes/dist.py:14" in finding["message"]
    assert "recipes/dist.py:12" not in finding["message"]  # (the binding and the resolver's argument)


def test_config_device_passed_to_torch_device_stays(tmp_path: Path) -> None:
    files = _configs()
    files.update({"pkg/__init__.py": "", "pkg/utils.py": RESOLVER, "recipes/train.py": TRAIN,
                  "recipes/eval.py": "import torch\n\n\ndef run(cfg):\n    return torch.zeros(1).to(cfg.device)\n"})
    report = migrate_json(write_project(tmp_path, files))
    [finding] = _device_findings(report)
    assert finding["severity"] == "warning" and "recipes/eval.py:5" in finding["message"]


def test_indexed_config_device_is_not_remapped(tmp_path: Path) -> None:
    files = _configs("cuda:1")
    files.update({"pkg/__init__.py": "", "pkg/utils.py": RESOLVER, "recipes/train.py": TRAIN})
    report = migrate_json(write_project(tmp_path, files))
    [finding] = _device_findings(report)
    assert "maps to the detected device" not in finding["message"]
    assert "rebuilds a device" not in finding["message"]


# ------------------------------------------------------------------------------------------------
# BQ#28: a "CUDA graph" check in front of the accelerator's graph capture

ACCELERATOR = """\
def get_accelerator():
    from pkg.accelerator.npu_accelerator import NPU_Accelerator
    return NPU_Accelerator()
"""

NPU_ACCELERATOR = """\
import torch


class NPU_Accelerator:
    def create_graph(self):
        return torch.npu.NPUGraph()

    def capture_to_graph(self, graph, pool=None, stream=None):
        return torch.npu.graph(graph, pool, stream)

    def replay_graph(self, graph):
        graph.replay()
"""

ROLLOUT = """\
import torch

from pkg.accelerator import get_accelerator


class Rollout:
    @torch.no_grad()
    def generate(self, model, inputs):
        device = inputs.device
        if device.type != "cuda":
            raise ValueError("continuous CUDA graph capture requires CUDA rollout inputs")
        graph, out = self._capture(model, inputs)
        get_accelerator().replay_graph(graph)
        return out

    @staticmethod
    def _capture(model, inputs):
        accelerator = get_accelerator()
        graph = {create}
        with {capture}(graph):
            out = model(inputs)
        return graph, out
"""


def _rollout_findings(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == "NPU108" and f["path"] == "pkg/rollout.py"]


def _graph_project(tmp_path: Path, create: str, capture: str, npu: str = NPU_ACCELERATOR) -> dict:
    return migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/accelerator/__init__.py": ACCELERATOR,
        "pkg/accelerator/npu_accelerator.py": npu,
        "pkg/rollout.py": ROLLOUT.format(create=create, capture=capture)}))


def test_cuda_graph_check_before_accelerator_capture_asks_to_widen(tmp_path: Path) -> None:
    report = _graph_project(tmp_path, "accelerator.create_graph()", "accelerator.capture_to_graph")
    [finding] = _rollout_findings(report)
    assert finding["line"] == 10 and finding["severity"] == "warning"
    assert "keeps the NPU from graph capture it supports" in finding["message"]
    assert "`NPU_Accelerator` (pkg/accelerator/npu_accelerator.py:5)" in finding["message"]
    assert "`create_graph()` (line 19), `capture_to_graph()` (line 20)" in finding["message"]
    assert "`replay_graph()` (line 13)" in finding["message"]


def test_cuda_graph_check_before_torch_cuda_capture_stays(tmp_path: Path) -> None:
    report = _graph_project(tmp_path, "torch.cuda.CUDAGraph()", "torch.cuda.graph")
    [finding] = _rollout_findings(report)
    assert "guards a CUDA-only feature" in finding["message"]


def test_cuda_graph_check_when_npu_accelerator_lacks_a_method_stays(tmp_path: Path) -> None:
    npu = NPU_ACCELERATOR.replace("        graph.replay()", "        raise NotImplementedError")
    report = _graph_project(tmp_path, "accelerator.create_graph()", "accelerator.capture_to_graph", npu)
    [finding] = _rollout_findings(report)
    assert "guards a CUDA-only feature" in finding["message"]


# ------------------------------------------------------------------------------------------------
# BO#24: a backend whose own class selects it automatically only on ROCm

ROCM_BACKEND = """\
import torch

from pkg.utils import is_hip, is_npu

_is_hip = is_hip()
_is_npu = is_npu()


class FancyFp4Config:
    @classmethod
    def get_name(cls):
        return "fancy_fp4"

    @classmethod
    def override_quantization_method(cls, hf_quant_cfg, user_quant):
        can_convert = cls.is_fancy_compatible(hf_quant_cfg)
        if can_convert:
            return cls.get_name()
        return None

    @classmethod
    def is_fancy_compatible(cls, quant_config):
        quant_method = quant_config.get("quant_method", "").lower()
        return {gate} and quant_method == "modelopt"

    def get_quant_method(self, layer, prefix):
        return FancyFp4LinearMethod(self)


class FancyFp4LinearMethod:
    def __init__(self, quant_config):
        self.quant_config = quant_config

    def create_weights(self, layer, rows, cols):
        scale = torch.empty(rows, cols // 16, dtype=torch.float8_e4m3fn)
        layer.register_parameter("weight_scale", torch.nn.Parameter(scale, requires_grad=False))
"""

UTILS = """\
import torch


def is_hip():
    return torch.version.hip is not None


def is_npu():
    return hasattr(torch, "npu") and torch.npu.is_available()
"""


def _fp8_findings(tmp_path: Path, gate: str) -> list[dict]:
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/fancy.py": ROCM_BACKEND.format(gate=gate)}))
    return [f for f in report["findings"] if f["code"] == "NPU913" and f["path"] == "pkg/fancy.py"]


def test_backend_its_class_selects_only_on_rocm_is_info(tmp_path: Path) -> None:
    [finding] = _fp8_findings(tmp_path, "_is_hip")
    assert finding["severity"] == "info" and finding["line"] == 35
    assert ("in a backend its own class selects automatically only where `_is_hip and quant_method == "
            "\"modelopt\"` holds (`is_fancy_compatible`, line 24, asked by `override_quantization_method`)"
            in finding["message"])
    assert "`FancyFp4LinearMethod` is named only by `FancyFp4Config`" in finding["message"]


def test_backend_its_class_may_select_on_an_npu_host_stays_an_error(tmp_path: Path) -> None:
    [finding] = _fp8_findings(tmp_path, "(_is_hip or _is_npu)")
    assert finding["severity"] == "error" and "selects automatically" not in finding["message"]


def test_backend_its_class_selects_on_cuda_or_rocm_stays_an_error(tmp_path: Path) -> None:
    # a CUDA-or-ROCm backend: CUDA code the port may need on the NPU, not another vendor's only
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/utils.py": UTILS + "\n\ndef is_cuda():\n    return torch.version.cuda is not None\n",
        "pkg/fancy.py": ROCM_BACKEND.format(gate="(_is_cuda or _is_hip)").replace(
            "_is_npu = is_npu()", "_is_npu = is_npu()\n_is_cuda = is_cuda()").replace(
            "import is_hip, is_npu", "import is_cuda, is_hip, is_npu")}))
    [finding] = [f for f in report["findings"] if f["code"] == "NPU913" and f["path"] == "pkg/fancy.py"]
    assert finding["severity"] == "error" and "selects automatically" not in finding["message"]
