"""vllm-ascend facts re-read (helper h173, issue #16; ascendfacts30.py, rules/vllm_ascend.toml):
the plugin now SUBCLASSES vLLM's Fp8Config, DeepseekV4FP8Config and ModelOptMxFp8Config (registered
under "fp8", "deepseek_v4_fp8", "modelopt_mxfp8"/"mxfp8"), so those classes run there except the
methods the subclass overrides; round 32 GB#5's FP8 weight-parameter helper is reached only through
those overridden methods and other replaced or rejected configs. Each false shape is paired with
the nearest true case that stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project
from .precision_helpers import VLLM_PLATFORM_INTERFACE as INTERFACE

QUANT = "vllm/model_executor/layers/quantization"
REGISTRY = '''def get_quantization_config(quantization: str):
    from .fp8 import Fp8Config
    from .modelopt import ModelOptMxFp8Config, ModelOptNvFp4Config

    method_to_config = {"fp8": Fp8Config, "modelopt_fp4": ModelOptNvFp4Config,
                        "modelopt_mxfp8": ModelOptMxFp8Config}
    return method_to_config[quantization]
'''
CONFIG = '''from vllm.model_executor.layers.quantization import get_quantization_config


def quant_config_class(method: str):
    return get_quantization_config(method)
'''
# (vLLM's fp8_utils.py: the weight-parameter helper allocates FP8 storage, an error)
FP8_UTILS = '''import torch


def create_fp8_weight_parameter(output_size: int, input_size: int):
    return torch.nn.Parameter(torch.empty(output_size, input_size, dtype=torch.float8_e4m3fn),
                              requires_grad=False)
'''
# (vLLM's fp8.py: Fp8Config builds Fp8LinearMethod only in get_quant_method, which the plugin's
# AscendFp8Config overrides; from_config, inherited by the plugin's subclass, runs there)
FP8 = '''import torch

from vllm.model_executor.layers.quantization.utils.fp8_utils import create_fp8_weight_parameter


class Fp8LinearMethod:
    def __init__(self, quant_config):
        self.quant_config = quant_config

    def create_weights(self, layer, output_size, input_size):
        layer.weight = create_fp8_weight_parameter(output_size, input_size)


class Fp8Config:
    def __init__(self, activation_scheme="dynamic"):
        self.activation_scheme = activation_scheme

    @classmethod
    def from_config(cls, config):
        scale = torch.empty(1, dtype=torch.float8_e4m3fn)
        return cls(config.get("activation_scheme", "dynamic")), scale

    def get_quant_method(self, layer, prefix):
        return Fp8LinearMethod(self)
'''
# (vLLM's modelopt.py: NVFP4 stays rejected; MXFP8 is the plugin's subclass now)
MODELOPT = '''import torch


class ModelOptNvFp4FusedMoE:
    def create_weights(self, layer, n):
        layer.w13 = torch.empty(n, dtype=torch.float8_e4m3fn)


class ModelOptNvFp4Config:
    def get_quant_method(self, layer, prefix):
        return ModelOptNvFp4FusedMoE()


def mxfp8_scales(n):
    return torch.empty(n, dtype=torch.float8_e4m3fn)


class ModelOptMxFp8FusedMoE:
    def create_weights(self, layer, n):
        layer.w13 = torch.empty(n, dtype=torch.float8_e4m3fn)


class ModelOptMxFp8Config:
    @classmethod
    def from_config(cls, config):
        return cls(), mxfp8_scales(config["n"])

    def get_quant_method(self, layer, prefix):
        return ModelOptMxFp8FusedMoE()
'''


def _project(extra: dict | None = None) -> dict:
    files = {
        "vllm/platforms/interface.py": INTERFACE,
        f"{QUANT}/__init__.py": REGISTRY,
        f"{QUANT}/utils/fp8_utils.py": FP8_UTILS,
        f"{QUANT}/fp8.py": FP8,
        f"{QUANT}/modelopt.py": MODELOPT,
        "vllm/config/model.py": CONFIG,
    }
    files.update(extra or {})
    return files


def _at(report: dict, path: str, code: str, line_text: str, files: dict) -> dict:
    line = next(n for n, text in enumerate(files[path].splitlines(), 1) if line_text in text)
    found = [f for f in report["findings"] if f["path"] == path and f["code"] == code and not f["fixable"]
             and (f["line"] == line or any(a[0] == line for a in f.get("also", ())))]
    assert len(found) == 1, (path, code, line, [(f["line"], f["message"]) for f in report["findings"] if f["path"] == path])
    return found[0]


# ------------------------------------------------------------------ GB#5: fp8_utils's helper

def test_fp8_weight_helper_only_replaced_configs_call_names_the_plugin_fact(tmp_path):
    """GB#5: `create_fp8_weight_parameter` is called only by Fp8LinearMethod, which only
    `Fp8Config.get_quant_method` builds, a method the plugin's AscendFp8Config overrides: info
    naming the fact."""
    files = _project()
    report = migrate_json(write_project(tmp_path, files))
    helper = _at(report, f"{QUANT}/utils/fp8_utils.py", "NPU913", "float8_e4m3fn", files)
    assert helper["severity"] == "info"
    assert "vllm-ascend" in helper["message"]


INC_SCHEME = '''from vllm.model_executor.layers.quantization.fp8 import Fp8Config, Fp8LinearMethod


class INCFp8LinearScheme:
    def __init__(self):
        self.linear_method = Fp8LinearMethod(Fp8Config())
'''
# (vLLM's HY V4 MTP: a model the plugin does not replace builds vLLM's Fp8Config itself)
MTP = '''def mtp_quant_config(hf_quant_config):
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    return Fp8Config(activation_scheme=hf_quant_config.get("activation_scheme", "dynamic"))
'''


def test_fp8_weight_helper_reached_through_the_rejected_inc_method_names_the_plugin_fact(tmp_path):
    """INC's FP8 scheme builds Fp8LinearMethod too; "inc" is rejected at config time (not in
    NPUPlatform.supported_quantization): the helper stays info naming the fact."""
    files = _project({f"{QUANT}/inc/schemes/inc_fp8_linear.py": INC_SCHEME})
    report = migrate_json(write_project(tmp_path, files))
    helper = _at(report, f"{QUANT}/utils/fp8_utils.py", "NPU913", "float8_e4m3fn", files)
    assert helper["severity"] == "info" and "vllm-ascend" in helper["message"]


def test_fp8_weight_helper_a_model_building_fp8config_keeps_its_error(tmp_path):
    """Nearest true case, GB#5's real shape: a model the plugin does not replace builds vLLM's
    Fp8Config itself (vLLM's vllm/models/hy_v4/nvidia/mtp.py), whose own get_quant_method then
    builds Fp8LinearMethod on an Ascend host: the helper keeps its error."""
    files = _project({"vllm/models/hy_v4/nvidia/mtp.py": MTP})
    report = migrate_json(write_project(tmp_path, files))
    helper = _at(report, f"{QUANT}/utils/fp8_utils.py", "NPU913", "float8_e4m3fn", files)
    assert helper["severity"] == "error" and "vllm-ascend" not in helper["message"]


def test_fp8_weight_helper_another_module_calls_stays_an_error(tmp_path):
    """Nearest true case: a model module an NPU host imports calls the same helper itself: the
    helper is reached there and keeps its error, with no plugin fact."""
    model = ('from vllm.model_executor.layers.quantization.utils.fp8_utils import create_fp8_weight_parameter\n\n\n'
             'def build(layer):\n    layer.weight = create_fp8_weight_parameter(4, 4)\n')
    files = _project({"vllm/models/foo/model.py": model})
    report = migrate_json(write_project(tmp_path, files))
    helper = _at(report, f"{QUANT}/utils/fp8_utils.py", "NPU913", "float8_e4m3fn", files)
    assert helper["severity"] == "error" and "vllm-ascend" not in helper["message"]


# ------------------------------------------------------------------ the plugin's subclasses (drift)

def test_fp8_config_method_the_plugin_subclass_inherits_stays_an_error(tmp_path):
    """Drift fix (recall): the plugin's AscendFp8Config subclasses vLLM's Fp8Config, so its
    inherited `from_config` runs on an Ascend host: its FP8 allocation keeps its error (before, the
    whole class was taken for code only the replaced "fp8" method reaches)."""
    files = _project()
    report = migrate_json(write_project(tmp_path, files))
    scale = _at(report, f"{QUANT}/fp8.py", "NPU913", "scale = torch.empty", files)
    assert scale["severity"] == "error" and "vllm-ascend" not in scale["message"]


def test_modelopt_methods_only_overridden_or_rejected_code_builds_name_the_plugin_fact(tmp_path):
    """The MoE method only ModelOptMxFp8Config's `get_quant_method` builds (overridden by the
    plugin's subclass) and the NVFP4 method of the still-rejected "modelopt_fp4": info naming the
    fact, the overridden method named."""
    files = _project({f"{QUANT}/modelopt.py": MODELOPT.replace(
        "return torch.empty(n, dtype=torch.float8_e4m3fn)", "return torch.empty(n, dtype=torch.uint8)")})
    report = migrate_json(write_project(tmp_path, files))
    path = f"{QUANT}/modelopt.py"
    found = _at(report, path, "NPU913", "layer.w13 = torch.empty", files)
    assert found["severity"] == "info" and "vllm-ascend" in found["message"]
    assert "ModelOptMxFp8Config.get_quant_method" in found["message"] or "ModelOptNvFp4" in found["message"]


def test_modelopt_mxfp8_config_is_reached_through_the_plugin_subclass(tmp_path):
    """Nearest true case (drift fix, recall): "modelopt_mxfp8" is supported now and served by the
    plugin's subclass of ModelOptMxFp8Config: what its inherited `from_config` calls
    (`mxfp8_scales`) runs on an Ascend host and keeps the file's FP8 finding an error (before, the
    whole module was taken for code only rejected methods reach)."""
    files = _project()
    report = migrate_json(write_project(tmp_path, files))
    kept = _at(report, f"{QUANT}/modelopt.py", "NPU913", "return torch.empty(n, dtype=torch.float8_e4m3fn)", files)
    assert kept["severity"] == "error" and "vllm-ascend" not in kept["message"]


# ------------------------------------------------------------------ an overridden method, two routes
FP8_CAPABILITY = FP8.replace(
    "        scale = torch.empty(1, dtype=torch.float8_e4m3fn)\n        return cls(config.get(\"activation_scheme\", \"dynamic\")), scale\n",
    "        return cls(config.get(\"activation_scheme\", \"dynamic\"))\n\n"
    "    @classmethod\n    def get_min_capability(cls):\n        torch.empty(1, dtype=torch.float8_e4m3fn)\n        return 89\n")
# (vLLM's DeepSeek V4 FP8 config: a subclass of Fp8Config with its own get_quant_method; the
# plugin's AscendDeepseekV4FP8Config overrides only get_quant_method)
DSV4_CONFIG = '''from vllm.model_executor.layers.quantization.fp8 import Fp8Config


class DeepseekV4FP8Config(Fp8Config):
    def get_quant_method(self, layer, prefix):
        return None
'''


def test_method_only_the_plugin_subclass_overrides_names_the_plugin_fact(tmp_path):
    """Fp8Config.get_min_capability is overridden by the plugin's AscendFp8Config (it raises): the
    FP8 allocation there is info naming the fact and the overridden method."""
    files = _project({f"{QUANT}/fp8.py": FP8_CAPABILITY})
    report = migrate_json(write_project(tmp_path, files))
    found = _at(report, f"{QUANT}/fp8.py", "NPU913", "torch.empty(1, dtype=torch.float8_e4m3fn)", files)
    assert found["severity"] == "info" and "Fp8Config.get_min_capability" in found["message"]


def test_method_another_plugin_subclass_inherits_through_a_base_stays_an_error(tmp_path):
    """Nearest true case: the plugin's AscendDeepseekV4FP8Config does not override
    get_min_capability, and its vLLM base DeepseekV4FP8Config inherits Fp8Config's: reached there
    through the base, so it keeps its error."""
    files = _project({f"{QUANT}/fp8.py": FP8_CAPABILITY, "vllm/models/deepseek_v4/quant_config.py": DSV4_CONFIG})
    report = migrate_json(write_project(tmp_path, files))
    found = _at(report, f"{QUANT}/fp8.py", "NPU913", "torch.empty(1, dtype=torch.float8_e4m3fn)", files)
    assert found["severity"] == "error" and "vllm-ascend" not in found["message"]
