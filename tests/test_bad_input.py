"""Bad input (issue #7): one case per item of the issue's list, each checking a clear message,
that the rest of the run goes on (the good files are migrated), and that nothing is lost (files
that must not change stay byte-identical, mtimes included).

Some items also have a test in test_cli.py (named in a comment at the case); the list is complete
here so that it can be read in one place.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from npu_migrate import catalogue, engine, model, run, source
from npu_migrate.inject import TEMPLATE_FILES
from npu_migrate.source import WRITE_DELAY_ENV
from tests import project_runs
from tests.test_cli import (
    BOTH,
    LEFT,
    PLAIN,
    SYNC,
    _unprivileged,
    age,
    clean_env,
    cli,
    cli_sub,
    flat,
    put,
    snapshot,
    temp_leftovers,
)

SYNC_DONE = "import npu_compat\nnpu_compat.synchronize()\n"  # SYNC migrated


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True,
                          env=clean_env()).stdout


def commit_all(root: Path) -> None:
    """Make root a git repository with everything committed (a clean work tree)."""
    project_runs.commit_all(root, env=clean_env())


def worktree(root: Path) -> dict:
    """snapshot() without .git/ (git status refreshes the index's stat data; that is git's)."""
    return {k: v for k, v in snapshot(root).items() if not k.startswith(".git/")}


def report_of(result) -> dict:
    assert result.exit_code in (0, 1, 2), result.output
    return json.loads(result.stdout)


def assert_good_files_migrated(root: Path, *rels: str) -> None:
    for rel in rels or ("good.py",):
        text = (root / rel).read_text()
        if "/" in rel:  # a script in a subfolder also gets the sys.path bootstrap
            assert "npu_compat.synchronize()" in text and "torch.cuda" not in text, rel
        else:
            assert text == SYNC_DONE, rel
    assert (root / "npu_compat" / "__init__.py").is_file()


# ------------------------------------------------------------ bad file contents, one case each

GBK_TEXT = "# -*- coding: gbk -*-\nimport torch\nNAME = \"中文注释\"\nx = torch.zeros(1).cuda()\n"
LATIN1_TEXT = "# -*- coding: latin-1 -*-\nimport torch\nNAME = \"caf\u00e9\"\ntorch.cuda.synchronize()\n"
LONG_STRING = "cuda " * 200_000  # 1 MB, on the same line as a rewritable call
CASES = {
    # test_cli.py: test_syntax_error_is_a_finding_and_the_other_files_still_migrate
    "syntax_error": (b"import torch\ndef f(:\n    torch.cuda.synchronize()\n", "NPU001"),
    "python2_print": (b"import torch\nprint \"on\", torch.cuda.is_available()\n", "NPU001"),
    "gbk_cookie": (GBK_TEXT.encode("gbk"), None),
    # test_cli.py: test_encodings_are_preserved (latin-1 and BOM + CRLF)
    "latin1_cookie": (LATIN1_TEXT.encode("latin-1"), None),
    "invalid_utf8_bytes": (b"import torch\nNAME = \"\xff\xfe\xfa\"\ntorch.cuda.synchronize()\n", "NPU002"),
    "invalid_gbk_bytes": (b"# -*- coding: gbk -*-\nimport torch\nNAME = \"\x80\xff\"\ntorch.cuda.synchronize()\n",
                          "NPU002"),
    "unknown_coding_cookie": (b"# -*- coding: no-such-codec -*-\nimport torch\ntorch.cuda.synchronize()\n",
                              "NPU001"),
    "bom": (b"\xef\xbb\xbfimport torch\nx = torch.zeros(1).cuda()\n", None),
    "crlf": (b"import torch\r\n\r\nx = torch.zeros(1).cuda()\r\ny = 1\r\n", None),
    "mixed_line_endings": (b"import torch\r\nx = torch.zeros(1).cuda()\ny = 1\r\nz = 2\n", None),
    "tabs": (b"import torch\nif True:\n\tx = torch.zeros(1).cuda()\n\tif x is not None:\n\t\ty = 2\n", None),
    "empty": (b"", "skip"),
    "whitespace_only": (b"  \n\n\t\n   ", "skip"),
    "binary_nul_bytes": (b"import torch\x00\x01\x02 cuda\xff\n" + bytes(range(256)), "NPU001"),
    "one_mb_line": (f"import torch\nDATA = \"{LONG_STRING}\"; x = torch.zeros(1).cuda()\n".encode(), None),
}


def _check_migrated(name: str, new: bytes) -> None:
    """What the migrated form of each rewritable bad file must look like."""
    compile(new, name, "exec")
    if name == "gbk_cookie":
        assert new.startswith(b"# -*- coding: gbk -*-\n")
        text = new.decode("gbk")
        assert "NAME = \"中文注释\"\n" in text  # still GBK, not re-encoded
        assert "x = torch.zeros(1).to(npu_compat.device())\n" in text
        with pytest.raises(UnicodeDecodeError):
            new.decode("utf-8")
    elif name == "latin1_cookie":
        assert new.startswith(b"# -*- coding: latin-1 -*-\n")
        assert b"NAME = \"caf\xe9\"\n" in new and b"npu_compat.synchronize()\n" in new
    elif name == "bom":
        assert new.startswith(b"\xef\xbb\xbfimport torch\n")
        assert new.count(b"\xef\xbb\xbf") == 1
        assert b"torch.zeros(1).to(npu_compat.device())" in new
    elif name == "crlf":
        assert new.count(b"\n") == new.count(b"\r\n") == 6  # the import and its section's blank line
        assert b"import npu_compat\r\n" in new and b"x = torch.zeros(1).to(npu_compat.device())\r\n" in new
    elif name == "mixed_line_endings":
        lines = new.splitlines(keepends=True)
        # each untouched line keeps its own ending
        for line in (b"import torch\r\n", b"y = 1\r\n", b"z = 2\n"):
            assert line in lines, line
        assert b"x = torch.zeros(1).to(npu_compat.device())\n" in lines
    elif name == "tabs":
        lines = new.splitlines(keepends=True)
        assert b"\tx = torch.zeros(1).to(npu_compat.device())\n" in lines
        assert b"\tif x is not None:\n" in lines and b"\t\ty = 2\n" in lines
    elif name == "one_mb_line":
        assert new.count(b"\n") == 4  # still one long line (plus the import and a blank line)
        assert f"DATA = \"{LONG_STRING}\"; x = torch.zeros(1).to(npu_compat.device())\n".encode() in new
    else:  # pragma: no cover
        raise AssertionError(f"no check for {name}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_file_content(tmp_path, name):
    data, expect = CASES[name]
    bad = put(tmp_path, f"{name}.py", data)
    put(tmp_path, "good.py", SYNC)
    put(tmp_path, "pkg/other.py", BOTH)
    age(tmp_path)
    before = snapshot(tmp_path)

    text = cli(tmp_path, "--dry-run", "--no-color")  # the message a user reads
    assert snapshot(tmp_path) == before
    r = cli(tmp_path, "--output-format", "json")
    report = report_of(r)
    assert report["errors"] == []
    assert_good_files_migrated(tmp_path)
    assert "npu_compat.device()" in (tmp_path / "pkg/other.py").read_text()
    assert temp_leftovers(tmp_path) == []
    findings = [f for f in report["findings"] if f["path"] == bad.name]
    if expect in ("NPU001", "NPU002"):
        assert r.exit_code == 1
        assert snapshot(tmp_path)[bad.name] == before[bad.name]  # bytes, mtime and mode kept
        assert [f["code"] for f in findings] == [expect]
        wording = "could not be parsed" if expect == "NPU001" else "could not be read or decoded"
        assert wording in findings[0]["message"] and "left unchanged" in findings[0]["message"]
        # (the path as both commands print it: relative to the working directory, else absolute)
        assert re.search(rf"^{re.escape(str(bad))}:\d+:\d+: {expect} ", text.stdout, re.M), text.stdout
    elif expect == "skip":
        assert r.exit_code == 0
        assert snapshot(tmp_path)[bad.name] == before[bad.name]
        assert findings == []
        assert report["files_skipped"] == {"no CUDA trigger words": 1}
        assert "files skipped: no CUDA trigger words" in text.stdout
    else:
        assert r.exit_code == 0, r.output
        assert bad.name in report["changed_files"]
        _check_migrated(name, bad.read_bytes())
        assert f"+++ b/{bad.name}" in text.stdout  # the dry run showed its diff
    # a second run changes nothing, whatever the bad file was
    age(tmp_path)
    settled = snapshot(tmp_path)
    again = cli(tmp_path, "--output-format", "json")
    assert again.exit_code == r.exit_code and snapshot(tmp_path) == settled


# ------------------------------------------------------------ symbolic links

def _outside_and_repo(tmp_path: Path) -> tuple[Path, Path]:
    outside = tmp_path / "outside"
    put(outside, "real.py", SYNC)
    put(outside, "pkg/deep.py", SYNC)
    repo = tmp_path / "repo"
    put(repo, "good.py", SYNC)
    return outside, repo


@pytest.mark.parametrize("vcs", ["plain", "git"])
def test_symlink_loops_are_not_entered(tmp_path, vcs):
    _, repo = _outside_and_repo(tmp_path)
    put(repo, "d/inner.py", SYNC)
    (repo / "loop_a.py").symlink_to("loop_b.py")
    (repo / "loop_b.py").symlink_to("loop_a.py")
    (repo / "self.py").symlink_to("self.py")
    (repo / "here").symlink_to(".", target_is_directory=True)
    (repo / "d" / "back").symlink_to("..", target_is_directory=True)
    if vcs == "git":
        commit_all(repo)
    age(tmp_path)
    before = snapshot(tmp_path)
    r = cli_sub(repo, "--no-color")  # a subprocess with a timeout: a loop would hang, not pass
    assert r.returncode == 0, r.stdout + r.stderr
    assert_good_files_migrated(repo, "good.py", "d/inner.py")
    after = snapshot(tmp_path)
    for rel in ("repo/loop_a.py", "repo/loop_b.py", "repo/self.py", "repo/here", "repo/d/back"):
        assert after[rel] == before[rel] and (tmp_path / rel).is_symlink(), rel
    for name in ("loop_a.py", "loop_b.py", "self.py"):
        assert f"{name}: a symbolic link; not followed" in flat(r.stderr), r.stderr
    # nothing was found twice through the loops
    report = json.loads(cli_sub(repo, "--dry-run", "--output-format", "json").stdout)
    assert report["files_scanned"] == 2


@pytest.mark.parametrize("vcs", ["plain", "git"])
def test_symlinks_out_of_the_root_are_never_written_through(tmp_path, vcs):
    # test_cli.py: test_symlinked_files_are_not_followed (plain tree, files and folders)
    outside, repo = _outside_and_repo(tmp_path)
    (repo / "rel_link.py").symlink_to(Path("..") / "outside" / "real.py")
    (repo / "abs_link.py").symlink_to(outside / "real.py")
    (repo / "linked_pkg").symlink_to(outside / "pkg", target_is_directory=True)
    if vcs == "git":
        commit_all(repo)
    age(tmp_path)
    before = snapshot(tmp_path)
    r = cli(repo, "--no-color")
    assert r.exit_code == 0, r.output
    assert "rel_link.py: a symbolic link; not followed" in flat(r.stderr)
    assert_good_files_migrated(repo)
    after = snapshot(tmp_path)
    for rel in before:
        if rel.startswith("outside/") or rel.endswith(("link.py", "linked_pkg")):
            assert after[rel] == before[rel], rel
    assert (repo / "rel_link.py").is_symlink() and (repo / "linked_pkg").is_symlink()


def test_a_folder_of_the_index_that_became_a_link_is_not_written_through(tmp_path):
    """git still lists `pkg/m.py` after `pkg` was replaced by a link out of the root."""
    outside, repo = _outside_and_repo(tmp_path)
    put(repo, "pkg/m.py", SYNC)
    commit_all(repo)
    shutil.rmtree(repo / "pkg")
    (repo / "pkg").symlink_to(outside / "pkg", target_is_directory=True)
    put(outside, "pkg/m.py", SYNC)
    before = snapshot(outside)
    r = cli(repo, "--allow-dirty", "--output-format", "json")  # pkg/ shows as changed in git
    assert r.exit_code == 0, r.output
    assert report_of(r)["changed_files"] == ["good.py"]
    assert snapshot(outside) == before


# ------------------------------------------------------------ read-only files and folders

def _migrate_unprivileged(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*_unprivileged(), sys.executable, "-m", "npu_migrate", str(root), "--no-color", *args],
        capture_output=True, text=True, env=clean_env(), timeout=120,
    )


def test_read_only_file(tmp_path):
    # test_cli.py: test_a_read_only_file_is_an_error_not_silently_replaced
    put(tmp_path, "good.py", SYNC)
    ro = put(tmp_path, "ro.py", SYNC)
    ro.chmod(0o444)
    age(tmp_path)
    before = snapshot(tmp_path)
    r = _migrate_unprivileged(tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "ro.py: read-only; not overwritten" in flat(r.stdout)
    assert snapshot(tmp_path)["ro.py"] == before["ro.py"]
    assert_good_files_migrated(tmp_path)
    assert temp_leftovers(tmp_path) == []


@pytest.mark.parametrize("locked", ["sub", "."])
def test_read_only_folder(tmp_path, locked):
    # test_cli.py: test_an_unwritable_file_is_an_error_and_the_others_are_still_written
    put(tmp_path, "good.py", SYNC)
    put(tmp_path, "sub/b.py", SYNC)
    put(tmp_path, "other/c.py", SYNC)
    age(tmp_path)
    before = snapshot(tmp_path)
    folder = tmp_path / locked
    folder.chmod(0o555)
    try:
        r = _migrate_unprivileged(tmp_path)
    finally:
        folder.chmod(0o755)
    assert r.returncode == 2, r.stdout + r.stderr
    after = snapshot(tmp_path)
    assert temp_leftovers(tmp_path) == []
    if locked == "sub":  # the others are written
        assert "sub/b.py: not written" in flat(r.stdout)
        assert after["sub/b.py"] == before["sub/b.py"]
        assert_good_files_migrated(tmp_path, "good.py", "other/c.py")
    else:  # the root itself: the shim cannot be written, so no file is (it would import it)
        assert "shim npu_compat/ not written" in flat(r.stdout)
        assert "no file was rewritten" in flat(r.stdout)
        assert after == before


@pytest.mark.parametrize("vcs", ["plain", "git"])
def test_unreadable_folder_is_named_and_the_rest_migrates(tmp_path, vcs):
    put(tmp_path, "good.py", SYNC)
    put(tmp_path, "secret/__init__.py", "")
    put(tmp_path, "secret/a.py", SYNC)
    if vcs == "git":
        commit_all(tmp_path)
    (tmp_path / "secret").chmod(0)
    try:
        r = _migrate_unprivileged(tmp_path)
    finally:
        (tmp_path / "secret").chmod(0o755)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    unreadable = "secret: cannot read folder" if vcs == "plain" else "secret/a.py: cannot be read"
    assert f"warning: {tmp_path}/{unreadable}" in flat(r.stderr), r.stderr
    assert (tmp_path / "secret/a.py").read_text() == SYNC
    assert_good_files_migrated(tmp_path)


# ------------------------------------------------------------ changed between read and write

EDITED = "import torch\n# edited by the user while the run went on\ntorch.cuda.synchronize()\n"


def _edit_while_running(monkeypatch, rel: str) -> None:
    real = run.migrate_path

    def racing(args):
        result = real(args)
        if args[1] == rel:
            Path(args[0]).write_text(EDITED)  # after the read, before the write
        return result

    monkeypatch.setattr(run, "migrate_path", racing)


def test_file_changed_between_read_and_write(tmp_path, monkeypatch):
    put(tmp_path, "edited.py", SYNC)
    put(tmp_path, "good.py", SYNC)
    put(tmp_path, "z.py", SYNC)
    _edit_while_running(monkeypatch, "edited.py")
    r = cli(tmp_path, "--no-color", "-j", "1")
    assert r.exit_code == 2, r.output
    assert "edited.py: changed on disk during the run; not overwritten" in flat(r.stdout)
    assert (tmp_path / "edited.py").read_text() == EDITED  # the user's edit is kept
    assert_good_files_migrated(tmp_path, "good.py", "z.py")
    assert temp_leftovers(tmp_path) == []


def test_file_changed_while_its_new_version_is_being_written(tmp_path, monkeypatch):
    """The last check, right before the rename: an edit made while the temp file was written."""
    target = put(tmp_path, "a.py", SYNC)
    monkeypatch.setattr(source, "write_delay_hook", lambda: target.write_text(EDITED))
    with pytest.raises(source.WriteError, match="changed on disk during the run; not overwritten"):
        source.write_atomic(target, SYNC_DONE.encode(), expected=SYNC.encode())
    assert target.read_text() == EDITED
    assert temp_leftovers(tmp_path) == []


def test_file_changed_between_read_and_copy_with_output(tmp_path, monkeypatch):
    src, out = tmp_path / "src", tmp_path / "out"
    put(src, "edited.py", SYNC)
    put(src, "good.py", SYNC)
    _edit_while_running(monkeypatch, "edited.py")
    r = cli(src, "--no-color", "-j", "1", "--output", out)
    assert r.exit_code == 2, r.output
    assert "edited.py: changed on disk during the run; copied unmigrated" in flat(r.stdout)
    assert (out / "edited.py").read_text() == EDITED
    assert_good_files_migrated(out)


# ------------------------------------------------------------ SIGINT in the middle of writing

def _many_files(root: Path, count: int) -> list[str]:
    rels = []
    for i in range(count):
        rel = f"pkg{i % 3}/m{i:02d}.py"
        put(root, rel, f"import torch\nVALUE = {i}\ntorch.cuda.synchronize()\nx = torch.zeros({i}).cuda()\n")
        rels.append(rel)
    return rels


def _interrupt_when(proc: subprocess.Popen, ready, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, "the run ended before it could be interrupted"
        assert time.monotonic() < deadline, "the run never started writing"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)


def _slow_run(*args) -> subprocess.Popen:
    env = clean_env()
    env[WRITE_DELAY_ENV] = "0.1"  # test-only hook: a pause after each file written
    return subprocess.Popen([sys.executable, "-m", "npu_migrate", *map(str, args), "-j", "1", "--no-color"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_sigint_during_a_write_run_leaves_every_file_old_or_new(tmp_path):
    count = 40
    root, expected = tmp_path / "repo", tmp_path / "expected"
    rels = _many_files(root, count)
    shutil.copytree(root, expected)
    assert cli(expected).exit_code == 0  # the fully migrated version of each file
    original = {rel: (root / rel).read_bytes() for rel in rels}
    migrated = {rel: (expected / rel).read_bytes() for rel in rels}

    proc = _slow_run(root)
    _interrupt_when(proc, lambda: any((root / rel).read_bytes() != original[rel] for rel in rels))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    match = re.search(rf"interrupted: (\d+) of {count} files written", err)
    assert match, err
    written = [rel for rel in rels if (root / rel).read_bytes() == migrated[rel]]
    assert int(match.group(1)) == len(written)
    assert 0 < len(written) < count
    for rel in rels:
        data = (root / rel).read_bytes()
        assert data in (original[rel], migrated[rel]), rel
        compile(data, rel, "exec")
    # the shim came first and is complete: every written file can import it
    for name in TEMPLATE_FILES:
        assert (root / "npu_compat" / name).read_bytes() == (expected / "npu_compat" / name).read_bytes()
    assert temp_leftovers(root) == []
    assert "Traceback" not in err
    # running again finishes the job
    assert cli(root).exit_code == 0
    assert {rel: (root / rel).read_bytes() for rel in rels} == migrated


def test_sigint_during_an_output_run_leaves_no_copy(tmp_path):
    root, out = tmp_path / "repo", tmp_path / "out"
    _many_files(root, 30)
    age(root)
    before = snapshot(root)
    proc = _slow_run(root, "--output", out)
    _interrupt_when(proc, lambda: any(p.name.endswith(".npu-migrate.tmp") for p in tmp_path.iterdir()))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert f"interrupted: nothing written; {out} was not created" in flat(err)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]  # the partial copy is gone
    assert snapshot(root) == before


# ------------------------------------------------------------ shim name collision

@pytest.mark.parametrize("existing", ["npu_compat.py", "npu_compat/__init__.py"])
@pytest.mark.parametrize("mode", ["in-place", "output"])
def test_shim_name_collides_with_a_user_module(tmp_path, existing, mode):
    # test_cli.py: test_shim_collision_with_a_user_module_writes_nothing
    root, out = tmp_path / "repo", tmp_path / "out"
    put(root, existing, "# the user's own module\nVALUE = 1\n")
    put(root, "good.py", SYNC)
    age(root)
    before = snapshot(root)
    extra = ["--output", out] if mode == "output" else []
    r = cli(root, "--no-color", *extra)
    assert r.exit_code == 2, r.output
    assert f"{root / existing.split('/')[0]}" in flat(r.output) and "--shim-name" in r.output
    assert snapshot(root) == before
    assert not out.exists()
    r = cli(root, "--shim-name", "npu_compat2", *extra)
    assert r.exit_code == 0, r.output
    base = out if mode == "output" else root
    assert (base / existing).read_text() == "# the user's own module\nVALUE = 1\n"
    assert "npu_compat2.synchronize()" in (base / "good.py").read_text()


# ------------------------------------------------------------ uncommitted changes in git

def _clean_repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    put(root, "good.py", SYNC)
    put(root, "left.py", LEFT)
    put(root, "plain.py", PLAIN)
    commit_all(root)
    return root


@pytest.mark.parametrize("change", ["modified", "staged", "deleted", "untracked_rewritten"])
def test_dirty_git_tree_is_refused_without_allow_dirty(tmp_path, change):
    root = _clean_repo(tmp_path)
    if change == "modified":
        put(root, "plain.py", PLAIN + "# work in progress\n")
        named = "plain.py"
    elif change == "staged":
        put(root, "plain.py", PLAIN + "# staged\n")
        git(root, "add", "plain.py")
        named = "plain.py"
    elif change == "deleted":
        (root / "plain.py").unlink()
        named = "plain.py"
    else:
        put(root, "new.py", SYNC)  # git has no copy of it: a rewrite could not be undone
        named = "new.py"
    age(root)
    before = worktree(root)
    r = cli(root, "--no-color")
    assert r.exit_code == 2, r.output
    message = flat(r.stderr)
    if change == "untracked_rewritten":
        assert "would rewrite files that git does not track" in message
    else:
        assert "uncommitted changes" in message and "a diff of its own" in message
    assert f" {named} " in message
    assert "--allow-dirty" in message and "Commit" in message
    assert worktree(root) == before  # nothing written, no shim
    # with --allow-dirty the run goes through, the user's change untouched
    r = cli(root, "--no-color", "--allow-dirty")
    assert r.exit_code == 1, r.output  # left.py's finding
    assert_good_files_migrated(root, *(["good.py", "new.py"] if change == "untracked_rewritten" else ["good.py"]))
    if change in ("modified", "staged", "deleted"):
        assert worktree(root).get("plain.py") == before.get("plain.py")


def test_dirty_git_tree_what_does_not_count(tmp_path):
    root = _clean_repo(tmp_path)
    put(root, "notes.txt", "untracked, not rewritten\n")
    put(root, "scratch.py", PLAIN)  # untracked, nothing to rewrite
    r = cli(root, "--no-color")
    assert r.exit_code == 1, r.output
    assert_good_files_migrated(root)
    # a change outside the run's root does not count either
    repo2 = _clean_repo(tmp_path / "two")
    put(repo2, "sub/a.py", SYNC)
    git(repo2, "add", "-A")
    git(repo2, "commit", "-q", "-m", "sub", "--no-verify")
    put(repo2, "plain.py", PLAIN + "# elsewhere\n")
    assert cli(repo2 / "sub").exit_code == 0
    assert (repo2 / "sub/a.py").read_text() == SYNC_DONE


def test_dirty_git_tree_dry_run_and_output_are_allowed(tmp_path):
    root = _clean_repo(tmp_path)
    put(root, "plain.py", PLAIN + "# work in progress\n")
    age(root)
    before = worktree(root)
    assert cli(root, "--dry-run").exit_code == 1
    r = cli(root, "--output", tmp_path / "copy")
    assert r.exit_code == 1, r.output
    assert worktree(root) == before
    assert (tmp_path / "copy/good.py").read_text() == SYNC_DONE
    assert (tmp_path / "copy/plain.py").read_text() == PLAIN + "# work in progress\n"


# ------------------------------------------------------------ missing or non-directory root

def test_missing_root(tmp_path):
    # test_cli.py: test_exit_2_for_a_missing_root
    put(tmp_path, "good.py", SYNC)
    r = cli(tmp_path / "nope")
    assert r.exit_code == 2
    assert f"error: {tmp_path / 'nope'}: no such file or directory" in flat(r.stderr)
    r = cli(tmp_path / "good.py", tmp_path / "nope.py")  # one bad path among good ones: nothing runs
    assert r.exit_code == 2
    assert (tmp_path / "good.py").read_text() == SYNC
    (tmp_path / "loop").symlink_to("loop")
    r = cli(tmp_path / "loop")
    assert r.exit_code == 2 and "symbolic link loop" in flat(r.stderr)


def test_root_that_is_not_a_python_file(tmp_path):
    notes = put(tmp_path, "notes.txt", "call .cuda() on the model\n")
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    tool = put(tmp_path, "bin/tool", "#!/usr/bin/env python3\n" + SYNC)
    put(tmp_path, "good.py", SYNC)
    age(tmp_path)
    before = snapshot(tmp_path)
    r = cli(notes)
    assert r.exit_code == 2
    assert "notes.txt: not a Python file" in flat(r.stderr) and "nothing to migrate" in flat(r.stderr)
    r = cli(fifo)  # a named pipe would block a read forever
    assert r.exit_code == 2 and "pipe.py: not a regular file" in flat(r.stderr)
    assert snapshot(tmp_path) == before
    # among Python files the others still migrate (a python #! line makes a file Python)
    r = cli(notes, tmp_path / "good.py", tool, "--no-shim")
    assert r.exit_code == 0, r.output
    assert "notes.txt: not a Python file" in flat(r.stderr)
    assert (tmp_path / "good.py").read_text() == "import npu_compat\nnpu_compat.synchronize()\n"
    assert "npu_compat.synchronize()" in tool.read_text()
    assert snapshot(tmp_path)["notes.txt"] == before["notes.txt"]


# ------------------------------------------------------------ --output DIR

def _project(root: Path, outside: Path) -> None:
    put(root, "good.py", SYNC)
    put(root, "left.py", LEFT)
    put(root, "README.md", "# a project that says cuda in its README\n")
    put(root, "data/weights.bin", bytes(range(256)) * 4)
    put(root, "tools/run.sh", "#!/bin/sh\npython good.py\n").chmod(0o755)
    put(root, "ro.py", SYNC).chmod(0o444)
    put(root, "scripts/check.py", "import torch\nprint(torch.cuda.is_available())\n")
    put(root, "__pycache__/good.cpython-311.pyc", b"\x00cached")
    put(root, ".venv/pyvenv.cfg", "home = /usr/bin\n")
    put(root, ".venv/lib/site.py", SYNC)
    put(outside, "real.py", SYNC)
    (root / "linked.py").symlink_to(outside / "real.py")
    (root / "loop").symlink_to("loop")


def test_output_writes_a_migrated_copy_and_never_touches_the_source(tmp_path):
    src, out, outside = tmp_path / "src", tmp_path / "out", tmp_path / "outside"
    _project(src, outside)
    age(tmp_path)
    before = snapshot(tmp_path)
    r = cli(src, "--no-color", "--output", out)
    assert r.exit_code == 1, r.output  # left.py's finding, as for a normal run
    assert f"migrated copy written to {out}" in flat(r.stdout) and "was not changed" in flat(r.stdout)
    after = snapshot(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("out/")} == before  # bytes, mtimes, modes
    # the copy: migrated files, everything else as it was, the shim, no venv or caches
    assert (out / "good.py").read_text() == SYNC_DONE
    assert (out / "ro.py").read_text() == SYNC_DONE and (out / "ro.py").stat().st_mode & 0o777 == 0o444
    assert (out / "left.py").read_text() == LEFT
    for rel in ("README.md", "data/weights.bin", "tools/run.sh"):
        assert after[f"out/{rel}"][0] == before[f"src/{rel}"][0], rel
        assert after[f"out/{rel}"][2] == before[f"src/{rel}"][2], rel  # mode kept (run.sh executable)
    assert os.readlink(out / "linked.py") == str(outside / "real.py")
    assert os.readlink(out / "loop") == "loop"
    assert not (out / ".venv").exists() and not (out / "__pycache__").exists()
    assert sorted(p.name for p in (out / "npu_compat").iterdir()) == sorted(TEMPLATE_FILES)
    umask = os.umask(0o22)
    os.umask(umask)
    for name in TEMPLATE_FILES:  # new files get the usual mode, not a temp file's 0600
        assert (out / "npu_compat" / name).stat().st_mode & 0o777 == 0o666 & ~umask, name
    assert temp_leftovers(tmp_path) == []
    # the copy runs, through its own shim
    run = subprocess.run([sys.executable, "scripts/check.py"], cwd=out, capture_output=True, text=True,
                         env=clean_env(), timeout=120)
    assert run.returncode == 0 and run.stdout == "False\n", run.stderr


def test_output_of_a_git_tree_is_gits_view_of_the_project(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    put(src, ".gitignore", "*.log\ncheckpoints/\n")
    put(src, "good.py", SYNC)
    put(src, "train.log", "ignored\n")
    put(src, "checkpoints/model.pt", b"\x00ignored")
    commit_all(src)
    put(src, "new_untracked.py", SYNC)  # the user's new work is part of the project
    r = cli(src, "--output", out, "--output-format", "json")
    assert r.exit_code == 0, r.output
    assert sorted(json.loads(r.stdout)["changed_files"]) == ["good.py", "new_untracked.py"]
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert names == sorted([".gitignore", "good.py", "new_untracked.py"]
                           + [f"npu_compat/{n}" for n in TEMPLATE_FILES])
    assert (src / "good.py").read_text() == SYNC


def test_output_dir_must_be_new_or_empty_and_outside_the_source(tmp_path):
    src = tmp_path / "src"
    put(src, "good.py", SYNC)
    age(tmp_path)
    put(tmp_path, "busy/keep.txt", "the user's\n")
    put(tmp_path, "a_file", "not a folder\n")
    before = snapshot(tmp_path)
    for target, words in [
        (src / "migrated", "inside the source tree"),
        (src, "inside the source tree"),
        (tmp_path / "busy", "exists and is not empty"),
        (tmp_path / "a_file", "exists and is not a folder"),
        (tmp_path, "holds the source tree"),
    ]:
        r = cli(src, "--output", target)
        assert r.exit_code == 2, (target, r.output)
        assert words in flat(r.stderr), r.stderr
        assert snapshot(tmp_path) == before
    # an empty folder is fine; an earlier copy is not refreshed (edits made in it are kept)
    (tmp_path / "empty").mkdir()
    assert cli(src, "--output", tmp_path / "empty").exit_code == 0
    assert (tmp_path / "empty/good.py").read_text() == SYNC_DONE
    put(tmp_path, "empty/good.py", "# hand edit in the copy\n")
    r = cli(src, "--output", tmp_path / "empty")
    assert r.exit_code == 2 and "not refreshed in place" in flat(r.stderr)
    assert (tmp_path / "empty/good.py").read_text() == "# hand edit in the copy\n"
    # a dry run writes no copy
    r = cli(src, "--output", tmp_path / "new", "--dry-run", "--no-color")
    assert r.exit_code == 0 and "+npu_compat.synchronize()" in r.stdout
    assert not (tmp_path / "new").exists()


def test_nesting_too_deep_for_the_code_generator_is_a_finding_not_a_crash():
    """Thousands of implicitly concatenated strings nest thousands deep in libcst's tree; its
    code generation then hits Python's recursion limit. The engine promises never to raise."""
    strings = b" ".join(b"'cuda%d'" % i for i in range(3000))
    source = b"import torch\ntorch.cuda.synchronize()\nTABLE = (" + strings + b")\n"
    result = engine.migrate_source(source, "deep.py", model.Options(enabled=catalogue.enabled_codes()))
    assert not result.changed
    assert [f.code for f in result.findings] == ["NPU001"]
    assert "nested too deeply" in result.findings[0].message
