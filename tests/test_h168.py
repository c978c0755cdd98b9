"""Round 32's backends and kernels only the CUDA/ROCm platform selects, and quantization facts
(helper h168, issue #16; ascendfacts30.py, rules/vllm_ascend.toml): each false shape paired with
the nearest true case that must stay reported as before."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

QUANT = "vllm/model_executor/layers/quantization"
INTERFACE = '''class Platform:
    supported_quantization: list[str] = []

    @classmethod
    def verify_quantization(cls, quant: str) -> None:
        if cls.supported_quantization and quant not in cls.supported_quantization:
            raise ValueError(f"{quant} quantization is currently not supported")
'''
REGISTRY = '''def get_quantization_config(quantization: str):
    from .mxfp4 import GptOssMxfp4Config, Mxfp4Config

    method_to_config = {"mxfp4": Mxfp4Config, "gpt_oss_mxfp4": GptOssMxfp4Config}
    return method_to_config[quantization]
'''
# (vLLM's ModelConfig: the registry is imported on every host)
CONFIG = '''from vllm.model_executor.layers.quantization import get_quantization_config


def quant_config_class(method: str):
    return get_quantization_config(method)
'''
# (vLLM's mxfp4.py: the MoE method packs FP8 scale bytes into a uint8 buffer, an info already)
MXFP4 = '''import torch


class Mxfp4MoEMethod:
    def __init__(self, moe):
        self.moe = moe

    @staticmethod
    def _encode_mxfp4_weight_scale(loaded_weight: torch.Tensor) -> torch.Tensor:
        if loaded_weight.is_floating_point():
            return loaded_weight.to(torch.float8_e8m0fnu).view(torch.uint8)
        return loaded_weight


class Mxfp4Config:
    def get_quant_method(self, layer):
        return Mxfp4MoEMethod(layer.moe_config)


class GptOssMxfp4Config(Mxfp4Config):
    pass
'''
# (a model that subclasses the MoE method)
SUBCLASS = '''from vllm.model_executor.layers.quantization.mxfp4 import Mxfp4MoEMethod


class HeterogeneousMxfp4MoEMethod(Mxfp4MoEMethod):
    pass


def maybe_wrap(quant_method, moe_config):
    if not isinstance(quant_method, Mxfp4MoEMethod):
        return quant_method
    return HeterogeneousMxfp4MoEMethod(moe_config)
'''


def _mxfp4_project(extra: dict) -> dict:
    files = {
        "vllm/platforms/interface.py": INTERFACE,
        f"{QUANT}/__init__.py": REGISTRY,
        f"{QUANT}/mxfp4.py": MXFP4,
        "vllm/config/model.py": CONFIG,
    }
    files.update(extra)
    return files


def _at(report: dict, path: str, code: str, line_text: str, files: dict) -> dict:
    line = next(n for n, text in enumerate(files[path].splitlines(), 1) if line_text in text)
    found = [f for f in report["findings"] if f["path"] == path and f["code"] == code and f["line"] == line
             and not f["fixable"]]
    assert len(found) == 1, (path, code, line, [(f["line"], f["message"]) for f in report["findings"] if f["path"] == path])
    return found[0]


def test_mxfp4_method_subclassed_only_by_rocm_code_names_the_plugin_fact(tmp_path):
    """GA#9: `Mxfp4MoEMethod._encode_mxfp4_weight_scale`'s FP8 cast (an info: bytes packed into
    uint8) is reached only through the "mxfp4"/"gpt_oss_mxfp4" methods vllm-ascend rejects at config
    time; the only other module naming the class is ROCm model code (an `amd` folder the run leaves
    alone). The info names the plugin's fact, so its advice (make the bytes on the CPU) is read as
    moot there."""
    files = _mxfp4_project({"vllm/models/dsv4/amd/model.py": SUBCLASS})
    report = migrate_json(write_project(tmp_path, files))
    fp8 = _at(report, f"{QUANT}/mxfp4.py", "NPU913", "float8_e8m0fnu", files)
    assert fp8["severity"] == "info"
    assert "vllm-ascend" in fp8["message"] and '"mxfp4", "gpt_oss_mxfp4"' in fp8["message"]
    assert "Mxfp4MoEMethod" in fp8["message"]


def test_mxfp4_method_subclassed_by_code_an_npu_host_runs_keeps_its_message(tmp_path):
    """Nearest true case: the same subclass in a model folder an NPU host imports (no ROCm folder)
    builds the method there: the finding keeps its own message, with no plugin fact."""
    files = _mxfp4_project({"vllm/models/dsv4/model.py": SUBCLASS})
    report = migrate_json(write_project(tmp_path, files))
    fp8 = _at(report, f"{QUANT}/mxfp4.py", "NPU913", "float8_e8m0fnu", files)
    assert "vllm-ascend" not in fp8["message"]
