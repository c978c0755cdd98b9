"""The emulated functions of ``torch_npu.npu`` (``torch.npu``), by name.

``implementations()`` maps a name of the torch_npu API table (the last component) to what the
virtual NPU does for it. api_surface.py places each under every module of the table that has
the name; what is not here is "in the table but not emulated".
"""

from __future__ import annotations

import collections
import itertools
import os

import torch

from . import amp, memory, streams
from . import device as dev

# -- device ----------------------------------------------------------------------------------


def is_available():
    return dev.device_count() > 0


def device_count():
    return dev.device_count()


def set_device(device):
    dev.set_device(device)


def current_device():
    return dev.current_device()


def synchronize(device=None):
    if device is not None:
        dev.index_of(device)


def init():
    return None


def is_initialized():
    return True


def can_device_access_peer(device_id, peer_device_id):
    dev.index_of(device_id)
    dev.index_of(peer_device_id)
    return device_id != peer_device_id


def get_device_name(device_name=None):
    dev.index_of(device_name)
    return dev.DEVICE_NAME


def get_device_properties(device_name=None):
    return dev.DeviceProperties(dev.index_of(device_name))


def get_device_capability(device=None):
    """None, as torch_npu without TORCH_NPU_DEVICE_CAPABILITY."""
    dev.index_of(device)


def mem_get_info(device=None):
    index = dev.index_of(device)
    return dev.TOTAL_MEMORY - memory.reserved(index), dev.TOTAL_MEMORY


def utilization(device=None):
    dev.index_of(device)
    return 0


def _bf16() -> bool:
    """NPU_MIGRATE_VNPU_BF16=0 emulates an NPU without bfloat16 (the Ascend 910 of the first
    generation): a program that picks its compute dtype from it then computes in fp32, which makes
    its NPU path comparable bit for bit with its fp32 CPU run."""
    return os.environ.get("NPU_MIGRATE_VNPU_BF16", "1").lower() not in ("0", "off", "false", "no")


def is_bf16_supported(*args, **kwargs):
    return _bf16()


def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16] if _bf16() else [torch.float16]


def is_autocast_enabled():
    return torch.is_autocast_enabled("npu")


def set_autocast_enabled(enable):
    torch.set_autocast_enabled("npu", enable)


def get_autocast_dtype():
    return torch.get_autocast_dtype("npu")


def set_autocast_dtype(dtype):
    torch.set_autocast_dtype("npu", dtype)


def set_compile_mode(jit_compile=False):
    return None


def is_jit_compile_false():
    return True


def set_option(option):
    if not isinstance(option, dict):
        raise TypeError("npu option must be a dict.")


def get_soc_version():
    return 220  # Ascend910B1's SoC number in torch_npu's table


def ipc_collect():
    return None


def _is_in_bad_fork():
    return False


def _lazy_init():
    return None


# -- random numbers: the virtual device draws from the CPU generator (see README) ------------


def manual_seed(seed):
    torch.default_generator.manual_seed(int(seed))


def manual_seed_all(seed):
    torch.default_generator.manual_seed(int(seed))


def seed():
    torch.default_generator.seed()


def seed_all():
    torch.default_generator.seed()


def initial_seed():
    return torch.default_generator.initial_seed()


def get_rng_state(device="npu"):
    dev.index_of(device)
    return torch.default_generator.get_state()


def get_rng_state_all():
    return [get_rng_state(i) for i in range(dev.device_count())]


def set_rng_state(new_state, device="npu"):
    dev.index_of(device)
    torch.default_generator.set_state(new_state)


def set_rng_state_all(new_states):
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


# -- memory ----------------------------------------------------------------------------------


def memory_allocated(device=None):
    return memory.allocated(dev.index_of(device))


def max_memory_allocated(device=None):
    return memory.max_allocated(dev.index_of(device))


def memory_reserved(device=None):
    return memory.reserved(dev.index_of(device))


def max_memory_reserved(device=None):
    return memory.max_reserved(dev.index_of(device))


memory_cached = memory_reserved
max_memory_cached = max_memory_reserved


def reset_peak_memory_stats(device=None):
    memory.reset_peak(dev.index_of(device))


reset_max_memory_allocated = reset_peak_memory_stats
reset_max_memory_cached = reset_peak_memory_stats


def reset_accumulated_memory_stats(device=None):
    memory.reset_accumulated(dev.index_of(device))


def empty_cache():
    memory.empty_cache()


def memory_stats(device=None):
    return collections.OrderedDict(memory.stats(dev.index_of(device)))


def memory_stats_as_nested_dict(device=None):
    nested: dict = {}
    for key, value in memory.stats(dev.index_of(device)).items():
        node = nested
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return nested


def memory_summary(device=None, abbreviated=False):
    index = dev.index_of(device)
    return (f"virtual NPU npu:{index}: allocated {memory.allocated(index)} bytes "
            f"(peak {memory.max_allocated(index)}), reserved {memory.reserved(index)} bytes")


def set_per_process_memory_fraction(fraction, device=None):
    if not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    dev.index_of(device)


# -- switches that only record a value on the virtual device --------------------------------

_switches = {"flash_sdp": True, "mem_efficient_sdp": True, "math_sdp": True,
             "sync_debug_mode": 0, "mm_bmm_format_nd": True}
_limits: dict = {}


def enable_flash_sdp(enabled):
    _switches["flash_sdp"] = bool(enabled)


def enable_mem_efficient_sdp(enabled):
    _switches["mem_efficient_sdp"] = bool(enabled)


def enable_math_sdp(enabled):
    _switches["math_sdp"] = bool(enabled)


def flash_sdp_enabled():
    return _switches["flash_sdp"]


def mem_efficient_sdp_enabled():
    return _switches["mem_efficient_sdp"]


def math_sdp_enabled():
    return _switches["math_sdp"]


def set_sync_debug_mode(debug_mode):
    modes = {"default": 0, "warn": 1, "error": 2}
    _switches["sync_debug_mode"] = modes.get(debug_mode, debug_mode)


def get_sync_debug_mode():
    return _switches["sync_debug_mode"]


def set_mm_bmm_format_nd(is_nd):
    _switches["mm_bmm_format_nd"] = bool(is_nd)


def get_mm_bmm_format_nd():
    return _switches["mm_bmm_format_nd"]


def is_current_stream_capturing():
    return False  # no graph capture on the virtual device


def memory_snapshot(*args, **kwargs):
    return []


def get_allocator_backend():
    return "native"


def empty_virt_addr_cache():
    return None


def set_device_limit(device, cube_num=-1, vector_num=-1):
    _limits[("device", dev.index_of(device))] = {"cube_core_num": cube_num,
                                                 "vector_core_num": vector_num}


def get_device_limit(device):
    return dict(_limits.get(("device", dev.index_of(device)),
                            {"cube_core_num": 24, "vector_core_num": 48}))


def clear_npu_overflow_flag():
    return None


def get_npu_overflow_flag():
    return False


# -- flags -----------------------------------------------------------------------------------


class _HF32Flag:
    """``torch.npu.matmul`` / ``torch.npu.conv``: an ``allow_hf32`` flag (no numeric effect)."""

    def __init__(self, kind, default):
        self.__dict__["_kind"] = kind
        self.__dict__["allow_hf32"] = default

    def __setattr__(self, name, value):
        if name != "allow_hf32":
            raise AttributeError(f"Unknown attribute {name}")
        self.__dict__[name] = bool(value)

    def __repr__(self):
        return f"<torch.npu.{self._kind} allow_hf32={self.allow_hf32}>"


matmul = _HF32Flag("matmul", False)
conv = _HF32Flag("conv", True)


class mstx:
    """``torch_npu.npu.mstx``: profiling marks, no-ops on the virtual NPU (ids still count)."""

    _ids = itertools.count(1)

    @staticmethod
    def mark(message, stream=None, domain="default"):
        return None

    @staticmethod
    def range_start(message, stream=None, domain="default"):
        return next(mstx._ids)

    @staticmethod
    def range_end(range_id, domain="default"):
        return None

    @staticmethod
    def mstx_range(message, stream=None, domain="default"):
        def decorate(func):
            return func
        return decorate


def implementations() -> dict:
    """Name -> emulated object (functions, classes, flag objects)."""
    names = dict(globals())
    table = {name: value for name, value in names.items()
             if callable(value) and getattr(value, "__module__", None) == __name__
             and not name.startswith("__") and name not in ("implementations",)}
    table.pop("_HF32Flag", None)
    table.update({
        "matmul": matmul, "conv": conv, "mstx": mstx,
        "device": dev.DeviceContext, "device_of": dev.DeviceOf,
        "Stream": streams.Stream, "Event": streams.Event,
        "SyncLaunchStream": streams.SyncLaunchStream, "StreamContext": streams.StreamContext,
        "stream": streams.stream, "set_stream": streams.set_stream,
        "current_stream": streams.current_stream, "default_stream": streams.default_stream,
        "autocast": amp.autocast, "GradScaler": amp.GradScaler,
        "custom_fwd": amp.custom_fwd, "custom_bwd": amp.custom_bwd,
        "memory_cached": memory_reserved, "max_memory_cached": max_memory_reserved,
        "reset_max_memory_allocated": reset_peak_memory_stats,
        "reset_max_memory_cached": reset_peak_memory_stats,
    })
    return table
