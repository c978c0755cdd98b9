"""Helper h141: code only a platform-dispatched op's `forward_cuda` reaches (issue #16, audit rounds
29-30: EB#3, EC#21), each reading paired with its nearest true case that stays reported.

- customops26.py (EB#3): a function registered as an op under its own name (`op_name="attn_wrapper",
  op_func=attn_wrapper`): the `torch.ops.<ns>.attn_wrapper` calls are the op's, not other
  references of the function; a test calling the public wrapper a few callers up is named (policy
  P2). Nearest true: the CustomOp's `forward_native` (the NPU path) calls the same method.
- namesakes30.py via callersonly.py (EC#21): a file binding the helper's name only by an import of
  another module's namesake, and a registry key of another class (`@CustomOp.register("name")`),
  are not the helper's references. Nearest true: the file imports the helper's own module.
"""

from __future__ import annotations

from tests.precision_helpers import findings_at, migrate_json, write_project

_CUSTOM_OP = '''
    import torch.nn as nn


    class CustomOp(nn.Module):
        @classmethod
        def register(cls, name):
            def wrap(op_cls):
                return op_cls
            return wrap

        def forward(self, *args):
            return self.dispatch_forward()(*args)

        def forward_native(self, *args):
            raise NotImplementedError

        def forward_cuda(self, *args):
            raise NotImplementedError

        def forward_oot(self, *args):
            return self.forward_native(*args)


    def register_op(op_name, op_func, fake_impl=None):
        import torch

        lib = torch.library.Library("proj", "FRAGMENT")
        lib.define(op_name)
        lib.impl(op_name, op_func, "CUDA")
'''


# ----------------------------------------------------------------------------- EB#3: op named as its function
def _attention_project(native_calls_cuda_path: bool) -> dict:
    native = "return self._forward_cudnn(q, k, v)" if native_calls_cuda_path else "return self._forward_sdpa(q, k, v)"
    return {
        "pkg/__init__.py": "",
        "pkg/custom_op.py": _CUSTOM_OP,
        "pkg/ops/__init__.py": "",
        "pkg/ops/wrappers.py": '''
            import torch
            from pkg.custom_op import register_op


            def attn_wrapper(q, k, v):
                from flashinfer.prefill import cudnn_prefill

                return cudnn_prefill(q, k, v)


            def attn_wrapper_fake(q, k, v):
                return torch.empty_like(q)


            register_op(op_name="attn_wrapper", op_func=attn_wrapper, fake_impl=attn_wrapper_fake)


            def vit_attn_wrapper(q, k, v):
                return torch.ops.proj.attn_wrapper(q, k, v)
        ''',
        "pkg/encoder_attention.py": f'''
            import torch
            from pkg.custom_op import CustomOp
            from pkg.ops.wrappers import vit_attn_wrapper


            class EncoderAttention(CustomOp):
                def _forward_sdpa(self, q, k, v):
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v)

                def _forward_cudnn(self, q, k, v):
                    return vit_attn_wrapper(q, k, v)

                def forward_native(self, q, k, v):
                    {native}

                def forward_cuda(self, q, k, v):
                    return self._forward_cudnn(q, k, v)
        ''',
        "tests/test_wrappers.py": '''
            import torch
            from pkg.ops.wrappers import vit_attn_wrapper


            def test_wrapper():
                q = torch.randn(2, 4, 8)
                vit_attn_wrapper(q, q, q)
        ''',
    }


def test_op_named_as_its_function_reached_only_from_forward_cuda_is_info_naming_the_test(tmp_path):
    report = migrate_json(write_project(tmp_path, _attention_project(False), dedent=True))
    kept = findings_at(report, "pkg/ops/wrappers.py", "NPU911")
    assert kept[7]["severity"] == "info", kept
    message = kept[7]["message"]
    assert "reached on an NPU host only from tests/benchmarks (tests/test_wrappers.py:8)" in message, message
    assert "registered as the op `attn_wrapper`" in message and "EncoderAttention.forward_cuda" in message, message


def test_op_named_as_its_function_reached_from_forward_native_stays_an_error(tmp_path):
    # (nearest true case: the NPU host's path, forward_oot -> forward_native, calls the same method)
    report = migrate_json(write_project(tmp_path, _attention_project(True), dedent=True))
    kept = findings_at(report, "pkg/ops/wrappers.py", "NPU911")
    assert kept[7]["severity"] == "error", kept


# ----------------------------------------------------------------------------- EC#21: a namesake elsewhere
def _gated_norm_project(model_imports: str, registration: str = '@CustomOp.register("rms_norm_gated")') -> dict:
    return {
        "pkg/__init__.py": "",
        "pkg/custom_op.py": _CUSTOM_OP,
        "pkg/ops/__init__.py": "",
        "pkg/ops/gated.py": '''
            import torch
            from pkg.triton_utils import tl, triton


            @triton.jit
            def _gated_norm_kernel(x_ptr, z_ptr, n, BLOCK: tl.constexpr):
                offs = tl.arange(0, BLOCK)
                x = tl.load(x_ptr + offs, mask=offs < n)
                tl.store(z_ptr + offs, x, mask=offs < n)


            def _gated_norm_fwd(x, z):
                _gated_norm_kernel[(1,)](x, z, x.numel(), BLOCK=1024)
                return z


            def rms_norm_gated(x, z):
                return _gated_norm_fwd(x, z)
        ''',
        "pkg/triton_utils.py": '''
            try:
                import triton
                import triton.language as tl
            except ImportError:
                triton = None
                tl = None
        ''',
        "pkg/mixer.py": '''
            import torch
            from pkg.custom_op import CustomOp
            from pkg.ops.gated import rms_norm_gated


            class MixerNormGated(CustomOp):
                def forward_native(self, x, z):
                    return x * torch.nn.functional.silu(z)

                def forward_cuda(self, x, z):
                    return rms_norm_gated(x, z)
        ''',
        "pkg/third/__init__.py": "",
        "pkg/third/fla.py": '''
            import torch


            def rms_norm_gated(x, g):
                return x * torch.sigmoid(g)
        ''',
        "pkg/models/__init__.py": "",
        "pkg/models/model.py": f'''
            {model_imports}


            def forward(x, g):
                return rms_norm_gated(x, g)
        ''',
        "pkg/layernorm.py": f'''
            import torch
            from pkg.custom_op import CustomOp


            {registration}
            class RMSNormGated(CustomOp):
                def forward_native(self, x, z):
                    return x * z
        ''',
    }


def test_kernel_whose_helper_is_named_elsewhere_only_by_namesakes_is_not_run(tmp_path):
    report = migrate_json(write_project(
        tmp_path, _gated_norm_project("from pkg.third.fla import rms_norm_gated"), dedent=True))
    kept = findings_at(report, "pkg/ops/gated.py", "NPU910")
    assert not kept or all(f["severity"] == "info" for f in kept.values()), kept
    scopes = [s for s in report["skipped"] if s.get("path") == "pkg/ops/gated.py" and "start_line" in s]
    assert any("called only from code an NPU host does not run" in s["reason"]
               and "MixerNormGated.forward_cuda" in s["reason"] for s in scopes), scopes


def test_kernel_whose_helper_a_plain_function_imports_stays_an_error(tmp_path):
    # (nearest true case: the model imports the helper's own module, and calls it on every host)
    report = migrate_json(write_project(
        tmp_path, _gated_norm_project("from pkg.ops.gated import rms_norm_gated"), dedent=True))
    kept = findings_at(report, "pkg/ops/gated.py", "NPU910")
    assert kept and any(f["severity"] == "error" for f in kept.values()), kept


def test_kernel_whose_helper_name_a_call_looks_up_stays_an_error(tmp_path):
    # (nearest true case of the registry key: the string handed to a plain call, which may look the
    # helper up by name, not to a decorator over another class)
    report = migrate_json(write_project(
        tmp_path, _gated_norm_project("from pkg.third.fla import rms_norm_gated",
                                      'OPS = CustomOp.lookup("rms_norm_gated")'), dedent=True))
    kept = findings_at(report, "pkg/ops/gated.py", "NPU910")
    assert kept and any(f["severity"] == "error" for f in kept.values()), kept


# ----------------------------------------------------------------------------- EC#16: strings naming no module
def _kept_check_project(test_text: str) -> dict:
    return {
        "pkg/__init__.py": "",
        "pkg/step/__init__.py": "",
        "pkg/step/ops/__init__.py": "",
        "pkg/step/ops/rms_norm.py": '''
            import cutlass
            import torch


            def rms_norm(x, weight, eps):
                return x
        ''',
        "pkg/step/layernorm.py": '''
            import torch


            def _torch_rms_norm(x, weight, eps):
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


            def step_rms_norm(x, weight, eps):
                if x.is_cuda:
                    from .ops.rms_norm import rms_norm
                    return rms_norm(x, weight, eps)
                return _torch_rms_norm(x, weight, eps)
        ''',
        "tests/test_custom_ops.py": test_text,
    }


_TOGGLES = '''
    import os

    ENV = dict(__import__("os").environ)
    OPS = ["-rms_norm", "+rms_norm", "rms_norm"]


    def test_toggles():
        assert OPS
'''


def test_module_whose_name_only_op_toggles_and_literal_imports_spell_is_not_imported(tmp_path):
    report = migrate_json(write_project(tmp_path, _kept_check_project(_TOGGLES), dedent=True))
    kept = findings_at(report, "pkg/step/ops/rms_norm.py", "NPU911")
    assert not kept or all(f["severity"] == "info" for f in kept.values()), kept
    scopes = [s for s in report["skipped"] if s.get("path") == "pkg/step/ops/rms_norm.py" and "start_line" in s]
    assert any("imported only where an NPU host does not go" in s["reason"] and "x.is_cuda" in s["reason"]
               for s in scopes), scopes


def test_module_whose_bare_name_a_computed_import_may_load_stays_an_error(tmp_path):
    # (nearest true case: the file imports by a computed name, so its bare "rms_norm" may be the module)
    text = _TOGGLES.replace('dict(__import__("os").environ)', 'import_module("pkg.step.ops." + OPS[2])').replace(
        "import os", "from importlib import import_module")
    report = migrate_json(write_project(tmp_path, _kept_check_project(text), dedent=True))
    kept = findings_at(report, "pkg/step/ops/rms_norm.py", "NPU911")
    assert kept and any(f["severity"] == "error" for f in kept.values()), kept


# ----------------------------------------------------------------------------- EC#31: a benchmark beside a gated import
def _benchmarked_project(library_gate: str) -> dict:
    return {
        "pkg/__init__.py": "",
        "pkg/platforms.py": '''
            class _Platform:
                def is_cuda(self):
                    return False

            current_platform = _Platform()
        ''',
        "pkg/dsv/__init__.py": "",
        "pkg/dsv/nvidia/__init__.py": "",
        "pkg/dsv/nvidia/ops/__init__.py": "",
        "pkg/dsv/nvidia/ops/fused_q_dsl.py": '''
            import cutlass
            import torch


            def fused_q_dsl(q):
                return q
        ''',
        "pkg/dsv/kernels.py": f'''
            import torch
            from pkg.platforms import current_platform


            def fused_q(q):
                {library_gate}
                    from pkg.dsv.nvidia.ops.fused_q_dsl import fused_q_dsl
                    return fused_q_dsl(q)
                return q
        ''',
        "benchmarks/kernels/benchmark_fused_q_dsl.py": '''
            import torch


            def run(q):
                from pkg.dsv.nvidia.ops import fused_q_dsl as C
                return C.fused_q_dsl(q)
        ''',
    }


def test_module_imported_by_a_benchmark_beside_a_cuda_gated_library_import_is_info_naming_it(tmp_path):
    report = migrate_json(write_project(tmp_path, _benchmarked_project("if current_platform.is_cuda():"), dedent=True))
    kept = findings_at(report, "pkg/dsv/nvidia/ops/fused_q_dsl.py", "NPU911")
    assert kept and all(f["severity"] == "info" for f in kept.values()), kept
    message = next(iter(kept.values()))["message"]
    assert "reached on an NPU host only from tests/benchmarks (benchmarks/kernels/benchmark_fused_q_dsl.py:6)" \
        in message and "pkg/dsv/kernels.py:" in message, message


def test_module_imported_by_a_benchmark_and_an_ungated_library_import_stays_an_error(tmp_path):
    # (nearest true case: the library's own import runs on every host)
    report = migrate_json(write_project(tmp_path, _benchmarked_project("if True:"), dedent=True))
    kept = findings_at(report, "pkg/dsv/nvidia/ops/fused_q_dsl.py", "NPU911")
    assert kept and any(f["severity"] == "error" for f in kept.values()), kept


def test_the_benchmark_words_restated_in_importgates_match_testcallers27():
    from npu_migrate import importgates, testcallers27

    assert importgates.BENCH_ONLY == testcallers27.ONLY_TESTS
    for path in ("benchmarks/kernels/b.py", "pkg/bench_x.py", "pkg/benchmarking.py", "pkg/ops/x.py"):
        assert bool(importgates.BENCH_FILE.search(path)) == (
            testcallers27.test_side(path) and not importgates.is_test(path)), path
