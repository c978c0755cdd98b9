"""Where the shim goes and how files import it (placement.py), and one workflow: `npu-migrate`,
`check` and `check --fix` read the same configuration, root and placement, `check` flags no
construct `npu-migrate` wrote, and a file importing a shim the repository does not hold is a
finding (NPU003). The installed-project matrix (wheels, editable installs) is in
test_installed_matrix.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from npu_migrate import placement
from npu_migrate.cli import main
from tests.project_runs import commit_all

REPO = Path(__file__).resolve().parent.parent
PROJECTS = REPO / "fixtures" / "projects"

# the codes this module exercises, for test_golden's "every rule has a reviewed case"
PLACEMENT_FINDINGS = [("NPU003", "report"), ("NPU004", "rewrite")]

SRC_PYPROJECT = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "mypkg"
version = "0.1"
"""


def cli(*args, cwd: Path | None = None, monkeypatch=None):
    if cwd is not None:
        monkeypatch.chdir(cwd)
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def put(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def src_project(root: Path, pyproject: str = SRC_PYPROJECT) -> Path:
    put(root, "pyproject.toml", pyproject)
    put(root, "src/mypkg/__init__.py", "")
    put(root, "src/mypkg/core.py", "import torch\n\n\ndef sync():\n    torch.cuda.synchronize()\n")
    put(root, "src/mypkg/sub/__init__.py", "")
    put(root, "src/mypkg/sub/deep.py",
        "import torch\n\n\ndef dev():\n    return 'cuda' if torch.cuda.is_available() else 'cpu'\n")
    put(root, "scripts/run.py",
        "import torch\n\nif __name__ == '__main__':\n    print(torch.cuda.is_available())\n")
    return root


# ------------------------------------------------------------------------------ placement


def test_packaged_project_gets_the_shim_inside_its_package(tmp_path, monkeypatch):
    root = src_project(tmp_path / "proj")
    result = cli(root, "--no-cache", cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.exit_code == 0, result.output
    assert (root / "src/mypkg/npu_compat/__init__.py").is_file()
    assert not (root / "npu_compat").exists()  # no top-level copy: it would clash between libraries
    core = (root / "src/mypkg/core.py").read_text()
    assert "from mypkg import npu_compat\n" in core and "npu_compat.synchronize()" in core
    deep = (root / "src/mypkg/sub/deep.py").read_text()
    assert "from mypkg import npu_compat\n" in deep  # the top package's shim, at any depth
    script = (root / "scripts/run.py").read_text()
    # a script outside the package: the package's shim, importable from a checkout too
    assert "    from mypkg import npu_compat\nexcept ImportError:" in script
    assert 'os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")' in script
    # the scripts run from the checkout without an install: the bootstrap finds src/
    proc = subprocess.run([sys.executable, str(root / "scripts/run.py")], cwd=tmp_path,
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
    # a second run changes nothing
    before = {p: p.read_bytes() for p in root.rglob("*.py")}
    again = cli(root, "--no-cache", cwd=tmp_path, monkeypatch=monkeypatch)
    assert again.exit_code == 0, again.output
    assert {p: p.read_bytes() for p in root.rglob("*.py")} == before


def test_project_without_packaging_keeps_the_root_shim(tmp_path, monkeypatch):
    root = tmp_path / "research"
    put(root, "pyproject.toml", "[tool.ruff]\nline-length = 100\n")  # tool config only: not packaged
    put(root, "train.py", "import torch\nprint(torch.cuda.is_available())\n")
    put(root, "models/__init__.py", "")
    put(root, "models/net.py", "import torch\n\n\ndef f():\n    torch.cuda.synchronize()\n")
    assert cli(root, "--no-cache", cwd=tmp_path, monkeypatch=monkeypatch).exit_code == 0
    assert (root / "npu_compat/__init__.py").is_file()
    assert re.search(r"^import npu_compat$", (root / "train.py").read_text(), re.M)
    assert re.search(r"^import npu_compat$", (root / "models/net.py").read_text(), re.M)


def test_single_file_is_migrated_against_its_project(tmp_path, monkeypatch):
    """`npu-migrate pkg/util.py` (the hint `check` prints): the shim goes where a run over the
    project would put it, so `import pkg.util` still works."""
    root = tmp_path / "flat"
    put(root, "setup.py", "from setuptools import setup, find_packages\nsetup(name='pkg', packages=find_packages())\n")
    put(root, "pkg/__init__.py", "")
    put(root, "pkg/util.py", "import torch\n\nAVAILABLE = torch.cuda.is_available()\n")
    assert cli(root / "pkg/util.py", "--no-cache", cwd=tmp_path, monkeypatch=monkeypatch).exit_code == 0
    assert (root / "pkg/npu_compat/__init__.py").is_file()
    assert "from pkg import npu_compat\n" in (root / "pkg/util.py").read_text()
    proc = subprocess.run([sys.executable, "-c", "import pkg.util; print(pkg.util.AVAILABLE)"],
                          cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_single_file_in_an_unpackaged_git_repo_uses_the_repository_root(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    put(root, "tools/util.py", "import torch\n\nAVAILABLE = torch.cuda.is_available()\n")
    put(root, "main.py", "from tools.util import AVAILABLE\nprint(AVAILABLE)\n")
    commit_all(root)
    result = cli(root / "tools/util.py", "--no-cache", "--allow-dirty", cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.exit_code == 0, result.output
    assert (root / "npu_compat/__init__.py").is_file()  # not tools/npu_compat
    proc = subprocess.run([sys.executable, "main.py"], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr


def test_explicit_package_list_is_extended_and_shown_in_the_diff(tmp_path, monkeypatch):
    root = tmp_path / "explicit"
    put(root, "pyproject.toml", SRC_PYPROJECT.replace('name = "mypkg"', 'name = "lib"')
        + '\n[tool.setuptools]\npackages = ["lib"]\n')
    put(root, "lib/__init__.py", "import torch\n\nOK = torch.cuda.is_available()\n")
    result = cli(root, "--dry-run", "--no-cache", "--no-color", cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.exit_code == 0, result.output
    assert '+packages = ["lib", "lib.npu_compat"]' in result.output
    assert "would create shim lib/npu_compat/" in result.output
    assert cli(root, "--no-cache", cwd=tmp_path, monkeypatch=monkeypatch).exit_code == 0
    assert 'packages = ["lib", "lib.npu_compat"]' in (root / "pyproject.toml").read_text()


def test_legacy_root_shim_import_is_moved_into_the_package(tmp_path, monkeypatch):
    """NPU004: a file an earlier version migrated (`import npu_compat`, a root shim) in a
    packaged project imports the package's shim after a new run; `check` reports it first."""
    root = src_project(tmp_path / "proj")
    put(root, "src/mypkg/core.py",
        "import torch\n\nimport npu_compat\nfrom npu_compat.flash_attn import flash_attn_func\n\n\n"
        "def sync():\n    npu_compat.synchronize()\n    return flash_attn_func\n")
    result = cli("check", root, "--no-cache", "--output-format", "json", cwd=tmp_path, monkeypatch=monkeypatch)
    codes = [(f["path"], f["code"], f["fixable"]) for f in json.loads(result.stdout)["findings"]]
    assert ("proj/src/mypkg/core.py", "NPU004", True) in codes
    assert cli(root, "--no-cache", cwd=tmp_path, monkeypatch=monkeypatch).exit_code == 0
    core = (root / "src/mypkg/core.py").read_text()
    assert "\nimport npu_compat\n" not in core
    assert "from mypkg import npu_compat\n" in core
    assert "from mypkg.npu_compat.flash_attn import flash_attn_func\n" in core
    compile(core, "core.py", "exec")


def test_shim_spec_bootstrap_rules():
    spec = placement.ShimImport("npu_compat", "mypkg", "src/mypkg", "../..", in_package=True)
    assert spec.module == "mypkg.npu_compat" and spec.folder == "src/mypkg/npu_compat"
    assert spec.bootstrap(is_script=False) == ""  # a package module is imported as one
    assert spec.bootstrap(is_script=True) == "../.."  # `python src/mypkg/x.py`
    script = placement.ShimImport("npu_compat", "mypkg", "src/mypkg", "../src", in_package=False)
    assert script.bootstrap(is_script=False) == "../src"
    assert placement.legacy("npu_compat", "a/b/c.py", False).to_path_root == "../.."


def test_project_root_climbs_out_of_packages_and_into_src_layouts(tmp_path):
    root = src_project(tmp_path / "proj")
    assert placement.project_root(root / "src/mypkg/sub") == root
    assert placement.project_root(root / "scripts") == root / "scripts"  # a named folder stays
    flat = tmp_path / "flat"
    put(flat, "a/__init__.py", "")
    put(flat, "a/b/__init__.py", "")
    assert placement.project_root(flat / "a/b") == flat


# ------------------------------------------------------------------------------ one workflow


@pytest.mark.parametrize("project", sorted(p.name for p in PROJECTS.iterdir() if p.is_dir()))
def test_check_flags_nothing_migrate_wrote(project, tmp_path, monkeypatch):
    """After `npu-migrate` and a commit, `check` reports exactly the report-only findings the
    migration reported: nothing rewritable, nothing about what npu-migrate itself wrote."""
    root = tmp_path / project
    shutil.copytree(PROJECTS / project, root, ignore=shutil.ignore_patterns("__pycache__"))
    migrated = cli(root, "--no-cache", "--output-format", "json", cwd=tmp_path, monkeypatch=monkeypatch)
    assert migrated.exit_code in (0, 1), migrated.output
    reported = sorted((f["path"], f["code"]) for f in json.loads(migrated.stdout)["findings"] if not f["fixable"])
    commit_all(root)
    checked = cli("check", ".", "--no-cache", "--output-format", "json", cwd=root, monkeypatch=monkeypatch)
    findings = json.loads(checked.stdout)["findings"]
    assert not [f for f in findings if f["fixable"]], findings
    assert sorted((f["path"], f["code"]) for f in findings) == reported


def test_migrate_reads_the_projects_configuration(tmp_path, monkeypatch):
    root = tmp_path / "proj"
    put(root, "pyproject.toml", "[tool.npu-migrate]\nignore = [\"NPU201\"]\nexclude = [\"legacy/\"]\n"
        "per-file-ignores = { \"tools/*\" = [\"NPU102\"] }\n")
    put(root, "a.py", "import torch\ntorch.cuda.synchronize()\nx = torch.zeros(1, device='cuda')\n")
    put(root, "legacy/old.py", "import torch\nx = torch.zeros(1, device='cuda')\n")
    put(root, "tools/t.py", "import torch\nx = torch.zeros(1, device='cuda')\n")
    dry = cli(root, "--dry-run", "--no-cache", "--output-format", "json", cwd=tmp_path, monkeypatch=monkeypatch)
    report = json.loads(dry.stdout)
    assert report["changed_files"] == ["a.py"]  # legacy/ excluded, tools/ ignores NPU102
    assert "NPU201" not in report["rewrites_by_code"]
    check = cli("check", root, "--no-cache", "--output-format", "json", cwd=tmp_path, monkeypatch=monkeypatch)
    assert sorted({f["path"] for f in json.loads(check.stdout)["findings"]}) == ["proj/a.py"]
    # a command-line option replaces the key of the configuration, as for check
    again = cli(root, "--dry-run", "--no-cache", "--output-format", "json", "--ignore", "NPU102",
                cwd=tmp_path, monkeypatch=monkeypatch)
    assert json.loads(again.stdout)["rewrites_by_code"] == {"NPU201": 1}


@pytest.mark.parametrize("bad", ['ignore = "NPU9999"', "select = 5", "unknown-key = 1", "[broken"])
def test_migrate_refuses_a_broken_configuration(bad, tmp_path, monkeypatch):
    root = tmp_path / "proj"
    put(root, "pyproject.toml", f"[tool.npu-migrate]\n{bad}\n")
    put(root, "a.py", "import torch\ntorch.cuda.synchronize()\n")
    result = CliRunner().invoke(main, [str(root), "--dry-run", "--no-cache"])
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and "pyproject.toml" in result.output


# ------------------------------------------------------------------------------ NPU003


def _migrated_repo(tmp_path, monkeypatch) -> Path:
    root = src_project(tmp_path / "proj")
    commit_all(root)
    assert cli(root, "--no-cache", cwd=tmp_path, monkeypatch=monkeypatch).exit_code == 0
    return root


def _npu003(root, monkeypatch) -> list[dict]:
    result = cli("check", ".", "--no-cache", "--output-format", "json", cwd=root, monkeypatch=monkeypatch)
    return [f for f in json.loads(result.stdout)["findings"] if f["code"] == "NPU003"]


def test_uncommitted_shim_is_reported(tmp_path, monkeypatch):
    root = _migrated_repo(tmp_path, monkeypatch)
    findings = _npu003(root, monkeypatch)
    assert {f["path"] for f in findings} == {"src/mypkg/core.py", "src/mypkg/sub/deep.py", "scripts/run.py"}
    assert all("not committed to git" in f["message"] and "git add src/mypkg/npu_compat" in f["message"]
               for f in findings)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    assert _npu003(root, monkeypatch) == []  # staged is enough: the commit will hold it


def test_missing_or_incomplete_shim_is_reported(tmp_path, monkeypatch):
    root = _migrated_repo(tmp_path, monkeypatch)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    (root / "src/mypkg/npu_compat/attention.py").unlink()
    findings = _npu003(root, monkeypatch)
    assert findings and all("incomplete (attention.py missing)" in f["message"] for f in findings)
    shutil.rmtree(root / "src/mypkg/npu_compat")
    findings = _npu003(root, monkeypatch)
    assert findings and all("does not exist" in f["message"] for f in findings)
    # line of the import, so an annotation points at it
    core = next(f for f in findings if f["path"] == "src/mypkg/core.py")
    lines = (root / "src/mypkg/core.py").read_text().splitlines()
    assert "npu_compat" in lines[core["line"] - 1]
    # npu-migrate restores it
    assert cli(root, "--no-cache", "--allow-dirty", cwd=tmp_path, monkeypatch=monkeypatch).exit_code == 0
    assert (root / "src/mypkg/npu_compat/attention.py").is_file()


def test_fix_hook_fails_and_says_to_add_the_shim_it_created(tmp_path, monkeypatch):
    root = src_project(tmp_path / "proj")
    commit_all(root)
    monkeypatch.chdir(root)
    result = CliRunner().invoke(main, ["check", "--fix", "--no-cache", "src/mypkg/core.py"])
    assert result.exit_code == 1, result.output
    assert "the shim src/mypkg/npu_compat/ was created: add it to git" in result.stderr
    assert "NPU003" in result.stdout
    assert "from mypkg import npu_compat" in (root / "src/mypkg/core.py").read_text()


# ------------------------------------------------------------------------------ CUDA hosts


def test_grad_scaler_keeps_the_modern_api():
    """torch.amp.GradScaler() -> npu_compat.grad_scaler(): the same warnings as the original on a
    machine without an NPU (no FutureWarning from the deprecated torch.cuda.amp)."""
    import torch

    import npu_migrate.shim as shim  # the template itself (imports torch)

    def categories(make):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            scaler = make()
        return type(scaler), sorted({w.category.__name__ for w in caught})

    assert categories(lambda: shim.grad_scaler(init_scale=8.0)) == categories(lambda: torch.amp.GradScaler(init_scale=8.0))
    kind, seen = categories(lambda: shim.grad_scaler())
    assert kind is torch.amp.GradScaler and "FutureWarning" not in seen
