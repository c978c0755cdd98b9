"""Helper h172: opt-in choices (policy P1) read through shapes the earlier opt-in passes did not
follow (issue #16, rounds 31 and 32). Each false case is paired with its nearest true case that
stays reported.

- envpreds33.py (GA#37, another library's own environment switch): a Triton kernel module imported
  only after `assert _is_triton_available()`, a package predicate that answers False on an NPU host
  unless `XFORMERS_ENABLE_TRITON=1` is set (its other returns fail a capability check there).
  Nearest true: a predicate whose other return is an unknown probe (`return HAS_TRITON`), a switch
  on by default, a variable the library sets itself, and a second, ungated import site: kept.
- enumconfigs33.py (GB#10, an enum member only a user's configuration names): ColossalAI's legacy
  `convert_to_apex_amp` (a lazy `import apex.amp`) called only under `elif mode == AMP_TYPE.APEX:`,
  a member the library only compares (the mode comes from the user's `fp16` configuration). Nearest
  true: the library defaulting to the member, building it from a string, or a `(str, Enum)` whose
  member equals a string the library sets: kept.
"""

from __future__ import annotations

from tests.precision_helpers import findings_at, migrate_json, write_project

CHOSEN = "reached on an NPU host only when"


def _all_info(found: dict) -> bool:
    return bool(found) and all(f["severity"] == "info" and CHOSEN in f["message"] for f in found.values())


def _none_info(found: dict) -> bool:
    return bool(found) and all(f["severity"] != "info" for f in found.values())


# ----------------------------------------------------------------------------- GA#37: xformers' XFORMERS_ENABLE_TRITON


_CAPABILITY = 'if torch.cuda.get_device_capability("cuda") < (8, 0):\n                    return False'


def _triton_files(default: str = '"0"', last: str = "return False", extra: str = "",
                  library_sets: str = "", capability: str = _CAPABILITY) -> dict:
    return {
        "xfm/__init__.py": f'''
            import os

            import torch

            try:
                import triton  # noqa
                HAS_TRITON = True
            except ImportError:
                HAS_TRITON = False
            {library_sets}

            def compute_once(func):
                value = None

                def func_wrapper():
                    nonlocal value
                    if value is None:
                        value = func()
                    return value

                return func_wrapper


            @compute_once
            def _is_triton_available():
                if os.environ.get("XFORMERS_ENABLE_TRITON", {default}) == "1":
                    return True
                if not torch.cuda.is_available():
                    return False
                if os.environ.get("XFORMERS_FORCE_DISABLE_TRITON", "0") == "1":
                    return False
                {capability}
                {last}
        ''',
        "xfm/ops/__init__.py": "",
        "xfm/ops/_triton/__init__.py": "",
        "xfm/ops/_triton/rope_kernels.py": '''
            import triton
            import triton.language as tl


            @triton.jit
            def _rope_kernel(x_ptr, n, BLOCK: tl.constexpr):
                offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
        ''',
        "xfm/ops/rope.py": '''
            import torch

            from .. import _is_triton_available


            def rope(x):
                if torch.is_grad_enabled() and x.requires_grad:
                    raise ValueError("Gradients not supported.")
                assert _is_triton_available()
                from ._triton.rope_kernels import _rope_kernel

                _rope_kernel[(1,)](x, x.numel(), BLOCK=128)
                return x
        ''',
        **({"xfm/ops/other.py": extra} if extra else {}),
    }


def _rope(report: dict) -> dict:
    return findings_at(report, "xfm/ops/_triton/rope_kernels.py", "NPU910")


def test_kernel_module_imported_only_past_an_env_opt_in_predicate_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _triton_files(), dedent=True))
    found = _rope(report)
    assert _all_info(found), found
    message = next(iter(found.values()))["message"]
    assert "`XFORMERS_ENABLE_TRITON`" in message and "XFORMERS_FORCE_DISABLE_TRITON" not in message, message
    assert "xfm/ops/rope.py:11 after `assert _is_triton_available()` (line 10)" in message, message
    assert "`_is_triton_available()` (xfm/__init__.py:" in message, message


def test_predicate_with_an_unknown_probe_keeps_the_error(tmp_path):
    # (nearest true case: without the variable, the predicate may still answer True on an NPU host
    # with Triton installed: no user's choice)
    report = migrate_json(write_project(tmp_path, _triton_files(capability="", last="return HAS_TRITON"), dedent=True))
    assert _none_info(_rope(report)), _rope(report)


def test_predicate_whose_switch_is_on_by_default_keeps_the_error(tmp_path):
    # (nearest true case: `os.environ.get("XFORMERS_ENABLE_TRITON", "1")`: on unless the user turns it off)
    report = migrate_json(write_project(tmp_path, _triton_files(default='"1"'), dedent=True))
    assert _none_info(_rope(report)), _rope(report)


def test_predicate_whose_variable_the_library_sets_keeps_the_error(tmp_path):
    # (nearest true case: the package sets the variable itself, every NPU host gets it)
    report = migrate_json(write_project(
        tmp_path, _triton_files(library_sets='os.environ["XFORMERS_ENABLE_TRITON"] = "1"'), dedent=True))
    assert _none_info(_rope(report)), _rope(report)


def test_kernel_module_also_imported_without_the_gate_keeps_the_error(tmp_path):
    # (nearest true case: a second library importer with no gate, as xformers' splitk kernels'
    # `get_kernel`)
    extra = '''
        def get_kernel():
            from ._triton.rope_kernels import _rope_kernel

            return _rope_kernel
    '''
    report = migrate_json(write_project(tmp_path, _triton_files(extra=extra), dedent=True))
    assert _none_info(_rope(report)), _rope(report)


# ----------------------------------------------------------------------------- GB#10: an AMP type only a config names
def _amp_files(initialize: str = "") -> dict:
    return {
        "clai/__init__.py": "",
        "clai/amp/amp_type.py": '''
            from enum import Enum


            class AMP_TYPE(Enum):
                APEX = "apex"
                TORCH = "torch"
                NAIVE = "naive"
        ''',
        "clai/amp/apex_amp/__init__.py": '''
            def convert_to_apex_amp(model, optimizer, amp_config):
                import apex.amp as apex_amp

                model, optimizer = apex_amp.initialize(model, optimizer, **amp_config)
                return model, optimizer


            __all__ = ["convert_to_apex_amp"]
        ''',
        "clai/amp/__init__.py": '''
            from .amp_type import AMP_TYPE
            from .apex_amp import convert_to_apex_amp

            __all__ = ["convert_to_amp", "convert_to_apex_amp", "AMP_TYPE"]


            def convert_to_amp(model, optimizer, mode: AMP_TYPE, amp_config=None):
                assert isinstance(mode, AMP_TYPE), f"expected AMP_TYPE, got {type(mode)}"
                if amp_config is None:
                    amp_config = {}
                if mode == AMP_TYPE.TORCH:
                    model = model.half()
                elif mode == AMP_TYPE.APEX:
                    model, optimizer = convert_to_apex_amp(model, optimizer, amp_config)
                elif mode == AMP_TYPE.NAIVE:
                    model = model.float()
                return model, optimizer
        ''',
        "clai/initialize.py": initialize or '''
            from clai.amp import AMP_TYPE, convert_to_amp


            def initialize(model, optimizer, config):
                fp16_cfg = config.get("fp16", None)
                if fp16_cfg is not None and fp16_cfg.get("mode") is not None:
                    cfg = dict(fp16_cfg)
                    amp_mode = cfg.pop("mode")
                    if amp_mode == AMP_TYPE.NAIVE:
                        cfg["clip_grad_norm"] = 1.0
                    model, optimizer = convert_to_amp(model, optimizer, mode=amp_mode, amp_config=cfg)
                return model, optimizer
        ''',
    }


def _apex(report: dict) -> dict:
    return findings_at(report, "clai/amp/apex_amp/__init__.py", "NPU902")


def test_apex_reached_only_under_an_enum_member_the_library_only_compares_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _amp_files(), dedent=True))
    found = _apex(report)
    assert _all_info(found), found
    message = next(iter(found.values()))["message"]
    assert "`mode == AMP_TYPE.APEX`" in message and "(the choice `AMP_TYPE.APEX`)" in message, message


def test_apex_member_the_library_sets_as_a_default_keeps_the_error(tmp_path):
    # (nearest true case: the library itself picks Apex when the configuration names no mode)
    initialize = '''
        from clai.amp import AMP_TYPE, convert_to_amp


        def initialize(model, optimizer, config):
            amp_mode = config.get("fp16_mode") or AMP_TYPE.APEX
            return convert_to_amp(model, optimizer, mode=amp_mode, amp_config={})
    '''
    report = migrate_json(write_project(tmp_path, _amp_files(initialize), dedent=True))
    assert _none_info(_apex(report)), _apex(report)


def test_apex_member_built_from_a_string_keeps_the_error(tmp_path):
    # (nearest true case: the library builds the member from a value it may compute itself)
    initialize = '''
        from clai.amp import AMP_TYPE, convert_to_amp


        def initialize(model, optimizer, config, default="apex"):
            amp_mode = AMP_TYPE(config.get("fp16_mode", default))
            return convert_to_amp(model, optimizer, mode=amp_mode, amp_config={})
    '''
    report = migrate_json(write_project(tmp_path, _amp_files(initialize), dedent=True))
    assert _none_info(_apex(report)), _apex(report)


def test_apex_member_of_a_str_enum_keeps_the_error(tmp_path):
    # (nearest true case: a `(str, Enum)` member equals the plain string "apex", which the library
    # may set itself)
    files = _amp_files('''
        from clai.amp import convert_to_amp


        def initialize(model, optimizer, config):
            return convert_to_amp(model, optimizer, mode=config.get("fp16_mode", "apex"), amp_config={})
    ''')
    files["clai/amp/amp_type.py"] = files["clai/amp/amp_type.py"].replace("class AMP_TYPE(Enum):", "class AMP_TYPE(str, Enum):")
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    assert _none_info(_apex(report)), _apex(report)


def test_apex_member_of_an_enum_whose_other_member_the_library_sets_keeps_the_error(tmp_path):
    # (nearest true case: the library produces `AMP_TYPE.TORCH` itself, so the enum is a state it
    # goes through (or a vocabulary a plugin extends, as vLLM's `PlatformEnum.OOT`), not only input)
    initialize = '''
        from clai.amp import AMP_TYPE, convert_to_amp


        def initialize(model, optimizer, config):
            amp_mode = config.get("fp16_mode") or AMP_TYPE.TORCH
            return convert_to_amp(model, optimizer, mode=amp_mode, amp_config={})
    '''
    report = migrate_json(write_project(tmp_path, _amp_files(initialize), dedent=True))
    assert _none_info(_apex(report)), _apex(report)
