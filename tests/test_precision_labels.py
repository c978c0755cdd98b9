"""Issue #16: report-only findings on names that are labels, not CUDA-only constructs.

Each test reproduces a shape the audits of real projects judged false or redundant, with a small
fixture of our own, and checks that a true case next to it is still reported:
- NPU913 on FP8 dtypes that are only named (allow-lists, dtype maps' keys, default values,
  descriptor constants): information at most; a file that computes in FP8 anchors its error on
  the first real use;
- NPU990 on strings that are labels (platform tables, accelerator names, NIC maps keyed by
  device string, CUDA runtime switches);
- NPU107 on a class whose own `cuda()` is the only caller of `.cuda()`;
- NPU602 on NCCL variables that are removed from an environment, not set.
"""

from __future__ import annotations

from npu_migrate import catalogue
from npu_migrate.model import Options
from npu_migrate.run import migrate_file

OPTIONS = Options(enabled=catalogue.enabled_codes())


def _findings(source: str, code: str, path: str = "pkg/mod.py"):
    result = migrate_file(source.encode(), path, OPTIONS)
    return [f for f in result.findings if f.code == code and not f.fixable]


# ----------------------------------------------------------------------------- NPU913: FP8
FP8_NAMED_ONLY = '''\
import functools

import torch

F8_TO_TL = {
    torch.float8_e4m3fn: "f8e4",
    torch.float8_e5m2: "f8e5",
}


@functools.lru_cache()
def scale_dtypes():
    if hasattr(torch, "float8_e8m0fnu"):
        return (torch.uint8, torch.float8_e8m0fnu)
    return (torch.uint8,)


def check_scale(scale):
    if scale.dtype not in scale_dtypes():
        raise ValueError("bad scale")
    return scale.dtype == torch.float8_e8m0fnu


def amax_of(x, out_dtype: torch.dtype = torch.float8_e4m3fn):
    return x.abs().max() / torch.finfo(out_dtype).max
'''


def test_fp8_dtypes_only_named_are_information_not_an_error():
    found = _findings(FP8_NAMED_ONLY, "NPU913")
    assert len(found) == 1
    assert found[0].severity == "info" and "no FP8 compute" in found[0].message


FP8_DESCRIPTOR_AND_CAST = '''\
import torch


class ScaleDesc:
    def __init__(self, dtype, static):
        self.dtype, self.static = dtype, static


E8M0_BLOCK = ScaleDesc(torch.float8_e8m0fnu, True)
MAX = torch.finfo(torch.float8_e4m3fn).max


def to_e4m3fnuz(weight):
    return weight.view(torch.float8_e4m3fnuz)


def quantize(x):
    return (x / MAX).to(torch.float8_e4m3fn)


def gemm(a, b, sa, sb):
    return torch._scaled_mm(a, b, scale_a=sa, scale_b=sb)
'''


def test_fp8_error_anchors_on_the_first_real_cast_not_a_descriptor_or_rocm_helper():
    found = _findings(FP8_DESCRIPTOR_AND_CAST, "NPU913")
    assert len(found) == 1 and found[0].severity == "error"
    # the scaled matmul anchors (kernels.py), not ScaleDesc (9) nor the fnuz view (14); the cast is listed
    assert found[0].line == 22  # torch._scaled_mm
    assert [place[0] for place in found[0].also] == [18]  # `.to(torch.float8_e4m3fn)`


def test_fp8_tensor_factory_and_parametrized_dtypes_stay_errors():
    source = (
        "import pytest\nimport torch\n\n\n"
        "@pytest.mark.parametrize('dtype', [torch.float8_e4m3fn, torch.float8_e5m2])\n"
        "def test_cast(dtype):\n    assert torch.ones(2).to(dtype).dtype == dtype\n\n\n"
        "def make(n):\n    return torch.empty(n, dtype=torch.float8_e5m2)\n"
    )
    found = _findings(source, "NPU913", "pkg/other.py")
    assert len(found) == 1 and found[0].severity == "error" and found[0].line == 5


def test_only_rocm_fp8_compute_is_still_an_error():
    source = "import torch\n\n\ndef f(w):\n    return w.to(torch.float8_e4m3fnuz)\n"
    found = _findings(source, "NPU913")
    assert len(found) == 1 and found[0].severity == "error"
    # a byte view only reads bytes as FP8 (weight loading): information (kernels.py, sweep.py)
    viewed = _findings(source.replace(".to(", ".view("), "NPU913")
    assert len(viewed) == 1 and viewed[0].severity == "info"


# ----------------------------------------------------------------------------- NPU990: labels
def _strings(found) -> list[tuple[int, str]]:
    """(line, severity) of each place of the NPU990 findings, merged ones split."""
    places = []
    for f in found:
        places.append((f.line, f.severity))
        places.extend((line, f.severity) for line, _col, _src in f.also)
    return sorted(places)


def test_per_device_keys_in_a_file_that_maps_npu_to_cuda_are_not_reported():
    source = (
        "import torch\n\n\nclass Manager:\n    def __init__(self):\n"
        "        self.total = {\"cpu\": 0, \"cuda\": 0}\n\n"
        "    def add(self, t):\n        kind = t.device.type\n        if kind == \"npu\":\n            kind = \"cuda\"\n"
        "        self.total[kind] += t.numel()\n\n\n"
        "def place(x):\n    return x.to(torch.device(\"cuda\", 0))\n"
    )
    found = _findings(source, "NPU990")
    assert not any(line == 6 for line, _ in _strings(found))
    # without an "npu" mapping a lookup by an NPU tensor's type finds nothing: still a warning,
    # which says what to do
    without = source.replace('if kind == "npu"', 'if kind == "xla"').replace('"npu"', '"xla"')
    kept = [f for f in _findings(without, "NPU990") if f.line == 6]
    assert kept and kept[0].severity == "warning" and 'add an "npu" entry' in kept[0].message


def test_platform_label_tables_and_parametrize_values_are_not_reported():
    source = (
        "import pytest\nimport torch\n\n"
        "BACKENDS = {\n    \"cuda\": [\"FLASH\"],\n    \"hip\": [\"ROCM\"],\n    \"cpu\": [\"SDPA\"],\n}\n\n\n"
        "@pytest.mark.parametrize(\"device\", [\"cpu\", \"cuda\", \"hip\"])\n"
        "def test_select(device):\n    assert device in BACKENDS\n\n\n"
        "def custom(lib):\n    return lib.custom_op(\"ns::f\", device_types=\"cuda\")\n\n\n"
        "def devices(is_rocm):\n    return [\"cuda\", \"cpu\"] if not is_rocm else [\"hip\", \"cpu\"]\n"
    )
    places = _strings(_findings(source, "NPU990"))
    assert [line for line, _ in places] == [17]  # only custom_op(device_types="cuda")


def test_nic_affinity_keys_are_one_information_finding():
    keys = "".join(f'    "cuda:{i}": "eth{i // 2}",\n' for i in range(8))
    source = f"import torch\n\nAFFINITY = {{\n{keys}}}\n\n\ndef nic():\n" \
             "    return AFFINITY[\"cuda:\" + str(torch.cuda.current_device())]\n"
    found = _findings(source, "NPU990")
    assert len(found) == 1 and found[0].severity == "info" and found[0].line == 4
    assert "device string" in found[0].message and not found[0].also


def test_accelerator_registry_names_are_not_reported_but_device_choices_are():
    source = '''\
import torch


class Connector:
    def check(self, flag):
        if self._accelerator_flag not in ("auto", "cuda", "gpu"):
            self._accelerator_flag = "cuda"
        return self._accelerator_flag in ("cuda", "gpu", "mps")

    @staticmethod
    def choose_auto():
        if has_tpu():
            return "tpu"
        if torch.cuda.is_available():
            return "cuda"
        return "cpu"


class CUDAAccelerator:
    @staticmethod
    def name():
        return "cuda"


def pick():
    if ok():
        return "cuda"
    return "cpu"
'''
    places = _strings(_findings(source, "NPU990"))
    assert [line for line, _ in places] == [27]  # pick(): a device choice, still reported


def test_cuda_runtime_switches_are_one_information_finding_per_file():
    source = '''\
import os


def inject(dump):
    env = {
        "CUDA_ENABLE_COREDUMP_ON_EXCEPTION": "1",
        "CUDA_COREDUMP_SHOW_PROGRESS": "1",
        "CUDA_COREDUMP_FILE": f"{dump}/core",
    }
    os.environ.update(env)
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    return os.environ.get("CUDA_MY_OWN_FLAG")
'''
    found = _findings(source, "NPU990")
    switches = [f for f in found if "runtime switch" in f.message]
    assert len(switches) == 1 and switches[0].severity == "info" and switches[0].line == 6
    assert len(switches[0].also) == 3
    others = [f for f in found if f not in switches]
    assert [(f.line, f.severity) for f in others] == [(12, "warning")]


def test_fp8_cast_to_a_dtype_variable_is_compute_in_a_file_that_names_fp8():
    source = '''\
import torch

FP8_TYPES = {torch.float8_e4m3fn, torch.float8_e5m2}


def to_fp8(x, float8_dtype):
    assert float8_dtype in FP8_TYPES
    return x.to(float8_dtype)
'''
    found = _findings(source, "NPU913")
    assert len(found) == 1 and found[0].severity == "error" and found[0].line == 8


# ----------------------------------------------------------------------------- NPU107
ELEMENT = '''\
import torch


class Element:
    def to(self, *args):
        return self

    def cuda(self):
        out = {}
        for k, v in self.items():
            if isinstance(v, (torch.Tensor, Element)):
                out[k] = v.cuda()
        return out

    def npu(self):
        return {k: v.npu() for k, v in self.items()}
'''


def test_a_cuda_method_next_to_an_npu_method_is_not_reported():
    assert _findings(ELEMENT, "NPU107") == []
    assert _findings(ELEMENT, "NPU990") == []
    # a `.cuda()` call outside the class may reach the custom method: still reported (a warning)
    found = _findings(ELEMENT + "\n\ndef move(e):\n    return e.cuda()\n", "NPU107")
    assert [(f.line, f.severity) for f in found] == [(20, "warning")]


def test_a_cuda_method_that_only_delegates_is_information():
    source = ELEMENT.replace("    def npu(self):\n        return {k: v.npu() for k, v in self.items()}\n", "")
    found = _findings(source, "NPU107")
    assert len(found) == 1 and found[0].severity == "info" and "delegating" in found[0].message
    found = _findings(source + "\n\ndef move(e):\n    return e.cuda()\n", "NPU107")
    assert {f.severity for f in found} == {"warning"}


# ----------------------------------------------------------------------------- NPU602
def test_nccl_names_removed_from_an_environment_are_not_tuning():
    source = '''\
import os

_STRIP = (
    "MASTER_ADDR",
    "NCCL_DEBUG_FILE",
)


def scrub(env):
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    for k in _STRIP:
        os.environ.pop(k, None)
    env.pop("NCCL_ASYNC_ERROR_HANDLING", None)
    del env["NCCL_BLOCKING_WAIT"]
    os.environ["NCCL_P2P_DISABLE"] = "1"
'''
    found = _findings(source, "NPU602")
    assert [f.line for f in found] == [15]  # the one that is set
    assert not [f for f in _findings(source, "NPU990") if "NCCL" in f.message]


def test_an_accelerator_type_variable_holds_a_device_type_not_a_label():
    source = '''\
import torch


def current(new):
    if new:
        accelerator_type = torch.accelerator.current_accelerator().type
    else:
        accelerator_type = "cuda"
    return getattr(torch, accelerator_type).current_device()


def _choose_gpu_accelerator_backend():
    if has_mps():
        return "mps"
    return "cuda"
'''
    places = _strings(_findings(source, "NPU990"))
    assert [line for line, _ in places] == [8]


def test_an_fp8_default_the_function_casts_to_is_compute():
    source = '''\
import torch


def act_quant(x, block_size=128, dtype=torch.float8_e4m3fn):
    y = torch.empty_like(x, dtype=dtype)
    return y


def scale_of(x, float8_dtype=torch.float8_e5m2):
    return x.abs().max() / 448.0
'''
    found = _findings(source, "NPU913")
    assert [(f.line, f.severity) for f in found] == [(4, "error")]
    info = _findings(source.replace("dtype=dtype", "dtype=torch.float32"), "NPU913")
    assert [f.severity for f in info] == ["info"]


def test_fp8_unpacked_from_a_tuple_is_not_an_allow_list():
    source = "import torch\n\n\ndef f(q):\n    fp8, device = torch.float8_e4m3fn, q.device\n    return q.to(fp8)\n"
    found = _findings(source, "NPU913")
    assert [(f.line, f.severity) for f in found] == [(5, "error")]


REGISTRY = '''\
from typing import Literal

import torch
import torch.distributed as dist


class WeightTransferConfig:
    backend: Literal["nccl", "ipc", "sparse_nccl"] | str = (
        "nccl"
    )


class DistConfig:
    backend: Literal["nccl", "gloo"] = "nccl"


def place(device: Literal["cuda", "cpu"] = "cpu"):
    return torch.zeros(2, device=device)
'''


def test_a_registry_name_typed_by_literal_is_not_a_backend_and_literal_strings_are_types():
    """vLLM's weight-transfer engine: `backend: Literal["nccl", "ipc", ...] = "nccl"` names an
    entry of the project's registry; rewritten to the shim's backend it would be "hccl" on NPU, a
    name the registry lacks. A Literal of process-group backends only is still a backend. The
    strings inside a type annotation are for type checkers: not leftovers."""
    result = migrate_file(REGISTRY.encode(), "pkg/config.py", Options(enabled=catalogue.enabled_codes()))
    new = (result.new or result.original).decode()
    assert '| str = (\n        "nccl"\n    )' in new  # the registry's default: as written
    assert 'backend: Literal["nccl", "gloo"] = npu_compat.dist_backend()' in new
    leftovers = [f for f in result.findings if f.code == "NPU990"]
    assert [f.line for f in leftovers] == [8]  # the registry default itself; no annotation string
