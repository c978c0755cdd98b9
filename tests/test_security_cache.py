"""The result cache on hostile or corrupt state (npu_migrate/cache.py): an entry that was tampered
with, written under another user's key, or malformed never reaches a project file and never hides
a finding (it is a miss, and the run says so once); a cache folder, file or key that another user
owns or can write is not used; no cache file, however malformed, deep or large, crashes a run."""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from npu_migrate import cache as cache_mod
from npu_migrate import catalogue
from npu_migrate.cache import Cache, digest, options_key, tool_fingerprint
from npu_migrate.cli import main
from npu_migrate.discover import discover
from npu_migrate.model import Options
from npu_migrate.run import package_dirs, run_files

REPO = Path(__file__).resolve().parent.parent
NANOCHAT = REPO / "fixtures" / "projects" / "nanochat_mini"
TARGET = "nanochat_mini/common.py"
INJECTED = b"import os\nos.system('touch /tmp/npu-migrate-pwned')\n"
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture(autouse=True)
def private_key(tmp_path, monkeypatch):
    """Each test's cache key lives in its own config folder (never the user's)."""
    config = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    monkeypatch.delenv(cache_mod.ENV_OFF, raising=False)
    return config / "npu-migrate" / "cache-key"


@pytest.fixture
def project(tmp_path) -> Path:
    root = tmp_path / "proj"
    shutil.copytree(NANOCHAT, root)
    return root


@pytest.fixture
def folder(tmp_path) -> Path:
    return tmp_path / "cache"


def cache_file(folder: Path) -> Path:
    (found,) = [p for p in folder.iterdir() if p.suffix == ".json"]
    return found


def options_for(root: Path, items) -> Options:
    return Options(enabled=catalogue.enabled_codes(), package_dirs=package_dirs(root, items))


def comparable(results) -> list:
    return [(r.relpath, r.new, r.original, r.skipped, r.suppressed, r.encoding, r.findings) for r in results]


def run(root: Path, folder: Path):
    items = discover(root)
    cache = Cache.open(folder, root)
    results = run_files(items, options_for(root, items), cache=cache)
    cache.save(root)
    return results, cache


def cold(root: Path):
    items = discover(root)
    return run_files(items, options_for(root, items))


def migrate(root: Path, *args: str):
    return CliRunner().invoke(main, [str(root), "-q", *args])


def snapshot(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def expected_migration(tmp_path: Path) -> dict:
    clean = tmp_path / "clean"
    shutil.copytree(NANOCHAT, clean)
    result = migrate(clean, "--no-cache")
    assert result.exit_code in (0, 1), result.output
    return snapshot(clean)


def edit_entry(folder: Path, relpath: str, change) -> None:
    """Change the result of one entry in the cache file, the way an attacker would: its MAC stays."""
    path = cache_file(folder)
    data = json.loads(path.read_text())
    for entry in data["entries"][relpath]:  # each options key's result
        signed = isinstance(entry[2], str)  # (a cache without MACs held the result itself)
        result = json.loads(entry[2]) if signed else entry[2]
        change(result)
        entry[2] = json.dumps(result, separators=(",", ":")) if signed else result
    path.write_text(json.dumps(data))


def warnings_of(output: str) -> list[str]:
    """The cache's warnings (not the one every write outside a git work tree gets)."""
    return [line for line in output.splitlines()
            if line.startswith("warning:") and "is not in a git work tree" not in line]


# -- tampered entries


def test_a_tampered_new_text_is_never_written_and_the_run_says_so(project, folder, tmp_path):
    dry = migrate(project, "--dry-run", "--cache-dir", str(folder))
    assert dry.exit_code in (0, 1) and not warnings_of(dry.stderr)

    def inject(result):
        result["new"] = base64.b64encode(INJECTED).decode()
    edit_entry(folder, TARGET, inject)

    written = migrate(project, "--cache-dir", str(folder))
    assert written.exit_code in (0, 1), written.output
    assert snapshot(project) == expected_migration(tmp_path)  # the correct migration, all of it
    assert b"os.system" not in (project / TARGET).read_bytes()
    said = warnings_of(written.stderr)
    assert said == [f"warning: 1 entry of cache file {cache_file(folder)} failed verification "
                    "(tampered or corrupt); ignored and the files migrated again"]


def test_non_compiling_text_in_an_entry_is_never_written(project, folder, tmp_path):
    migrate(project, "--dry-run", "--cache-dir", str(folder))

    def garbage(result):
        result["new"] = base64.b64encode(b"def (:\n").decode()
    edit_entry(folder, TARGET, garbage)
    written = migrate(project, "--cache-dir", str(folder))
    assert snapshot(project) == expected_migration(tmp_path)
    assert len(warnings_of(written.stderr)) == 1


def test_a_tampered_entry_never_hides_a_finding_from_check(project, folder):
    args = ["check", str(project), "--output-format", "json", "--isolated", "--cache-dir", str(folder)]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 1

    def hide(result):
        result["findings"] = []
        result["new"] = None
    for relpath in json.loads(cache_file(folder).read_text())["entries"]:
        edit_entry(folder, relpath, hide)
    second = CliRunner().invoke(main, args)
    assert second.exit_code == 1
    assert json.loads(second.stdout) == json.loads(first.stdout)
    assert len(warnings_of(second.stderr)) == 1 and "failed verification" in second.stderr
    third = CliRunner().invoke(main, args)  # the file was rewritten with good entries
    assert not warnings_of(third.stderr) and json.loads(third.stdout) == json.loads(first.stdout)


def test_a_changed_mac_or_digest_is_a_miss(project, folder):
    reference, _ = run(project, folder)
    path = cache_file(folder)
    data = json.loads(path.read_text())
    entries = data["entries"]
    first, second = sorted(entries)[:2]
    entries[first][0][3] = "0" * 64
    entries[second][0][1] = "f" * 32  # an options key the MAC did not cover
    path.write_text(json.dumps(data))
    again, cache = run(project, folder)
    assert comparable(again) == comparable(reference)
    assert cache.misses == 2 and cache.hits == len(reference) - 2
    assert len(cache.warnings) == 1 and "2 entries" in cache.warnings[0]


def test_an_entry_moved_to_another_file_or_root_is_a_miss(project, folder, tmp_path):
    reference, _ = run(project, folder)
    path = cache_file(folder)
    data = json.loads(path.read_text())
    entries = data["entries"]
    entries["nanochat_mini/gpt.py"] = entries[TARGET]  # a valid MAC, for another file
    path.write_text(json.dumps(data))
    _again, cache = run(project, folder)
    assert any("failed verification" in w for w in cache.warnings)

    other = tmp_path / "other"
    shutil.copytree(NANOCHAT, other)
    run(other, folder)
    shutil.copy(path, cache_file_for(folder, other))  # project's entries as other's
    results, cache = run(other, folder)
    assert cache.hits == 0 and comparable(results) == comparable(cold(other))
    assert any("failed verification" in w for w in cache.warnings)


def cache_file_for(folder: Path, root: Path) -> Path:
    return folder / (digest(str(root.absolute()).encode()) + ".json")


def test_a_cache_restored_from_another_user_or_machine_is_not_trusted(project, folder, tmp_path,
                                                                      monkeypatch):
    reference, _ = run(project, folder)
    # the same cache file, read under another key (a fresh CI runner, another user)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "elsewhere"))
    results, cache = run(project, folder)
    assert cache.hits == 0 and comparable(results) == comparable(reference)
    assert len(cache.warnings) == 1 and "not written with this user's cache key" in cache.warnings[0]
    again, cache = run(project, folder)  # rewritten under this key: hits, and quiet
    assert cache.hits == len(reference) and not cache.warnings


# -- malformed entries and files


def write_cache(folder: Path, root: Path, entries, key_id: str | None = None, tool: str | None = None):
    folder.mkdir(parents=True, exist_ok=True)
    opened = Cache.open(folder, root)
    body = {"tool": tool or tool_fingerprint(), "key": key_id or opened._key_id(), "entries": entries}
    path = cache_file_for(folder, root)
    path.write_text(json.dumps(body))
    return opened


@pytest.mark.parametrize("entry", [
    5, "text", None, True, {"a": 1}, [], ["d"], ["d", "k"], ["d", "k", {}], [1, 2, 3, 4],
    ["d", "k", "{}", 7], ["d", "k", "{}", "ab"], ["d", "k", "{}", "é" * 64], ["d", "k", "{}", "0" * 64, 5],
    [[[[[]]]]],
])
def test_a_malformed_entry_is_a_miss(project, folder, entry):
    reference = cold(project)
    write_cache(folder, project, {TARGET: [entry], "nanochat_mini/gpt.py": [entry]})
    results, cache = run(project, folder)
    assert comparable(results) == comparable(reference)
    assert cache.hits == 0
    assert len(cache.warnings) == 1 and "2 entries" in cache.warnings[0]
    results, cache = run(project, folder)  # rewritten: quiet, and every file hits
    assert not cache.warnings and cache.hits == len(reference)


@pytest.mark.parametrize("variants", [5, "text", None, {}, [], [["d", "k", "{}", "0" * 64]] * 5])
def test_a_malformed_list_of_a_files_entries_is_a_miss(project, folder, variants):
    """A file's entries are a list of at most MAX_VARIANTS; anything else is dropped whole."""
    reference = cold(project)
    write_cache(folder, project, {TARGET: variants})
    results, cache = run(project, folder)
    assert comparable(results) == comparable(reference) and cache.hits == 0
    assert len(cache.warnings) == 1 and "failed verification" in cache.warnings[0]


GOOD = {"findings": [], "new": None, "encoding": "utf-8", "skipped": None, "suppressed": 0}
FACTS = {"imports": [["os", 1, False]], "blocks": [[3, 4, "_is_hip"]], "classes": ["A"],
         "npu_classes": [["NPURunner", ["Runner"]]], "cu": [["csrc/a.cu", "Builder"]],
         "bound": [["launch", "launches the Triton kernel `_k`"]]}
FINDING = {"path": TARGET, "line": 1, "column": 1, "code": "NPU101", "message": "m", "fixable": True,
           "source": "", "cell": None}


def changed(base: dict, **fields) -> str:
    return json.dumps({**base, **fields})


@pytest.mark.parametrize("payload", [
    "5", "[]", "null", '"text"', "{}", "{not json", "[" * 100_000 + "]" * 100_000,
    changed(GOOD, findings=5), changed(GOOD, findings=[5]), changed(GOOD, findings=[{}]),
    changed(GOOD, findings=[{**FINDING, "line": "1"}]), changed(GOOD, findings=[{**FINDING, "line": True}]),
    changed(GOOD, findings=[{**FINDING, "line": 0}]), changed(GOOD, findings=[{**FINDING, "extra": 1}]),
    changed(GOOD, findings=[{**FINDING, "path": "../../etc/passwd"}]),
    changed(GOOD, findings=[{**FINDING, "fixable": 1}]), changed(GOOD, findings=[{**FINDING, "cell": "2"}]),
    changed(GOOD, new=5), changed(GOOD, new="not base64!"), changed(GOOD, new=["a"]),
    changed(GOOD, encoding=5), changed(GOOD, encoding="no-such-codec"),
    changed(GOOD, skipped=3), changed(GOOD, suppressed=True), changed(GOOD, suppressed=-1),
    changed(GOOD, suppressed="1"), changed(GOOD, extra=1),
    json.dumps({k: v for k, v in GOOD.items() if k != "new"}),
    # the whole-program facts of a file (wholeprogram.file_facts): each field checked too
    changed(GOOD, facts=5), changed(GOOD, facts={}), changed(GOOD, facts={**FACTS, "extra": []}),
    changed(GOOD, facts={**FACTS, "imports": [["os", "1", False]]}),
    changed(GOOD, facts={**FACTS, "imports": [["os", True, False]]}),  # a bool is not a line
    changed(GOOD, facts={**FACTS, "blocks": [[1, 2]]}), changed(GOOD, facts={**FACTS, "classes": [5]}),
    changed(GOOD, facts={**FACTS, "npu_classes": [["NPURunner", [5]]]}),
    changed(GOOD, facts={**FACTS, "cu": [["a.cu"]]}),
    changed(GOOD, facts={**FACTS, "bound": [["launch", 5]]}),
    changed(GOOD, facts={k: v for k, v in FACTS.items() if k != "bound"}),
])
def test_a_signed_entry_of_the_wrong_shape_is_a_miss(project, folder, payload):
    """Even an entry whose MAC verifies (a bug, a leaked key) is checked field by field."""
    data = (project / TARGET).read_bytes()
    items = discover(project)
    options = options_for(project, items)
    signer = write_cache(folder, project, {})
    content, key = digest(data), options_key(options, TARGET)
    entries = {TARGET: [[content, key, payload, signer._mac(TARGET, content, key, payload)]]}
    write_cache(folder, project, entries)
    cache = Cache.open(folder, project)
    assert TARGET in cache.entries and not cache.warnings  # the MAC verified
    assert cache.lookup(TARGET, content, key, data) is None
    assert cache.misses == 1 and len(cache.warnings) == 1 and "malformed" in cache.warnings[0]
    results = run_files(items, options, cache=cache)
    assert comparable(results) == comparable(cold(project))


def test_a_well_formed_signed_entry_is_used(project, folder):
    """The check above is not a miss for everything: the same way of signing gives a hit."""
    data = (project / TARGET).read_bytes()
    options = options_for(project, discover(project))
    signer = write_cache(folder, project, {})
    content, key = digest(data), options_key(options, TARGET)
    payload = changed(GOOD, findings=[FINDING], new=base64.b64encode(b"x = 1\n").decode(), facts=FACTS)
    write_cache(folder, project, {TARGET: [[content, key, payload, signer._mac(TARGET, content, key, payload)]]})
    cache = Cache.open(folder, project)
    result = cache.lookup(TARGET, content, key, data)
    assert result is not None and result.new == b"x = 1\n" and cache.hits == 1 and not cache.warnings
    assert result.facts == FACTS


@pytest.mark.parametrize("text", [
    b"{not json", b"5", b"[]", b"null", b'"x"', b"\xff\xfe\x00garbage", b"",
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    json.dumps({"tool": "TOOL", "entries": 5}).encode(),
    json.dumps({"tool": "TOOL", "entries": []}).encode(),
    json.dumps({"tool": "TOOL", "key": "KEY", "entries": {"a": [[[]]]}}).encode(),
    json.dumps({"tool": "TOOL", "key": 5, "entries": {"a": 1}}).encode(),
])
def test_a_malformed_cache_file_never_crashes_a_run(project, folder, text):
    reference = cold(project)
    opened = write_cache(folder, project, {})
    text = text.replace(b"TOOL", tool_fingerprint().encode()).replace(b"KEY", opened._key_id().encode())
    cache_file_for(folder, project).write_bytes(text)
    results, cache = run(project, folder)
    assert comparable(results) == comparable(reference) and cache.hits == 0
    assert len(cache.warnings) <= 1
    again, cache = run(project, folder)  # the run rewrote it
    assert cache.hits == len(reference) and not cache.warnings


def test_a_deeply_nested_cache_file_through_the_cli(project, folder):
    first = migrate(project, "--dry-run", "--cache-dir", str(folder))
    cache_file(folder).write_text("[" * 100_000 + "]" * 100_000)
    again = migrate(project, "--dry-run", "--cache-dir", str(folder))
    assert again.exit_code == first.exit_code and again.stdout == first.stdout
    assert again.exception is None or isinstance(again.exception, SystemExit)
    assert warnings_of(again.stderr) == [f"warning: cache file {cache_file(folder)} is not valid JSON; "
                                         "ignored (it is rewritten)"]


def test_a_huge_cache_file_is_not_read(project, folder, monkeypatch):
    reference, _ = run(project, folder)
    path = cache_file(folder)
    size = path.stat().st_size
    monkeypatch.setattr(cache_mod, "MAX_FILE_BYTES", size - 1)
    reads = []
    real_open = cache_mod._open_regular

    def spy(path, what):
        handle, st = real_open(path, what)
        real_read = handle.read
        handle_read = lambda n=-1: reads.append(n) or real_read(n)  # noqa: E731
        return _Wrapped(handle, handle_read), st
    monkeypatch.setattr(cache_mod, "_open_regular", spy)
    results, cache = run(project, folder)
    assert comparable(results) == comparable(reference) and cache.hits == 0
    assert cache.warnings == [f"cache file {path} is larger than {(size - 1) >> 20} MiB; not read (it is rewritten)"]
    assert all(0 <= n <= size for n in reads)  # never an unbounded read


class _Wrapped:
    def __init__(self, handle, read):
        self._handle, self.read = handle, read

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.close()


def test_a_cache_file_that_grows_past_the_bound_while_read_is_cut(project, folder, monkeypatch):
    run(project, folder)
    path = cache_file(folder)
    monkeypatch.setattr(cache_mod, "MAX_FILE_BYTES", 100)
    real_fstat = os.fstat
    monkeypatch.setattr(cache_mod.os, "fstat", lambda fd: _small(real_fstat(fd)))
    with pytest.raises(cache_mod.CacheTooLarge):
        cache_mod._read_cache_file(path)


def _small(st):
    fields = list(st)
    fields[stat.ST_SIZE] = 10
    return os.stat_result(fields)


# -- who owns the cache


def test_a_group_or_world_writable_cache_folder_is_not_used(project, folder):
    reference, _ = run(project, folder)
    path = cache_file(folder)
    before = path.read_bytes()
    for mode in (0o777, 0o1777, 0o775, 0o720):
        folder.chmod(mode)
        results, cache = run(project, folder)
        assert comparable(results) == comparable(reference) and cache.hits == 0
        assert cache.warnings == [f"result cache not used: the cache folder {folder} is writable by "
                                  f"other users (mode {mode:04o})"]
        assert path.read_bytes() == before  # neither read nor written
    folder.chmod(0o700)
    _results, cache = run(project, folder)
    assert cache.hits == len(reference) and not cache.warnings


def test_a_world_writable_cache_file_is_not_used(project, folder):
    reference, _ = run(project, folder)
    path = cache_file(folder)
    path.chmod(0o666)
    results, cache = run(project, folder)
    assert cache.hits == 0 and comparable(results) == comparable(reference)
    assert cache.warnings == [f"result cache not used: the cache file {path} is writable by other "
                              "users (mode 0666)"]


def test_a_world_writable_cache_folder_through_the_cli_says_so_once(project, folder, monkeypatch):
    folder.mkdir(mode=0o700)
    folder.chmod(0o777)
    monkeypatch.setenv(cache_mod.ENV_DIR, str(folder))
    args = ["check", str(project), "--output-format", "json", "--isolated"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert warnings_of(result.stderr) == [f"warning: result cache not used: the cache folder {folder} "
                                          "is writable by other users (mode 0777)"]
    assert list(folder.iterdir()) == []  # nothing written into it


@pytest.mark.skipif(not ROOT, reason="changing a file's owner needs root")
def test_a_cache_file_owned_by_another_user_is_not_used(project, folder, tmp_path):
    reference, _ = run(project, folder)
    path = cache_file(folder)

    def inject(result):
        result["new"] = base64.b64encode(INJECTED).decode()
    edit_entry(folder, TARGET, inject)
    os.chown(path, 4242, 4242)
    before = path.read_bytes()
    results, cache = run(project, folder)
    assert cache.hits == 0 and comparable(results) == comparable(reference)
    assert cache.warnings == [f"result cache not used: the cache file {path} is owned by another user (uid 4242)"]
    assert path.read_bytes() == before and path.stat().st_uid == 4242

    written = migrate(project, "--cache-dir", str(folder))
    assert snapshot(project) == expected_migration(tmp_path)
    assert len(warnings_of(written.stderr)) == 1 and "owned by another user" in written.stderr


def test_a_cache_folder_owned_by_another_user_is_not_used(project, folder, monkeypatch):
    reference, _ = run(project, folder)
    real = os.geteuid()
    monkeypatch.setattr(cache_mod.os, "geteuid", lambda: real + 4242)
    results, cache = run(project, folder)
    assert cache.hits == 0 and comparable(results) == comparable(reference)
    assert cache.warnings == [f"result cache not used: the cache folder {folder} is owned by another "
                              f"user (uid {real})"]


def test_a_cache_file_that_is_a_link_or_a_fifo_is_not_used(project, folder, tmp_path):
    reference, _ = run(project, folder)
    path = cache_file(folder)
    elsewhere = tmp_path / "elsewhere.json"
    path.rename(elsewhere)
    path.symlink_to(elsewhere)
    results, cache = run(project, folder)
    assert cache.hits == 0 and comparable(results) == comparable(reference)
    assert cache.warnings == [f"result cache not used: the cache file {path} is a symbolic link"]
    path.unlink()
    os.mkfifo(path)  # opening it must not block
    results, cache = run(project, folder)
    assert cache.hits == 0 and cache.warnings == [f"result cache not used: the cache file {path} is not "
                                                  "a regular file"]


def test_a_planted_gitignore_link_in_the_cache_folder_is_not_written_through(project, folder, tmp_path):
    folder.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    (folder / ".gitignore").symlink_to(victim)  # dangling: `exists()` is false
    run(project, folder)
    assert not victim.exists() and cache_file(folder).is_file()


def test_a_new_cache_folder_and_file_are_private(project, folder):
    run(project, folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(cache_file(folder).stat().st_mode) == 0o600


# -- the key


def test_the_key_is_made_private_and_outside_the_cache_folder(project, folder, private_key):
    run(project, folder)
    st = private_key.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
    assert stat.S_IMODE(private_key.parent.stat().st_mode) == 0o700
    assert len(bytes.fromhex(private_key.read_text().strip())) == 32
    assert not any(p.name == "cache-key" for p in folder.rglob("*"))
    assert private_key.read_text().strip() not in cache_file(folder).read_text()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o666, 0o700 | 0o004])
def test_a_key_others_can_access_is_refused(project, folder, private_key, mode):
    reference, _ = run(project, folder)
    private_key.chmod(mode)
    results, cache = run(project, folder)
    assert cache.hits == 0 and comparable(results) == comparable(reference)
    assert cache.warnings == [f"result cache not used: the cache key {private_key} is accessible to other "
                              f"users (mode {mode:04o}; it must be 0600)"]


def test_a_bad_key_is_refused(project, folder, private_key, tmp_path):
    reference, _ = run(project, folder)
    secret = private_key.read_text()
    private_key.unlink()
    planted = tmp_path / "planted"
    planted.write_text(secret)
    planted.chmod(0o600)
    private_key.symlink_to(planted)
    results, cache = run(project, folder)
    assert cache.hits == 0 and comparable(results) == comparable(reference)
    assert cache.warnings == [f"result cache not used: the cache key {private_key} is a symbolic link"]

    private_key.unlink()
    private_key.write_text("not hex")
    private_key.chmod(0o600)
    results, cache = run(project, folder)
    assert cache.hits == 0 and comparable(results) == comparable(reference)
    assert cache.warnings == [f"result cache not used: the cache key {private_key} is malformed "
                              "(delete it: a new one is made)"]


def test_a_key_folder_others_can_write_is_refused(project, folder, private_key):
    run(project, folder)
    private_key.parent.chmod(0o777)
    _results, cache = run(project, folder)
    assert cache.hits == 0
    assert cache.warnings == [f"result cache not used: the cache key folder {private_key.parent} is "
                              "writable by other users (mode 0777)"]


@pytest.mark.skipif(not ROOT, reason="changing a file's owner needs root")
def test_a_key_owned_by_another_user_is_refused(project, folder, private_key):
    run(project, folder)
    os.chown(private_key, 4242, 4242)
    _results, cache = run(project, folder)
    assert cache.hits == 0
    assert cache.warnings == [f"result cache not used: the cache key {private_key} is owned by another "
                              "user (uid 4242)"]


def test_a_key_that_cannot_be_made_turns_the_cache_off(project, folder, tmp_path, monkeypatch):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(blocker))  # a file: no folder can be made in it
    reference = cold(project)
    results, cache = run(project, folder)
    assert comparable(results) == comparable(reference) and cache.path is None
    assert len(cache.warnings) == 1 and cache.warnings[0].startswith("result cache not used: cannot make")
    assert not folder.exists()  # nothing written without a key


def test_a_fifo_among_the_files_never_blocks_the_cache_lookup(project, folder):
    """The cache reads each file before the workers do: a FIFO is never opened for that."""
    import signal

    fifo = project / "pipe.py"
    os.mkfifo(fifo)
    items = [*discover(project), (str(fifo), "pipe.py")]
    cache = Cache.open(folder, project)

    class Hung(Exception):  # not an OSError: nothing on the way may take it for a read error
        pass

    def hung(*_):
        raise Hung("reading a FIFO blocked the run")
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        results = run_files(items, options_for(project, items), cache=cache)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    pipe = next(r for r in results if r.relpath == "pipe.py")
    assert [f.code for f in pipe.findings] == ["NPU002"]


@pytest.mark.parametrize("inside", ["", "sub"])
def test_a_key_inside_the_cache_folder_is_refused(project, tmp_path, monkeypatch, inside):
    """A restored cache folder would bring its own key: its MACs would verify."""
    folder = tmp_path / "shared"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(folder / inside))
    reference = cold(project)
    results, cache = run(project, folder)
    assert comparable(results) == comparable(reference) and cache.path is None
    key = folder / inside / "npu-migrate" / "cache-key"
    assert cache.warnings == [f"result cache not used: the cache key {key} is inside the cache folder "
                              f"{folder}; move the cache folder (--cache-dir) or set XDG_CONFIG_HOME elsewhere"]
    assert not key.exists()
