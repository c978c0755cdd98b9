"""The virtual Ascend NPU: run a migrated program's NPU path on any CPU.

``site/torch_npu`` is a stand-in ``torch_npu`` package; the ``npu-migrate vnpu`` and ``verify``
commands (launch.py) put ``SITE_DIR`` first on ``PYTHONPATH`` and set ``NPU_MIGRATE_VNPU_COUNT``,
so the unmodified shim and the migrated code import it as they would the real one, in
subprocesses and torchrun workers too. ``SITE_DIR`` also holds a ``torch_npu`` dist-info with
torch's ``torch.backends`` entry point, so ``import torch`` loads it, as torch_npu >= 2.5.1 does.

What ``import torch_npu`` does (install.py): registers PyTorch's PrivateUse1 backend as ``npu``
through torch 2.13's Python backend API; tensors on ``npu:N`` are a wrapper subclass computing
on CPU tensors (tensor.py); ``torch.npu``/``torch_npu`` have exactly the API table's names for
the emulated version (api_surface.py, runtime.py); autocast kernels and
``torch_npu.npu.amp`` (amp.py); memory statistics (memory.py); streams and events
(streams.py); the ``hccl`` distributed backend on gloo (distributed.py); fused attention
operators on the reference model (attention.py, attention_ref.py); torch.save/torch.load
(serialization.py); and the user's file and line on errors (frames.py).

Supported torch: ``install.SUPPORTED_TORCH`` (2.13; tested with 2.13.0); importing the
stand-in into another torch raises ImportError naming the versions. The emulated torch_npu
version is ``NPU_MIGRATE_VNPU_VERSION`` (default 2.7.1; any version of the API table).

Decisions (each documented where it is implemented):

- Device checks: an operator mixing ``npu`` and ``cpu`` tensors raises PyTorch's RuntimeError
  "Expected all tensors to be on the same device, but found at least two devices, npu:0 and
  cpu!"; a 0-dim CPU tensor is accepted anywhere (CUDA's rule for TensorIterator operators;
  CUDA itself refuses it in a few non-elementwise kernels such as mm), CPU index tensors are
  accepted by indexing operators, and copies cross devices freely.
- The user's file and line: errors raised by the device, and any uncaught exception (a leftover
  ``"cuda"`` device fails in torch with "Torch not compiled with CUDA enabled"), get a PEP 678
  note "[virtual NPU] raised by FILE, line N" naming the innermost frame outside torch, this
  package, the standard library, installed packages and the injected shim; the message itself
  stays PyTorch's. ``report_user_frame(exc)`` does the same for the launcher.
- Random numbers: the device draws from the CPU generator, so a migrated fp32 program
  reproduces its CPU run bit for bit; ``torch.npu.manual_seed``/``get_rng_state`` act on it. A
  real NPU has its own Philox generator: the virtual device does not prove that seeds give the
  same numbers on CPU and NPU.
- Device indices: torch 2.13's Python device guard knows one device (its ``deviceCount()`` is 1)
  and the autograd engine asserts on any other index, so every tensor is on ``npu:0`` whatever
  ``set_device``/``"npu:1"`` asked for; ``device_count()``, ``current_device()`` and the memory
  statistics follow the requested index. So a mix of npu:0 and npu:1 tensors is not detected.
- Pinned memory: ``Tensor.pin_memory()`` returns an ordinary contiguous copy (a Python backend
  cannot provide a pinned allocator); ``torch.tensor``/``torch.as_tensor``/``new_tensor`` with
  an npu device are built on the CPU and moved (their C++ path cannot reach a Python kernel).

What it proves: the migrated program's NPU path runs (device strings, torch.npu calls and
their signatures, hccl process groups, AMP with torch_npu's scaler, the fused attention
operators' documented semantics, checkpoints, no tensor left on the CPU, no "cuda" left).
What it does not: kernel numerics of the NPU (everything computes with CPU kernels), speed,
memory limits (nothing is enforced), HCCL topology and timing, multi-device placement in one
process, graph mode/torch.compile, torch_npu's custom operators other than attention.

Importing this package imports neither torch nor the device.
"""

from __future__ import annotations

from pathlib import Path

SITE_DIR = Path(__file__).resolve().parent / "site"
COUNT_ENV = "NPU_MIGRATE_VNPU_COUNT"
VERSION_ENV = "NPU_MIGRATE_VNPU_VERSION"


def report_user_frame(exc: BaseException) -> str | None:
    """``"file:line"`` of the user's code that raised ``exc`` (and a note added to it)."""
    from . import frames

    return frames.report_user_frame(exc)
