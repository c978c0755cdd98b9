"""Issue #16, section 2: findings people can trust.

On two research repositories about 45% of the report-only findings were false or redundant. The
shapes, each reproduced here (fixtures/precision/research_repo holds them all in one project):
- vLLM imports called "CUDA-only", one finding per import line (vLLM runs on Ascend with
  vllm-ascend): now one NPU916 per file, at info severity;
- every `import triton...` line of a file repeated, vendored `.cuh` headers one finding each: now
  one finding per file and ecosystem (the other lines listed), one NPU912 per folder of headers;
- `torch.utils.cpp_extension` imports and `"flash_attention_2"` reported as CUDA-only: now not
  reported (only CUDAExtension, CUDA_HOME and JIT builds of CUDA sources are);
and every code has a severity (error, warning, info) that every output format carries.
"""

from __future__ import annotations

import csv
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from npu_migrate import catalogue
from npu_migrate.cli import main
from npu_migrate.findings import Finding, merge_per_file
from npu_migrate.model import FileResult
from npu_migrate.render import rules_text
from npu_migrate.textfiles import group_cuda_headers

REPO = Path(__file__).resolve().parent.parent
RESEARCH_REPO = REPO / "fixtures" / "precision" / "research_repo"


def _migrate_json(root: Path, *extra: str) -> dict:
    result = CliRunner().invoke(
        main, ["migrate", str(root), "--dry-run", "--no-cache", "--isolated", "--allow-dirty", "-j", "1",
               "--output-format", "json", *extra],
        catch_exceptions=False,
    )
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.stdout)
    assert not report["errors"], report["errors"]
    return report


def _check(root: Path, fmt: str, monkeypatch, *extra: str) -> str:
    monkeypatch.chdir(root)
    result = CliRunner().invoke(main, ["check", ".", "--no-cache", "--isolated", "--output-format", fmt, *extra],
                                catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return result.stdout


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "project"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _reported(report: dict) -> list[dict]:
    return [f for f in report["findings"] if not f["fixable"]]


@pytest.fixture(scope="module")
def research(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("precision") / "research_repo"
    shutil.copytree(RESEARCH_REPO, root)
    return _migrate_json(root)


# ------------------------------------------------------------------ the whole research repository

def test_research_repo_reports_each_ecosystem_once_per_file(research):
    found = Counter((f["path"], f["code"]) for f in _reported(research))
    assert found == Counter({
        ("csrc/kernel.cu", "NPU912"): 1,
        ("csrc/other.cuh", "NPU912"): 1,
        ("csrc/vendor/block_reduce.cuh", "NPU912"): 1,  # the folder's three headers
        ("model/kernels.py", "NPU910"): 1,  # three Triton imports and two kernels
        ("model/kernels.py", "NPU934"): 2,  # triton and apex, unguarded
        ("model/kernels.py", "NPU902"): 1,
        ("model/kernels.py", "NPU913"): 1,
        ("model/kernels.py", "NPU915"): 1,
        ("model/kernels.py", "NPU911"): 1,  # the .cu JIT build, not the C++ one
        ("model/serve.py", "NPU916"): 1,  # four vLLM import lines
        ("scripts/setup_env.sh", "NPU708"): 2,  # flash-attn (twice) and xformers; not vllm
        ("setup.py", "NPU911"): 1,  # CUDAExtension, imported and used
    })
    # 36 report-only findings before issue #16 (11 false, 11 redundant); 14 now, none of either kind
    assert len(_reported(research)) == 14


def test_research_repo_lists_the_other_lines(research):
    by_key = {(f["path"], f["code"], f["message"].split("`")[1] if f["code"] == "NPU934" else ""): f
              for f in _reported(research)}
    triton = by_key[("model/kernels.py", "NPU910", "")]
    assert (triton["line"], triton["column"]) == (3, 1)
    assert triton["message"].endswith("(also at lines 4, 5, 11, 16)")
    assert by_key[("model/kernels.py", "NPU934", "triton")]["message"].endswith("(also at lines 4, 5)")
    assert by_key[("model/kernels.py", "NPU934", "apex")]["message"].endswith("(also at line 7)")
    assert by_key[("model/serve.py", "NPU916", "")]["message"].endswith("(also at lines 5, 6, 7)")
    headers = by_key[("csrc/vendor/block_reduce.cuh", "NPU912", "")]
    assert "3 CUDA headers in `csrc/vendor/`" in headers["message"]
    assert "device_load.cuh, warp_scan.cuh" in headers["message"]
    assert headers["source"] == "csrc/vendor/*.cuh"


def test_research_repo_false_findings_are_gone(research):
    messages = "\n".join(f"{f['path']}:{f['line']} {f['code']} {f['message']}" for f in _reported(research))
    assert "flash_attention_2" not in messages
    assert "cpp_extension`" not in messages  # the module itself is never called CUDA-only
    assert "BuildExtension" not in messages and "CppExtension" not in messages
    assert "model/kernels.py:32 " not in messages  # load(...) of C++ sources
    assert "vllm==" not in messages
    vllm = [f for f in _reported(research) if f["code"] == "NPU916"]
    assert vllm and all("CUDA-only" not in f["message"] for f in vllm)
    assert all(f["severity"] == "info" for f in vllm)


def test_every_finding_carries_its_severity(research):
    for finding in research["findings"]:
        assert finding["severity"] == catalogue.rule(finding["code"]).severity


# ------------------------------------------------------------------ each shape on its own

def test_triton_once_per_file_and_per_file_only(tmp_path):
    body = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x):\n    pass\n"
    root = _project(tmp_path, {"a.py": body, "b.py": body})
    found = Counter((f["path"], f["code"]) for f in _reported(_migrate_json(root)))
    assert found == Counter({("a.py", "NPU910"): 1, ("a.py", "NPU934"): 1,
                             ("b.py", "NPU910"): 1, ("b.py", "NPU934"): 1})


def test_a_projects_own_ecosystem_imports_are_the_project(tmp_path):
    """Migrating vLLM or DeepSpeed itself: `import vllm.utils` in vLLM is the project, not a
    dependency on vLLM (4,459 NPU916 on vLLM's own tree before); the same import in another
    project is still reported, and CUDA-only code in the project (Triton) still is."""
    own = "import vllm.envs as envs\nfrom vllm.utils import cdiv\nimport deepspeed\n" \
          "from deepspeed.ops.adam import FusedAdam\nopt = deepspeed.ops.adam.FusedAdam\nimport triton\n"
    for package, other_code in (("vllm", "NPU917"), ("deepspeed", "NPU916")):
        root = _project(tmp_path / package, {f"{package}/__init__.py": "", f"{package}/core.py": own})
        found = Counter((f["path"], f["code"]) for f in _reported(_migrate_json(root)))
        assert found == Counter({(f"{package}/core.py", other_code): 1, (f"{package}/core.py", "NPU910"): 1,
                                 (f"{package}/core.py", "NPU934"): 1}), package
    other = _project(tmp_path / "other", {"app.py": own})
    codes = {f["code"] for f in _reported(_migrate_json(other))}
    assert {"NPU916", "NPU917", "NPU910"} <= codes


def test_a_package_per_finding_for_unguarded_imports(tmp_path):
    root = _project(tmp_path, {"a.py": "import xformers\nimport bitsandbytes\nimport xformers.ops\n"})
    guards = [f for f in _reported(_migrate_json(root)) if f["code"] == "NPU934"]
    assert [(f["line"], f["message"].split("`")[1]) for f in guards] == [(1, "xformers"), (2, "bitsandbytes")]
    assert guards[0]["message"].endswith("(also at line 3)")


def test_vllm_in_a_guard_or_a_function_is_info_too(tmp_path):
    root = _project(tmp_path, {"a.py": "def serve():\n    from vllm import LLM\n    return LLM\n"})
    (finding,) = _reported(_migrate_json(root))
    assert (finding["code"], finding["severity"]) == ("NPU916", "info")


@pytest.mark.parametrize(("body", "codes"), [
    ("from torch.utils.cpp_extension import BuildExtension, CppExtension\n", []),
    ("import torch.utils.cpp_extension as ext\nops = ext.load('a', ['a.cpp'])\n", []),
    ("from torch.utils.cpp_extension import load_inline\nops = load_inline('a', cpp_sources=src)\n", []),
    ("from torch.utils.cpp_extension import load\nops = load('a', sources=glob.glob('k/*.cu'))\n", ["NPU911"]),
    ("from torch.utils.cpp_extension import load\nops = load('a', ['a.cpp'], with_cuda=True)\n", ["NPU911"]),
    ("from torch.utils.cpp_extension import load_inline\nops = load_inline('a', cpp, cuda)\n", ["NPU911"]),
    ("from torch.utils.cpp_extension import CUDA_HOME\nprint(CUDA_HOME)\n", ["NPU911"]),
])
def test_cpp_extension_only_its_cuda_parts(tmp_path, body, codes):
    root = _project(tmp_path, {"a.py": body})
    assert [f["code"] for f in _reported(_migrate_json(root))] == codes


@pytest.mark.parametrize(("value", "reported"), [
    ("flash_attention_2", False),  # transformers runs it on Ascend
    ("Dao-AILab/flash-attention", True),  # the CUDA kernels' repository: still a leftover
])
def test_attention_strings(tmp_path, value, reported):
    root = _project(tmp_path, {"a.py": f'import torch\nimpl = "{value}" if torch.cuda.is_available() else "sdpa"\n'})
    leftovers = [f for f in _reported(_migrate_json(root)) if f["code"] == "NPU990"]
    assert bool(leftovers) == reported, leftovers


def test_cuda_headers_once_per_folder(tmp_path):
    root = _project(tmp_path, {
        "third_party/cub/a.cuh": "#pragma once\n",
        "third_party/cub/b.cuh": "#pragma once\n",
        "third_party/cub/c.cuh": "#pragma once\n",
        "third_party/cub/block.cu": "__global__ void k() {}\n",
        "third_party/cub/d.cu": "__global__ void k() {}\n",
        "include/lone.cuh": "#pragma once\n",
    })
    found = sorted((f["path"], f["code"]) for f in _reported(_migrate_json(root)))
    assert found == [
        ("include/lone.cuh", "NPU912"),
        ("third_party/cub/a.cuh", "NPU912"),  # for a.cuh, b.cuh and c.cuh
        ("third_party/cub/block.cu", "NPU912"),  # a translation unit each
        ("third_party/cub/d.cu", "NPU912"),
    ]


def test_group_cuda_headers_leaves_its_input_alone():
    def header(rel):
        return FileResult(rel, [Finding(rel, 1, 1, "NPU912", "m", False, rel.rsplit("/", 1)[-1])])

    results = [header("h/a.cuh"), header("h/b.cuh")]
    grouped = group_cuda_headers(results)
    assert [len(r.findings) for r in grouped] == [1, 0]
    assert [len(r.findings) for r in results] == [1, 1]  # (the cache may hold these)


def test_package_installs_once_per_file_and_package(tmp_path):
    root = _project(tmp_path, {"Dockerfile": "FROM python:3.11\nRUN pip install flash-attn\n"
                                             "RUN pip install flash_attn==2.5.8 xformers\n"})
    installs = [f for f in _reported(_migrate_json(root)) if f["code"] == "NPU708"]
    assert [(f["line"], f["message"].split("`")[1]) for f in installs] == [(2, "flash-attn"), (3, "xformers")]
    assert installs[0]["message"].endswith("(also at line 3)")


def test_notebook_findings_merge_across_cells():
    findings = [
        Finding("nb.ipynb", 1, 1, "NPU910", "triton", False, "import triton", cell=2),
        Finding("nb.ipynb", 3, 1, "NPU910", "triton", False, "import triton.language", cell=4),
        Finding("nb.ipynb", 1, 1, "NPU101", ".cuda()", True, "x.cuda()", cell=4),
        Finding("nb.ipynb", 2, 1, "NPU101", ".cuda()", True, "y.cuda()", cell=4),
    ]
    merged = merge_per_file(findings)
    assert [(f.code, f.cell, f.line) for f in merged] == [("NPU910", 2, 1), ("NPU101", 4, 1), ("NPU101", 4, 2)]
    assert merged[0].message == "triton (also at cell_4:3)"  # rewrites are never merged


# ------------------------------------------------------------------ severity: the catalogue

def test_every_code_states_a_severity_in_its_table():
    for name in catalogue.code_tables():
        for code, row in catalogue.read_table(name).items():
            assert row.get("severity") in catalogue.SEVERITIES, f"rules/{name}: {code} needs a severity"
    for rule in catalogue.rules().values():
        assert rule.severity in catalogue.SEVERITIES, rule.code


def test_an_unknown_severity_is_refused(monkeypatch):
    real = catalogue.read_table

    def fake(name):
        table = real(name)
        if name == "codes.toml":
            table["NPU901"] = {**table["NPU901"], "severity": "fatal"}
        return table

    monkeypatch.setattr(catalogue, "read_table", fake)
    catalogue.rules.cache_clear()
    try:
        with pytest.raises(ValueError, match="NPU901: severity"):
            catalogue.rules()
    finally:
        monkeypatch.undo()
        catalogue.rules.cache_clear()


def test_severities_chosen_by_what_happens_on_an_npu():
    severity = catalogue.severity
    assert severity("NPU916") == "info"  # vLLM runs with vllm-ascend
    assert severity("NPU917") == "warning"  # DeepSpeed builds its FusedAdam for NPU
    for code in ("NPU902", "NPU910", "NPU911", "NPU912", "NPU914", "NPU915", "NPU934", "NPU101", "NPU301"):
        assert severity(code) == "error", code
    assert severity("NPU404") == "warning"  # cudnn switches: accepted, no effect
    assert severity("NPU999") == catalogue.DEFAULT_SEVERITY  # a code no table defines


def test_a_finding_takes_its_codes_severity_unless_told():
    assert Finding("a.py", 1, 1, "NPU916", "m", False).severity == "info"
    assert Finding("a.py", 1, 1, "NPU990", "m", False, severity="info").severity == "info"
    with pytest.raises(ValueError):
        Finding("a.py", 1, 1, "NPU990", "m", False, severity="fatal")


def test_ecosystem_guidance_names_the_ascend_counterpart():
    counterparts = {
        "NPU902": "Ascend/apex", "NPU910": "Triton-Ascend", "NPU911": "NpuExtension",
        "NPU913": "npu_quant_matmul", "NPU914": "NPU backend", "NPU915": "npu_fusion_attention",
        "NPU916": "vllm-ascend", "NPU917": "DS_ACCELERATOR=npu",
    }
    for code, name in counterparts.items():
        assert name in catalogue.rule(code).guidance, code
    assert "none known" in catalogue.rule("NPU915").guidance  # no NPU build of xformers itself
    for code in ("NPU916",):
        assert "CUDA-only" not in catalogue.rule(code).message


# ------------------------------------------------------------------ severity: every output format

@pytest.fixture
def mixed(tmp_path) -> Path:
    """One error (NPU910, NPU934), one info (NPU916), one warning (NPU404)."""
    return _project(tmp_path, {"a.py": "import torch\nimport triton\nfrom vllm import LLM\n"
                                       "torch.backends.cudnn.benchmark = True\n"})


def test_text_and_json_formats(mixed, monkeypatch):
    text = _check(mixed, "text", monkeypatch)
    assert "a.py:3:1: NPU916 vLLM runs on Ascend through the vllm-ascend plugin: import from `vllm` [info]" in text
    assert "NPU934 " in text and "[error]" in text and "[warning]" in text
    findings = json.loads(_check(mixed, "json", monkeypatch))["findings"]
    assert {f["code"]: f["severity"] for f in findings} == {
        "NPU910": "error", "NPU934": "error", "NPU916": "info", "NPU404": "warning"}
    rows = json.loads(_check(mixed, "json", monkeypatch, "--statistics"))
    assert {r["code"]: r["severity"] for r in rows}["NPU916"] == "info"


def test_sarif_github_and_gitlab_levels(mixed, monkeypatch):
    sarif = json.loads(_check(mixed, "sarif", monkeypatch))["runs"][0]
    levels = {r["ruleId"]: r["level"] for r in sarif["results"]}
    assert levels == {"NPU910": "error", "NPU934": "error", "NPU916": "note", "NPU404": "warning"}
    rules = {r["id"]: r["defaultConfiguration"]["level"] for r in sarif["tool"]["driver"]["rules"]}
    assert rules["NPU916"] == "note" and rules["NPU101"] == "error"
    github = _check(mixed, "github", monkeypatch)
    assert "::notice file=a.py,line=3,col=1,title=NPU916::" in github
    assert "::warning file=a.py,line=4" in github and "::error file=a.py,line=2" in github
    gitlab = {i["check_name"]: i["severity"] for i in json.loads(_check(mixed, "gitlab", monkeypatch))}
    assert gitlab == {"NPU910": "critical", "NPU934": "critical", "NPU916": "info", "NPU404": "major"}


def test_migrate_outputs_carry_severity(mixed, tmp_path):
    report_path, csv_dir = tmp_path / "report.md", tmp_path / "csv"
    result = CliRunner().invoke(
        main, ["migrate", str(mixed), "--dry-run", "--no-cache", "--isolated", "--allow-dirty", "-j", "1",
               "--report", str(report_path), "--report-csv", str(csv_dir)],
        catch_exceptions=False,
    )
    assert result.exit_code in (0, 1), result.output
    assert "NPU916 vLLM runs on Ascend through the vllm-ascend plugin: import from `vllm` [info]" in result.stdout
    report = report_path.read_text()
    assert "### Severity" in report and "reported (info):" in report
    with open(csv_dir / "unsupported_api.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["Code"]: r["Severity"] for r in rows} == {
        "NPU910": "error", "NPU934": "error", "NPU916": "info", "NPU404": "warning"}


def test_rule_listings_show_severity():
    listed = {r["code"]: r["severity"] for r in json.loads(rules_text("json"))}
    assert listed == {code: rule.severity for code, rule in catalogue.rules().items()}
    assert rules_text("markdown").startswith("| code | name | action | severity | effort | summary |")
    assert "NPU916  reports   info     vllm" in rules_text("text")
    docs = (REPO / "docs" / "rules.md").read_text(encoding="utf-8")
    assert "| NPU916 | vllm | reports | info |" in docs
