"""Safe on hostile repositories: no code of the target runs.

- git (npu_migrate/safegit.py): a repository's configuration can name programs git runs on its
  own (core.fsmonitor, clean filters, textconv and external diff drivers, hooks, remote helpers);
  every git command the tool runs must leave them unrun, while the git-aware behaviour (ignored
  files, the dirty-tree refusal, --diff-base) still works.
- `python -m npu_migrate` run inside a target must not import the target's click.py, rich.py...
  (npu_migrate/__main__.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from npu_migrate import dirty, discover, gitdiff, safegit
from npu_migrate.cli import main

REPO = Path(__file__).resolve().parent.parent

SYNC = "import torch\n\ntorch.cuda.synchronize()\n"  # NPU201: rewritten
LEGACY = "import torch\n\nx = torch.cuda.memory_usage()\n"  # NPU202: reported, never rewritten
EVIL = """#!/bin/sh
echo "$*" >> '{marker}'
exec cat
"""
HOOK_NAMES = ("post-index-change", "pre-auto-gc", "post-checkout", "post-commit", "reference-transaction",
              "fsmonitor-watchman", "pre-commit")

# One hostile configuration per way git can be made to run a program, each appended to
# .git/config ({evil} the marker-touching script, {extra} a second config file, {hooks} a folder
# of hooks). The committed .gitattributes selects driver `evil` for filter and diff everywhere.
VECTORS = {
    "fsmonitor": "[core]\n\tfsmonitor = {evil} fsmonitor\n",
    "include_path": "[include]\n\tpath = {extra}\n",
    "include_if": '[includeIf "gitdir:{gitdir}"]\n\tpath = {extra}\n',
    "filter_clean": '[filter "evil"]\n\tclean = {evil} clean\n\tsmudge = {evil} smudge\n\trequired = true\n',
    "filter_process": '[filter "evil"]\n\tprocess = {evil} process\n\trequired\n',
    "diff_textconv": '[diff "evil"]\n\ttextconv = {evil} textconv\n',
    "diff_command": '[diff "evil"]\n\tcommand = {evil} command\n',
    "diff_external": "[diff]\n\texternal = {evil} external\n",
    "hooks": "[core]\n\thooksPath = {hooks}\n",
    "everything": None,  # all of the above at once
}
EXTRA = "[core]\n\tfsmonitor = {evil} included-fsmonitor\n" \
        '[filter "evil"]\n\tclean = {evil} included-clean\n\tprocess = {evil} included-process\n'


@pytest.fixture(autouse=True)
def _no_git_environment(monkeypatch):
    """Nothing from a surrounding git (a hook's GIT_DIR, GIT_CONFIG_PARAMETERS...) leaks in."""
    for name in list(os.environ):
        if name.startswith("GIT_"):
            monkeypatch.delenv(name)


def plain_git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=check,
                          stdin=subprocess.DEVNULL, timeout=60)


def put(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def age(root: Path) -> None:
    """New modification times, same contents: git must re-hash the files (running clean filters)
    to see that nothing changed."""
    for path in root.rglob("*"):
        if ".git" not in path.relative_to(root).parts and path.is_file():
            os.utime(path, (1_000_000_000, 1_000_000_000))


class Hostile:
    def __init__(self, tmp_path: Path, vectors: list[str]):
        self.marker = tmp_path / "marker"
        self.evil = tmp_path / "bin" / "evil.sh"
        put(tmp_path, "bin/evil.sh", EVIL.format(marker=self.marker)).chmod(0o755)
        hooks = tmp_path / "hooks"
        for name in HOOK_NAMES:
            put(hooks, name, EVIL.format(marker=self.marker)).chmod(0o755)
        self.root = root = tmp_path / "project"
        put(root, "train.py", SYNC)
        put(root, "legacy.py", LEGACY)
        put(root, "ignored.py", SYNC)  # .gitignored: never discovered
        put(root, ".gitignore", "ignored.py\n")
        put(root, ".gitattributes", "* filter=evil diff=evil\n")
        plain_git(root, "init", "-q", "-b", "main")
        plain_git(root, "add", "-A")
        plain_git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init", "--no-verify")
        extra = put(tmp_path, "extra.gitconfig", EXTRA.format(evil=self.evil))
        fill = {"evil": self.evil, "extra": extra, "hooks": hooks, "gitdir": f"{root}/.git"}
        with open(root / ".git" / "config", "a", encoding="utf-8") as config:
            for name in vectors:
                config.write(VECTORS[name].format(**fill))
        for name in HOOK_NAMES:  # the default hooks folder too
            shutil.copy(hooks / name, root / ".git" / "hooks" / name)
        age(root)

    def ran(self) -> str:
        return self.marker.read_text() if self.marker.exists() else ""


def hostile(tmp_path: Path, vector: str) -> Hostile:
    names = [n for n in VECTORS if VECTORS[n] is not None] if vector == "everything" else [vector]
    return Hostile(tmp_path, names)


def cli(*args, cwd: Path, monkeypatch):
    monkeypatch.chdir(cwd)
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def paths(report: dict) -> set[str]:
    return {f["path"] for f in report["findings"]}


# ------------------------------------------------------------ the fixture is hostile

@pytest.mark.parametrize("vector", list(VECTORS))
def test_plain_git_runs_the_hostile_configuration(tmp_path, vector):
    """Without safegit's precautions, the commands the tool runs do run the repository's programs
    (so the tests below prove something)."""
    h = hostile(tmp_path, vector)
    put(h.root, "train.py", SYNC + "# changed\n")
    if vector != "hooks":
        plain_git(h.root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    plain_git(h.root, "status", "--porcelain=v1", "-z", "--untracked-files=all", check=False)
    plain_git(h.root, "diff", "-U0", "--no-color", "-M", "HEAD", "--", check=False)
    assert h.ran(), f"{vector}: the hostile configuration did not run; the fixture proves nothing"


def test_reading_the_configuration_runs_nothing(tmp_path):
    h = hostile(tmp_path, "everything")
    out = plain_git(h.root, "config", "--list", "--null", "--show-origin").stdout
    assert h.ran() == ""
    keys = safegit.parse_config_list(plain_git(h.root, "config", "--list", "--null").stdout.encode())
    assert keys.count("core.fsmonitor") == 3  # .git/config, then extra.gitconfig by include.path and includeIf
    assert "extra.gitconfig" in out  # includes are followed
    assert h.ran() == ""


# ------------------------------------------------------------ the tool, end to end

@pytest.mark.parametrize("vector", list(VECTORS))
def test_runs_in_a_hostile_repository_run_nothing(tmp_path, vector, monkeypatch):
    h = hostile(tmp_path, vector)
    root = h.root

    dry = cli(".", "--dry-run", "--output-format", "json", "--no-color", cwd=root, monkeypatch=monkeypatch)
    assert dry.exit_code == 1, dry.output
    assert paths(json.loads(dry.stdout)) == {"train.py", "legacy.py"}  # not the .gitignored file
    assert h.ran() == "", "--dry-run"

    checked = cli("check", ".", "--output-format", "json", cwd=root, monkeypatch=monkeypatch)
    assert checked.exit_code == 1, checked.output
    assert paths(json.loads(checked.stdout)) == {"train.py", "legacy.py"}
    assert h.ran() == "", "check"

    wrote = cli(".", "--no-color", cwd=root, monkeypatch=monkeypatch)  # a clean tree: no --allow-dirty
    assert wrote.exit_code == 1, wrote.output  # legacy.py's finding remains
    assert "npu_compat" in (root / "train.py").read_text()
    assert (root / "ignored.py").read_text() == SYNC
    assert h.ran() == "", "writing run"

    put(root, "new.py", SYNC)  # untracked: new as a whole
    diff = cli("check", ".", "--diff-base", "HEAD", "--output-format", "json", cwd=root, monkeypatch=monkeypatch)
    assert diff.exit_code == 1, diff.output
    report = json.loads(diff.stdout)
    codes = {(f["path"], f["code"]) for f in report["findings"]}
    assert ("new.py", "NPU201") in codes and "legacy.py" not in paths(report)  # legacy.py's is not new
    assert report["outside_diff"] == 1
    assert h.ran() == "", "check --diff-base"

    refused = cli(".", "--no-color", cwd=root, monkeypatch=monkeypatch)  # train.py has changed
    assert refused.exit_code == 2, refused.output
    assert "uncommitted changes" in refused.stderr and "train.py" in refused.stderr
    assert (root / "new.py").read_text() == SYNC
    assert h.ran() == "", "refused run"

    forced = cli(".", "--no-color", "--allow-dirty", cwd=root, monkeypatch=monkeypatch)
    assert forced.exit_code == 1, forced.output
    assert "npu_compat" in (root / "new.py").read_text()
    assert h.ran() == "", "--allow-dirty run"


def test_python_m_npu_migrate_in_a_hostile_repository(tmp_path):
    """The command as users run it, from inside the target (`.venv/bin/python -m npu_migrate`)."""
    h = hostile(tmp_path, "everything")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO)
    for args in ([".", "--dry-run"], ["check", "."], ["check", ".", "--diff-base", "HEAD"], [".", "--allow-dirty"]):
        proc = subprocess.run([sys.executable, "-m", "npu_migrate", *args], cwd=h.root, env=env,
                              capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        assert proc.returncode in (0, 1), (args, proc.stdout, proc.stderr)
        assert h.ran() == "", args
    assert "npu_compat" in (h.root / "train.py").read_text()


# ------------------------------------------------------------ safegit itself

def test_every_git_call_of_the_tool_is_safe(tmp_path):
    h = hostile(tmp_path, "everything")
    put(h.root, "train.py", SYNC + "# changed\n")
    assert discover._git_files(h.root) == sorted([".gitattributes", ".gitignore", "legacy.py", "train.py"])
    assert gitdiff.toplevel(h.root) == h.root
    assert gitdiff.tracked_files(h.root) == {".gitattributes", ".gitignore", "legacy.py", "train.py"}
    assert gitdiff.changed_lines("HEAD", h.root) == {(h.root / "train.py").resolve(): {4}}
    assert dirty.status(h.root).changed == ["train.py"]
    assert h.ran() == ""


def test_overrides_cover_the_program_keys():
    keys = ["core.fsmonitor", "filter.Evil.clean", "filter..smudge", "filter.evil.process", "filter.evil.required",
            "diff.x.textconv", "diff.x.command", "diff.external", "credential.https://h.example.helper",
            "pager.status", "remote.origin.uploadpack", "protocol.ext.allow", "gpg.ssh.program",
            "user.name", "core.bare", "remote.origin.url", "diff.x.xfuncname", "include.path"]
    got = dict(safegit.overrides(keys))
    assert got == {
        "core.fsmonitor": "", "filter.Evil.clean": "", "filter..smudge": "", "filter.evil.process": "",
        "filter.evil.required": "false", "diff.x.textconv": "", "diff.x.command": "", "diff.external": "",
        "credential.https://h.example.helper": "", "pager.status": "false", "remote.origin.uploadpack": "",
        "protocol.ext.allow": "never", "gpg.ssh.program": "",
    }
    # as written in a config file (section and variable names in any case)
    assert safegit.overrides(["FILTER.evil.Clean"]) == [("FILTER.evil.Clean", "")]
    with pytest.raises(ValueError):
        safegit.git(["commit", "-m", "x"], Path("."))


def test_a_key_that_cannot_be_overridden_stops_git(tmp_path, monkeypatch):
    """`-c` splits at the first `=`: a driver named `a=b` could not be neutralised, so git does
    not run at all (and the run goes on as outside git)."""
    h = hostile(tmp_path, "fsmonitor")
    put(h.root, ".gitattributes", "* filter=a=b\n")
    with open(h.root / ".git" / "config", "a", encoding="utf-8") as config:
        config.write(f'[filter "a=b"]\n\tclean = {h.evil} a=b-clean\n')
    age(h.root)
    plain_git(h.root, "status", check=False)
    assert "a=b-clean" in h.ran()  # git does run it
    h.marker.unlink()
    with pytest.raises(safegit.GitError, match="cannot be overridden"):
        safegit.git(["status", "--porcelain"], h.root)
    assert discover._git_files(h.root) is None
    r = cli(".", "--dry-run", "--output-format", "json", cwd=h.root, monkeypatch=monkeypatch)
    assert r.exit_code == 1, r.output
    assert h.ran() == ""


def test_a_driver_with_an_empty_name(tmp_path):
    """`* filter=` selects the driver named "" (`[filter ""]`, key `filter..clean`)."""
    h = hostile(tmp_path, "fsmonitor")
    put(h.root, ".gitattributes", "* filter=\n")
    plain_git(h.root, "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=", "add", ".gitattributes")
    plain_git(h.root, "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=", "-c", "user.name=t",
              "-c", "user.email=t@t", "commit", "-q", "-m", "empty", "--no-verify")
    with open(h.root / ".git" / "config", "a", encoding="utf-8") as config:
        config.write(f'[filter ""]\n\tclean = {h.evil} empty-name-clean\n')
    age(h.root)
    assert dirty.status(h.root).changed == []
    assert h.ran() == ""
    age(h.root)
    plain_git(h.root, "-c", "core.fsmonitor=", "status", check=False)
    assert "empty-name-clean" in h.ran()  # plain git does run it


def test_a_submodule_configuration_is_not_run(tmp_path):
    """`status` and `diff` do not run `git status` inside submodules, whose configuration (in
    .git/modules/NAME/config) was never read."""
    h = hostile(tmp_path, "fsmonitor")
    sub = tmp_path / "subsrc"
    put(sub, "b.py", "b = 1\n")
    put(sub, ".gitattributes", "* filter=evil2\n")
    plain_git(sub, "init", "-q")
    plain_git(sub, "add", "-A")
    plain_git(sub, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "s")
    safe = ["-c", "core.fsmonitor=", "-c", "core.hooksPath=/dev/null", "-c", "user.name=t", "-c", "user.email=t@t",
            "-c", "protocol.file.allow=always"]
    plain_git(h.root, *safe, "submodule", "add", "-q", str(sub), "sub")
    plain_git(h.root, *safe, "commit", "-q", "-m", "sub", "--no-verify")
    with open(h.root / ".git" / "modules" / "sub" / "config", "a", encoding="utf-8") as config:
        config.write(f'[filter "evil2"]\n\tclean = {h.evil} submodule-clean\n')
    age(h.root)
    assert dirty.status(h.root).changed == []
    gitdiff.changed_lines("HEAD", h.root)
    assert h.ran() == ""
    plain_git(h.root, "-c", "core.fsmonitor=", "status", check=False)
    assert "submodule-clean" in h.ran()  # plain git does run it


def test_a_partial_clone_does_not_fetch(tmp_path):
    """A partial clone fetches missing objects on demand, through a transport the configuration
    chooses (`ext::` runs any command)."""
    src = tmp_path / "src"
    put(src, "a.py", "a = 1\n")
    plain_git(src, "init", "-q")
    plain_git(src, "add", "-A")
    plain_git(src, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "1")
    put(src, "a.py", "a = 2\n")
    plain_git(src, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "2")
    plain_git(src, "config", "uploadpack.allowFilter", "true")
    clone = tmp_path / "clone"
    plain_git(tmp_path, "clone", "-q", "--filter=blob:none", "--no-checkout", f"file://{src}", str(clone))
    marker = tmp_path / "marker"
    plain_git(clone, "config", "remote.origin.url", f"ext::sh -c touch% {marker}")
    plain_git(clone, "config", "protocol.ext.allow", "always")
    plain_git(clone, "read-tree", "HEAD")
    with pytest.raises(safegit.GitError):
        gitdiff.changed_lines("HEAD~1", clone)  # the old a.py is not there, and is not fetched
    assert not marker.exists()
    plain_git(clone, "diff", "HEAD~1", "--", check=False)
    assert marker.exists()  # plain git does fetch


# ------------------------------------------------------------ python -m npu_migrate inside a target

SHADOW = "open({marker!r}, 'a').write('{name}\\n')\nraise ImportError('the target\\'s {name}.py was imported')\n"


def _shadowing_target(tmp_path: Path) -> tuple[Path, Path]:
    target = tmp_path / "target"
    marker = tmp_path / "imported"
    for name in ("click", "rich", "typing", "libcst"):
        put(target, f"{name}.py", SHADOW.format(marker=str(marker), name=name))
    put(target, "train.py", SYNC)
    return target, marker


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GIT_") and k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    env.update(extra)
    return env


def test_python_m_in_a_target_does_not_import_its_modules(tmp_path):
    target, marker = _shadowing_target(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "npu_migrate", ".", "--dry-run"], cwd=target,
                          env=_env(PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=300)
    assert not marker.exists(), marker.read_text()
    assert proc.returncode in (0, 1) and "+npu_compat.synchronize()" in proc.stdout, proc.stderr


def test_console_script_in_a_target_does_not_import_its_modules(tmp_path):
    script = Path(sys.executable).with_name("npu-migrate")
    if not script.is_file():
        pytest.skip("npu-migrate is not installed next to this Python")
    target, marker = _shadowing_target(tmp_path)
    proc = subprocess.run([str(script), ".", "--dry-run"], cwd=target, env=_env(), capture_output=True,
                          text=True, timeout=300)
    assert not marker.exists(), marker.read_text()
    assert proc.returncode in (0, 1) and "+npu_compat.synchronize()" in proc.stdout, proc.stderr


def test_python_m_from_the_tools_own_checkout_still_works():
    proc = subprocess.run([sys.executable, "-m", "npu_migrate", "--version"], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "npu-migrate" in proc.stdout, proc.stderr
