"""vLLM models vllm-ascend registers its own class for, wave 33 (audit round 32 GB#29, GB#38,
GC#20; helper h174, issue #16; ascendmodels32.py, rules/vllm_ascend.toml `[[models]]` and
`[draft_routes]`): each false shape paired with the nearest true case that stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project
from .precision_helpers import VLLM_PLATFORM_INTERFACE as INTERFACE
from .precision_helpers import finding_at as _at

REGISTRY = '''_TEXT_GENERATION_MODELS = {
    "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
    "DeepseekV4ForCausalLM": ("vllm.models.deepseek_v4", "DeepseekV4ForCausalLM"),
    "MiniMaxM3SparseForCausalLM": ("vllm.models.minimax_m3", "MiniMaxM3SparseForCausalLM"),
    "DeepseekV41ForCausalLM": ("vllm.models.deepseek_v41", "DeepseekV41ForCausalLM"),
}

_SPECULATIVE_DECODING_MODELS = {
    "MiniMaxM3MTP": ("vllm.models.minimax_m3", "MiniMaxM3MTP"),
}

_VLLM_MODELS = {
    **_TEXT_GENERATION_MODELS,
    **_SPECULATIVE_DECODING_MODELS,
}
'''

# GB#38: a module-level instance of a Triton kernel wrapper, read only by the replaced model's
# compressor; the compressor module also holds the state cache the plugin's own model subclasses.
SAVE_STATES = '''from vllm.triton_utils import tl, triton


class KernelBase:
    pass


class SavePartialStatesKernel(KernelBase):
    @staticmethod
    @triton.jit
    def kernel(x_ptr, n: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, n), 0)

    def __call__(self, x):
        self.kernel[(1,)](x, x.numel())
        return x


_SAVE_PARTIAL_STATES_KERNEL = SavePartialStatesKernel()
'''
COMPRESSOR = '''from vllm.models.deepseek_v4.common.ops.save_partial_states import _SAVE_PARTIAL_STATES_KERNEL


class CompressorStateCache:
    def size(self):
        return 0


class Compressor:
    def forward(self, x):
        return _SAVE_PARTIAL_STATES_KERNEL(x)
'''
V4_MODEL = '''from vllm.models.deepseek_v4.compressor import Compressor, CompressorStateCache


class DeepseekV4ForCausalLM:
    def __init__(self):
        self.compressor = Compressor()
        self.cache = CompressorStateCache()
'''
V4_INIT = '''from .model import DeepseekV4ForCausalLM

__all__ = ["DeepseekV4ForCausalLM"]
'''
STATES = "vllm/models/deepseek_v4/common/ops/save_partial_states.py"

# GB#29: a norm of the replaced MiniMax M3 model, built by the main model and by its MTP draft.
M3_MODEL = '''import torch


class MiniMAXGemmaRMSNorm(torch.nn.Module):
    def forward(self, x):
        from flashinfer.norm import gemma_rmsnorm

        return gemma_rmsnorm(x, self.weight, 1e-6)


class MiniMaxM3SparseForCausalLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = MiniMAXGemmaRMSNorm()


class MiniMaxM3MTP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = MiniMAXGemmaRMSNorm()
'''
M3_INIT = '''from .model import MiniMaxM3MTP, MiniMaxM3SparseForCausalLM

__all__ = ["MiniMaxM3MTP", "MiniMaxM3SparseForCausalLM"]
'''
NORM = "vllm/models/minimax_m3/model.py"

# GC#20: DeepSeek V4.1's own attention launches a Triton kernel; the Engram module the plugin
# imports from vLLM launches one too.
V41_STORE = '''from vllm.triton_utils import tl, triton


@triton.jit
def _indexer_k_store_kernel(x_ptr, n: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, n), 0)


def indexer_k_norm_rope_store(x):
    _indexer_k_store_kernel[(1,)](x, x.numel())
    return x
'''
V41_ENGRAM = '''from vllm.triton_utils import tl, triton


@triton.jit
def _write_hash_cache_kernel(x_ptr, n: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, n), 1)


def write_hash_cache(x):
    _write_hash_cache_kernel[(1,)](x, x.numel())
    return x
'''
V41_MODEL = '''from vllm.models.deepseek_v41.common.engram import write_hash_cache
from vllm.models.deepseek_v41.common.ops.indexer_k_store import indexer_k_norm_rope_store


class DeepseekV41ForCausalLM:
    def forward(self, x):
        return indexer_k_norm_rope_store(write_hash_cache(x))
'''
V41_INIT = '''from .model import DeepseekV41ForCausalLM

__all__ = ["DeepseekV41ForCausalLM"]
'''
STORE = "vllm/models/deepseek_v41/common/ops/indexer_k_store.py"
ENGRAM = "vllm/models/deepseek_v41/common/engram.py"


def _project(extra: dict | None = None) -> dict:
    files = {
        "vllm/platforms/interface.py": INTERFACE,
        "vllm/model_executor/models/registry.py": REGISTRY,
        "vllm/models/deepseek_v4/__init__.py": V4_INIT,
        "vllm/models/deepseek_v4/model.py": V4_MODEL,
        "vllm/models/deepseek_v4/compressor.py": COMPRESSOR,
        STATES: SAVE_STATES,
        "vllm/models/minimax_m3/__init__.py": M3_INIT,
        NORM: M3_MODEL,
        "vllm/models/deepseek_v41/__init__.py": V41_INIT,
        "vllm/models/deepseek_v41/model.py": V41_MODEL,
        STORE: V41_STORE,
        ENGRAM: V41_ENGRAM,
    }
    files.update(extra or {})
    return files


def _run(tmp_path, extra: dict | None = None) -> tuple:
    files = _project(extra)
    return migrate_json(write_project(tmp_path, files)), files


# --- GB#38: a module-level kernel instance only the replaced model reads


def test_kernel_instance_read_only_by_replaced_model_is_info(tmp_path):
    """GB#38: `_SAVE_PARTIAL_STATES_KERNEL = SavePartialStatesKernel()` runs nothing of the kernel at
    import; only vLLM's own DeepSeek V4 Compressor (replaced by the plugin) calls it: info naming the
    fact, though the module is imported on an Ascend host (the plugin subclasses the compressor
    module's CompressorStateCache)."""
    report, files = _run(tmp_path)
    kernel = _at(report, STATES, "NPU910", "@triton.jit", files)
    assert kernel["severity"] == "info", kernel
    assert "vllm-ascend" in kernel["message"] and "DeepseekV4ForCausalLM" in kernel["message"]


def test_kernel_instance_read_by_a_model_the_plugin_keeps_stays_an_error(tmp_path):
    """Nearest true case: a model outside the replaced folder calls the same instance: reached on
    an Ascend host, kept as an error."""
    other = '''from vllm.models.deepseek_v4.common.ops.save_partial_states import _SAVE_PARTIAL_STATES_KERNEL


class OtherForCausalLM:
    def forward(self, x):
        return _SAVE_PARTIAL_STATES_KERNEL(x)
'''
    report, files = _run(tmp_path, {"vllm/model_executor/models/other.py": other})
    kernel = _at(report, STATES, "NPU910", "@triton.jit", files)
    assert kernel["severity"] == "error" and "vllm-ascend" not in kernel["message"]


def test_kernel_instance_read_by_what_the_plugin_subclasses_stays_an_error(tmp_path):
    """Nearest true case: the class the plugin's own model subclasses (CompressorStateCache,
    `plugin_uses`) reads the instance: kept as an error."""
    compressor = COMPRESSOR.replace("        return 0\n", "        return _SAVE_PARTIAL_STATES_KERNEL(0)\n")
    report, files = _run(tmp_path, {"vllm/models/deepseek_v4/compressor.py": compressor})
    kernel = _at(report, STATES, "NPU910", "@triton.jit", files)
    assert kernel["severity"] == "error" and "vllm-ascend" not in kernel["message"]


def test_instance_whose_class_runs_its_own_init_at_import_stays_an_error(tmp_path):
    """Nearest true case: the class defines `__init__`, so building the instance at import runs the
    module's own code on an Ascend host (here the launch itself): kept as an error."""
    states = SAVE_STATES.replace("    def __call__(self, x):", "    def __init__(self):\n"
                                 "        self.kernel[(1,)](None, 1)\n\n    def __call__(self, x):")
    report, files = _run(tmp_path, {STATES: states})
    kernel = _at(report, STATES, "NPU910", "@triton.jit", files)
    assert kernel["severity"] == "error" and "vllm-ascend" not in kernel["message"]


# --- GB#29: a route the facts leave open only through a speculative-decoding draft


def test_layer_reached_only_through_a_draft_architecture_is_opt_in_info(tmp_path):
    """GB#29: vllm-ascend replaces MiniMaxM3SparseForCausalLM; the registry's "MiniMaxM3MTP" (a
    draft of the speculative-decoding table, built only when the user configures speculative
    decoding) is the only route left to MiniMAXGemmaRMSNorm: info naming the draft and the opt-in."""
    report, files = _run(tmp_path)
    norm = _at(report, NORM, "NPU911", "from flashinfer.norm import", files)
    assert norm["severity"] == "info", norm
    message = norm["message"]
    assert '"MiniMaxM3MTP"' in message and "speculative decoding" in message and "opt-in" in message
    assert "vllm-ascend" in message


def test_same_architecture_in_a_main_table_stays_an_error(tmp_path):
    """Nearest true case: the same architecture listed in a main-model table (built whenever a
    checkpoint names it): kept as an error."""
    registry = REGISTRY.replace('_VLLM_MODELS = {', '_EXTRA_MODELS = {\n    "MiniMaxM3MTP": ("vllm.models.minimax_m3", '
                                '"MiniMaxM3MTP"),\n}\n\n_VLLM_MODELS = {')
    report, files = _run(tmp_path, {"vllm/model_executor/models/registry.py": registry})
    norm = _at(report, NORM, "NPU911", "from flashinfer.norm import", files)
    assert norm["severity"] == "error" and "vllm-ascend" not in norm["message"]


# --- GC#20: DeepSeek V4.1, registered by vllm-ascend with its own classes


def test_deepseek_v41_attention_kernel_is_info_naming_the_fact(tmp_path):
    """GC#20: the plugin registers its own DeepseekV41ForCausalLM; vLLM's indexer K store kernel is
    reached only from vLLM's own model: info naming the fact and its source."""
    report, files = _run(tmp_path)
    store = _at(report, STORE, "NPU910", "@triton.jit", files)
    assert store["severity"] == "info", store
    assert "DeepseekV41ForCausalLM" in store["message"] and "0dcdd80d" in store["message"]


def test_deepseek_v41_engram_module_the_plugin_imports_stays_an_error(tmp_path):
    """Nearest true case (same folder, same shape): vLLM's Engram module, which vllm-ascend's own
    V4.1 imports (`_write_hash_cache_kernel`, `_engram_select_rows`): kept as an error."""
    report, files = _run(tmp_path)
    engram = _at(report, ENGRAM, "NPU910", "@triton.jit", files)
    assert engram["severity"] == "error" and "vllm-ascend" not in engram["message"]


def test_instance_of_a_dataclass_running_post_init_at_import_stays_an_error(tmp_path):
    """Nearest true case: a dataclass whose `__post_init__` launches the kernel; the generated
    `__init__` runs it when the module builds the instance at import: kept as an error."""
    states = SAVE_STATES.replace("from vllm.triton_utils import tl, triton\n",
                                 "from dataclasses import dataclass\n\nfrom vllm.triton_utils import tl, triton\n")
    states = states.replace("class SavePartialStatesKernel(KernelBase):", "@dataclass\nclass SavePartialStatesKernel(KernelBase):")
    states = states.replace("    def __call__(self, x):", "    def __post_init__(self):\n"
                            "        self.kernel[(1,)](None, 1)\n\n    def __call__(self, x):")
    report, files = _run(tmp_path, {STATES: states})
    kernel = _at(report, STATES, "NPU910", "@triton.jit", files)
    assert kernel["severity"] == "error" and "vllm-ascend" not in kernel["message"]
