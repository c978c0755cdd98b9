"""The torch_npu API-surface table: its loader, its content, and the builder's parsing."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from npu_migrate import npu_api

REPO = Path(__file__).resolve().parent.parent
BUILDER_PATH = REPO / "scripts" / "build_npu_api_table.py"


@pytest.fixture(scope="module")
def builder():
    spec = importlib.util.spec_from_file_location("build_npu_api_table", BUILDER_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


# ----------------------------------------------------------------------------- loader


def test_table_loads_and_names_its_sources():
    table = npu_api.load_table()
    assert table["names"]
    versions = npu_api.versions()
    assert "2.7.1" in versions
    assert versions == sorted(versions, key=lambda v: tuple(int(x) for x in v.split(".")))
    for v in table["versions"]:
        assert v["wheel"].startswith(f"torch_npu-{v['version']}-") and v["wheel"].endswith(".whl")
        assert len(v["sha256"]) == 64


def test_every_entry_is_well_formed():
    known = set(npu_api.versions())
    for name, entry in npu_api.load_table()["names"].items():
        assert name.startswith("torch_npu"), name
        assert entry["kind"], name
        assert entry["versions"] and set(entry["versions"]) <= known, name
        for p in entry.get("params", ()):
            assert p["name"].isidentifier(), (name, p)
            assert set(p.get("versions", entry["versions"])) <= set(entry["versions"]), (name, p)


def test_torch_npu_prefix_is_the_same_as_torch_npu_npu():
    assert npu_api.canonical("torch.npu.synchronize") == "torch_npu.npu.synchronize"
    assert npu_api.canonical("torch.npu") == "torch_npu.npu"
    assert npu_api.canonical("torch.npux.foo") == "torch.npux.foo"
    assert npu_api.canonical("torch_npu.npu_rms_norm") == "torch_npu.npu_rms_norm"
    assert npu_api.has_name("torch.npu.synchronize")
    assert npu_api.has_name("torch_npu.npu.synchronize")
    assert npu_api.keywords("torch.npu.synchronize") == npu_api.keywords("torch_npu.npu.synchronize")


def test_made_up_names_are_absent():
    assert not npu_api.has_name("torch.npu.frobnicate_the_device")
    assert not npu_api.has_name("torch_npu.npu_flash_attn_func")
    assert not npu_api.has_name("torch.npu.nvtx.range_push")
    assert not npu_api.has_name("torch.cuda.synchronize")  # only torch_npu names are stored
    assert npu_api.keywords("torch_npu.npu_made_up_op") is None
    assert npu_api.lookup("torch_npu.npu_made_up_op") is None


def test_keywords_unknown_for_names_without_signature():
    assert npu_api.has_name("torch.npu.matmul.allow_hf32")
    assert npu_api.keywords("torch.npu.matmul.allow_hf32") is None


# ---------------------------------------------------------------------------- content


TORCH_NPU_DOC_NAMES = [
    # torch_npu.md section 1.2
    "is_available", "device_count", "set_device", "current_device", "device", "device_of",
    "synchronize", "init", "is_initialized", "can_device_access_peer", "get_device_name",
    "get_device_properties", "get_device_capability", "utilization", "mem_get_info",
    "Stream", "Event", "SyncLaunchStream", "stream", "StreamContext", "set_stream",
    "current_stream", "default_stream", "manual_seed", "manual_seed_all", "seed", "seed_all",
    "initial_seed", "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
    "empty_cache", "memory_stats", "memory_summary", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats",
    "set_per_process_memory_fraction", "NPUPluggableAllocator", "change_current_allocator",
    "MemPool", "use_mem_pool", "ipc_collect", "NPUGraph", "graph", "graph_pool_handle",
    "make_graphed_callables", "is_current_stream_capturing", "is_bf16_supported",
    "get_amp_supported_dtype", "set_compile_mode", "set_option", "set_device_limit",
    "stop_device", "restart_device", "matmul", "conv", "mstx",
]


@pytest.mark.parametrize("name", TORCH_NPU_DOC_NAMES)
def test_torch_npu_module_names(name):
    assert npu_api.has_name(f"torch.npu.{name}", "2.7.1"), name


def test_names_new_after_2_7_1():
    newest = npu_api.versions()[-1]
    if newest == "2.7.1":
        pytest.skip("table built from 2.7.1 only")
    for name in ("torch.npu.ExternalStream", "torch.npu.host_empty_cache",
                 "torch.npu.set_deterministic_level", "torch.npu.get_per_process_memory_fraction"):
        assert npu_api.has_name(name, newest), name
        assert not npu_api.has_name(name, "2.7.1"), name


def test_stream_event_signatures():
    assert npu_api.keywords("torch.npu.Stream") >= {"device", "priority"}
    assert npu_api.keywords("torch.npu.Event") == {"enable_timing", "blocking", "interprocess"}
    assert npu_api.has_name("torch.npu.Stream.synchronize")
    assert npu_api.has_name("torch.npu.Event.elapsed_time")
    assert npu_api.keywords("torch.npu.get_device_capability") == {"device"}


def test_hf32_flags():
    for name in ("torch.npu.matmul.allow_hf32", "torch.npu.conv.allow_hf32",
                 "torch_npu.npu.aclnn.allow_hf32"):
        assert npu_api.has_name(name, "2.7.1"), name
        assert npu_api.lookup(name)["kind"] == "attribute"
    assert npu_api.lookup("torch.npu.matmul")["kind"] == "object"
    assert not npu_api.has_name("torch.npu.matmul.allow_tf32")


def test_typed_tensor_classes_are_listed_without_python_definition():
    for name in ("FloatTensor", "HalfTensor", "BFloat16Tensor", "LongTensor", "BoolTensor"):
        entry = npu_api.lookup(f"torch.npu.{name}")
        assert entry is not None and entry.get("in_all"), name
        assert entry["kind"] == "unresolved"  # created by the C extension at import time


FUSION_ATTENTION_KEYWORDS = {
    "query", "key", "value", "head_num", "input_layout", "pse", "padding_mask", "atten_mask",
    "scale", "keep_prob", "pre_tockens", "next_tockens", "inner_precise", "prefix",
    "actual_seq_qlen", "actual_seq_kvlen", "sparse_mode", "gen_mask_parallel", "sync",
}


def _params(name):
    return {p["name"]: p for p in npu_api.lookup(name)["params"]}


def test_npu_fusion_attention_schema():
    entry = npu_api.lookup("torch_npu.npu_fusion_attention")
    assert entry["kind"] == "op" and entry.get("in_all")
    assert npu_api.keywords("torch_npu.npu_fusion_attention", "2.7.1") >= FUSION_ATTENTION_KEYWORDS
    params = _params("torch_npu.npu_fusion_attention")
    assert [p["name"] for p in entry["params"][:5]] == ["query", "key", "value", "head_num", "input_layout"]
    assert "default" not in params["head_num"] and "default" not in params["input_layout"]
    assert params["scale"]["default"] == "1."  # not 1/sqrt(D)
    assert params["keep_prob"]["default"] == "1."
    assert params["pre_tockens"]["default"] == params["next_tockens"]["default"] == "2147483647"
    assert params["sparse_mode"]["default"] == "0"
    assert params["actual_seq_qlen"]["type"] == "int[]?"  # host list, not a tensor
    assert params["atten_mask"]["type"] == "Tensor?"
    assert "pre_tokens" not in params  # the op spells it "tockens"


def test_npu_fusion_attention_v3_if_present():
    if not npu_api.has_name("torch_npu.npu_fusion_attention_v3"):
        pytest.skip("no scanned wheel has npu_fusion_attention_v3")
    params = _params("torch_npu.npu_fusion_attention_v3")
    assert params["actual_seq_qlen"]["type"] == "Tensor?"
    assert set(params) >= FUSION_ATTENTION_KEYWORDS


def test_inference_attention_ops():
    ifa = _params("torch_npu.npu_incre_flash_attention")
    assert ifa["num_heads"]["default"] == "1"
    assert ifa["scale_value"]["default"] == "1.0"
    assert ifa["input_layout"]["default"] == '"BSH"'
    assert ifa["atten_mask"]["kind"] == "keyword_only"
    assert {"actual_seq_lengths", "block_table", "block_size", "num_key_value_heads"} <= set(ifa)

    fia = _params("torch_npu.npu_fused_infer_attention_score")
    assert {"scale", "num_heads", "input_layout", "sparse_mode", "softmax_lse_flag",
            "actual_seq_lengths", "actual_seq_lengths_kv", "pre_tokens", "next_tokens"} <= set(fia)
    assert fia["scale"]["default"] == "1.0"
    assert npu_api.lookup("torch_npu.npu_fused_infer_attention_score")["returns"] == "(Tensor, Tensor)"

    pfa = _params("torch_npu.npu_prompt_flash_attention")
    assert pfa["next_tokens"]["default"] == "0"


@pytest.mark.parametrize("op", ["npu_rms_norm", "npu_rotary_mul", "npu_swiglu",
                                "npu_format_cast", "npu_prompt_flash_attention"])
def test_common_ops_present(op):
    assert npu_api.has_name(f"torch_npu.{op}", "2.7.1")
    assert npu_api.keywords(f"torch_npu.{op}")


def test_amp():
    for name in ("autocast", "GradScaler", "custom_fwd", "custom_bwd"):
        assert npu_api.has_name(f"torch_npu.npu.amp.{name}", "2.7.1"), name
    assert npu_api.keywords("torch_npu.npu.amp.GradScaler") == {
        "init_scale", "growth_factor", "backoff_factor", "growth_interval", "dynamic", "enabled"}
    assert "device" not in npu_api.keywords("torch.npu.amp.GradScaler")
    assert npu_api.has_name("torch.npu.amp.GradScaler")


def test_mstx():
    for name in ("mark", "range_start", "range_end", "mstx_range"):
        assert npu_api.has_name(f"torch_npu.npu.mstx.{name}", "2.7.1"), name
    assert npu_api.keywords("torch_npu.npu.mstx.mark") == {"message", "stream", "domain"}
    newest = npu_api.versions()[-1]
    if newest != "2.7.1":
        for name in ("range_push", "range_pop"):  # added after 2.7.1
            assert npu_api.has_name(f"torch_npu.npu.mstx.{name}", newest), name
            assert not npu_api.has_name(f"torch_npu.npu.mstx.{name}", "2.7.1"), name


def test_optim_and_contrib():
    for name in ("NpuFusedSGD", "NpuFusedAdadelta", "NpuFusedLamb", "NpuFusedAdam", "NpuFusedAdamW",
                 "NpuFusedAdamP", "NpuFusedBertAdam", "NpuFusedRMSprop", "NpuFusedRMSpropTF"):
        assert npu_api.has_name(f"torch_npu.optim.{name}", "2.7.1"), name
    assert npu_api.keywords("torch_npu.optim.NpuFusedAdamW") == {
        "params", "lr", "betas", "eps", "weight_decay", "amsgrad"}
    assert _params("torch_npu.optim.NpuFusedAdamW")["betas"]["default"] == "(0.9, 0.999)"
    assert npu_api.has_name("torch_npu.contrib.transfer_to_npu")
    assert npu_api.has_name("torch_npu.contrib.ROIAlign")
    assert npu_api.has_name("torch_npu.contrib.function.npu_iou")


# ------------------------------------------------------------------ builder on a fake wheel


FAKE_FILES_OLD = {
    "torch_npu/__init__.py": """
        __all__ = ["erase_stream"]
        import torch
        import torch_npu.npu
        from torch_npu.npu.utils import _erase_stream as erase_stream
        from torch_npu.utils._error_code import ErrCode
        ORG = "1"
    """,
    "torch_npu/npu/__init__.py": """
        __all__ = ["synchronize", "Stream", "matmul", "FloatTensor", "mstx", "device_count"]
        from typing import Optional
        from .utils import synchronize
        from .streams import Stream
        from .mstx import mstx
        from .npu_config import *  # noqa
        matmul = npu_config._allowHF32Matmul()

        def device_count() -> int:
            return 1
    """,
    "torch_npu/npu/utils.py": """
        def synchronize(device=None):
            pass

        def _erase_stream(tensor, stream):
            pass
    """,
    "torch_npu/npu/streams.py": """
        import torch_npu
        class Stream(torch_npu._C._NPUStreamBase):
            def __new__(cls, device=None, priority=0, **kwargs):
                pass
            def wait_stream(self, stream):
                pass
            @property
            def device_index(self):
                return 0
    """,
    "torch_npu/npu/mstx.py": """
        __all__ = ["mstx"]
        class mstx:
            @staticmethod
            def mark(message: str, stream=None, domain: str = 'default'):
                pass
    """,
    "torch_npu/npu/npu_config.py": """
        __all__ = ["set_option"]
        def set_option(option):
            pass
        class _allowHF32Matmul:
            @classmethod
            def __getattr__(cls, name):
                if name == "allow_hf32":
                    return True
                return None
    """,
    "torch_npu/utils/exposed_api.py": """
        public_npu_functions = ['npu_fusion_attention']
    """,
    "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml": """
        backend: NPU
        custom:
        - func: npu_fusion_attention(Tensor query, Tensor key, Tensor value, int head_num, str input_layout, Tensor? atten_mask=None, float scale=1., int[]? actual_seq_qlen=None) -> (Tensor, Tensor)
          impl_ns: op_api
        - exposed: true
          func: npu_format_cast.Tensor(Tensor self, Tensor dst) -> Tensor
        - func: npu_format_cast(Tensor self, int acl_format) -> Tensor
        - func: npu_incre_flash_attention(Tensor query, Tensor key, Tensor value, *, Tensor? atten_mask=None, int num_heads=1, float scale_value=1.0, str input_layout="BSH") -> Tensor
        supported:
        - func: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
    """,
}


def _fake_new_files():
    files = dict(FAKE_FILES_OLD)
    files["torch_npu/npu/mstx.py"] = """
        __all__ = ["mstx"]
        class mstx:
            @staticmethod
            def mark(message: str, stream=None, domain: str = 'default'):
                pass
            @staticmethod
            def range_push(message: str, stream=None, domain: str = 'default') -> int:
                pass
    """
    files["torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml"] = FAKE_FILES_OLD[
        "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml"].replace(
        "int[]? actual_seq_qlen=None)", "int[]? actual_seq_qlen=None, Tensor? sink=None)")
    return files


def _make_wheel(directory: Path, version: str, files: dict[str, str]) -> Path:
    path = directory / f"torch_npu-{version}-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, textwrap.dedent(text).lstrip("\n"))
        zf.writestr("torch_npu/lib/libtorch_npu.so", b"\x7fELF not really")
    return path


def test_builder_on_synthetic_wheels(builder, tmp_path):
    old = builder.WheelSource.from_path(_make_wheel(tmp_path, "2.7.1", FAKE_FILES_OLD))
    new = builder.WheelSource.from_path(_make_wheel(tmp_path, "2.14.0", _fake_new_files()))
    assert (old.version, new.version) == ("2.7.1", "2.14.0")
    assert "torch_npu/lib/libtorch_npu.so" not in old.files

    table = builder.build_table([new, old])  # order of the arguments does not matter
    assert [v["version"] for v in table["versions"]] == ["2.7.1", "2.14.0"]
    names = table["names"]
    both = ["2.7.1", "2.14.0"]

    assert names["torch_npu.npu.synchronize"] == {
        "kind": "function", "versions": both, "in_all": True, "defined_in": "torch_npu.npu.utils",
        "params": [{"name": "device", "default": "None"}]}
    assert names["torch_npu.npu.device_count"]["params"] == []
    stream = names["torch_npu.npu.Stream"]
    assert stream["kind"] == "class" and stream["bases"] == ["torch_npu._C._NPUStreamBase"]
    assert [p["name"] for p in stream["params"]] == ["device", "priority", "kwargs"]
    assert names["torch_npu.npu.Stream.wait_stream"]["params"] == [{"name": "stream"}]
    assert names["torch_npu.npu.Stream.device_index"]["kind"] == "property"
    assert names["torch_npu.npu.matmul"]["kind"] == "object"
    assert names["torch_npu.npu.matmul.allow_hf32"]["kind"] == "attribute"
    assert names["torch_npu.npu.FloatTensor"]["kind"] == "unresolved"
    assert names["torch_npu.npu.set_option"]["versions"] == both  # via the star-import
    assert names["torch_npu.npu.mstx.mark"]["kind"] == "staticmethod"
    assert names["torch_npu.npu.mstx.range_push"]["versions"] == ["2.14.0"]
    assert names["torch_npu.erase_stream"]["params"] == [{"name": "tensor"}, {"name": "stream"}]
    # third-party imports, private helpers and plain values are not API
    for absent in ("torch_npu.npu.Optional", "torch_npu.ErrCode", "torch_npu.ORG", "torch_npu.torch",
                   "torch_npu.add"):
        assert absent not in names, absent

    fa = names["torch_npu.npu_fusion_attention"]
    assert fa["kind"] == "op" and fa["in_all"] and fa["versions"] == both
    assert fa["returns"] == "(Tensor, Tensor)"
    assert fa["params"][:2] == [{"name": "query", "type": "Tensor"}, {"name": "key", "type": "Tensor"}]
    by_name = {p["name"]: p for p in fa["params"]}
    assert by_name["scale"] == {"name": "scale", "type": "float", "default": "1."}
    assert by_name["sink"]["versions"] == ["2.14.0"]
    assert "versions" not in by_name["atten_mask"]
    cast = names["torch_npu.npu_format_cast"]
    assert cast["overloads"] == ["Tensor"] and [p["name"] for p in cast["params"]] == ["self", "acl_format"]
    ifa = {p["name"]: p for p in names["torch_npu.npu_incre_flash_attention"]["params"]}
    assert ifa["num_heads"] == {"name": "num_heads", "kind": "keyword_only", "type": "int", "default": "1"}
    assert ifa["input_layout"]["default"] == '"BSH"'


def test_builder_output_is_deterministic_json(builder, tmp_path):
    wheel = builder.WheelSource.from_path(_make_wheel(tmp_path, "2.7.1", FAKE_FILES_OLD))
    out1, out2 = tmp_path / "a.json", tmp_path / "b.json"
    for out in (out1, out2):
        builder.main([str(tmp_path / wheel.filename), "-o", str(out)])
    assert out1.read_bytes() == out2.read_bytes()
    data = json.loads(out1.read_text())
    assert list(data["names"]) == sorted(data["names"])
    assert data["versions"][0]["sha256"] == wheel.sha256


def test_schema_parser(builder):
    parsed = builder.parse_schema(
        'npu_x.out(Tensor self, int[2] size, *, str layout="B,S", float? eps=1e-5, Tensor(a!) out) -> Tensor(a!)')
    assert parsed["name"] == "npu_x" and parsed["overload"] == "out"
    assert parsed["params"] == [
        {"name": "self", "type": "Tensor"},
        {"name": "size", "type": "int[2]"},
        {"name": "layout", "kind": "keyword_only", "type": "str", "default": '"B,S"'},
        {"name": "eps", "kind": "keyword_only", "type": "float?", "default": "1e-5"},
        {"name": "out", "kind": "keyword_only", "type": "Tensor(a!)"},
    ]
    assert parsed["returns"] == "Tensor(a!)"
    assert builder.parse_schema("not a schema") is None


def test_committed_table_matches_builder_format(builder):
    text = (REPO / "rules" / "torch_npu_api.json").read_text(encoding="utf-8")
    assert text == builder.dumps(json.loads(text)) + "\n"
