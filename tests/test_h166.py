"""Round-32 audit rows a reviewer dismissed from the finding's own file (issue #16, helper h166).
Each false case is paired with the nearest true case that stays reported."""

from __future__ import annotations

import pytest

from tests.precision_helpers import findings_at, migrate_json, moot_lines, write_project

# ----------------------------------------------------------------------------- GC#8: `pytestmark` in a `try`
TRY_MARK = '''\
import torch

from proj.platforms import current_platform
from proj.triton_utils import triton

try:
    import pytest

    pytestmark = pytest.mark.skipif(
        {condition},
        reason="needs CUDA Triton",
    )
    _parametrize = pytest.mark.parametrize
except ModuleNotFoundError:
    pytest = None


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n):
    pass


def test_copy():
    x = torch.zeros(8)
    _copy_kernel[(1,)](x, x, 8)
'''

PLATFORM = '''\
class Platform:
    def is_cuda_alike(self):
        return False

    def is_xpu(self):
        return False

    def is_rocm(self):
        return False


current_platform = Platform()
'''

TRITON_UTILS = "import triton\n"


def _run(tmp_path, files):
    return migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/platforms.py": PLATFORM,
        "proj/triton_utils.py": TRITON_UTILS,
        **files,
    }))


def test_pytestmark_in_a_try_guarding_pytest_skips_the_module(tmp_path):
    report = _run(tmp_path, {"tests/test_copy.py": TRY_MARK.format(
        condition="not (current_platform.is_cuda_alike() or current_platform.is_xpu())")})
    assert 18 not in findings_at(report, "tests/test_copy.py", "NPU910")
    assert 18 in moot_lines(report["skipped"], "NPU910", "tests/test_copy.py")


def test_pytestmark_in_a_try_that_an_npu_host_passes_stays_reported(tmp_path):
    # nearest true case: the same `try`, a skip condition false on an NPU host (ROCm only)
    report = _run(tmp_path, {"tests/test_copy.py": TRY_MARK.format(condition="current_platform.is_rocm()")})
    assert findings_at(report, "tests/test_copy.py", "NPU910")[18]["severity"] == "error"


def test_pytestmark_after_another_import_in_the_try_stays_reported(tmp_path):
    # nearest true case: the `try` also imports a package an NPU host lacks before the mark:
    # there the import fails, the mark is never set and the tests run
    text = TRY_MARK.format(condition="not current_platform.is_cuda_alike()").replace(
        "    import pytest\n", "    import pytest\n    import flashinfer  # noqa: F401\n")
    report = _run(tmp_path, {"tests/test_copy.py": text})
    assert findings_at(report, "tests/test_copy.py", "NPU910")[19]["severity"] == "error"


# ----------------------------------------------------------------------------- GC#12: `if pytest and (...)`
MODULE_SKIP = '''\
import pytest
import torch

from proj.platforms import current_platform
from proj.probes import has_flashinfer_trtllm_fused_moe

if {guard}(
    not has_flashinfer_trtllm_fused_moe()
    or not current_platform.is_cuda_alike()
):
    pytest.skip("Requires flashinfer TRTLLM fused MoE", allow_module_level=True)


def test_moe():
    from flashinfer import nvfp4_quantize

    nvfp4_quantize(torch.zeros(8))
'''

PROBES = '''\
import importlib.util


def has_flashinfer_trtllm_fused_moe():
    return importlib.util.find_spec("flashinfer") is not None
'''


def test_module_skip_that_also_asks_for_pytest_skips_the_module(tmp_path):
    report = _run(tmp_path, {"proj/probes.py": PROBES,
                             "tests/test_moe.py": MODULE_SKIP.format(guard="pytest and ")})
    assert 15 not in findings_at(report, "tests/test_moe.py", "NPU911")
    assert 15 in moot_lines(report["skipped"], "NPU911", "tests/test_moe.py")


def test_module_skip_on_a_name_bound_twice_stays_reported(tmp_path):
    # nearest true case: the name is a module only when the import succeeds (`pytest = None`
    # elsewhere): its truth is unknown, the skip may not fire, the import stays reported
    text = MODULE_SKIP.format(guard="pytest and ").replace(
        "import pytest\n", "try:\n    import pytest\nexcept ImportError:\n    pytest = None\n", 1)
    report = _run(tmp_path, {"proj/probes.py": PROBES, "tests/test_moe.py": text})
    assert findings_at(report, "tests/test_moe.py", "NPU911")[18]["severity"] == "error"


def test_module_skip_with_a_condition_an_npu_host_passes_stays_reported(tmp_path):
    # nearest true case: `pytest and is_rocm()`: false on an NPU host, the module runs there
    text = MODULE_SKIP.format(guard="pytest and ").replace(
        "not has_flashinfer_trtllm_fused_moe()\n    or not current_platform.is_cuda_alike()",
        "current_platform.is_rocm()\n    and True")
    report = _run(tmp_path, {"proj/probes.py": PROBES, "tests/test_moe.py": text})
    assert findings_at(report, "tests/test_moe.py", "NPU911")[15]["severity"] == "error"


# ----------------------------------------------------------------------------- GC#35: NCCL note on a host helper
IMPORT_UTILS = '''\
import importlib.util


def is_vllm_available():
    return importlib.util.find_spec("vllm") is not None
'''

WEIGHT_TRANSFER = '''\
import threading

from proj.import_utils import is_vllm_available

if is_vllm_available():
    from vllm.utils.network_utils import get_ip, get_open_port

if is_vllm_available():
    from vllm.distributed.weight_transfer.nccl_common import trainer_init
    from vllm.distributed.weight_transfer.packed_tensor import packed_nccl_broadcast_producer


def serve():
    threading.Thread(target=trainer_init, args=(get_ip(), get_open_port())).start()
    packed_nccl_broadcast_producer()
'''


def test_host_helpers_split_off_an_nccl_import_do_not_carry_its_nccl_note():
    from npu_migrate.findings import NCCL_TRANSFER, Finding, split_merged

    head = Finding("w.py", 9, 5, "NPU916", f"vLLM runs on Ascend through the vllm-ascend plugin: import from "
                   f"`vllm.distributed.weight_transfer.nccl_common` ({NCCL_TRANSFER}) (also at lines 6, 10)", False,
                   source="from vllm.distributed.weight_transfer.nccl_common import trainer_init", severity="warning",
                   also=((6, 5, "from vllm.utils.network_utils import get_ip, get_open_port"),
                         (10, 5, "from vllm.distributed.weight_transfer.packed_tensor import "
                                 "packed_nccl_broadcast_producer")))
    pieces = {p.line: p.message for p in split_merged(head)}
    assert "NCCL" not in pieces[6] and "`vllm.utils.network_utils`" in pieces[6]
    # nearest true cases: the head and a split-off import that names NCCL keep the note
    assert NCCL_TRANSFER in pieces[9] and NCCL_TRANSFER in pieces[10]


@pytest.mark.parametrize("nccl_gate", ["if is_vllm_available():", "if _HAS_STATEFUL:"])
def test_host_helper_import_beside_nccl_imports_is_not_called_nccl(tmp_path, nccl_gate):
    # (trl's shape: the NCCL imports under a version flag, `_HAS_STATEFUL = is_vllm_available("0.28")`)
    text = WEIGHT_TRANSFER.replace("\nif is_vllm_available():\n    from vllm.distributed",
                                   f"\n{nccl_gate}\n    from vllm.distributed")
    text = text.replace("import threading\n", "import threading\n\n_HAS_STATEFUL = len(__name__) > 3\n")
    report = migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "", "proj/import_utils.py": IMPORT_UTILS, "proj/weight_transfer.py": text}))
    found = [f for f in report["findings"] if f["path"] == "proj/weight_transfer.py" and f["code"] == "NPU916"]
    places = {f["line"]: f for f in found} | {p[0]: None for f in found for p in f.get("also", ())}
    assert {8, 11, 12} <= set(places)
    for f in found:  # wherever line 8 stands, its own message names no NCCL
        if f["line"] == 8:
            assert "NCCL" not in f["message"]
    # nearest true case: the NCCL imports keep their note
    assert any("PyNcclCommunicator" in f["message"] for f in found if f["line"] in (11, 12))


# ----------------------------------------------------------------------------- GC#34: Triton's backend registry
TRITON_PROBE = '''\
from importlib.util import find_spec

HAS_TRITON = find_spec("triton") is not None
if HAS_TRITON:
    try:
        from triton.backends import backends

        active_drivers = [x.driver for name, x in backends.items() if name != "cpu" and x.driver.is_active()]
        if "cpu" in backends and not active_drivers:
            active_drivers.append({read}.driver)
        if len(active_drivers) != 1:
            HAS_TRITON = False
    except ImportError:
        HAS_TRITON = False
'''


def test_triton_backend_registry_probe_runs_as_written(tmp_path):
    report = migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "", "proj/importing.py": TRITON_PROBE.format(read='backends["cpu"]')}))
    assert not findings_at(report, "proj/importing.py", "NPU910")
    assert any(s["path"] == "proj/importing.py" and "`triton.backends.backends`" in s["reason"]
               for s in report["skipped"])


def test_triton_backend_registry_read_for_nvidia_stays_reported(tmp_path):
    # nearest true case: the same probe asking for CUDA's own driver by name
    report = migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "", "proj/importing.py": TRITON_PROBE.format(read='backends["nvidia"]')}))
    assert findings_at(report, "proj/importing.py", "NPU910")[6]["severity"] == "error"


# ----------------------------------------------------------------------------- GC#18: a Helm chart's values
CHART = "apiVersion: v2\nname: server\nversion: 0.1.0\n"

VALUES = '''\
image: server:latest
resources:
  requests:
    cpu: 4
    nvidia.com/gpu: 1
  limits:
    cpu: 4
    nvidia.com/gpu: 1
'''

TEMPLATE = '''\
apiVersion: apps/v1
kind: Deployment
spec:
  template:
    spec:
      containers:
        - name: server
          image: {{ .Values.image }}
      {{- if gt (int (index .Values.resources.requests "nvidia.com/gpu")) 0 }}
      runtimeClassName: nvidia
      {{- end }}
'''

TEMPLATE_OWN = '''\
apiVersion: apps/v1
kind: Deployment
spec:
  template:
    spec:
      containers:
        - name: server
          image: {{ .Values.image }}
          resources:
            limits:
              nvidia.com/gpu: 1
'''


def _chart(tmp_path, template):
    return migrate_json(write_project(tmp_path, {
        "chart/Chart.yaml": CHART, "chart/values.yaml": VALUES, "chart/templates/deployment.yaml": template}))


def _npu709(report, path):
    return [f for f in report["findings"] if f["path"] == path and f["code"] == "NPU709" and not f["fixable"]]


def test_helm_values_key_its_template_reads_and_reports_is_folded_there(tmp_path):
    report = _chart(tmp_path, TEMPLATE)
    assert not _npu709(report, "chart/values.yaml")
    [host] = _npu709(report, "chart/templates/deployment.yaml")
    assert "`chart/values.yaml` lines 5, 8" in host["message"] and host["severity"] == "error"


def test_helm_values_key_no_template_reads_stays_reported(tmp_path):
    # nearest true case: the template writes the resource itself; the values key is its own report
    report = _chart(tmp_path, TEMPLATE_OWN)
    assert _npu709(report, "chart/values.yaml")[0]["severity"] == "error"


# ----------------------------------------------------------------------------- GC#6: an import in a guarded closure
FUSIONS = '''\
import logging

from proj.platforms import current_platform

logger = logging.getLogger(__name__)


def _create_everywhere(name, create):
    if not current_platform.is_cuda_alike():
        return None
    {call}
    return workspace


def maybe_create_workspace(size):
    def create():
        from flashinfer.comm.mnnvl import Workspace

        return Workspace(size)

    return _create_everywhere("all-gather", create)
'''

GUARDED_CALL = '''try:
        workspace = create()
    except (ImportError, RuntimeError) as exc:
        logger.warning("fused %s failed: %s", name, exc)
        workspace = None'''


def _fusions(tmp_path, call):
    return _run(tmp_path, {"proj/fusions.py": FUSIONS.format(call=call)})


def test_import_in_a_closure_only_a_try_catching_import_error_calls_runs_as_written(tmp_path):
    report = _fusions(tmp_path, GUARDED_CALL)
    assert not findings_at(report, "proj/fusions.py", "NPU911")
    assert any(s["path"] == "proj/fusions.py" and s["reason"].startswith("runs as written on an NPU host (NPU911)")
               and "`_create_everywhere`" in s["reason"] for s in report["skipped"])


def test_import_in_a_closure_called_outside_a_try_stays_reported(tmp_path):
    # nearest true case: the receiver calls the closure unguarded (or catching RuntimeError only)
    for call in ("workspace = create()", GUARDED_CALL.replace("(ImportError, RuntimeError)", "RuntimeError")):
        report = _fusions(tmp_path / str(len(call)), call)
        line = FUSIONS.format(call=call).splitlines().index("        from flashinfer.comm.mnnvl import Workspace") + 1
        assert findings_at(report, "proj/fusions.py", "NPU911")[line]["severity"] == "error"
        assert not any(s["path"] == "proj/fusions.py" and "(NPU911): guarded import" in s["reason"]
                       for s in report["skipped"])


# ----------------------------------------------------------------------------- GB#3: a guarded import only dead classes read
MARLIN = '''\
import torch

try:
    from vllm import _custom_ops as ops
except ImportError:
    ops = None


class MarlinConfig:
    def __init__(self, group_size):
        self.group_size = group_size

    def get_quant_method(self, layer):
        return MarlinLinearMethod(self)


class MarlinLinearMethod:
    def __init__(self, quant_config: MarlinConfig):
        self.quant_config = quant_config

    def apply(self, layer, x):
        return ops.marlin_gemm(x, layer.weight, layer.scales)
'''

LINEAR = '''\
WEIGHT_LOADER_V2_SUPPORTED = ["AWQMarlinLinearMethod", "MarlinLinearMethod"]


class LinearBase:
    def weight_loader(self):
        return self.quant_method.__class__.__name__ in WEIGHT_LOADER_V2_SUPPORTED
'''

REGISTRY = '''\
from proj.quant.marlin import MarlinConfig

METHODS = {"marlin": MarlinConfig}
'''


def test_guarded_import_read_only_by_a_method_its_unregistered_config_builds_runs_as_written(tmp_path):
    report = migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "", "proj/quant/__init__.py": "", "proj/quant/marlin.py": MARLIN,
        "proj/linear.py": LINEAR}))
    assert not findings_at(report, "proj/quant/marlin.py", "NPU911")
    assert any(s["path"] == "proj/quant/marlin.py" and "`MarlinConfig`, `MarlinLinearMethod`" in s["reason"]
               for s in report["skipped"])


def test_guarded_import_read_by_a_registered_config_stays_reported(tmp_path):
    # nearest true case: a registry of the run names the config class: an NPU host may build it
    report = migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "", "proj/quant/__init__.py": "", "proj/quant/marlin.py": MARLIN,
        "proj/linear.py": LINEAR, "proj/quant/registry.py": REGISTRY}))
    assert findings_at(report, "proj/quant/marlin.py", "NPU911")[4]["severity"] == "error"


def test_guarded_import_read_by_a_class_looked_up_by_name_stays_reported(tmp_path):
    # nearest true case: another file looks the class up by its name (not a label compared with
    # `__class__.__name__`): it may build it
    lookup = 'import importlib\n\nmethod = getattr(importlib.import_module("proj.quant.marlin"), "MarlinLinearMethod")\n'
    report = migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "", "proj/quant/__init__.py": "", "proj/quant/marlin.py": MARLIN,
        "proj/loader.py": lookup}))
    assert findings_at(report, "proj/quant/marlin.py", "NPU911")[4]["severity"] == "error"


# ----------------------------------------------------------------------------- GB#18: FP8 dtype stored on a CPU state
PLAN_TEST = '''\
from types import SimpleNamespace

import pytest
import torch


class FakeWrapper:
    def plan(self, *args, **kwargs):
        self.plan_args = (args, kwargs)


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_plan_uses_state_params(kv_dtype):
    wrapper = FakeWrapper()
    state = SimpleNamespace()
    state.device = torch.device("{device}")
    state.kv_dtype = kv_dtype
    state.lens = torch.zeros(4, dtype=torch.int32)
    wrapper.plan(state.lens, kv_data_type=state.kv_dtype)
    assert wrapper.plan_args[1]["kv_data_type"] == kv_dtype
'''


def test_fp8_dtype_stored_on_a_state_set_to_the_cpu_is_data(tmp_path):
    report = migrate_json(write_project(tmp_path, {"tests/test_plan.py": PLAN_TEST.replace("{device}", "cpu")}))
    assert not findings_at(report, "tests/test_plan.py", "NPU913")
    assert any(s["path"] == "tests/test_plan.py" and "FP8 data on the CPU" in s["reason"] for s in report["skipped"])


def test_fp8_dtype_stored_on_a_state_set_to_cuda_stays_reported(tmp_path):
    # nearest true case: the state's device is CUDA's (the migration makes it the NPU's)
    report = migrate_json(write_project(tmp_path, {"tests/test_plan.py": PLAN_TEST.replace("{device}", "cuda")}))
    assert findings_at(report, "tests/test_plan.py", "NPU913")[12]["severity"] == "error"


# ----------------------------------------------------------------------------- GA#28: an opt-in read in a closure
GRAPH_BENCH = '''\
import argparse

import torch


def graph_replay(fn):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def get_benchmark(size, use_cuda_graph):
    def benchmark(n):
        def run():
            return torch.ones(size) * n

        if use_cuda_graph:
            run = graph_replay(run)
        return run()

    return benchmark


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--use-cuda-graph", action="store_true")
    args = parser.parse_args()
    get_benchmark(args.size, {flag})(4)
'''


def _npu202(report):
    return findings_at(report, "bench.py", "NPU202")


def test_cuda_graph_behind_a_store_true_option_read_in_a_closure_is_an_opt_in(tmp_path):
    report = migrate_json(write_project(tmp_path, {"bench.py": GRAPH_BENCH.replace("{flag}", "args.use_cuda_graph")}))
    finding = _npu202(report)[7]
    assert finding["severity"] == "info" and "`--use-cuda-graph` is chosen" in finding["message"]


def test_cuda_graph_behind_a_closure_flag_always_passed_true_stays_reported(tmp_path):
    # nearest true case: the script passes True itself: every run captures the graph
    report = migrate_json(write_project(tmp_path, {"bench.py": GRAPH_BENCH.replace("{flag}", "True")}))
    assert _npu202(report)[7]["severity"] == "error"
