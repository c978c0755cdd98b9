"""Issue #16, round 9: NPU990 / NPU405 / NPU602 / NPU703 findings on strings, attribute references
and probes that are labels or harmless values, not device uses (npu_migrate/labels5.py,
keptimports.py, families/amp.py's SDPA switches, redundant.py's NCCL blocks).

Each test reproduces a shape the round-9 audits judged false or redundant, with a small fixture of
our own, and checks that a true case next to it is still reported.
"""

from __future__ import annotations

from npu_migrate import catalogue
from npu_migrate.model import Options
from npu_migrate.run import migrate_file

from .precision_helpers import migrate_json, moot_lines, write_project

OPTIONS = Options(enabled=catalogue.enabled_codes())


def _all(source: str, path: str = "pkg/mod.py"):
    return [f for f in migrate_file(source.encode(), path, OPTIONS).findings if not f.fixable]


def _lines(found, severity: str | None = None, code: str | None = None) -> set[int]:
    out = set()
    for f in found:
        if (severity is None or f.severity == severity) and (code is None or f.code == code):
            out.add(f.line)
            out.update(line for line, _column, _source in f.also)
    return out


def _reported(found, code: str | None = None) -> set[int]:
    return _lines(found, "warning", code) | _lines(found, "error", code)


# ----------------------------------------------------------------------------- torch.Tensor.cuda referenced
def test_a_reference_to_tensor_cuda_is_not_a_finding_but_a_call_is():
    source = '''\
import torch

_saved_cuda = torch.Tensor.cuda


def implements(func):
    return lambda handler: handler


@implements(torch.Tensor.cuda)
def handle_cuda(*args):
    return args[0]


def install(wrapper):
    torch.Tensor.cuda = wrapper


def is_cuda_member():
    return torch.Tensor.is_cuda


def move(x):
    return torch.Tensor.cuda(x)
'''
    found = _all(source)
    assert not _lines(found, code="NPU990") & {3, 10, 16, 20}
    assert 24 in _reported(found)  # a call of the method stays reported


# ----------------------------------------------------------------------------- torch.version.cuda checked first
def test_a_version_read_after_a_none_test_is_a_clean_probe():
    source = '''\
import torch


def has_129():
    if torch.version.cuda is None or not torch.version.cuda.startswith("12.9"):
        return False
    return True


def recent():
    return torch.version.cuda is not None and int(torch.version.cuda.split(".")[0]) >= 12


def also_truthy():
    return bool(torch.version.cuda and torch.version.cuda.startswith("12"))


def flags():
    return torch.version.cuda.split(".")
'''
    found = _all(source)
    assert not _reported(found) & {5, 11, 15}
    assert 19 in _reported(found)  # without a None check it stays


def test_a_version_getter_reads_an_attribute_name():
    source = '''\
import torch


def _get_version_attr(attr):
    module = None
    return getattr(module, attr, None)


def cuda_version():
    return _get_version_attr("cuda")


def place(x):
    return x.to(_pick("cuda"))


def _pick(name):
    return name
'''
    found = _all(source)
    assert 10 not in _lines(found, code="NPU990")
    assert 14 in _reported(found)  # "cuda" passed to another function stays


# ----------------------------------------------------------------------------- a Literal choice's default
def test_a_literal_choice_default_is_a_label():
    source = '''\
from dataclasses import dataclass
from typing import Literal


@dataclass
class ServerArgs:
    loader_backend: Literal["transfer_engine", "nccl"] = "nccl"


group_backend: Literal["nccl", "gloo"] = "nccl"
'''
    found = migrate_file(source.encode(), "pkg/mod.py", OPTIONS).findings
    choice = [f for f in found if f.line == 7]
    assert [f.severity for f in choice] == ["info"] and "Literal[" in choice[0].message
    # a choice between process-group backends stays (rewritten: NPU301)
    assert 10 in _lines([f for f in found if f.code == "NPU301"])


# ----------------------------------------------------------------------------- a map_location storage tag
def test_a_map_location_storage_tag_is_not_a_device():
    source = '''\
import torch


def _map_location(storage, location):
    if location.startswith("cuda") and not torch.cuda.is_available():
        return storage.cpu()
    return None


def load(path, device):
    if device.startswith("cuda"):
        return torch.load(path, map_location=_map_location)
    return None
'''
    found = _all(source)
    assert 5 not in _lines(found, code="NPU990")
    assert 11 in _lines(found)  # a device parameter's test stays a finding


# ----------------------------------------------------------------------------- a probed CUDA-only custom op
def test_a_custom_op_called_only_behind_an_availability_probe_is_information():
    source = '''\
import torch


def _has_sparse_lib() -> bool:
    return False


@torch.library.custom_op("mylib::probed_mm", mutates_args=(), device_types=["cuda"])
def probed_mm(a: torch.Tensor) -> torch.Tensor:
    return a


@torch.library.custom_op("mylib::plain_mm", mutates_args=(), device_types="cuda")
def plain_mm(a: torch.Tensor) -> torch.Tensor:
    return a


def sparse_matmul(a):
    assert _has_sparse_lib()
    return torch.ops.mylib.probed_mm(a)


def forward(a):
    return torch.ops.mylib.plain_mm(a)
'''
    found = [f for f in _all(source) if f.code == "NPU990"]
    probed = [f for f in found if f.line == 8]
    assert probed and probed[0].severity == "info" and "_has_sparse_lib()" in probed[0].message
    assert 13 in _reported(found)  # an op on the main path keeps its warning


# ----------------------------------------------------------------------------- SDPA switches and library choices
def test_sdpa_switches_that_only_enable_are_information_and_a_library_reset_is_no_finding():
    source = '''\
import torch

with torch.backends.cuda.sdp_kernel(enable_flash=True, enable_mem_efficient=True):
    pass
with torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False):
    pass
torch.backends.cuda.preferred_linalg_library(backend="magma")
torch.backends.cuda.preferred_linalg_library(backend="default")
'''
    found = [f for f in _all(source) if f.code == "NPU405"]
    assert _reported(found) == {5, 7}
    assert _lines(found, "info") == {3}  # it only enables: information
    choice = next(f for f in found if f.line == 7)
    assert "SDPA" not in choice.message and "linear-algebra library" in choice.message


# ----------------------------------------------------------------------------- one block of NCCL settings
def test_nccl_variables_set_in_one_block_are_one_finding():
    source = '''\
import os


def set_envs(args):
    if "NCCL_CUMEM_ENABLE" not in os.environ or args.symm:
        os.environ["NCCL_CUMEM_ENABLE"] = str(int(args.symm))
    if "NCCL_NVLS_ENABLE" not in os.environ or args.nvls:
        os.environ["NCCL_NVLS_ENABLE"] = str(int(args.nvls))


def elsewhere():
    os.environ["NCCL_IB_DISABLE"] = "1"
'''
    found = [f for f in _all(source) if f.code == "NPU602"]
    assert len(found) == 2
    block = next(f for f in found if f.line == 5)
    assert "NCCL_NVLS_ENABLE" in block.message and {7, 8} <= _lines([block])
    assert any(f.line == 12 for f in found)  # a setting in another function keeps its own


# ----------------------------------------------------------------------------- a Dockerfile's NCCL build path
def test_a_dockerfile_nccl_build_path_joins_the_cuda_build_variable(tmp_path):
    dockerfile = (
        "FROM python:3.11\n"
        "ENV NCCL_NET_PLUGIN=ofi\n"
        "RUN set -eux; \\\n"
        "    NCCL_ROOT=\"$(python3 -c 'import nvidia.nccl')\"; \\\n"
        "    export EP_NCCL_ROOT_DIR=\"${NCCL_ROOT}\"; \\\n"
        "    export TORCH_CUDA_ARCH_LIST=\"9.0\"; \\\n"
        "    pip install .\n"
    )
    report = migrate_json(write_project(tmp_path, {"Dockerfile": dockerfile}))
    found = [f for f in report["findings"] if f["code"] == "NPU703"]
    named = {f["message"].split("`")[1]: f for f in found}
    assert "NCCL_ROOT" not in named
    assert "NCCL_ROOT" in named["TORCH_CUDA_ARCH_LIST"]["message"]
    assert "NCCL_NET_PLUGIN" in named  # an NCCL runtime setting keeps its own finding


# ----------------------------------------------------------------------------- a module behind a kept CUDA gate
def test_a_module_imported_only_behind_a_kept_cuda_check_is_not_run(tmp_path):
    files = {
        "pkg/__init__.py": (
            "import torch\n"
            "\n"
            "from .backends.cpu import ops as cpu_ops\n"
            "\n"
            "if torch.cuda.is_available():\n"
            "    from .backends.cuda import ops as cuda_ops\n"
        ),
        "pkg/backends/__init__.py": "",
        "pkg/backends/cpu/__init__.py": "",
        "pkg/backends/cuda/__init__.py": "",
        "pkg/backends/cpu/ops.py": (
            "import torch\n"
            "\n"
            "\n"
            "@torch.library.register_kernel(\"pkg::add\", \"cuda\")\n"
            "def _add(a):\n"
            "    return a\n"
        ),
        "pkg/backends/cuda/ops.py": (
            "import torch\n"
            "\n"
            "\n"
            "@torch.library.register_kernel(\"pkg::gemm\", \"cuda\")\n"
            "def _gemm(a):\n"
            "    return a\n"
        ),
    }
    report = migrate_json(write_project(tmp_path, files))
    assert not [f for f in report["findings"] if f["path"] == "pkg/backends/cuda/ops.py" and not f["fixable"]]
    assert "a device check kept meaning CUDA" in moot_lines(report["skipped"], path="pkg/backends/cuda/ops.py")[4]
    # the same registration in a module imported unconditionally stays a finding
    assert any(f["path"] == "pkg/backends/cpu/ops.py" and f["line"] == 4 and f["severity"] == "warning"
               for f in report["findings"])


# ----------------------------------------------------------------------------- a version shown
def test_a_cuda_version_read_only_for_display_runs_as_written(tmp_path):
    files = {"pkg/diagnostics.py": (
        "import torch\n"
        "\n"
        "HIP = False\n"
        "\n"
        "\n"
        "def show():\n"
        "    runtime = torch.version.hip if HIP else torch.version.cuda\n"
        "    print(f\"runtime version: {runtime}\")\n"
        "\n"
        "\n"
        "def flags():\n"
        "    return torch.version.cuda.split(\".\")\n"
    )}
    report = migrate_json(write_project(tmp_path, files))
    found = {f["line"]: f for f in report["findings"] if not f["fixable"]}
    assert 7 not in found
    assert any(s["start_line"] == 7 and s["reason"].startswith("runs as written on an NPU host (NPU990)")
               for s in report["skipped"])
    assert found[12]["severity"] == "warning"  # a version used to build something stays


def test_a_tensor_check_before_a_custom_op_call_is_no_probe():
    source = '''\
import torch


@torch.library.custom_op("mylib::fused", mutates_args=(), device_types="cuda")
def fused(a: torch.Tensor) -> torch.Tensor:
    return a


def run(a):
    assert a.is_contiguous()
    return torch.ops.mylib.fused(a)
'''
    assert 4 in _reported([f for f in _all(source) if f.code == "NPU990"])


def test_a_determinism_setting_stays_apart_from_a_tuning_block():
    source = '''\
import os


def pin():
    os.environ["NCCL_CUMEM_ENABLE"] = "0"
    os.environ["NCCL_ALGO"] = "Ring"
    os.environ["NCCL_NVLS_ENABLE"] = "0"
'''
    found = [f for f in _all(source) if f.code == "NPU602"]
    assert len(found) == 2
    assert any("HCCL_DETERMINISTIC" in f.message and f.line == 6 for f in found)
    assert {5, 7} <= _lines([f for f in found if f.line == 5])
