"""The result cache (npu_migrate/cache.py): a warm run gives exactly the cold run's results, and
an entry is reused only while the file's bytes, the options and the tool are unchanged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from npu_migrate import cache as cache_mod
from npu_migrate import catalogue
from npu_migrate.cache import Cache
from npu_migrate.cli import main
from npu_migrate.discover import discover
from npu_migrate.model import Options
from npu_migrate.run import package_dirs, run_files

REPO = Path(__file__).resolve().parent.parent
NANOCHAT = REPO / "fixtures" / "projects" / "nanochat_mini"


@pytest.fixture
def project(tmp_path) -> Path:
    root = tmp_path / "proj"
    shutil.copytree(NANOCHAT, root)
    shutil.copy(REPO / "fixtures" / "notebooks" / "train_cuda.ipynb", root / "train_cuda.ipynb")
    shutil.copy(REPO / "fixtures" / "textfiles" / "launch.sh", root / "launch.sh")
    return root


def options_for(root: Path, items, **kw) -> Options:
    return Options(enabled=catalogue.enabled_codes(**kw), package_dirs=package_dirs(root, items))


def comparable(results) -> list:
    return [(r.relpath, r.new, r.original, r.skipped, r.suppressed, r.encoding, r.findings) for r in results]


def run(root: Path, folder: Path, options: Options | None = None):
    items = discover(root)
    options = options or options_for(root, items)
    cache = Cache.open(folder, root)
    results = run_files(items, options, cache=cache)
    cache.save(root)
    return results, cache


def test_warm_run_equals_cold_run_and_hits_every_file(project, tmp_path):
    folder = tmp_path / "cache"
    cold, first = run(project, folder)
    warm, second = run(project, folder)
    assert first.hits == 0 and first.misses == len(cold)
    assert second.hits == len(warm) and second.misses == 0
    assert comparable(warm) == comparable(cold)
    uncached = run_files(discover(project), options_for(project, discover(project)))
    assert comparable(uncached) == comparable(cold)
    assert any(r.changed for r in warm) and any(f.cell for r in warm for f in r.findings)


def test_an_edited_file_misses_and_gets_its_new_result(project, tmp_path):
    folder = tmp_path / "cache"
    run(project, folder)
    target = project / "nanochat_mini" / "common.py"
    target.write_text(target.read_text() + "\ntorch.cuda.empty_cache()\n")
    results, cache = run(project, folder)
    assert cache.misses == 1
    edited = next(r for r in results if r.relpath == "nanochat_mini/common.py")
    assert b"npu_compat.empty_cache()" in edited.new
    assert edited.original == target.read_bytes()


def test_other_options_or_another_tool_version_miss(project, tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    cold, _ = run(project, folder)
    items = discover(project)
    narrow, cache = run(project, folder, options_for(project, items, ignore=("NPU1",)))
    assert cache.hits == 0
    assert not any(f.code.startswith("NPU1") for r in narrow for f in r.findings)
    monkeypatch.setattr(cache_mod, "tool_fingerprint", lambda: "another version")
    again, cache = run(project, folder)
    assert cache.hits == 0 and comparable(again) == comparable(cold)


def test_a_corrupt_or_unwritable_cache_is_ignored(project, tmp_path):
    folder = tmp_path / "cache"
    cold, cache = run(project, folder)
    cache.path.write_text("{not json")
    again, reopened = run(project, folder)
    assert reopened.hits == 0 and comparable(again) == comparable(cold)
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    results, _ = run(project, blocked)  # the cache folder is a file: nothing cached, same results
    assert comparable(results) == comparable(cold)


def test_cli_cache_keeps_the_project_untouched_and_no_cache_writes_nothing(project, tmp_path):
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    folder = tmp_path / "cache"
    args = ["check", str(project), "--output-format", "json", "--isolated", "--cache-dir", str(folder)]
    cold = CliRunner().invoke(main, args)
    warm = CliRunner().invoke(main, args)
    assert cold.exit_code == warm.exit_code == 1
    assert json.loads(cold.stdout) == json.loads(warm.stdout)
    assert {p: p.read_bytes() for p in project.rglob("*") if p.is_file()} == before
    assert [p.name for p in folder.iterdir() if p.suffix == ".json"]

    none = tmp_path / "none"
    result = CliRunner().invoke(main, [*args[:-1], str(none), "--no-cache"])
    assert result.exit_code == 1 and not none.exists()


def test_migrate_after_a_cached_dry_run_writes_the_migration(project, tmp_path):
    folder = tmp_path / "cache"
    dry = CliRunner().invoke(main, [str(project), "--dry-run", "--cache-dir", str(folder), "-q"])
    assert dry.exit_code == 1
    written = CliRunner().invoke(main, [str(project), "--cache-dir", str(folder), "-q"])
    assert written.exit_code == 1
    assert "npu_compat" in (project / "nanochat_mini" / "common.py").read_text()
    assert (project / "npu_compat" / "__init__.py").is_file()
    # the migrated files are new content: they miss, and nothing is left to rewrite
    again = CliRunner().invoke(main, [str(project), "--dry-run", "--cache-dir", str(folder),
                                      "--output-format", "json"])
    assert json.loads(again.stdout)["files_changed"] == 0
