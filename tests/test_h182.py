"""Helper modules only the vLLM models vllm-ascend replaces use, wave 34 (audit round 33 HC#19;
helper h182, issue #16; ascendmodels32.py, rules/vllm_ascend.toml `[closed_registries]`): each
false shape paired with the nearest true case that stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project
from .precision_helpers import VLLM_PLATFORM_INTERFACE as INTERFACE
from .precision_helpers import finding_at as _at

REGISTRY = '''_TEXT_GENERATION_MODELS = {
    "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
    "DeepseekV4ForCausalLM": ("vllm.models.deepseek_v4", "DeepseekV4ForCausalLM"),
}
'''

# HC#19: the attention backend registry names DeepSeek V4's sparse-MLA backend by a dotted string;
# the backend's metadata builder launches a Triton kernel; vLLM's own V4 attention asks for it.
BACKENDS = '''from enum import Enum


class AttentionBackendEnum(Enum):
    FLASH_ATTN = "vllm.v1.attention.backends.flash_attn.FlashAttentionBackend"
    FLASHMLA_SPARSE_DSV4 = (
        "vllm.models.deepseek_v4.sparse_mla.DeepseekV4FlashMLABackend"
    )
'''
SPARSE_MLA = '''from vllm.triton_utils import tl, triton


@triton.jit
def _build_topk_metadata_kernel(x_ptr, n: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, n), 0)


def build_topk_metadata(x):
    _build_topk_metadata_kernel[(1,)](x, x.numel())
    return x


class DeepseekV4SparseMLAMetadataBuilder:
    def build(self, x):
        return build_topk_metadata(x)


class DeepseekV4FlashMLABackend:
    @staticmethod
    def get_builder_cls():
        return DeepseekV4SparseMLAMetadataBuilder
'''
ATTENTION = '''from vllm.v1.attention.backends.registry import AttentionBackendEnum


class DeepseekV4Attention:
    def get_attn_backend(self):
        return AttentionBackendEnum.FLASHMLA_SPARSE_DSV4.value
'''
V4_MODEL = '''from vllm.models.deepseek_v4.attention import DeepseekV4Attention


class DeepseekV4ForCausalLM:
    def __init__(self):
        self.attn = DeepseekV4Attention()
'''
V4_INIT = '''from .model import DeepseekV4ForCausalLM

__all__ = ["DeepseekV4ForCausalLM"]
'''
SPARSE = "vllm/models/deepseek_v4/sparse_mla.py"


def _project(extra: dict | None = None) -> dict:
    files = {
        "vllm/platforms/interface.py": INTERFACE,
        "vllm/model_executor/models/registry.py": REGISTRY,
        "vllm/v1/attention/backends/registry.py": BACKENDS,
        "vllm/models/deepseek_v4/__init__.py": V4_INIT,
        "vllm/models/deepseek_v4/model.py": V4_MODEL,
        "vllm/models/deepseek_v4/attention.py": ATTENTION,
        SPARSE: SPARSE_MLA,
    }
    files.update(extra or {})
    return files


def _run(tmp_path, extra: dict | None = None) -> tuple:
    files = _project(extra)
    return migrate_json(write_project(tmp_path, files)), files


# --- HC#19: a sparse-MLA backend named only by the attention backend registry


def test_backend_named_only_by_the_attention_registry_is_info(tmp_path):
    """HC#19: the DeepSeek V4 sparse-MLA backend's metadata kernel; outside the replaced model's
    folder only the attention backend registry names the backend (a dotted string), and
    NPUPlatform.get_attn_backend_cls never resolves that registry: info naming the model fact."""
    report, files = _run(tmp_path)
    kernel = _at(report, SPARSE, "NPU910", "@triton.jit", files)
    assert kernel["severity"] == "info", kernel
    assert "vllm-ascend" in kernel["message"] and "DeepseekV4ForCausalLM" in kernel["message"]


def test_backend_named_by_a_selector_elsewhere_stays_an_error(tmp_path):
    """Nearest true case: the same dotted string in another library module (a selector of vLLM's own
    code, not the closed registry): reached on an Ascend host, kept as an error."""
    selector = '''from vllm.utils.import_utils import resolve_obj_by_qualname


def pick():
    return resolve_obj_by_qualname("vllm.models.deepseek_v4.sparse_mla.DeepseekV4FlashMLABackend")
'''
    report, files = _run(tmp_path, {"vllm/v1/attention/selector.py": selector})
    kernel = _at(report, SPARSE, "NPU910", "@triton.jit", files)
    assert kernel["severity"] == "error" and "vllm-ascend" not in kernel["message"]


def test_builder_a_kept_model_imports_stays_an_error(tmp_path):
    """Nearest true case: a model the plugin does not replace builds the backend's metadata
    builder itself (an import, not the registry's string): kept as an error."""
    other = '''from vllm.models.deepseek_v4.sparse_mla import DeepseekV4SparseMLAMetadataBuilder


class OtherForCausalLM:
    def __init__(self):
        self.builder = DeepseekV4SparseMLAMetadataBuilder()
'''
    report, files = _run(tmp_path, {"vllm/model_executor/models/other.py": other})
    kernel = _at(report, SPARSE, "NPU910", "@triton.jit", files)
    assert kernel["severity"] == "error" and "vllm-ascend" not in kernel["message"]


# --- HC#38: a module-level set of classes only tested for membership

V41_REGISTRY = REGISTRY.replace("}\n", '    "DeepseekV41ForCausalLM": ("vllm.models.deepseek_v41", "DeepseekV41ForCausalLM"),\n}\n', 1)
V41_COMPRESSOR = '''from vllm.triton_utils import tl, triton


@triton.jit
def _ring_slot_mapping_kernel(x_ptr, n: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, n), 0)


class CompressorMetadataBuilder:
    def build(self, x):
        _ring_slot_mapping_kernel[(1,)](x, x.numel())
        return x


class DeepseekCompressor:
    def get_builder_cls(self):
        return CompressorMetadataBuilder
'''
V41_MODEL = '''from vllm.models.deepseek_v41.compressor import DeepseekCompressor


class DeepseekV41ForCausalLM:
    def __init__(self):
        self.compressor = DeepseekCompressor()
'''
V41_INIT = '''from .model import DeepseekV41ForCausalLM

__all__ = ["DeepseekV41ForCausalLM"]
'''
GRAPHS = '''from vllm.models.deepseek_v41.compressor import CompressorMetadataBuilder

_RECORDABLE_BUILDERS = frozenset(
    {
        CompressorMetadataBuilder,
    }
)


def recordable(builder):
    return type(builder) in _RECORDABLE_BUILDERS
'''
V41_COMP = "vllm/models/deepseek_v41/compressor.py"
GRAPHS_PATH = "vllm/models/deepseek_v41/nvidia/runtime/metadata_graphs.py"


def _v41(tmp_path, graphs: str = GRAPHS) -> tuple:
    return _run(tmp_path, {
        "vllm/model_executor/models/registry.py": V41_REGISTRY,
        "vllm/models/deepseek_v41/__init__.py": V41_INIT,
        "vllm/models/deepseek_v41/model.py": V41_MODEL,
        V41_COMP: V41_COMPRESSOR,
        GRAPHS_PATH: graphs,
    })


def test_builder_named_only_in_a_membership_set_is_info(tmp_path):
    """HC#38: the compressor metadata builder of vLLM's own DeepSeek V4.1 (replaced by the plugin);
    the only other place naming it is a module-level `frozenset({...})` of the decode-graph runtime,
    only tested with `in`: building the set builds no builder. Info naming the fact."""
    report, files = _v41(tmp_path)
    kernel = _at(report, V41_COMP, "NPU910", "@triton.jit", files)
    assert kernel["severity"] == "info", kernel
    assert "vllm-ascend" in kernel["message"] and "DeepseekV41ForCausalLM" in kernel["message"]


def test_builder_set_iterated_and_built_stays_an_error(tmp_path):
    """Nearest true case: the same set iterated and each class built at import: kept as an error."""
    graphs = GRAPHS + "\n\nBUILT = [cls() for cls in _RECORDABLE_BUILDERS]\n"
    report, files = _v41(tmp_path, graphs)
    kernel = _at(report, V41_COMP, "NPU910", "@triton.jit", files)
    assert kernel["severity"] == "error" and "vllm-ascend" not in kernel["message"]


def test_builder_set_imported_by_another_module_stays_an_error(tmp_path):
    """Nearest true case: a module outside the folder imports the set (it may build from it): kept."""
    user = '''from vllm.models.deepseek_v41.nvidia.runtime.metadata_graphs import _RECORDABLE_BUILDERS


def build_all():
    return [cls() for cls in _RECORDABLE_BUILDERS]
'''
    report, files = _run(tmp_path, {
        "vllm/model_executor/models/registry.py": V41_REGISTRY,
        "vllm/models/deepseek_v41/__init__.py": V41_INIT,
        "vllm/models/deepseek_v41/model.py": V41_MODEL,
        V41_COMP: V41_COMPRESSOR,
        GRAPHS_PATH: GRAPHS,
        "vllm/v1/worker/graphs.py": user,
    })
    kernel = _at(report, V41_COMP, "NPU910", "@triton.jit", files)
    assert kernel["severity"] == "error" and "vllm-ascend" not in kernel["message"]
