"""Wave 21, helper h90 (issue #16): tests, benchmarks and tools whose subject is CUDA-only
(npu_migrate/cudaonly21.py). The fixtures are written here in the shape of the audited code
(round-21 BH#2, BG#6, BF#12, BH#6), not copied from it; each false case sits beside the nearest
true case, which stays reported.
"""

from __future__ import annotations

import ast

from npu_migrate import cudaonly21
from tests.precision_helpers import migrate_json, write_project


def _open(report, path):
    return {(f["line"], f["code"]): f for f in report["findings"] if not f["fixable"] and f["path"] == path}


def _scopes(report, path):
    return [s for s in report["skipped"] if s.get("path") == path and "start_line" in s]


# ------------------------------------------------------- BH#2: an autouse fixture's capability skip

KERNEL_TEST = '''\
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA required")


@pytest.fixture(autouse=True, scope="module")
def _require_hopper():
    if torch.cuda.get_device_capability()[0] {op} 9:
        pytest.skip("needs a given architecture")
    from proj.kern import is_available

    if not is_available():
        pytest.skip("kernel library not installed")


def test_graph_replay():
    a = torch.randn(4, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        b = a * 2
    graph.replay()
'''


def test_capability_major_below_skips_the_module_on_npu(tmp_path):
    report = migrate_json(write_project(tmp_path, {"tests/test_kern.py": KERNEL_TEST.format(op="<")}))
    assert (19, "NPU202") not in _open(report, "tests/test_kern.py")
    (scope,) = _scopes(report, "tests/test_kern.py")
    assert scope["start_line"] == 19 and scope["reason"].startswith("not run on an NPU host (NPU202)")
    assert "get_device_capability()[0] < 9" in scope["reason"]


def test_capability_major_at_least_runs_on_npu(tmp_path):
    # skipped only on Hopper and newer: the NPU host (capability (0, 0)) runs the graph
    report = migrate_json(write_project(tmp_path, {"tests/test_kern.py": KERNEL_TEST.format(op=">=")}))
    assert report_finding(report, "tests/test_kern.py", 19, "NPU202")["severity"] == "error"


def report_finding(report, path, line, code):
    return _open(report, path)[(line, code)]


def test_known_value_reads_only_the_shims_query():
    def value(text):
        return cudaonly21.known_value(ast.parse(text, mode="eval").body)

    assert value("torch.cuda.get_device_capability()[0] < 9") is True
    assert value("9 > torch.cuda.get_device_capability(0)[0]") is True
    assert value("torch.cuda.get_device_capability()[0] >= 8") is False
    # a platform object's query is None on an NPU host (its [0] raises), a minor number or a 0 bound decides nothing
    assert value("current_platform.get_device_capability()[0] < 9") is None
    assert value("torch.cuda.get_device_capability()[1] < 9") is None
    assert value("torch.cuda.get_device_capability()[0] < 0") is None


# ------------------------------------------------------------ BG#6: a "cuda" mode label in a script

LABEL_SCRIPT = '''\
#!/bin/bash
set -xe
KV_BUFFER_DEVICE="cuda"  # default
while [[ $# -gt 0 ]]; do
  case $1 in
    --kv_buffer_device)
      KV_BUFFER_DEVICE="$2"
      shift 2
      ;;
  esac
done
echo "running with kv_buffer_device=$KV_BUFFER_DEVICE"
if [[ "$KV_BUFFER_DEVICE" == "cuda" ]]; then
  KV_CONFIG='{"kv_connector":"X","kv_role":"kv_both"}'
else
  KV_CONFIG="{\\"kv_connector\\":\\"X\\",\\"kv_buffer_device\\":\\"$KV_BUFFER_DEVICE\\"}"
fi
vllm serve model --kv-transfer-config "$KV_CONFIG"
'''


def test_mode_label_only_compared_is_no_work(tmp_path):
    report = migrate_json(write_project(tmp_path, {"tests/run_edge.sh": LABEL_SCRIPT}))
    assert (3, "NPU706") not in _open(report, "tests/run_edge.sh")
    (scope,) = _scopes(report, "tests/run_edge.sh")
    assert scope["start_line"] == 3 and scope["reason"].startswith("no port work on an NPU host (NPU706)")
    assert "passed on only where it holds another value (line 16)" in scope["reason"]


def test_mode_label_passed_on_as_written_stays(tmp_path):
    # the same default handed to the server whatever it holds: "cuda" reaches a device
    script = LABEL_SCRIPT + 'vllm serve model --kv-buffer-device "$KV_BUFFER_DEVICE"\n'
    report = migrate_json(write_project(tmp_path, {"tests/run_edge.sh": script}))
    assert report_finding(report, "tests/run_edge.sh", 3, "NPU706")["severity"] == "error"


def test_mode_label_exported_stays(tmp_path):
    script = LABEL_SCRIPT.replace('KV_BUFFER_DEVICE="cuda"  # default', 'KV_BUFFER_DEVICE="cuda"\nexport KV_BUFFER_DEVICE')
    report = migrate_json(write_project(tmp_path, {"tests/run_edge.sh": script}))
    assert report_finding(report, "tests/run_edge.sh", 3, "NPU706")["severity"] == "error"


# --------------------------------------------------------------------- BF#12: NVIDIA build tooling

BUILD_TOOL = '''\
"""Build libfoo from source for the NVIDIA image."""
import os
import subprocess

CUDA_HOME = os.environ.get("CUDA_HOME", "/usr/local/cuda")
ARCHS = ("90", "100")


def cuda_version():
    nvcc = os.path.join(CUDA_HOME, "bin", "nvcc")
    return subprocess.check_output([nvcc, "--version"], text=True)


def main():
    print(cuda_version())
    subprocess.check_call(["cmake", f"-DARCHS={';'.join(ARCHS)}", f"-DCUDA_HOME={CUDA_HOME}"])


if __name__ == "__main__":
    main()
'''


def test_tools_script_running_nvcc_is_nvidia_tooling(tmp_path):
    report = migrate_json(write_project(tmp_path, {"tools/build_libfoo.py": BUILD_TOOL}))
    assert not _open(report, "tools/build_libfoo.py")
    (scope,) = _scopes(report, "tools/build_libfoo.py")
    assert scope["reason"].startswith("no port work on an NPU host (NPU990): in NVIDIA build tooling")
    assert "`nvcc` (line 10)" in scope["reason"]


def test_setup_script_package_module_and_npu_aware_tool_stay(tmp_path):
    npu_aware = BUILD_TOOL.replace('"""Build libfoo', '"""Build libfoo (or its Ascend NPU variant)')
    report = migrate_json(write_project(tmp_path, {
        "setup_ext.py": BUILD_TOOL + "# the package's own build\n",  # a build an NPU host runs
        "proj/build_helper.py": BUILD_TOOL + "# a module of the package\n",
        "tools/build_both.py": npu_aware,
        "tools/not_standalone.py": BUILD_TOOL.replace('if __name__ == "__main__":\n    main()\n', ""),
    }))
    for path in ("setup_ext.py", "proj/build_helper.py", "tools/build_both.py", "tools/not_standalone.py"):
        assert report_finding(report, path, 5, "NPU990")["severity"] == "warning", path


# ---------------------------------------------------- BH#6: a benchmark timing only CUDA-only ops

CUSTOM_OPS = '''\
import torch


def fused_norm(x, w):
    torch.ops._C.fused_norm(x, w)


def cache_insert(k, cache):
    torch.ops._C.cache_insert(k, cache)
'''

KERNEL_SOURCE = '''\
#include <torch/extension.h>
__global__ void fused_norm_kernel(float* x) { x[threadIdx.x] *= 2.0f; }
TORCH_LIBRARY_FRAGMENT(_C, m) { m.def("fused_norm(Tensor x, Tensor w) -> ()"); }
'''

BENCHMARK = '''\
import torch

import proj._custom_ops as ops


class Case:
    def __init__(self, n):
        self.x = torch.randn(n, device="cuda")
        self.w = torch.randn(n, device="cuda")
        self.cache = torch.empty(n, device="cuda")

    def fused(self):
        ops.fused_norm(self.x, self.w)

    def _insert(self):
        ops.cache_insert(self.x, self.cache)

    def unfused(self):
        y = self.x * self.w
        self._insert()
        return y


def time_graph(fn, warmup=3):
    for _ in range(warmup):
        fn()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()


def time_eager(fn):
    fn()


def main(use_graph):
    timer = time_graph if use_graph else time_eager
    case = Case(8)
    timer(lambda c=case: c.fused())
    baseline = case.unfused if use_graph else case.fused
    timer(baseline)
{extra}

if __name__ == "__main__":
    main(True)
'''


def _benchmark_project(tmp_path, extra=""):
    return migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/_custom_ops.py": CUSTOM_OPS,
        "csrc/fused_norm.cu": KERNEL_SOURCE,
        "benchmarks/benchmark_fused_norm.py": BENCHMARK.format(extra=extra),
    }))


def test_benchmark_of_cuda_only_ops_fails_at_the_warmup(tmp_path):
    report = _benchmark_project(tmp_path)
    assert (27, "NPU202") not in _open(report, "benchmarks/benchmark_fused_norm.py")
    (scope,) = _scopes(report, "benchmarks/benchmark_fused_norm.py")
    assert scope["start_line"] == 27 and scope["reason"].startswith("not run on an NPU host (NPU202)")
    assert "hands to `time_graph`" in scope["reason"] and "`torch.ops._C.fused_norm`" in scope["reason"]
    assert "warm-up call at line 26" in scope["reason"]


def test_benchmark_also_timing_portable_code_stays(tmp_path):
    report = _benchmark_project(tmp_path, extra="    timer(lambda: torch.mm(case.x, case.w))\n")
    assert report_finding(report, "benchmarks/benchmark_fused_norm.py", 27, "NPU202")["severity"] == "error"


def test_benchmark_helper_passed_on_stays(tmp_path):
    report = _benchmark_project(tmp_path, extra="    run_all([time_graph])\n")
    assert report_finding(report, "benchmarks/benchmark_fused_norm.py", 27, "NPU202")["severity"] == "error"


def test_benchmark_without_reported_cuda_sources_stays(tmp_path):
    report = migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/_custom_ops.py": CUSTOM_OPS,
        "benchmarks/benchmark_fused_norm.py": BENCHMARK.format(extra=""),
    }))
    assert report_finding(report, "benchmarks/benchmark_fused_norm.py", 27, "NPU202")["severity"] == "error"


# ------------------------------------------------- BG#26: a test of the project's CUDA JIT kernel

JIT_UTILS = '''\
def load_jit(name, *args, cuda_files=(), cuda_wrappers=()):
    from tvm_ffi.cpp import load_inline

    return load_inline(name, cuda_sources=[open(f).read() for f in cuda_files])
'''

JIT_NORM = '''\
from proj.jit.utils import load_jit


def _module(hidden):
    return load_jit("rmsnorm", hidden, cuda_files=["elementwise/rmsnorm.cuh"], cuda_wrappers=[("rmsnorm", "run")])


def rmsnorm(x, w, output=None):
    _module(x.shape[-1]).rmsnorm(x, w, output)
'''

PORTABLE_NORM = '''\
import torch


def rmsnorm(x, w, output=None):
    output.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
'''

NORM_TEST = '''\
import pytest
import torch


def jit_rmsnorm(x, w):
    from proj.jit.{module} import rmsnorm

    rmsnorm(x, w, output=x)


def flashinfer_rmsnorm(x, w):
    from flashinfer.norm import rmsnorm

    rmsnorm(x, w, out=x)


@pytest.mark.parametrize("n", [8, 16])
def test_rmsnorm(n):
    x = torch.randn(n, n, device="cuda")
    w = torch.randn(n, device="cuda")
    a, b = x.clone(), x.clone()
    jit_rmsnorm(a, w)
    flashinfer_rmsnorm(b, w)
    torch.testing.assert_close(a, b)
'''


def _jit_project(tmp_path, norm=JIT_NORM):
    return migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/jit/__init__.py": "",
        "proj/jit/utils.py": JIT_UTILS,
        "proj/jit/norm.py": norm,
        "proj/jit/ref.py": PORTABLE_NORM,
        "proj/jit/csrc/rmsnorm.cuh": "__global__ void rmsnorm_kernel(float* x) { x[threadIdx.x] = 1.0f; }\n",
        "proj/jit/tests/test_norm.py": NORM_TEST.format(module="norm"),
        "proj/jit/tests/test_ref.py": NORM_TEST.format(module="ref"),
    }))


def test_reference_import_in_a_test_of_a_cuda_jit_kernel_is_info(tmp_path):
    report = _jit_project(tmp_path)
    finding = report_finding(report, "proj/jit/tests/test_norm.py", 12, "NPU911")
    assert finding["severity"] == "info"
    assert "a test of the project's CUDA JIT kernel `rmsnorm` (`proj.jit.norm`" in finding["message"]
    assert "`load_jit(..., cuda_files=[...])` at proj/jit/norm.py:5" in finding["message"]
    # the same reference in a test of portable code stays an error
    assert report_finding(report, "proj/jit/tests/test_ref.py", 12, "NPU911")["severity"] == "error"


def test_jit_kernel_with_an_npu_path_keeps_its_tests_findings(tmp_path):
    norm = JIT_NORM.replace("def rmsnorm(x, w, output=None):\n",
                            "def rmsnorm(x, w, output=None):\n    if x.device.type == \"npu\":\n"
                            "        return torch_npu.npu_rms_norm(x, w)\n")
    report = _jit_project(tmp_path, norm)
    assert report_finding(report, "proj/jit/tests/test_norm.py", 12, "NPU911")["severity"] == "error"


def test_module_level_reference_import_of_a_jit_kernel_test_stays(tmp_path):
    # an unguarded module-level import fails the module's collection (the folder's fold reads it)
    test = "from flashinfer.norm import rmsnorm as reference\n" + NORM_TEST.format(module="norm")
    report = migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "", "proj/jit/__init__.py": "", "proj/jit/utils.py": JIT_UTILS,
        "proj/jit/norm.py": JIT_NORM, "proj/jit/tests/test_norm.py": test,
    }))
    assert report_finding(report, "proj/jit/tests/test_norm.py", 1, "NPU911")["severity"] == "error"
