"""The project's own NPU platform layer decides the route (issue #16, round 23: BM#8, BL#40, BL#32):
npu_migrate/platformlayer23.py. Each shape is paired with the nearest case that stays reported. The
fixtures are written here in the shape of the audited code, not copied from it."""

from __future__ import annotations

from npu_migrate.flagargs21 import UNSET
from npu_migrate.patcher19 import PATCHER_PHRASE
from npu_migrate.platformlayer23 import PLATFORM_ONLY, STARTUP, UNSET_NO_EFFECT, npu_layer

from .precision_helpers import migrate_json, write_project


def _open(report: dict, path: str) -> dict[int, dict]:
    return {f["line"]: f for f in report["findings"] if f["path"] == path and not f["fixable"]}


def _scopes(report: dict, path: str) -> dict[int, str]:
    return {s["start_line"]: s["reason"] for s in report["skipped"] if s.get("path") == path and "start_line" in s}


# ---- BM#8: code only the CUDA platform class runs (platforms20's info) is a named scope

PLATFORMS = '''\
def _cuda_platform():
    found = False
    try:
        import pynvml

        pynvml.nvmlInit()
        found = pynvml.nvmlDeviceGetCount() > 0
    except Exception:
        pass
    return "app.platforms.gpu.GpuPlatform" if found else None


def _cpu_platform():
    return "app.platforms.host.HostPlatform"


BUILTIN = [_cuda_platform, _cpu_platform]
'''

GPU = '''\
import torch

from app.platforms.props import free_memory


def _count():
    if torch.cuda.is_current_stream_capturing():
        return 0
    return 1


class GpuPlatform:
    @classmethod
    def integrated(cls, device_id=0):
        return torch.cuda.get_device_properties(device_id).is_integrated

    @classmethod
    def free(cls):
        return free_memory()
'''

HOST = '''\
class HostPlatform:
    pass
'''

PROPS = '''\
import torch


def free_memory():
    return torch.cuda.mem_get_info()[0] + torch.cuda._sleep(1)
'''

WORKER = '''\
from app.platforms.props import free_memory


def report():
    return free_memory()
'''


def _platform_files(**extra):
    files = {
        "app/__init__.py": "",
        "app/platforms/__init__.py": PLATFORMS,
        "app/platforms/gpu.py": GPU,
        "app/platforms/host.py": HOST,
        "app/platforms/props.py": PROPS,
    }
    files.update(extra)
    return files


def test_code_only_the_cuda_platform_class_runs_is_a_named_scope(tmp_path):
    """vLLM's CudaPlatform.is_integrated_gpu (BM#8) and the module-level helper only that class's
    module holds (cuda.py:76, 78): named scopes naming the class and the registry, not infos."""
    report = migrate_json(write_project(tmp_path, _platform_files()))
    assert not _open(report, "app/platforms/gpu.py"), _open(report, "app/platforms/gpu.py")
    scopes = _scopes(report, "app/platforms/gpu.py")
    for line, code in ((7, "NPU202"), (15, "NPU931")):
        reason = scopes.get(line, "")
        assert reason.startswith(f"not run on an NPU host ({code}): {PLATFORM_ONLY}: "), (line, scopes)
        assert "reached only through the CUDA platform class" in reason and "app/platforms/__init__.py:10" in reason
    # a module that only the class imports lies in that code too
    assert not _open(report, "app/platforms/props.py")
    assert PLATFORM_ONLY in _scopes(report, "app/platforms/props.py").get(5, "")


def test_a_module_code_an_npu_host_runs_also_imports_stays_reported(tmp_path):
    """The nearest true case: a worker module (not platform code) imports the same helper, so an NPU
    host loads it: its finding stays open at its severity; the class body's stay named scopes."""
    report = migrate_json(write_project(tmp_path, _platform_files(**{"app/worker.py": WORKER})))
    props = _open(report, "app/platforms/props.py")
    assert props and props[5]["severity"] != "info" and PLATFORM_ONLY not in props[5]["message"], props
    assert not any(PLATFORM_ONLY in r for r in _scopes(report, "app/platforms/props.py").values())
    assert PLATFORM_ONLY in _scopes(report, "app/platforms/gpu.py").get(15, "")


# ---- BL#40: the project's own NPU start-up (its hardware layer) loads transfer_to_npu

FLAGS = '''\
import torch


def on_npu():
    return hasattr(torch, "npu") and torch.npu.is_available()
'''

BOOT = '''\
from app.core.flags import on_npu


def start_npu():
    assert on_npu()
    import torch_npu  # noqa: F401
    from torch_npu.contrib import transfer_to_npu  # noqa: F401
'''

EXECUTOR = '''\
from app.core.flags import on_npu

if on_npu():
    from {module} import start_npu

    start_npu()


class Executor:
    def load(self):
        from app.core.nets.catalog import load_all

        load_all()
'''

CATALOG = '''\
import importlib
import pkgutil


def load_all(package_name="app.core.nets"):
    package = importlib.import_module(package_name)
    for _, name, _ in pkgutil.iter_modules(package.__path__, package_name + "."):
        importlib.import_module(name)
'''

NET = '''\
import torch


def forward(x):
    if torch.cuda.is_current_stream_capturing():
        return x
    torch.cuda.cudart().cudaProfilerStart()
    return x
'''


TRAIN_GRAPH = '''\
import torch


def capture(model, x):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss = model(x).sum()
        loss.backward()
    return graph
'''


def _startup_files(boot: str):
    module = "app." + boot[: -len(".py")].replace("/", ".")
    return {
        "app/__init__.py": "",
        "app/core/__init__.py": "",
        "app/core/flags.py": FLAGS,
        f"app/{boot.rpartition('/')[0]}/__init__.py": "",
        f"app/{boot}": BOOT,
        "app/core/engine/__init__.py": "",
        "app/core/engine/executor.py": EXECUTOR.format(module=module),
        "app/core/nets/__init__.py": "",
        "app/core/nets/catalog.py": CATALOG,
        "app/core/nets/net.py": NET,
        "app/core/nets/train_graph.py": TRAIN_GRAPH,
    }


def test_a_name_the_projects_npu_startup_remaps_is_a_named_scope(tmp_path):
    """SGLang's model runner calls `init_npu_backend()` of hardware_backend/npu/utils.py under its
    NPU flag, which loads transfer_to_npu (BL#40): a model module's `torch.cuda.is_current_stream_capturing`
    runs as written there; a name the patcher does not map (`torch.cuda.cudart`) stays an error."""
    report = migrate_json(write_project(tmp_path, _startup_files("core/hardware/npu/boot.py")))
    net = _open(report, "app/core/nets/net.py")
    assert 5 not in net, net
    reason = _scopes(report, "app/core/nets/net.py")[5]
    assert reason.startswith(f"runs as written on an NPU host (NPU202): {STARTUP}: {PATCHER_PHRASE}: "), reason
    assert "transfer_to_npu at app/core/hardware/npu/boot.py:7" in reason, reason
    assert net[7]["severity"] == "error", net
    # a graph capture (NPUGraph is documented for inference only; this one runs a backward pass):
    # patcher19's info stays a finding
    graph = _open(report, "app/core/nets/train_graph.py")
    assert graph[5]["severity"] == "info" and PATCHER_PHRASE in graph[5]["message"], graph
    assert STARTUP not in graph[5]["message"]


def test_a_load_outside_the_npu_layer_keeps_patcher19s_info(tmp_path):
    """The nearest true case: the same load in a module of no NPU layer (a compatibility module the
    project loads on its NPU path): patcher19's info stays a finding."""
    report = migrate_json(write_project(tmp_path, _startup_files("core/compat/boot.py")))
    net = _open(report, "app/core/nets/net.py")
    assert net[5]["severity"] == "info" and PATCHER_PHRASE in net[5]["message"], net
    assert STARTUP not in net[5]["message"]
    assert 5 not in _scopes(report, "app/core/nets/net.py")


def test_npu_layer_reads_path_parts():
    assert npu_layer("pkg/hardware_backend/npu/utils.py") and npu_layer("pkg/hw/npu_utils.py")
    assert npu_layer("pkg/platforms/npu.py") and npu_layer("pkg/ascend/boot.py")
    assert not npu_layer("pkg/inputs/boot.py") and not npu_layer("pkg/snpu/boot.py")
    assert not npu_layer("tests/npu/test_boot.py") and not npu_layer("pkg/npu/test_boot.py")


# ---- BL#32: a cudnn flag under a parameter no call of the run sets

SEEDS = '''\
import random

import torch


def seed_all(seed, cuda_deterministic=False):
    random.seed(seed)
    if cuda_deterministic:
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    else:
        torch.backends.cudnn.benchmark = True


def quant(x, use_fast=False):
    if use_fast:
        from deep_gemm import fast_quant

        return fast_quant(x)
    return x
'''

CALLERS = '''\
from app.seeds import quant, seed_all


def setup():
    seed_all(1)
    seed_all(2, cuda_deterministic=False)
    return quant(3)
'''


def test_a_no_effect_flag_under_a_parameter_no_call_sets_is_a_named_scope(tmp_path):
    """colossalai's `seed_all(seed, cuda_deterministic=False)` (BL#32): every call of the run leaves
    the parameter False, and the cudnn flag has no effect on NPU anyway: a named scope. The nearest
    true case, a CUDA-only import under such a parameter (it fails where a user sets it), stays
    flagargs21's info."""
    report = migrate_json(write_project(tmp_path, {"app/__init__.py": "", "app/seeds.py": SEEDS,
                                                   "app/callers.py": CALLERS}))
    found = _open(report, "app/seeds.py")
    assert 9 not in found and 10 not in found, found
    scopes = _scopes(report, "app/seeds.py")
    assert scopes[9].startswith(f"no effect on an NPU host (NPU404): {UNSET_NO_EFFECT}: {UNSET}: "), scopes
    deep = [f for f in found.values() if f["code"] == "NPU911"]
    assert deep and deep[0]["severity"] == "info" and UNSET in deep[0]["message"], found
    assert UNSET_NO_EFFECT not in deep[0]["message"]


# ---- BL#28: an attention backend class only the CUDA platform's selector names

SELECTOR = GPU + '''
    @classmethod
    def attn_backend_cls(cls, selected):
        if selected == "sparse":
            from app.attn.sparse import SparseBackend  # noqa: F401

            return "app.attn.sparse.SparseBackend"
        return "app.attn.sdpa.SdpaBackend"
'''

SPARSE = '''\
import torch


class SparseCache:
    def __init__(self):
        self.items = {}


class SparseBackend:
    @staticmethod
    def get_impl_cls() -> type["SparseImpl"]:
        return SparseImpl


class SparseImpl:
    def forward(self, q):
        torch.backends.cuda.preferred_linalg_library(backend="magma")
        return q
'''

DENOISE = '''\
def step(batch, backend_name):
    if backend_name == "sparse":
        from app.attn.sparse import SparseCache

        batch.cache = SparseCache()
    return batch
'''

NPU_PLATFORM = '''\
class NpuPlatform:
    @classmethod
    def attn_backend_cls(cls, selected):
        return "app.attn.{name}"
'''


def _backend_files(npu_choice: str = "sdpa.SdpaBackend"):
    return _platform_files(**{
        "app/platforms/gpu.py": SELECTOR,
        "app/platforms/npu.py": NPU_PLATFORM.format(name=npu_choice),
        "app/attn/__init__.py": "",
        "app/attn/sparse.py": SPARSE,
        "app/attn/sdpa.py": "class SdpaBackend:\n    pass\n",
        "app/stages/__init__.py": "",
        "app/stages/denoise.py": DENOISE,
    })


def test_a_backend_class_only_the_cuda_platform_selector_names_is_a_named_scope(tmp_path):
    """SGLang's SparseVideoGen2 attention backend (BL#28): its module is loaded on an NPU host (a
    pipeline stage imports its cache class), but the backend class is named only by the CUDA
    platform class's selector (an import and its dotted path), and its implementation class only
    by the backend: the implementation's MAGMA switch is a named scope."""
    report = migrate_json(write_project(tmp_path, _backend_files()))
    assert 17 not in _open(report, "app/attn/sparse.py"), _open(report, "app/attn/sparse.py")
    reason = _scopes(report, "app/attn/sparse.py").get(17, "")
    assert reason.startswith(f"not run on an NPU host (NPU405): {PLATFORM_ONLY}: `SparseImpl` is reached only from "
                             "app/platforms/gpu.py:24, app/platforms/gpu.py:26, code reached only through "
                             "`GpuPlatform` (app/platforms/gpu.py), the CUDA platform class"), reason


def test_a_backend_class_the_npu_platform_also_selects_stays_reported(tmp_path):
    """The nearest true case: the NPU platform's selector returns the same backend: an NPU host
    reaches it through its own platform's selection, so the finding keeps its severity."""
    report = migrate_json(write_project(tmp_path, _backend_files(npu_choice="sparse.SparseBackend")))
    found = _open(report, "app/attn/sparse.py")
    assert found[17]["severity"] == "error" and PLATFORM_ONLY not in found[17]["message"], found


def test_a_backend_whose_base_lists_its_subclasses_stays_reported(tmp_path):
    """A backend base whose subclasses a registry lists (`Base.__subclasses__()`) reaches the class
    another way than by name: kept."""
    files = _backend_files()
    files["app/attn/sparse.py"] = SPARSE.replace("class SparseImpl:", "class SparseImpl(ImplBase):").replace(
        "import torch\n", "import torch\n\n\nclass ImplBase:\n    pass\n")
    files["app/attn/registry.py"] = ("from app.attn.sparse import ImplBase\n\n\n"
                                     "def impls():\n    return ImplBase.__subclasses__()\n")
    report = migrate_json(write_project(tmp_path, files))
    found = _open(report, "app/attn/sparse.py")
    assert any(f["code"] == "NPU405" and f["severity"] == "error" for f in found.values()), found
