"""Issue #16: false and redundant findings in text files (YAML recipes, CI workflows, CUDA sources).

Shapes found by manual audits of real packages, each reproduced with a small fixture of our own:
- shell snippets in Markdown documentation inside a YAML block scalar (`guide: |`): under a
  heading that names another accelerator they are skipped (a named skipped scope), elsewhere they
  are info ("documentation example");
- a GitHub Actions job on GPU runners (`runs-on: group: aws-g5-...`): one info finding per job,
  never a separate NPU709 error for the container's `--gpus` next to its CUDA image;
- a YAML sequence or mapping that already names the NPU next to CUDA (`matrix: include:
  [{device: cuda}, {device: npu-a2}]`): NPU991 info, like the Python platform-aware scopes;
- a `.cuh` header in a folder that has a `.cu` of its own: named in that file's NPU912.
Each test also checks that the nearby true case is still reported as before.
"""

from __future__ import annotations

from pathlib import Path

from npu_migrate import catalogue
from npu_migrate.model import Options
from npu_migrate.textfiles import scan_text_file

from .precision_helpers import migrate_json as _migrate_json

ALL = Options(enabled=set(catalogue.rules()))


def _scan(relpath: str, text: str):
    return scan_text_file(text.encode(), relpath, ALL)


def _by_code(result) -> dict[str, list]:
    out: dict[str, list] = {}
    for finding in result.findings:
        out.setdefault(finding.code, []).append(finding)
    return out




def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "project"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


# ------------------------------------------------------------------------------------------------
# 1. Markdown documentation in a YAML block scalar

RECIPE = """\
model:
  name: tiny-model
guide: |
  ## Overview

  How to serve **tiny-model**, see [the docs](https://example.org/docs).

  ### Docker (NVIDIA)
  ```bash
  docker run --gpus all --ipc=host example/server:latest
  ```

  ### 8xH100 (TP=8)
  ```bash
  export CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7
  example-serve tiny-model --tp 8
  ```

  ### AMD ROCm (MI300X)
  ```bash
  export CUDA_VISIBLE_DEVICES=0,1
  ```

  ### Data parallel (DP=2)
  ```bash
  export CUDA_VISIBLE_DEVICES=0,1
  example-serve tiny-model --dp 2
  ```
deploy:
  env:
    CUDA_VISIBLE_DEVICES: "0"
"""


def _line(text: str, needle: str, nth: int = 1) -> int:
    lines = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    return lines[nth - 1]


def test_markdown_guide_snippets_under_other_vendor_headings_are_skipped_and_named():
    result = _scan("recipes/tiny.yaml", RECIPE)
    codes = _by_code(result)
    # `--gpus all` under `### Docker (NVIDIA)`: a documentation example for NVIDIA hardware
    assert "NPU709" not in codes
    reasons = [reason for _first, _last, reason in result.skipped_scopes]
    assert any("Docker (NVIDIA)" in r for r in reasons)
    assert any("8xH100" in r for r in reasons) and any("MI300X" in r for r in reasons)
    docker = next(s for s in result.skipped_scopes if "Docker (NVIDIA)" in s[2])
    assert docker[0] == _line(RECIPE, "### Docker (NVIDIA)") and docker[1] < _line(RECIPE, "### 8xH100")
    # the hardware-neutral snippet: info, anchored on its own line, with the reason in the message
    docs = [f for f in codes["NPU701"] if f.severity == "info"]
    assert [f.line for f in docs] == [_line(RECIPE, "export CUDA_VISIBLE_DEVICES=0,1", 3)]
    assert "documentation example" in docs[0].message
    # nearby true case: the configuration outside the guide is still a warning
    config = [f for f in codes["NPU701"] if f.severity == "warning"]
    assert [f.line for f in config] == [_line(RECIPE, 'CUDA_VISIBLE_DEVICES: "0"')]


def test_json_names_the_skipped_documentation_sections(tmp_path):
    root = _project(tmp_path, {"recipes/tiny.yaml": RECIPE})
    report = _migrate_json(root)
    scopes = [e for e in report["skipped"] if e["path"] == "recipes/tiny.yaml"]
    assert any("Docker (NVIDIA)" in e["reason"] and e["start_line"] == _line(RECIPE, "### Docker (NVIDIA)")
               for e in scopes)
    found = [(f["code"], f["line"], f["severity"]) for f in report["findings"] if f["path"] == "recipes/tiny.yaml"]
    assert ("NPU701", _line(RECIPE, 'CUDA_VISIBLE_DEVICES: "0"'), "warning") in found
    assert not any(code == "NPU709" for code, _line_, _sev in found)


def test_a_shell_run_block_is_not_documentation():
    # a CI step's `run: |` script with `#` comments is a script, not Markdown: still reported
    text = """\
jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      - name: run
        run: |
          # Run the tests
          ## on the first device
          export CUDA_VISIBLE_DEVICES=0
          pytest tests
"""
    result = _scan(".github/workflows/test.yml", text)
    assert [(f.code, f.severity) for f in result.findings] == [("NPU701", "warning")]
    assert result.skipped_scopes == []


def test_a_heading_naming_the_npu_is_not_another_vendors():
    text = """\
guide: |
  ### NVIDIA and Ascend NPU
  ```bash
  docker run --gpus all example/server
  ```
"""
    result = _scan("recipes/both.yaml", text)
    assert [(f.code, f.severity) for f in result.findings] == [("NPU709", "info")]
    assert result.skipped_scopes == []


def test_a_model_name_with_active_parameters_is_not_a_gpu_heading():
    text = """\
guide: |
  ### Qwen3-30B-A3B and Qwen3-235B-A22B
  ```bash
  export CUDA_VISIBLE_DEVICES=0,1
  ```
"""
    result = _scan("recipes/moe.yaml", text)
    assert [(f.code, f.severity) for f in result.findings] == [("NPU701", "info")]


# ------------------------------------------------------------------------------------------------
# 2. CI workflows pinned to NVIDIA runners

GPU_WORKFLOW = """\
name: gpu examples
on: [push]
jobs:
  lint:
    uses: ./.github/workflows/lint.yml
  examples:
    runs-on:
      group: aws-g5-4xlarge-plus
    container:
      image: nvidia/cuda:12.4.1-devel-ubuntu22.04
      options: --gpus 0
    steps:
      - run: nvidia-smi
  packaging:
    runs-on: ubuntu-latest
    container:
      image: nvidia/cuda:12.4.1-devel-ubuntu22.04
      options: --gpus all
    steps:
      - run: nvidia-smi
"""


def test_a_job_on_gpu_runners_is_one_info_finding():
    result = _scan(".github/workflows/examples.yml", GPU_WORKFLOW)
    gpu_job = [f for f in result.findings if f.line < _line(GPU_WORKFLOW, "packaging:")]
    assert len(gpu_job) == 1
    (finding,) = gpu_job
    assert (finding.code, finding.severity, finding.line) == ("NPU707", "info", _line(GPU_WORKFLOW, "image:"))
    assert "(a CI job on NVIDIA runners: `examples`, `runs-on: group: aws-g5-4xlarge-plus`" in finding.message
    assert "an Ascend job would be a new job" in finding.message
    assert "NPU709 at line" in finding.message and "NPU704 at line" in finding.message
    # nearby true case: the job on a CPU runner keeps its errors, but the container's `--gpus`
    # is part of its image's finding, not a second error
    other = [f for f in result.findings if f.line > _line(GPU_WORKFLOW, "packaging:")]
    assert sorted((f.code, f.severity) for f in other) == [("NPU704", "error"), ("NPU707", "error")]
    image = next(f for f in other if f.code == "NPU707")
    assert "--gpus all" in image.message


def test_runs_on_read_through_the_matrix():
    text = """\
jobs:
  tests:
    strategy:
      matrix:
        os:
          - "linux-x86_64-gpu-2"
    runs-on: ${{ matrix.os }}
    steps:
      - run: nvidia-smi
  cpu:
    strategy:
      matrix:
        os: [ubuntu-latest]
    runs-on: ${{ matrix.os }}
    steps:
      - run: nvidia-smi
"""
    result = _scan(".github/workflows/tests.yml", text)
    assert [(f.code, f.severity, f.line) for f in result.findings] == [
        ("NPU704", "info", 9), ("NPU704", "error", 16)]


def test_gpu_runner_outside_a_workflow_folder_is_not_a_ci_job():
    # the same text in a config that is not a GitHub workflow keeps its findings
    result = _scan("deploy/examples.yml", GPU_WORKFLOW)
    assert {f.severity for f in result.findings} == {"error"}


# ------------------------------------------------------------------------------------------------
# 3. Platform-aware YAML sequences and mappings

def test_matrix_entries_that_name_npu_make_the_cuda_entry_npu991():
    text = """\
jobs:
  build:
    strategy:
      matrix:
        include:
          - device: "cuda"
          - device: "npu-a2"
          - device: "npu-a3"
    runs-on: ubuntu-latest
    steps:
      - run: echo build
"""
    result = _scan(".github/workflows/docker.yml", text)
    assert [(f.code, f.severity, f.line) for f in result.findings] == [("NPU991", "info", 6)]
    assert "npu-a2" in result.findings[0].message and "NPU706" in result.findings[0].message
    assert any("platform-aware" in reason for _f, _l, reason in result.skipped_scopes)


def test_mapping_with_an_npu_sibling_is_platform_aware():
    text = """\
targets:
  cuda:
    device: cuda
  npu:
    device: npu
"""
    result = _scan("configs/targets.yaml", text)
    assert [(f.code, f.severity) for f in result.findings] == [("NPU991", "info")]


def test_a_recipe_config_device_cuda_stays_an_error():
    # torchtune-like recipe: device is a plain top-level key; nothing beside it names the NPU
    text = """\
output_dir: /tmp/out
model:
  _component_: models.tiny
device: cuda
dtype: bf16
optimizer:
  lr: 2e-5
"""
    result = _scan("recipes/configs/tiny/full.yaml", text)
    assert [(f.code, f.severity, f.line) for f in result.findings] == [("NPU706", "error", 4)]


def test_a_sequence_whose_other_entries_are_cpu_is_still_reported():
    text = """\
runs:
  - device: cuda
    name: gpu
  - device: cpu
    name: npu-free
"""
    result = _scan("configs/runs.yaml", text)
    assert [(f.code, f.severity) for f in result.findings] == [("NPU706", "error")]


# ------------------------------------------------------------------------------------------------
# 4. A CUDA header next to its .cu


def test_header_beside_a_cu_is_named_in_its_finding(tmp_path):
    root = _project(tmp_path, {
        "kernels/embed/embed.cuh": "#pragma once\n__device__ int f();\n",
        "kernels/embed/embed_cuda.cu": "#include \"embed.cuh\"\n__global__ void k() {}\n",
        "kernels/include/common.cuh": "#pragma once\n__device__ int g();\n",
    })
    report = _migrate_json(root)
    npu912 = {f["path"]: f for f in report["findings"] if f["code"] == "NPU912"}
    assert "kernels/embed/embed.cuh" not in npu912
    assert "embed.cuh" in npu912["kernels/embed/embed_cuda.cu"]["message"]
    # nearby true case: a folder of headers with no .cu keeps its own finding
    assert "kernels/include/common.cuh" in npu912
    assert npu912["kernels/include/common.cuh"]["severity"] == "error"


def test_a_run_block_writing_markdown_is_still_a_script():
    text = """\
jobs:
  report:
    runs-on: ubuntu-latest
    steps:
      - run: |
          cat >> "$GITHUB_STEP_SUMMARY" <<'EOF'
          ## Results
          ```
          done
          ```
          EOF
          nvidia-smi
"""
    result = _scan(".github/workflows/report.yml", text)
    assert [(f.code, f.severity) for f in result.findings] == [("NPU704", "error")]


def test_a_matrix_of_gpu_and_npu_runners_is_not_a_cuda_ci_job():
    text = """\
jobs:
  tests:
    strategy:
      matrix:
        runner: [linux-gpu-1, linux-aarch64-npu-1]
    runs-on: ${{ matrix.runner }}
    steps:
      - run: nvidia-smi
"""
    result = _scan(".github/workflows/tests.yml", text)
    assert [(f.code, f.severity) for f in result.findings] == [("NPU704", "error")]
