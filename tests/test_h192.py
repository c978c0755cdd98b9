"""Code vllm-ascend replaces or never reaches, wave 35 (audit round 33 HA#3; helper h192, issue
#16; ascendmodels32.py, rules/vllm_ascend.toml `[[models]]`): each false shape paired with the
nearest true case that stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project
from .precision_helpers import VLLM_PLATFORM_INTERFACE as INTERFACE
from .precision_helpers import finding_at as _at

REGISTRY = '''_TEXT_GENERATION_MODELS = {
    "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
    "DeepseekV4ForCausalLM": ("vllm.models.deepseek_v4", "DeepseekV4ForCausalLM"),
    "DeepseekV41ForCausalLM": ("vllm.models.deepseek_v41", "DeepseekV41ForCausalLM"),
}

_SPECULATIVE_DECODING_MODELS = {
    "DSparkV41DraftModel": ("vllm.models.deepseek_v41", "DSparkV41DraftModel"),
}

_VLLM_MODELS = {
    **_TEXT_GENERATION_MODELS,
    **_SPECULATIVE_DECODING_MODELS,
}
'''

# HA#3: DeepSeek V4's FP8 output-projection helper (its own Triton kernel, the FP8 merged into it), called by vLLM's own
# V4 attention and by DeepSeek V4.1's `dsv41_o_proj`, which only V4.1's DSpark draft reaches.
V4_O_PROJ = '''import torch

from vllm.triton_utils import tl, triton


@triton.jit
def _inv_rope_quant_kernel(x_ptr, n: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, n), 0)


def deep_gemm_fp8_o_proj(x):
    out = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    _inv_rope_quant_kernel[(1,)](out, x.numel())
    return out
'''
V4_MODEL = '''from vllm.models.deepseek_v4.nvidia.ops.o_proj import deep_gemm_fp8_o_proj


class DeepseekV4ForCausalLM:
    def forward(self, x):
        return deep_gemm_fp8_o_proj(x)
'''
V4_INIT = '''from .model import DeepseekV4ForCausalLM

__all__ = ["DeepseekV4ForCausalLM"]
'''
V41_O_PROJ = '''from vllm.models.deepseek_v4.nvidia.ops.o_proj import deep_gemm_fp8_o_proj


def dsv41_o_proj(x):
    return deep_gemm_fp8_o_proj(x)
'''
V41_DSPARK = '''from vllm.models.deepseek_v41.nvidia.ops.o_proj import dsv41_o_proj


class DSparkV41DraftModel:
    def forward(self, x):
        return dsv41_o_proj(x)
'''
V41_MODEL = '''class DeepseekV41ForCausalLM:
    def forward(self, x):
        return x
'''
V41_INIT = '''from .dspark import DSparkV41DraftModel
from .model import DeepseekV41ForCausalLM

__all__ = ["DSparkV41DraftModel", "DeepseekV41ForCausalLM"]
'''
V41_ENGRAM = '''def engram_rows(x):
    return x
'''
O_PROJ = "vllm/models/deepseek_v4/nvidia/ops/o_proj.py"
ENGRAM = "vllm/models/deepseek_v41/common/engram.py"


def _run(tmp_path, extra: dict | None = None) -> tuple:
    files = {
        "vllm/platforms/interface.py": INTERFACE,
        "vllm/model_executor/models/registry.py": REGISTRY,
        "vllm/models/deepseek_v4/__init__.py": V4_INIT,
        "vllm/models/deepseek_v4/model.py": V4_MODEL,
        O_PROJ: V4_O_PROJ,
        "vllm/models/deepseek_v41/__init__.py": V41_INIT,
        "vllm/models/deepseek_v41/model.py": V41_MODEL,
        "vllm/models/deepseek_v41/dspark.py": V41_DSPARK,
        "vllm/models/deepseek_v41/nvidia/ops/o_proj.py": V41_O_PROJ,
        ENGRAM: V41_ENGRAM,
    }
    files.update(extra or {})
    return migrate_json(write_project(tmp_path, files)), files


# --- HA#3: a unit of one replaced model named by another replaced model's code


def test_helper_named_only_by_the_other_models_draft_only_code_is_opt_in_info(tmp_path):
    """HA#3: vllm-ascend replaces both DeepSeek V4 and V4.1; V4's FP8 output projection is named
    outside its folder only by V4.1's `dsv41_o_proj`, which only V4.1's DSpark draft (a
    speculative-decoding table entry, opt-in) reaches: info naming that draft and the fact."""
    report, files = _run(tmp_path)
    found = _at(report, O_PROJ, "NPU910", "@triton.jit", files)
    assert found["severity"] == "info", found
    message = found["message"]
    assert '"DSparkV41DraftModel"' in message and "opt-in" in message and "vllm-ascend" in message


def test_helper_named_by_the_other_models_unreached_code_is_info(tmp_path):
    """HA#3, the same shape without the draft: V4.1's caller is reached only from vLLM's own V4.1
    model class, which the plugin replaces: info naming the fact."""
    registry = REGISTRY.replace('    "DSparkV41DraftModel": ("vllm.models.deepseek_v41", "DSparkV41DraftModel"),\n', "")
    model = V41_MODEL.replace("class DeepseekV41ForCausalLM:",
                              "from vllm.models.deepseek_v41.nvidia.ops.o_proj import dsv41_o_proj\n\n\n"
                              "class DeepseekV41ForCausalLM:").replace("return x", "return dsv41_o_proj(x)")
    report, files = _run(tmp_path, {"vllm/model_executor/models/registry.py": registry,
                                    "vllm/models/deepseek_v41/model.py": model})
    found = _at(report, O_PROJ, "NPU910", "@triton.jit", files)
    assert found["severity"] == "info", found
    assert "vllm-ascend" in found["message"] and "speculative decoding" not in found["message"]


def test_helper_named_by_what_the_plugin_imports_from_the_other_model_stays_an_error(tmp_path):
    """Nearest true case: V4.1's Engram module, which vllm-ascend's own V4.1 imports from vLLM
    (`plugin_uses`), calls the same helper: reached on an Ascend host, kept as an error."""
    engram = ("from vllm.models.deepseek_v4.nvidia.ops.o_proj import deep_gemm_fp8_o_proj\n\n\n"
              "def engram_rows(x):\n    return deep_gemm_fp8_o_proj(x)\n")
    report, files = _run(tmp_path, {ENGRAM: engram})
    found = _at(report, O_PROJ, "NPU910", "@triton.jit", files)
    assert found["severity"] == "error" and "vllm-ascend" not in found["message"], found


def test_helper_named_by_the_other_models_main_route_stays_an_error(tmp_path):
    """Nearest true case: the V4.1 class that calls it is listed in a main-model table the plugin
    does not replace (built whenever a checkpoint names it): kept as an error."""
    registry = REGISTRY.replace('_VLLM_MODELS = {', '_EXTRA_MODELS = {\n    "DSparkV41DraftModel": '
                                '("vllm.models.deepseek_v41", "DSparkV41DraftModel"),\n}\n\n_VLLM_MODELS = {')
    report, files = _run(tmp_path, {"vllm/model_executor/models/registry.py": registry})
    found = _at(report, O_PROJ, "NPU910", "@triton.jit", files)
    assert found["severity"] == "error" and "vllm-ascend" not in found["message"], found
