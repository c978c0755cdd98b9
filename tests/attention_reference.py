"""Plain-torch references for the attention tests: now ``npu_migrate/vnpu/attention_ref.py``.

The reference model moved into the tool so the virtual NPU (npu_migrate/vnpu) computes
torch_npu's fused attention operators with it. This module re-exports every name, private ones
included, so the tests and the fake torch_npu (which loads this file by path) keep working. It
loads the file by path when ``npu_migrate`` is not importable.
"""

import importlib.util
from pathlib import Path

try:
    from npu_migrate.vnpu import attention_ref as _impl
except ImportError:  # npu_migrate not on the path: load the file itself
    _path = Path(__file__).resolve().parents[1] / "npu_migrate" / "vnpu" / "attention_ref.py"
    _spec = importlib.util.spec_from_file_location("_vnpu_attention_ref", str(_path))
    _impl = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_impl)

globals().update({k: v for k, v in vars(_impl).items()
                  if not (k.startswith("__") and k.endswith("__"))})
