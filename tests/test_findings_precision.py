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
import re
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
        ("csrc/kernel.cu", "NPU912"): 1,  # names csrc/other.cuh, the header beside it
        # csrc/vendor/*.cuh: a vendored library's headers, skipped and named (below)
        ("model/kernels.py", "NPU910"): 1,  # three Triton imports and two kernels (unguarded: said there)
        ("model/kernels.py", "NPU902"): 1,
        ("model/kernels.py", "NPU913"): 1,
        ("model/kernels.py", "NPU915"): 1,
        ("model/kernels.py", "NPU911"): 1,  # the .cu JIT build, not the C++ one
        ("model/serve.py", "NPU916"): 1,  # four vLLM import lines
        ("scripts/setup_env.sh", "NPU708"): 2,  # flash-attn (twice) and xformers; not vllm
        ("setup.py", "NPU911"): 1,  # CUDAExtension, imported and used
    })
    # 36 report-only findings before issue #16 (11 false, 11 redundant); 10 now, none of either kind
    # (the two NPU934 on the lines of the Triton and apex imports are now part of those findings;
    # the header beside kernel.cu is part of its finding)
    assert len(_reported(research)) == 10


def test_research_repo_lists_the_other_lines(research):
    by_key = {(f["path"], f["code"], ""): f for f in _reported(research)}
    triton = by_key[("model/kernels.py", "NPU910", "")]
    assert (triton["line"], triton["column"]) == (3, 1)
    assert triton["message"].endswith("(also at lines 4, 5, 11, 16)")
    assert "imported unguarded at module level" in triton["message"]
    apex = by_key[("model/kernels.py", "NPU902", "")]
    assert "imported unguarded at module level" in apex["message"] and apex["message"].endswith("(also at line 7)")
    assert by_key[("model/serve.py", "NPU916", "")]["message"].endswith("(also at lines 5, 6, 7)")
    skipped = {s["path"]: s["reason"] for s in research["skipped"]}
    for name in ("block_reduce.cuh", "device_load.cuh", "warp_scan.cuh"):
        assert skipped[f"csrc/vendor/{name}"] == "vendored CUDA source (in a vendor folder)"


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
    root = _project(tmp_path, {"a.py": body, "b.py": body.replace("def k", "def k2")})
    found = Counter((f["path"], f["code"]) for f in _reported(_migrate_json(root)))
    assert found == Counter({("a.py", "NPU910"): 1, ("b.py", "NPU910"): 1})


def test_byte_identical_files_report_once_and_keep_their_rewrites(tmp_path):
    body = "import torch\nimport triton\n\nx = torch.zeros(2).cuda()\n"
    report = _migrate_json(_project(tmp_path, {"op_builder/a.py": body, "pkg/op_builder/a.py": body}))
    found = [(f["path"], f["code"]) for f in _reported(report)]
    assert found == [("op_builder/a.py", "NPU910")]
    assert "(byte-identical copy: `pkg/op_builder/a.py`)" in _reported(report)[0]["message"]
    rewritten = sorted(f["path"] for f in report["findings"] if f["fixable"])
    assert rewritten == ["op_builder/a.py", "pkg/op_builder/a.py"]  # both copies run: both migrated


def test_a_projects_own_ecosystem_imports_are_the_project(tmp_path):
    """Migrating vLLM or DeepSpeed itself: `import vllm.utils` in vLLM is the project, not a
    dependency on vLLM (4,459 NPU916 on vLLM's own tree before); the same import in another
    project is still reported, and CUDA-only code in the project (Triton) still is."""
    own = "import vllm.envs as envs\nfrom vllm.utils import cdiv\nimport deepspeed\n" \
          "from deepspeed.ops.transformer import DeepSpeedTransformerLayer\n" \
          "layer = deepspeed.ops.transformer.DeepSpeedTransformerLayer\nimport triton\n"
    for package, other_code in (("vllm", "NPU917"), ("deepspeed", "NPU916")):
        root = _project(tmp_path / package, {f"{package}/__init__.py": "", f"{package}/core.py": own})
        found = Counter((f["path"], f["code"]) for f in _reported(_migrate_json(root)))
        assert found == Counter({(f"{package}/core.py", other_code): 1, (f"{package}/core.py", "NPU910"): 1}), package
    other = _project(tmp_path / "other", {"app.py": own})
    codes = {f["code"] for f in _reported(_migrate_json(other))}
    assert {"NPU916", "NPU917", "NPU910"} <= codes


def test_a_package_per_finding_for_unguarded_imports(tmp_path):
    root = _project(tmp_path, {"a.py": "import xformers\nimport bitsandbytes\nimport xformers.ops\n"})
    found = _reported(_migrate_json(root))
    assert [(f["line"], f["code"]) for f in found] == [(1, "NPU915"), (2, "NPU914")]  # no NPU934 beside them
    assert all("imported unguarded at module level" in f["message"] for f in found)
    assert found[0]["message"].endswith("(also at line 3)")


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
        "csrc/include/a.cuh": "#pragma once\n",
        "csrc/include/b.cuh": "#pragma once\n",
        "csrc/include/c.cuh": "#pragma once\n",
        "csrc/kernels/block.cuh": "#pragma once\n// block\n",
        "csrc/kernels/block.cu": "__global__ void k() {}\n",
        "csrc/kernels/d.cu": "__global__ void d() {}\n",  # (byte-identical .cu files are one finding)
        "include/lone.cuh": "#pragma once\n// lone\n",
    })
    reported = _reported(_migrate_json(root))
    found = sorted((f["path"], f["code"]) for f in reported)
    assert found == [
        ("csrc/include/a.cuh", "NPU912"),  # for a.cuh, b.cuh and c.cuh
        ("csrc/kernels/block.cu", "NPU912"),  # a translation unit each; names block.cuh beside it
        ("csrc/kernels/d.cu", "NPU912"),
        ("include/lone.cuh", "NPU912"),
    ]
    assert "block.cuh" in next(f["message"] for f in reported if f["path"] == "csrc/kernels/block.cu")


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
    """One error (NPU910, which also says the import is unguarded), one info (NPU916), one warning (NPU404)."""
    return _project(tmp_path, {"a.py": "import torch\nimport triton\nfrom vllm import LLM\n"
                                       "torch.backends.cudnn.enabled = False\n"})


def test_text_and_json_formats(mixed, monkeypatch):
    text = _check(mixed, "text", monkeypatch)
    assert "a.py:3:1: NPU916 vLLM runs on Ascend through the vllm-ascend plugin: import from `vllm` [info]" in text
    assert "imported unguarded" in text and "[error]" in text and "[warning]" in text
    findings = json.loads(_check(mixed, "json", monkeypatch))["findings"]
    assert {f["code"]: f["severity"] for f in findings} == {
        "NPU910": "error", "NPU916": "info", "NPU404": "warning"}
    rows = json.loads(_check(mixed, "json", monkeypatch, "--statistics"))
    assert {r["code"]: r["severity"] for r in rows}["NPU916"] == "info"


def test_sarif_github_and_gitlab_levels(mixed, monkeypatch):
    sarif = json.loads(_check(mixed, "sarif", monkeypatch))["runs"][0]
    levels = {r["ruleId"]: r["level"] for r in sarif["results"]}
    assert levels == {"NPU910": "error", "NPU916": "note", "NPU404": "warning"}
    rules = {r["id"]: r["defaultConfiguration"]["level"] for r in sarif["tool"]["driver"]["rules"]}
    assert rules["NPU916"] == "note" and rules["NPU101"] == "error"
    github = _check(mixed, "github", monkeypatch)
    assert re.search(r"^::notice file=a\.py,line=3,col=1,endLine=3,endColumn=\d+,title=NPU916::", github, re.M)
    assert "::warning file=a.py,line=4" in github and "::error file=a.py,line=2" in github
    gitlab = {i["check_name"]: i["severity"] for i in json.loads(_check(mixed, "gitlab", monkeypatch))}
    assert gitlab == {"NPU910": "critical", "NPU916": "info", "NPU404": "major"}


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
        "NPU910": "error", "NPU916": "info", "NPU404": "warning"}


def test_rule_listings_show_severity():
    listed = {r["code"]: r["severity"] for r in json.loads(rules_text("json"))}
    assert listed == {code: rule.severity for code, rule in catalogue.rules().items()}
    assert rules_text("markdown").startswith("| code | name | action | severity | effort | summary |")
    assert "NPU916  reports   info     vllm" in rules_text("text")
    docs = (REPO / "docs" / "rules.md").read_text(encoding="utf-8")
    assert "| NPU916 | vllm | reports | info |" in docs


# ------------------------------------------------------------------ the manual sample's patterns (ecosystem check)

def _codes_at(tmp_path, files: dict[str, str], path: str = "a.py") -> list[tuple[int, str]]:
    report = _migrate_json(_project(tmp_path, files))
    return sorted((f["line"], f["code"]) for f in _reported(report) if f["path"] == path)


def test_a_triton_kernel_is_one_finding_with_its_cuda_names(tmp_path):
    body = ("try:\n    import triton\n    import triton.language as tl\nexcept ImportError:\n    triton = None\n\n\n"
            "@triton.autotune(configs=[], key=['n'])\n@triton.jit\ndef k(x, n):\n"
            "    y = tl.extra.cuda.libdevice.exp(x)\n    return y\n")
    assert _codes_at(tmp_path, {"a.py": body}) == [(2, "NPU910")]  # the kernel's lines listed in it


def test_fp8_dtype_tests_are_gates_not_uses(tmp_path):
    body = ("import torch\n\n\ndef pick(x):\n"
            "    if x.dtype == torch.float8_e4m3fn:\n        return 1\n"
            "    if x.dtype in (torch.float8_e5m2, torch.float8_e4m3fn):\n        return 2\n"
            "    return x.to(torch.float8_e4m3fn)\n")
    assert _codes_at(tmp_path, {"a.py": body}) == [(9, "NPU913")]


def test_torch_version_cuda_tests_are_not_leftovers(tmp_path):
    body = ("import torch\n\nA = torch.version.cuda is None\nB = 1 if torch.version.cuda else 0\n"
            "if not torch.version.cuda and A:\n    pass\nprint(torch.version.cuda)\n"
            "C = torch.version.cuda >= '12.0'\n")
    # line 7 only prints it (None on an NPU host: runs as written, a named scope since round 9,
    # tests/test_precision_labels5.py); line 8 compares it at import, where it is None on an NPU
    # host: an error of its own (tests/test_precision_gates.py)
    assert _codes_at(tmp_path, {"a.py": body}) == [(8, "NPU990")]


def test_functions_named_like_extensions_are_not_extensions(tmp_path):
    files = {
        "mypkg/__init__.py": "",
        "mypkg/utils.py": "def fused_pad_cuda(x):\n    return x\n",
        "a.py": ("from sglang.srt.utils import is_cuda\nfrom mypkg.utils import fused_pad_cuda\n"
                 "from mamba_ops import selective_scan_cuda\nfrom mypkg import _C\n"),
    }
    found = _codes_at(tmp_path, files)
    assert [line for line, code in found if code == "NPU911"] == [3]  # _C's line listed in it
    report = _migrate_json(_project(tmp_path / "again", files))
    (extension,) = [f for f in _reported(report) if f["code"] == "NPU911"]
    assert "selective_scan_cuda" in extension["message"] and "(also at line 4)" in extension["message"]


# ------------------------------------------------------------------ ecosystem audit (16 packages)
# The report-only findings of /tmp/eco_sample's manual audit that were false or repeated.


def test_script_variables_once_per_file_and_variable(tmp_path):
    # vLLM's Dockerfile used one build ARG on about fifteen lines: one NPU703 per variable
    root = _project(tmp_path, {
        "Dockerfile": "FROM python:3.11\nARG PYTORCH_CUDA_INDEX_BASE_URL\nENV CUDA_HOME=/usr/local/cuda\n"
                      "RUN pip install --extra-index-url ${PYTORCH_CUDA_INDEX_BASE_URL}/cu126 torch\n"
                      "RUN pip install --extra-index-url ${PYTORCH_CUDA_INDEX_BASE_URL}/cu126 vllm\n"
                      "ENV PATH=$CUDA_HOME/bin:$PATH\n",
        "run.sh": "CUDA_VISIBLE_DEVICES=0 python a.py\nCUDA_VISIBLE_DEVICES=0 python b.py\n"
                  "export NCCL_DEBUG=INFO\nexport NCCL_DEBUG=WARN\n",
        "cfg.yaml": "device: cuda\neval:\n  device: cuda\nother:\n  device: cuda:1\n",
    })
    found = [(f["path"], f["code"], f["line"], f["message"]) for f in _reported(_migrate_json(root))
             if f["code"] in ("NPU701", "NPU703", "NPU706")]
    per_key = Counter((path, code, message.split("`")[1]) for path, code, _, message in found)
    assert per_key and all(n == 1 for n in per_key.values()), per_key
    by_name = {(path, message.split("`")[1]): (line, message) for path, _, line, message in found}
    line, message = by_name[("Dockerfile", "PYTORCH_CUDA_INDEX_BASE_URL")]
    assert message.endswith("(also at lines 4, 5)") and line == 2
    assert by_name[("Dockerfile", "CUDA_HOME")][1].endswith("(also at line 6)")
    assert by_name[("run.sh", "NCCL_DEBUG")][1].endswith("(also at line 4)")
    assert by_name[("run.sh", "CUDA_VISIBLE_DEVICES")][1].endswith("(also at line 2)")
    assert by_name[("cfg.yaml", "cuda")] == (1, by_name[("cfg.yaml", "cuda")][1])
    assert by_name[("cfg.yaml", "cuda")][1].endswith("(also at line 3)")
    assert not by_name[("cfg.yaml", "cuda:1")][1].endswith(")")  # another value: its own finding
    for code in ("NPU701", "NPU703", "NPU706"):
        assert catalogue.rule(code).per_file == "message", code


def test_script_rewrites_stay_one_per_line(tmp_path):
    root = _project(tmp_path, {"run.sh": "CUDA_VISIBLE_DEVICES=0 python a.py\nCUDA_VISIBLE_DEVICES=0 python b.py\n"})
    report = _migrate_json(root, "--rewrite-scripts")
    rewrites = [f for f in report["findings"] if f["code"] == "NPU701" and f["fixable"]]
    assert [f["line"] for f in rewrites] == [1, 2]
    assert not any("also at" in f["message"] for f in rewrites)


def test_rocm_sources_are_not_cuda_sources(tmp_path):
    root = _project(tmp_path, {
        "csrc/rocm/attention.cu": "__global__ void k() {}\n",
        "csrc/ROCm/skinny.cuh": "#pragma once\n",
        "kernels/hip/gemm.cu": "__global__ void h() {}\n",
        "third_party/amd/fp8.cu": "__global__ void a() {}\n",
        "csrc/cuda/attention.cu": "__global__ void c() {}\n",
        "csrc/rocm_like/x.cu": "__global__ void x() {}\n",  # a folder only named like one
    })
    found = sorted(f["path"] for f in _reported(_migrate_json(root)) if f["code"] == "NPU912")
    assert found == ["csrc/cuda/attention.cu", "csrc/rocm_like/x.cu"]
    assert "`rocm`, `hip` or `amd`" in catalogue.rule("NPU912").guidance


def test_identical_cuda_sources_are_one_finding(tmp_path):
    kernel = "__global__ void act(float* x) { x[threadIdx.x] *= 2; }\n"
    root = _project(tmp_path, {
        "extensions/csrc/kernel/cuda/activation_kernel.cu": kernel,
        "colossalai/kernel/extensions/csrc/kernel/cuda/activation_kernel.cu": kernel,
        "pkg/copy_of_activation.cu": kernel,
        "extensions/csrc/kernel/cuda/other_kernel.cu": kernel.replace("2", "3"),
    })
    found = {f["path"]: f["message"] for f in _reported(_migrate_json(root)) if f["code"] == "NPU912"}
    assert sorted(found) == ["colossalai/kernel/extensions/csrc/kernel/cuda/activation_kernel.cu",
                             "extensions/csrc/kernel/cuda/other_kernel.cu"]
    assert found["colossalai/kernel/extensions/csrc/kernel/cuda/activation_kernel.cu"].endswith(
        "(byte-identical copies: `extensions/csrc/kernel/cuda/activation_kernel.cu`, `pkg/copy_of_activation.cu`)")
    assert "byte-identical" not in found["extensions/csrc/kernel/cuda/other_kernel.cu"]


def test_torch_cuda_memory_names_resolve_like_torch_cuda(tmp_path):
    root = _project(tmp_path, {"mem.py": (
        "import torch\n\n"
        "snap = torch.cuda.memory.memory_snapshot()\n"
        "pool = torch.cuda.MemPool()\n"
        "with torch.cuda.use_mem_pool(pool):\n"
        "    pass\n"
        "other = torch.cuda.memory.MemPool()\n"
        "torch.cuda.memory._record_memory_history(max_entries=100000)\n"
        "gens = torch.cuda.default_generators\n"
        "alloc = torch.cuda.memory.CUDAPluggableAllocator('a.so', 'alloc', 'free')\n"
    )})
    report = _migrate_json(root)
    by_line = {f["line"]: f for f in report["findings"]}
    for line in (3, 4, 5, 7):
        assert by_line[line]["code"] == "NPU201" and by_line[line]["fixable"], by_line[line]
    assert "npu_compat.memory_snapshot" in by_line[3]["message"]
    assert by_line[8]["code"] == "NPU202"
    assert "torch.npu.memory._record_memory_history" in by_line[8]["message"]
    assert by_line[9]["code"] == "NPU202" and "torch.npu.default_generators" in by_line[9]["message"]
    assert "support list" not in by_line[9]["message"]
    assert by_line[10]["code"] == "NPU202" and "NPUPluggableAllocator" in by_line[10]["message"]
    assert "`torch.cuda.memory.CUDAPluggableAllocator`" in by_line[10]["message"]


def test_shared_names_are_in_torch_npu_2_7_1_and_forwarded_by_the_shim():
    from npu_migrate import npu_api
    from npu_migrate.shim import SHARED_NAMES

    shared = catalogue.cuda_api()["shared"]["names"]
    for name in ("MemPool", "use_mem_pool", "memory_snapshot"):
        assert name in shared, name
    for name in shared:
        if name != "is_available" and name != "device_count":  # shim functions of their own
            assert name in SHARED_NAMES, name
        assert npu_api.has_name(f"torch.npu.{name}", "2.7.1"), name
    for name in ("_record_memory_history", "default_generators"):  # torch_npu's table lacks them
        assert not npu_api.has_name(f"torch.npu.{name}", "2.7.1"), name
        assert name not in shared



def test_cuda_home_tests_are_gates(tmp_path):
    body = ("from torch.utils.cpp_extension import CUDA_HOME\n\n"
            "if CUDA_HOME is None:\n    print('no toolkit')\nHAS = bool(CUDA_HOME) if CUDA_HOME else False\n"
            "nvcc = CUDA_HOME + '/bin/nvcc'\n")
    found = _codes_at(tmp_path, {"a.py": body})
    assert found == [(1, "NPU911")]  # the import, with the use on line 6 listed in it
    report = _migrate_json(_project(tmp_path / "again", {"a.py": body}))
    (finding,) = _reported(report)
    assert "(also at lines 5, 6)" in finding["message"]  # bool(CUDA_HOME) and the path are uses


def test_prose_strings_are_not_leftovers(tmp_path):
    body = ('"""Runs with the nccl backend on GPUs."""\nimport logging\n\n\ndef f(x):\n'
            '    logging.info("cuda")\n    msg = "falls back when nccl is missing"\n'
            '    raise RuntimeError("nccl")\n    return x.to("cuda:1"), "nccl"\n')
    assert _codes_at(tmp_path, {"a.py": body}) == [(9, "NPU990")]  # the returned "nccl" only


def test_a_platform_objects_is_cuda_method_is_left_alone(tmp_path):
    body = "import torch\n\n\ndef f(p, t):\n    return p.is_cuda(), t.is_cuda\n"
    report = _migrate_json(_project(tmp_path, {"a.py": body}))
    assert [(f["line"], f["code"]) for f in report["findings"]] == [(5, "NPU106")]
