"""Helper h132 (issue #16, round 28): vLLM kernels an NPU host never reaches, because what loads
them fails first or is selected only on CUDA. Each false case is paired with its nearest true case,
which stays reported."""

from __future__ import annotations

from tests.precision_helpers import migrate_json, write_project


def _open(report):
    return sorted((f["path"], f["line"], f["code"], f["severity"]) for f in report["findings"] if not f["fixable"])


_FIRST = """\
import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute


def collective(x):
    return cute.compile(x, cuda.CUstream(0))
"""

# (a kernel module of the same folder: module-level CuTe-DSL imports, and a function-local import
# of the same package further down, merged into the same NPU911 finding)
_SECOND = """\
import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute


def compile_kernel(x):
    from cutlass.cute.runtime import make_fake_stream

    return cute.compile(x, make_fake_stream())
"""


def test_a_module_whose_later_places_repeat_its_failing_import_is_folded_with_its_folder(tmp_path):
    """CA#31, CB#10: `lamport_copy.py` and `fused_add_multicast_skinny_gemm.py` of a CuTe-DSL kernel
    folder import `cuda.bindings` and `cutlass` unguarded at module level, and again inside a
    function. On an NPU host the module stops at its first import, so the function-local one never
    runs: the folder is one port item, named once, on its first module (nothing is lost: the
    folded module is named there)."""
    root = write_project(tmp_path, {
        "pkg/cute/allreduce.py": _FIRST,
        "pkg/cute/lamport.py": _SECOND,
    })
    report = migrate_json(root)
    assert _open(report) == [("pkg/cute/allreduce.py", 1, "NPU911", "error")], _open(report)
    kept = next(f for f in report["findings"] if f["path"] == "pkg/cute/allreduce.py")
    assert "`lamport.py`" in kept["message"], kept["message"]


def test_a_later_import_of_another_cuda_only_package_keeps_its_module_reported(tmp_path):
    """Nearest true case: the function-local import is of another CUDA-only package (`flashinfer`),
    which the module-level imports do not name: porting the module means porting that too, so its
    finding stays its own; and a module whose function-local line comes before its first failing
    import (a function defined and maybe called first) keeps its finding as well."""
    root = write_project(tmp_path, {
        "pkg/cute/allreduce.py": _FIRST,
        "pkg/cute/lamport.py": _SECOND.replace("from cutlass.cute.runtime import make_fake_stream",
                                               "from flashinfer.norm import make_fake_stream"),
        "pkg/cute/early.py": "def probe():\n    from cutlass.cute.runtime import make_fake_stream\n"
                             "    return make_fake_stream()\n\n\nimport cutlass\nimport cutlass.cute as cute\n",
    })
    report = migrate_json(root)
    opened = _open(report)
    assert ("pkg/cute/lamport.py", 1, "NPU911", "error") in opened, opened
    assert any(path == "pkg/cute/early.py" and severity == "error" for path, _l, _c, severity in opened), opened
