"""One repository of every kind of file, through the whole CLI: `migrate` and `check` read Python
files, notebooks, launch scripts, configs, Dockerfiles and CUDA sources together, and the run
writes the report, the CSVs and requirements-npu.txt on request (issue #6).

The unit behaviour of each scanner is tested in test_notebook.py, test_textfiles.py and
test_report.py; here the question is whether the pieces are wired: discovery finds the files,
each goes to its own engine, the shim is injected when only a notebook needs it, notebook
findings point at their cell, and the outputs agree with the run's JSON.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from npu_migrate.cli import main

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "fixtures" / "notebooks" / "train_cuda.ipynb"
LAUNCH = REPO / "fixtures" / "textfiles" / "launch.sh"
LAUNCH_REWRITTEN = REPO / "fixtures" / "textfiles" / "expected" / "launch.sh.out"
DOCKERFILE = REPO / "fixtures" / "textfiles" / "Dockerfile"
KERNEL = REPO / "fixtures" / "textfiles" / "kernels" / "fused_add.cu"

TRAIN_PY = "import torch\n\nmodel = torch.nn.Linear(2, 2).cuda()\ntorch.cuda.synchronize()\n"
CONFIG_YAML = "trainer:\n  device: cuda\n  backend: nccl\n"
README = "Run `nvidia-smi` first; CUDA_VISIBLE_DEVICES picks the GPUs.\n"  # not a scanned kind


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "proj"
    (root / "notebooks").mkdir(parents=True)
    (root / "kernels").mkdir()
    (root / "train.py").write_text(TRAIN_PY)
    shutil.copy(NOTEBOOK, root / "notebooks" / "train_cuda.ipynb")
    shutil.copy(LAUNCH, root / "launch.sh")
    shutil.copy(DOCKERFILE, root / "Dockerfile")
    shutil.copy(KERNEL, root / "kernels" / "fused_add.cu")
    (root / "config.yaml").write_text(CONFIG_YAML)
    (root / "README.md").write_text(README)
    (root / "requirements.txt").write_text("torch==2.7.1\nnumpy\n")
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_json(*args) -> tuple[int, dict]:
    result = cli(*args, "--output-format", "json")
    return result.exit_code, json.loads(result.stdout)


def test_dry_run_reads_every_kind_and_writes_nothing(repo):
    before = snapshot(repo)
    code, data = run_json(repo, "--dry-run")
    assert code == 1  # the scripts' and configs' findings are reports
    paths = {f["path"] for f in data["findings"]}
    assert paths == {"train.py", "notebooks/train_cuda.ipynb", "launch.sh", "Dockerfile",
                     "kernels/fused_add.cu", "config.yaml"}
    by_path = {p: {f["code"] for f in data["findings"] if f["path"] == p} for p in paths}
    assert by_path["kernels/fused_add.cu"] == {"NPU912"}
    assert by_path["config.yaml"] == {"NPU705", "NPU706"}
    assert {"NPU101", "NPU201"} <= by_path["train.py"]
    assert "NPU752" in by_path["notebooks/train_cuda.ipynb"]  # `!nvidia-smi` in a cell
    cells = {f["cell"] for f in data["findings"] if f["path"] == "notebooks/train_cuda.ipynb"}
    assert None not in cells and min(cells) >= 1
    assert all(f["cell"] is None for f in data["findings"] if f["path"] != "notebooks/train_cuda.ipynb")
    assert snapshot(repo) == before


def test_write_migrates_notebook_and_reports_scripts_without_the_opt_in(repo):
    launch_before = (repo / "launch.sh").read_bytes()
    result = cli(repo, "--no-color")
    assert result.exit_code == 1, result.output
    notebook = json.loads((repo / "notebooks" / "train_cuda.ipynb").read_text())
    code = "".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")
    assert "npu_compat.synchronize()" in code and "torch.cuda.synchronize" not in code
    assert "sys.path.append" in code  # a notebook in a subfolder gets the bootstrap import
    assert "npu_compat.device()" in (repo / "train.py").read_text()
    assert (repo / "launch.sh").read_bytes() == launch_before  # scripts change only on request
    assert (repo / "npu_compat" / "__init__.py").is_file()
    # a second run changes nothing
    again = snapshot(repo)
    assert cli(repo, "--no-color").exit_code == 1
    assert snapshot(repo) == again


def test_shim_is_injected_when_only_a_notebook_imports_it(tmp_path):
    root = tmp_path / "nb_only"
    root.mkdir()
    shutil.copy(NOTEBOOK, root / "train_cuda.ipynb")
    cli(root, "--no-color")
    assert (root / "npu_compat" / "__init__.py").is_file()
    code = "".join("".join(c["source"]) for c in json.loads((root / "train_cuda.ipynb").read_text())["cells"])
    assert "import npu_compat" in code


def test_rewrite_scripts_opt_in_rewrites_shell_only(repo):
    dockerfile = (repo / "Dockerfile").read_bytes()
    result = cli(repo, "--rewrite-scripts", "--no-color")
    assert result.exit_code == 1
    assert (repo / "launch.sh").read_bytes() == LAUNCH_REWRITTEN.read_bytes()
    assert (repo / "Dockerfile").read_bytes() == dockerfile
    if shutil.which("bash"):
        subprocess.run(["bash", "-n", str(repo / "launch.sh")], check=True)


def test_report_csv_and_requirements_agree_with_the_run(repo, tmp_path):
    out = tmp_path / "out"
    out.mkdir()  # --report writes into an existing folder only
    code, data = run_json(repo, "--dry-run", "--report", out / "report.md", "--report-csv", out / "csv",
                          "--emit-requirements")
    assert code == 1
    report = (out / "report.md").read_text()
    reported = [f for f in data["findings"] if not f["fixable"]]
    rewritten = [f for f in data["findings"] if f["fixable"]]
    assert f"| findings reported (not rewritten) | {len(reported)} |" in report
    assert f"| rewrites | {len(rewritten)} |" in report
    assert "torch_npu==2.7.1" in report  # the pin matching requirements.txt's torch==2.7.1
    with open(out / "csv" / "unsupported_api.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(reported)
    assert {r["File"] for r in rows} == {f["path"] for f in reported}
    with open(out / "csv" / "change_list.csv", newline="") as handle:
        assert len(list(csv.DictReader(handle))) == len(rewritten)
    assert not (repo / "requirements-npu.txt").exists()  # a dry run writes no project file

    html = tmp_path / "report.html"
    assert cli(repo, "--dry-run", "--report", html, "-q").exit_code == 1
    assert html.read_text().lstrip().lower().startswith("<!doctype html>")


def test_emit_requirements_writes_the_pin_and_refuses_a_foreign_file(repo):
    result = cli(repo, "--emit-requirements", "--no-color")
    assert result.exit_code == 1
    text = (repo / "requirements-npu.txt").read_text()
    assert "\ntorch==2.7.1\n" in text and "\ntorch_npu==2.7.1" in text
    (repo / "requirements-npu.txt").write_text("torch_npu==9.9\n")  # the user's own file
    result = cli(repo, "--emit-requirements", "--no-color", "--allow-dirty")
    assert result.exit_code == 2 and "not overwritten" in result.output
    assert (repo / "requirements-npu.txt").read_text() == "torch_npu==9.9\n"


def test_check_points_notebook_findings_at_their_cell_and_json_line(repo):
    nb = repo / "notebooks" / "train_cuda.ipynb"
    text_out = cli("check", nb, "--no-color", "--isolated")
    assert text_out.exit_code == 1
    # the line of the .ipynb file an editor opens, the cell in the message
    assert re.search(r"train_cuda\.ipynb:\d+: NPU752 .*\(cell 6, line 2, column 14\)", text_out.output)
    github = cli("check", nb, "--output-format", "github", "--isolated")
    lines = nb.read_text().splitlines()
    annotations = [line for line in github.output.splitlines() if "title=NPU752" in line]
    assert annotations
    for annotation in annotations:
        line_no = int(annotation.split(",line=")[1].split(",")[0])
        assert "nvidia-smi" in lines[line_no - 1] or "nvcc" in lines[line_no - 1] or "!" in lines[line_no - 1]
        assert ",col=" not in annotation  # a cell column is no column of the JSON line
    sarif = json.loads(cli("check", nb, "--output-format", "sarif", "--isolated").output)
    regions = [r["locations"][0]["physicalLocation"]["region"] for r in sarif["runs"][0]["results"]]
    assert regions and all("startColumn" not in region for region in regions)


def test_doctor_is_a_subcommand(tmp_path):
    result = cli("doctor", "--json")
    data = json.loads(result.stdout)
    assert result.exit_code == data["exit_code"] == 0  # a CPU-only host passes unless --require
    assert {c["name"] for c in data["checks"]} >= {"python", "torch"}
    assert cli("doctor", "--require", "npu", "--json").exit_code == 1


def test_a_folder_git_ignores_is_read_when_named(tmp_path):
    """`npu-migrate check .venv/lib/.../site-packages/pkg`: git lists nothing under an ignored
    folder, so discovery walks it instead of finding no file at all."""
    from tests.project_runs import commit_all

    root = tmp_path / "work"
    (root / "vendored" / "pkg").mkdir(parents=True)
    (root / ".gitignore").write_text("vendored/\n")
    (root / "main.py").write_text("print('hi')\n")
    commit_all(root)
    (root / "vendored" / "pkg" / "mod.py").write_text(TRAIN_PY)
    result = cli("check", root / "vendored" / "pkg", "--output-format", "json", "--isolated")
    data = json.loads(result.stdout)
    assert data["files_checked"] == 1
    assert {f["code"] for f in data["findings"]} >= {"NPU101", "NPU201"}
