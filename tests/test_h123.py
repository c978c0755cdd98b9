"""Precision wave 27, helper h123 (issue #16): vLLM model_executor kernel classes and dispatchers.

Code reached only from a kernel class that a selector asks first (`cls.is_supported_config()`
running `_supports_current_device()`, `kernel.is_supported()`) and that answers no on an NPU host
is never run there (npu_migrate/supportgates27.py; audit BU#15: the Triton kernels of a modular
MoE experts class whose `_supports_current_device()` is `return is_cuda_alike() or is_xpu()`, the
class named only in an oracle's `return [Cls]`). Each shape is paired with the nearest case that
stays reported: a check true or undecidable there, a class built by name in the library, a check
no selector asks; a class tests also build by name is policy P2's info."""

from __future__ import annotations

from .precision_helpers import migrate_json, moot_lines, write_project

PLATFORMS = '''\
class Platform:
    _enum = "cuda"

    def is_cuda_alike(self):
        return self._enum in ("cuda", "rocm")

    def is_xpu(self):
        return self._enum == "xpu"


current_platform = Platform()
'''

TRITON_UTILS = '''\
try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None
    tl = None
'''

# (kernels, their launcher and the experts class in one module, as in the audited package)
EXPERTS = '''\
from proj.platforms import current_platform
from proj.triton_utils import tl, triton


@triton.jit
def batched_kernel(x_ptr, n):
    pid = tl.program_id(0)
    tl.store(x_ptr + pid, tl.load(x_ptr + pid) * 2)


def invoke_batched_kernel(x):
    batched_kernel[(x.numel(),)](x, x.numel())
    return x


class ExpertsBase:
    @classmethod
    def is_supported_config(cls, config):
        if not cls._supports_current_device():
            return False, "device"
        return True, None


class BatchedExperts(ExpertsBase):
    @staticmethod
    def _supports_current_device() -> bool:
        return BODY

    def apply(self, x):
        import flashinfer.fused_moe

        flashinfer.fused_moe.prepare(x)
        return invoke_batched_kernel(x)
'''

CUDA_ONLY = "current_platform.is_cuda_alike() or current_platform.is_xpu()"

ORACLE = '''\
def backend_to_kernel_cls(backend):
    if backend == "batched_triton":
        from proj.experts import BatchedExperts

        return [BatchedExperts]
    raise ValueError(backend)


def select(backend, config):
    for cls in backend_to_kernel_cls(backend):
        ok, why = cls.is_supported_config(config)
        if not ok:
            raise ValueError(why)
        return cls
'''


def _project(tmp_path, body=CUDA_ONLY, oracle=ORACLE, extra=None):
    files = {
        "proj/__init__.py": "",
        "proj/platforms.py": PLATFORMS,
        "proj/triton_utils.py": TRITON_UTILS,
        "proj/experts.py": EXPERTS.replace("BODY", body),
        "proj/oracle.py": oracle,
    }
    files.update(extra or {})
    return migrate_json(write_project(tmp_path, files))


def _open(report, path="proj/experts.py"):
    return {(f["line"], f["code"]): f for f in report["findings"]
            if f["path"] == path and not f["fixable"] and f["severity"] != "info"}


KERNEL, LAZY = (5, "NPU910"), (30, "NPU911")


def test_experts_class_rejected_by_its_device_check(tmp_path):
    """BU#15's shape: the Triton kernel an experts class launches (through a module-level
    launcher) and a lazy CUDA-library import in its method, the class named only in another
    module's oracle `return [Cls]` that asks `cls.is_supported_config()`: named scopes naming the
    class and its check."""
    report = _project(tmp_path)
    opened = _open(report)
    assert KERNEL not in opened and LAZY not in opened, opened
    kernel = moot_lines(report["skipped"], "NPU910", "proj/experts.py")[5]
    assert "the Triton kernel `batched_kernel` is reached only from kernel classes an NPU host never selects or builds" in kernel
    assert "`BatchedExperts._supports_current_device()` answers no on an NPU host" in kernel
    assert "is_cuda_alike() or current_platform.is_xpu()` is False there" in kernel
    assert "BatchedExperts" in moot_lines(report["skipped"], "NPU911", "proj/experts.py")[30]


def test_check_true_or_undecidable_stays(tmp_path):
    """The nearest true cases: a device check that answers yes on an NPU host, and one the run
    cannot decide there (the NPU's own predicate, which the project's platform does not define),
    keep the kernel and the import reported."""
    for n, body in enumerate(("True", "current_platform.is_cuda_alike() or current_platform.is_npu()")):
        opened = _open(_project(tmp_path / str(n), body=body))
        assert KERNEL in opened and LAZY in opened, (body, opened)


def test_class_built_by_name_in_the_library_stays(tmp_path):
    """A construction of the class by name in library code, past any selector, keeps everything
    it reaches."""
    layer = '''\
from proj.experts import BatchedExperts


def forward(x):
    return BatchedExperts().apply(x)
'''
    opened = _open(_project(tmp_path, extra={"proj/layer.py": layer}))
    assert KERNEL in opened and LAZY in opened, opened


def test_check_no_selector_asks_stays(tmp_path):
    """A candidate table nobody asks about is no selection: kept."""
    oracle = '''\
def backend_to_kernel_cls(backend):
    from proj.experts import BatchedExperts

    return [BatchedExperts]
'''
    opened = _open(_project(tmp_path, oracle=oracle))
    assert KERNEL in opened, opened


def test_class_built_only_by_tests_is_info(tmp_path):
    """Policy P2: a test that builds the class by name does not make the library reach it; the
    kernel becomes info naming the test (not a named scope: the test itself runs it)."""
    test = '''\
import torch

from proj.experts import BatchedExperts


def test_batched():
    BatchedExperts().apply(torch.ones(4))
'''
    report = _project(tmp_path, extra={"tests/test_batched.py": test})
    assert KERNEL not in _open(report)
    info = [f for f in report["findings"] if f["path"] == "proj/experts.py" and f["line"] == 5]
    assert info and info[0]["severity"] == "info", info
    assert "reached on an NPU host only from tests/benchmarks" in info[0]["message"]
    assert "tests/test_batched.py:7" in info[0]["message"]


MEGA = '''\
import torch

from proj.platforms import current_platform
from proj.staging import stage_inputs


def check_mega_supported(device, hidden_size):
    """Raise unless the fused MoE can run here."""
    CHECK
    if hidden_size % 128 != 0:
        raise ValueError("hidden size")


class MegaExperts(torch.nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        device = torch.device("cuda")
        check_mega_supported(device, hidden_size)
        self.hidden_size = hidden_size

    def forward(self, x):
        return stage_inputs(x)
'''

STAGING = '''\
from proj.triton_utils import tl, triton


@triton.jit
def _stage_kernel(x_ptr, n):
    pid = tl.program_id(0)
    tl.store(x_ptr + pid, tl.load(x_ptr + pid))


def stage_inputs(x):
    _stage_kernel[(x.numel(),)](x, x.numel())
    return x
'''

MODEL = '''\
from proj.mega import MegaExperts


class Model:
    def __init__(self, config):
        if config.moe_backend == "mega":
            self.experts = MegaExperts(config.hidden_size)
'''


def test_kernel_only_a_class_whose_init_raises_launches(tmp_path):
    """BP#3's shape: a staging module's Triton kernel launched only from a method of an experts
    module whose `__init__` first calls a check raising unless the device is SM100 (a model
    builds it under an opt-in backend name): no instance exists on an NPU host, a named scope.
    The nearest true case: a check raising only on a shape keeps the kernel reported."""
    sm100 = ('if not current_platform.is_device_capability_family(100):\n'
             '        raise NotImplementedError("needs SM100")')
    for n, check, gone in ((0, sm100, True), (1, "pass", False)):
        report = _project(tmp_path / str(n), extra={
            "proj/mega.py": MEGA.replace("CHECK", check), "proj/staging.py": STAGING, "proj/model.py": MODEL})
        opened = _open(report, "proj/staging.py")
        assert ((4, "NPU910") not in opened) is gone, (check, opened)
        if gone:
            why = moot_lines(report["skipped"], "NPU910", "proj/staging.py")[4]
            assert "whose `__init__` calls `check_mega_supported()`" in why and "no instance exists there" in why
