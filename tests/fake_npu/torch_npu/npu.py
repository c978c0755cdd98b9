"""Fake ``torch_npu.npu`` (installed as ``torch.npu``): records calls, touches nothing.

A subset of the real module's names (torch_npu/npu/__init__.py ``__all__``), no others, each with
the parameters of the real one in the emulated version (``FAKE_TORCH_NPU_VERSION``, 2.7.1 by
default; tests/test_shim_signatures.py compares them with rules/torch_npu_api.json).
"""

import os
import sys

import torch
import torch_npu

_current = 0
_VERSION = os.environ.get("FAKE_TORCH_NPU_VERSION", "2.7.1")  # 2.14.0 adds or changes the marked names


def _record(name, *args, **kwargs):
    torch_npu.calls.append((name, args, kwargs))


def _index(device):
    if device is None:
        return _current
    if isinstance(device, int):
        return device
    index = getattr(device, "index", None)
    if index is None and isinstance(device, str) and ":" in device:
        index = int(device.split(":", 1)[1])
    return _current if index is None else index


# -- device --------------------------------------------------------------------------------


def device_count():
    _record("device_count")
    return int(os.environ.get("FAKE_TORCH_NPU_DEVICE_COUNT", "2"))


def is_available():
    _record("is_available")
    return int(os.environ.get("FAKE_TORCH_NPU_DEVICE_COUNT", "2")) > 0


def init():
    _record("init")


def is_initialized():
    _record("is_initialized")
    return True


def synchronize(device=None):
    _record("synchronize", device)


def set_device(device):
    global _current
    _record("set_device", device)
    _current = _index(device)


def current_device():
    _record("current_device")
    return _current


class device(object):
    """Context manager, as ``torch.npu.device(index)``."""

    def __init__(self, device):
        _record("device", device)
        self.idx = _index(device)
        self.prev_idx = None

    def __enter__(self):
        global _current
        self.prev_idx, _current = _current, self.idx

    def __exit__(self, *exc_info):
        global _current
        _current = self.prev_idx
        return False


def get_device_name(device_name=None):
    _record("get_device_name", device_name)
    return "Ascend910B-fake"


def can_device_access_peer(device_id, peer_device_id):
    _record("can_device_access_peer", device_id, peer_device_id)
    return _index(device_id) != _index(peer_device_id)


class _NPUDeviceProperties(object):
    # Only the fields torch_npu documents: no major/minor/multi_processor_count.
    def __init__(self, index):
        self.name = "Ascend910B-fake"
        self.total_memory = 64 * 1024 ** 3
        self.L2_cache_size = 192 * 1024 ** 2
        self.cube_core_num = 24
        self.vector_core_num = 48
        self._index = index

    def __repr__(self):
        return "_NPUDeviceProperties(name='{}', total_memory={}MB, cube_core_num={})".format(
            self.name, self.total_memory // 1024 ** 2, self.cube_core_num
        )


def get_device_properties(device_name=None):
    _record("get_device_properties", device_name)
    return _NPUDeviceProperties(_index(device_name))


def get_device_capability(device=None):
    # As the real one: a "compatibility value only", None unless the variable is set.
    _record("get_device_capability", device)
    value = os.environ.get("TORCH_NPU_DEVICE_CAPABILITY")
    if not value:
        return None
    major, minor = value.split(".")
    return (int(major), int(minor))


def mem_get_info(device=None):
    _record("mem_get_info", device)
    return (32 * 1024 ** 3, 64 * 1024 ** 3)


if _VERSION == "2.7.1":

    def is_bf16_supported():
        _record("is_bf16_supported")
        return True

else:

    def is_bf16_supported(including_emulation=False):
        _record("is_bf16_supported", including_emulation)
        return True


# -- streams and events --------------------------------------------------------------------


class Stream(object):
    def __init__(self, device=None, priority=0, **kwargs):
        _record("Stream", device=device, priority=priority, **kwargs)
        self.device_index = _index(device)

    def synchronize(self):
        _record("Stream.synchronize")

    def wait_stream(self, stream):
        _record("Stream.wait_stream", stream)


class Event(object):
    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        _record("Event", enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)

    def record(self, stream=None):
        _record("Event.record", stream)

    def synchronize(self):
        _record("Event.synchronize")

    def elapsed_time(self, end_event):
        _record("Event.elapsed_time", end_event)
        return 0.0


class StreamContext(object):
    """Context manager, as ``torch.npu.StreamContext(stream_ctx)``."""

    def __init__(self, stream_ctx):
        _record("StreamContext", stream_ctx)
        self.stream = stream_ctx

    def __enter__(self):
        return self.stream

    def __exit__(self, *exc_info):
        return False


def current_stream(device=None):
    _record("current_stream", device)
    return Stream(device)


def default_stream(device=None):
    _record("default_stream", device)
    return Stream(device)


# -- random numbers ------------------------------------------------------------------------


def manual_seed(seed):
    _record("manual_seed", seed)


def manual_seed_all(seed):
    _record("manual_seed_all", seed)


def seed():
    _record("seed")


def seed_all():
    _record("seed_all")


def initial_seed():
    _record("initial_seed")
    return 0


def get_rng_state(device="npu"):
    _record("get_rng_state", device)
    return torch.zeros(16, dtype=torch.uint8)


def get_rng_state_all():
    _record("get_rng_state_all")
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state(new_state, device="npu"):
    _record("set_rng_state", new_state, device)


def set_rng_state_all(new_states):
    _record("set_rng_state_all", new_states)


# -- memory --------------------------------------------------------------------------------


def empty_cache():
    _record("empty_cache")


def memory_allocated(device=None):
    _record("memory_allocated", device)
    return 0


def max_memory_allocated(device=None):
    _record("max_memory_allocated", device)
    return 0


def memory_reserved(device=None):
    _record("memory_reserved", device)
    return 0


def max_memory_reserved(device=None):
    _record("max_memory_reserved", device)
    return 0


def reset_peak_memory_stats(device=None):
    _record("reset_peak_memory_stats", device)


def memory_stats(device=None):
    _record("memory_stats", device)
    return {}


if _VERSION == "2.7.1":

    def memory_snapshot():
        _record("memory_snapshot")
        return []

else:

    def memory_snapshot(mempool_id=None):
        _record("memory_snapshot", mempool_id)
        return []

    def get_per_process_memory_fraction(device=None):
        _record("get_per_process_memory_fraction", device)
        return 1.0


# -- precision flags (torch_npu/npu/npu_config.py: matmul.allow_hf32 default False, conv True) ----


class _HF32Flag(object):
    def __init__(self, name, default):
        self.__dict__["_name"] = name
        self.__dict__["allow_hf32"] = default

    def __setattr__(self, key, value):
        _record("{}.{}".format(self._name, key), value)
        self.__dict__[key] = value


matmul = _HF32Flag("matmul", False)
conv = _HF32Flag("conv", True)


# -- mstx (torch_npu 2.7.1: a class of static methods mark / range_start / range_end) -----------


class mstx(object):
    _next = [0]

    @staticmethod
    def mark(message="", stream=None, domain="default"):
        _record("mstx.mark", message)

    @staticmethod
    def range_start(message="", stream=None, domain="default"):
        mstx._next[0] += 1
        _record("mstx.range_start", message)
        return mstx._next[0]

    @staticmethod
    def range_end(range_id, domain="default"):
        _record("mstx.range_end", range_id)


# -- amp (torch_npu.npu.amp: autocast, GradScaler, custom_fwd, custom_bwd) ------------------------


def _make_amp():
    import types

    amp = types.ModuleType("torch_npu.npu.amp")

    class autocast(torch.amp.autocast_mode.autocast):
        def __init__(self, enabled=True, dtype=torch.float16, cache_enabled=True):
            _record("amp.autocast", enabled, dtype)
            super().__init__("cpu", enabled=False)  # the fake cannot run NPU kernels

    class GradScaler(object):
        def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                     growth_interval=2000, dynamic=True, enabled=True):
            _record("amp.GradScaler", init_scale, enabled)
            self.init_scale, self.enabled = init_scale, enabled

    if _VERSION == "2.7.1":

        def custom_fwd(fwd=None, **kwargs):  # reads kwargs.get("cast_inputs"), as the real one
            _record("amp.custom_fwd")
            return fwd if fwd is not None else (lambda f: f)

    else:

        def custom_fwd(fwd=None, *, cast_inputs=None):
            _record("amp.custom_fwd")
            return fwd if fwd is not None else (lambda f: f)

    def custom_bwd(bwd):
        _record("amp.custom_bwd")
        return bwd

    amp.autocast, amp.GradScaler, amp.custom_fwd, amp.custom_bwd = autocast, GradScaler, custom_fwd, custom_bwd
    sys.modules["torch_npu.npu.amp"] = amp
    return amp


amp = _make_amp()
