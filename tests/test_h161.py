"""Helper h161: opt-in choices reached through several steps, round 31 (issue #16, policy P1: code an
NPU host reaches only by a user's explicit choice is info naming the choice and where its default is
set; never an error, never dropped). Each false case is paired with its nearest true case that stays
reported.

- optconfig29.py (FC#23, "numeric flow"): `create_offloader` sets a local `backend = "prefetch"` only
  under `if prefetch.offload_group_size > 0:` (a size whose default 0 turns the feature off) and
  builds `PrefetchOffloader` only under `if backend == "prefetch":`. Nearest true: a size defaulting to
  1 (on by default), a `> 1` test (how NPU hosts serve: `tensor_parallel_size > 1`) and a rank
  `> 0` (no size: the launcher sets it), all kept.
- envchains32.py (FA#23, a setup script's chain): a method called only from another method, called
  only under a module-level `if` on an `envs.py` switch off by default. Nearest true: a switch on by
  default, the method also called outside the `if`, and a name another library module mentions, kept.
- dictreach32.py (FC#26, "private dict lookup"): an FP8 method class named only as a value of a
  private registry looked up in `_quantize_copy`, which runs from `quantized_head_copy` (under
  `draft_head_quantization is not None`) and from a refresh fed by `*_SOURCES[...]`, a private dict
  only `quantized_head_copy` fills. Nearest true: the copy built ungated, the registry iterated at
  module level, the dict filled at module level, all kept.
"""

from __future__ import annotations

from tests.precision_helpers import findings_at, migrate_json, write_project

CHOSEN = "reached on an NPU host only when"


def _all_info(found: dict) -> bool:
    return bool(found) and all(f["severity"] == "info" and CHOSEN in f["message"] for f in found.values())


def _none_info(found: dict) -> bool:
    return bool(found) and all(f["severity"] != "info" for f in found.values())


# ----------------------------------------------------------------------------- FC#23: a size > 0 selects the class
def _offload_files(size_default: str = "0", size_test: str = "prefetch.offload_group_size > 0") -> dict:
    return {
        "proj/__init__.py": "",
        "proj/config/__init__.py": "",
        "proj/config/offload.py": f'''
            from dataclasses import dataclass, field


            @dataclass
            class PrefetchOffloadConfig:
                offload_group_size: int = {size_default}


            @dataclass
            class OffloadConfig:
                offload_backend: str = "auto"
                prefetch: PrefetchOffloadConfig = field(default_factory=PrefetchOffloadConfig)
        ''',
        "proj/offloader/__init__.py": "",
        "proj/offloader/prefetch.py": '''
            import torch


            class PrefetchOffloader:
                def __init__(self, group_size):
                    self.group_size = group_size

                def wait_for_layer(self, event):
                    if torch.cuda.is_current_stream_capturing():
                        event.wait()
        ''',
        "proj/offloader/base.py": f'''
            class NoopOffloader:
                pass


            def create_offloader(offload_config):
                from proj.offloader.prefetch import PrefetchOffloader

                backend = offload_config.offload_backend
                prefetch = offload_config.prefetch
                if backend == "auto":
                    if {size_test}:
                        backend = "prefetch"
                    else:
                        return NoopOffloader()
                if backend == "prefetch":
                    return PrefetchOffloader(group_size=prefetch.offload_group_size)
                return NoopOffloader()
        ''',
        "proj/runner.py": '''
            from proj.offloader.base import create_offloader


            class Runner:
                def load_model(self, config):
                    self.offloader = create_offloader(config.offload_config)
        ''',
    }


def _capturing(report: dict) -> dict:
    return findings_at(report, "proj/offloader/prefetch.py", "NPU202")


def test_class_built_only_under_a_size_off_by_default_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _offload_files(), dedent=True))
    found = _capturing(report)
    assert _all_info(found), found
    message = next(iter(found.values()))["message"]
    assert "backend == 'prefetch'" in message and "`OffloadConfig.offload_backend` defaults to 'auto'" in message, message


def test_class_built_under_a_size_on_by_default_keeps_the_error(tmp_path):
    # (nearest true case: the size defaults to 1, so `> 0` holds and every NPU host builds the class)
    report = migrate_json(write_project(tmp_path, _offload_files(size_default="1"), dedent=True))
    assert _none_info(_capturing(report)), _capturing(report)


def test_class_built_under_a_size_above_one_keeps_the_error(tmp_path):
    # (nearest true case: `> 1` is not read: `tensor_parallel_size > 1` is how NPU hosts serve)
    report = migrate_json(write_project(
        tmp_path, _offload_files(size_test="prefetch.offload_group_size > 1"), dedent=True))
    assert _none_info(_capturing(report)), _capturing(report)


# ----------------------------------------------------------------------------- FA#23: a setup script's chain
def _setup_files(switch: str = 'os.environ.get("PROJ_USE_PRECOMPILED", "").strip().lower() in ("1", "true")',
                 also_call: str = "") -> dict:
    return {
        "proj/__init__.py": "",
        "proj/envs.py": f'''
            import os

            environment_variables = {{
                "PROJ_USE_PRECOMPILED": lambda: (
                    {switch}
                    or bool(os.environ.get("PROJ_WHEEL_LOCATION"))
                ),
                "PROJ_USE_RUST": lambda: os.environ.get("PROJ_USE_RUST", "").strip().lower() in ("1", "true"),
            }}
        ''',
        "setup.py": f'''
            import importlib.util
            import os


            def load_module_from_path(name, path):
                spec = importlib.util.spec_from_file_location(name, path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                return module


            envs = load_module_from_path("envs", os.path.join("proj", "envs.py"))
            USE_PRECOMPILED = envs.PROJ_USE_PRECOMPILED or envs.PROJ_USE_RUST


            class wheel_utils:
                @staticmethod
                def detect_cuda_variant():
                    cuda_version = None
                    try:
                        import torch

                        cuda_version = torch.version.cuda
                    except Exception:
                        pass
                    return "cu" + (cuda_version or "129").replace(".", "")

                @staticmethod
                def determine_wheel_url():
                    variant = wheel_utils.detect_cuda_variant()
                    return f"https://wheels.example/{{variant}}/proj.whl"

            {also_call}
            if USE_PRECOMPILED and not os.environ.get("METADATA_ONLY"):
                wheel_url = wheel_utils.determine_wheel_url()
                print(wheel_url)
        ''',
        "tests/test_wheel.py": '''
            def test_variant():
                from setup import wheel_utils

                assert wheel_utils.detect_cuda_variant()
        ''',
    }


def _version(report: dict) -> dict:
    return findings_at(report, "setup.py", "NPU990")


def test_setup_method_reached_only_under_a_default_off_switch_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _setup_files(), dedent=True))
    found = _version(report)
    assert _all_info(found), found
    message = next(iter(found.values()))["message"]
    assert "`PROJ_USE_PRECOMPILED`" in message and "`PROJ_USE_RUST`" in message, message
    assert "proj/envs.py:" in message and "from `determine_wheel_url`" in message, message


def test_setup_method_under_a_switch_on_by_default_keeps_the_warning(tmp_path):
    # (nearest true case: the variable defaults to "1": every build, an NPU host's too, runs it)
    switch = 'os.environ.get("PROJ_USE_PRECOMPILED", "1").strip().lower() in ("1", "true")'
    report = migrate_json(write_project(tmp_path, _setup_files(switch=switch), dedent=True))
    assert _none_info(_version(report)), _version(report)


def test_setup_method_also_called_outside_the_switch_keeps_the_warning(tmp_path):
    # (nearest true case: a module-level call outside the `if` runs on every build)
    report = migrate_json(write_project(
        tmp_path, _setup_files(also_call="print(wheel_utils.determine_wheel_url())"), dedent=True))
    assert _none_info(_version(report)), _version(report)


def test_setup_method_named_by_another_library_module_keeps_the_warning(tmp_path):
    # (nearest true case: a library module mentions the function: it may call it on an NPU host)
    files = _setup_files()
    files["proj/build.py"] = "def variant(utils):\n    return utils.detect_cuda_variant()\n"
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    assert _none_info(_version(report)), _version(report)


# ----------------------------------------------------------------------------- FC#26: a private dict's entry
def _head_files(gate: str = "if speculative_config.draft_head_quantization is not None:", extra: str = "") -> dict:
    return {
        "proj/__init__.py": "",
        "proj/config/__init__.py": "",
        "proj/config/speculative.py": '''
            from dataclasses import dataclass


            @dataclass
            class SpeculativeConfig:
                draft_head_quantization: str | None = None
        ''',
        "proj/heads.py": f'''
            import torch


            def _quantize_fp8(weight):
                scale = weight.abs().amax() / torch.finfo(torch.float8_e4m3fn).max
                return (weight / scale).to(torch.float8_e4m3fn), scale


            class _Fp8Method:
                def process(self, layer):
                    return _quantize_fp8(layer.weight)


            class _PlainMethod:
                def process(self, layer):
                    return layer.weight


            _METHODS = {{"plain": _PlainMethod, "fp8": _Fp8Method}}


            def _quantize_copy(head, quantization):
                return _METHODS[quantization]().process(head)


            _SOURCES = {{}}


            def quantized_head_copy(head, quantization):
                copy = _quantize_copy(head, quantization)
                _SOURCES[id(copy)] = (head, quantization)
                return copy


            def refresh_heads(model):
                for module in model.modules():
                    if id(module) not in _SOURCES:
                        continue
                    _quantize_copy(*_SOURCES[id(module)])
            {extra}
        ''',
        "proj/eagle.py": f'''
            from proj.heads import quantized_head_copy


            def load_drafter(head, speculative_config):
                {gate}
                    head = quantized_head_copy(head, speculative_config.draft_head_quantization)
                return head
        ''',
        "proj/runner.py": '''
            from proj.heads import refresh_heads


            class Runner:
                def reload(self, model):
                    refresh_heads(model)
        ''',
    }


def _fp8(report: dict) -> dict:
    return findings_at(report, "proj/heads.py", "NPU913")


def test_method_reached_through_a_private_registry_and_dict_under_an_opt_in_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _head_files(), dedent=True))
    found = _fp8(report)
    assert _all_info(found), found
    message = next(iter(found.values()))["message"]
    assert "draft_head_quantization is not None" in message and "defaults to `None`" in message, message


def test_method_reached_through_an_ungated_call_keeps_the_error(tmp_path):
    # (nearest true case: the copy is built on every NPU host)
    report = migrate_json(write_project(tmp_path, _head_files(gate="if True:"), dedent=True))
    assert _none_info(_fp8(report)), _fp8(report)


def test_registry_iterated_keeps_the_error(tmp_path):
    # (nearest true case: every method of the registry is built on import, the FP8 one too)
    report = migrate_json(write_project(tmp_path, _head_files(extra="_BUILT = [m() for m in _METHODS.values()]"),
                                        dedent=True))
    assert _none_info(_fp8(report)), _fp8(report)


def test_dict_filled_at_module_level_keeps_the_error(tmp_path):
    # (nearest true case: an entry is there on import, so the refresh runs `_quantize_copy` unasked)
    report = migrate_json(write_project(tmp_path, _head_files(extra='_SOURCES[0] = (None, "fp8")'), dedent=True))
    assert _none_info(_fp8(report)), _fp8(report)


def test_class_built_under_a_rank_above_zero_keeps_the_error(tmp_path):
    # (nearest true case: a rank defaulting to 0 is no size a user turns on: the launcher sets it)
    files = _offload_files(size_test="prefetch.offload_group_size > 0")
    files["proj/config/offload.py"] = files["proj/config/offload.py"].replace(
        "offload_group_size: int = 0", "offload_group_size: int = 0\n                node_rank: int = 0")
    files["proj/offloader/base.py"] = files["proj/offloader/base.py"].replace(
        "prefetch.offload_group_size > 0", "prefetch.node_rank > 0")
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    assert _none_info(_capturing(report)), _capturing(report)
