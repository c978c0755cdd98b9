"""``python -m <this package> [--json] [--no-color] [--require npu|cuda|any]``: the doctor.

Shows what the shim detected (device type and why), then runs the environment checks of
``doctor.py`` and exits 1 when one fails (0 otherwise).
"""

import sys

from . import __shim_version__, device_type
from . import doctor


def main(argv=None):
    package = __package__  # the name this shim is installed under
    kind = device_type()  # decides (and may import torch_npu)
    from . import _reason  # set by device_type()

    info = {"package": package, "version": __shim_version__, "device_type": kind, "reason": _reason}
    return doctor.main(argv, prog="python -m {}".format(package), shim_info=info)


if __name__ == "__main__":
    sys.exit(main())
