"""Round-25 audit, helper h108 (issue #16): CUDA-only code reached only through dispatch the
per-file engine does not follow.

* BS#26 (backendpreds25.py): a helper's lazy CUDA-only import whose every caller tests a CUDA-only
  backend's enum predicate (`get_moe_runner_backend().is_flashinfer_trtllm()`): info naming the
  backend (a user may still choose it), or a named scope where the project's NPU defaults force the
  field to another value; a predicate of a portable backend, a caller outside the test, a negated
  test or an `else:` keep the error.
"""

from __future__ import annotations

from .precision_helpers import migrate_json, moot_lines, write_project

_ENUM = '''\
from enum import Enum


class MoeRunnerBackend(Enum):
    AUTO = "auto"
    TRITON = "triton"
    FLASHINFER_TRTLLM = "flashinfer_trtllm"

    def is_triton(self):
        return self == MoeRunnerBackend.TRITON

    def is_flashinfer_trtllm(self):
        return self == MoeRunnerBackend.FLASHINFER_TRTLLM


_BACKEND = None


def get_moe_runner_backend():
    return _BACKEND or MoeRunnerBackend.AUTO
'''

_HELPER = '''\
import torch


def align_weights_for_trtllm(layer):
    from flashinfer import shuffle_matrix_a
    layer.w = shuffle_matrix_a(layer.w, 64).view(torch.float8_e4m3fn)
    from flashinfer import reorder_rows
    layer.w = reorder_rows(layer.w)


def align_weights_for_triton(layer):
    from flashinfer import shuffle_matrix_a
    layer.w = shuffle_matrix_a(layer.w, 32)
'''

# the caller: each helper under its backend's predicate, in another module
_CALLER = '''\
from pkg.moe.utils import get_moe_runner_backend


class Fp8MoEMethod:
    def process_weights(self, layer):
        layer.w = layer.w.float()
        if get_moe_runner_backend().is_flashinfer_trtllm():
            from pkg.moe.trtllm import align_weights_for_trtllm

            align_weights_for_trtllm(layer)
        if get_moe_runner_backend().is_triton():
            from pkg.moe.trtllm import align_weights_for_triton

            align_weights_for_triton(layer)
'''


def _flashinfer(report: dict, path: str) -> dict[int, dict]:
    return {f["line"]: f for f in report["findings"] if f["path"] == path and f["code"] == "NPU911"}


def test_helper_under_cuda_backend_predicate_is_info_naming_the_backend(tmp_path):
    root = write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/moe/__init__.py": "",
        "pkg/moe/utils.py": _ENUM, "pkg/moe/trtllm.py": _HELPER, "pkg/quant.py": _CALLER,
    })
    report = migrate_json(root)
    found = _flashinfer(report, "pkg/moe/trtllm.py")
    # the CUDA-only backend's helper: info naming the predicate's member and value (a user may pick it)
    assert found[5]["severity"] == "info", found
    message = found[5]["message"]
    assert "runs only when the CUDA-only backend" in message
    assert '"flashinfer_trtllm" is chosen' in message
    assert "`MoeRunnerBackend.FLASHINFER_TRTLLM` a flashinfer backend (pkg/moe/utils.py:12)" in message
    assert "pkg/quant.py:10" in message and "is_flashinfer_trtllm()" in message
    # the helper's places, lowered for one reason, stay one finding (merged on its first import)
    assert [f["line"] for f in report["findings"] if f["path"] == "pkg/moe/trtllm.py"
            and f["severity"] == "info"] == [5], report["findings"]
    assert [ln for ln, _c, _s in found[5]["also"]] == [7], found[5]
    # the nearest true case: a portable backend's predicate (`is_triton()`) decides nothing
    assert found[12]["severity"] == "error", found


def test_helper_with_a_caller_outside_the_predicate_stays_error(tmp_path):
    caller = _CALLER + '''

def warm(layer):
    from pkg.moe.trtllm import align_weights_for_trtllm

    align_weights_for_trtllm(layer)
'''
    root = write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/moe/__init__.py": "",
        "pkg/moe/utils.py": _ENUM, "pkg/moe/trtllm.py": _HELPER, "pkg/quant.py": caller,
    })
    found = _flashinfer(migrate_json(root), "pkg/moe/trtllm.py")
    assert found[5]["severity"] == "error", found


def test_negated_predicate_and_else_stay_error(tmp_path):
    caller = _CALLER.replace("if get_moe_runner_backend().is_flashinfer_trtllm():",
                             "if not get_moe_runner_backend().is_flashinfer_trtllm():")
    root = write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/moe/__init__.py": "",
        "pkg/moe/utils.py": _ENUM, "pkg/moe/trtllm.py": _HELPER, "pkg/quant.py": caller,
    })
    assert _flashinfer(migrate_json(root), "pkg/moe/trtllm.py")[5]["severity"] == "error"
    caller = _CALLER.replace(
        "        if get_moe_runner_backend().is_flashinfer_trtllm():\n            from",
        "        if get_moe_runner_backend().is_flashinfer_trtllm():\n            pass\n        else:\n            from")
    root = write_project(tmp_path / "b", {
        "pkg/__init__.py": "", "pkg/moe/__init__.py": "",
        "pkg/moe/utils.py": _ENUM, "pkg/moe/trtllm.py": _HELPER, "pkg/quant.py": caller,
    })
    assert _flashinfer(migrate_json(root), "pkg/moe/trtllm.py")[5]["severity"] == "error"


def test_a_second_non_predicate_definition_of_the_name_keeps_the_error(tmp_path):
    other = '''\
def is_flashinfer_trtllm():
    import os
    return os.environ.get("USE_TRTLLM") == "1"
'''
    root = write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/moe/__init__.py": "",
        "pkg/moe/utils.py": _ENUM, "pkg/moe/trtllm.py": _HELPER, "pkg/quant.py": _CALLER,
        "pkg/env.py": other,
    })
    assert _flashinfer(migrate_json(root), "pkg/moe/trtllm.py")[5]["severity"] == "error"


def test_npu_defaults_forcing_another_backend_make_a_named_scope(tmp_path):
    defaults = '''\
def set_default_server_args(args):
    args.moe_runner_backend = "triton"
    args.device = "npu"
'''
    root = write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/moe/__init__.py": "",
        "pkg/moe/utils.py": _ENUM, "pkg/moe/trtllm.py": _HELPER, "pkg/quant.py": _CALLER,
        "pkg/hardware/__init__.py": "", "pkg/hardware/npu/__init__.py": "",
        "pkg/hardware/npu/defaults.py": defaults,
    })
    report = migrate_json(root)
    found = _flashinfer(report, "pkg/moe/trtllm.py")
    assert 5 not in found, found
    scopes = moot_lines(report["skipped"], "NPU911", "pkg/moe/trtllm.py")
    assert 5 in scopes and "NPU defaults set `moe_runner_backend`" in scopes[5]
    assert "pkg/hardware/npu/defaults.py:2" in scopes[5]
    # the portable backend's helper stays reported
    assert found[12]["severity"] == "error"


def test_npu_defaults_filling_an_unset_field_only_give_info(tmp_path):
    defaults = '''\
def set_default_server_args(args):
    if args.moe_runner_backend is None:
        args.moe_runner_backend = "triton"
'''
    root = write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/moe/__init__.py": "",
        "pkg/moe/utils.py": _ENUM, "pkg/moe/trtllm.py": _HELPER, "pkg/quant.py": _CALLER,
        "pkg/hardware/__init__.py": "", "pkg/hardware/npu/__init__.py": "",
        "pkg/hardware/npu/defaults.py": defaults,
    })
    found = _flashinfer(migrate_json(root), "pkg/moe/trtllm.py")
    assert found[5]["severity"] == "info" and "runs only when the CUDA-only backend" in found[5]["message"]
