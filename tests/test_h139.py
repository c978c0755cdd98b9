"""Helper h139: opt-in choices, round 29 (issue #16, policy P1: code an NPU host reaches only by a
user's explicit choice is info naming the choice and where its default is set). Each false case is
paired with its nearest true case that stays reported.

- optchoice29.py (DA#27, DB#35): a configuration field of a `*Config` class off by default
  (`enable_prompt_embeds: bool = False`, `async_split_plan: bool = False`, `dcp_size: int = 1`) tested
  in `if <x>.F:` / `if self.A and ...:` / `if self.A > 1:` before the code is built or called. Nearest
  true: the field on by default, the library turning it on, the reference outside the `if`.
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
