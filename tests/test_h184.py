"""Round 33's rows a reviewer dismissed from the finding's own file (audit HA, HB, HC; helper h184,
issue #16): each false shape paired with the nearest true case that must stay reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project
from .precision_helpers import finding_places as _places
from .precision_helpers import scope_reasons as _scopes


# ----------------------------------------------------------------------------- HA#13: empty kernels a test inspects
LAUNCHER_TEST = '''import torch

from vllm.triton_utils import tl, triton
from vllm.warmup import key_deriver, warmup_inputs


@triton.jit
def _binder_kernel(x, value, BLOCK: tl.constexpr):
    pass


@triton.jit
def _pointer_kernel(x_ptr, value, BLOCK: tl.constexpr):
    """Only its argument names are read."""


@triton.jit
def _real_kernel(x_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets) + 1)


@triton.jit
def _launched_empty_kernel(x_ptr, BLOCK: tl.constexpr):
    pass


def test_inputs():
    assert warmup_inputs(_pointer_kernel, x_ptr=torch.float32)
    assert key_deriver(_binder_kernel)({"x": 1})
    assert _binder_kernel.arg_names == ["x", "value", "BLOCK"]


def test_launch():
    x = torch.zeros(4, device="cuda")
    _real_kernel[(1,)](x, BLOCK=4)
    _launched_empty_kernel[(1,)](x, BLOCK=4)
'''


def test_empty_module_level_kernels_a_test_only_inspects(tmp_path):
    """HA#13: module-level `@triton.jit` kernels of a test file whose bodies are `pass` (or a
    docstring), handed only to helpers that read their names and keys, are never launched by the
    file: nothing to port, a named scope. The nearest true cases keep their error: a kernel with a
    body the test launches, and an empty kernel the test launches."""
    report = migrate_json(write_project(tmp_path, {"tests/test_launcher.py": LAUNCHER_TEST}))
    path = "tests/test_launcher.py"
    found = _places(report, path, "NPU910")
    scopes = _scopes(report, path, "NPU910")
    assert 7 not in found and 12 not in found
    assert "never launches" in scopes[7] and "never launches" in scopes[12]
    assert found[17]["severity"] == "error" and found[23]["severity"] == "error"


def test_empty_kernel_in_library_code_stays(tmp_path):
    """HA#13's nearest true case outside tests: the same empty kernel in library code (another
    module may import and launch it) keeps its error."""
    lib = LAUNCHER_TEST.split("\n\n\ndef test_")[0]
    report = migrate_json(write_project(tmp_path, {"pkg/kernels.py": lib}))
    found = _places(report, "pkg/kernels.py", "NPU910")
    assert found[7]["severity"] == "error"


# ----------------------------------------------------------------------------- HA#35: a device helper beside host code
HELPERS = '''from typing import Any

from vllm.triton_utils import tl, triton

_configs: dict = {}


def launch_autotuned(kernel: Any, grid: Any, **kwargs) -> None:
    config = _configs.get(kernel)
    if config is None:
        kernel[grid](**kwargs)
        return
    kernel.fn[grid](**kwargs, **config)


@triton.jit
def fast_exp(x):
    return tl.math.exp2(1.4426950408889634 * x)
'''

SCAN = '''import torch

from mambaops.helpers import fast_exp, launch_autotuned
from vllm.triton_utils import tl, triton


@triton.jit
def _scan_kernel(x_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, fast_exp(tl.load(x_ptr + offsets)))


def scan(x: torch.Tensor) -> None:
    launch_autotuned(_scan_kernel, (1,), x_ptr=x, BLOCK=16)
'''

BMM = '''import torch

from mambaops.helpers import launch_autotuned
from vllm.triton_utils import tl, triton


@triton.jit
def _bmm_kernel(x_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets) * 2)


def bmm(x: torch.Tensor) -> None:
    launch_autotuned(_bmm_kernel, (1,), x_ptr=x, BLOCK=16)
'''


def test_device_helper_beside_host_functions_folds_into_its_kernels(tmp_path):
    """HA#35: a `@triton.jit` device helper whose module also holds a host launcher naming none of
    its Triton functions, called only inside the kernels of an importer that reports its own
    NPU910 error: folded into that error, which names the helper's module; a module importing only
    the host launcher is no site and keeps its own error."""
    report = migrate_json(write_project(tmp_path, {
        "mambaops/__init__.py": "", "mambaops/helpers.py": HELPERS, "mambaops/scan.py": SCAN,
        "mambaops/bmm.py": BMM}))
    assert 16 not in _places(report, "mambaops/helpers.py", "NPU910")
    scan = _places(report, "mambaops/scan.py", "NPU910")[7]
    assert scan["severity"] == "error" and "mambaops/helpers.py" in scan["message"] and "`fast_exp`" in scan["message"]
    assert _places(report, "mambaops/bmm.py", "NPU910")[7]["severity"] == "error"


def test_device_helper_its_own_host_code_launches_stays(tmp_path):
    """HA#35's nearest true case: the module's host function launches the helper itself
    (`fast_exp[grid](...)`), a launch no importer's kernel covers: the helper keeps its error."""
    launching = HELPERS + '''

def exp_now(x):
    fast_exp[(1,)](x)
'''
    report = migrate_json(write_project(tmp_path, {
        "mambaops/__init__.py": "", "mambaops/helpers.py": launching, "mambaops/scan.py": SCAN}))
    assert _places(report, "mambaops/helpers.py", "NPU910")[16]["severity"] == "error"


def test_device_helper_read_outside_kernels_stays(tmp_path):
    """HA#35's nearest true case: an importer reads the helper outside its kernels (hands it to a
    host call): the helper keeps its error."""
    handing = SCAN + '''

def exp_of(x):
    launch_autotuned(fast_exp, (1,), x=x)
'''
    report = migrate_json(write_project(tmp_path, {
        "mambaops/__init__.py": "", "mambaops/helpers.py": HELPERS, "mambaops/scan.py": handing}))
    assert _places(report, "mambaops/helpers.py", "NPU910")[16]["severity"] == "error"


# ----------------------------------------------------------------------------- HA#8: a fallback `try`'s import led a merge
FI_UTILS = '''def has_situ_activation() -> bool:
    try:
        from flashinfer.fused_moe.core import ActivationType
    except ImportError:
        return False
    return hasattr(ActivationType, "Situ")


def to_flashinfer_type(activation):
    from flashinfer.fused_moe.core import ActivationType

    return ActivationType.Swiglu if activation == "silu" else ActivationType.Geglu
'''


def test_merged_finding_stands_on_the_import_that_can_fail(tmp_path):
    """HA#8: an import inside `try: ... except ImportError: return False` cannot fail; the file's
    per-file NPU911 error, which lists it, stands on the unguarded lazy import (line 10), the one
    an NPU host hits, and names the guarded line among its others."""
    report = migrate_json(write_project(tmp_path, {"pkg/fi_utils.py": FI_UTILS}))
    errors = [f for f in report["findings"] if f["path"] == "pkg/fi_utils.py" and f["code"] == "NPU911"]
    assert len(errors) == 1 and errors[0]["line"] == 10 and errors[0]["severity"] == "error"
    assert [line for line, _c, _s in errors[0]["also"]] == [3]


def test_guarded_import_alone_is_no_error(tmp_path):
    """HA#8's other half: with no unguarded import beside it, the guarded import is no error (a
    named scope, fallbacks.py); and an unguarded import alone stays an error on its own line."""
    guarded = FI_UTILS.split("\n\n\ndef to_flashinfer_type")[0] + "\n"
    unguarded = "def to_flashinfer_type(activation):" + FI_UTILS.split("def to_flashinfer_type(activation):")[1]
    report = migrate_json(write_project(tmp_path, {"pkg/a.py": guarded, "pkg/b.py": unguarded}))
    assert not [f for f in report["findings"] if f["path"] == "pkg/a.py" and f["code"] == "NPU911"
                and f["severity"] != "info"]
    assert _places(report, "pkg/b.py", "NPU911")[2]["severity"] == "error"


def test_import_whose_handler_passes_still_leads(tmp_path):
    """HA#8's nearest true case: the handler only passes, so the function goes on to read the name
    the failed import never bound (NameError on an NPU host): that import can fail, and the merged
    error keeps standing on it (its first place)."""
    passing = FI_UTILS.replace("        return False\n", "        pass\n")
    report = migrate_json(write_project(tmp_path, {"pkg/fi_utils.py": passing}))
    errors = [f for f in report["findings"] if f["path"] == "pkg/fi_utils.py" and f["code"] == "NPU911"]
    assert len(errors) == 1 and errors[0]["line"] == 3 and errors[0]["severity"] == "error"


# ----------------------------------------------------------------------------- HB#23: a CUDA image's build target
CUDA_IMAGE = '''ARG CUDA_VERSION=12.8.1
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu22.04 AS build

WORKDIR /workspace
ARG target_device="cuda"
ENV TARGET_DEVICE=${target_device}
RUN pip install -e .
RUN python bench.py --device cuda
'''

PLAIN_IMAGE = '''FROM python:3.11-slim AS build

WORKDIR /workspace
ARG target_device="cuda"
ENV TARGET_DEVICE=${target_device}
RUN python bench.py --device cuda
'''


def test_build_target_argument_of_a_cuda_image_folds_into_it(tmp_path):
    """HB#23: `ARG target_device="cuda"` in a Dockerfile built on `nvidia/cuda` selects what the
    CUDA image builds; "the NPU device is `npu`" is no fix for it, the image's port is (NPU707):
    folded into that finding, which lists its line. The nearest true cases keep their NPU706: the
    same `ARG` in an image not built on CUDA, and a `cuda` device on a `RUN` line."""
    report = migrate_json(write_project(tmp_path, {"docker/Dockerfile": CUDA_IMAGE,
                                                   "other/Dockerfile": PLAIN_IMAGE}))
    kept = _places(report, "docker/Dockerfile", "NPU706")
    assert 5 not in kept and 6 not in kept and kept[8]["severity"] == "error"
    image = _places(report, "docker/Dockerfile", "NPU707")
    assert 5 in image and image[5]["severity"] == "error" and "`cuda`" in image[5]["message"]
    plain = _places(report, "other/Dockerfile", "NPU706")
    assert plain[4]["severity"] == "error" and plain[6]["severity"] == "error"


# ----------------------------------------------------------------------------- HA#36: a second vLLM note in one file
IMPORT_UTILS = '''import importlib.util


def is_vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None
'''

CLIENT = '''from pkg.import_utils import is_vllm_available

if is_vllm_available():
    from vllm.utils.network_utils import get_ip

from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine


def host() -> str:
    return get_ip()


def send(model) -> None:
    NCCLWeightTransferEngine.trainer_send_weights(model)
'''


def test_optional_vllm_note_beside_the_files_nccl_warning_is_given_once(tmp_path):
    """HA#36: an NPU916 info whose only note is that the optional `vllm` must be installed says
    what the generic note says; with the file's NCCL weight-transfer warning beside it, NPU916 is
    one finding per file: the info is folded into the warning, which lists its line and keeps its
    severity."""
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/import_utils.py": IMPORT_UTILS,
                                                   "pkg/client.py": CLIENT}))
    found = [f for f in report["findings"] if f["path"] == "pkg/client.py" and f["code"] == "NPU916"]
    assert len(found) == 1 and found[0]["line"] == 6 and found[0]["severity"] == "warning"
    assert [line for line, _c, _s in found[0]["also"]] == [4]


def test_optional_vllm_note_alone_stays(tmp_path):
    """HA#36's nearest true case: the same opt-in note with no other vLLM note in the run stays
    a finding (the note is given once, not never)."""
    alone = CLIENT.split("\n\nfrom vllm.distributed")[0] + "\n\n\ndef host() -> str:\n    return get_ip()\n"
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/import_utils.py": IMPORT_UTILS,
                                                   "pkg/client.py": alone}))
    assert _places(report, "pkg/client.py", "NPU916")[4]["severity"] == "info"
