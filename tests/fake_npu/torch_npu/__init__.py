"""A fake ``torch_npu`` for tests: importing it makes code believe an Ascend NPU is present.

It registers the PrivateUse1 backend as ``npu`` and installs ``torch.npu`` (this package's ``npu``
submodule) the way the real torch_npu does. Every ``torch.npu`` function records its call in
``torch_npu.calls`` as ``(name, args, kwargs)`` and does nothing else, so tests can assert which
function was dispatched to. Real tensors cannot move to this "npu" device: tests check dispatch,
not computation.

Only names that the real torch_npu has are defined (a double that invented names would hide
bugs). Knobs, read at call time:
- ``FAKE_TORCH_NPU_DEVICE_COUNT`` (default 2): what ``device_count()`` returns; 0 means
  ``is_available()`` is False, as on a host with torch_npu but no NPU.
- ``TORCH_NPU_DEVICE_CAPABILITY`` ("major.minor"): as in the real torch_npu,
  ``get_device_capability()`` returns None unless it is set.
- ``FAKE_TORCH_NPU_VERSION`` ("2.7.1" default, or "2.14.0"): the torch_npu surface emulated by
  the attention operators (``_attention_ops``: npu_fusion_attention, npu_fusion_attention_v3 on
  2.14.0 only, npu_incre_flash_attention, npu_fused_infer_attention_score). Unlike the rest,
  these compute: their kernels are the plain-torch reference model in
  tests/attention_reference.py, on CPU tensors. They record ``(op name, args, kwargs)`` in
  ``calls`` as passed by the caller.
"""

import os

import torch

__version__ = os.environ.get("FAKE_TORCH_NPU_VERSION", "2.7.1") + ".fake"

calls = []  # (name, args, kwargs) of every torch.npu call, in order

from . import npu  # noqa: E402  (needs ``calls`` above)
from . import _attention_ops  # noqa: E402

for _name in _attention_ops.OPS:
    globals()[_name] = getattr(_attention_ops, _name)
del _name


def _register():
    # Rename PrivateUse1 once; renaming to the same name twice is harmless but skip it anyway.
    if torch._C._get_privateuse1_backend_name() != "npu":
        torch.utils.rename_privateuse1_backend("npu")
    if getattr(torch, "npu", None) is not npu:
        try:
            torch._register_device_module("npu", npu)
        except RuntimeError:  # already registered (or this torch refuses): set it directly
            setattr(torch, "npu", npu)
    if not hasattr(torch.Tensor, "is_npu"):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_storage=True
        )


_register()
