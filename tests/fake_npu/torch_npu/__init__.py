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
"""

import torch

__version__ = "2.7.1.fake"

calls = []  # (name, args, kwargs) of every torch.npu call, in order

from . import npu  # noqa: E402  (needs ``calls`` above)


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
