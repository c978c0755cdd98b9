"""Issue #6 diagnostics: each CUDA-only construct gets exactly its code, look-alikes get none.

The golden case fixtures/rules/diagnostics.py shows all of them in one file; these tests name the
issue's items one by one, so a regression says which item broke. Snippets start with a comment
that holds a trigger word: the engine's byte prefilter skips files without one, and a trigger in a
look-alike's own line makes that statement "hot", so the rules really look at it.
"""

from __future__ import annotations

import textwrap

import pytest

from npu_migrate import catalogue
from npu_migrate.engine import migrate_source
from npu_migrate.model import Options
from npu_migrate.sweep import unguarded_imports

OPTIONS = Options(enabled=catalogue.enabled_codes())
HEADER = "# diagnostics test (cuda)\nimport torch\n"


def _findings(body: str):
    source = HEADER + textwrap.dedent(body)
    return migrate_source(source.encode(), "case.py", OPTIONS).findings


def reports(body: str) -> list[str]:
    """The report-only codes, in source order (rewrites belong to the device rules)."""
    return [f.code for f in _findings(body) if not f.fixable]


ITEMS = {
    # Triton kernels and Triton-based libraries (NPU910)
    "triton.jit": ("import triton\n@triton.jit\ndef k(x):\n    pass\n", ["NPU910", "NPU910"]),
    "triton.autotune": (
        "import triton\n@triton.autotune(configs=[], key=['n'])\n@triton.jit\ndef k(x, n):\n    pass\n",
        ["NPU910", "NPU910"],  # one NPU910 per kernel, whatever its decorators
    ),
    "from triton import jit": ("from triton import jit\n@jit\ndef k(x):\n    pass\n", ["NPU910", "NPU910"]),
    # C++/CUDA extensions (NPU911)
    "CUDAExtension": (
        "from torch.utils.cpp_extension import CUDAExtension\next = CUDAExtension('a', ['a.cu'])\n",
        ["NPU911", "NPU911"],
    ),
    # (issue #16: torch.utils.cpp_extension itself is not CUDA-only; only its CUDA builds are)
    "cpp_extension.load of C++ sources": (
        "import torch.utils.cpp_extension\nops = torch.utils.cpp_extension.load(name='a', sources=['a.cpp'])\n",
        [],
    ),
    "cpp_extension.load of a .cu source": (
        "import torch.utils.cpp_extension\nops = torch.utils.cpp_extension.load(name='a', sources=['a.cu'])\n",
        ["NPU911"],
    ),
    "load_inline of C++": (
        "from torch.utils.cpp_extension import load_inline\nops = load_inline(name='a', cpp_sources='')\n",
        [],
    ),
    "load_inline with cuda_sources": (
        "from torch.utils.cpp_extension import load_inline\nops = load_inline('a', '', cuda_sources=src)\n",
        ["NPU911"],
    ),
    "import my_pkg._C": ("import my_pkg._C\n", ["NPU911"]),
    "from . import _CUDA": ("from . import _CUDA\n", ["NPU911"]),
    "selective_scan_cuda": ("import selective_scan_cuda\n", ["NPU911"]),
    "fast_hadamard_transform": ("import fast_hadamard_transform\n", ["NPU911"]),
    # CUDA graphs used for training (NPU932); creating the graph object stays NPU202
    "graph capture of a training step": (
        """\
        def step(model, opt, x):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                model(x).sum().backward()
                opt.step()
        """,
        ["NPU202", "NPU932"],
    ),
    "make_graphed_callables": ("f = torch.cuda.make_graphed_callables(model, (x,))\n", ["NPU932"]),
    "from torch.cuda import make_graphed_callables": (
        "from torch.cuda import make_graphed_callables\nf = make_graphed_callables(model, (x,))\n",
        ["NPU932", "NPU932"],
    ),
    # fp8 (NPU913)
    "torch._scaled_mm": ("y = torch._scaled_mm(a, b, scale_a=s, scale_b=t)\n", ["NPU913"]),
    "torch.float8_e4m3fn": ("y = a.to(torch.float8_e4m3fn)\n", ["NPU913"]),
    "transformer_engine.pytorch": ("import transformer_engine.pytorch as te\n", ["NPU913"]),
    "torchao.float8": ("from torchao.float8 import convert_to_float8_training\n", ["NPU913"]),
    # apex (NPU902), bitsandbytes (NPU914), xformers (NPU915), vLLM (NPU916), DeepSpeed ops (NPU917)
    "amp_C": ("import amp_C\n", ["NPU902"]),
    "apex FusedAdam": ("from apex.optimizers import FusedAdam\n", ["NPU902"]),
    "bitsandbytes Adam8bit": ("import bitsandbytes as bnb\nopt = bnb.optim.Adam8bit(p)\n", ["NPU914"]),
    "xformers": (
        "import xformers.ops\ny = xformers.ops.memory_efficient_attention(q, k, v)\n", ["NPU915"],
    ),
    "vllm": ("from vllm import LLM\n", ["NPU916"]),  # vllm-ascend runs the same vllm package
    "liger_kernel": ("from liger_kernel.transformers import apply_liger_kernel_to_llama\n", ["NPU918"]),
    "deepspeed.ops attribute": ("import deepspeed\nlayer = deepspeed.ops.transformer.DeepSpeedTransformerLayer(c)\n",
                                ["NPU917"]),
    "from deepspeed.ops": ("from deepspeed.ops.transformer import DeepSpeedTransformerLayer\n", ["NPU917"]),
    "deepspeed FusedAdam (an NPU builder)": ("import deepspeed\nopt = deepspeed.ops.adam.FusedAdam(p)\n", []),
    # jiterator (NPU933)
    "torch.cuda.jiterator": ("fn = torch.cuda.jiterator._create_jit_fn('code')\n", ["NPU933"]),
    "from torch.cuda.jiterator import": (
        "from torch.cuda.jiterator import _create_jit_fn\nfn = _create_jit_fn('code')\n", ["NPU933", "NPU933"],
    ),
    # float64 on the device (NPU930)
    ".to(device='cuda', dtype=float64)": ("y = x.to(device='cuda', dtype=torch.float64)\n", ["NPU930"]),
    "zeros(dtype=float64, device='cuda')": ("y = torch.zeros(3, dtype=torch.float64, device='cuda')\n", ["NPU930"]),
    ".cuda().double()": ("y = x.cuda().double()\n", ["NPU930"]),
    ".double().cuda()": ("y = x.double().cuda()\n", ["NPU930"]),
    ".cuda().to(float64)": ("y = torch.load(p)['R'].cuda().to(torch.float64)\n", ["NPU930"]),
    ".to('cuda:0', torch.double)": ("y = x.to('cuda:0', torch.double)\n", ["NPU930"]),
    "f-string device": ("y = torch.ones(2, device=f'cuda:{rank}', dtype=torch.float64)\n", ["NPU930"]),
    "torch.device('cuda')": ("y = torch.ones(2, device=torch.device('cuda'), dtype=torch.double)\n", ["NPU930"]),
    "from torch import float64": ("from torch import float64\ny = x.cuda().to(float64)\n", ["NPU930"]),
    "tensor(dtype=float64).cuda().sum()": ("y = torch.tensor([1.0], dtype=torch.float64).cuda().sum()\n", ["NPU930"]),
    "torch.cuda.DoubleTensor": ("y = torch.cuda.DoubleTensor([1.0])\n", ["NPU930"]),
    ".type(torch.cuda.DoubleTensor)": ("y = x.type(torch.cuda.DoubleTensor)\n", ["NPU930"]),
    # device-properties fields torch_npu lacks (NPU931)
    "get_device_properties(i).warp_size": ("w = torch.cuda.get_device_properties(0).warp_size\n", ["NPU931"]),
    "props variable": (
        """\
        def grid(i):
            props = torch.cuda.get_device_properties(i)
            regs = props.regs_per_multiprocessor
            return props.shared_memory_per_block, regs
        """,
        ["NPU931", "NPU931"],
    ),
}


@pytest.mark.parametrize("item", list(ITEMS))
def test_issue_item_gets_its_codes(item):
    body, expected = ITEMS[item]
    assert reports(body) == expected


def rule_reports(body: str) -> list[str]:
    """The rules and the sweep on the whole parsed file, as the engine runs them without slicing.

    The engine's hot slicing (hotslice.py) hands libcst only statements with a trigger word or a
    CUDA alias; a multi-line statement that reads `props.warp_size` has neither, so until the
    slicer learns the names bound to get_device_properties these cases are checked on the rules.
    """
    import libcst as cst

    from npu_migrate.engine import HOT_STATEMENT
    from npu_migrate.sourcemap import SourceMap
    from npu_migrate.sweep import Sweep
    from npu_migrate.families.dispatch import Dispatcher

    module = cst.parse_module(HEADER + textwrap.dedent(body))
    rules = Dispatcher(module, SourceMap(module), "case.py", OPTIONS.enabled, hot_statement=HOT_STATEMENT)
    module.visit(rules)
    module.visit(Sweep(rules.ctx))
    return [f.code for f in sorted(rules.ctx.findings) if not f.fixable]


PROPERTIES_ACROSS_STATEMENTS = {
    "self.props in another method": """\
        class Launcher:
            def __init__(self):
                self.props = torch.cuda.get_device_properties(0)

            def grid(self):
                return self.props.max_threads_per_multi_processor
        """,
    "props in a later if block": """\
        def grid(i):
            props = torch.cuda.get_device_properties(i)
            if props.warp_size == 32:
                return 1
        """,
}


@pytest.mark.parametrize("case", list(PROPERTIES_ACROSS_STATEMENTS))
def test_properties_fields_across_statements(case):
    assert rule_reports(PROPERTIES_ACROSS_STATEMENTS[case]) == ["NPU931"]


LOOK_ALIKES = {
    "float64 on the CPU": "y = torch.zeros(3, dtype=torch.float64)  # not cuda\n",
    "float64, then back to the CPU": "y = x.to(torch.float64).cpu()  # not cuda\n",
    "float32 on the device": "y = x.to('cuda', torch.float32)\n",
    "device in a variable": "y = torch.zeros(3, dtype=torch.float64, device=cuda_device)\n",
    ".double() alone": "y = x.double()  # cuda elsewhere\n",
    "a local named triton_config": "triton_config = {'BLOCK': 128}\nuse_triton = False\n",
    "a function named like triton": "def triton_available():\n    return False\n",
    "fields NPU properties have": (
        "p = torch.cuda.get_device_properties(0)\n"
        "info = (p.name, p.total_memory, p.L2_cache_size, p.major, p.minor, p.multi_processor_count)\n"
    ),
    "a config's warp_size": "w = cuda_cfg.warp_size\n",
    "props rebound": (
        "props = torch.cuda.get_device_properties(0)\nprops = load_config()\nw = props.warp_size  # cuda\n"
    ),
    "props of another function": (
        "def a():\n    props = torch.cuda.get_device_properties(0)\n    return props.name\n"
        "def b(props):\n    return props.warp_size  # cuda\n"
    ),
    "a parameter hides a module-level props": (
        "props = torch.cuda.get_device_properties(0)\n"
        "def b(props):\n    return props.warp_size  # cuda\n"
    ),
    "torch's own _C": "import torch._C\nfrom torch import _C  # cuda\n",
    "a helper module named cuda_utils": "from .cuda_utils import helper\n",
}


@pytest.mark.parametrize("case", list(LOOK_ALIKES))
def test_look_alikes_are_not_reported(case):
    assert reports(LOOK_ALIKES[case]) == []


def test_inference_graph_capture_is_not_a_training_capture():
    body = """\
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = model(x)
    """
    found = [f for f in _findings(body) if not f.fixable]
    assert [f.code for f in found] == ["NPU202", "NPU202"]
    # the note from rules/cuda_api.toml is in the message, naming the NPU route
    assert all("inference only" in f.message and "npugraphs" in f.message for f in found)


GUARDED = {
    "except ImportError": "try:\n    import triton\nexcept ImportError:\n    triton = None\n",
    "except ModuleNotFoundError": "try:\n    import xformers.ops\nexcept ModuleNotFoundError:\n    pass\n",
    "except a tuple": "try:\n    import apex\nexcept (ImportError, OSError):\n    apex = None\n",
    "except Exception": "try:\n    import bitsandbytes\nexcept Exception:\n    bitsandbytes = None\n",
    "bare except": "try:\n    import amp_C\nexcept:\n    amp_C = None\n",
    "else of a guarded try": "try:\n    import triton\nexcept ImportError:\n    HAS = False\nelse:\n    import triton.language as tl\n",
    "inside a function": "def load():\n    import fast_hadamard_transform\n    return fast_hadamard_transform\n",
    "if TYPE_CHECKING": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import triton\n",
    "inside a class body's method": "class K:\n    def run(self):\n        from . import _CUDA\n",
}


@pytest.mark.parametrize("case", list(GUARDED))
def test_guarded_or_nested_imports_get_no_guard_suggestion(case):
    found = [f for f in _findings(GUARDED[case]) if not f.fixable]
    assert found and not any(f.code == "NPU934" or "unguarded" in f.message for f in found)


UNGUARDED = {
    "try/finally": "try:\n    import triton\nfinally:\n    pass\n",
    "try that catches something else": "try:\n    import xformers\nexcept KeyError:\n    pass\n",
    "inside a with block": "with open('x') as f:\n    import amp_C\n",
    "one line": "import triton, fast_hadamard_transform\n",
}


@pytest.mark.parametrize("case", list(UNGUARDED))
def test_unguarded_module_level_imports_get_the_guard_suggestion(case):
    """Said once, in the import's own ecosystem finding (issue #16: not a second finding on the
    same line); NPU934 is left for CUDA-only packages without an ecosystem code."""
    found = [f for f in _findings(UNGUARDED[case]) if not f.fixable]
    assert sum("imported unguarded" in f.message for f in found) == 1
    assert "NPU934" not in [f.code for f in found]


def test_an_unguarded_package_without_an_ecosystem_code_is_npu934():
    assert reports("import nvidia.dali as dali\n") == ["NPU934", "NPU990"]


def test_unguarded_imports_walks_only_code_run_at_import_time():
    import libcst as cst

    module = cst.parse_module(
        "import a\n"
        "try:\n    import b\nexcept ImportError:\n    import c\n"
        "if x:\n    import d\n"
        "def f():\n    import e\n"
        "with g:\n    import h\n"
    )
    found = unguarded_imports(module)
    names = sorted(
        n.names[0].name.value
        for n in _walk(module)
        if isinstance(n, cst.Import) and id(n) in found
    )
    assert names == ["a", "h"]


def _walk(node):
    yield node
    for child in node.children:
        yield from _walk(child)


def test_guard_suggestion_can_be_suppressed_alone():
    codes = reports("import nvidia.dali  # noqa: NPU934\n")
    assert codes == ["NPU990"]


def test_messages_name_what_was_found():
    by_code = {f.code: f.message for f in _findings(
        "import amp_C\n"
        "y = x.cuda().double()\n"
        "w = torch.cuda.get_device_properties(0).warp_size\n"
        "fn = torch.cuda.jiterator._create_jit_fn('code')\n"
    )}
    assert "`amp_C`" in by_code["NPU902"] and "unguarded" in by_code["NPU902"] and "apex" in by_code["NPU902"]
    assert "`x.cuda().double()`" in by_code["NPU930"]
    assert "`warp_size`" in by_code["NPU931"]
    assert "`torch.cuda.jiterator._create_jit_fn`" in by_code["NPU933"]


def test_float64_report_leaves_the_code_to_the_device_rules():
    """NPU930 only reports: the dtype stays float64, the device rewrite still happens."""
    result = migrate_source((HEADER + "y = x.cuda().double()\n").encode(), "case.py", OPTIONS)
    assert b"x.to(npu_compat.device()).double()" in result.new
    assert [f.code for f in result.findings] == ["NPU101", "NPU930"]


@pytest.mark.parametrize("source, code", [
    # no "cuda", "nccl" or other trigger word anywhere in these files: the byte prefilter must
    # still let them through, since the rule tables name these functions
    ("import torch.distributed as dist\nok = dist.is_backend_available(name)\n", "NPU304"),
    ("import torch.distributed as dist\ngroup, _ = dist.new_subgroups(backend=name)\n", "NPU304"),
    ("import torch\ny = torch._scaled_grouped_mm(a, b, sa, sb)\n", "NPU913"),
])
def test_rule_names_without_a_trigger_word_are_not_prefiltered_away(source, code):
    result = migrate_source(source.encode(), "plain.py", OPTIONS)
    assert result.skipped is None
    assert code in [f.code for f in result.findings]
