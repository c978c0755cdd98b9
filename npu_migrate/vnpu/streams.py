"""Streams and events of the virtual NPU: synchronous, with wall-clock timing.

Every operation completes before it returns, so a stream is a label: ``synchronize`` and
``wait_*`` return at once, ``query`` is always True. ``Event.elapsed_time`` measures the
wall-clock milliseconds between two ``record`` calls (the events must be created with
``enable_timing=True``, as on the real device).
"""

from __future__ import annotations

import itertools
import threading
import time

from . import device as device_state


class Stream:
    """``torch.npu.Stream(device=None, priority=0, **kwargs)``."""

    _ids = itertools.count(1)

    def __init__(self, device=None, priority=0, **kwargs):
        self.device_index = device_state.index_of(device)
        self.priority = priority
        self.stream_id = next(Stream._ids)

    @property
    def device(self):
        import torch

        return torch.device("npu", self.device_index)

    @property
    def npu_stream(self):
        return self.stream_id

    def synchronize(self):
        return None

    def query(self):
        return True

    def wait_event(self, event):
        return None

    def wait_stream(self, stream):
        return None

    def record_event(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def __eq__(self, other):
        return isinstance(other, Stream) and other.stream_id == self.stream_id

    def __hash__(self):
        return hash(("npu-stream", self.stream_id))

    def __repr__(self):
        return f"<torch_npu.npu.Stream device=npu:{self.device_index} npu_stream={self.stream_id}>"


class SyncLaunchStream(Stream):
    pass


class Event:
    """``torch.npu.Event(enable_timing=False, blocking=False, interprocess=False)``."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.interprocess = interprocess
        self._time = None

    def record(self, stream=None):
        self._time = time.perf_counter()

    def wait(self, stream=None):
        return None

    def query(self):
        return True

    def synchronize(self):
        return None

    def elapsed_time(self, end_event):
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("npu events must be created with enable_timing=True to time them")
        if self._time is None or end_event._time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._time - self._time) * 1000.0

    def __repr__(self):
        return "<torch_npu.npu.Event (virtual)>" if self._time is None else \
            "<torch_npu.npu.Event (virtual, recorded)>"


_local = threading.local()


def _streams() -> dict:
    if not hasattr(_local, "current"):
        _local.current = {}
    return _local.current


_default: dict[int, Stream] = {}


def default_stream(device=None) -> Stream:
    index = device_state.index_of(device)
    if index not in _default:
        stream = Stream(index)
        stream.stream_id = 0
        _default[index] = stream
    return _default[index]


def current_stream(device=None) -> Stream:
    index = device_state.index_of(device)
    return _streams().get(index) or default_stream(index)


def set_stream(stream) -> None:
    if stream is not None:
        _streams()[stream.device_index] = stream


class StreamContext:
    """``torch.npu.StreamContext(stream_ctx)`` / ``torch.npu.stream(stream)``."""

    def __init__(self, stream_ctx):
        self.stream = stream_ctx
        self.prev = None

    def __enter__(self):
        if self.stream is not None:
            self.prev = current_stream(self.stream.device_index)
            set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc_info):
        if self.stream is not None:
            set_stream(self.prev)
        return False


def stream(stream) -> StreamContext:
    return StreamContext(stream)
