"""Older audit rows (rounds 28-30) judged false from the finding's own file and still reported at
82de8ce (h164). Each false case is paired with its nearest true case, which stays reported."""

from __future__ import annotations

from .precision_helpers import findings_at, migrate_json, scopes_at, write_project

# CB#30 (vLLM's tools/benchmark_helion_kernels.py): a tool that exits where the probed optional
# package `helion` is missing. optpkgexit29.py lowers it, but in the whole vLLM run a test folder
# named after the package (`tests/kernels/helion/`, no `__init__.py`) made `helion` look like a
# module of the run, and the guard was not read.
PROBES = """\
import importlib.util


def _has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def has_fancyopt() -> bool:
    return _has_module("fancyopt")
"""

TOOL = """\
import sys

import torch

try:
    from fancyopt.accuracy import assert_close

    from pkg.probes import has_fancyopt
except ImportError as e:
    print(f"Error importing: {e}")
    sys.exit(1)


def bench(fn):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    assert_close(fn(), fn())


if __name__ == "__main__":
    if has_fancyopt():
        bench(lambda: torch.ones(4, device="cuda"))
"""

# tests of the project's own kernels for that package, in a folder named after it
KERNEL_TEST = """\
import pytest

fancyopt = pytest.importorskip("fancyopt")


def test_kernel():
    assert fancyopt is not None
"""


def test_script_exiting_without_an_optional_package_a_test_folder_is_named_after_is_opt_in(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/probes.py": PROBES, "tools/bench_opt.py": TOOL,
                                    "tests/__init__.py": "", "tests/kernels/__init__.py": "",
                                    "tests/kernels/fancyopt/test_kernel.py": KERNEL_TEST})
    report = migrate_json(root)
    opt = findings_at(report, "tools/bench_opt.py", "NPU202")
    assert opt and all(f["severity"] == "info" for f in opt.values()), opt
    message = next(iter(opt.values()))["message"]
    assert "reached on an NPU host only when the optional package `fancyopt` is installed" in message, message


def test_script_exiting_without_a_package_the_project_ships_keeps_its_error(tmp_path):
    # the nearest true cases: the package is the run's own top-level package, or a module beside the
    # script (it runs wherever the project is checked out, the probe notwithstanding)
    shipped = write_project(tmp_path / "a", {"pkg/__init__.py": "", "pkg/probes.py": PROBES,
                                             "tools/bench_opt.py": TOOL, "fancyopt/__init__.py": "",
                                             "fancyopt/accuracy.py": "def assert_close(a, b):\n    pass\n"})
    beside = write_project(tmp_path / "b", {"pkg/__init__.py": "", "pkg/probes.py": PROBES,
                                            "tools/bench_opt.py": TOOL, "tools/fancyopt/__init__.py": "",
                                            "tools/fancyopt/accuracy.py": "def assert_close(a, b):\n    pass\n"})
    for root in (shipped, beside):
        kept = findings_at(migrate_json(root), "tools/bench_opt.py", "NPU202")
        assert kept and next(iter(kept.values()))["severity"] == "error", (root, kept)


# CA#17 (vLLM's fused_moe/oracle/mxfp4.py:1796): FP8 after a lazy import of AMD's ROCm-only AITER in the
# same block: an NPU host cannot pass the import, whatever selects the branch
CONVERT = """\
import torch


def convert(weight, scale):
    if scale.dim() == 2:
        if weight is not None:
            weight = weight.float()
        from aiter.utility.fp4_utils import e8m0_shuffle

        e8m0 = torch.float8_e8m0fnu
        return e8m0_shuffle(scale.to(e8m0)), weight
    return weight, scale
"""

# the nearest true cases: the FP8 cast before the import, and after a `try` whose handler catches its failure
CONVERT_BEFORE = CONVERT.replace(
    "        from aiter.utility.fp4_utils import e8m0_shuffle\n\n        e8m0 = torch.float8_e8m0fnu\n",
    "        e8m0 = torch.float8_e8m0fnu\n        from aiter.utility.fp4_utils import e8m0_shuffle\n\n")
CONVERT_CAUGHT = CONVERT.replace(
    "        from aiter.utility.fp4_utils import e8m0_shuffle\n",
    "        try:\n            from aiter.utility.fp4_utils import e8m0_shuffle\n"
    "        except ImportError:\n            e8m0_shuffle = None\n")


# (a function whose own body imports it first: vLLM's AITER W4A8 experts)
EXPERTS = """\
import torch


def fused_experts(x, w, scale):
    from aiter.ops.triton.moe_op_gemm_a8w4 import moe_gemm_a8w4

    y = x.to(torch.float8_e4m3fn)
    return moe_gemm_a8w4(y, w, scale)
"""


def test_fp8_after_a_rocm_only_import_in_the_same_block_is_a_named_scope(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/convert.py": CONVERT, "pkg/experts.py": EXPERTS,
                                    "pkg/convert_before.py": CONVERT_BEFORE, "pkg/convert_caught.py": CONVERT_CAUGHT,
                                    "aiter/__init__.py": "", "aiter/experts.py": "# the package itself\n" + EXPERTS})
    report = migrate_json(root)
    assert not findings_at(report, "pkg/convert.py", "NPU913"), report["findings"]
    scope = scopes_at(report, "pkg/convert.py", "NPU913")
    assert scope and "in a branch an NPU host cannot run: it first imports `aiter.utility.fp4_utils` (line 8)" \
        in next(iter(scope.values())), scope
    assert not findings_at(report, "pkg/experts.py", "NPU913"), report["findings"]
    scope = scopes_at(report, "pkg/experts.py", "NPU913")
    assert scope and "in a function an NPU host cannot run: it first imports" in next(iter(scope.values())), scope
    # (the package's own files import it where it is installed)
    for kept in ("pkg/convert_before.py", "pkg/convert_caught.py", "aiter/experts.py"):
        found = findings_at(report, kept, "NPU913")
        assert found and next(iter(found.values()))["severity"] == "error", (kept, report["findings"])


# CA#25 (vLLM's triton_utils/force_first_config.py:30): a module imported only under `if envs.X:`, X read
# as `os.environ.get("X", "0").strip().lower() in ("1", "true")` (two string methods chained)
ENVS = """\
import os

environment_variables = {
    "PKG_FORCE_FIRST_CONFIG": lambda: (
        os.environ.get("PKG_FORCE_FIRST_CONFIG", "0").strip().lower()
        in ("1", "true")
    ),
}
"""

UTILS_INIT = """\
from pkg import envs

if envs.PKG_FORCE_FIRST_CONFIG:
    from pkg.utils.force_first import install

    install()
"""

FORCE_FIRST = """\
try:
    import triton

    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False


def install():
    if not HAS_TRITON:
        return None
    from triton.runtime.errors import OutOfResources, PTXASError

    return (OutOfResources, PTXASError)
"""


def _force_first(tmp_path, default):
    return write_project(tmp_path / default, {"pkg/__init__.py": "", "pkg/envs.py": ENVS.replace('"0"', f'"{default}"'),
                                               "pkg/utils/__init__.py": UTILS_INIT,
                                               "pkg/utils/force_first.py": FORCE_FIRST})


def test_module_imported_only_under_a_stripped_lowered_env_switch_is_opt_in_info(tmp_path):
    opt = findings_at(migrate_json(_force_first(tmp_path, "0")), "pkg/utils/force_first.py", "NPU910")
    assert opt and all(f["severity"] == "info" for f in opt.values()), opt
    message = next(iter(opt.values()))["message"]
    assert "only when the environment variable `PKG_FORCE_FIRST_CONFIG` is set" in message, message
    # the nearest true case: the same switch on by default (the patch is installed wherever Triton is)
    kept = findings_at(migrate_json(_force_first(tmp_path, "1")), "pkg/utils/force_first.py", "NPU910")
    assert kept and next(iter(kept.values()))["severity"] == "error", kept
