"""Issue #16 wave 26 (h114): CUDA sources and sglang's other files (npu_migrate/kernelreach26.py,
npu_migrate/choicelabels26.py). Each false case beside the nearest true case that stays reported."""

from __future__ import annotations

from .precision_helpers import findings_at, migrate_json, scopes_at, write_project
from .test_h100 import (CUDA_EXTENSION, EXTENSIONS_INIT, KERNEL, KERNEL_LOADER, LAYER, MOE_EXTENSION, OPERATION,
                        SETUP)

# ----------------------------------------------------------------------------- BM#32
CUMSUM = '''

def moe_cumsum(x, use_kernel=False):
    flag = x.size(0) <= 1024
    if flag and use_kernel:
        if MOE_KERNEL is None:
            load_moe()
        return MOE_KERNEL.cumsum_sub_one(x)
    return x.cumsum(0) - 1
'''


def _moe_project(tmp_path, operation_path="proj/moe/_operation.py", layer=LAYER, extra=None):
    layer = layer.replace("proj.moe._operation", operation_path[:-3].replace("/", "."))
    files = {
        "setup.py": SETUP, "proj/__init__.py": "", "proj/kernel/__init__.py": "",
        "proj/kernel/extensions/__init__.py": EXTENSIONS_INIT,
        "proj/kernel/extensions/cuda_extension.py": CUDA_EXTENSION,
        "proj/kernel/extensions/moe_cuda.py": MOE_EXTENSION,
        "proj/kernel/extensions/csrc/kernel/cuda/moe_kernel.cu": KERNEL.format(name="moe"),
        "proj/kernel/kernel_loader.py": KERNEL_LOADER, "proj/moe/__init__.py": "",
        operation_path: OPERATION + CUMSUM, "proj/moe/layer.py": layer,
        **(extra or {}),
    }
    return migrate_json(write_project(tmp_path, files))


def _npu912(report):
    return [f for f in report["findings"] if f["code"] == "NPU912"]


def test_cu_whose_chain_also_ends_in_an_unnamed_function_of_a_private_module_is_a_scope(tmp_path):
    report = _moe_project(tmp_path)
    assert _npu912(report) == []
    (reason,) = [s["reason"] for s in report["skipped"] if "(NPU912)" in s.get("reason", "")]
    assert "`MoeDispatch` (proj/moe/_operation.py:19)" in reason
    assert "`moe_cumsum` (proj/moe/_operation.py:27, a function of a private module" in reason
    assert "only under `use_kernel`, False by default" in reason


def test_cu_whose_private_function_another_module_imports_stays(tmp_path):
    layer = LAYER.replace("import AllGather", "import AllGather, moe_cumsum")
    (found,) = _npu912(_moe_project(tmp_path, layer=layer))
    assert found["severity"] == "error"


def test_cu_whose_unnamed_function_lives_in_a_public_module_stays(tmp_path):
    (found,) = _npu912(_moe_project(tmp_path, operation_path="proj/moe/operation.py"))
    assert found["severity"] == "error"


def test_cu_whose_unnamed_private_function_loads_unconditionally_stays(tmp_path):
    operation = CUMSUM.replace("    flag = x.size(0) <= 1024\n    if flag and use_kernel:\n", "    if True:\n")
    assert operation != CUMSUM
    report = migrate_json(write_project(tmp_path, {
        "setup.py": SETUP, "proj/__init__.py": "", "proj/kernel/__init__.py": "",
        "proj/kernel/extensions/__init__.py": EXTENSIONS_INIT,
        "proj/kernel/extensions/cuda_extension.py": CUDA_EXTENSION,
        "proj/kernel/extensions/moe_cuda.py": MOE_EXTENSION,
        "proj/kernel/extensions/csrc/kernel/cuda/moe_kernel.cu": KERNEL.format(name="moe"),
        "proj/kernel/kernel_loader.py": KERNEL_LOADER, "proj/moe/__init__.py": "",
        "proj/moe/_operation.py": OPERATION + operation, "proj/moe/layer.py": LAYER,
    }))
    (found,) = _npu912(report)
    assert found["severity"] == "error"


def test_cu_whose_private_function_a_string_names_stays(tmp_path):
    extra = {"proj/moe/registry.py": 'OPS = {"cumsum": "proj.moe._operation:moe_cumsum"}\n'}
    (found,) = _npu912(_moe_project(tmp_path, extra=extra))
    assert found["severity"] == "error"


# ----------------------------------------------------------------------------- BS#18
DRAFT_RUNNER = '''\
import torch


class DraftGraphRunner:
    def __init__(self, model):
        self.model = model
        self.graphs = {}

    def _create_graph(self):
        return torch.cuda.CUDAGraph()

    def _capture_graph(self, graph, pool, run_once_fn):
        with torch.cuda.graph(graph, pool=pool):
            out = run_once_fn()
        return out

    def capture_one(self, key, x):
        graph = self._create_graph()

        def run_once():
            return self.model(x)

        self.graphs[key] = (graph, self._capture_graph(graph, None, run_once))
'''

HANDED_ON = DRAFT_RUNNER + '''
    def capture_step(self, key, step):
        graph = self._create_graph()
        self.graphs[key] = (graph, self._capture_graph(graph, None, step))
'''


def _runner_report(tmp_path, text):
    from .test_h75 import _project

    root = _project(tmp_path)
    (root / "proj/srt/models/draft_runner.py").write_text(text)
    return migrate_json(root)


def test_capture_of_the_callers_own_nested_step_under_the_patcher_is_a_scope(tmp_path):
    report = _runner_report(tmp_path, DRAFT_RUNNER)
    assert findings_at(report, "proj/srt/models/draft_runner.py", "NPU202") == {}
    reasons = scopes_at(report, "proj/srt/models/draft_runner.py", "NPU202")
    assert reasons and all("an inference capture" in r for r in reasons.values())
    assert "`run_once` (proj/srt/models/draft_runner.py:20)" in next(iter(reasons.values()))


def test_capture_of_a_step_the_caller_hands_on_stays(tmp_path):
    # the nearest true case: one caller hands on its own parameter, maybe a training step
    report = _runner_report(tmp_path, HANDED_ON)
    found = findings_at(report, "proj/srt/models/draft_runner.py", "NPU202")
    assert found and all(f["severity"] == "info" and "an inference capture" not in f["message"]
                         for f in found.values())


# ----------------------------------------------------------------------------- BN#23
SERVER_ARGS = '''\
import dataclasses
from typing import Literal


@dataclasses.dataclass
class ServerArgs:
    load_format: str = "auto"
    weight_loader_backend: Literal["transfer_engine", "nccl"] = "nccl"

    def check(self):
        if self.load_format == "remote" and self.weight_loader_backend == "nccl":
            return True
        return self.weight_loader_backend in ("transfer_engine",)

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--weight-loader-backend", default=ServerArgs.weight_loader_backend)
'''

LOADER = '''\
import enum


class WeightLoaderBackend(str, enum.Enum):
    NCCL = "nccl"
    TRANSFER_ENGINE = "transfer_engine"


class LoadConfig:
    def __init__(self, weight_loader_backend=None):
        self.weight_loader_backend = weight_loader_backend


def build(server_args):
    return LoadConfig(weight_loader_backend=server_args.weight_loader_backend)


def load(config):
    if config.weight_loader_backend == WeightLoaderBackend.NCCL:
        return "broadcast"
    return "transfer"
'''

GROUP = '''\
import torch.distributed as dist


def init_group(server_args):
    dist.init_process_group(backend=server_args.weight_loader_backend)
'''


def _label_report(tmp_path, extra=None):
    return migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "", "proj/server_args.py": SERVER_ARGS, "proj/loader.py": LOADER, **(extra or {}),
    }))


def test_literal_choice_label_only_compared_and_passed_on_is_a_scope(tmp_path):
    report = _label_report(tmp_path)
    assert findings_at(report, "proj/server_args.py", "NPU990") == {}
    reason = scopes_at(report, "proj/server_args.py", "NPU990")[8]
    assert "a label the code resolves" in reason and "`weight_loader_backend`" in reason
    assert "proj/loader.py:15" in reason and "proj/loader.py:19" in reason


def test_literal_choice_label_handed_to_a_process_group_stays(tmp_path):
    # the nearest true case: one read hands the option's value to init_process_group as the backend
    report = _label_report(tmp_path, {"proj/group.py": GROUP})
    (found,) = findings_at(report, "proj/server_args.py", "NPU990").values()
    assert found["severity"] == "info" and "a label the code resolves" not in found["message"]
