"""Device state of the virtual Ascend NPU: how many devices, which one is current.

``NPU_MIGRATE_VNPU_COUNT`` (set by ``npu-migrate vnpu --npus N``) gives the number of devices;
without it ``ASCEND_RT_VISIBLE_DEVICES`` is parsed as torch_npu does (comma-separated digits,
parsing stops at the first other character, the list must be strictly ascending or there are no
devices; an empty string means none); without either there is one device.
"""

from __future__ import annotations

import itertools
import os
import threading

import torch

COUNT_ENV = "NPU_MIGRATE_VNPU_COUNT"
VISIBLE_ENV = "ASCEND_RT_VISIBLE_DEVICES"
DEVICE_NAME = "Ascend910B-virtual"  # what get_device_name() reports
TOTAL_MEMORY = 64 * 1024 ** 3  # what get_device_properties().total_memory reports


def parse_visible_devices(text: str) -> int:
    """The number of devices an ``ASCEND_RT_VISIBLE_DEVICES`` value makes visible."""
    ids: list[int] = []
    for part in text.split(","):
        digits = ""
        for char in part.strip():
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        ids.append(int(digits))
        if digits != part.strip():
            break  # parsing stops at the first character that is not a digit
    if any(b <= a for a, b in itertools.pairwise(ids)):
        return 0  # not strictly ascending: torch_npu's HAL path reports no device
    return len(ids)


def device_count() -> int:
    value = os.environ.get(COUNT_ENV)
    if value is not None and value.strip():
        return max(0, int(value))
    visible = os.environ.get(VISIBLE_ENV)
    if visible is not None:
        return parse_visible_devices(visible)
    return 1


_state = threading.local()


def current_device() -> int:
    return getattr(_state, "index", 0)


def index_of(device, *, allow_none: bool = True) -> int:
    """The device index of an int, a str ("npu", "npu:1"), a torch.device or None (current)."""
    if device is None:
        if not allow_none:
            raise ValueError("a device is required")
        return current_device()
    if isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        if isinstance(device, str):
            device = torch.device(device)
        if not isinstance(device, torch.device):
            raise TypeError(f"Expected a npu device, but got: {device!r}")
        if device.type != "npu":
            raise ValueError(f"Expected a npu device, but got: {device}")
        index = current_device() if device.index is None else device.index
    count = device_count()
    if not 0 <= index < count:
        raise RuntimeError(
            f"Invalid device ordinal {index}: the virtual NPU has {count} device(s) "
            f"(set {COUNT_ENV} or {VISIBLE_ENV})")
    return index


def set_device(device) -> None:
    if isinstance(device, (int, str, torch.device)) and not (
            isinstance(device, int) and device < 0):
        _state.index = index_of(device)


class DeviceContext:
    """``torch.npu.device(index)``: makes a device current for a ``with`` block."""

    def __init__(self, device):
        self.idx = -1 if device is None else index_of(device)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = current_device()
        if self.idx >= 0:
            _state.index = self.idx
        return self

    def __exit__(self, *exc_info):
        if self.idx >= 0:
            _state.index = self.prev_idx
        return False


class DeviceOf(DeviceContext):
    """``torch.npu.device_of(tensor)``: the tensor's device for a ``with`` block."""

    def __init__(self, obj):
        dev = getattr(obj, "device", None)
        super().__init__(dev.index if dev is not None and dev.type == "npu" else None)


class DeviceProperties:
    """What torch_npu documents for get_device_properties: no major/minor."""

    def __init__(self, index: int):
        self.name = DEVICE_NAME
        self.total_memory = TOTAL_MEMORY
        self.L2_cache_size = 192 * 1024 ** 2
        self.cube_core_num = 24
        self.vector_core_num = 48
        self.index = index

    def __repr__(self):
        return (f"_NPUDeviceProperties(name='{self.name}', "
                f"total_memory={self.total_memory // 1024 ** 2}MB, cube_core_num="
                f"{self.cube_core_num}, vector_core_num={self.vector_core_num}, "
                f"L2_cache_size={self.L2_cache_size // 1024 ** 2}MB)")
