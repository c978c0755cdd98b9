"""Helper h145: opt-in choices named by value, round 30 (issue #16, policy P1: code an NPU host reaches
only by a user's explicit choice is info naming the choice and where its default is set, never dropped).
Each false case is paired with its nearest true case that stays reported.

- optchoice29.py, wave 30, read on the finding's own place (testcallers27.py's `reason_of`):
  * EA#27: a constructor flag off by default (`PyTorchProfiler(emit_nvtx=False)`, stored once as
    `self._emit_nvtx = emit_nvtx`) tested in `if self._emit_nvtx:` around the CUDA profiler. Nearest
    true: the library hands the flag a computed value; the `else:` branch; a flag on by default.
  * EB#28: a local name bound once to `rank == 0 and cfg.capture_torch_profiler` (a `*Config` field off
    by default) and tested in `if enable_profiler:`. Nearest true: the local bound with `or`; the
    field on by default.
"""

from __future__ import annotations

from tests.precision_helpers import findings_at, migrate_json, write_project

CHOSEN = "reached on an NPU host only when"


# ----------------------------------------------------------------------------- EA#27: a constructor flag
def _profiler_files(default: str = "False", caller: str = "Profiler()", branch: str = "if") -> dict:
    body = ("if self._emit_nvtx:\n                        self._parent = torch.cuda.profiler.profile()\n"
            "                        self._nvtx = torch.autograd.profiler.emit_nvtx()\n"
            "                    else:\n                        self._parent = None"
            if branch == "if" else
            "if self._emit_nvtx:\n                        self._parent = None\n"
            "                    else:\n                        self._parent = torch.cuda.profiler.profile()")
    return {
        "proj/__init__.py": "",
        "proj/profiler.py": f'''
            import torch


            class Profiler:
                def __init__(self, dirpath=None, emit_nvtx: bool = {default}):
                    self.dirpath = dirpath
                    self._emit_nvtx = emit_nvtx
                    self._parent = None

                def start(self):
                    {body}
                    return self._parent
        ''',
        "proj/trainer.py": f'''
            import torch

            from proj.profiler import Profiler


            def make_profiler():
                return {caller}
        ''',
    }


def _nvtx(report: dict) -> dict:
    return findings_at(report, "proj/profiler.py", "NPU202")


def test_cuda_profiler_behind_a_constructor_flag_off_by_default_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _profiler_files(), dedent=True))
    found = _nvtx(report)
    assert found and all(f["severity"] == "info" and CHOSEN in f["message"] for f in found.values()), found
    message = next(iter(found.values()))["message"]
    assert "`self._emit_nvtx` is chosen (`Profiler(emit_nvtx=...)` defaults to `False`, line 6)" in message, message
    assert len(found) == 1 and "also at line 14" in message, found  # (one finding, as before: never two)


def test_constructor_flag_the_library_computes_keeps_the_error(tmp_path):
    # (nearest true case: the library itself turns the flag on from a computed value)
    files = _profiler_files(caller="Profiler(emit_nvtx=torch.cuda.is_available())")
    found = _nvtx(migrate_json(write_project(tmp_path, files, dedent=True)))
    assert found and all(f["severity"] == "error" for f in found.values()), found


def test_constructor_flag_on_by_default_keeps_the_error(tmp_path):
    # (nearest true case: every NPU host takes the branch)
    found = _nvtx(migrate_json(write_project(tmp_path, _profiler_files(default="True"), dedent=True)))
    assert found and all(f["severity"] == "error" for f in found.values()), found


def test_default_branch_of_a_constructor_flag_keeps_the_error(tmp_path):
    # (nearest true case: the `else:` branch is what runs by default)
    found = _nvtx(migrate_json(write_project(tmp_path, _profiler_files(branch="else"), dedent=True)))
    assert found and all(f["severity"] == "error" for f in found.values()), found


# ----------------------------------------------------------------------------- EB#28: a local bound to the field
def _capture_files(default: str = "False", op: str = "and") -> dict:
    return {
        "proj/__init__.py": "",
        "proj/config.py": f'''
            from dataclasses import dataclass


            @dataclass
            class ProfilerConfig:
                capture_torch_profiler: bool = {default}
                torch_profiler_dir: str = ""
        ''',
        "proj/runner.py": f'''
            import torch


            class ModelRunner:
                def __init__(self, profiler_config):
                    self.profiler_config = profiler_config

                def capture_model(self, local_rank):
                    profiler = None
                    enable_profiler = (local_rank == 0) {op} self.profiler_config.capture_torch_profiler
                    if enable_profiler:
                        profiler = torch.profiler.profile(
                            activities=[
                                torch.profiler.ProfilerActivity.CPU,
                                torch.profiler.ProfilerActivity.CUDA,
                            ],
                        )
                    return profiler
        ''',
    }


def _activity(report: dict) -> dict:
    return findings_at(report, "proj/runner.py", "NPU935")


def test_profiler_activity_behind_a_local_bound_to_an_opt_in_field_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _capture_files(), dedent=True))
    found = _activity(report)
    assert found and all(f["severity"] == "info" and CHOSEN in f["message"] for f in found.values()), found
    message = next(iter(found.values()))["message"]
    assert "`self.profiler_config.capture_torch_profiler` is chosen (`ProfilerConfig.capture_torch_profiler` " \
           "defaults to `False`, proj/config.py:7)" in message, message


def test_local_bound_with_or_keeps_the_warning(tmp_path):
    # (nearest true case: rank 0 profiles whatever the field says)
    found = _activity(migrate_json(write_project(tmp_path, _capture_files(op="or"), dedent=True)))
    assert found and all(f["severity"] == "warning" for f in found.values()), found


def test_local_bound_to_a_field_on_by_default_keeps_the_warning(tmp_path):
    found = _activity(migrate_json(write_project(tmp_path, _capture_files(default="True"), dedent=True)))
    assert found and all(f["severity"] == "warning" for f in found.values()), found


# ----------------------------------------------------------------------------- EB#11, EC#3: a named backend
def _mega_files(test: str = 'vllm_config.kernel_config.moe_backend == "deep_gemm_mega_moe"',
                reader: str = 'moe_backend=getattr(vllm_config.kernel_config, "moe_backend", None)',
                post_init: str = "pass", setter: str = "return None") -> dict:
    return {
        "proj/__init__.py": "",
        "proj/config.py": f'''
            from dataclasses import dataclass


            @dataclass
            class KernelConfig:
                moe_backend: str = "auto"

                def __post_init__(self):
                    {post_init}


            @dataclass
            class SpeculativeConfig:
                moe_backend: str | None = None
        ''',
        "proj/worker.py": f'''
            def override_envs(parallel_config, moe_backend=None):
                return moe_backend


            def init_worker(vllm_config):
                return override_envs(vllm_config.parallel_config, {reader})


            def configure(vllm_config):
                {setter}
        ''',
        "proj/runner.py": '''
            from dataclasses import dataclass


            def resolve_shared_expert(prefix, moe_backend=None):
                return moe_backend == "aiter_mega_moe"


            class MoERunnerConfig:
                def __init__(self, kernel_config, all2all):
                    self.moe_backend = "flashinfer_trtllm" if all2all else kernel_config.moe_backend
                    self.fused = resolve_shared_expert("x", moe_backend="aiter_mega_moe")
        ''',
        "proj/prepare.py": '''
            from vllm.triton_utils import tl, triton


            @triton.jit
            def _prepare_kernel(x_ptr):
                tl.store(x_ptr, tl.load(x_ptr) + 1)


            def prepare_inputs(x):
                _prepare_kernel[(1,)](x)
        ''',
        "proj/mega.py": '''
            import torch

            from proj.prepare import prepare_inputs


            class MegaExperts(torch.nn.Module):
                def forward(self, x):
                    prepare_inputs(x)
                    return x
        ''',
        "proj/model.py": f'''
            import torch

            from proj.mega import MegaExperts


            class MoE(torch.nn.Module):
                def __init__(self, vllm_config):
                    super().__init__()
                    mega_backend = {test}
                    self.use_mega_moe = mega_backend
                    if self.use_mega_moe:
                        self.experts = MegaExperts()
                    else:
                        self.experts = torch.nn.Identity()

                def forward(self, x):
                    return self.experts(x)
        ''',
    }


def _mega(report: dict) -> dict:
    return findings_at(report, "proj/prepare.py", "NPU910")


def test_kernel_built_only_for_a_backend_the_user_names_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _mega_files(), dedent=True))
    found = _mega(report)
    assert found and all(f["severity"] == "info" and CHOSEN in f["message"] for f in found.values()), found
    message = next(iter(found.values()))["message"]
    assert "`self.use_mega_moe` is chosen (`vllm_config.kernel_config.moe_backend == 'deep_gemm_mega_moe'`; " in message and "defaults to 'auto' (proj/config.py:7)" in message and "proj/model.py:13" in message, message


def test_backend_test_true_at_the_default_keeps_the_error(tmp_path):
    # (nearest true case: `!= "triton"` holds at the default "auto": every NPU host builds the experts)
    found = _mega(migrate_json(write_project(
        tmp_path, _mega_files(test='vllm_config.kernel_config.moe_backend != "triton"'), dedent=True)))
    assert found and all(f["severity"] == "error" for f in found.values()), found


def test_backend_the_library_computes_keeps_the_error(tmp_path):
    # (nearest true case: the library stores a computed backend on the kernel config: another class's own
    # `self.moe_backend = ...` and a function's `moe_backend=` parameter (proj/runner.py) set none)
    found = _mega(migrate_json(write_project(tmp_path, _mega_files(
        setter="vllm_config.kernel_config.moe_backend = vllm_config.pick_backend()"), dedent=True)))
    assert found and all(f["severity"] == "error" for f in found.values()), found


def test_backend_the_config_computes_itself_keeps_the_error(tmp_path):
    # (nearest true case: the config class resolves its own field after construction)
    found = _mega(migrate_json(write_project(tmp_path, _mega_files(
        post_init='self.moe_backend = "deep_gemm_mega_moe" if self.moe_backend == "auto" else self.moe_backend'),
        dedent=True)))
    assert found and all(f["severity"] == "error" for f in found.values()), found


# ----------------------------------------------------------------------------- EB#40: a server argument off by default
def _pdmux_files(default: str = "False", setter: str = "") -> dict:
    return {
        "srv/__init__.py": "",
        "srv/server_args.py": f'''
            import dataclasses


            @dataclasses.dataclass
            class ServerArgs:
                enable_pdmux: bool = {default}
                pdmux_config_path: str | None = None

                def __post_init__(self):
                    {setter or "pass"}
        ''',
        "srv/pdmux_context.py": '''
            def initialize_stream_groups(gpu_id, config):
                from sgl_kernel import spatial

                return spatial.create_greenctx_stream_by_value(gpu_id, config)
        ''',
        "srv/mixin.py": '''
            from srv.pdmux_context import initialize_stream_groups


            class MultiplexMixin:
                def init_pdmux(self):
                    self.stream_groups = initialize_stream_groups(self.gpu_id, self.server_args.pdmux_config_path)
        ''',
        "srv/scheduler.py": '''
            from srv.mixin import MultiplexMixin


            class Scheduler(MultiplexMixin):
                def __init__(self, server_args, gpu_id):
                    self.server_args = server_args
                    self.gpu_id = gpu_id
                    self.enable_pdmux = server_args.enable_pdmux
                    if self.enable_pdmux:
                        self.init_pdmux()
        ''',
    }


def _spatial(report: dict) -> dict:
    return findings_at(report, "srv/pdmux_context.py", "NPU911")


def test_package_imported_only_under_a_server_argument_off_by_default_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _pdmux_files(), dedent=True))
    found = _spatial(report)
    assert found and all(f["severity"] == "info" and CHOSEN in f["message"] for f in found.values()), found
    message = next(iter(found.values()))["message"]
    assert "`self.enable_pdmux` is chosen (`ServerArgs.enable_pdmux` defaults to `False`, srv/server_args.py:7)" \
           in message, message


def test_server_argument_the_library_turns_on_keeps_the_error(tmp_path):
    # (nearest true case: the server turns the option on itself)
    files = _pdmux_files(setter="self.enable_pdmux = self.pdmux_config_path is not None")
    found = _spatial(migrate_json(write_project(tmp_path, files, dedent=True)))
    assert found and all(f["severity"] == "error" for f in found.values()), found


def test_server_argument_on_by_default_keeps_the_error(tmp_path):
    found = _spatial(migrate_json(write_project(tmp_path, _pdmux_files(default="True"), dedent=True)))
    assert found and all(f["severity"] == "error" for f in found.values()), found


def test_backend_flag_another_object_stores_keeps_the_error(tmp_path):
    # (nearest true case: library code turns the attribute on from outside, whatever the backend)
    files = _mega_files()
    files["proj/patch.py"] = '''
        def force_mega(block):
            block.use_mega_moe = True
            return block
    '''
    found = _mega(migrate_json(write_project(tmp_path, files, dedent=True)))
    assert found and all(f["severity"] == "error" for f in found.values()), found


# ----------------------------------------------------------------------------- a flag the library computes, handed on as F=F
def _flash_files(value: str = "can_use_flash_attn2(dtype)") -> dict:
    return {
        "inf/__init__.py": "",
        "inf/config.py": f'''
            from dataclasses import dataclass

            import torch


            def can_use_flash_attn2(dtype):
                return dtype in (torch.float16, torch.bfloat16)


            @dataclass
            class ShardInferenceConfig:
                use_flash_attn: bool = False


            def to_shard_config(dtype):
                use_flash_attn = {value}
                return ShardInferenceConfig(use_flash_attn=use_flash_attn)
        ''',
        "inf/backend.py": '''
            class CudaAttentionBackend:
                def __init__(self, use_flash_attn: bool = False):
                    self.use_flash_attn = use_flash_attn

                def forward(self, q, k, v):
                    if self.use_flash_attn:
                        from flash_attn import flash_attn_varlen_func

                        return flash_attn_varlen_func(q, k, v, alibi_slopes=self.slopes)
                    return q


            def get_backend(shard_config):
                return CudaAttentionBackend(shard_config.use_flash_attn)
        ''',
    }


def test_flag_the_user_hands_on_is_info(tmp_path):
    # (the false case beside it: the setting handed on is the user's own parameter)
    files = _flash_files()
    files["inf/config.py"] = files["inf/config.py"].replace(
        "def to_shard_config(dtype):\n                use_flash_attn = can_use_flash_attn2(dtype)",
        "def to_shard_config(dtype, use_flash_attn=False):")
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    found = findings_at(report, "inf/backend.py", "NPU503")
    assert found and all(f["severity"] == "info" and CHOSEN in f["message"] for f in found.values()), found


def test_flag_the_library_computes_and_hands_on_keeps_the_error(tmp_path):
    # (nearest true case of the constructor flag and of `F=F`: the local handed on is computed by the
    # library (`can_use_flash_attn2(dtype)`), not the user's setting: ColossalAI's use_flash_attn)
    report = migrate_json(write_project(tmp_path, _flash_files(), dedent=True))
    found = {**findings_at(report, "inf/backend.py", "NPU503"), **findings_at(report, "inf/backend.py", "NPU502")}
    assert found and all(f["severity"] == "error" for f in found.values()), found
