"""The fake torch_npu's attention operators: record the call, compute with the reference model.

The kernels are tests/attention_reference.py (a plain-torch model of the documented semantics,
with strict input validation). Each function here has the real operator's signature for the
emulated torch_npu version (the reference's ``prototype``, as in rules/torch_npu_api.json), so
a wrong keyword fails as it would on the real wheel. Tensors stay where they are (CPU): there is no real "npu" device here.

``FAKE_TORCH_NPU_VERSION`` (read at import): "2.7.1" (default) or "2.14.0"; 2.14.0 adds the
``sink``/``dropout_mask``/``seed``/``offset`` parameters of npu_fusion_attention and
``npu_fusion_attention_v3`` (Tensor sequence lengths).
"""

import importlib.util
import inspect
import os
import sys
from pathlib import Path

import torch_npu

VERSION = os.environ.get("FAKE_TORCH_NPU_VERSION", "2.7.1")
if VERSION not in ("2.7.1", "2.14.0"):
    raise RuntimeError("FAKE_TORCH_NPU_VERSION must be 2.7.1 or 2.14.0, got {!r}".format(VERSION))

def _reference():
    module = sys.modules.get("attention_reference")
    if module is None:
        path = Path(__file__).resolve().parents[2] / "attention_reference.py"
        spec = importlib.util.spec_from_file_location("attention_reference", str(path))
        module = importlib.util.module_from_spec(spec)
        sys.modules["attention_reference"] = module
        spec.loader.exec_module(module)
    return module


_ref = _reference()


def _op(name, prototype):
    """The operator ``name``: exactly ``prototype``'s signature; records (name, args, kwargs)
    as the caller passed them, then runs the reference model."""
    signature = inspect.signature(prototype)
    kernel = getattr(_ref, name)

    def op(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)  # TypeError for unknown/duplicate parameters
        torch_npu.calls.append((name, args, kwargs))
        return kernel(**bound.arguments)

    op.__name__ = op.__qualname__ = name
    op.__signature__ = signature
    return op


OPS = ["npu_fusion_attention", "npu_incre_flash_attention", "npu_fused_infer_attention_score"]
if VERSION == "2.14.0":
    OPS.append("npu_fusion_attention_v3")

npu_fusion_attention = _op("npu_fusion_attention", _ref.prototype("npu_fusion_attention", VERSION))
npu_incre_flash_attention = _op("npu_incre_flash_attention",
                                _ref.prototype("npu_incre_flash_attention", VERSION))
npu_fused_infer_attention_score = _op(
    "npu_fused_infer_attention_score", _ref.prototype("npu_fused_infer_attention_score", VERSION))
if VERSION == "2.14.0":
    npu_fusion_attention_v3 = _op("npu_fusion_attention_v3",
                                  _ref.prototype("npu_fusion_attention_v3", VERSION))
