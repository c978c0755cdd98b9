"""scripts/ecosystem.py (issue #16, section 5): the logic of the ecosystem check, without network.

The check itself downloads pinned packages and runs for minutes; these tests cover what decides
its verdict: the pins file's shape, the comparison and its readable summary, the snapshot's
round trip, the diff digest's stability, and how skipped files are read from the tool's output.
"""

from __future__ import annotations

import copy
import importlib.util
import io
import json
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _load():
    spec = importlib.util.spec_from_file_location("_script_ecosystem", REPO / "scripts" / "ecosystem.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


eco = _load()


# ------------------------------------------------------------------ the pins file


def test_pins_file_is_well_formed():
    pins = eco.load_pins(eco.PINS)
    assert len(pins) >= 8
    for pin in pins:
        assert eco.VERSION.match(pin.version), pin
        assert eco.SHA256.match(pin.sha256), pin
        assert pin.kind in eco.KINDS
        assert pin.filename.endswith(eco.ARCHIVE_SUFFIXES[pin.kind])
        assert pin.category and pin.why and pin.ascend, f"{pin.name}: category, why and ascend are documented"
    assert len({p.name for p in pins}) == len(pins)


def test_pins_cover_the_issue_categories_and_ascend():
    pins = eco.load_pins(eco.PINS)
    categories = {p.category for p in pins}
    assert {"training", "inference", "quantization", "fine-tuning"} <= categories
    assert sum(p.ascend.startswith("yes") for p in pins) >= 2


def test_snapshot_covers_exactly_the_pins():
    snapshot = eco.load_snapshot(eco.SNAPSHOT)
    pins = {p.name: p for p in eco.load_pins(eco.PINS)}
    assert set(snapshot["packages"]) == set(pins)
    for name, record in snapshot["packages"].items():
        assert record["version"] == pins[name].version
        assert record["archive_sha256"] == pins[name].sha256
        assert eco.SHA256.match(record["diff_digest"])


@pytest.mark.parametrize("entry, problem", [
    ({"version": ">=1.0"}, "not an exact release number"),
    ({"version": "1.*"}, "not an exact release number"),
    ({"sha256": ""}, "`sha256` missing"),
    ({"sha256": "abc"}, "64 lowercase hex"),
    ({"kind": "egg"}, "not one of"),
    ({"kind": "wheel"}, "not a wheel file name"),
    ({"filename": "other-1.0.tar.gz"}, "is not demo 1.0"),
    ({"filename": "demo-1.0.1.tar.gz"}, "is not demo 1.0"),
])
def test_pin_problems_are_named(entry, problem):
    good = {"name": "demo", "version": "1.0", "kind": "sdist", "filename": "demo-1.0.tar.gz", "sha256": "a" * 64}
    assert eco.pin_problems({"package": [good]}) == []
    problems = eco.pin_problems({"package": [{**good, **entry}]})
    assert any(problem in p for p in problems), problems


def test_pin_problems_duplicates_and_empty():
    good = {"name": "demo", "version": "1.0", "kind": "sdist", "filename": "demo-1.0.tar.gz", "sha256": "a" * 64}
    assert eco.pin_problems({}) == ["no [[package]] entries"]
    assert any("listed twice" in p for p in eco.pin_problems({"package": [good, good]}))
    # normalised names: a wheel of optimum-quanto is optimum_quanto-...
    assert eco.pin_problems({"package": [{**good, "name": "optimum-quanto", "filename": "optimum_quanto-1.0.tar.gz"}]}) == []


def test_broken_pins_file_exits_2(tmp_path, capsys):
    pins = tmp_path / "pins.toml"
    pins.write_text('[[package]]\nname = "demo"\nversion = ">=1"\n', encoding="utf-8")
    assert eco.main(["--pins", str(pins), "--cache-dir", str(tmp_path)]) == 2
    assert "version" in capsys.readouterr().err


# ------------------------------------------------------------------ download (no network: file:// index)


def _index(tmp_path: Path, name: str, filename: str, data: bytes, listed_sha: str | None = None) -> str:
    files = tmp_path / "files"
    files.mkdir(exist_ok=True)
    (files / filename).write_bytes(data)
    page = tmp_path / "simple" / name
    page.mkdir(parents=True)
    fragment = f"#sha256={listed_sha}" if listed_sha else ""
    (page / "index.html").write_text(f'<html><body><a href="../../files/{filename}{fragment}">{filename}</a>'
                                     f'</body></html>', encoding="utf-8")
    return (tmp_path / "simple").as_uri()


def _tar(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_download_verifies_sha256_and_caches(tmp_path):
    import hashlib
    data = _tar({"demo-1.0/demo/__init__.py": b"import torch\n"})
    sha = hashlib.sha256(data).hexdigest()
    index = _index(tmp_path, "demo", "demo-1.0.tar.gz", data, sha)
    pin = eco.Pin("demo", "1.0", "sdist", "demo-1.0.tar.gz", sha)
    cache = tmp_path / "cache"
    archive = eco.download(pin, cache, [index], log=lambda *_: None)
    assert archive == cache / "demo-1.0.tar.gz" and archive.read_bytes() == data
    # the cache answers without the index
    assert eco.download(pin, cache, ["file:///nonexistent/simple"], log=lambda *_: None) == archive
    root = eco.extract(archive, tmp_path / "x", pin)
    assert root.name == "demo-1.0" and (root / "demo" / "__init__.py").is_file()


def test_download_rejects_a_foreign_file(tmp_path):
    data = _tar({"demo-1.0/setup.py": b""})
    index = _index(tmp_path, "demo", "demo-1.0.tar.gz", data)
    pin = eco.Pin("demo", "1.0", "sdist", "demo-1.0.tar.gz", "b" * 64)
    with pytest.raises(eco.DownloadError, match="the pin says"):
        eco.download(pin, tmp_path / "cache", [index], log=lambda *_: None)
    assert not (tmp_path / "cache" / "demo-1.0.tar.gz").exists()


def test_download_failure_exits_2_and_blames_the_network(tmp_path, capsys):
    pins = tmp_path / "pins.toml"
    pins.write_text('[[package]]\nname = "demo"\nversion = "1.0"\nkind = "sdist"\n'
                    f'filename = "demo-1.0.tar.gz"\nsha256 = "{"a" * 64}"\n', encoding="utf-8")
    code = eco.main(["--pins", str(pins), "--cache-dir", str(tmp_path / "cache"),
                     "--index-url", (tmp_path / "nowhere").as_uri()])
    err = capsys.readouterr().err
    assert code == 2
    assert "demo 1.0" in err and "network" in err and "not a regression" in err


def test_wheel_extracts_in_place(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("demo/__init__.py", "x = 1\n")
        zf.writestr("demo-1.0.dist-info/METADATA", "Name: demo\n")
    archive = tmp_path / "demo-1.0-py3-none-any.whl"
    archive.write_bytes(buffer.getvalue())
    pin = eco.Pin("demo", "1.0", "wheel", archive.name, "a" * 64)
    root = eco.extract(archive, tmp_path / "x", pin)
    assert (root / "demo" / "__init__.py").is_file()


# ------------------------------------------------------------------ digest and skipped files


def test_tree_diff_is_relative_and_ignores_the_shim(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    for tree in (src, out):
        (tree / "pkg").mkdir(parents=True)
        (tree / "pkg" / "same.py").write_text("a = 1\n")
    (src / "pkg" / "model.py").write_text("x.cuda()\n")
    (out / "pkg" / "model.py").write_text("x.to(npu_compat.device())\n")
    (out / "pkg" / "npu_compat").mkdir()
    (out / "pkg" / "npu_compat" / "__init__.py").write_text("# shim\n")
    (out / "requirements-npu.txt").write_text("torch_npu\n")
    diffs, shims = eco.tree_diff(src, out)
    assert sorted(diffs) == ["pkg/model.py", "requirements-npu.txt"]
    assert shims == ["pkg/npu_compat"]
    assert str(tmp_path) not in "".join(diffs.values())
    assert diffs["pkg/model.py"].startswith("--- a/pkg/model.py\n+++ b/pkg/model.py\n")
    assert eco.diff_stats(diffs["pkg/model.py"]) == (1, 1)
    # the same change under another temporary folder has the same digest
    other_src, other_out = tmp_path / "o" / "src", tmp_path / "o" / "out"
    import shutil
    shutil.copytree(src, other_src)
    shutil.copytree(out, other_out)
    record = eco.summarize({}, "", diffs, shims, str(src), 1, "")
    again = eco.summarize({}, "", eco.tree_diff(other_src, other_out)[0], shims, str(other_src), 1, "")
    assert record["diff_digest"] == again["diff_digest"]
    assert record["files"]["pkg/model.py"]["lines"] == [1, 1]


def test_skipped_from_report_reads_the_files_table():
    report = "\n".join([
        "| files skipped | 3 |",
        "| skipped: already NPU-aware (torch_npu used here or beside it) | 2 |",
        "| `acc/npu.py` | skipped: already NPU-aware (torch_npu used here or beside it) | 0 | 0 | 0 | 0 | 0 |",
        "| `acc/cuda.py` | skipped: already NPU-aware (torch_npu used here or beside it) | 0 | 0 | 0 | 0 | 0 |",
        "| `model.py` | would change | 3 | 1 | 0 | 0 | 0 |",
    ])
    assert eco.skipped_from_report(report) == [
        {"path": "acc/npu.py", "reason": "already NPU-aware (torch_npu used here or beside it)"},
        {"path": "acc/cuda.py", "reason": "already NPU-aware (torch_npu used here or beside it)"},
    ]


def test_skipped_from_json_takes_named_scopes_when_the_tool_gives_them():
    assert eco.skipped_from_json({"files_skipped": {"no CUDA trigger words": 3}}) is None
    payload = {"skipped": [
        {"path": "p/platform.py", "start_line": 10, "end_line": 40, "reason": "platform-aware branch"},
        {"path": "p/npu.py", "reason": "imports torch_npu"},
        {"path": "p/x.py", "lines": [3, 9], "reason": "or-chain"},
    ]}
    labels = [eco.skip_label(e) for e in eco.skipped_from_json(payload)]
    assert labels == ["p/platform.py:10-40 (platform-aware branch)", "p/npu.py (imports torch_npu)",
                      "p/x.py:3-9 (or-chain)"]
    record = eco.summarize(payload, "| `other.py` | skipped: x | 0 |", {}, [], "/tmp/r", 0, "")
    assert record["skipped"] == sorted(labels)  # the JSON wins over the report


def test_summarize_counts_per_file_and_names_problems():
    payload = {
        "files_scanned": 3, "files_changed": 1,
        "files_skipped": {"no CUDA trigger words": 1},
        "rewrites_by_code": {"NPU201": 2}, "findings_by_code": {"NPU990": 1, "NPU001": 1},
        "findings": [
            {"path": "a.py", "line": 1, "code": "NPU201", "fixable": True, "message": "m"},
            {"path": "a.py", "line": 2, "code": "NPU201", "fixable": True, "message": "m"},
            {"path": "b.py", "line": 5, "code": "NPU990", "fixable": False, "message": "m", "severity": "info"},
            {"path": "c.py", "line": 1, "code": "NPU001", "fixable": False, "message": "does not parse"},
        ],
        "errors": ["/tmp/eco/src/pkg/d.py: could not be written"],
    }
    record = eco.summarize(payload, "", {}, [], "/tmp/eco/src", 1, "")
    assert record["files"]["a.py"] == {"rewrites": {"NPU201": 2}}
    assert record["files"]["b.py"] == {"reported": {"NPU990": 1}}
    assert record["totals"] == {"rewrites": 2, "reported": 2, "findings": 4}
    assert record["problems"] == ["c.py:1: NPU001 does not parse"]
    assert record["errors"] == ["pkg/d.py: could not be written"]  # no temporary path
    assert record["severity"] == {"info": 1}
    crashed = eco.summarize({}, "", {}, [], "/tmp/eco/src", 2, "Traceback ...\nKeyError: /tmp/eco/src/x.py")
    assert crashed["errors"] and "exited 2" in crashed["errors"][0] and "/tmp/eco" not in crashed["errors"][0]


# ------------------------------------------------------------------ comparison and summary


def _record(**changes) -> dict:
    record = {
        "version": "1.0", "kind": "sdist", "archive_sha256": "a" * 64, "exit_code": 1,
        "files_scanned": 10, "files_changed": 2,
        "rewrites_by_code": {"NPU201": 3}, "findings_by_code": {"NPU990": 2, "NPU910": 1},
        "totals": {"rewrites": 3, "reported": 3, "findings": 6},
        "skipped_by_reason": {"already NPU-aware": 1, "no CUDA trigger words": 5},
        "skipped": ["acc/npu.py (already NPU-aware)"], "shim": ["pkg/npu_compat"],
        "problems": [], "errors": [], "warnings": [],
        "diff_digest": "1" * 64, "diff_files": 2,
        "files": {
            "pkg/a.py": {"diff": "aaaa", "lines": [2, 2], "rewrites": {"NPU201": 2}, "reported": {"NPU990": 1}},
            "pkg/b.py": {"diff": "bbbb", "lines": [1, 1], "rewrites": {"NPU201": 1}},
            "pkg/k.py": {"reported": {"NPU990": 1, "NPU910": 1}},
        },
    }
    record.update(changes)
    return record


def _snap(**packages) -> dict:
    return {"format": eco.SNAPSHOT_FORMAT, "tool_version": "0.1.0", "packages": packages}


def test_equal_snapshots_have_no_change():
    assert eco.compare(_snap(demo=_record()), _snap(demo=_record())) == []


def test_code_count_change_names_the_files():
    new = _record(findings_by_code={"NPU990": 1, "NPU910": 1})
    new["files"] = copy.deepcopy(new["files"])
    del new["files"]["pkg/a.py"]["reported"]
    lines = eco.compare(_snap(demo=_record()), _snap(demo=new))
    assert lines == ["demo 1.0:", "  report-only findings NPU990: 2 -> 1 (-1)", "      pkg/a.py: 1 -> 0"]


def test_new_code_and_skip_changes():
    new = _record(findings_by_code={"NPU990": 2, "NPU910": 1, "NPU916": 4},
                  skipped_by_reason={"already NPU-aware": 0, "no CUDA trigger words": 5}, skipped=[])
    new["files"] = {**new["files"], "pkg/v.py": {"reported": {"NPU916": 4}}}
    text = "\n".join(eco.compare(_snap(demo=_record()), _snap(demo=new)))
    assert "report-only findings NPU916: 0 -> 4 (+4)" in text
    assert "pkg/v.py: 0 -> 4" in text
    assert "skipped (already NPU-aware): 1 -> 0 (-1)" in text
    assert "no longer skipped: 1\n      acc/npu.py (already NPU-aware)" in text


def test_digest_change_names_changed_new_and_reverted_files():
    new = _record(diff_digest="2" * 64)
    new["files"] = copy.deepcopy(new["files"])
    new["files"]["pkg/a.py"].update(diff="cccc", lines=[3, 2])
    del new["files"]["pkg/b.py"]["diff"], new["files"]["pkg/b.py"]["lines"]
    new["files"]["pkg/k.py"].update(diff="dddd", lines=[1, 1])
    lines = eco.compare(_snap(demo=_record()), _snap(demo=new))
    text = "\n".join(lines)
    assert "diff digest changed: 111111111111 -> 222222222222" in text
    assert "diff changed: 1\n      pkg/a.py (+2/-2 -> +3/-2)" in text
    assert "now changed: 1\n      pkg/k.py" in text
    assert "no longer changed: 1\n      pkg/b.py" in text


def test_errors_exit_code_and_problems_are_shown():
    new = _record(exit_code=2, errors=["npu-migrate exited 2: boom"], problems=["x.py:1: NPU001 took longer than 60 s"])
    text = "\n".join(eco.compare(_snap(demo=_record()), _snap(demo=new)))
    assert "npu-migrate exit code: 1 -> 2" in text
    assert "NEW ERROR: 1\n      npu-migrate exited 2: boom" in text
    assert "newly unreadable (NPU001/NPU002): 1" in text


def test_added_removed_and_repinned_packages():
    old = _snap(demo=_record(), gone=_record())
    new = _snap(demo=_record(version="1.1"), fresh=_record())
    lines = eco.compare(old, new)
    assert "fresh: not in the snapshot (new pin: run --update)" in lines
    assert "gone: in the snapshot but no longer pinned (run --update)" in lines
    assert "  version: 1.0 -> 1.1 (pins changed: run --update)" in lines
    # a run limited to some packages compares only those
    assert eco.compare(old, new, only={"fresh"}) == ["fresh: not in the snapshot (new pin: run --update)"]


def test_long_lists_are_cut():
    items = [f"f{i}.py" for i in range(eco.NAME_LIMIT + 5)]
    assert eco._names(items)[-1] == "... and 5 more"
    assert len(eco._names(items)) == eco.NAME_LIMIT + 1


def test_snapshot_round_trip_one_line_per_file(tmp_path):
    snapshot = _snap(demo=_record(), other=_record(version="2.0"))
    text = eco.dump_snapshot(snapshot)
    assert json.loads(text) == snapshot
    assert '"pkg/a.py": {"diff": "aaaa", "lines": [2, 2], "reported": {"NPU990": 1}, "rewrites": {"NPU201": 2}}' in text
    path = tmp_path / "snapshot.json"
    path.write_text(text)
    assert eco.load_snapshot(path) == snapshot
    path.write_text(json.dumps({"format": 99, "packages": {}}))
    with pytest.raises(ValueError):
        eco.load_snapshot(path)


def test_totals_and_figures_text():
    records = {"demo": _record(), "other": _record(findings_by_code={"NPU916": 1})}
    total = eco.totals(records)
    assert total["files_scanned"] == 20
    assert total["findings_by_code"] == {"NPU910": 1, "NPU916": 1, "NPU990": 2}
    assert total["skipped_by_reason"]["no CUDA trigger words"] == 10
    text = eco.figures_text(records, {"demo": 1.0, "other": 2.0}, verbose=True)
    assert "total" in text and "NPU916" in text and "acc/npu.py (already NPU-aware)" in text


def test_keep_into_an_existing_folder_is_refused_before_any_download(tmp_path, capsys):
    keep = tmp_path / "kept"
    keep.mkdir()
    (keep / "mine.txt").write_text("the user's file\n")
    assert eco.main(["--keep", str(keep), "--cache-dir", str(tmp_path / "cache")]) == 2
    assert "already exists; name a new folder" in capsys.readouterr().err
    assert (keep / "mine.txt").read_text() == "the user's file\n"
    assert not (tmp_path / "cache").exists()  # nothing was downloaded


# ------------------------------------------------------------------ --from-keep (no second run)


def _kept_run(tmp_path: Path, findings: list[dict], exit_code: int | None) -> tuple[Path, Path]:
    """A pins file of one sdist and a --keep folder as run_package leaves it."""
    pins = tmp_path / "pins.toml"
    pins.write_text('[[package]]\nname = "demo"\nversion = "1.0"\nkind = "sdist"\n'
                    'filename = "demo-1.0.tar.gz"\nsha256 = "' + "0" * 64 + '"\n', encoding="utf-8")
    work = tmp_path / "kept" / "demo"
    (work / "src" / "demo-1.0").mkdir(parents=True)
    (work / "src" / "demo-1.0" / "m.py").write_text("x = t.cuda()\n")
    (work / "migrated").mkdir()
    (work / "migrated" / "m.py").write_text("x = t.npu()\n")
    payload = {"files_scanned": 1, "files_changed": 1, "findings": findings,
               "rewrites_by_code": {"NPU101": 1}, "findings_by_code": {}}
    (work / "npu-migrate.json").write_text(json.dumps(payload))
    (work / "npu-migrate.stderr").write_text("")
    if exit_code is not None:
        (work / "exit-code").write_text(f"{exit_code}\n")
    return pins, tmp_path / "kept"


_REWRITE = {"path": "m.py", "line": 1, "code": "NPU101", "fixable": True, "severity": "error", "message": "m"}
_NOTE = {"path": "m.py", "line": 1, "code": "NPU990", "fixable": False, "severity": "info", "message": "n"}


def test_from_keep_rebuilds_the_record_a_run_made(tmp_path):
    """The record read back from a kept tree is the one run_package built from the same output:
    per-file counts, the diff of the migrated copy, the exit status the run wrote."""
    pins, kept = _kept_run(tmp_path, [_REWRITE, _NOTE], exit_code=1)
    pin = eco.load_pins(pins)[0]
    run = eco.record_from_keep(pin, kept / "demo")
    assert run.record["exit_code"] == 1
    assert run.record["files"]["m.py"]["rewrites"] == {"NPU101": 1}
    assert run.record["files"]["m.py"]["reported"] == {"NPU990": 1}
    assert run.record["diff_files"] == 1 and "-x = t.cuda()" in run.diffs["m.py"]
    source = kept / "demo" / "src" / "demo-1.0"
    diffs, shims = eco.tree_diff(source, kept / "demo" / "migrated")
    payload = json.loads((kept / "demo" / "npu-migrate.json").read_text())
    assert run.record == eco.summarize(payload, "", diffs, shims, str(source), 1, "")


@pytest.mark.parametrize("findings, expected", [([_REWRITE, _NOTE], 0), ([_REWRITE, {**_NOTE, "severity": "warning"}], 1)])
def test_from_keep_without_the_exit_code_file_derives_it(tmp_path, findings, expected):
    """Trees kept before the exit-code file: 1 when a report-only finding above info is left."""
    pins, kept = _kept_run(tmp_path, findings, exit_code=None)
    assert eco.record_from_keep(eco.load_pins(pins)[0], kept / "demo").record["exit_code"] == expected


def test_from_keep_updates_and_compares_without_running_the_tool(tmp_path, capsys):
    pins, kept = _kept_run(tmp_path, [_REWRITE, _NOTE], exit_code=0)
    snapshot = tmp_path / "snapshot.json"
    common = ["--pins", str(pins), "--snapshot", str(snapshot), "--from-keep", str(kept),
              "--cache-dir", str(tmp_path / "cache")]
    assert eco.main([*common, "--update"]) == 0
    assert eco.main(common) == 0
    assert "no change" in capsys.readouterr().out
    assert not (tmp_path / "cache").exists()  # nothing downloaded
    # the kept output changes: the comparison names the package and the code
    (kept / "demo" / "npu-migrate.json").write_text(json.dumps(
        {"files_scanned": 1, "files_changed": 1, "findings": [_REWRITE, _NOTE, {**_NOTE, "line": 2}],
         "rewrites_by_code": {"NPU101": 1}, "findings_by_code": {"NPU990": 2}}))
    assert eco.main(common) == 1
    assert "NPU990" in capsys.readouterr().out


def test_from_keep_refuses_a_folder_without_the_package(tmp_path, capsys):
    pins, kept = _kept_run(tmp_path, [_REWRITE], exit_code=0)
    assert eco.main(["--pins", str(pins), "--from-keep", str(tmp_path / "elsewhere")]) == 2
    assert "no run of demo there" in capsys.readouterr().err
