"""A project that loads Huawei's runtime patcher (torch_npu.contrib.transfer_to_npu) on its own NPU
path: npu_migrate/patcher19.py (issue #16, round-19 audit BB#25, BB#40). The fixtures are written
here in the shape of the audited code, not copied from it."""

from __future__ import annotations

from npu_migrate.patcher19 import PATCHER_PHRASE
from tests.precision_helpers import migrate_json, with_as_written, write_project

UTILS = '''\
import torch


def is_npu():
    return hasattr(torch, "npu") and torch.npu.is_available()
'''

NPU_UTILS = '''\
import torch

from proj.srt.utils import is_npu

_is_npu = is_npu()


def init_backend():
    assert _is_npu
    import torch_npu  # noqa: F401
    from torch_npu.contrib import transfer_to_npu  # noqa: F401

    torch.cuda.is_available = lambda: False
    torch.cuda.get_device_name = lambda *a: "npu"
'''

RUNNER = '''\
from proj.srt.utils import is_npu

_is_npu = is_npu()

if {condition}:
    from proj.srt.hw.npu_utils import init_backend

    init_backend()


class Runner:
    def load_models(self):  # (the model registry scans proj/srt/models: loaderproof20.py)
        from proj.srt.models.registry import import_models

        import_models()
'''

REGISTRY = '''\
import importlib
import pkgutil


def import_models(package_name="proj.srt.models"):
    package = importlib.import_module(package_name)
    for _, name, _ in pkgutil.iter_modules(package.__path__, package_name + "."):
        importlib.import_module(name)
'''

MODEL = '''\
import torch


def forward(x):
    if torch.cuda.is_current_stream_capturing():
        return x
    torch.cuda.cudart().cudaProfilerStart()
    return torch.cuda.get_device_name(0), x
'''

BENCH = '''\
import torch

from proj.srt.executor.runner import Runner


def profile(run: Runner):
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities):
        run()
'''

STANDALONE = '''\
import torch


def profile(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
        fn()
'''

GRAPHS = '''\
import torch

GRAPHS: dict[int, torch.cuda.CUDAGraph] = {}


def capture(fn):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph
'''

TEST_LOADER = '''\
from proj.srt.utils import is_npu

if is_npu():
    from proj.srt.hw.npu_utils import init_backend

    init_backend()
'''

TEST = '''\
import torch


def test_capture():
    assert not torch.cuda.is_current_stream_capturing()
'''


def _project(tmp_path, condition="_is_npu"):
    return write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/srt/__init__.py": "",
        "proj/srt/utils.py": UTILS,
        "proj/srt/hw/__init__.py": "",
        "proj/srt/hw/npu_utils.py": NPU_UTILS,
        "proj/srt/executor/__init__.py": "",
        "proj/srt/executor/runner.py": RUNNER.format(condition=condition),
        "proj/srt/models/__init__.py": "",
        "proj/srt/models/model.py": MODEL,
        "proj/srt/models/registry.py": REGISTRY,
        "proj/srt/models/graphs.py": GRAPHS,
        "proj/srt/tests/test_model.py": TEST,
        "proj/bench.py": BENCH,
        "proj/kernels/__init__.py": "",
        "proj/kernels/bench.py": STANDALONE,
    })


def _by_place(report):
    # (the loader's load lies in the project's NPU layer, proj/srt/hw/npu_utils.py: its infos are
    # named scopes since round 23, platformlayer23.py; read as info findings here)
    from npu_migrate.platformlayer23 import STARTUP

    return {(f["path"], f["line"], f["code"]): f for f in with_as_written(report)
            if not f.get("scope") or STARTUP in f["message"]}


def test_loaded_on_npu_path_lowers_covered_names_and_keeps_the_rest(tmp_path):
    found = _by_place(migrate_json(_project(tmp_path)))
    where = "loads transfer_to_npu"
    # a model module of the loader's subsystem: the patcher binds torch.cuda.is_current_stream_capturing
    model = found[("proj/srt/models/model.py", 5, "NPU202")]
    assert model["severity"] == "info"
    assert PATCHER_PHRASE in model["message"] and "where the process imports `proj.srt.executor.runner` first" in \
        model["message"] and f"{where} at proj/srt/hw/npu_utils.py:11" in model["message"]
    # a module importing the loader: ProfilerActivity.CUDA is the NPU activity there
    bench = found[("proj/bench.py", 7, "NPU935")]
    assert bench["severity"] == "info" and "the module imports `proj.srt.executor.runner`" in bench["message"]
    # a name the patcher does not cover stays reported
    assert found[("proj/srt/models/model.py", 7, "NPU202")]["severity"] == "error"
    # a standalone module outside the loader's subsystem, and a test of the subsystem (own processes)
    assert found[("proj/kernels/bench.py", 5, "NPU935")]["severity"] == "warning"
    assert found[("proj/srt/tests/test_model.py", 5, "NPU202")]["severity"] == "error"
    assert not any(PATCHER_PHRASE in f["message"] for k, f in found.items() if k[0] in (
        "proj/kernels/bench.py", "proj/srt/tests/test_model.py"))


def test_merged_places_stay_one_finding(tmp_path):
    # torch.cuda.CUDAGraph (bound to torch.npu.NPUGraph) and torch.cuda.graph: one finding, lowered whole
    report = migrate_json(_project(tmp_path))
    graphs = [f for f in report["findings"] if f["path"] == "proj/srt/models/graphs.py" and not f["fixable"]]
    # (the finding keeps the place it stood at: the call, not the type annotation of line 3)
    assert [(f["line"], f["code"], f["severity"]) for f in graphs] == [(7, "NPU202", "info")]
    assert sorted(place[0] for place in graphs[0]["also"]) == [3, 8]
    assert PATCHER_PHRASE in graphs[0]["message"] and graphs[0]["message"].endswith("(also at lines 3, 8)")


def test_load_off_the_npu_path_lowers_nothing(tmp_path):
    # the same load under a condition an NPU host answers False: the patcher never runs there; a
    # test helper that loads it on its NPU path covers only its own importers (none here)
    root = _project(tmp_path, condition="not _is_npu")
    (root / "proj/test").mkdir()
    (root / "proj/test/runners.py").write_text(TEST_LOADER)
    found = _by_place(migrate_json(root))
    assert found[("proj/srt/models/model.py", 5, "NPU202")]["severity"] == "error"
    assert found[("proj/bench.py", 7, "NPU935")]["severity"] == "warning"
    assert not any(PATCHER_PHRASE in f["message"] for f in found.values())


def test_no_load_lowers_nothing(tmp_path):
    # the loading function exists but nothing calls it at module level
    root = _project(tmp_path)
    runner = root / "proj/srt/executor/runner.py"
    runner.write_text(runner.read_text().replace("    init_backend()\n", "    pass\n"))
    found = _by_place(migrate_json(root))
    assert found[("proj/srt/models/model.py", 5, "NPU202")]["severity"] == "error"
    assert not any(PATCHER_PHRASE in f["message"] for f in found.values())


def test_name_bound_again_after_the_load_stays_reported(tmp_path):
    # the loading function binds the name again after the import: the patcher's binding is gone
    root = _project(tmp_path)
    hw = root / "proj/srt/hw/npu_utils.py"
    hw.write_text(hw.read_text() + "    torch.cuda.is_current_stream_capturing = lambda: False\n")
    found = _by_place(migrate_json(root))
    assert found[("proj/srt/models/model.py", 5, "NPU202")]["severity"] == "error"
    assert found[("proj/bench.py", 7, "NPU935")]["severity"] == "info"


def test_covered_reads_the_patchers_table():
    from npu_migrate.patcher19 import _table, covered

    _module, cuda, profiler = _table()
    assert covered("torch.cuda.is_current_stream_capturing", cuda, profiler, frozenset())
    assert covered("torch.cuda.CUDAGraph", cuda, profiler, frozenset())
    assert covered("torch.profiler.ProfilerActivity.CUDA", cuda, profiler, frozenset())
    assert not covered("torch.cuda.cudart", cuda, profiler, frozenset())
    assert not covered("torch.cuda.get_device_properties(0).uuid", cuda, profiler, frozenset())
    assert not covered("torch.cuda.CUDAGraph", cuda, profiler, frozenset({"CUDAGraph"}))
