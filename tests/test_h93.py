"""firstfail22.py (issue #16, round 22: BJ#2, BI#23): a CUDA-only helper whose every importer fails
first on the same package folds into an importer's finding; the warnings of a module nothing imports,
inside a package whose `__init__` fails on a CUDA-only package, fold into the `__init__`'s finding.
Each false case beside the nearest true one that stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

HELPER = """\
import torch
from cutlass import Float32, cute
from cutlass.cute.nvgpu import cpasync

TO_CUTE = {torch.float32: Float32}


def tile(x):
    return cute.make_layout(x)
"""

KERNEL = """\
import cutlass
import cutlass.cute as cute
from cuda.bindings.driver import CUstream

from kit.cute_helpers import TO_CUTE, tile


def launch(x, stream: CUstream):
    return tile(x), TO_CUTE
"""

LAZY_KERNEL = """\
import cutlass


def launch(x):
    from kit.cute_helpers import tile

    return tile(x)
"""

LAYER = """\
import torch


def forward(x):
    if torch.cuda.is_available():
        from kit.ops.fused import launch

        return launch(x)
    return x
"""


def _report_only(report: dict, path: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and not f["fixable"]]


def _project(tmp_path, files: dict[str, str]):
    base = {"kit/__init__.py": "", "kit/ops/__init__.py": "", "kit/layer.py": LAYER}
    return write_project(tmp_path, {**base, **files})


def test_helper_whose_importers_all_import_the_package_first_folds_into_theirs(tmp_path):
    root = _project(tmp_path, {
        "kit/cute_helpers/__init__.py": HELPER,
        "kit/ops/fused.py": KERNEL,
        "kit/ops/lazy.py": LAZY_KERNEL,
    })
    report = migrate_json(root)
    assert not _report_only(report, "kit/cute_helpers/__init__.py")
    carriers = [f for f in _report_only(report, "kit/ops/fused.py") + _report_only(report, "kit/ops/lazy.py")
                if "kit/cute_helpers/__init__.py" in f["message"]]
    assert len(carriers) == 1
    message = carriers[0]["message"]
    assert carriers[0]["code"] == "NPU911" and carriers[0]["severity"] == "error"
    assert "lines 2, 3" in message and "`cutlass`" in message and "those of 1 more importer" in message


def test_helper_with_an_importer_that_does_not_import_the_package_first_keeps_its_error(tmp_path):
    plain = "import torch\n\nfrom kit.cute_helpers import tile\n\n\ndef run(x):\n    return tile(x)\n"
    root = _project(tmp_path, {
        "kit/cute_helpers/__init__.py": HELPER,
        "kit/ops/fused.py": KERNEL,
        "kit/ops/plain.py": plain,
    })
    report = migrate_json(root)
    own = [f for f in _report_only(report, "kit/cute_helpers/__init__.py") if f["code"] == "NPU911"]
    assert own and own[0]["severity"] == "error"
    assert not any("kit/cute_helpers/__init__.py" in f["message"] for f in _report_only(report, "kit/ops/fused.py"))


def test_helper_imported_before_the_importers_own_package_import_keeps_its_error(tmp_path):
    late = ("from kit.cute_helpers import tile\n"
            "import cutlass\n\n\ndef launch(x):\n    return tile(x), cutlass\n")
    # (the layer imports the kernel module unguarded: behind LAYER's `torch.cuda.is_available()`,
    # kept meaning CUDA since the module fails at import on an NPU host (crossgates22.py), an NPU
    # host would never load the helper at all)
    layer = "from kit.ops.fused import launch\n\n\ndef forward(x):\n    return launch(x)\n"
    root = _project(tmp_path, {"kit/cute_helpers/__init__.py": HELPER, "kit/ops/fused.py": late, "kit/layer.py": layer})
    report = migrate_json(root)
    assert [f for f in _report_only(report, "kit/cute_helpers/__init__.py") if f["code"] == "NPU911"]


def test_helper_importer_of_another_cuda_package_only_keeps_its_error(tmp_path):
    other = ("from cuda.bindings.driver import CUstream\n\nfrom kit.cute_helpers import tile\n\n\n"
             "def launch(x, s: CUstream):\n    return tile(x)\n")
    root = _project(tmp_path, {"kit/cute_helpers/__init__.py": HELPER, "kit/ops/fused.py": other})
    report = migrate_json(root)
    assert [f for f in _report_only(report, "kit/cute_helpers/__init__.py") if f["code"] == "NPU911"]


def test_helper_without_importers_keeps_its_error(tmp_path):
    root = _project(tmp_path, {"kit/cute_helpers/__init__.py": HELPER})
    report = migrate_json(root)
    own = [f for f in _report_only(report, "kit/cute_helpers/__init__.py") if f["code"] == "NPU911"]
    assert own and own[0]["severity"] == "error"


PACKAGE_INIT = "import cutlass.cute as cute\n\nfrom .interface import attend\n"
INTERFACE = "import torch\n\n\ndef attend(q):\n    return q\n"
BENCH = """\
import torch

from kit.fa_cute import attend


def profile(q):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        attend(q)
    return prof
"""


def test_unimported_module_of_a_failing_package_folds_its_warning_into_the_init(tmp_path):
    root = _project(tmp_path, {
        "kit/fa_cute/__init__.py": PACKAGE_INIT,
        "kit/fa_cute/interface.py": INTERFACE,
        "kit/fa_cute/bench.py": BENCH,
    })
    report = migrate_json(root)
    assert not _report_only(report, "kit/fa_cute/bench.py")
    init = [f for f in _report_only(report, "kit/fa_cute/__init__.py") if f["code"] == "NPU911"]
    assert init and "`bench.py` (NPU935 line 7)" in init[0]["message"]


def test_imported_or_script_module_of_a_failing_package_keeps_its_warning(tmp_path):
    script = BENCH + '\n\nif __name__ == "__main__":\n    profile(None)\n'
    user = "from kit.fa_cute.bench import profile\n"
    root = _project(tmp_path, {
        "kit/fa_cute/__init__.py": PACKAGE_INIT,
        "kit/fa_cute/interface.py": INTERFACE,
        "kit/fa_cute/bench.py": BENCH,
        "kit/fa_cute/script.py": script,
        "kit/profiling.py": user,
    })
    report = migrate_json(root)
    assert [f["code"] for f in _report_only(report, "kit/fa_cute/bench.py")] == ["NPU935"]
    assert [f["code"] for f in _report_only(report, "kit/fa_cute/script.py")] == ["NPU935"]


def test_module_of_a_package_whose_init_imports_no_cuda_package_keeps_its_warning(tmp_path):
    root = _project(tmp_path, {
        "kit/fa_cute/__init__.py": "from .interface import attend\n",
        "kit/fa_cute/interface.py": INTERFACE,
        "kit/fa_cute/bench.py": BENCH,
    })
    report = migrate_json(root)
    assert [f["code"] for f in _report_only(report, "kit/fa_cute/bench.py")] == ["NPU935"]


# ----------------------------------------------------------------------------- probed22.py (BJ#7, BJ#40)

ROUTER_COMMON = """\
def is_cute_available(kernel_name: str) -> bool:
    try:
        import cutlass  # noqa: F401
    except ImportError:
        return False
    return True
"""

ROUTER = """\
import torch

from ._router_common import is_cute_available


def is_available() -> bool:
    return is_cute_available("router")


class RouterGemm:
    def _compile(self, key):
        from ._router_kernel import RouterKernel

        return RouterKernel(key)
"""

ROUTER_PLAIN = """\
import torch


class RouterGemm:
    def _compile(self, key):
        from ._router_kernel import RouterKernel

        return RouterKernel(key)
"""

ROUTER_KERNEL = """\
import cutlass
import cutlass.cute as cute
from cuda.bindings.driver import CUstream


class RouterKernel:
    def __init__(self, key):
        self.layout = cute.make_layout(key)
"""

FIND_SPEC_UTILS = """\
import importlib.util

_RUNTIME = {"cutlass": "nvidia-cutlass-dsl", "cuda.bindings.driver": "cuda-python"}


def _missing_runtime() -> list:
    return [p for m, p in _RUNTIME.items() if importlib.util.find_spec(m) is None]


def _runtime_available() -> bool:
    return len(_missing_runtime()) == 0
"""

QUANT = """\
import torch

from kit.quant.cute_utils import _runtime_available

_KERNELS = torch.cuda.is_available() and _runtime_available()


@torch.library.custom_op("kit::quantize_cute", mutates_args=())
def _quantize_op(x: torch.Tensor) -> torch.Tensor:
    from kit.quant.cute_quantize import quantize_cute

    return quantize_cute(x)


def quantize(x):
    if not _KERNELS:
        raise NotImplementedError("CuTe DSL kernels need cutlass")
    return _quantize_op(x)
"""

CUTE_QUANTIZE = """\
import torch


def _layouts(m):
    import cutlass.cute as cute

    return cute.make_layout(m)


def quantize_cute(x):
    return _layouts(x.shape[0])
"""


def _routers(tmp_path, router: str):
    return _project(tmp_path, {
        "kit/ops/_router_common.py": ROUTER_COMMON,
        "kit/ops/router.py": router,
        "kit/ops/_router_kernel.py": ROUTER_KERNEL,
    })


def test_kernel_module_imported_only_inside_a_probing_wrapper_becomes_info(tmp_path):
    report = migrate_json(_routers(tmp_path, ROUTER))
    own = [f for f in _report_only(report, "kit/ops/_router_kernel.py") if f["code"] == "NPU911"]
    assert len(own) == 1 and own[0]["severity"] == "info"
    message = own[0]["message"]
    assert "imported unguarded" not in message
    assert "the probe answers False" in message and "kit/ops/router.py:12 in `_compile`" in message
    assert ("the module offers `is_available()` (through `is_cute_available()` (from _router_common.py: "
            "a try-import of the package)) for its callers to ask first" in message)


def test_kernel_module_imported_inside_a_wrapper_without_a_probe_keeps_its_error(tmp_path):
    report = migrate_json(_routers(tmp_path, ROUTER_PLAIN))
    own = [f for f in _report_only(report, "kit/ops/_router_kernel.py") if f["code"] == "NPU911"]
    assert own and own[0]["severity"] == "error"


def test_kernel_module_also_imported_at_module_level_keeps_its_error(tmp_path):
    eager = "from kit.ops._router_kernel import RouterKernel\n\n\ndef build(k):\n    return RouterKernel(k)\n"
    root = _project(tmp_path, {
        "kit/ops/_router_common.py": ROUTER_COMMON,
        "kit/ops/router.py": ROUTER,
        "kit/ops/_router_kernel.py": ROUTER_KERNEL,
        "kit/ops/eager.py": eager,
    })
    report = migrate_json(root)
    own = [f for f in _report_only(report, "kit/ops/_router_kernel.py") if f["code"] == "NPU911"]
    assert own and own[0]["severity"] == "error"


def _quant(tmp_path, utils: str):
    return _project(tmp_path, {
        "kit/quant/__init__.py": "",
        "kit/quant/cute_utils.py": utils,
        "kit/quant/quant.py": QUANT,
        "kit/quant/cute_quantize.py": CUTE_QUANTIZE,
    })


def test_lazy_kernel_module_behind_a_find_spec_probe_of_another_module_becomes_info(tmp_path):
    report = migrate_json(_quant(tmp_path, FIND_SPEC_UTILS))
    own = [f for f in _report_only(report, "kit/quant/cute_quantize.py") if f["code"] == "NPU911"]
    assert len(own) == 1 and own[0]["severity"] == "info"
    assert "kit/quant/quant.py:10 in `_quantize_op`" in own[0]["message"]
    assert ("which the module calls only under `_KERNELS` (bound to `_runtime_available()` (from cute_utils.py: "
            "through `_missing_runtime()` (`find_spec` of the package's name)))" in own[0]["message"])


def test_lazy_kernel_module_behind_a_probe_of_another_package_keeps_its_error(tmp_path):
    other = FIND_SPEC_UTILS.replace('"cutlass": "nvidia-cutlass-dsl", "cuda.bindings.driver": "cuda-python"',
                                    '"numpy": "numpy"')
    report = migrate_json(_quant(tmp_path, other))
    own = [f for f in _report_only(report, "kit/quant/cute_quantize.py") if f["code"] == "NPU911"]
    assert own and own[0]["severity"] == "error"


def test_lazy_kernel_module_whose_loader_is_also_called_without_the_probe_keeps_its_error(tmp_path):
    unguarded = QUANT + "\n\ndef quantize_fast(x):\n    return _quantize_op(x)\n"
    root = _project(tmp_path, {
        "kit/quant/__init__.py": "",
        "kit/quant/cute_utils.py": FIND_SPEC_UTILS,
        "kit/quant/quant.py": unguarded,
        "kit/quant/cute_quantize.py": CUTE_QUANTIZE,
    })
    report = migrate_json(root)
    own = [f for f in _report_only(report, "kit/quant/cute_quantize.py") if f["code"] == "NPU911"]
    assert own and own[0]["severity"] == "error"


def test_module_that_tests_the_package_only_to_guard_its_own_import_offers_no_probe(tmp_path):
    # (`spec` guards its own import with find_spec; `plain` imports the kernel with no test)
    ops = ("import importlib.util\n\n\ndef spec(x):\n    if importlib.util.find_spec(\"cutlass\") is not None:\n"
           "        return x\n    return None\n\n\ndef plain(x):\n"
           "    from kit.ops._router_kernel import RouterKernel\n\n    return RouterKernel(x)\n")
    root = _project(tmp_path, {"kit/ops/_router_kernel.py": ROUTER_KERNEL, "kit/ops/plain_ops.py": ops})
    report = migrate_json(root)
    own = [f for f in _report_only(report, "kit/ops/_router_kernel.py") if f["code"] == "NPU911"]
    assert own and own[0]["severity"] == "error"
