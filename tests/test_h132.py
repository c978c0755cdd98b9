"""Helper h132 (issue #16, round 28): vLLM kernels an NPU host never reaches, because what loads
them fails first or is selected only on CUDA. Each false case is paired with its nearest true case,
which stays reported."""

from __future__ import annotations

from tests.precision_helpers import migrate_json, moot_lines, write_project


def _open(report):
    return sorted((f["path"], f["line"], f["code"], f["severity"]) for f in report["findings"] if not f["fixable"])


_FIRST = """\
import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute


def collective(x):
    return cute.compile(x, cuda.CUstream(0))
"""

# (a kernel module of the same folder: module-level CuTe-DSL imports, and a function-local import
# of the same package further down, merged into the same NPU911 finding)
_SECOND = """\
import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute


def compile_kernel(x):
    from cutlass.cute.runtime import make_fake_stream

    return cute.compile(x, make_fake_stream())
"""


def test_a_module_whose_later_places_repeat_its_failing_import_is_folded_with_its_folder(tmp_path):
    """CA#31, CB#10: `lamport_copy.py` and `fused_add_multicast_skinny_gemm.py` of a CuTe-DSL kernel
    folder import `cuda.bindings` and `cutlass` unguarded at module level, and again inside a
    function. On an NPU host the module stops at its first import, so the function-local one never
    runs: the folder is one port item, named once, on its first module (nothing is lost: the
    folded module is named there)."""
    root = write_project(tmp_path, {
        "pkg/cute/allreduce.py": _FIRST,
        "pkg/cute/lamport.py": _SECOND,
    })
    report = migrate_json(root)
    assert _open(report) == [("pkg/cute/allreduce.py", 1, "NPU911", "error")], _open(report)
    kept = next(f for f in report["findings"] if f["path"] == "pkg/cute/allreduce.py")
    assert "`lamport.py`" in kept["message"], kept["message"]


def test_a_later_import_of_another_cuda_only_package_keeps_its_module_reported(tmp_path):
    """Nearest true case: the function-local import is of another CUDA-only package (`flashinfer`),
    which the module-level imports do not name: porting the module means porting that too, so its
    finding stays its own; and a module whose function-local line comes before its first failing
    import (a function defined and maybe called first) keeps its finding as well."""
    root = write_project(tmp_path, {
        "pkg/cute/allreduce.py": _FIRST,
        "pkg/cute/lamport.py": _SECOND.replace("from cutlass.cute.runtime import make_fake_stream",
                                               "from flashinfer.norm import make_fake_stream"),
        "pkg/cute/early.py": "def probe():\n    from cutlass.cute.runtime import make_fake_stream\n"
                             "    return make_fake_stream()\n\n\nimport cutlass\nimport cutlass.cute as cute\n",
    })
    report = migrate_json(root)
    opened = _open(report)
    assert ("pkg/cute/lamport.py", 1, "NPU911", "error") in opened, opened
    assert any(path == "pkg/cute/early.py" and severity == "error" for path, _l, _c, severity in opened), opened


_PLATFORMS = """\
class _Platform:
    def is_cuda(self):
        return True


current_platform = _Platform()
"""

_TRITON_UTILS = """\
try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None
    tl = None
"""


def _indexer_project(tmp_path, check: str):
    """CC#18's shape: a Triton kernel launched only by a function of its own module that first
    asserts the platform (`assert current_platform.is_cuda()`), called from another module."""
    ops = f'''\
import torch

from pkg.platforms import current_platform
from pkg.triton_utils import tl, triton


@triton.jit
def _rope_quant_kernel(x_ptr, n: tl.constexpr):
    i = tl.program_id(0)
    tl.store(x_ptr + i, tl.load(x_ptr + i) * 2)


def rope_quant(x):
    assert {check}
    assert x.dtype == torch.bfloat16
    _rope_quant_kernel[(x.numel(),)](x, x.numel())
    return x
'''
    layer = """\
import torch

from pkg.ops import rope_quant


class Indexer(torch.nn.Module):
    def forward(self, x):
        return rope_quant(x)
"""
    return write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/platforms.py": _PLATFORMS,
        "pkg/triton_utils.py": _TRITON_UTILS,
        "pkg/ops.py": ops,
        "pkg/layer.py": layer,
    })


def _kernel_errors(report):
    return [f for f in report["findings"]
            if f["path"] == "pkg/ops.py" and f["code"] == "NPU910" and f["severity"] != "info"]


def test_cc18_a_kernel_launched_only_after_its_launchers_platform_assert_is_a_named_scope(tmp_path):
    """CC#18: `_fused_indexer_q_rope_quant_kernel` is launched only inside
    `fused_indexer_q_rope_quant`, after `assert current_platform.is_cuda()`, false on an NPU host
    (the launcher's caller, another module, is then the project's own "CUDA only" error). Its only
    reference lies in its own module; the kernel is still never launched there."""
    report = migrate_json(_indexer_project(tmp_path, "current_platform.is_cuda()"))
    assert not _kernel_errors(report), _kernel_errors(report)
    scopes = moot_lines(report["skipped"], "NPU910", "pkg/ops.py")
    assert 7 in scopes and "`_rope_quant_kernel`" in scopes[7] and "pkg/ops.py:16" in scopes[7], scopes


def test_cc18_pair_a_kernel_after_a_tensor_device_assert_stays_an_error(tmp_path):
    """Nearest true case: the launcher asserts the tensor's device (`x.is_cuda`, rewritten to the
    shim's accelerator test: true on an NPU host), so the kernel is launched there."""
    report = migrate_json(_indexer_project(tmp_path, "x.is_cuda"))
    errors = _kernel_errors(report)
    assert errors and errors[0]["line"] == 7, report["findings"]


_MOE_PLATFORMS = """\
class _Platform:
    def is_cuda(self):
        return True

    def is_device_capability(self, capability):
        return True


current_platform = _Platform()
"""

_EXPERTS = """\
from pkg.platforms import current_platform


class Experts:
    @classmethod
    def is_supported_config(cls, config):
        if not cls._supports_current_device():
            return False, "current device"
        return True, None


class CutlassExperts(Experts):
    @staticmethod
    def _supports_current_device():
        return current_platform.is_cuda() and current_platform.is_device_capability(90)


class HummingBase(Experts):
    @staticmethod
    def _supports_current_device():
        return current_platform.is_cuda()


class HummingExperts(HummingBase):
    pass
{more}"""

_ORACLE = """\
def backend_to_kernel_cls(backend):
    if backend == "cutlass":
        from pkg.experts import CutlassExperts

        return [CutlassExperts]
    elif backend == "humming":
        from pkg.experts import HummingExperts

        return [HummingExperts]
{more}    raise ValueError(backend)


def select_backend(config):
    for backend in {backends}:
        for kernel_cls in backend_to_kernel_cls(backend):
            supported, reason = kernel_cls.is_supported_config(config)
            if supported:
                return backend, kernel_cls
    raise NotImplementedError("No backend supports the deployment configuration")
"""

_METHOD = """\
import torch

from pkg.oracle import select_backend
from pkg.quant_config import fp8_quant_config


class W4A8MoEMethod:
    def __init__(self, config):
        self.config = config
        self.backend, self.experts_cls = select_backend(config)

    def create_weights(self, n):
        return torch.empty(n, dtype=torch.float8_e4m3fn)

    def get_quant_config(self, scales):
        return fp8_quant_config(self.config, scales)


def get_method(config):
    return W4A8MoEMethod(config)
"""

_QUANT_CONFIG = """\
import torch


def fp8_quant_config(config, scales):
    return config, (scales / 448.0).to(torch.float8_e4m3fn)
"""


def _oracle_project(tmp_path, more_experts: str = "", more_lister: str = "", backends: str = '("cutlass", "humming")'):
    """CA#39 / CC#22's shape: a quantized-MoE method picks its experts in `__init__` through an
    oracle of another module that asks each candidate class (`is_supported_config`, which asks
    `_supports_current_device`) and raises when none fits."""
    return write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/platforms.py": _MOE_PLATFORMS,
        "pkg/experts.py": _EXPERTS.format(more=more_experts),
        "pkg/oracle.py": _ORACLE.format(more=more_lister, backends=backends),
        "pkg/method.py": _METHOD,
        "pkg/quant_config.py": _QUANT_CONFIG,
    })


def _fp8_errors(report):
    return sorted((f["path"], f["line"]) for f in report["findings"]
                  if f["code"] == "NPU913" and not f["fixable"] and f["severity"] != "info")


def test_ca39_cc22_a_method_whose_init_selects_from_rejected_candidates_never_runs(tmp_path):
    """CC#22: `create_weights` of a method whose `__init__` calls the NVFP4 oracle, every candidate of
    which requires CUDA (one through the check it inherits from its base, as the Humming experts
    do); CA#39: a quant-config helper of another module only that method's `get_quant_config`
    calls. The oracle raises first on an NPU host: both are named scopes naming the selector."""
    report = migrate_json(_oracle_project(tmp_path))
    assert not _fp8_errors(report), _fp8_errors(report)
    scopes = moot_lines(report["skipped"], "NPU913", "pkg/method.py")
    assert 13 in scopes and "`select_backend()`" in scopes[13] and "`HummingExperts`" in scopes[13], scopes
    assert moot_lines(report["skipped"], "NPU913", "pkg/quant_config.py"), report["skipped"]


def test_ca39_cc22_pair_a_candidate_that_may_run_there_keeps_the_findings(tmp_path):
    """Nearest true case: the oracle may also pick a portable candidate whose check answers yes on an
    NPU host (a Triton fallback that accepts every device): the method is built there and its FP8
    runs, so both findings stay errors."""
    more_experts = """

class TritonExperts(Experts):
    @staticmethod
    def _supports_current_device():
        return True
"""
    more_lister = """    elif backend == "triton":
        from pkg.experts import TritonExperts

        return [TritonExperts]
"""
    report = migrate_json(_oracle_project(tmp_path, more_experts, more_lister, '("cutlass", "humming", "triton")'))
    assert ("pkg/method.py", 13) in _fp8_errors(report), report["findings"]
    assert ("pkg/quant_config.py", 5) in _fp8_errors(report), report["findings"]


def test_ca39_pair_a_subclass_of_the_method_keeps_its_methods_reported(tmp_path):
    """Nearest true case: another class of the run derives from the method class (with an `__init__`
    of its own that selects nothing): its instances run the inherited `create_weights`."""
    root = _oracle_project(tmp_path)
    (root / "pkg/ascend_method.py").write_text(
        "from pkg.method import W4A8MoEMethod\n\n\nclass AscendMethod(W4A8MoEMethod):\n"
        "    def __init__(self, config):\n        self.config = config\n")
    report = migrate_json(root)
    assert ("pkg/method.py", 13) in _fp8_errors(report), report["findings"]


_INHERITING = """\
class HummingExperts(HummingBase):
    def apply(self, x):
        return (x / 448.0).to(torch.float8_e4m3fn)
"""


def _inheriting_project(tmp_path, extra: str = ""):
    root = _oracle_project(tmp_path)
    experts = root / "pkg/experts.py"
    text = experts.read_text().replace("class HummingExperts(HummingBase):\n    pass\n", _INHERITING + extra)
    experts.write_text("import torch\n" + text)
    return root


def test_cb15_a_kernel_class_that_inherits_its_rejecting_check_is_never_selected(tmp_path):
    """CB#15: `OAITritonExperts` defines no support check of its own; the one it inherits from
    `BaseOAITritonExperts` requires CUDA SM90+ (or ROCm). Every reference to the class is a
    selector's question (the oracle's candidate list), so its code never runs on an NPU host."""
    report = migrate_json(_inheriting_project(tmp_path))
    assert not [e for e in _fp8_errors(report) if e[0] == "pkg/experts.py"], report["findings"]
    scopes = moot_lines(report["skipped"], "NPU913", "pkg/experts.py")
    assert any("`HummingBase._supports_current_device()`" in r for r in scopes.values()), scopes


def test_cb15_pair_an_inheriting_class_also_built_by_name_stays_reported(tmp_path):
    """Nearest true case: library code of the run also builds the inheriting class by name (no
    selector asks it first), so its FP8 runs wherever that code does."""
    extra = "\n\ndef build_default():\n    return HummingExperts()\n"
    report = migrate_json(_inheriting_project(tmp_path, extra))
    assert [e for e in _fp8_errors(report) if e[0] == "pkg/experts.py"], report["findings"]
