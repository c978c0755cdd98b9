"""The rule tables, the shim and the torch_npu API table agree with each other and with the code."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from npu_migrate import catalogue, npu_api
from npu_migrate.render import rules_text

ROOT = Path(__file__).resolve().parent.parent
SHIM_TEMPLATE = ROOT / "npu_migrate" / "shim" / "__init__.py"
OLDEST_TORCH_NPU = "2.7.1"  # the oldest torch_npu the rewrites must work with


def _load_shim():
    spec = importlib.util.spec_from_file_location("npu_compat_under_test", SHIM_TEMPLATE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shim_targets() -> dict[str, str]:
    """shim attribute -> the torch.cuda name it stands for, for every rewrite in cuda_api.toml."""
    api = catalogue.cuda_api()
    out = {name: name for name in api["shared"]["names"]}
    out.update({shim: cuda for cuda, shim in api["renamed"].items()})
    out.update({name: name for name in api["capability"]["names"]})
    out.update({name: name for name in api["typed_tensors"]["names"]})
    return out


def test_every_code_used_in_the_engine_is_catalogued():
    used = set()
    for path in (ROOT / "npu_migrate").glob("*.py"):
        used |= set(re.findall(r'"(NPU\d{3})"', path.read_text()))
    assert used, "the engine emits codes"
    assert used <= set(catalogue.rules()), used - set(catalogue.rules())


def test_codes_are_well_formed():
    for rule in catalogue.rules().values():
        assert rule.message and rule.guidance and rule.name
        assert rule.family != "other", rule.code


def test_selection_by_prefix_and_all():
    assert catalogue.expand_selection(["NPU2"]) == {c for c in catalogue.rules() if c.startswith("NPU2")}
    assert catalogue.expand_selection(["ALL"]) == set(catalogue.rules())
    with pytest.raises(ValueError, match="NPU777"):
        catalogue.expand_selection(["NPU777"])


def test_rewrite_targets_exist_in_the_shim():
    shim = _load_shim()
    for attr in _shim_targets():
        assert hasattr(shim, attr), f"rules/cuda_api.toml rewrites to {attr}, which the shim lacks"


def test_rewrite_targets_are_torch_cuda_names():
    for cuda_name in _shim_targets().values():
        assert hasattr(torch.cuda, cuda_name), f"torch.cuda.{cuda_name} does not exist"


def test_shared_names_exist_in_the_oldest_torch_npu():
    api = catalogue.cuda_api()
    names = api["shared"]["names"] + api["capability"]["names"] + api["typed_tensors"]["names"]
    names += list(api["renamed"])
    missing = [n for n in names if not npu_api.has_name(f"torch.npu.{n}", version=OLDEST_TORCH_NPU)]
    assert not missing, f"not in torch_npu {OLDEST_TORCH_NPU}: {missing}"


def test_reported_names_are_not_also_rewritten():
    api = catalogue.cuda_api()
    assert not set(api["report"]) & set(_shim_targets().values())


def test_shim_names_torch_npu_only_with_names_the_table_has():
    text = SHIM_TEMPLATE.read_text() + (ROOT / "npu_migrate" / "shim" / "__main__.py").read_text()
    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    for qual in set(re.findall(r"\b(torch_npu(?:\.\w+)+|torch\.npu(?:\.\w+)+)", code)):
        if qual.rsplit(".", 1)[-1] in {"__version__", "__file__"}:
            continue
        assert npu_api.has_name(qual), f"the shim uses {qual}, which torch_npu does not have"


def test_migrated_goldens_call_only_existing_shim_names():
    shim = _load_shim()
    used = set()
    for path in (ROOT / "fixtures" / "rules" / "expected").rglob("*.out"):
        used |= set(re.findall(r"\bnpu_compat\.(\w+)", path.read_text(errors="replace")))
    assert used
    submodules = {p.stem for p in SHIM_TEMPLATE.parent.glob("*.py")} - {"__init__", "__main__"}
    for name in used:
        assert hasattr(shim, name) or name in submodules, name
        if name in shim.SHARED_NAMES:
            assert npu_api.has_name(f"torch.npu.{name}", version=OLDEST_TORCH_NPU), name


def test_readme_rule_list_matches_the_catalogue():
    readme = (ROOT / "README.md").read_text()
    start = readme.index("<!-- rules:start -->") + len("<!-- rules:start -->\n")
    end = readme.index("<!-- rules:end -->")
    assert readme[start:end] == rules_text("markdown"), (
        "README rule list drifted: regenerate it with `npu-migrate rules --format markdown`"
    )


@pytest.mark.integration
def test_installed_wheel_finds_its_tables(tmp_path):
    """Build the wheel and import from it alone: the rules/ tables and the shim template ship."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "wheel"), str(ROOT)],
        check=True, capture_output=True,
    )
    wheel = next((tmp_path / "wheel").glob("npu_migrate-*.whl"))
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    assert (site / "npu_migrate" / "rules" / "codes.toml").is_file()
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import npu_migrate, npu_migrate.catalogue as c, npu_migrate.npu_api as a, npu_migrate.inject as i;"
        "assert npu_migrate.__file__.startswith(sys.argv[1]), npu_migrate.__file__;"
        "print(len(c.rules()), len(c.cuda_api()['shared']['names']), a.has_name('torch.npu.synchronize'),"
        " sorted(i.template_files()))"
    )
    out = subprocess.run([sys.executable, "-c", probe, str(site)], cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout
    count, shared, has, files = out.split(" ", 3)
    assert int(count) == len(catalogue.rules())
    assert has == "True"
    assert "__init__.py" in files


def test_the_trigger_words_cover_every_package_the_sweep_reports():
    """A file is read only when it holds a trigger word (triggers.py): a package the sweep reports
    whose name holds none (flashinfer, liger_kernel, mamba_ssm, ...) would be silently missed in a
    file that imports it and says nothing else about CUDA."""
    from npu_migrate.triggers import PREFILTER, TRIGGER_WORDS

    table = catalogue.read_table("sweep.toml")
    names = set(table["modules"]) | set(table["module_codes"]) | set(table["guard"]["modules"])
    for name in sorted(names):
        line = f"import {name}\n" if "." not in name else f"from {name.rsplit('.', 1)[0]} import {name.rsplit('.', 1)[1]}\n"
        assert TRIGGER_WORDS.search(line) and PREFILTER.search(line.encode()), name
    assert not TRIGGER_WORDS.search("flags = inflate(flash_flag)")  # `fla` only as a word


def test_a_file_importing_only_flashinfer_is_read(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "attn.py").write_text("import flashinfer\n\n\ndef run(q):\n    return flashinfer.decode(q)\n")
    from .precision_helpers import migrate_json
    report = migrate_json(tmp_path)
    assert [f["code"] for f in report["findings"] if f["path"] == "pkg/attn.py"] == ["NPU911"]


def test_sgl_kernel_imports_are_read_and_reported(tmp_path):
    """SGLang's CUDA kernel wheel (`sgl_kernel`) has no NPU build (its Ascend kernels are another
    package, `sgl_kernel_npu`): an unguarded module-level import fails on an NPU host and was
    silently missed (no trigger word, no sweep package) until round 15's review found a benchmark
    whose only failure it was. A guarded import with a fallback is a named scope; `sgl_kernel_npu`
    and a name that merely contains the word are no finding."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "bench.py").write_text("from sgl_kernel import rmsnorm\n\n\ndef run(x, w):\n"
                                               "    return rmsnorm(x, w)\n")
    (tmp_path / "pkg" / "probe.py").write_text("try:\n    from sgl_kernel import rmsnorm\nexcept ImportError:\n"
                                               "    rmsnorm = None\n\n\ndef run(x, w):\n"
                                               "    return x if rmsnorm is None else rmsnorm(x, w)\n")
    (tmp_path / "pkg" / "npu.py").write_text("from sgl_kernel_npu.norm import l1_norm\n\n\ndef check_cpu_sgl_kernel(x):\n"
                                             "    return l1_norm(x)\n")
    from .precision_helpers import migrate_json
    report = migrate_json(tmp_path)
    found = [(f["path"], f["line"], f["code"], f["severity"]) for f in report["findings"] if not f["fixable"]]
    assert found == [("pkg/bench.py", 1, "NPU911", "error")], found
    assert any(s["path"] == "pkg/probe.py" and s.get("start_line") == 2 for s in report["skipped"]), report["skipped"]


def test_cute_dsl_and_cuda_python_imports_are_reported(tmp_path):
    """NVIDIA's CUTLASS Python DSL (`cutlass`, `cutlass.cute`) and cuda-python's driver/runtime
    bindings (`cuda.bindings.driver`) have no NPU build; rounds 14 and 16 found CuTe-DSL kernels
    whose only blocker, that import, was silently missed. A guarded CuTe import is a named scope;
    a project's own `is_cuda()` is not read as a probe of cuda-python (the sweep's availability
    tables are keyed by top-level package), and `torch.cuda` stays the torch.cuda rules' business."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "comm").mkdir()  # (another folder: one folder's import-only findings are folded, importfolders.py)
    (tmp_path / "pkg" / "kern.py").write_text("import cutlass\nimport cutlass.cute as cute\n\n\n"
                                              "def launch(x):\n    return cute.compile(x)\n")
    (tmp_path / "comm" / "drv.py").write_text("import cuda.bindings.driver as cuda_driver\n\n\n"
                                              "def stream():\n    return cuda_driver.CUstream(0)\n")
    (tmp_path / "pkg" / "probe.py").write_text("try:\n    import cutlass.cute as cute\nexcept ImportError:\n"
                                               "    cute = None\n\n\ndef launch(x):\n"
                                               "    return x if cute is None else cute.compile(x)\n")
    from .precision_helpers import migrate_json
    report = migrate_json(tmp_path)
    found = sorted((f["path"], f["line"], f["code"], f["severity"]) for f in report["findings"] if not f["fixable"])
    assert found == [("comm/drv.py", 1, "NPU911", "error"), ("pkg/kern.py", 1, "NPU911", "error")], found
    assert any(s["path"] == "pkg/probe.py" and s.get("start_line") == 2 for s in report["skipped"]), report["skipped"]
    from npu_migrate.testscopes import absent_packages
    assert "cutlass" in absent_packages() and "cuda" not in absent_packages()


def test_deep_gemm_imports_are_reported(tmp_path):
    """DeepGEMM (`deep_gemm`: FP8 GEMM JIT kernels for SM90/SM100) has no NPU build. It was only
    a probed package for test skips; an unguarded `from deep_gemm import ...` in a module went
    unreported and the module's FP8 code was blamed instead (round 19 AZ#32). Now NPU911, and a
    guarded import whose fallback runs stays a named scope."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "gemm.py").write_text(
        "import torch\nfrom deep_gemm import fp8_gemm_nt\n\n\n"
        "def run(a, b, out):\n    fp8_gemm_nt(a, b, out)\n    return out\n")
    (tmp_path / "pkg" / "probe.py").write_text(
        "try:\n    import deep_gemm\nexcept ImportError:\n    deep_gemm = None\n\n\n"
        "def run(a, b):\n    return a @ b if deep_gemm is None else deep_gemm.fp8_gemm_nt(a, b)\n")
    from .precision_helpers import migrate_json
    report = migrate_json(tmp_path)
    found = sorted((f["path"], f["line"], f["code"], f["severity"]) for f in report["findings"] if not f["fixable"])
    assert found == [("pkg/gemm.py", 2, "NPU911", "error")], found
    assert any(s["path"] == "pkg/probe.py" and s.get("start_line") == 2 for s in report["skipped"]), report["skipped"]
