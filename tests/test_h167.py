"""Helper h167: round 32's opt-in rows (issue #16, policy P1: code an NPU host reaches only by a
user's explicit choice made in another module is info naming the choice and where its default is
set; never an error, never dropped). Each false case is paired with its nearest true case that
stays reported.

- GB#31 (optreads32.py, read by optconfig29.py): `self.use_mega_moe = getattr(kernel_config,
  "moe_backend", "auto") == "deep_gemm_mega_moe"`, the experts built only under it; five other
  models store their own `self.use_mega_moe`. Nearest true: a fallback other than the default, an
  object's attribute stored from another module.
"""

from __future__ import annotations

from tests.precision_helpers import findings_at, migrate_json, write_project

CHOSEN = "reached on an NPU host only when"


def _all_info(found: dict) -> bool:
    return bool(found) and all(f["severity"] == "info" and CHOSEN in f["message"] for f in found.values())


def _all_error(found: dict) -> bool:
    return bool(found) and all(f["severity"] == "error" for f in found.values())


# ----------------------------------------------------------------------------- GB#31: getattr of a config field
def _moe_files(fallback: str = '"auto"', other_store: str = "self.use_mega_moe = False") -> dict:
    return {
        "proj/__init__.py": "",
        "proj/config/__init__.py": "",
        "proj/config/kernel.py": '''
            from dataclasses import dataclass


            @dataclass
            class KernelConfig:
                moe_backend: str = "auto"
        ''',
        "proj/models/__init__.py": "",
        "proj/models/mega_moe.py": '''
            import torch


            class MegaMoE(torch.nn.Module):
                def get_buffer(self):
                    if torch.cuda.is_current_stream_capturing():
                        return None
                    return self.buffer
        ''',
        "proj/models/step.py": f'''
            import torch


            class StepMoE(torch.nn.Module):
                def __init__(self, vllm_config):
                    super().__init__()
                    kernel_config = getattr(vllm_config, "kernel_config", None)
                    self.use_mega_moe = (
                        getattr(kernel_config, "moe_backend", {fallback}) == "deep_gemm_mega_moe"
                    )
                    if self.use_mega_moe:
                        from proj.models.mega_moe import MegaMoE

                        self.experts = MegaMoE()
                    else:
                        self.experts = torch.nn.Linear(4, 4)
        ''',
        "proj/models/other.py": f'''
            import torch


            class OtherMoE(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    {other_store}
        ''',
    }


def _mega(report: dict) -> dict:
    return findings_at(report, "proj/models/mega_moe.py", "NPU202")


def test_experts_built_only_for_a_getattr_read_backend_are_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _moe_files(), dedent=True))
    found = _mega(report)
    assert _all_info(found), found
    message = next(iter(found.values()))["message"]
    assert "deep_gemm_mega_moe" in message and "`KernelConfig.moe_backend` defaults to 'auto'" in message, message


def test_getattr_fallback_choosing_the_backend_keeps_the_error(tmp_path):
    # (nearest true case: the fallback is the backend itself, taken where the config has no such field)
    report = migrate_json(write_project(tmp_path, _moe_files(fallback='"deep_gemm_mega_moe"'), dedent=True))
    assert _all_error(_mega(report)), _mega(report)


def test_getattr_computed_fallback_keeps_the_error(tmp_path):
    report = migrate_json(write_project(tmp_path, _moe_files(fallback="pick_backend()"), dedent=True))
    assert _all_error(_mega(report)), _mega(report)


def test_flag_an_object_gets_from_another_module_keeps_the_error(tmp_path):
    # (nearest true case: another module sets the flag on some object, maybe this layer)
    files = _moe_files(other_store="layer = torch.nn.Linear(2, 2)\n                    layer.use_mega_moe = True")
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    assert _all_error(_mega(report)), _mega(report)


def test_getattr_field_reads_only_a_named_field_of_another_object():
    import ast

    from npu_migrate.optreads32 import getattr_field

    fields = {"moe_backend": []}
    call = ast.parse('getattr(cfg, "moe_backend", "auto")').body[0].value
    read, fallback = getattr_field(call, fields)
    assert ast.unparse(read) == "cfg.moe_backend" and fallback.value == "auto"
    assert getattr_field(ast.parse('getattr(self, "moe_backend", "auto")').body[0].value, fields) is None
    assert getattr_field(ast.parse('getattr(cfg, name, "auto")').body[0].value, fields) is None
    assert getattr_field(ast.parse('getattr(cfg, "other", "auto")').body[0].value, fields) is None


# ----------------------------------------------------------------------------- GB#17: a connector chosen by name
_FACTORY = """\
import importlib


class ConnectorFactory:
    _registry = {}

    @classmethod
    def register_connector(cls, name, module_path, class_name):
        cls._registry[name] = lambda: getattr(importlib.import_module(module_path), class_name)


ConnectorFactory.register_connector("FsConnector", "pkg.connectors.fs", "FsConnector")
"""

_FS = """\
from pkg.connectors.fs_helper import gather


class FsScheduler:
    def __init__(self, connector: {annotation}):
        self.connector = connector


class FsConnector:
    def save(self, x):
        return gather(x)
"""

_FS_HELPER = """\
import triton
import triton.language as tl


@triton.jit
def _gather_kernel(x_ptr):
    tl.store(x_ptr, tl.load(x_ptr))


def gather(x):
    _gather_kernel[(1,)](x)
    return x
"""


def _fs_project(tmp_path, config: str = 'connector: "FsConnector | None" = None') -> dict:
    files = {"pkg/__init__.py": "", "pkg/connectors/__init__.py": "", "pkg/factory.py": _FACTORY,
             "pkg/connectors/fs.py": _FS.format(annotation='"FsConnector"'), "pkg/connectors/fs_helper.py": _FS_HELPER,
             "pkg/config.py": f"from dataclasses import dataclass\n\n\n@dataclass\nclass Config:\n    {config}\n"}
    return migrate_json(write_project(tmp_path, files))


def test_connector_named_in_a_string_annotation_stays_chosen_by_name(tmp_path):
    found = findings_at(_fs_project(tmp_path), "pkg/connectors/fs_helper.py", "NPU910")
    assert found and all(f["severity"] == "info" for f in found.values()), found
    message = next(iter(found.values()))["message"]
    assert "reached on an NPU host only when `FsConnector` is chosen by name" in message, message


def test_connector_name_as_a_value_keeps_the_error(tmp_path):
    # (nearest true case: the name is a setting's default in another module: chosen without the user)
    found = findings_at(_fs_project(tmp_path, config='connector: str = "FsConnector"'), "pkg/connectors/fs_helper.py",
                        "NPU910")
    assert _all_error(found), found


def test_annotation_string_reads_annotations_only():
    import ast

    from npu_migrate import astcache
    from npu_migrate.optreads32 import annotation_string

    tree = ast.parse('def f(a: "A", b: list["B"] = "C") -> "D":\n    x: "E" = "F"\n    g("G")\n')
    parents = astcache.parents(tree)
    strings = {n.value: n for n in ast.walk(tree) if isinstance(n, ast.Constant)}
    assert {s for s, n in strings.items() if annotation_string(n, parents)} == {"A", "B", "D", "E"}


# ----------------------------------------------------------------------------- GC#2: one name, two registries
_ENGINES = """\
import importlib


class _Factory:
    _registry: dict = {}

    @classmethod
    def register_engine(cls, name, module_path, class_name):
        cls._registry[name] = lambda: getattr(importlib.import_module(module_path), class_name)


class EngineFactory(_Factory):
    _registry: dict = {}


class TrainerFactory(_Factory):
    _registry: dict = {}


EngineFactory.register_engine("nccl", "pkg.transfer.nccl_engine", "NcclEngine")
EngineFactory.register_engine("ipc", "pkg.transfer.ipc_engine", "IpcEngine")
TrainerFactory.register_engine("nccl", "pkg.transfer.nccl_engine", "NcclTrainer")
TrainerFactory.register_engine("ipc", "pkg.transfer.ipc_engine", "IpcTrainer")
"""

_TRANSFER_CONFIG = """\
from dataclasses import dataclass
from typing import Literal


@dataclass
class TransferConfig:
    backend: Literal["nccl", "ipc"] | str = {default}
"""

_ENGINE = """\
from typing import ClassVar

import torch


class {cls}Engine:
    backend: ClassVar[str] = "{name}"

    def receive(self):
        return torch.cuda.get_device_properties(0).uuid


class {cls}Trainer:
    def send(self):
        return torch.cuda.get_device_properties(0).uuid
"""


def _transfer_project(tmp_path, default: str = '"nccl"') -> dict:
    files = {"pkg/__init__.py": "", "pkg/config/__init__.py": "",
             "pkg/config/transfer.py": _TRANSFER_CONFIG.format(default=default),
             "pkg/transfer/__init__.py": "", "pkg/transfer/factory.py": _ENGINES,
             "pkg/transfer/ipc_engine.py": _ENGINE.format(cls="Ipc", name="ipc"),
             "pkg/transfer/nccl_engine.py": _ENGINE.format(cls="Nccl", name="nccl")}
    return migrate_json(write_project(tmp_path, files))


def _uuid(report: dict, module: str) -> list:
    return [f for f in report["findings"] if f["path"] == f"pkg/transfer/{module}.py" and not f["fixable"]
            and "uuid" in f["message"]]


def test_engine_two_registries_name_alike_is_chosen_by_name(tmp_path):
    found = _uuid(_transfer_project(tmp_path), "ipc_engine")
    assert found and all(f["severity"] == "info" for f in found), found
    assert "reached on an NPU host only when `ipc` is chosen by name" in found[0]["message"], found


def test_engine_of_the_default_backend_keeps_the_error(tmp_path):
    # (nearest true case: "nccl", the configuration's default, registered in the same two registries)
    report = _transfer_project(tmp_path)
    found = _uuid(report, "nccl_engine")
    assert found and any(f["severity"] == "error" for f in found), found


def test_engine_chosen_by_default_keeps_the_error(tmp_path):
    report = _transfer_project(tmp_path, default='"ipc"')
    found = _uuid(report, "ipc_engine")
    assert found and any(f["severity"] == "error" for f in found), found


# ----------------------------------------------------------------------------- GB#30: an environment switch
_ENVS = """\
import os

environment_variables = {{
    "PKG_COMPUTE_NANS": lambda: bool(
        int(os.getenv("PKG_COMPUTE_NANS", "0")) or int(os.getenv("PKG_RAISE_ON_NANS", {raise_default}))
    ),
}}


def __getattr__(name):
    return environment_variables[name]()
"""

_NANS = """\
from vllm.triton_utils import tl, triton


@triton.jit
def _num_nans_kernel(x_ptr, out_ptr):
    tl.store(out_ptr, tl.sum(tl.load(x_ptr)))


def get_num_nans(logits):
    out = logits.new_empty(1)
    _num_nans_kernel[(1,)](logits, out)
    return out
"""

_SAMPLER = """\
from pkg import envs
from pkg.metrics import get_num_nans


class Sampler:
    def __init__(self):
        self.compute_nans = envs.PKG_COMPUTE_NANS  # False by default.

    def __call__(self, logits):
        num_nans = get_num_nans(logits) if self.compute_nans else None
        return logits, num_nans
"""

_REJECTION = """\
from pkg.metrics import get_num_nans
from pkg.sampler import Sampler


class RejectionSampler:
    def __init__(self):
        self.sampler = Sampler()

    def __call__(self, logits):
        return get_num_nans(logits) if self.sampler.compute_nans else None
"""


def _nans_project(tmp_path, raise_default: str = '"0"', extra: dict | None = None) -> dict:
    files = {"pkg/__init__.py": "", "pkg/envs.py": _ENVS.format(raise_default=raise_default),
             "pkg/metrics.py": _NANS, "pkg/sampler.py": _SAMPLER, "pkg/rejection.py": _REJECTION}
    files.update(extra or {})
    return migrate_json(write_project(tmp_path, files))


def test_kernel_only_an_environment_switch_reaches_is_info(tmp_path):
    found = findings_at(_nans_project(tmp_path), "pkg/metrics.py", "NPU910")
    assert _all_info(found), found
    message = " ".join(f["message"] for f in found.values())
    assert "`PKG_COMPUTE_NANS` is off unless it or `PKG_RAISE_ON_NANS` is set (pkg/envs.py:4)" in message, message


def test_switch_on_by_default_keeps_the_error(tmp_path):
    # (nearest true case: the second variable turns the switch on by default)
    found = findings_at(_nans_project(tmp_path, raise_default='"1"'), "pkg/metrics.py", "NPU910")
    assert _all_error(found), found


def test_switch_the_library_sets_keeps_the_error(tmp_path):
    # (nearest true case: the library turns it on itself)
    extra = {"pkg/startup.py": 'import os\n\nos.environ["PKG_RAISE_ON_NANS"] = "1"\n'}
    found = findings_at(_nans_project(tmp_path, extra=extra), "pkg/metrics.py", "NPU910")
    assert _all_error(found), found


def test_flag_another_library_module_sets_on_the_object_keeps_the_error(tmp_path):
    # (nearest true case: `sampler.compute_nans = True` in library code: the attribute is not the class's alone)
    extra = {"pkg/debug.py": "from pkg.sampler import Sampler\n\n\ndef debug_sampler():\n"
                             "    sampler = Sampler()\n    sampler.compute_nans = True\n    return sampler\n"}
    found = findings_at(_nans_project(tmp_path, extra=extra), "pkg/metrics.py", "NPU910")
    assert _all_error(found), found


# ----------------------------------------------------------------------------- GB#39: getattr(cfg, "F", False) if cfg else False
_ROLLOUT_BASE = """\
from dataclasses import dataclass


@dataclass
class RolloutConfig:
    use_graph_capture: bool = False
"""

_ROLLOUT = """\
import torch


class Rollout:
    def __init__(self, engine, cfg=None):
        self.engine = engine
        self.use_graph_capture = {store}

    def generate(self, batch):
        if self.use_graph_capture:
            return self._generate_graph(batch)
        return self.engine(batch)

    def _generate_graph(self, batch):
        if batch.device.type != "cuda":
            raise RuntimeError("graph capture needs CUDA")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self.engine(batch)
        graph.replay()
        return out
"""


def _rollout_project(tmp_path, store: str = "getattr(cfg, 'use_graph_capture', False) if cfg else False") -> dict:
    files = {"pkg/__init__.py": "", "pkg/rollout/__init__.py": "", "pkg/rollout/base.py": _ROLLOUT_BASE,
             "pkg/rollout/engine.py": _ROLLOUT.format(store=store)}
    return migrate_json(write_project(tmp_path, files))


def _rollout_reports(report: dict) -> list:
    return [f for f in report["findings"] if f["path"] == "pkg/rollout/engine.py" and not f["fixable"]]


def test_graph_path_behind_a_getattr_read_flag_is_info(tmp_path):
    found = _rollout_reports(_rollout_project(tmp_path))
    assert found and all(f["severity"] == "info" for f in found), found
    assert all("`self.use_graph_capture` is chosen (`RolloutConfig.use_graph_capture` defaults to `False`"
               in f["message"] for f in found), found


def test_graph_path_behind_a_flag_on_by_fallback_keeps_its_reports(tmp_path):
    # (nearest true case: the fallback turns it on where the configuration has no such field)
    found = _rollout_reports(_rollout_project(tmp_path, store="getattr(cfg, 'use_graph_capture', True) if cfg else True"))
    assert found and any(f["severity"] != "info" for f in found), found


def test_graph_path_behind_a_computed_flag_keeps_its_reports(tmp_path):
    found = _rollout_reports(_rollout_project(tmp_path, store="getattr(cfg, 'use_graph_capture', False) if cfg else engine.fast"))
    assert found and any(f["severity"] != "info" for f in found), found


def test_read_field_reads_a_field_or_its_guarded_getattr():
    import ast

    from npu_migrate.optreads32 import read_field

    table = {"use_graph_capture": ()}

    def read(text):
        return read_field(ast.parse(text).body[0].value, table)

    assert read("cfg.use_graph_capture") == "use_graph_capture"
    assert read("getattr(cfg, 'use_graph_capture', False) if cfg else False") == "use_graph_capture"
    assert read("False if cfg is None else cfg.use_graph_capture") == "use_graph_capture"
    assert read("getattr(cfg, 'use_graph_capture', True)") is None
    assert read("cfg.use_graph_capture if cfg else other") is None


# ----------------------------------------------------------------------------- GC#4: a field computed only after an opt-in
_CACHE_CONFIG = """\
from dataclasses import dataclass, field


@dataclass
class CacheConfig:
    use_replayssm: bool = False
    use_kda_recoverssm: bool = field(default=False, init=False)
"""

_VLLM_CONFIG = """\
from dataclasses import dataclass


@dataclass
class EngineConfig:
    cache_config: object = None
    num_speculative_tokens: int = 0
    is_kda_model: bool = False

    def validate(self):
        {gate}
            self.cache_config.use_kda_recoverssm = False
            return self
        self.cache_config.use_kda_recoverssm = self.num_speculative_tokens > 0 and self.is_kda_model
        return self
"""

_RECOVER = """\
from vllm.triton_utils import tl, triton


class RecoverState:
    def postprocess(self, x):
        _recover_kernel[(1,)](x)


@triton.jit
def _recover_kernel(x_ptr):
    tl.store(x_ptr, tl.load(x_ptr) + 1)
"""

_HYBRID = """\
from pkg.model_states.recover import RecoverState


class HybridState:
    def __init__(self, engine_config):
        self.cache_config = engine_config.cache_config
        self.recover = RecoverState() if self.cache_config.use_kda_recoverssm else None
"""


def _recover_project(tmp_path, gate: str = "if not self.cache_config.use_replayssm:") -> dict:
    files = {"pkg/__init__.py": "", "pkg/config/__init__.py": "", "pkg/config/cache.py": _CACHE_CONFIG,
             "pkg/config/engine.py": _VLLM_CONFIG.format(gate=gate), "pkg/model_states/__init__.py": "",
             "pkg/model_states/recover.py": _RECOVER, "pkg/model_states/hybrid.py": _HYBRID}
    return migrate_json(write_project(tmp_path, files))


def test_kernel_behind_a_field_computed_only_after_an_opt_in_is_info(tmp_path):
    found = findings_at(_recover_project(tmp_path), "pkg/model_states/recover.py", "NPU910")
    assert _all_info(found), found
    message = " ".join(f["message"] for f in found.values())
    assert "use_kda_recoverssm" in message and "use_replayssm" in message, message


def test_field_computed_on_every_path_keeps_the_error(tmp_path):
    # (nearest true case: the computed setting is not behind an opt-in: the early exit tests another value)
    found = findings_at(_recover_project(tmp_path, gate="if self.num_speculative_tokens < 0:"), "pkg/model_states/recover.py",
                        "NPU910")
    assert _all_error(found), found


# ----------------------------------------------------------------------------- GB#12: a constructor's assert
_SPEC_CONFIG = """\
from dataclasses import dataclass


@dataclass
class EngineConfig:
    speculative_config: object = None
"""

_CONV_OPS = """\
from vllm.triton_utils import tl, triton


@triton.jit
def _conv_kernel(x_ptr):
    tl.store(x_ptr, tl.load(x_ptr) * 2)


def conv_residual_norm(x):
    _conv_kernel[(1,)](x)
    return x
"""

_DRAFT_LAYER = """\
import torch


class DraftLayer(torch.nn.Module):
    def __init__(self, engine_config):
        super().__init__()
        {check}
        self.block_size = 4

    def forward(self, x):
        from pkg.models.conv_ops import conv_residual_norm

        return conv_residual_norm(x)
"""


def _draft_project(tmp_path, check: str = "assert engine_config.speculative_config is not None") -> dict:
    files = {"pkg/__init__.py": "", "pkg/config/__init__.py": "", "pkg/config/engine.py": _SPEC_CONFIG,
             "pkg/models/__init__.py": "", "pkg/models/conv_ops.py": _CONV_OPS,
             "pkg/models/draft.py": _DRAFT_LAYER.format(check=check)}
    return migrate_json(write_project(tmp_path, files))


def test_kernel_of_a_layer_asserting_an_opt_in_config_is_info(tmp_path):
    found = findings_at(_draft_project(tmp_path), "pkg/models/conv_ops.py", "NPU910")
    assert _all_info(found), found
    message = " ".join(f["message"] for f in found.values())
    assert "`DraftLayer.__init__` asserts it" in message and "`EngineConfig.speculative_config` defaults to None" in message


def test_layer_asserting_what_holds_by_default_keeps_the_error(tmp_path):
    # (nearest true case: the assert holds by default: the layer is built on every NPU host)
    found = findings_at(_draft_project(tmp_path, check="assert engine_config.speculative_config is None"),
                        "pkg/models/conv_ops.py", "NPU910")
    assert _all_error(found), found


def test_layer_asserting_under_a_branch_keeps_the_error(tmp_path):
    # (nearest true case: the assert is not in the constructor's own body, only on one branch)
    check = "if engine_config is not None and engine_config.block_size:\n            assert engine_config.speculative_config is not None"
    found = findings_at(_draft_project(tmp_path, check=check), "pkg/models/conv_ops.py", "NPU910")
    assert _all_error(found), found
