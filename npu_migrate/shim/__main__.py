"""Doctor: ``python -m <this package>`` prints what the shim detected. Always exits 0."""

import importlib.util
import os
import sys

import torch

from . import DEVICE_ENV, __shim_version__, device_count, device_module, device_type


def _torch_npu_version():
    module = sys.modules.get("torch_npu")
    if module is None:
        try:
            installed = importlib.util.find_spec("torch_npu") is not None
        except (ImportError, ValueError):
            installed = False
        return "installed, not imported" if installed else "not installed"
    return str(getattr(module, "__version__", "unknown"))


def _device_names(count):
    names = []
    for index in range(count):
        try:
            names.append(str(device_module().get_device_name(index)))
        except Exception as exc:  # a doctor reports, it does not crash
            names.append("<unavailable: {}: {}>".format(type(exc).__name__, exc))
    return names


def main():
    package = __package__  # the name this shim is installed under
    kind = device_type()  # decides (and may import torch_npu)
    from . import _reason  # set by device_type()

    print("{} {} (runtime shim of npu-migrate)".format(package, __shim_version__))
    print("python:       {}".format(sys.version.split()[0]))
    print("torch:        {}".format(torch.__version__))
    print("torch_npu:    {}".format(_torch_npu_version()))
    forced = os.environ.get(DEVICE_ENV)
    if forced is not None:
        print("{}: {!r}".format(DEVICE_ENV, forced))
    print("device type:  {}".format(kind))
    print("reason:       {}".format(_reason))
    try:
        count = int(device_count())
    except Exception as exc:
        print("device count: <unavailable: {}: {}>".format(type(exc).__name__, exc))
        return 0
    print("device count: {}".format(count))
    for index, name in enumerate(_device_names(count)):
        print("  {}:{}  {}".format(kind, index, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
