"""Helper h135: code reached only when a user picks a non-default value of a config dataclass field
(issue #16, policy P1 across modules; audit round 28: CC#25, CA#27, CB#26), read by optconfig29.py
inside testcallers27.py's walk. Each false case is paired with its nearest true case (the same shape,
reached on an NPU host), which stays an error."""

from __future__ import annotations

from tests.precision_helpers import findings_at, migrate_json, write_project

CHOSEN = "reached on an NPU host only when"


# ----------------------------------------------------------------------------- CC#25: a property over a field
def _all2all_files(compared: str = "fi_one_sided", setter: str = "") -> dict:
    return {
        "proj/__init__.py": "",
        "proj/config/__init__.py": "",
        "proj/config/parallel.py": '''
            from dataclasses import dataclass


            @dataclass
            class ParallelConfig:
                all2all_backend: str = "allgather_reducescatter"
                data_parallel_size: int = 1
        ''',
        "proj/config/setup.py": f'''
            def configure(parallel_config):
                parallel_config.all2all_backend = "allgather_reducescatter"
                {setter or "return parallel_config"}
        ''',
        "proj/layers/__init__.py": "",
        "proj/layers/moe_config.py": f'''
            from dataclasses import dataclass


            @dataclass
            class FusedMoEParallelConfig:
                use_ep: bool
                all2all_backend: str

                @property
                def use_all2all_kernels(self):
                    return self.use_ep

                @property
                def use_fi_one_sided_kernels(self):
                    return self.use_all2all_kernels and self.all2all_backend == "{compared}"


            @dataclass
            class FusedMoEConfig:
                moe_parallel_config: FusedMoEParallelConfig

                @property
                def use_fi_one_sided_kernels(self):
                    return self.moe_parallel_config.use_fi_one_sided_kernels
        ''',
        "proj/layers/all2all_utils.py": '''
            def fi_one_sided_dispatch_layout(hidden):
                from flashinfer.fused_moe import QuantFormat
                return QuantFormat(hidden)


            def prepare(moe, hidden):
                if moe.use_ep:
                    return hidden
                elif moe.use_fi_one_sided_kernels:
                    return fi_one_sided_dispatch_layout(hidden)
                return None
        ''',
    }


def test_function_called_only_under_a_property_over_a_non_default_field_value_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _all2all_files(), dedent=True))
    found = findings_at(report, "proj/layers/all2all_utils.py", "NPU911")[3]
    assert found["severity"] == "info", found
    assert f"{CHOSEN} `moe.use_fi_one_sided_kernels` is chosen" in found["message"], found["message"]
    assert "`ParallelConfig.all2all_backend` defaults to 'allgather_reducescatter' (proj/config/parallel.py:7)" \
        in found["message"], found["message"]


def test_property_comparing_with_the_fields_default_keeps_the_error(tmp_path):
    # (nearest true case: the property is true with the default value, so every NPU host calls it)
    files = _all2all_files(compared="allgather_reducescatter")
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    assert findings_at(report, "proj/layers/all2all_utils.py", "NPU911")[3]["severity"] == "error"


def test_field_value_the_library_sets_itself_keeps_the_error(tmp_path):
    # (nearest true case: the library picks the value on its own somewhere)
    files = _all2all_files(setter='parallel_config.all2all_backend = "fi_one_sided"')
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    assert findings_at(report, "proj/layers/all2all_utils.py", "NPU911")[3]["severity"] == "error"


# ----------------------------------------------------------------------------- CA#27: a flag stored from a comparison
def _mega_files(default: str = "auto") -> dict:
    return {
        "proj/__init__.py": "",
        "proj/config/__init__.py": "",
        "proj/config/kernel.py": f'''
            from dataclasses import dataclass


            @dataclass
            class KernelConfig:
                moe_backend: str = "{default}"
        ''',
        "proj/models/__init__.py": "",
        "proj/models/mega_moe.py": '''
            import torch


            class MegaMoEExperts(torch.nn.Module):
                def __init__(self, hidden):
                    super().__init__()
                    self.handle = torch.cuda.current_blas_handle()

                def weight_loader(self, param, weight):
                    param.copy_(weight)


            MegaMoEExperts.weight_loader.supports_moe_loading = True
        ''',
        "proj/models/model.py": '''
            import torch

            from proj.models.mega_moe import MegaMoEExperts


            class MoEBlock(torch.nn.Module):
                def __init__(self, vllm_config, hidden):
                    super().__init__()
                    mega_backend = vllm_config.kernel_config.moe_backend == "deep_gemm_mega_moe"
                    self.use_mega_moe = mega_backend
                    if self.use_mega_moe:
                        self.experts = MegaMoEExperts(hidden)
                    else:
                        self.experts = torch.nn.Linear(hidden, hidden)
        ''',
    }


def test_class_built_only_under_a_flag_from_a_non_default_choice_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _mega_files(), dedent=True))
    found = findings_at(report, "proj/models/mega_moe.py", "NPU202")[8]
    assert found["severity"] == "info", found
    assert f"{CHOSEN} `self.use_mega_moe` is chosen" in found["message"], found["message"]
    assert "`vllm_config.kernel_config.moe_backend == 'deep_gemm_mega_moe'`" in found["message"]
    assert "`KernelConfig.moe_backend` defaults to 'auto'" in found["message"], found["message"]


def test_class_built_under_the_default_choice_keeps_the_error(tmp_path):
    # (nearest true case: the compared value is the field's default: every NPU host builds it)
    report = migrate_json(write_project(tmp_path, _mega_files(default="deep_gemm_mega_moe"), dedent=True))
    assert findings_at(report, "proj/models/mega_moe.py", "NPU202")[8]["severity"] == "error"


def test_class_built_in_the_else_branch_keeps_the_error(tmp_path):
    # (nearest true case: the default's own path, `else:` of the opt-in test)
    files = _mega_files()
    files["proj/models/model.py"] = files["proj/models/model.py"].replace(
        "self.experts = MegaMoEExperts(hidden)\n                    else:\n"
        "                        self.experts = torch.nn.Linear(hidden, hidden)",
        "self.experts = torch.nn.Linear(hidden, hidden)\n                    else:\n"
        "                        self.experts = MegaMoEExperts(hidden)")
    assert "else:\n                        self.experts = MegaMoEExperts" in files["proj/models/model.py"]
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    assert findings_at(report, "proj/models/mega_moe.py", "NPU202")[8]["severity"] == "error"


# ----------------------------------------------------------------------------- CB#26: a registry keyed by an enum field
def _mamba_files(default: str = "TRITON", setter: str = "") -> dict:
    return {
        "proj/__init__.py": "",
        "proj/config/__init__.py": "",
        "proj/config/mamba.py": f'''
            import enum
            from dataclasses import dataclass


            class MambaBackendEnum(enum.Enum):
                TRITON = "triton"
                FLASHINFER = "flashinfer"
                CPU = "cpu"


            @dataclass
            class MambaConfig:
                backend: MambaBackendEnum = MambaBackendEnum.{default}
        ''',
        "proj/config/setup.py": f'''
            from proj.config.mamba import MambaBackendEnum


            def configure(mamba_config):
                {setter or "return mamba_config"}
        ''',
        "proj/ops/__init__.py": "",
        "proj/ops/dispatch.py": '''
            from proj.config.mamba import MambaBackendEnum


            class TritonBackend:
                def __init__(self, mamba_config):
                    self.kernel = None


            class FlashInferBackend:
                def __init__(self, mamba_config):
                    try:
                        from flashinfer.mamba import selective_state_update as kernel
                    except ImportError as e:
                        raise ImportError("FlashInfer is required for this backend") from e
                    self.kernel = kernel


            _BACKEND_REGISTRY = {
                MambaBackendEnum.TRITON: TritonBackend,
                MambaBackendEnum.FLASHINFER: FlashInferBackend,
            }


            def initialize(mamba_config, is_cpu, use_replay=False):
                backend = mamba_config.backend
                if backend == MambaBackendEnum.TRITON and is_cpu:
                    backend = MambaBackendEnum.CPU
                if backend not in _BACKEND_REGISTRY:
                    raise ValueError(f"{backend}: one of {list(_BACKEND_REGISTRY.keys())}")
                chosen = _BACKEND_REGISTRY[backend](mamba_config)
                if use_replay and backend == MambaBackendEnum.FLASHINFER:
                    try:
                        from flashinfer.mamba import checkpointing_ssu
                    except ImportError as e:
                        raise ImportError("ReplaySSM needs flashinfer") from e
                    return chosen, checkpointing_ssu
                return chosen, None
        ''',
    }


def test_registry_entry_only_a_non_default_enum_value_selects_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _mamba_files(), dedent=True))
    found = findings_at(report, "proj/ops/dispatch.py", "NPU911")
    assert found and all(f["severity"] == "info" for f in found.values()), found
    first = found[min(found)]
    assert f"{CHOSEN} `MambaBackendEnum.FLASHINFER` is chosen (its entry of `_BACKEND_REGISTRY` is looked up only " \
           "by `_BACKEND_REGISTRY[backend]`" in first["message"], first["message"]
    assert "`MambaConfig.backend` defaults to MambaBackendEnum.TRITON (proj/config/mamba.py:14)" in first["message"]


def test_registry_entry_of_the_default_enum_value_keeps_the_error(tmp_path):
    # (nearest true case: FlashInfer is the field's default: every NPU host builds that backend)
    report = migrate_json(write_project(tmp_path, _mamba_files(default="FLASHINFER"), dedent=True))
    found = findings_at(report, "proj/ops/dispatch.py", "NPU911")
    assert found and any(f["severity"] == "error" for f in found.values()), found


def test_registry_entry_the_library_selects_itself_keeps_the_error(tmp_path):
    # (nearest true case: the library stores the FlashInfer member into the field on its own)
    files = _mamba_files(setter="mamba_config.backend = MambaBackendEnum.FLASHINFER")
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    found = findings_at(report, "proj/ops/dispatch.py", "NPU911")
    assert found and any(f["severity"] == "error" for f in found.values()), found


def test_flag_another_module_stores_keeps_the_error(tmp_path):
    # (nearest true case: another library module turns the flag on itself, whatever the option)
    files = _mega_files()
    files["proj/models/patch.py"] = '''
        def force_mega(block):
            block.use_mega_moe = True
            return block
    '''
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    assert findings_at(report, "proj/models/mega_moe.py", "NPU202")[8]["severity"] == "error"
