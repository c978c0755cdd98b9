"""Round 20 (h85): true findings given their level and an accurate message, and one silent miss
(wording20.py, importguards20.py, the Triton-gate wording of guards15.py and tritonguards.py)."""

from __future__ import annotations

from npu_migrate import guards15, tritonguards
from tests.precision_helpers import migrate_json, write_project

CUSTOM_OP = '''import torch


@torch.library.custom_op("mylib::tiled_fwd", mutates_args=(), device_types="cuda")
def tiled_fwd(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.mm(a, b)


def tiled(a, b):
    return tiled_fwd(a, b)
'''

GUARDED_OP = '''import torch

try:
    from mylib import _C_ext
except ImportError:
    _C_ext = None

if _C_ext is not None:
    @torch.library.custom_op("mylib::fwd", mutates_args=(), device_types=["cuda"])
    def fwd(a: torch.Tensor) -> torch.Tensor:
        return _C_ext.fwd(a)
'''

OP_WITH_NPU_KERNEL = CUSTOM_OP + '''

@tiled_fwd.register_kernel("npu")
def _tiled_npu(a, b):
    return torch.mm(a, b)
'''

DEVICE_DEFAULT = '''import torch


class Runner:
    def __init__(self, model, device=None):
        device = device or "cuda"
        self.model = model.to(torch.device(device))
'''

DEVICE_DEFAULT_CHECKED = '''import torch


class Runner:
    def __init__(self, model, device=None):
        device = device or "cuda"
        if device == "cuda" and not torch.cuda.is_available():
            device = "cpu"
        self.model = model.to(torch.device(device))
'''

MEMORY_HISTORY = '''import torch


def train(device, profile_memory):
    if profile_memory and device.type == "cuda":
        torch.cuda.memory._record_memory_history(max_entries=100000)
    return device
'''


def _open(report, path, code=None):
    return {f["line"]: f for f in report["findings"]
            if not f["fixable"] and f["path"] == path and (code is None or f["code"] == code)}


def test_custom_op_registered_for_cuda_only_is_an_error_that_says_why(tmp_path):
    # BA#12, BB#7, BE#29: `device_types="cuda"`: NPU tensors find no kernel, the call raises
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ops.py": CUSTOM_OP})
    found = _open(migrate_json(root), "pkg/ops.py", "NPU990")
    assert found[4]["severity"] == "error"
    assert "gets a kernel for CUDA only" in found[4]["message"] and "PrivateUse1" in found[4]["message"]


def test_custom_op_registered_only_under_an_if_keeps_its_warning_with_the_condition(tmp_path):
    # (flash3's `if _C_flashattention3 is not None:`: an NPU host may never define the op)
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ops.py": GUARDED_OP})
    found = _open(migrate_json(root), "pkg/ops.py", "NPU990")
    assert found[9]["severity"] == "warning"
    assert "registered only when `_C_ext is not None` (line 8)" in found[9]["message"]


def test_custom_op_with_an_npu_kernel_is_left_as_it_was(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ops.py": OP_WITH_NPU_KERNEL})
    found = _open(migrate_json(root), "pkg/ops.py", "NPU990")
    assert all("CUDA only" not in f["message"] and f["severity"] != "error" for f in found.values())


def test_cuda_device_default_is_an_error_that_says_what_to_do(tmp_path):
    # BE#34: `device = device or "cuda"` then `.to(torch.device(device))`: fails on an NPU host
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/run.py": DEVICE_DEFAULT})
    found = _open(migrate_json(root), "pkg/run.py", "NPU990")
    assert found[6]["severity"] == "error" and "default to the NPU" in found[6]["message"]


def test_cuda_device_default_moved_by_a_later_check_keeps_its_level(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/run.py": DEVICE_DEFAULT_CHECKED})
    found = _open(migrate_json(root), "pkg/run.py")
    assert all("default to the NPU" not in f["message"] for f in found.values())


def test_device_check_around_record_memory_history_names_the_npu_counterpart(tmp_path):
    # BA#26, BE#33: the warning stays, the message names torch.npu.memory._record_memory_history
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/train.py": MEMORY_HISTORY})
    found = _open(migrate_json(root), "pkg/train.py", "NPU110")
    assert found[5]["severity"] == "warning"
    assert "torch_npu has `torch.npu.memory._record_memory_history`" in found[5]["message"]
    assert found[5]["message"].startswith("Device check guards code written for CUDA (")


TRITON_PACKAGE = '''try:
    import triton

    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False

if HAS_TRITON:
    from .rmsnorm import rms_norm
'''

TRITON_PACKAGE_WITH_PLACEHOLDERS = TRITON_PACKAGE + '''else:
    def rms_norm(*args, **kwargs):
        raise RuntimeError("needs triton")
'''

KERNEL = '''import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, n: tl.constexpr):
    pass


def rms_norm(x):
    _rms_kernel[(1,)](x, 4)
    return x
'''

IMPORTER = '''from pkg.kernels import rms_norm


def forward(x):
    return rms_norm(x)
'''

GUARDED_IMPORTER = '''try:
    from pkg.kernels import rms_norm
except ImportError:
    rms_norm = None
'''


def _triton_project(tmp_path, package, importers):
    files = {"pkg/__init__.py": "", "pkg/kernels/__init__.py": package, "pkg/kernels/rmsnorm.py": KERNEL}
    files.update(importers)
    return migrate_json(write_project(tmp_path, files))


def test_unguarded_import_of_names_bound_only_under_has_triton_is_reported_once(tmp_path):
    # AZ#26, BD#11, BD#17: ImportError where Triton is missing, and no finding said so
    report = _triton_project(tmp_path, TRITON_PACKAGE, {"pkg/model.py": IMPORTER, "pkg/other.py": IMPORTER})
    found = [f for f in report["findings"] if not f["fixable"] and "binds them only under" in f["message"]]
    assert len(found) == 1 and found[0]["severity"] == "error" and found[0]["code"] == "NPU910"
    assert found[0]["path"] == "pkg/model.py" and "also imported so at pkg/other.py:1" in found[0]["message"]
    kernel = _open(report, "pkg/kernels/rmsnorm.py", "NPU910")
    assert all("runs the fallback" not in f["message"] for f in kernel.values())


def test_guarded_importer_or_placeholders_leave_no_such_finding(tmp_path):
    for package, importer in ((TRITON_PACKAGE, GUARDED_IMPORTER), (TRITON_PACKAGE_WITH_PLACEHOLDERS, IMPORTER)):
        report = _triton_project(tmp_path / str(len(package)) / str(len(importer)), package,
                                 {"pkg/model.py": importer})
        assert not [f for f in report["findings"] if "binds them only under" in f["message"]]


def test_triton_gate_wording_claims_no_fallback_and_says_depends_on():
    assert "fallback" not in tritonguards.TRITON_GATED_IMPORTERS
    assert "depends on what it probes" in guards15.GATED_KERNELS
    assert "transfer_to_npu forces it False" in guards15.GATED_KERNELS


VLLM_CLIENT = '''import torch

from trainer_utils import is_vllm_available

if is_vllm_available():
    from vllm.utils.network_utils import get_ip
    from vllm.distributed.weight_transfer.nccl_common import trainer_init


def init_transfer(port):
    return trainer_init({"master_address": get_ip(), "master_port": port})
'''

VLLM_PLAIN = '''from trainer_utils import is_vllm_available

if is_vllm_available():
    from vllm.utils.network_utils import get_ip
    from vllm import SamplingParams
'''


def test_import_of_vllm_nccl_weight_transfer_is_a_warning_that_heads_the_file_vllm_imports(tmp_path):
    # BC#15, BE#22: the weight sync joins vLLM's NCCL group: an NPU host needs an HCCL path
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/client.py": VLLM_CLIENT,
                                    "pkg/plain.py": VLLM_PLAIN})
    report = migrate_json(root)
    client = _open(report, "pkg/client.py", "NPU916")
    assert list(client) == [7] and client[7]["severity"] == "warning"
    assert "PyNcclCommunicator" in client[7]["message"] and "HCCL path" in client[7]["message"] and "also at line 6" in client[7]["message"]
    # (plain.py's generic note is given once, at the run's warning: folds24.py, round 24 BP#39)
    assert not _open(report, "pkg/plain.py", "NPU916")
    folded = [s["reason"] for s in report["skipped"] if s.get("path") == "pkg/plain.py" and "(NPU916)" in s["reason"]]
    assert folded and all("NCCL" not in r and "given once for the run at pkg/client.py:7" in r for r in folded)


def test_record_memory_history_message_names_where_torch_npu_defines_it(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "",
                                    "pkg/p.py": "import torch\n\ntorch.cuda.memory._record_memory_history(enabled=None)\n"})
    found = _open(migrate_json(root), "pkg/p.py", "NPU202")
    assert "torch_npu defines torch.npu.memory._record_memory_history (2.7.1" in found[3]["message"]
    assert "npu-migrate does not rewrite them" in found[3]["message"]
