"""Stand-in ``torch_npu`` of the virtual Ascend NPU (npu-migrate vnpu); see npu_migrate.vnpu.

Importing it registers the ``npu`` device with PyTorch and makes ``torch.npu`` /
``torch_npu`` answer with exactly the names of torch_npu's API table.
"""

import sys

from npu_migrate.vnpu.install import install


def _autoload():
    """torch's ``torch.backends`` entry point: ``import torch`` imports this package."""


install(sys.modules[__name__])
