"""Round 16 (issue #16): one NPU911 per folder of modules that only fail at import on CUDA-only
packages (importfolders.py)."""

from .precision_helpers import migrate_json

_CUTE = "import cutlass\nimport cutlass.cute as cute\n{extra}\n\ndef kernel_{name}(x):\n    return cute.compile(x)\n"


def _open(report):
    return sorted((f["path"], f["line"], f["code"], f["severity"]) for f in report["findings"] if not f["fixable"])


def test_a_folder_of_cute_dsl_modules_is_one_finding_that_names_every_module(tmp_path):
    """SGLang's vendored CuTe-DSL flash-attention: every module of the folder starts with the same
    unguarded imports. One finding (the first module's) names the others; a module of the folder
    whose finding holds anything but such imports (here a guarded use in a function) keeps its
    own, and so does a lone module in another folder."""
    cute = tmp_path / "pkg" / "cute"
    cute.mkdir(parents=True)
    for name, extra in (("mask", ""), ("softmax", "import cuda.bindings.driver as cuda\n"), ("utils", "")):
        (cute / f"{name}.py").write_text(_CUTE.format(name=name, extra=extra))
    (cute / "interface.py").write_text(
        "import torch\nimport cutlass\n\n\ndef run(x):\n    from flashinfer import norm\n    return norm(x)\n")
    (tmp_path / "pkg" / "other.py").write_text(_CUTE.format(name="other", extra=""))
    report = migrate_json(tmp_path)
    assert _open(report) == [
        ("pkg/cute/interface.py", 2, "NPU911", "error"),
        ("pkg/cute/mask.py", 1, "NPU911", "error"),
        ("pkg/other.py", 1, "NPU911", "error"),
    ], _open(report)
    kept = next(f for f in report["findings"] if f["path"] == "pkg/cute/mask.py")
    assert "`softmax.py`, `utils.py`" in kept["message"] and "`cuda.bindings`, `cutlass`" in kept["message"]
    assert "interface.py" not in kept["message"]


def test_guarded_imports_and_other_findings_are_not_folded(tmp_path):
    """Imports in a `try` (indented) are probes, not failures; a folder where only one module fails
    at import keeps that module's finding as it is."""
    cute = tmp_path / "pkg" / "cute"
    cute.mkdir(parents=True)
    (cute / "a.py").write_text(_CUTE.format(name="a", extra=""))
    (cute / "b.py").write_text("try:\n    import cutlass\nexcept ImportError:\n    cutlass = None\n")
    report = migrate_json(tmp_path)
    assert _open(report) == [("pkg/cute/a.py", 1, "NPU911", "error")], _open(report)
    kept = report["findings"][0] if report["findings"][0]["path"] == "pkg/cute/a.py" else None
    assert kept is None or "other modules of this folder" not in kept["message"]


def test_a_header_copy_in_another_folder_stays_named_when_its_header_is_folded(tmp_path):
    """A `.cuh` byte-identical to one in another folder is reported once, on the first path, naming
    the copy; that first header is then folded into the `.cu` beside it. The copy's name must come
    along (before round 16 it was dropped: a silent miss, h59's review)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    header = "#pragma once\n__device__ inline float twice(float x) { return x * 2; }\n"
    (tmp_path / "a" / "h.cuh").write_text(header)
    (tmp_path / "b" / "h.cuh").write_text(header)
    (tmp_path / "a" / "k.cu").write_text('#include "h.cuh"\n__global__ void k(float* x) { x[0] = twice(x[0]); }\n')
    report = migrate_json(tmp_path)
    assert _open(report) == [("a/k.cu", 1, "NPU912", "error")], _open(report)
    assert "h.cuh (byte-identical copy: `b/h.cuh`)" in report["findings"][0]["message"]


_GDN_TEST = '''\
import pytest
import torch

try:
    import cuda.bindings.driver as cuda_driver
    import cutlass  # noqa: F401
    from cutlass.cute.runtime import from_dlpack

    from pkg.jit import gdn

    CUTEDSL_AVAILABLE = True
except ImportError:
    CUTEDSL_AVAILABLE = False
    gdn = None


{marker}def test_kernel():
    x = torch.ones(4)
    assert gdn.run(from_dlpack(x)) is not None
'''


def test_a_probe_whose_names_only_skip_marked_tests_read_is_a_scope(tmp_path):
    """Round 17 AV#32 (SGLang's test_cutedsl_gdn.py): the CuTe-DSL imports sit in a `try` that sets
    `CUTEDSL_AVAILABLE`, and every test reading their names is `skipif(not CUTEDSL_AVAILABLE)`:
    an NPU host skips them cleanly (a named scope). Without the marker the test reads
    `from_dlpack` where the import failed: still an error."""
    def project(root, marker):
        (root / "pkg" / "jit").mkdir(parents=True)
        (root / "pkg" / "tests").mkdir()
        (root / "pkg" / "__init__.py").write_text("")
        (root / "pkg" / "jit" / "__init__.py").write_text("")
        (root / "pkg" / "jit" / "gdn.py").write_text("import cutlass.cute as cute\n\n\ndef run(x):\n    return cute.compile(x)\n")
        (root / "pkg" / "tests" / "test_gdn.py").write_text(_GDN_TEST.format(marker=marker))
        return [f for f in migrate_json(root)["findings"] if f["path"] == "pkg/tests/test_gdn.py" and not f["fixable"]]

    (tmp_path / "marked").mkdir()
    (tmp_path / "plain").mkdir()
    assert project(tmp_path / "marked", '@pytest.mark.skipif(not CUTEDSL_AVAILABLE, reason="no CuTe DSL")\n') == []
    plain = project(tmp_path / "plain", "")
    assert [(f["line"], f["code"], f["severity"]) for f in plain] == [(7, "NPU911", "error")], plain


_PIECEWISE = '''\
import torch


class CUDAPiecewiseBackend:
    def __init__(self, graph):
        self.graph = graph

    def __call__(self, *args):
        cudagraph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cudagraph):
            out = self.graph(*args)
        return out
'''

_NPU_PIECEWISE = '''\
import torch

from pkg.cuda_backend import CUDAPiecewiseBackend


class NPUPiecewiseBackend(CUDAPiecewiseBackend):
    def __init__(self, graph):
        super().__init__(graph)

    def __call__(self, *args):
        return self.graph(*args)
'''


def test_a_call_method_an_npu_subclass_overrides_is_not_run_there(tmp_path):
    """Round 17 AV#30 (SGLang's piecewise CUDA-graph backend): `NPUPiecewiseBackend` redefines
    `__call__` without calling the parent's, so the CUDA graph capture in the parent's `__call__`
    never runs on an NPU host (a named scope naming the override; dunder methods were left out
    before). Without the NPU subclass in the run the capture stays an error."""
    def run(root, with_npu):
        (root / "pkg").mkdir(parents=True)
        (root / "pkg" / "__init__.py").write_text("")
        (root / "pkg" / "cuda_backend.py").write_text(_PIECEWISE)
        if with_npu:
            (root / "pkg" / "npu_backend.py").write_text(_NPU_PIECEWISE)
        return migrate_json(root)

    report = run(tmp_path / "npu", True)
    assert not [f for f in report["findings"] if f["path"] == "pkg/cuda_backend.py" and not f["fixable"]], report["findings"]
    assert any(s["path"] == "pkg/cuda_backend.py" and s.get("start_line", 99) <= 9 <= s.get("end_line", 0)
               and "NPUPiecewiseBackend.__call__" in s["reason"] for s in report["skipped"]), report["skipped"]
    plain = run(tmp_path / "plain", False)
    assert [(f["line"], f["code"], f["severity"]) for f in plain["findings"] if not f["fixable"]] == [(9, "NPU202", "error")]


def test_a_place_split_off_a_merged_finding_names_its_own_construct(tmp_path):
    """Round 17 AX#7 (vLLM's alloc_conf.py): the caught `_snapshot()` call becomes a warning and the
    uncaught `_set_allocator_settings(...)` stays an error, split off the merged finding: its message
    must name its own call, not the first place's."""
    (tmp_path / "alloc.py").write_text(
        "import torch\n\n\ndef enabled():\n    try:\n"
        "        return torch.cuda.memory._snapshot().get(\"allocator_settings\")\n"
        "    except Exception:  # noqa: BLE001\n        pass\n    return None\n\n\n"
        "def set_conf(conf):\n    torch.cuda.memory._set_allocator_settings(conf)\n")
    found = {f["line"]: f for f in migrate_json(tmp_path)["findings"] if not f["fixable"] and f["code"] == "NPU202"}
    assert found[6]["severity"] == "warning" and found[6]["message"].startswith("`torch.cuda.memory._snapshot`")
    assert found[13]["severity"] == "error"
    assert found[13]["message"].startswith("`torch.cuda.memory._set_allocator_settings`"), found[13]["message"]
