"""What `has_triton()` answers on an NPU host, as the info notes on Triton kernels behind it say it
(issue #16, precision wave 26: round-25/23 audits BR#37, BR#21 read the old note as "never true on
an NPU host").

The notes guards15.GATED_KERNELS (module-level `if has_triton():` with an `else:`),
fp8shapes21.BUILDER (a builder function that returns early `if not has_triton()`) and
tritonguards.TRITON_GATED_IMPORTERS (a kernel module imported only behind the test) stay
information: the kernels run on an NPU host only where the user opts in. Which opt-in, read from
the torch_npu 2.7.1 wheel:

* torch's own `torch.utils._triton.has_triton()` asks for a `triton` package and a CUDA, XPU or
  CPU (Triton's CPU backend) device: False on an NPU host;
* `torch_npu.contrib.transfer_to_npu` sets it to `_patch_has_triton`, which returns False
  (contrib/transfer_to_npu.py:281, :465);
* `torch_npu._inductor` (imported by torch_npu's wrapper of `torch.compile`'s inductor backend,
  utils/_dynamo.py `register_inductor_npu`, or directly) runs `patch_has_triton`
  (_inductor/utils.py:44-82), whose `has_triton()` also counts an available "npu" device
  interface once a `triton` package imports: with Triton-Ascend (which installs `triton`)
  it is True there, and the kernels run on the NPU.

So the notes name Triton-Ascend, with torch_npu's inductor loaded, as the opt-in, and keep the
words "transfer_to_npu forces it False" (still true of that patcher). A module that did `from
torch.utils._triton import has_triton` before the inductor was loaded keeps the function it bound:
the notes say "whether the test holds there depends on what it probes".
"""

from __future__ import annotations

# the parenthesis the has_triton() notes give (no braces: it is spliced into format strings; no
# parentheses: the notes sit in one)
HAS_TRITON_ON_NPU = ("torch's own `has_triton()` also asks for a CUDA, XPU or CPU device, and torch_npu's "
                     "transfer_to_npu forces it False, but torch_npu's inductor backend `torch_npu._inductor`, "
                     "loaded by `torch.compile` or imported, replaces it with one that counts the NPU where a "
                     "`triton` package imports: installing Triton-Ascend is the opt-in")
