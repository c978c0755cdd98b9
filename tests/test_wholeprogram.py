"""Whole-program facts (issue 16, the audits' FALSE-WP findings): a module that only another
platform's branch imports, and a method an NPU subclass overrides, never run on an NPU host. Their
report-only findings stay in the output, at info, with the place that proves it; everything that
is not certain from the run's files keeps its severity."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from npu_migrate.cli import main

KERNELS = '''\
# {name}
import triton
import triton.language as tl


@triton.jit
def dequant_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
'''


def _report(root: Path, *targets: str) -> dict:
    paths = [str(root / t) for t in targets] or [str(root)]
    result = CliRunner().invoke(main, ["check", *paths, "--isolated", "--no-cache", "--output-format", "json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout[result.stdout.index("{"):])


def _check(root: Path, *targets: str) -> list[dict]:
    report = _report(root, *targets)
    return report.get("findings", report.get("items", []))


def _moot(report: dict, path: str, code: str) -> dict:
    """The skipped scope a finding about code an NPU host never runs became (moot.py): named, with
    its code and reason, no longer a finding."""
    findings = report.get("findings", report.get("items", []))
    assert not [f for f in findings if f["path"].endswith("/" + path) and f["code"] == code], findings
    found = [s for s in report.get("skipped", []) if s["path"].endswith(path) and "start_line" in s
             and s["reason"].startswith(f"not run on an NPU host ({code}): ")]
    assert len(found) == 1, (path, code, report.get("skipped"))
    return found[0]


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        text = text.replace("# {name}", f"# {name}")  # no two files alike (identical files report once)
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _one(findings: list[dict], path: str, code: str) -> dict:
    found = [f for f in findings if f["path"].endswith("/" + path) and f["code"] == code]
    assert len(found) == 1, (path, code, findings)
    return found[0]


def test_a_module_imported_only_under_a_rocm_branch_is_info_naming_the_imports(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/alt_kernels.py": KERNELS,
        "pkg/awq.py": (
            "from pkg.utils import is_hip\n_is_hip = is_hip()\n\n"
            "if _is_hip:\n    from pkg.alt_kernels import dequant_kernel\n"
        ),
        "pkg/model.py": (
            "from pkg.utils import is_hip\n_is_hip = is_hip()\n\n\ndef pick():\n"
            "    if _is_hip:\n        from .alt_kernels import dequant_kernel\n        return dequant_kernel\n"
            "    return None\n"
        ),
        "pkg/utils.py": "def is_hip():\n    return False\n",
        # the same kernels, imported unconditionally by one module: a real NPU problem
        "pkg/kernels.py": KERNELS,
        "pkg/ops.py": "from pkg.kernels import dequant_kernel\n",
    })
    report = _report(tmp_path)
    findings = report["findings"]
    lowered = _moot(report, "pkg/alt_kernels.py", "NPU910")
    assert "imported only where an NPU host does not go" in lowered["reason"]
    assert "pkg/awq.py:5 under `_is_hip`" in lowered["reason"]
    assert "pkg/model.py:7 under `_is_hip`" in lowered["reason"]
    kept = _one(findings, "pkg/kernels.py", "NPU910")
    assert kept["severity"] == "error" and "NPU host does not go" not in kept["message"]


def test_the_chain_through_a_module_of_another_accelerator_is_followed(tmp_path):
    """bitsandbytes' shape: only the XPU backend (itself imported only when torch.xpu is
    available, with no finding of its own) imports the Triton kernels."""
    _write(tmp_path, {
        "lib/__init__.py": (
            "import torch\nfrom .backends.cpu import ops as cpu_ops\n\n"
            "if hasattr(torch, 'xpu') and torch.xpu.is_available():\n    from .backends.xpu import ops as xpu_ops\n"
        ),
        "lib/backends/__init__.py": "",
        "lib/backends/cpu/__init__.py": "",
        "lib/backends/cpu/ops.py": "def add(a, b):\n    return a + b\n",
        "lib/backends/xpu/__init__.py": "",
        "lib/backends/xpu/ops.py": "def dequant(x):\n    from ..triton import kernels\n    return kernels.dequant_kernel\n",
        "lib/backends/triton/__init__.py": "",
        "lib/backends/triton/kernels.py": KERNELS,
    })
    lowered = _moot(_report(tmp_path), "lib/backends/triton/kernels.py", "NPU910")
    assert "lib/backends/xpu/ops.py:2 under a module an NPU host never imports" in lowered["reason"]


def test_what_the_run_cannot_prove_keeps_its_severity(tmp_path):
    _write(tmp_path, {
        "app/__init__.py": "",
        # imported by nobody in the run: a script or a public module, left alone
        "app/orphan.py": KERNELS,
        # imported under a ROCm branch, and also by name through importlib
        "app/dynamic.py": KERNELS,
        "app/load.py": (
            "import importlib\n_is_hip = False\nif _is_hip:\n    from app import dynamic\n"
            "MOD = importlib.import_module('app.dynamic')\n"
        ),
        # imported under a ROCm branch in one place and unconditionally in another
        "app/mixed.py": KERNELS,
        "app/a.py": "_is_hip = False\nif _is_hip:\n    import app.mixed\n",
        "app/b.py": "import app.mixed\n",
        # a submodule import runs the package's __init__: that counts as an import of it
        "app/sub/__init__.py": KERNELS,
        "app/sub/leaf.py": "X = 1\n",
        "app/c.py": "_is_hip = False\nif _is_hip:\n    import app.sub\n",
        "app/d.py": "from app.sub.leaf import X\n",
    })
    findings = _check(tmp_path)
    for path in ("app/orphan.py", "app/dynamic.py", "app/mixed.py", "app/sub/__init__.py"):
        assert _one(findings, path, "NPU910")["severity"] == "error", path


SUBCLASS_PARENT = '''\
import torch


class CudaGraphRunner:
    def capture(self):
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self.model(self.inp)

    def profile(self):
        return torch.cuda.memory._snapshot()

    def replay(self):
        torch.cuda.memory._record_memory_history()
'''
SUBCLASS_NPU = '''\
import torch_npu

from .cuda_graph_runner import CudaGraphRunner


class NPUGraphRunner(CudaGraphRunner):
    def capture(self):
        self.graph = torch_npu.npu.NPUGraph()

    def profile(self):
        data = super().profile()
        return data
'''


def test_a_method_an_npu_subclass_overrides_is_info_and_the_rest_is_not(tmp_path):
    _write(tmp_path, {"runner/__init__.py": "", "runner/cuda_graph_runner.py": SUBCLASS_PARENT,
                      "runner/npu_graph_runner.py": SUBCLASS_NPU})
    report = _report(tmp_path)
    findings = [f for f in report["findings"] if f["path"].endswith("runner/cuda_graph_runner.py") and not f["fixable"]]
    by_line = {}
    for finding in findings:
        by_line.setdefault(finding["line"], []).append(finding)
    assert not [f for line, fs in by_line.items() if 6 <= line <= 8 for f in fs]  # (now a named scope)
    capture = [s for s in report["skipped"] if s["path"].endswith("runner/cuda_graph_runner.py") and "start_line" in s]
    assert capture and all(6 <= s["start_line"] <= s["end_line"] <= 8 for s in capture)
    assert all("overridden for NPU by `NPUGraphRunner.capture` in runner/npu_graph_runner.py:7" in s["reason"]
               for s in capture)
    # profile() calls the parent's method: it runs on NPU; replay() is not overridden
    others = [f for line, fs in by_line.items() if line >= 11 for f in fs]
    assert others and all("overridden for NPU" not in f["message"] for f in others)
    assert any(f["severity"] == "error" for f in others)


def test_a_one_file_check_sees_no_importer_and_lowers_nothing(tmp_path):
    """A pre-commit run of one file cannot see who imports it: it reports as before (never less)."""
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/alt_kernels.py": KERNELS,
        "pkg/awq.py": "_is_hip = False\nif _is_hip:\n    from pkg.alt_kernels import dequant_kernel\n",
    })
    alone = _one(_check(tmp_path, "pkg/alt_kernels.py"), "pkg/alt_kernels.py", "NPU910")
    assert alone["severity"] == "error"
    _moot(_report(tmp_path), "pkg/alt_kernels.py", "NPU910")


CU = "__global__ void scale(float* x, float a) {{ x[threadIdx.x] *= a; }}  // {name}\n"


def test_a_cuda_source_whose_builder_has_an_npu_twin_is_info(tmp_path):
    """DeepSpeed's shape: op_builder/fused_adam.py lists csrc/adam/adam.cu for FusedAdamBuilder,
    and op_builder/npu/fused_adam.py defines a FusedAdamBuilder of its own: the .cu is never built
    on an NPU host. A source whose builder has no NPU twin stays an error."""
    _write(tmp_path, {
        "csrc/adam/adam.cu": CU.format(name="adam"),
        "csrc/evo/attention.cu": CU.format(name="evo"),
        "op_builder/__init__.py": "",
        "op_builder/builder.py": "class CUDAOpBuilder:\n    pass\n",
        "op_builder/fused_adam.py": (
            "from .builder import CUDAOpBuilder\n\n\nclass FusedAdamBuilder(CUDAOpBuilder):\n"
            "    def sources(self):\n        return ['csrc/adam/frontend.cpp', 'csrc/adam/adam.cu']\n"
        ),
        "op_builder/evoformer.py": (
            "from .builder import CUDAOpBuilder\n\n\nclass EvoformerBuilder(CUDAOpBuilder):\n"
            "    def sources(self):\n        return ['csrc/evo/attention.cu']\n"
        ),
        "op_builder/npu/__init__.py": "",
        "op_builder/npu/fused_adam.py": (
            "class NPUOpBuilder:\n    pass\n\n\nclass FusedAdamBuilder(NPUOpBuilder):\n"
            "    def sources(self):\n        return []\n"
        ),
    })
    report = _report(tmp_path)
    findings = report["findings"]
    adam = _moot(report, "csrc/adam/adam.cu", "NPU912")
    assert "`FusedAdamBuilder` in op_builder/npu/fused_adam.py, where op_builder/fused_adam.py lists this file" \
        in adam["reason"]
    assert _one(findings, "csrc/evo/attention.cu", "NPU912")["severity"] == "error"


def test_a_merged_finding_with_a_place_outside_the_override_stays(tmp_path):
    """One NPU202 for the file stands for the CUDAGraph of capture() (overridden for NPU) and of
    replay() (not): replay still runs on an NPU host, so the finding stays at its severity."""
    parent = SUBCLASS_PARENT.replace("        torch.cuda.memory._record_memory_history()\n",
                                     "        self.graph = torch.cuda.CUDAGraph()\n")
    _write(tmp_path, {"runner/__init__.py": "", "runner/cuda_graph_runner.py": parent,
                      "runner/npu_graph_runner.py": SUBCLASS_NPU})
    report = _report(tmp_path)
    graph = [f for f in report["findings"] if f["path"].endswith("runner/cuda_graph_runner.py") and f["code"] == "NPU202"
             and f["line"] == 6]
    assert len(graph) == 1 and graph[0]["severity"] == "error"
    assert 14 in [line for line, _col, _src in graph[0]["also"]]
    assert not [s for s in report["skipped"] if s["path"].endswith("cuda_graph_runner.py") and "NPU202" in s["reason"]
                and s["start_line"] <= 14 <= s["end_line"]]


def test_a_warm_run_reads_the_facts_from_the_cache_and_answers_the_same(tmp_path, monkeypatch):
    """The facts the pass needs are kept in each file's cache entry: a warm run computes none of
    them again, and its findings and named scopes equal the cold run's."""
    from npu_migrate import wholeprogram

    project = tmp_path / "project"
    _write(project, {
        "pkg/__init__.py": "",
        "pkg/alt_kernels.py": KERNELS,
        "pkg/awq.py": "_is_hip = False\nif _is_hip:\n    from pkg.alt_kernels import dequant_kernel\n",
        "pkg/kernels.py": KERNELS,
        "pkg/ops.py": "from pkg.kernels import dequant_kernel\n",
    })
    cache = tmp_path / "cache"  # (outside the project)

    def run() -> dict:
        result = CliRunner().invoke(main, ["check", str(project / "pkg"), "--isolated", "--cache-dir", str(cache),
                                           "--output-format", "json"])
        assert result.exit_code in (0, 1), result.output
        report = json.loads(result.stdout[result.stdout.index("{"):])
        return {"findings": report["findings"], "skipped": report["skipped"]}

    cold = run()
    assert any("pkg/alt_kernels.py" in s["path"] for s in cold["skipped"])
    calls = []
    original = wholeprogram.file_facts
    monkeypatch.setattr(wholeprogram, "file_facts", lambda *a: calls.append(a) or original(*a))
    assert run() == cold
    assert calls == []  # every fact came from the cache
