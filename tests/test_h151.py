"""Helper h151: kernels reached only through a KV-cache dtype chosen by name, round 31 (issue #16,
policy P1: code an NPU host reaches only by a user's explicit choice is info naming the choice and
where its default is set; never dropped). Each false case is paired with its nearest true case that
stays reported.

- optconfig29.py (FC#8): `elif cache_config.cache_dtype.startswith("turboquant_") or ...:` picks the
  backend whose kernels run; `cache_dtype` defaults to "auto" in a `config/` dataclass. Nearest true:
  a prefix the default itself has ("au"), a prefix test of a value the library computes.
- callgates21.py through kvchoice31.py (FB#12, FC#8): `class UltraBackend(TurboBackend):` names the
  base only in its bases; the base's code runs through the subclass only where the subclass is
  chosen. Nearest true: the subclass built where every NPU host runs.
"""

from __future__ import annotations

import ast

from tests.precision_helpers import findings_at, migrate_json, write_project

CHOSEN = "reached on an NPU host only when"


def _files(test: str = 'cache_config.cache_dtype.startswith("turboquant_")', default: str = '"auto"',
           ultra_pick: str = 'if cache_config.cache_dtype == "ultraquant_4bit":') -> dict:
    return {
        "proj/__init__.py": "",
        "proj/config/__init__.py": "",
        "proj/config/cache.py": f'''
            from dataclasses import dataclass


            @dataclass
            class CacheConfig:
                cache_dtype: str = {default}
                block_size: int = 16
        ''',
        "proj/ops/__init__.py": "",
        "proj/ops/turbo_kernels.py": '''
            from vllm.triton_utils import tl, triton


            @triton.jit
            def _turbo_kernel(x_ptr):
                tl.store(x_ptr, tl.load(x_ptr) + 1)


            def turbo_decode(x):
                _turbo_kernel[(1,)](x)
                return x
        ''',
        "proj/ops/ultra_kernels.py": '''
            from vllm.triton_utils import tl, triton


            @triton.jit
            def _ultra_kernel(x_ptr):
                tl.store(x_ptr, tl.load(x_ptr) * 2)


            def ultra_decode(x):
                _ultra_kernel[(1,)](x)
                return x
        ''',
        "proj/backends/__init__.py": "",
        "proj/backends/turbo.py": '''
            from proj.ops.turbo_kernels import turbo_decode


            class TurboBackend:
                def forward(self, x):
                    return turbo_decode(x)
        ''',
        "proj/backends/ultra.py": '''
            from proj.backends.turbo import TurboBackend
            from proj.ops.ultra_kernels import ultra_decode


            class UltraBackend(TurboBackend):
                def forward_ultra(self, x):
                    return ultra_decode(x)
        ''',
        "proj/platform.py": f'''
            from proj.backends.turbo import TurboBackend
            from proj.backends.ultra import UltraBackend


            class Platform:
                def pick_backend(self, cache_config):
                    if {test}:
                        return TurboBackend()
                    return None

                def pick_ultra(self, cache_config):
                    {ultra_pick}
                        return UltraBackend()
                    return None
        ''',
    }


def _turbo(report: dict) -> dict:
    return findings_at(report, "proj/ops/turbo_kernels.py", "NPU910")


def _all_info(found: dict) -> bool:
    return bool(found) and all(f["severity"] == "info" and CHOSEN in f["message"] for f in found.values())


def _all_error(found: dict) -> bool:
    return bool(found) and all(f["severity"] == "error" for f in found.values())


# ----------------------------------------------------------------------------- FC#8: a prefix test of the dtype
def test_backend_picked_by_a_dtype_prefix_off_at_the_default_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _files(), dedent=True))
    found = _turbo(report)
    assert _all_info(found), found
    message = next(iter(found.values()))["message"]
    assert "cache_config.cache_dtype.startswith('turboquant_')" in message, message
    assert "`CacheConfig.cache_dtype` defaults to 'auto'" in message, message


def test_backend_picked_by_a_prefix_the_default_has_keeps_the_error(tmp_path):
    # (nearest true case: "auto".startswith("au") is true: every NPU host picks it)
    report = migrate_json(write_project(tmp_path, _files(test='cache_config.cache_dtype.startswith("au")'), dedent=True))
    assert _all_error(_turbo(report)), _turbo(report)


def test_backend_picked_by_a_prefix_of_a_computed_value_keeps_the_error(tmp_path):
    # (nearest true case: a local computed from a call: not a config field's known value)
    test = 'self.detect_dtype().startswith("turboquant_")'
    report = migrate_json(write_project(tmp_path, _files(test=test), dedent=True))
    assert _all_error(_turbo(report)), _turbo(report)


def test_backend_picked_by_a_prefix_tuple_off_at_the_default_is_info(tmp_path):
    test = 'cache_config.cache_dtype.startswith(("turboquant_", "octave_"))'
    report = migrate_json(write_project(tmp_path, _files(test=test), dedent=True))
    assert _all_info(_turbo(report)), _turbo(report)


# ----------------------------------------------------------------------------- FB#12: a base reached through its subclass
def test_base_reached_only_through_an_opt_in_subclass_is_info(tmp_path):
    files = _files(test='cache_config.cache_dtype == "turboquant_k8v4"')
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    found = _turbo(report)
    assert _all_info(found), found
    message = next(iter(found.values()))["message"]
    assert "ultraquant_4bit" in message and "turboquant_k8v4" in message, message


def test_base_reached_through_a_subclass_built_ungated_keeps_the_error(tmp_path):
    # (nearest true case: the subclass is built on every NPU host, and with it the base's code)
    files = _files(test='cache_config.cache_dtype == "turboquant_k8v4"', ultra_pick="if True:")
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    assert _all_error(_turbo(report)), _turbo(report)


def test_subclass_of_reads_only_a_module_level_class_bases():
    from npu_migrate import astcache
    from npu_migrate.kvchoice31 import subclass_of

    tree = ast.parse("import pkg\nclass Sub(pkg.Base, metaclass=Meta):\n    x = Base\n")
    parents = astcache.parents(tree)
    names = {(n.lineno, getattr(n, "id", getattr(n, "attr", ""))): n for n in ast.walk(tree)
             if isinstance(n, (ast.Name, ast.Attribute))}
    assert subclass_of(tree, parents, names[(2, "Base")]) is tree.body[1]
    assert subclass_of(tree, parents, names[(2, "pkg")]) is tree.body[1]
    assert subclass_of(tree, parents, names[(2, "Meta")]) is None  # (a keyword: not a base)
    assert subclass_of(tree, parents, names[(3, "Base")]) is None  # (a class-level value)


# ----------------------------------------------------------------------------- FC#8: an aliased import, a deep chain
def _deep_files(pick: str = 'if cache_config.cache_dtype == "ultraquant_4bit":', ops_caller: str = "") -> dict:
    return {
        "proj/__init__.py": "",
        "proj/config/__init__.py": "",
        "proj/config/cache.py": '''
            from dataclasses import dataclass


            @dataclass
            class CacheConfig:
                cache_dtype: str = "auto"
        ''',
        "proj/ops/__init__.py": "",
        "proj/ops/soa.py": '''
            from vllm.triton_utils import tl, triton


            @triton.jit
            def _load_tile(x_ptr):
                return tl.load(x_ptr)


            @triton.jit
            def _inner(x_ptr):
                return _load_tile(x_ptr) + 1


            @triton.jit
            def _attn_kernel(x_ptr):
                tl.store(x_ptr, _inner(x_ptr))


            def soa_attention(x):
                _attn_kernel[(1,)](x)
                return x


            def soa_decode(x):
                return soa_attention(x)
        ''',
        "proj/backends/__init__.py": "",
        "proj/backends/turbo.py": f'''
            def _ops():
                from proj.ops.soa import soa_decode as decode

                return decode


            class TurboImpl:
                def forward(self, x):
                    return _ops()(x)


            class TurboBackend:
                @staticmethod
                def get_impl_cls():
                    return TurboImpl
            {ops_caller}
        ''',
        "proj/backends/ultra.py": '''
            from proj.backends.turbo import TurboBackend


            class UltraBackend(TurboBackend):
                name = "ultra"
        ''',
        "proj/platform.py": f'''
            from proj.backends.ultra import UltraBackend


            class Platform:
                def pick(self, cache_config):
                    {pick}
                        return UltraBackend
                    return None
        ''',
    }


def _soa(report: dict) -> dict:
    return findings_at(report, "proj/ops/soa.py", "NPU910")


def test_kernels_reached_through_an_alias_and_an_opt_in_subclass_are_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _deep_files(), dedent=True))
    found = _soa(report)
    assert _all_info(found), found
    assert "ultraquant_4bit" in next(iter(found.values()))["message"]


def test_kernels_reached_through_an_alias_the_library_calls_ungated_keep_the_error(tmp_path):
    # (nearest true case: the aliased wrapper is also called by library code every NPU host runs;
    # before round 31 the walk saw no reference through `as decode` at all)
    caller = "\n\ndef warmup(x):\n    return _ops()(x)\n"
    report = migrate_json(write_project(tmp_path, _deep_files(ops_caller=caller.replace("\n", "\n            ")),
                                        dedent=True))
    assert _all_error(_soa(report)), _soa(report)


def test_kernels_reached_through_a_subclass_picked_ungated_keep_the_error(tmp_path):
    # (nearest true case: the subclass is picked on every NPU host)
    report = migrate_json(write_project(tmp_path, _deep_files(pick="if cache_config is not None:"), dedent=True))
    assert _all_error(_soa(report)), _soa(report)
