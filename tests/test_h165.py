"""vLLM model classes vllm-ascend registers its own implementation for (audit round 32 GB#37;
helper h165, issue #16; ascendmodels32.py, rules/vllm_ascend.toml `[[models]]`): each false shape
paired with the nearest true case that must stay reported at its severity."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project
from .precision_helpers import VLLM_PLATFORM_INTERFACE as INTERFACE

REGISTRY = '''_TEXT_GENERATION_MODELS = {
    "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
    "DeepseekV4ForCausalLM": ("vllm.models.deepseek_v4", "DeepseekV4ForCausalLM"),
}
'''
# (a model the plugin replaces: its attention launches a Triton kernel; its compressor's state cache
# is a class the plugin's own model subclasses)
ATTENTION = '''import torch

from vllm.triton_utils import tl, triton


@triton.jit
def _insert_kernel(x_ptr, n: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, n), 0)


class DeepseekV4Attention:
    def forward(self, x):
        _insert_kernel[(1,)](x, x.numel())
        return x
'''
COMPRESSOR = '''import torch

from vllm.triton_utils import tl, triton


@triton.jit
def _state_kernel(x_ptr, n: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, n), 1)


class CompressorStateCache:
    def fill(self, x):
        _state_kernel[(1,)](x, x.numel())
        return x
'''
MODEL = '''from vllm.models.deepseek_v4.attention import DeepseekV4Attention
from vllm.models.deepseek_v4.compressor import CompressorStateCache


class DeepseekV4ForCausalLM:
    def __init__(self):
        self.attn = DeepseekV4Attention()
        self.cache = CompressorStateCache()

    def forward(self, x):
        return self.attn.forward(self.cache.fill(x))
'''
INIT = '''from .model import DeepseekV4ForCausalLM

__all__ = ["DeepseekV4ForCausalLM"]
'''
ATTN = "vllm/models/deepseek_v4/attention.py"
STATE = "vllm/models/deepseek_v4/compressor.py"


def _project(extra: dict | None = None, vllm: bool = True) -> dict:
    files = {
        "vllm/model_executor/models/registry.py": REGISTRY,
        "vllm/models/deepseek_v4/__init__.py": INIT,
        "vllm/models/deepseek_v4/model.py": MODEL,
        ATTN: ATTENTION,
        STATE: COMPRESSOR,
    }
    if vllm:
        files["vllm/platforms/interface.py"] = INTERFACE
    files.update(extra or {})
    return files


def _at(report: dict, path: str, code: str, line_text: str, files: dict, nth: int = 0) -> dict:
    lines = [n for n, text in enumerate(files[path].splitlines(), 1) if line_text in text]
    found = [f for f in report["findings"] if f["path"] == path and f["code"] == code and not f["fixable"]
             and (f["line"] == lines[nth] or any(a[0] == lines[nth] for a in f.get("also", ())))]
    assert len(found) == 1, (path, code, lines, [(f["line"], f["code"], f["message"]) for f in report["findings"]
                                                 if f["path"] == path])
    return found[0]


def _kernels(report: dict, files: dict) -> tuple:
    """(the attention's kernel finding, the plugin-subclassed cache's kernel finding)."""
    return (_at(report, ATTN, "NPU910", "@triton.jit", files),
            _at(report, STATE, "NPU910", "@triton.jit", files))


def test_replaced_models_kernel_is_info_naming_the_fact(tmp_path):
    """GB#37: vllm-ascend registers its own DeepseekV4ForCausalLM, so vLLM's DeepseekV4Attention
    (reached only from vLLM's own DeepseekV4ForCausalLM, whose registry entry the fact closes) never
    runs on an Ascend host: its Triton kernel is info naming the fact and its source."""
    files = _project()
    report = migrate_json(write_project(tmp_path, files))
    insert, _cache = _kernels(report, files)
    assert insert["severity"] == "info", insert
    assert "vllm-ascend" in insert["message"] and "DeepseekV4ForCausalLM" in insert["message"]
    assert "vllm_ascend/models/__init__.py" in insert["message"] and "_insert_kernel" in insert["message"]


def test_class_the_plugin_subclasses_stays_an_error(tmp_path):
    """Nearest true case (same folder, same shape): CompressorStateCache, which vllm-ascend's own
    model subclasses (`plugin_uses`), runs on an Ascend host with its kernel: kept as an error."""
    files = _project()
    report = migrate_json(write_project(tmp_path, files))
    _insert, cache = _kernels(report, files)
    assert cache["severity"] == "error" and "vllm-ascend" not in cache["message"]


def test_architecture_the_plugin_does_not_replace_keeps_the_model_reached(tmp_path):
    """Nearest true case: the registry also maps an architecture vllm-ascend does not register
    (a draft model) to vLLM's DeepseekV4ForCausalLM, so vLLM builds it on an Ascend host: kept."""
    registry = REGISTRY.replace("}\n", '    "DeepseekV4DraftModel": ("vllm.models.deepseek_v4", "DeepseekV4ForCausalLM"),\n}\n')
    files = _project({"vllm/model_executor/models/registry.py": registry})
    report = migrate_json(write_project(tmp_path, files))
    insert, _cache = _kernels(report, files)
    assert insert["severity"] == "error" and "vllm-ascend" not in insert["message"]


def test_model_the_plugin_keeps_importing_the_attention_stays_an_error(tmp_path):
    """Nearest true case: a model vllm-ascend does not replace imports vLLM's DeepseekV4Attention
    (a shared layer outside the replaced folder): reached on an Ascend host, kept."""
    other = '''from vllm.models.deepseek_v4.attention import DeepseekV4Attention


class OtherForCausalLM:
    def __init__(self):
        self.attn = DeepseekV4Attention()
'''
    files = _project({"vllm/model_executor/models/other.py": other})
    report = migrate_json(write_project(tmp_path, files))
    insert, _cache = _kernels(report, files)
    assert insert["severity"] == "error" and "vllm-ascend" not in insert["message"]


def test_not_vllm_itself_keeps_the_kernel(tmp_path):
    """Nearest true case: the same folders in a project that is not vLLM (no
    vllm/platforms/interface.py defining `verify_quantization`): the plugin's facts do not apply."""
    files = _project(vllm=False)
    report = migrate_json(write_project(tmp_path, files))
    insert, _cache = _kernels(report, files)
    assert insert["severity"] == "error" and "vllm-ascend" not in insert["message"]
