"""Issue #16, round-13 audits: CUDA sources that only tests or only CUDA-gated code reach
(npu_migrate/othersources.py).

- a `.cu` whose registered CUDA ops no library module calls (only tests do) is folded into the
  NPU912 finding of a sibling `.cu` of its folder whose ops library code calls (AI#28, AJ#32): the
  sibling's message names it; a lone test-only `.cu` keeps its own error;
- a JIT-compiled `.cuh` whose loader library code calls only under a CUDA gate (`if _is_cuda:`,
  with a pure-torch fallback) is a named skipped scope (AH#22); one whose loader is called
  unconditionally keeps its error.
Each fixture is our own.
"""

from __future__ import annotations

from .precision_helpers import migrate_json, moot_lines, write_project

KERNEL = """\
#include <torch/extension.h>

__global__ void {name}_kernel(float* out, const float* x, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] * 2.0f;
}}

at::Tensor {name}(at::Tensor x) {{
  auto out = at::empty_like(x);
  {name}_kernel<<<1, 256>>>(out.data_ptr<float>(), x.data_ptr<float>(), x.numel());
  return out;
}}

TORCH_LIBRARY_IMPL(toyops, CUDA, m) {{
  m.impl("{name}", {name});
}}
"""


def _npu912(report: dict, path: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == "NPU912"]


def test_cu_whose_ops_only_tests_call_folds_into_its_folder(tmp_path):
    root = write_project(tmp_path, {
        "toyops/csrc/scale/scale_fwd.cu": KERNEL.format(name="scale_fwd"),
        "toyops/csrc/scale/scale_check.cu": KERNEL.format(name="scale_check"),
        "toyops/csrc/lone/lone_check.cu": KERNEL.format(name="lone_check"),
        "toyops/ops.py": "import torch\n\n\ndef scale(x):\n    return torch.ops.toyops.scale_fwd(x)\n",
        "tests/test_scale.py": (
            "import torch\n\n\ndef test_check():\n"
            "    torch.ops.toyops.scale_check(torch.ones(4))\n"
            "    torch.ops.toyops.lone_check(torch.ones(4))\n"),
    })
    report = migrate_json(root)
    # the test-only .cu has no finding of its own: its sibling's finding names it
    assert not _npu912(report, "toyops/csrc/scale/scale_check.cu")
    (kept,) = _npu912(report, "toyops/csrc/scale/scale_fwd.cu")
    assert kept["severity"] == "error"
    assert "`scale_check.cu`" in kept["message"] and "no library module calls their ops (`scale_check`)" in kept["message"]
    # nearby true case: a test-only .cu without a reported sibling keeps its error
    (lone,) = _npu912(report, "toyops/csrc/lone/lone_check.cu")
    assert lone["severity"] == "error" and "reported once" not in lone["message"]


def test_cu_whose_op_library_code_calls_stays(tmp_path):
    root = write_project(tmp_path, {
        "toyops/csrc/scale/scale_fwd.cu": KERNEL.format(name="scale_fwd"),
        "toyops/csrc/scale/scale_bwd.cu": KERNEL.format(name="scale_bwd"),
        "toyops/ops.py": ("import torch\n\n\ndef scale(x):\n    return torch.ops.toyops.scale_fwd(x)\n\n\n"
                          "def scale_back(x):\n    return torch.ops.toyops.scale_bwd(x)\n"),
        "tests/test_scale.py": "import torch\n\n\ndef test_fwd():\n    torch.ops.toyops.scale_bwd(torch.ones(4))\n",
    })
    report = migrate_json(root)
    for path in ("toyops/csrc/scale/scale_fwd.cu", "toyops/csrc/scale/scale_bwd.cu"):
        (finding,) = _npu912(report, path)
        assert finding["severity"] == "error" and "reported once" not in finding["message"]


HEADER = """\
#pragma once
#include <cuda_runtime.h>

template <typename T>
__global__ void {name}_kernel(T* out, const T* x, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + T(1);
}}
"""

LOADER = """\
import torch

from toyjit.build import load_jit


def {name}(x):
    module = load_jit("{name}", cuda_files=["{folder}/{name}.cuh"])
    out = torch.empty_like(x)
    module.{name}(x, out)
    return out
"""

LAYERS = """\
import torch

from toyjit.embed import embed as embed_cuda
from toyjit.shift import shift as shift_cuda

_is_cuda = torch.version.cuda is not None


def embed(x):
    if _is_cuda:
        return embed_cuda(x)
    return x + 1


def shift(x):
    return shift_cuda(x)
"""


def test_jit_source_whose_loader_runs_only_under_a_cuda_gate_is_a_named_scope(tmp_path):
    root = write_project(tmp_path, {
        "toyjit/__init__.py": "",
        "toyjit/build.py": "def load_jit(name, cuda_files=()):\n    raise NotImplementedError(name)\n",
        "toyjit/csrc/diffusion/embed.cuh": HEADER.format(name="embed"),
        "toyjit/csrc/misc/shift.cuh": HEADER.format(name="shift"),
        "toyjit/embed.py": LOADER.format(name="embed", folder="diffusion"),
        "toyjit/shift.py": LOADER.format(name="shift", folder="misc"),
        "toyjit/layers.py": LAYERS,
        "tests/test_embed.py": "from toyjit.embed import embed\n\n\ndef test_embed():\n    embed(None)\n",
    })
    report = migrate_json(root)
    path = "toyjit/csrc/diffusion/embed.cuh"
    assert not _npu912(report, path)
    scopes = moot_lines(report["skipped"], "NPU912", path)
    assert 1 in scopes
    assert "in a branch an NPU host does not take: it is compiled only by the JIT loader `toyjit/embed.py`" in scopes[1]
    assert "`toyjit/layers.py` line 11, under `_is_cuda`" in scopes[1]
    # nearby true case: the loader called unconditionally keeps its source's error
    (kept,) = _npu912(report, "toyjit/csrc/misc/shift.cuh")
    assert kept["severity"] == "error"


def test_jit_source_whose_loader_module_is_imported_whole_stays(tmp_path):
    # the loader imported as a module (`from toyjit import embed`) and called outside any gate:
    # an NPU host runs it, so its source keeps its error
    root = write_project(tmp_path, {
        "toyjit/__init__.py": "",
        "toyjit/build.py": "def load_jit(name, cuda_files=()):\n    raise NotImplementedError(name)\n",
        "toyjit/csrc/diffusion/embed.cuh": HEADER.format(name="embed"),
        "toyjit/embed.py": LOADER.format(name="embed", folder="diffusion"),
        "toyjit/layers.py": ("import torch\n\nfrom toyjit.embed import embed as embed_cuda\nfrom toyjit import embed as embed_mod\n\n"
                             "_is_cuda = torch.version.cuda is not None\n\n\n"
                             "def embed(x):\n    if _is_cuda:\n        return embed_cuda(x)\n    return embed_mod.embed(x)\n"),
    })
    report = migrate_json(root)
    (kept,) = _npu912(report, "toyjit/csrc/diffusion/embed.cuh")
    assert kept["severity"] == "error"
