"""Memory statistics of the virtual NPU: bytes held by live virtual-device tensors.

Every tensor on the virtual device keeps a CPU tensor inside; its storage is counted once per
device while at least one virtual-device tensor (a view included) refers to it. ``reserved``
follows torch_npu's caching allocator loosely: it is the high-water mark of ``allocated`` since
the last ``empty_cache()``, rounded up to 2 MiB blocks. No limit is enforced.
"""

from __future__ import annotations

import threading
from collections import defaultdict

_BLOCK = 2 * 1024 ** 2

_lock = threading.Lock()
_refs: dict[tuple[int, int], int] = defaultdict(int)  # (device, storage ptr) -> live tensors
_sizes: dict[tuple[int, int], int] = {}
_allocated: dict[int, int] = defaultdict(int)
_peak: dict[int, int] = defaultdict(int)
_reserved: dict[int, int] = defaultdict(int)
_peak_reserved: dict[int, int] = defaultdict(int)
_alloc_count: dict[int, int] = defaultdict(int)
_free_count: dict[int, int] = defaultdict(int)
_ptr_device: dict[int, int] = {}  # storage ptr -> device index, while counted


def _round(nbytes: int) -> int:
    return -(-nbytes // _BLOCK) * _BLOCK


def storage_key(inner) -> tuple[int, int]:
    storage = inner.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


def track(inner, index: int):
    """Count ``inner``'s storage on device ``index``; returns the key to ``release`` when the
    tensor holding it dies (None when there is nothing to count)."""
    ptr, nbytes = storage_key(inner)
    if not ptr:
        return None
    key = (index, ptr)
    with _lock:
        _refs[key] += 1
        if _refs[key] == 1:
            _sizes[key] = nbytes
            _ptr_device[ptr] = index
            _allocated[index] += nbytes
            _alloc_count[index] += 1
            _peak[index] = max(_peak[index], _allocated[index])
            if _allocated[index] > _reserved[index]:
                _reserved[index] = _round(_allocated[index])
                _peak_reserved[index] = max(_peak_reserved[index], _reserved[index])
    return key


def release(key) -> None:
    if key is None:
        return
    with _lock:
        _refs[key] -= 1
        if _refs[key] <= 0:
            del _refs[key]
            index = key[0]
            _allocated[index] -= _sizes.pop(key, 0)
            _ptr_device.pop(key[1], None)
            _free_count[index] += 1


def is_device_storage(ptr: int) -> int | None:
    """The device index whose live tensors use the storage at ``ptr``, or None."""
    return _ptr_device.get(ptr)


def allocated(index: int) -> int:
    return _allocated[index]


def max_allocated(index: int) -> int:
    return _peak[index]


def reserved(index: int) -> int:
    return _reserved[index]


def max_reserved(index: int) -> int:
    return _peak_reserved[index]


def reset_peak(index: int) -> None:
    with _lock:
        _peak[index] = _allocated[index]
        _peak_reserved[index] = _reserved[index]


def reset_accumulated(index: int) -> None:
    with _lock:
        _alloc_count[index] = 0
        _free_count[index] = 0


def empty_cache() -> None:
    with _lock:
        for index in list(_reserved):
            _reserved[index] = _round(_allocated[index])


def stats(index: int) -> dict:
    """A subset of torch_npu's memory_stats() keys, with the same names."""
    out = {}
    for pool in ("all", "large_pool", "small_pool"):
        for name, value, peak in (("allocated_bytes", _allocated[index], _peak[index]),
                                  ("reserved_bytes", _reserved[index], _peak_reserved[index]),
                                  ("active_bytes", _allocated[index], _peak[index])):
            out[f"{name}.{pool}.current"] = value if pool == "all" else 0
            out[f"{name}.{pool}.peak"] = peak if pool == "all" else 0
        out[f"allocation.{pool}.allocated"] = _alloc_count[index] if pool == "all" else 0
        out[f"allocation.{pool}.freed"] = _free_count[index] if pool == "all" else 0
    out["num_alloc_retries"] = 0
    out["num_ooms"] = 0
    return dict(sorted(out.items()))
