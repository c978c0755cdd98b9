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
