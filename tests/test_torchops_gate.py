"""A device check in front of a call that reaches a Triton kernel through a custom op the same file
registers (round 30 EA#2, vLLM's qwen3_dflash2.py): `if hidden_states.is_cuda: return
grouped_conv(x)` where `grouped_conv` calls `torch.ops.vllm.grouped_conv`, registered by
`direct_register_custom_op(op_name="grouped_conv", op_func=conv_impl)` whose `conv_impl` launches
the file's Triton kernel. Widened to the NPU, the check sent NPU tensors into the CUDA Triton
kernel where the original took the native path: it must stay CUDA (issue #16, section 1)."""

from __future__ import annotations

from click.testing import CliRunner

from npu_migrate.cli import main
from tests.precision_helpers import write_project

MODULE = '''\
import torch
import triton
import triton.language as tl
from vllm.utils.torch_utils import direct_register_custom_op


@triton.jit
def _conv_kernel(x_ptr, out_ptr, n):
    pass


def conv_impl(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    _conv_kernel[(1,)](x, out, x.numel())
    return out


def conv_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


direct_register_custom_op(REGISTRATION, fake_impl=conv_fake)


def grouped_conv(x):
    return torch.ops.vllm.grouped_conv(x)


def run(hidden_states):
    if hidden_states.is_cuda:
        return grouped_conv(hidden_states)
    return hidden_states * 2
'''


def _migrated(tmp_path, registration: str) -> str:
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/conv.py": MODULE.replace("REGISTRATION", registration)})
    result = CliRunner().invoke(main, ["migrate", str(root), "--no-cache", "--isolated", "--allow-dirty", "-j", "1"],
                                catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return (root / "pkg" / "conv.py").read_text()


def test_a_check_in_front_of_a_registered_op_that_launches_a_triton_kernel_stays_cuda(tmp_path):
    for registration in ('op_name="grouped_conv", op_func=conv_impl', '"grouped_conv", conv_impl'):
        text = _migrated(tmp_path / registration[:3], registration)
        assert "    if hidden_states.is_cuda:\n" in text, text
        assert "on_accelerator" not in text


def test_an_op_registered_elsewhere_is_not_read_as_this_files_kernel(tmp_path):
    """The nearest true case: the file registers another op; `torch.ops.vllm.grouped_conv` is not
    its kernel's, and the check is widened as before."""
    text = _migrated(tmp_path, 'op_name="other_conv", op_func=conv_impl')
    assert "if npu_compat.on_accelerator(hidden_states):" in text, text
