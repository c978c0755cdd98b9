"""The shipped pre-commit hooks, run by the real `pre-commit` in a throw-away git repository.

The hooks are read from this checkout's `.pre-commit-hooks.yaml` and installed as `repo: local`
hooks with `language: system` and the entry pointed at this interpreter's npu-migrate: the same
ids, entries, arguments, file types and serial flag, without pre-commit building an environment
from the network (the shipped `language: python` does that for real users).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
HOOKS_FILE = REPO / ".pre-commit-hooks.yaml"
PROJECTS = REPO / "fixtures" / "projects"

pytestmark = pytest.mark.integration


def _pre_commit() -> str:
    exe = shutil.which("pre-commit") or str(Path(sys.executable).with_name("pre-commit"))
    if not Path(exe).exists():
        pytest.skip("pre-commit is not installed (pip install -e '.[test]')")
    return exe


def shipped_hooks() -> dict[str, dict]:
    return {h["id"]: h for h in yaml.safe_load(HOOKS_FILE.read_text())}


def local_config(*ids: str) -> str:
    hooks = []
    for hook_id in ids:
        hook = dict(shipped_hooks()[hook_id])
        argv = shlex.split(hook["entry"])
        assert argv[0] == "npu-migrate"
        hook["entry"] = shlex.join([sys.executable, "-m", "npu_migrate", *argv[1:]])
        hook["language"] = "system"
        hooks.append(hook)
    return yaml.safe_dump({"repos": [{"repo": "local", "hooks": hooks}]}, sort_keys=False)


def env(tmp_path: Path) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PRE_COMMIT"))}
    e["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-home")
    e["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{e.get('PATH', '')}"
    e["PYTHONWARNINGS"] = "ignore"
    return e


def run(cwd: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=cwd, env=env(tmp_path), capture_output=True, text=True, timeout=300)


def git(cwd, tmp_path, *args) -> subprocess.CompletedProcess:
    proc = run(cwd, tmp_path, "git", *args)
    return proc


def test_shipped_hooks_file():
    hooks = shipped_hooks()
    assert set(hooks) == {"npu-migrate-check", "npu-migrate-fix"}
    assert hooks["npu-migrate-check"]["entry"] == "npu-migrate check"
    assert hooks["npu-migrate-fix"]["entry"] == "npu-migrate check --fix"
    for hook in hooks.values():
        # the files `check .` reads (tests/test_cli_style.py compares them with the discovery)
        assert "types_or" not in hook and "types" not in hook
        assert hook["files"] and hook["exclude"]
        assert hook["language"] == "python"
    assert hooks["npu-migrate-fix"]["require_serial"] is True


@pytest.fixture
def repo(tmp_path):
    """A migrated copy of flatquant_mini (it keeps two report-only findings) in a git repository,
    with `baseline` in [tool.npu-migrate] written right after migration, hooks installed."""
    pre_commit = _pre_commit()
    root = tmp_path / "repo"
    shutil.copytree(PROJECTS / "flatquant_mini", root)
    migrated = run(root, tmp_path, sys.executable, "-m", "npu_migrate", ".", "-q")
    assert migrated.returncode == 1, migrated.stderr  # the report-only findings remain
    (root / "pyproject.toml").write_text('[tool.npu-migrate]\nbaseline = ".npu-migrate-baseline.json"\n')
    wrote = run(root, tmp_path, sys.executable, "-m", "npu_migrate", "check", ".",
                "--write-baseline", ".npu-migrate-baseline.json")
    assert wrote.returncode == 0, wrote.stderr
    for args in (("init", "-q", "-b", "main"), ("config", "user.email", "t@example.com"),
                 ("config", "user.name", "t"), ("config", "commit.gpgsign", "false")):
        assert git(root, tmp_path, *args).returncode == 0
    (root / ".pre-commit-config.yaml").write_text(local_config("npu-migrate-check"))
    installed = run(root, tmp_path, pre_commit, "install")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    git(root, tmp_path, "add", "-A")
    first = git(root, tmp_path, "commit", "-q", "-m", "migrated")
    # the whole migrated project goes through the check hook: it passes, thanks to the baseline
    assert first.returncode == 0, first.stdout + first.stderr
    return root


def test_commit_with_a_new_cuda_call_is_refused_then_fixed(repo, tmp_path):
    target = repo / "flatquant_mini" / "model_tools.py"  # holds a baselined finding (NPU930)
    target.write_text(target.read_text() + "\n\ndef _sync():\n    torch.cuda.synchronize()\n")
    line = target.read_text().count("\n")
    git(repo, tmp_path, "add", "flatquant_mini/model_tools.py")
    refused = git(repo, tmp_path, "commit", "-m", "new cuda call")
    out = refused.stdout + refused.stderr
    assert refused.returncode != 0, out
    assert "npu-migrate check" in out and "Failed" in out
    findings = [line for line in out.splitlines() if ": NPU" in line]
    assert findings == [f"flatquant_mini/model_tools.py:{line}:5: NPU201 [*] `torch.cuda.synchronize`: "
                        "can be rewritten to `npu_compat.synchronize` (torch.npu offers the same) [error]"], out
    assert "Found 1 new finding" in out and "accepted by the baseline" in out

    # the fix hook rewrites the staged file (and fails the commit, as pre-commit does for
    # modified files); after staging the rewrite, the check passes and the commit goes in
    (repo / ".pre-commit-config.yaml").write_text(local_config("npu-migrate-fix", "npu-migrate-check"))
    git(repo, tmp_path, "add", ".pre-commit-config.yaml")
    fixed = git(repo, tmp_path, "commit", "-m", "new cuda call")
    out = fixed.stdout + fixed.stderr
    assert fixed.returncode != 0
    assert "files were modified by this hook" in out, out
    new_text = target.read_text()
    assert "npu_compat.synchronize()" in new_text and "torch.cuda.synchronize()" not in new_text
    assert not (repo / "flatquant_mini" / "npu_compat").exists()  # the shim stays at the root
    git(repo, tmp_path, "add", "-A")
    done = git(repo, tmp_path, "commit", "-m", "new cuda call")
    assert done.returncode == 0, done.stdout + done.stderr


def test_new_file_with_a_cuda_call_in_a_fresh_repo(tmp_path):
    """No baseline, no shim yet: check refuses, fix rewrites and creates the shim at the root."""
    pre_commit = _pre_commit()
    root = tmp_path / "repo"
    (root / "tools").mkdir(parents=True)
    for args in (("init", "-q", "-b", "main"), ("config", "user.email", "t@example.com"),
                 ("config", "user.name", "t"), ("config", "commit.gpgsign", "false")):
        git(root, tmp_path, *args)
    (root / ".pre-commit-config.yaml").write_text(local_config("npu-migrate-check"))
    assert run(root, tmp_path, pre_commit, "install").returncode == 0
    (root / "tools" / "x.py").write_text("import torch\n\nif __name__ == '__main__':\n    torch.cuda.synchronize()\n")
    git(root, tmp_path, "add", "-A")
    refused = git(root, tmp_path, "commit", "-m", "x")
    out = refused.stdout + refused.stderr
    assert refused.returncode != 0
    assert "tools/x.py:4:5: NPU201" in out, out
    (root / ".pre-commit-config.yaml").write_text(local_config("npu-migrate-fix"))
    git(root, tmp_path, "add", "-A")
    fixed = git(root, tmp_path, "commit", "-m", "x")
    assert fixed.returncode != 0
    assert "npu_compat.synchronize()" in (root / "tools" / "x.py").read_text()
    assert (root / "npu_compat" / "__init__.py").is_file()
    git(root, tmp_path, "add", "-A")
    done = git(root, tmp_path, "commit", "-m", "x")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sys.path.append" in (root / "tools" / "x.py").read_text()  # script bootstrap to the root
    compile((root / "tools" / "x.py").read_text(), "x.py", "exec")


def test_readme_repo_local_recipe(tmp_path):
    """The README's `repo: local` recipe (for today, before a release), as written: the shipped
    check hook's entry and files, run by the real pre-commit with the npu-migrate on PATH; a
    clean file passes, a new CUDA call fails."""
    import re

    pre_commit = _pre_commit()
    if not (Path(sys.executable).parent / "npu-migrate").exists():
        pytest.skip("the npu-migrate command is not installed next to this interpreter")
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("### pre-commit"):]
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.S)
    recipe = next(block for block in blocks if "repo: local" in block)
    config = yaml.safe_load(recipe)
    (hook,) = config["repos"][0]["hooks"]
    shipped = shipped_hooks()[hook["id"]]
    assert hook["language"] == "system"
    for key in ("entry", "files", "exclude", "types", "types_or"):
        assert hook.get(key) == shipped.get(key), f"README's recipe differs from .pre-commit-hooks.yaml: {key}"

    root = tmp_path / "repo"
    root.mkdir()
    for args in (("init", "-q", "-b", "main"), ("config", "user.email", "t@example.com"),
                 ("config", "user.name", "t"), ("config", "commit.gpgsign", "false")):
        assert git(root, tmp_path, *args).returncode == 0
    (root / ".pre-commit-config.yaml").write_text(recipe)
    (root / "clean.py").write_text("import torch\n\nx = torch.ones(2, device='cpu')\n")
    git(root, tmp_path, "add", "-A")
    passed = run(root, tmp_path, pre_commit, "run", "--all-files")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert re.search(r"^npu-migrate check\.+Passed$", passed.stdout, re.M), passed.stdout

    (root / "train.py").write_text("import torch\n\ntorch.cuda.synchronize()\n")
    git(root, tmp_path, "add", "-A")
    failed = run(root, tmp_path, pre_commit, "run", "--all-files")
    out = failed.stdout + failed.stderr
    assert failed.returncode == 1, out
    assert re.search(r"^npu-migrate check\.+Failed$", failed.stdout, re.M), out
    assert "train.py:3:1: NPU201" in out, out
