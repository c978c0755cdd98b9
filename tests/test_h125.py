"""Precision wave 27, helper h125 (issue #16): SGLang's JIT-compiled CUDA sources (round audits
BM#16, BP#15; npu_migrate/jitcallers27.py, called from jitreach23.py). Each false case is paired
with the nearest true case that stays reported."""

from __future__ import annotations

from tests.precision_helpers import migrate_json, write_project
from tests.test_h94 import PLATFORM

JIT_UTILS = '''\
def load_jit(name, *args, cuda_files=(), cuda_wrappers=()):
    from tvm_ffi.cpp import load_inline

    return load_inline(name, cuda_sources=[open(f).read() for f in cuda_files])
'''

LOADER = '''\
from proj.kern.utils import load_jit


def _module(dtype):
    return load_jit("{name}", dtype, cuda_files=["{source}"], cuda_wrappers=[("run", "run")])


def {name}(x, out):
    _module(x.dtype).run(x, out)
'''

KERNEL = "__global__ void {name}_kernel(float* x) {{ x[threadIdx.x] = 1.0f; }}\n"

# a library module that fails to import on an NPU host before it reaches the loader
FAILING_IMPORTER = '''\
import torch

from flashinfer import silu_and_mul

from proj.kern.quant import quant


def run_moe(x, out):
    quant(x, out)
    return silu_and_mul(out)
'''

TEST_OF_DEMO = '''\
import torch

from proj.kern.demo import demo


def test_demo():
    x = torch.zeros(8)
    demo(x, x)
'''


def _project(tmp_path, files):
    return migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/utils.py": PLATFORM,
        "proj/kern/__init__.py": "",
        "proj/kern/utils.py": JIT_UTILS,
        **files,
    }))


def _npu912(report):
    return [f for f in report["findings"] if f["code"] == "NPU912"]


def _scopes(report):
    return [s["reason"] for s in report["skipped"] if "(NPU912)" in s.get("reason", "")]


def _quant_files(importer):
    return {
        "proj/kern/quant.py": LOADER.format(name="quant", source="gemm/quant.cuh"),
        "proj/kern/csrc/gemm/quant.cuh": KERNEL.format(name="quant"),
        "proj/moe/__init__.py": "",
        "proj/moe/w4a8.py": importer,
    }


# ------------------------------------------------ BP#15: the loader's only importer fails first

def test_jit_source_whose_loader_only_a_failing_importer_reads_is_a_scope(tmp_path):
    report = _project(tmp_path, _quant_files(FAILING_IMPORTER))
    assert _npu912(report) == []
    (reason,) = [r for r in _scopes(report) if "JIT loaders" in r]
    assert "proj/moe/w4a8.py:5 (`proj/moe/w4a8.py` fails to import first on an NPU host, at line 3" in reason
    assert "from flashinfer import silu_and_mul" in reason
    # the importer's own failure stays reported
    (own,) = [f for f in report["findings"] if f["path"] == "proj/moe/w4a8.py" and f["code"] == "NPU911"]
    assert own["line"] == 3 and own["severity"] == "error"


def test_jit_source_stays_when_the_importers_cuda_import_is_guarded(tmp_path):
    # nearest true case: the CUDA-only import cannot fail the module (try/except ImportError), so
    # `run_moe` runs on an NPU host and compiles the kernel there
    guarded = FAILING_IMPORTER.replace(
        "from flashinfer import silu_and_mul\n",
        "try:\n    from flashinfer import silu_and_mul\nexcept ImportError:\n    silu_and_mul = None\n")
    report = _project(tmp_path, _quant_files(guarded))
    (found,) = _npu912(report)
    assert found["severity"] == "error"
    assert not [r for r in _scopes(report) if "JIT loaders" in r]


def test_jit_source_stays_when_the_loader_is_imported_before_the_failing_import(tmp_path):
    # nearest true case: the loader's import runs first (a loader may compile at import)
    early = FAILING_IMPORTER.replace("from flashinfer import silu_and_mul\n\nfrom proj.kern.quant import quant\n",
                                     "from proj.kern.quant import quant\n\nfrom flashinfer import silu_and_mul\n")
    report = _project(tmp_path, _quant_files(early))
    (found,) = _npu912(report)
    assert found["severity"] == "error"


GATED_IMPORTER = '''\
from proj.utils import is_cuda

_is_cuda = is_cuda()

if _is_cuda:
    from proj.kern.quant import quant as cuda_quant


def scaled_quant(x, out):
    cuda_quant(x, out)
    return out
'''


def test_jit_source_whose_loader_is_imported_only_under_a_false_gate_or_by_a_failing_importer_is_a_scope(tmp_path):
    # the read in `scaled_quant` meets a NameError on an NPU host, never the loader
    report = _project(tmp_path, {**_quant_files(FAILING_IMPORTER), "proj/quant_fp8.py": GATED_IMPORTER})
    assert _npu912(report) == []
    (reason,) = [r for r in _scopes(report) if "JIT loaders" in r]
    assert "proj/quant_fp8.py:6 (the import itself never runs on an NPU host: " in reason
    assert "proj/moe/w4a8.py:5 (`proj/moe/w4a8.py` fails to import first" in reason


def test_jit_source_stays_when_the_loader_is_imported_under_an_unknown_gate(tmp_path):
    # nearest true case: a user's environment variable may turn the import on there
    opt_in = GATED_IMPORTER.replace("from proj.utils import is_cuda\n\n_is_cuda = is_cuda()\n\nif _is_cuda:",
                                    "import os\n\nif os.environ.get(\"USE_JIT_QUANT\"):")
    assert opt_in != GATED_IMPORTER
    report = _project(tmp_path, {**_quant_files(FAILING_IMPORTER), "proj/quant_fp8.py": opt_in})
    (found,) = _npu912(report)
    assert found["severity"] == "error"


# ------------------------------------- BM#16: loaders only tests import, or nothing (policies P2, P3)

def _demo_files(**extra):
    return {
        "proj/kern/demo.py": LOADER.format(name="demo", source="demo.cuh"),
        "proj/kern/csrc/demo.cuh": KERNEL.format(name="demo"),
        **extra,
    }


def test_jit_source_whose_loader_only_a_test_imports_is_info_naming_the_test(tmp_path):
    report = _project(tmp_path, _demo_files(**{"proj/kern/tests/test_demo.py": TEST_OF_DEMO}))
    (found,) = _npu912(report)
    assert found["severity"] == "info"
    assert "reached on an NPU host only by a user's own call of a JIT loader the library never imports" \
        in found["message"]
    assert "`proj/kern/demo.py` is reached on an NPU host only from tests/benchmarks " \
        "(proj/kern/tests/test_demo.py:3)" in found["message"]
    assert not _scopes(report)  # (a user may still call it: info, not a scope)


def test_jit_source_whose_loader_nothing_imports_is_info_saying_so(tmp_path):
    report = _project(tmp_path, _demo_files())
    (found,) = _npu912(report)
    assert found["severity"] == "info"
    assert "no file of the run imports `proj/kern/demo.py`" in found["message"]


def test_jit_source_whose_loader_a_library_module_calls_stays_an_error(tmp_path):
    # nearest true case: library code an NPU host runs calls the loader
    user = "from proj.kern.demo import demo\n\n\ndef bump(x):\n    demo(x, x)\n"
    report = _project(tmp_path, _demo_files(**{"proj/kern/tests/test_demo.py": TEST_OF_DEMO,
                                               "proj/ops.py": user}))
    (found,) = _npu912(report)
    assert found["severity"] == "error"
    assert "JIT loader" not in found["message"]


# ------------------------------------ BR#20: a switched-off CUDA library's methods, callers test the switch

COMMUNICATOR = '''\
import ctypes


class NCCLLibrary:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)


class Communicator:
    def __init__(self, path):
        try:
            self.nccl = NCCLLibrary(path)
        except Exception:
            self.available = False
            self.disabled = True
            return
        self.available = True
        self.disabled = False

    def all_reduce(self, x):
        if self.disabled:
            return
        self.nccl.ncclAllReduce(x)

    def gather_async(self, out, inp):
        self.nccl.ncclAllGather(out, inp)

    def group_start(self):
        self.nccl.ncclGroupStart()
'''

STATE = '''\
from proj.comm.pynccl import Communicator


class Group:
    def __init__(self, use_nccl, path):
        self.comm = Communicator(path) if use_nccl else None

    def gather(self, out, inp):
        comm = self.comm
        if comm is None or comm.disabled:
            out.copy_(inp)
        else:
            comm.gather_async(out, inp)

    def gather_many(self, outs, inps):
        comm = self.comm
        assert comm is not None and not comm.disabled, "nccl required"
        comm.group_start()
        for out, inp in zip(outs, inps):
            comm.gather_async(out, inp)
'''


def _comm_project(tmp_path, state=STATE):
    return migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/comm/__init__.py": "",
        "proj/comm/pynccl.py": COMMUNICATOR,
        "proj/comm/state.py": state,
    }))


def _comm_findings(report):
    return [f for f in report["findings"] if f["path"] == "proj/comm/pynccl.py" and "self.nccl" in f["message"]]


def test_library_methods_whose_callers_test_the_switch_are_a_scope(tmp_path):
    report = _comm_project(tmp_path)
    assert _comm_findings(report) == []
    reasons = [s["reason"] for s in report["skipped"] if s["path"] == "proj/comm/pynccl.py"]
    assert any("every call of `gather_async` tests the receiver's switch first (proj/comm/state.py:13"
               in r for r in reasons), reasons
    assert any("every call of `group_start` tests the receiver's switch first (proj/comm/state.py:18)"
               in r for r in reasons), reasons


def test_library_method_no_file_calls_is_info_saying_so(tmp_path):
    state = STATE.replace("        comm.group_start()\n", "")
    report = _comm_project(tmp_path, state)
    (found,) = _comm_findings(report)
    assert found["severity"] == "info"
    assert "a method no file of the run calls" in found["message"] and "`group_start`" in found["message"]
    assert "every call of `gather_async` tests the receiver's switch first" in found["message"]


def test_library_method_called_without_a_test_stays(tmp_path):
    # nearest true case: one caller does not ask the switch, so an NPU host reaches the NCCL call
    state = STATE + "\n\ndef flush(group, out, inp):\n    group.comm.gather_async(out, inp)\n"
    report = _comm_project(tmp_path, state)
    found = _comm_findings(report)
    assert found and all(f["severity"] != "info" for f in found)
    assert any(f["line"] == 26 or any(a[0] == 26 for a in f.get("also", [])) for f in found)


# ------------------------------------- BQ#34: an FP8 dtype a user picks for a function only a host calls

NODE = '''\
import torch


class UnetLoader:
    FUNCTION = "load_unet"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"weight_dtype": (["default", "fp8_e4m3fn", "fp8_e5m2"],)}}

    def load_unet(self, unet_name, weight_dtype):
        options = {}
        if weight_dtype == "fp8_e4m3fn":
            options["dtype"] = torch.float8_e4m3fn
        elif weight_dtype == "fp8_e5m2":
            options["dtype"] = torch.float8_e5m2
        return unet_name, options
'''


def _node_project(tmp_path, extra=None):
    return migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/apps/__init__.py": "",
        "proj/apps/nodes.py": NODE,
        **(extra or {}),
    }))


def _fp8(report):
    return [f for f in report["findings"] if f["path"] == "proj/apps/nodes.py" and f["code"] == "NPU913"]


def test_fp8_dtype_a_user_picks_for_a_framework_called_function_is_info(tmp_path):
    (found,) = _fp8(_node_project(tmp_path))
    assert found["severity"] == "info"
    assert 'reached on an NPU host only when a user chooses "fp8_e4m3fn" or "fp8_e5m2" for `weight_dtype`' \
        in found["message"]
    assert "no call of the run calls `load_unet` (line 11)" in found["message"]


def test_fp8_dtype_stays_when_the_run_calls_the_function(tmp_path):
    # nearest true case: the package's own code calls it, so its callers' values decide
    caller = "from proj.apps.nodes import UnetLoader\n\n\ndef load(name):\n    return UnetLoader().load_unet(name, \"fp8_e4m3fn\")\n"
    found = _fp8(_node_project(tmp_path, {"proj/apps/run.py": caller}))
    assert found and all(f["severity"] != "info" for f in found)


def test_fp8_dtype_stays_when_the_parameter_is_rebound(tmp_path):
    # nearest true case: the value tested is no longer the caller's choice
    rebound = NODE.replace("        options = {}\n", "        options = {}\n        weight_dtype = \"fp8_e4m3fn\"\n")
    found = _fp8(_node_project(tmp_path, {"proj/apps/nodes.py": rebound}))
    assert found and all(f["severity"] != "info" for f in found)


def test_jit_source_whose_unimported_module_compiles_at_import_stays_an_error(tmp_path):
    # nearest true case: a module compiling its sources at import is the project's kernel module
    # itself, not a helper a user may call (session 34's small projects keep their error)
    at_import = ("from torch.utils.cpp_extension import load\n\n"
                 "_C = load(name='demo', sources=['proj/kern/csrc/demo.cu'])\n")
    report = _project(tmp_path, {"proj/kern/demo_ext.py": at_import,
                                 "proj/kern/csrc/demo.cu": KERNEL.format(name="demo")})
    (found,) = _npu912(report)
    assert found["severity"] == "error"


def test_jit_source_found_dead_late_keeps_its_finding_when_a_test_compiles_it(tmp_path):
    # a test of the kernel imports the loader: the tests' findings fold into this NPU912, so the
    # finding stays as it was instead of a scope that would release them
    test = "import torch\n\nfrom proj.kern.quant import quant\n\n\ndef test_quant():\n    x = torch.zeros(4)\n    quant(x, x)\n"
    report = _project(tmp_path, {**_quant_files(FAILING_IMPORTER), "proj/kern/tests/test_quant.py": test})
    (found,) = _npu912(report)
    assert found["severity"] == "error"
    assert not [r for r in _scopes(report) if "JIT loaders" in r]
