"""Issue #16 wave 26 (h116), vLLM's model_executor: a lazy CUDA-only import inside a function of a
module that offers a probe of the package (probedsites26.py, round-22 BE#9), and a function
registered as a torch op whose every `torch.ops` call lies in a platform-dispatched op's CUDA
method (customops26.py, BK#7). Each paired with the nearest case that stays reported."""

from __future__ import annotations

from .precision_helpers import findings_at, migrate_json, scopes_at, write_project

PROBED = {
    "pkg/__init__.py": "",
    "pkg/ops/__init__.py": "",
    "pkg/ops/_common.py": '''
        import torch

        def is_cute_available(name):
            try:
                import cutlass
                import cutlass.cute
            except ImportError:
                return False
            return True
    ''',
    # (the module offers `is_available()` for its callers to ask first)
    "pkg/ops/router.py": '''
        import torch
        from ._common import is_cute_available

        def is_available():
            return is_cute_available("router")

        class RouterGemm:
            def _compile(self, key):
                from cutlass import BFloat16, Float32
                return BFloat16, Float32, key

            def __call__(self, x, w):
                self._compile(x.shape)
                return x @ w
    ''',
    # (nearest true case: the same lazy import, no probe offered)
    "pkg/ops/plain.py": '''
        import torch

        class PlainGemm:
            def _compile(self, key):
                from cutlass import BFloat16, Float32
                return BFloat16, Float32, key
    ''',
    # (a probe of another package says nothing of `cutlass`)
    "pkg/ops/other.py": '''
        import torch

        def is_available():
            try:
                import deep_gemm
            except ImportError:
                return False
            return True

        def compile_kernel(key):
            from cutlass import BFloat16
            return BFloat16, key
    ''',
    # (the holder runs at import time: the import fails there)
    "pkg/ops/eager.py": '''
        import torch
        from ._common import is_cute_available

        def is_available():
            return is_cute_available("eager")

        def _load():
            from cutlass import BFloat16
            return BFloat16

        DTYPE = _load()
    ''',
    # (a constructor guarding its own work with a try-import is no probe the module offers)
    "pkg/ops/runner.py": '''
        import torch

        class Runner:
            def __init__(self):
                try:
                    import flashinfer.comm
                except ImportError:
                    self.ok = False

            def finalize(self, x):
                from flashinfer.comm import finalize
                return finalize(x)
    ''',
    "pkg/layer.py": '''
        import torch
        from pkg.ops.router import RouterGemm, is_available
        from pkg.ops.plain import PlainGemm
        from pkg.ops import other, eager, runner

        class Layer(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.g = RouterGemm() if is_available() else None
                self.p = PlainGemm()

            def forward(self, x, w):
                if self.g is not None:
                    return self.g(x, w)
                return other.compile_kernel(x) or eager.DTYPE or runner.Runner().finalize(x)
    ''',
}


def test_lazy_import_in_a_probing_module_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, PROBED, dedent=True))
    routed = findings_at(report, "pkg/ops/router.py", "NPU911")
    assert routed[10]["severity"] == "info", routed
    message = routed[10]["message"]
    assert "imported only inside `_compile`" in message and "`is_available()`" in message
    assert "is_cute_available" in message and "only a call that skips it reaches this import" in message
    assert findings_at(report, "pkg/ops/plain.py", "NPU911")[6]["severity"] == "error"
    assert findings_at(report, "pkg/ops/other.py", "NPU911")[12]["severity"] == "error"
    assert findings_at(report, "pkg/ops/eager.py", "NPU911")[9]["severity"] == "error"
    runner = findings_at(report, "pkg/ops/runner.py", "NPU911")[7]
    assert runner["severity"] == "error" and "also at line 12" in runner["message"]


OPS = {
    "pkg/__init__.py": "",
    "pkg/custom_op.py": '''
        import torch
        import torch.nn as nn

        class CustomOp(nn.Module):
            def forward(self, *args):
                return self.dispatch_forward()(*args)

            def forward_native(self, *args):
                raise NotImplementedError

            def forward_cuda(self, *args):
                raise NotImplementedError

            def forward_oot(self, *args):
                return self.forward_native(*args)

        def register_op(op_name, op_func, mutates_args=()):
            lib = torch.library.Library("proj", "FRAGMENT")
            lib.define(op_name)
            lib.impl(op_name, op_func, "CUDA")
    ''',
    "pkg/rope_common.py": '''
        import torch
        from pkg.custom_op import register_op

        def _fast_rope(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> None:
            from flashinfer.rope import apply_rope_inplace
            apply_rope_inplace(positions, query, key)

        register_op(op_name="fast_rope", op_func=_fast_rope, mutates_args=["query", "key"])

        def _slow_rope(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> None:
            from flashinfer.rope import apply_rope_slow
            apply_rope_slow(positions, query, key)

        register_op(op_name="slow_rope", op_func=_slow_rope, mutates_args=["query", "key"])

        def _named_rope(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> None:
            from flashinfer.rope import apply_rope_named
            apply_rope_named(positions, query, key)

        register_op("named_rope", _named_rope)

        def _direct_rope(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> None:
            from flashinfer.rope import apply_rope_direct
            apply_rope_direct(positions, query, key)

        register_op("direct_rope", _direct_rope)
    ''',
    "pkg/rope.py": '''
        import torch
        from pkg.custom_op import CustomOp
        from pkg.rope_common import _direct_rope

        class Rope(CustomOp):
            def __init__(self, use_fast):
                super().__init__()
                self.use_fast = use_fast

            def forward_native(self, positions, query, key):
                torch.ops.proj.slow_rope(positions, query, key)
                return query, key

            def forward_cuda(self, positions, query, key):
                if self.use_fast:
                    torch.ops.proj.fast_rope(positions, query, key)
                    torch.ops.proj.direct_rope(positions, query, key)
                    getattr(torch.ops.proj, "named_rope")(positions, query, key)
                    torch.ops.proj.named_rope.default(positions, query, key)
                    return query, key
                return self.forward_native(positions, query, key)

        def plain(positions, query, key):
            return _direct_rope(positions, query, key)
    ''',
}


def test_op_called_only_from_a_cuda_method_is_a_scope(tmp_path):
    report = migrate_json(write_project(tmp_path, OPS, dedent=True))
    scopes = scopes_at(report, "pkg/rope_common.py", "NPU911")
    assert 6 in scopes, (scopes, report["findings"])
    assert "registered as the op `fast_rope`" in scopes[6] and "Rope.forward_cuda" in scopes[6]
    assert set(scopes) == {6}, scopes
    kept = findings_at(report, "pkg/rope_common.py", "NPU911")
    # (called from forward_native; named in another string; called directly too: one error)
    assert kept[12]["severity"] == "error" and "also at lines 18, 24" in kept[12]["message"], kept


SETTINGS = {
    "pkg/__init__.py": "",
    "pkg/custom_op.py": '''
        import torch.nn as nn

        class CustomOp(nn.Module):
            def forward_native(self, *args):
                raise NotImplementedError

            def forward_cuda(self, *args):
                raise NotImplementedError

            def forward_oot(self, *args):
                return self.forward_native(*args)
    ''',
    "pkg/tune.py": '''
        import torch

        def fast_autotune(x):
            from flashinfer.autotuner import AutoTuner
            return AutoTuner(x)
    ''',
    "pkg/tune2.py": '''
        import torch

        def other_autotune(x):
            from flashinfer.autotuner import AutoTuner
            return AutoTuner(x, 2)
    ''',
    "pkg/layer.py": '''
        import torch
        from pkg.custom_op import CustomOp
        from pkg.tune import fast_autotune
        from pkg.tune2 import other_autotune

        class Layer(CustomOp):
            def forward_native(self, x):
                return x

            def forward_cuda(self, x):
                fast_autotune(x)
                other_autotune(x)
                return x
    ''',
    # (a CPU test calling both with the package stubbed: callees22 cannot decide it, callersonly does)
    "tests/test_tune.py": '''
        import sys
        import types
        from pkg.tune import fast_autotune
        from pkg.tune2 import other_autotune

        def test_tune(monkeypatch):
            monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
            mod = types.ModuleType("flashinfer.autotuner")
            mod.AutoTuner = lambda *a: a
            monkeypatch.setitem(sys.modules, "flashinfer.autotuner", mod)
            assert fast_autotune(1) and other_autotune(1)
    ''',
    # (a recipe's flag named after the feature, another identifier holding the name: no callers)
    "recipes/a.yaml": '''
        model: foo
        fast_autotune: true  # tune at start-up
        context_length: 1024
    ''',
    "docs/tuning.md": '''
        Pass `{"enable_fast_autotune": false}` to skip it; the cache lives in `fast_autotune_cache/`.
    ''',
    # (nearest true case: a dotted path to the other helper, a caller the parse cannot see)
    "recipes/b.yaml": '''
        hooks:
          - _target_: pkg.tune2.other_autotune
    ''',
}


def test_helper_named_only_as_a_setting_key_is_a_scope(tmp_path):
    report = migrate_json(write_project(tmp_path, SETTINGS, dedent=True))
    scopes = scopes_at(report, "pkg/tune.py", "NPU911")
    assert 5 in scopes and "`fast_autotune` is referenced only at" in scopes[5], (scopes, report["findings"])
    assert findings_at(report, "pkg/tune2.py", "NPU911")[5]["severity"] == "error"


def test_names_helper_reads_setting_keys_only():
    from npu_migrate.configkeys26 import names_helper

    assert not names_helper(b"a: 1\nfast_autotune: true\n", "fast_autotune")
    assert not names_helper(b"  - fast_autotune: 0  # off\n", "fast_autotune")
    assert not names_helper(b"enable_fast_autotune: true\nfast_autotune_v2: x\n", "fast_autotune")
    assert names_helper(b"_target_: pkg.tune.fast_autotune\n", "fast_autotune")
    assert names_helper(b"fast_autotune: pkg.tune\n", "fast_autotune")
    assert names_helper(b"fast_autotune:\n  x: 1\n", "fast_autotune")
    assert names_helper(b"call fast_autotune(x) first\n", "fast_autotune")
