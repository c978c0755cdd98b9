"""Helper h139: opt-in choices, round 29 (issue #16, policy P1: code an NPU host reaches only by a
user's explicit choice is info naming the choice and where its default is set). Each false case is
paired with its nearest true case that stays reported.

- optchoice29.py (DA#27, DB#35, DC#29): a configuration field of a `*Config` class off by default
  (`enable_prompt_embeds: bool = False`, `async_split_plan: bool = False`) tested in `if <x>.F:` / `if
  self.A and ...:` / `X() if F else None` (a parameter handed the field) before the code is built or
  called. Nearest true: the field on by default, the library turning it on, the test for the default
  itself, the method called ungated.
"""

from __future__ import annotations

from tests.precision_helpers import findings_at, migrate_json, write_project


# ----------------------------------------------------------------------------- DA#27: a config field off by default
def _prompt_embeds_files(default: str = "False", setter: str = "", test: str = "self.model_config.enable_prompt_embeds") -> dict:
    return {
        "proj/__init__.py": "",
        "proj/config.py": f'''
            from dataclasses import dataclass


            @dataclass
            class ModelConfig:
                enable_prompt_embeds: bool = {default}
                max_len: int = 1024
        ''',
        "proj/setup.py": f'''
            def configure(model_config, args):
                model_config.max_len = args.max_len
                {setter or "return model_config"}
        ''',
        "proj/prompt_embeds.py": '''
            from vllm.triton_utils import tl, triton


            class PromptEmbedsState:
                def __init__(self, n):
                    self.n = n

                def apply(self, x):
                    _apply_kernel[(self.n,)](x)


            @triton.jit
            def _apply_kernel(x_ptr):
                tl.store(x_ptr, tl.load(x_ptr) + 1)
        ''',
        "proj/state.py": f'''
            from proj.prompt_embeds import PromptEmbedsState


            class ModelState:
                def __init__(self, model_config):
                    self.model_config = model_config
                    self.prompt_embeds_state: PromptEmbedsState | None = None
                    if {test}:
                        self.prompt_embeds_state = PromptEmbedsState(4)
        ''',
    }


def _kernel(report: dict) -> dict:
    return findings_at(report, "proj/prompt_embeds.py", "NPU910")


def test_kernel_built_only_under_a_config_field_off_by_default_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _prompt_embeds_files(), dedent=True))
    found = [f for f in _kernel(report).values() if "reached on an NPU host only when" in f["message"]]
    assert found and all(f["severity"] == "info" for f in found), _kernel(report)
    message = found[0]["message"]
    assert "`self.model_config.enable_prompt_embeds` is chosen (`ModelConfig.enable_prompt_embeds` defaults to " \
           "`False`, proj/config.py:7)" in message, message
    assert "proj/state.py:10" in message, message


def test_config_field_on_by_default_keeps_the_error(tmp_path):
    # (nearest true case: the field defaults to True, so every NPU host builds the state)
    report = migrate_json(write_project(tmp_path, _prompt_embeds_files(default="True"), dedent=True))
    assert _kernel(report) and all(f["severity"] == "error" for f in _kernel(report).values()), _kernel(report)


def test_config_field_the_library_turns_on_keeps_the_error(tmp_path):
    # (nearest true case: the library itself sets the field from a computed value)
    files = _prompt_embeds_files(setter="model_config.enable_prompt_embeds = args.max_len > 0")
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    assert all(f["severity"] == "error" for f in _kernel(report).values()), _kernel(report)


def test_config_field_tested_for_its_default_keeps_the_error(tmp_path):
    # (nearest true case: `if not x.F:` is the default's own path)
    files = _prompt_embeds_files(test="not self.model_config.enable_prompt_embeds")
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    assert all(f["severity"] == "error" for f in _kernel(report).values()), _kernel(report)


# ----------------------------------------------------------------------------- DB#35: a private method behind the flag
def _split_plan_files(gate: str = "if self.async_split_plan and self.ep_size > 1:") -> dict:
    return {
        "ds/__init__.py": "",
        "ds/presets.py": '''
            from dataclasses import dataclass


            @dataclass
            class AutoEPConfig:
                enabled: bool = False
                async_split_plan: bool = False
        ''',
        "ds/parse.py": '''
            from ds.presets import AutoEPConfig


            def parse_autoep_config(param_dict):
                config = AutoEPConfig()
                config.async_split_plan = param_dict.get("async_split_plan", False)
                return config
        ''',
        "ds/layer.py": f'''
            import torch


            def _start_from_counts(counts):
                if counts.device.type != "cuda":
                    raise RuntimeError("async_split_plan requires CUDA tensors")
                return counts.cpu()


            class AutoEPLayer(torch.nn.Module):
                def __init__(self, config, ep_size):
                    super().__init__()
                    self.async_split_plan = config.async_split_plan
                    self.ep_size = ep_size

                def _start_plan(self, counts):
                    return _start_from_counts(counts)

                def forward(self, x, counts):
                    plan = None
                    {gate}
                        plan = self._start_plan(counts)
                    return x, plan
        ''',
    }


def test_private_method_called_only_under_an_opt_in_json_flag_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _split_plan_files(), dedent=True))
    found = findings_at(report, "ds/layer.py", "NPU108")
    assert found and all(f["severity"] == "info" for f in found.values()), found
    message = next(iter(found.values()))["message"]
    assert "`self.async_split_plan` is chosen (`AutoEPConfig.async_split_plan` defaults to `False`, " \
           "ds/presets.py:8), through `_start_plan`" in message, message


def test_private_method_called_ungated_keeps_the_warning(tmp_path):
    # (nearest true case: the method is called on every forward)
    report = migrate_json(write_project(tmp_path, _split_plan_files(gate="if True:"), dedent=True))
    found = findings_at(report, "ds/layer.py", "NPU108")
    assert found and all(f["severity"] == "warning" for f in found.values()), found


# ----------------------------------------------------------------------------- DC#29: a parameter handed the field
def _trace_replay_files(value: str = "self.model_config.enable_trace_replay") -> dict:
    return {
        "proj/__init__.py": "",
        "proj/config.py": '''
            from dataclasses import dataclass


            @dataclass
            class ModelConfig:
                enable_trace_replay: bool = False
        ''',
        "proj/trace_replay.py": '''
            from vllm.triton_utils import tl, triton


            class TraceReplayState:
                def __init__(self, states):
                    self.states = states

                def apply(self, x):
                    _replay_kernel[(4,)](x)


            @triton.jit
            def _replay_kernel(x_ptr):
                tl.store(x_ptr, tl.load(x_ptr) * 2)
        ''',
        "proj/sampler.py": '''
            from proj.trace_replay import TraceReplayState


            class Sampler:
                def __init__(self, states, enable_trace_replay: bool = False):
                    self.trace_replay_state = (
                        TraceReplayState(states) if enable_trace_replay else None
                    )
        ''',
        "proj/runner.py": f'''
            from proj.sampler import Sampler


            class Runner:
                def __init__(self, model_config, states):
                    self.model_config = model_config
                    kwargs = {{
                        "enable_trace_replay": {value},
                    }}
                    self.sampler = Sampler(states, **kwargs)
        ''',
    }


def test_state_built_only_when_a_parameter_handed_an_opt_in_field_is_set_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _trace_replay_files(), dedent=True))
    found = findings_at(report, "proj/trace_replay.py", "NPU910")
    assert found and all(f["severity"] == "info" for f in found.values()), found
    message = next(iter(found.values()))["message"]
    assert "`enable_trace_replay` is chosen (`ModelConfig.enable_trace_replay` defaults to `False`, " \
           "proj/config.py:7) (proj/sampler.py:8)" in message, message


def test_parameter_the_library_turns_on_keeps_the_error(tmp_path):
    # (nearest true case: the runner hands the sampler True itself)
    report = migrate_json(write_project(tmp_path, _trace_replay_files(value="True"), dedent=True))
    found = findings_at(report, "proj/trace_replay.py", "NPU910")
    assert found and all(f["severity"] == "error" for f in found.values()), found



# ----------------------------------------------------------------------------- an early exit taken at the default
def _offload_files(exit_test: str = "(size := cache_config.offloading_size) is None") -> dict:
    return {
        "proj/__init__.py": "",
        "proj/config.py": '''
            from dataclasses import dataclass
            from typing import Optional


            @dataclass
            class CacheConfig:
                offloading_size: Optional[float] = None
        ''',
        "proj/offload.py": '''
            import torch


            class _OffloadWorker:
                def start(self):
                    low, high = torch.cuda.Stream.priority_range()
                    return low
        ''',
        "proj/builder.py": f'''
            from proj.offload import _OffloadWorker


            def maybe_build_offload(cache_config):
                if {exit_test}:
                    return None
                return _OffloadWorker()
        ''',
    }


def test_class_built_only_past_an_exit_taken_at_the_default_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _offload_files(), dedent=True))
    found = findings_at(report, "proj/offload.py", "NPU202")
    assert found and all(f["severity"] == "info" for f in found.values()), found
    message = next(iter(found.values()))["message"]
    assert "`cache_config.offloading_size` is chosen (`CacheConfig.offloading_size` defaults to `None`, " \
           "proj/config.py:8) (proj/builder.py:8)" in message, message


def test_class_built_past_an_exit_the_default_does_not_take_keeps_the_error(tmp_path):
    # (nearest true case: the exit is taken only when the user sets the field; the default builds it)
    report = migrate_json(write_project(tmp_path, _offload_files("cache_config.offloading_size is not None"), dedent=True))
    found = findings_at(report, "proj/offload.py", "NPU202")
    assert found and all(f["severity"] == "error" for f in found.values()), found
