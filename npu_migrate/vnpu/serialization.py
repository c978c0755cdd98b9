"""torch.save / torch.load of virtual-NPU tensors, as for a real device's tensors.

A tensor on ``npu:N`` is pickled as a plain tensor whose storage carries the location tag
``"npu:N"`` (what torch_npu writes). ``torch.load(f, map_location="cpu")`` therefore gives CPU
tensors (in any process, with or without the virtual device, ``weights_only=True`` included);
without ``map_location``, or with ``map_location="npu"``/``"npu:N"``, the storages come back on
the virtual device. A storage is recognised as a device storage by its address while a live
virtual-device tensor uses it (memory.py counts them).
"""

from __future__ import annotations

import torch
import torch._utils
import torch.serialization

from . import device as device_state
from . import memory

_ORIGINAL_REBUILD = None


def _tag(storage):
    index = memory.is_device_storage(storage.data_ptr()) if storage.device.type == "cpu" else None
    return None if index is None else f"npu:{index}"


def _deserialize(obj, location):
    if not location.startswith("npu"):
        return None
    target = torch.device(location)
    index = device_state.index_of(target)
    if isinstance(obj, torch.storage.TypedStorage):
        obj._untyped_storage._vnpu_index = index
    else:
        obj._vnpu_index = index
    return obj


def _rebuild_tensor(storage, storage_offset, size, stride):
    tensor = _ORIGINAL_REBUILD(storage, storage_offset, size, stride)
    untyped = getattr(storage, "_untyped_storage", storage)
    index = getattr(untyped, "_vnpu_index", None)
    if index is None:
        return tensor
    from .tensor import NPUTensor

    return NPUTensor(tensor, index)


def install() -> None:
    global _ORIGINAL_REBUILD
    if _ORIGINAL_REBUILD is not None:
        return
    _ORIGINAL_REBUILD = torch._utils._rebuild_tensor
    torch._utils._rebuild_tensor = _rebuild_tensor
    torch.serialization.register_package(5, _tag, _deserialize)
