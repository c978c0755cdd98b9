"""Make the process see an Ascend NPU: what ``import torch_npu`` does on the virtual device."""

from __future__ import annotations

import sys
import types

SUPPORTED_TORCH = ("2.13",)  # major.minor releases the virtual NPU supports (tested: 2.13.0)

_SUBMODULES = ("amp", "utils", "memory", "random", "streams", "npu_config", "aclnn")


def check_torch(version: str) -> None:
    release = ".".join(version.split("+")[0].split(".")[:2])
    if release not in SUPPORTED_TORCH:
        raise ImportError(
            f"the virtual NPU (npu-migrate vnpu) supports torch {', '.join(SUPPORTED_TORCH)} "
            f"(tested with 2.13.0), not torch {version}: it relies on PyTorch's experimental "
            "Python PrivateUse1 backend (torch.utils.backend_registration."
            "_setup_privateuseone_for_python_backend), whose interface changes between releases")


def _patch_accelerator_synchronize(torch) -> None:
    # torch 2.13's Python device guard cannot synchronize; every operation is synchronous here
    original = torch.accelerator.synchronize

    def synchronize(device=None):
        try:
            return original(device)
        except RuntimeError:
            if torch.accelerator.current_accelerator().type != "npu":
                raise
            return None

    synchronize.__doc__ = original.__doc__
    torch.accelerator.synchronize = synchronize


def install(top: types.ModuleType) -> None:
    """Turn the stand-in package ``top`` (``torch_npu``) into the virtual NPU."""
    import torch

    check_torch(torch.__version__)
    if getattr(top, "__vnpu_installed__", False):
        return
    backend = torch._C._get_privateuse1_backend_name()
    if backend not in ("privateuseone", "npu"):
        raise ImportError(f"the PrivateUse1 backend is already taken by {backend!r}")

    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    from . import (
        amp,
        api_surface,
        attention,
        distributed,
        frames,
        runtime,
        sdpa,
        serialization,
    )
    from . import tensor as vtensor
    from .device import device_count

    version = api_surface.emulated_version()
    pool = runtime.implementations()
    top.__class__ = api_surface.TableModule
    top.__version__ = version
    top.__vnpu_installed__ = True

    npu = api_surface.TableModule("torch_npu.npu", "torch_npu.npu on the virtual NPU")
    sys.modules["torch_npu.npu"] = npu
    private = {name: value for name, value in pool.items()
               if name.startswith("_") and not name.startswith("__")}
    api_surface.populate(npu, pool, version, private)
    for sub in _SUBMODULES:
        qualname = f"torch_npu.npu.{sub}"
        if api_surface.entry(qualname, version) is None:
            continue
        module = api_surface.TableModule(qualname, f"{qualname} on the virtual NPU")
        api_surface.populate(module, pool, version)
        sys.modules[qualname] = module
        setattr(npu, sub, module)
    top.npu = npu
    api_surface.populate(top, attention.operators(version), version)
    sys.meta_path.append(api_surface.StubFinder())

    class Hooks(torch._C._acc.PrivateUse1Hooks):
        def is_available(self) -> bool:
            return device_count() > 0

        def has_primary_context(self, dev_id) -> bool:
            return True

        def is_built(self) -> bool:
            return True

    class Guard(torch._C._acc.DeviceGuard):
        def type_(self):
            return torch._C._autograd.DeviceType.PrivateUse1

    if backend != "npu":
        _setup_privateuseone_for_python_backend(rename="npu", backend_module=npu, hook=Hooks(),
                                                device_guard=Guard())
    _patch_accelerator_synchronize(torch)
    vtensor.register_factories()
    amp.register()
    serialization.install()
    sdpa.install()
    distributed.register()
    frames.install_excepthook()
