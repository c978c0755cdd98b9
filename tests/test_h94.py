"""Issue #16, round 22 (BK#19, BI#16): callees whose every caller lies in a backend, scheme or
method an NPU host never selects (npu_migrate/callees22.py). Each false case is paired with the
nearest true one, which stays reported."""

from __future__ import annotations

import re
from pathlib import Path

from .precision_helpers import migrate_json, moot_lines, write_project
from .test_precision_dispatch import REGISTRY as DISPATCH_REGISTRY


def _open(report: dict, code: str, path: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code and f["path"] == path and not f["fixable"]]


def _lines(findings: list[dict]) -> list[int]:
    """The lines of the findings, their "also at" places included."""
    out = set()
    for f in findings:
        out.add(f["line"])
        for match in re.finditer(r"also at lines? ([\d, and]+)", f["message"]):
            out.update(int(n) for n in re.findall(r"\d+", match.group(1)))
    return sorted(out)


# ------------------------------------------------------------------------------------------------
# BK#19: a shared helper's lazy CUDA-only import, called only from a backend a registry never
# selects on an NPU host (the project forces "ascend" there)

# (test_precision_dispatch's registry, its two CUDA-side backends renamed)
REGISTRY = (DISPATCH_REGISTRY.replace("fastmha", "trt").replace("FastBackend", "TrtBackend")
            .replace("shared", "plain").replace("SharedBackend", "PlainBackend"))

NPU_DEFAULTS = """\
def set_default_server_args(args):
    args.attention_backend = "ascend"
"""

UTILS = """\
import torch


def quantize_and_rope(q, k):
    import flashinfer.rope

    return flashinfer.rope.mla_rope_quantize(q, k)


def plain_rope(q, k):
    import flashinfer.rope

    return flashinfer.rope.apply_rope(q, k)
"""

TRT = """\
from proj.attention.utils import quantize_and_rope


class TrtBackend:
    def __init__(self, runner):
        self.runner = runner

    def forward(self, q, k):
        return quantize_and_rope(q, k)
"""

PLAIN = """\
from proj.attention.utils import plain_rope


class PlainBackend:
    def __init__(self, runner):
        self.runner = runner

    def forward(self, q, k):
        return plain_rope(q, k)
"""


def _backend_project(tmp_path: Path, extra: dict | None = None) -> Path:
    return write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/attention/__init__.py": "",
        "proj/attention/registry.py": REGISTRY,
        "proj/attention/utils.py": UTILS,
        "proj/attention/trt_backend.py": TRT,
        "proj/attention/plain_backend.py": PLAIN,
        "proj/npu/__init__.py": "",
        "proj/npu/ascend_backend.py": "class AscendBackend:\n    def __init__(self, runner):\n        pass\n",
        "proj/npu/utils.py": NPU_DEFAULTS,
        # shared code builds the plain backend whatever the option
        "proj/runner.py": "from proj.attention.plain_backend import PlainBackend\n\n\n"
                          "def make(runner):\n    return PlainBackend(runner)\n",
        # a type test in code every host runs builds nothing
        "proj/worker.py": "from proj.attention.trt_backend import TrtBackend\n\n\n"
                          "def is_trt(backend):\n    return isinstance(backend, (TrtBackend, int))\n",
        **(extra or {}),
    })


def test_helper_called_only_from_a_backend_the_npu_default_never_selects_is_a_scope(tmp_path: Path) -> None:
    report = migrate_json(_backend_project(tmp_path))
    scopes = moot_lines(report["skipped"], "NPU911", "proj/attention/utils.py")
    assert 5 in scopes, report["findings"]
    assert "`quantize_and_rope` is reached only from" in scopes[5]
    assert 'proj/attention/trt_backend.py:9' in scopes[5] or 'registry.py' in scopes[5]
    # the nearest true case: the helper a backend shared code builds calls stays reported
    kept = _open(report, "NPU911", "proj/attention/utils.py")
    assert _lines(kept) == [11], kept
    assert kept[0]["severity"] == "error"


def test_helper_with_one_caller_an_npu_host_reaches_stays_reported(tmp_path: Path) -> None:
    # the same helper also called from shared code: one live caller keeps the error
    report = migrate_json(_backend_project(tmp_path, {
        "proj/layers/fused.py": "from proj.attention.utils import quantize_and_rope\n\n\n"
                                "def fused(q, k):\n    return quantize_and_rope(q, k)\n",
        "proj/layers/model.py": "from proj.layers.fused import fused\n\nOUT = fused(1, 2)\n",
    }))
    lines = _lines(_open(report, "NPU911", "proj/attention/utils.py"))
    assert 5 in lines and 11 in lines, report["findings"]
    assert 5 not in moot_lines(report["skipped"], "NPU911", "proj/attention/utils.py")


# ------------------------------------------------------------------------------------------------
# BI#16: a kernel helper's lazy import, reached only from a scheme class the selector builds under
# `if not _is_npu:` in another module

NPU_UTILS = """\
import importlib.util


def is_npu():
    return importlib.util.find_spec("torch_npu") is not None
"""

SELECTOR = """\
from proj.utils import is_npu
from proj.quant.marlin_moe import MarlinMoE
from proj.quant.triton_moe import TritonMoE

_is_npu = is_npu()


def get_moe_method(config):
    if config.bits == 4:
        if not _is_npu:
            return MarlinMoE(config)
        return NpuMoE(config)
    return TritonMoE(config)


class NpuMoE:
    def __init__(self, config):
        self.config = config
"""

KERNEL = """\
def get_scalar_type(bits):
    from sgl_kernel.scalar_type import scalar_types

    return scalar_types.uint4b8 if bits == 4 else scalar_types.uint8b128


def get_fallback_type(bits):
    from sgl_kernel.scalar_type import scalar_types

    return scalar_types.uint8b128
"""

MARLIN = """\
from proj.quant.kernel import get_scalar_type


class MarlinMoE:
    def __init__(self, config):
        self.config = config

    def apply(self, x):
        return get_scalar_type(self.config.bits), x
"""

TRITON_MOE = """\
from proj.quant.kernel import get_fallback_type


class TritonMoE:
    def __init__(self, config):
        self.config = config

    def apply(self, x):
        return get_fallback_type(self.config.bits), x
"""


def test_helper_reached_only_from_a_scheme_chosen_under_not_is_npu_is_a_scope(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/utils.py": NPU_UTILS,
        "proj/quant/__init__.py": "",
        "proj/quant/selector.py": SELECTOR,
        "proj/quant/kernel.py": KERNEL,
        "proj/quant/marlin_moe.py": MARLIN,
        "proj/quant/triton_moe.py": TRITON_MOE,
    }))
    scopes = moot_lines(report["skipped"], "NPU911", "proj/quant/kernel.py")
    assert 2 in scopes, report["findings"]
    assert "`get_scalar_type` is reached only from" in scopes[2]
    # the nearest true case: the Triton scheme every other configuration builds, NPU included
    kept = _open(report, "NPU911", "proj/quant/kernel.py")
    assert _lines(kept) == [8], kept


# ------------------------------------------------------------------------------------------------
# BJ#15: a CUDA-graph runner whose only construction lies under `self.enable_cg`, set once to
# `_is_cuda and <env>`: its info finding (transfer_to_npu remaps `torch.cuda.CUDAGraph` in the
# loading process) is about code an NPU host never runs

PLATFORM = """\
import importlib.util

import torch


def is_npu():
    return importlib.util.find_spec("torch_npu") is not None


def is_cuda():
    return torch.cuda.is_available() and torch.version.cuda is not None
"""

NPU_INIT = """\
from proj.srt.utils import is_npu

_is_npu = is_npu()


def init_npu_backend():
    assert _is_npu
    import torch_npu  # noqa: F401
    from torch_npu.contrib import transfer_to_npu  # noqa: F401
"""

RUNNER = """\
from proj.srt.utils import is_npu
from proj.srt.models.vit import VisionModel

_is_npu = is_npu()
if _is_npu:
    from proj.srt.npu.init import init_npu_backend

    init_npu_backend()


def build():
    return VisionModel()
"""

GRAPH_RUNNER = """\
import torch


class VitGraphRunner:
    def __init__(self, model):
        self.model = model
        self.graphs = {}

    def capture(self, key, x):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.model(x)
        self.graphs[key] = graph

    def train_step(self, x):
        # (gradient code: singles22's inference-capture scope does not apply, the reachability does)
        loss = self.model(x).sum()
        loss.backward()
"""

VISION = """\
import os

from proj.srt.utils import is_cuda
from proj.srt.vit_graph import VitGraphRunner

_is_cuda = is_cuda()


class VisionModel:
    def __init__(self):
        self.enable_cg = _is_cuda and os.environ.get("VIT_CUDA_GRAPH") == "1"
        self.runner = None
        if self.enable_cg:
            self.runner = VitGraphRunner(self)

    def __call__(self, x):
        return x
"""


def _vision_project(tmp_path: Path, vision: str = VISION) -> Path:
    return write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/srt/__init__.py": "",
        "proj/srt/utils.py": PLATFORM,
        "proj/srt/npu/__init__.py": "",
        "proj/srt/npu/init.py": NPU_INIT,
        "proj/srt/runner.py": RUNNER,
        "proj/srt/vit_graph.py": GRAPH_RUNNER,
        "proj/srt/models/__init__.py": "",
        "proj/srt/models/vit.py": vision,
    })


def test_graph_runner_built_only_under_a_cuda_flag_is_a_scope_even_at_info(tmp_path: Path) -> None:
    report = migrate_json(_vision_project(tmp_path))
    scopes = moot_lines(report["skipped"], "NPU202", "proj/srt/vit_graph.py")
    assert 10 in scopes, [f for f in report["findings"] if f["path"] == "proj/srt/vit_graph.py"]
    assert "`VitGraphRunner` is reached only from" in scopes[10] and "self.enable_cg" in scopes[10]
    assert not _open(report, "NPU202", "proj/srt/vit_graph.py")


def test_graph_runner_built_whenever_an_env_asks_stays_reported(tmp_path: Path) -> None:
    # the nearest true case: the flag reads only the environment, an NPU host may set it
    report = migrate_json(_vision_project(tmp_path, VISION.replace("_is_cuda and os.environ", "os.environ")))
    assert 10 in _lines(_open(report, "NPU202", "proj/srt/vit_graph.py")), report["findings"]
    assert 10 not in moot_lines(report["skipped"], "NPU202", "proj/srt/vit_graph.py")


OTHER_MODEL = """\
import os


class OtherVisionModel:
    def __init__(self):
        self.enable_cg = os.environ.get("OTHER_CUDA_GRAPH") == "1"
"""

SUBCLASS = """\
from proj.srt.models.vit import VisionModel


class AlwaysGraphedModel(VisionModel):
    def __init__(self):
        super().__init__()
        self.enable_cg = True
"""


def _vision_with(tmp_path: Path, extra: dict) -> dict:
    root = _vision_project(tmp_path)
    for rel, text in extra.items():
        (root / rel).write_text(text)
    return migrate_json(root)


def test_same_attribute_of_an_unrelated_class_elsewhere_keeps_the_scope(tmp_path: Path) -> None:
    # another model's own `self.enable_cg` is not this class's attribute
    report = _vision_with(tmp_path, {"proj/srt/models/other.py": OTHER_MODEL})
    assert 10 in moot_lines(report["skipped"], "NPU202", "proj/srt/vit_graph.py"), report["findings"]


def test_attribute_a_subclass_elsewhere_sets_stays_reported(tmp_path: Path) -> None:
    # the nearest true case: a subclass in another module sets the flag on the class's instances
    report = _vision_with(tmp_path, {"proj/srt/models/graphed.py": SUBCLASS})
    assert 10 in _lines(_open(report, "NPU202", "proj/srt/vit_graph.py")), report["findings"]
    assert 10 not in moot_lines(report["skipped"], "NPU202", "proj/srt/vit_graph.py")


# ------------------------------------------------------------------------------------------------
# BK#7's shape without the custom-op string: a shared helper called only from the `forward_cuda`
# of platform-dispatched ops (a `CustomOp` with `forward_native`)

CUSTOM_OP = """\
class CustomOp:
    def forward(self, *args):
        return self.dispatch_forward()(*args)

    def dispatch_forward(self):
        return self.forward_native
"""

ROPE_COMMON = """\
def flashinfer_rope(q, k):
    from flashinfer.rope import apply_rope_inplace

    apply_rope_inplace(q, k)


def flashinfer_rope_any(q, k):
    from flashinfer.rope import apply_rope_inplace

    apply_rope_inplace(q, k)
"""

ROPE = """\
from proj.custom_op import CustomOp
from proj.rope.common import flashinfer_rope, flashinfer_rope_any


class RotaryEmbedding(CustomOp):
    def forward_native(self, q, k):
        return q, k

    def forward_cuda(self, q, k):
        flashinfer_rope(q, k)
        return q, k


def rope_everywhere(q, k):
    flashinfer_rope_any(q, k)
"""


def test_helper_called_only_from_forward_cuda_of_dispatched_ops_is_a_scope(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/custom_op.py": CUSTOM_OP,
        "proj/rope/__init__.py": "",
        "proj/rope/common.py": ROPE_COMMON,
        "proj/rope/base.py": ROPE,
        "proj/model.py": "from proj.rope.base import rope_everywhere\n\nrope_everywhere(1, 2)\n",
    }))
    scopes = moot_lines(report["skipped"], "NPU911", "proj/rope/common.py")
    assert 2 in scopes, report["findings"]
    assert "forward_cuda" in scopes[2]
    # the nearest true case: the helper a plain function every host runs calls
    assert 8 in _lines(_open(report, "NPU911", "proj/rope/common.py")), report["findings"]


def test_class_only_type_tests_name_stays_reported(tmp_path: Path) -> None:
    # a public class the run only names in `isinstance`: its users (or a registry) build it
    report = migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/strategies/__init__.py": "",
        "proj/strategies/dp.py": "import torch\n\n\nclass DataParallelStrategy:\n"
                                 "    def setup(self, module):\n        return torch.nn.DataParallel(module)\n",
        "proj/fabric.py": "from proj.strategies.dp import DataParallelStrategy\n\n\n"
                          "def check(strategy):\n    if isinstance(strategy, DataParallelStrategy):\n"
                          "        raise ValueError(strategy)\n",
    }))
    assert 6 in _lines(_open(report, "NPU901", "proj/strategies/dp.py")), report["findings"]
    assert 6 not in moot_lines(report["skipped"], "NPU901", "proj/strategies/dp.py")
