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
    root = _project(tmp_path, {"kit/cute_helpers/__init__.py": HELPER, "kit/ops/fused.py": late})
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
