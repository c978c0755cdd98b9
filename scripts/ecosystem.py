#!/usr/bin/env python3
"""The ecosystem check (issue #16, section 5): npu-migrate over pinned releases of real CUDA-heavy
packages, compared with a committed snapshot, as ruff's ecosystem check does.

The packages are pinned in fixtures/ecosystem/pins.toml (exact version, archive file name, its
sha256). At run time each archive is downloaded from the package registry (PEP 503 Simple API,
the protocol pip speaks; nothing of the packages is committed) into a cache folder outside the
repository, checked against its sha256, extracted into a temporary folder and migrated:

    npu-migrate migrate PKGDIR --output COPY --output-format json --report REPORT.md
                --no-cache --isolated -j 1

(`--output` writes the migrated copy elsewhere, so the source stays as released and the script
diffs the two trees itself; the report names the files the run skipped). For each package the
script keeps: files scanned and changed, rewrites and report-only findings per code (in total
and per file), the skipped files and scopes with their reasons, the tool's errors and the files
it could not parse, and a digest of the diff (per file: sha256 of the unified diff between the
released file and the migrated one, labelled with relative paths only; per package: sha256 over
the sorted per-file digests). The shim the run injects is not part of the digest (it is the
tool's, not the package's): only where it goes is kept.

    python scripts/ecosystem.py                     # compare with the snapshot: exit 1 on a change
    python scripts/ecosystem.py --update            # accept the current results as the snapshot
    python scripts/ecosystem.py --package deepspeed --show-diff   # one package, print changed diffs
    python scripts/ecosystem.py --json figures.json # also write every figure as JSON
    python scripts/ecosystem.py --keep /tmp/eco     # keep the trees, copies and reports to read
    python scripts/ecosystem.py --all --from-keep /tmp/eco --update   # accept that kept run, no second run

Why not `pip download --no-binary :all:`? For a source distribution pip prepares its metadata,
which runs the package's build backend (setup.py of deepspeed, vllm, xformers: code from the
internet, seconds per package, and it fails without CUDA toolchains). The script fetches the
pinned file itself from the same Simple API and verifies its sha256, so no code of the packages
ever runs.

Exit codes: 0 the results equal the snapshot; 1 they differ (or the tool failed on a package),
with a readable summary; 2 a download failed or an archive does not match its pin (a network or
registry problem, not a regression), or the pins or the snapshot cannot be read.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import hashlib
import html
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parent.parent
PINS = REPO / "fixtures" / "ecosystem" / "pins.toml"
SNAPSHOT = REPO / "fixtures" / "ecosystem" / "snapshot.json"
DEFAULT_INDEX = "https://pypi.org/simple"
SNAPSHOT_FORMAT = 1
KINDS = ("sdist", "wheel")
ARCHIVE_SUFFIXES = {"sdist": (".tar.gz", ".zip"), "wheel": (".whl",)}
VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
SHIM_NAME = "npu_compat"
# codes of files the tool could not read or parse (NPU001 parse, NPU002 decoding/notebook)
PROBLEM_CODES = ("NPU001", "NPU002")
# how many files a summary names under one changed item before it says "... and N more"
NAME_LIMIT = 8


class DownloadError(Exception):
    """The registry could not be reached, or served something other than the pinned file."""


class PinsError(Exception):
    """The pins file is malformed."""


# ------------------------------------------------------------------ pins


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    kind: str  # "sdist" or "wheel"
    filename: str
    sha256: str
    category: str = ""
    ascend: str = ""
    why: str = ""
    slow: bool = False  # left out of a plain run (CI); `--all` or `--package NAME` runs it


def pin_problems(data: dict) -> list[str]:
    """Everything wrong with the parsed pins file (empty: well formed)."""
    problems = []
    packages = data.get("package")
    if not isinstance(packages, list) or not packages:
        return ["no [[package]] entries"]
    seen = set()
    for i, entry in enumerate(packages):
        where = f"package #{i + 1}"
        if not isinstance(entry, dict):
            problems.append(f"{where}: not a table")
            continue
        name = entry.get("name")
        where = f"package {name!r}" if isinstance(name, str) else where
        missing = [key for key in ("name", "version", "kind", "filename", "sha256")
                   if not isinstance(entry.get(key), str) or not entry.get(key)]
        problems += [f"{where}: `{key}` missing or not a string" for key in missing]
        version = entry.get("version")
        if isinstance(version, str) and version and not VERSION.match(version):
            problems.append(f"{where}: version {version!r} is not an exact release number")
        if missing:
            continue
        if name in seen:
            problems.append(f"{where}: listed twice")
        seen.add(name)
        if entry["kind"] not in KINDS:
            problems.append(f"{where}: kind {entry['kind']!r} is not one of {', '.join(KINDS)}")
        elif not entry["filename"].endswith(ARCHIVE_SUFFIXES[entry["kind"]]):
            problems.append(f"{where}: {entry['filename']!r} is not a {entry['kind']} file name")
        if not SHA256.match(entry["sha256"]):
            problems.append(f"{where}: sha256 is not 64 lowercase hex digits")
        stem = re.sub(r"[-_.]+", "_", entry["name"]).lower()
        fname = re.sub(r"[-_.]+", "_", entry["filename"]).lower()
        version = re.sub(r"[-_.]+", "_", entry["version"]).lower()
        # the release's own file: the version is followed by a tag or the suffix, not more digits
        # (demo-1.0.1.tar.gz is not demo 1.0)
        if not re.match(rf"{re.escape(stem)}_{re.escape(version)}_(?!\d)", fname):
            problems.append(f"{where}: {entry['filename']!r} is not {entry['name']} {entry['version']}")
        if "/" in entry["filename"] or "\\" in entry["filename"]:
            problems.append(f"{where}: file name holds a path separator")
        if not isinstance(entry.get("slow", False), bool):
            problems.append(f"{where}: `slow` is not true or false")
    return problems


def load_pins(path: Path) -> list[Pin]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise PinsError(f"{path}: {exc}") from exc
    problems = pin_problems(data)
    if problems:
        raise PinsError(f"{path}: " + "; ".join(problems))
    fields = Pin.__dataclass_fields__
    return [Pin(**{k: v for k, v in entry.items() if k in fields}) for entry in data["package"]]


# ------------------------------------------------------------------ download


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _fetch(url: str, timeout: float) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "npu-migrate-ecosystem-check"})
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (http(s)/file URLs we build)
        return response.read()


def index_links(page: str, base: str) -> dict[str, str]:
    """File name -> absolute URL, from a PEP 503 Simple API project page."""
    links = {}
    for match in re.finditer(r"<a\s[^>]*href=\"([^\"]+)\"[^>]*>([^<]+)</a>", page, re.IGNORECASE):
        href, text = html.unescape(match.group(1)), html.unescape(match.group(2)).strip()
        links[text] = urllib.parse.urljoin(base, href)
    return links


def project_url(index: str, name: str) -> str:
    url = f"{index.rstrip('/')}/{normalize(name)}/"
    return url + "index.html" if url.startswith("file:") else url


def download(pin: Pin, cache: Path, indexes: list[str], timeout: float = 120.0, log=print) -> Path:
    """The pinned archive, from the cache or the first index that has it; sha256 verified."""
    target = cache / pin.filename
    if target.is_file():
        if sha256_file(target) == pin.sha256:
            return target
        target.unlink()  # a truncated or foreign file: fetch again
    errors = []
    for index in indexes:
        page_url = project_url(index, pin.name)
        try:
            links = index_links(_fetch(page_url, timeout).decode("utf-8", "replace"), page_url)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            errors.append(f"{page_url}: {exc}")
            continue
        url = links.get(pin.filename)
        if url is None:
            errors.append(f"{page_url}: no file {pin.filename}")
            continue
        fragment = urllib.parse.urlparse(url).fragment
        if fragment.startswith("sha256=") and fragment[7:] != pin.sha256:
            raise DownloadError(f"{pin.filename}: the index lists sha256 {fragment[7:]}, the pin says "
                                f"{pin.sha256} (the release was replaced, or the pin is wrong)")
        log(f"  downloading {pin.filename} from {urllib.parse.urlparse(url).netloc or index}")
        for attempt in (1, 2):
            try:
                data = _fetch(url.split("#", 1)[0], timeout)
                break
            except (urllib.error.URLError, OSError) as exc:
                if attempt == 2:
                    errors.append(f"{url}: {exc}")
                    data = None
        if data is None:
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest != pin.sha256:
            raise DownloadError(f"{pin.filename}: downloaded file has sha256 {digest}, the pin says {pin.sha256}")
        cache.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + f".{os.getpid()}.part")
        part.write_bytes(data)
        os.replace(part, target)
        return target
    raise DownloadError(f"{pin.name} {pin.version}: " + "; ".join(errors))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def extract(archive: Path, into: Path, pin: Pin) -> Path:
    """Unpack the archive under `into`; the folder that holds the package's tree."""
    into.mkdir(parents=True)
    if archive.name.endswith(".tar.gz"):
        with tarfile.open(archive) as tar:
            tar.extractall(into, filter="data")
    else:
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(into)  # zipfile drops absolute paths and `..`
    if pin.kind == "sdist":
        entries = [p for p in into.iterdir()]
        if len(entries) == 1 and entries[0].is_dir():
            return entries[0]
    return into


# ------------------------------------------------------------------ one package


def unified_diff(rel: str, old: bytes, new: bytes) -> str:
    a = old.decode("utf-8", "surrogateescape").splitlines(keepends=True)
    b = new.decode("utf-8", "surrogateescape").splitlines(keepends=True)
    lines = difflib.unified_diff(a, b, f"a/{rel}", f"b/{rel}", n=3)
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def tree_diff(source: Path, copy_: Path, shim_name: str = SHIM_NAME) -> tuple[dict[str, str], list[str]]:
    """Relative path -> unified diff for every file the migrated copy adds or changes, and the
    folders of the injected shim (not diffed: the shim is the tool's, not the package's)."""
    diffs: dict[str, str] = {}
    shims: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(copy_):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath, name)
            rel = path.relative_to(copy_).as_posix()
            original = source / rel
            if not original.is_file() or original.is_symlink():
                parts = rel.split("/")
                if shim_name in parts[:-1]:
                    shims.add("/".join(parts[: parts.index(shim_name) + 1]))
                    continue
                diffs[rel] = unified_diff(rel, b"", path.read_bytes())
                continue
            old, new = original.read_bytes(), path.read_bytes()
            if old != new:
                diffs[rel] = unified_diff(rel, old, new)
    return diffs, sorted(shims)


def diff_stats(diff: str) -> tuple[int, int]:
    plus = minus = 0
    for line in diff.splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            plus += 1
        elif line.startswith("-") and not line.startswith("---"):
            minus += 1
    return plus, minus


SKIP_ROW = re.compile(r"^\| `(?P<path>(?:[^`]|``)+)` \| skipped: (?P<reason>.+?) \|")
LINE_KEYS = (("start_line", "end_line"), ("line_start", "line_end"), ("first_line", "last_line"),
             ("start", "end"), ("line", "end_line"))


def skipped_from_json(payload: dict) -> Optional[list[dict]]:
    """Named skips if the JSON output lists them (path, reason, optional line range), else None."""
    for key, value in payload.items():
        if "skip" not in key or not isinstance(value, list):
            continue
        if value and not all(isinstance(v, dict) and "path" in v for v in value):
            continue
        entries = []
        for item in value:
            entry = {"path": str(item["path"]), "reason": str(item.get("reason", item.get("kind", "")))}
            lines = item.get("lines") or item.get("line_range") or item.get("range")
            if lines is None:
                for first, last in LINE_KEYS:
                    if item.get(first) is not None:
                        lines = [item.get(first), item.get(last, item.get(first))]
                        break
            if isinstance(lines, (list, tuple)) and lines:
                entry["lines"] = f"{lines[0]}-{lines[-1]}"
            elif lines is not None:
                entry["lines"] = str(lines)
            entries.append(entry)
        return entries
    return None


def skipped_from_report(report: str) -> list[dict]:
    """Skipped files named in the migration report's Files table (`skipped: reason`)."""
    entries = []
    for line in report.splitlines():
        match = SKIP_ROW.match(line)
        if match:
            entries.append({"path": match.group("path").replace("``", "`"), "reason": match.group("reason")})
    return entries


def skip_label(entry: dict) -> str:
    where = entry["path"] + (f":{entry['lines']}" if entry.get("lines") else "")
    return f"{where} ({entry['reason']})" if entry.get("reason") else where


def summarize(payload: dict, report: str, diffs: dict[str, str], shims: list[str], root: str,
              exit_code: int, stderr: str) -> dict:
    """The stable record of one package's run (what the snapshot holds)."""
    findings = payload.get("findings", [])
    per_file: dict[str, dict] = {}
    severity: Counter = Counter()
    for f in findings:
        entry = per_file.setdefault(f["path"], {})
        bucket = entry.setdefault("rewrites" if f.get("fixable") else "reported", {})
        bucket[f["code"]] = bucket.get(f["code"], 0) + 1
        if "severity" in f:
            severity[str(f["severity"])] += 1
    for rel, diff in diffs.items():
        entry = per_file.setdefault(rel, {})
        entry["diff"] = hashlib.sha256(diff.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        entry["lines"] = list(diff_stats(diff))
    named = skipped_from_json(payload)
    if named is None:
        named = skipped_from_report(report)
    problems = sorted({f"{f['path']}:{f.get('line', 0)}: {f['code']} {f.get('message', '')}"
                       for f in findings if f["code"] in PROBLEM_CODES})
    errors = [_unroot(str(e), root) for e in payload.get("errors", [])]
    warnings = [_unroot(str(w), root) for w in payload.get("warnings", [])]
    if exit_code not in (0, 1):
        errors.append(f"npu-migrate exited {exit_code}: {_unroot(stderr.strip()[-2000:], root)}")
    elif "Traceback (most recent call last)" in stderr:
        errors.append("traceback on stderr: " + _unroot(stderr.strip()[-2000:], root))
    digest = hashlib.sha256()
    for rel in sorted(diffs):
        digest.update(rel.encode("utf-8", "surrogateescape") + b"\0" + per_file[rel]["diff"].encode() + b"\n")
    rewrites = dict(sorted(payload.get("rewrites_by_code", {}).items()))
    reported = dict(sorted(payload.get("findings_by_code", {}).items()))
    record = {
        "exit_code": exit_code,
        "files_scanned": payload.get("files_scanned", 0),
        "files_changed": payload.get("files_changed", 0),
        "rewrites_by_code": rewrites,
        "findings_by_code": reported,
        "totals": {"rewrites": sum(rewrites.values()), "reported": sum(reported.values()),
                   "findings": len(findings)},
        "skipped_by_reason": dict(sorted(payload.get("files_skipped", {}).items())),
        "skipped": sorted(skip_label(e) for e in named),
        "shim": shims,
        "problems": problems,
        "errors": errors,
        "warnings": warnings,
        "diff_digest": digest.hexdigest(),
        "diff_files": len(diffs),
        "files": dict(sorted(per_file.items())),
    }
    if severity:
        record["severity"] = dict(sorted(severity.items()))
    return record


def _unroot(text: str, root: str) -> str:
    return text.replace(root + os.sep, "").replace(root, "<root>")


@dataclass
class Run:
    record: dict
    seconds: float
    diffs: dict[str, str] = field(default_factory=dict)


def run_package(pin: Pin, archive: Path, work: Path, jobs: int, timeout: float,
                tool: list[str]) -> Run:
    source = extract(archive, work / "src", pin)
    copy_ = work / "migrated"
    report = work / "report.md"
    command = [*tool, "migrate", str(source), "--output", str(copy_), "--output-format", "json",
               "--report", str(report), "--no-cache", "--isolated", "--no-color", "-j", str(jobs)]
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200")
    started = time.perf_counter()
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=work, check=False)
        exit_code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        exit_code, stdout = -1, ""
        stderr = f"timed out after {timeout:.0f} s: {exc.stderr or ''}"
    seconds = time.perf_counter() - started
    (work / "npu-migrate.json").write_text(stdout, encoding="utf-8")
    (work / "npu-migrate.stderr").write_text(stderr, encoding="utf-8")
    (work / "exit-code").write_text(f"{exit_code}\n", encoding="utf-8")
    try:
        payload = json.loads(stdout) if stdout.strip() else {}
    except json.JSONDecodeError as exc:
        payload = {}
        stderr += f"\n(the JSON output does not parse: {exc})"
        exit_code = exit_code if exit_code not in (0, 1) else 3
    report_text = report.read_text(encoding="utf-8", errors="replace") if report.is_file() else ""
    diffs, shims = tree_diff(source, copy_) if copy_.is_dir() else ({}, [])
    record = summarize(payload, report_text, diffs, shims, str(source), exit_code, stderr)
    return Run(record, seconds, diffs)


def derived_exit_code(payload: dict) -> int:
    """The exit status `migrate` gives for a parsed JSON output: 1 when a report-only finding above
    info is left, else 0 (the README's exit codes). For kept trees older than the `exit-code` file."""
    return int(any(not f.get("fixable") and f.get("severity") != "info" for f in payload.get("findings", [])))


def record_from_keep(pin: Pin, work: Path) -> Run:
    """One package's record rebuilt from a `--keep` folder, without running the tool again: its
    JSON output, report, stderr and exit status, and the diff of the migrated copy against the
    source it kept. The same record run_package makes (a tree that did not finish is an error)."""
    output = work / "npu-migrate.json"
    sources = work / "src"
    if not output.is_file() or not sources.is_dir():
        raise FileNotFoundError(f"{work}: not a finished run of {pin.name} (no npu-migrate.json or src/)")
    stdout = output.read_text(encoding="utf-8")
    stderr_path = work / "npu-migrate.stderr"
    stderr = stderr_path.read_text(encoding="utf-8") if stderr_path.is_file() else ""
    try:
        payload = json.loads(stdout) if stdout.strip() else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"{output}: the JSON output does not parse: {exc}") from None
    code_path = work / "exit-code"
    exit_code = int(code_path.read_text().strip()) if code_path.is_file() else derived_exit_code(payload)
    source = sources
    if pin.kind == "sdist":
        entries = list(sources.iterdir())
        if len(entries) == 1 and entries[0].is_dir():
            source = entries[0]
    copy_ = work / "migrated"
    report = work / "report.md"
    report_text = report.read_text(encoding="utf-8", errors="replace") if report.is_file() else ""
    diffs, shims = tree_diff(source, copy_) if copy_.is_dir() else ({}, [])
    return Run(summarize(payload, report_text, diffs, shims, str(source), exit_code, stderr), 0.0, diffs)


# ------------------------------------------------------------------ comparison


def _delta(old: int, new: int) -> str:
    return f"{old} -> {new} ({new - old:+d})"


def _names(items: list[str], limit: int = NAME_LIMIT) -> list[str]:
    shown = items[:limit]
    more = len(items) - len(shown)
    return shown + ([f"... and {more} more"] if more > 0 else [])


def _file_counts(record: dict, bucket: str, code: str) -> dict[str, int]:
    return {path: entry[bucket][code] for path, entry in record.get("files", {}).items()
            if code in entry.get(bucket, {})}


def compare_package(old: dict, new: dict) -> list[str]:
    """Readable lines for every difference between two records of one package (empty: equal)."""
    lines: list[str] = []
    for key in ("version", "kind", "archive_sha256"):
        if old.get(key) != new.get(key):
            lines.append(f"{key}: {old.get(key)} -> {new.get(key)} (pins changed: run --update)")
    if old.get("exit_code") != new.get("exit_code"):
        lines.append(f"npu-migrate exit code: {old.get('exit_code')} -> {new.get('exit_code')}")
    for key, label in (("files_scanned", "files scanned"), ("files_changed", "files changed"),
                       ("diff_files", "files in the diff")):
        if old.get(key, 0) != new.get(key, 0):
            lines.append(f"{label}: {_delta(old.get(key, 0), new.get(key, 0))}")
    for key, bucket, label in (("rewrites_by_code", "rewrites", "rewrites"),
                               ("findings_by_code", "reported", "report-only findings")):
        before, after = old.get(key, {}), new.get(key, {})
        for code in sorted(set(before) | set(after)):
            if before.get(code, 0) == after.get(code, 0):
                continue
            lines.append(f"{label} {code}: {_delta(before.get(code, 0), after.get(code, 0))}")
            was, now = _file_counts(old, bucket, code), _file_counts(new, bucket, code)
            moved = [f"{path}: {was.get(path, 0)} -> {now.get(path, 0)}"
                     for path in sorted(set(was) | set(now)) if was.get(path, 0) != now.get(path, 0)]
            lines.extend("    " + m for m in _names(moved))
    for code in sorted(set(old.get("severity", {})) | set(new.get("severity", {}))):
        a, b = old.get("severity", {}).get(code, 0), new.get("severity", {}).get(code, 0)
        if a != b:
            lines.append(f"severity {code}: {_delta(a, b)}")
    before, after = old.get("skipped_by_reason", {}), new.get("skipped_by_reason", {})
    for reason in sorted(set(before) | set(after)):
        if before.get(reason, 0) != after.get(reason, 0):
            lines.append(f"skipped ({reason}): {_delta(before.get(reason, 0), after.get(reason, 0))}")
    for key, gone, came in (("skipped", "no longer skipped", "newly skipped"),
                            ("problems", "no longer unreadable", "newly unreadable (NPU001/NPU002)"),
                            ("errors", "error gone", "NEW ERROR"),
                            ("warnings", "warning gone", "new warning"),
                            ("shim", "shim no longer at", "shim now at")):
        a, b = set(old.get(key, [])), set(new.get(key, []))
        if a - b:
            lines.append(f"{gone}: {len(a - b)}")
            lines.extend("    " + x for x in _names(sorted(a - b)))
        if b - a:
            lines.append(f"{came}: {len(b - a)}")
            lines.extend("    " + x for x in _names(sorted(b - a)))
    if old.get("diff_digest") != new.get("diff_digest"):
        was = {p: e for p, e in old.get("files", {}).items() if "diff" in e}
        now = {p: e for p, e in new.get("files", {}).items() if "diff" in e}
        changed = [f"{p} (+{was[p]['lines'][0]}/-{was[p]['lines'][1]} -> +{now[p]['lines'][0]}/-{now[p]['lines'][1]})"
                   for p in sorted(set(was) & set(now)) if was[p]["diff"] != now[p]["diff"]]
        lines.append(f"diff digest changed: {old.get('diff_digest', '')[:12]} -> {new.get('diff_digest', '')[:12]}")
        for label, items in (("diff changed", changed),
                             ("now changed", sorted(set(now) - set(was))),
                             ("no longer changed", sorted(set(was) - set(now)))):
            if items:
                lines.append(f"  {label}: {len(items)}")
                lines.extend("    " + x for x in _names(items))
    return lines


def compare(old: dict, new: dict, only: Optional[set[str]] = None) -> list[str]:
    """The readable summary of every change between two snapshots (empty: equal).

    `only`: the packages this run covered; the others are not compared."""
    lines: list[str] = []
    before, after = old.get("packages", {}), new.get("packages", {})
    names = sorted(set(before) | set(after))
    if only is not None:
        names = [n for n in names if n in only]
    for name in names:
        if name not in before:
            lines.append(f"{name}: not in the snapshot (new pin: run --update)")
            continue
        if name not in after:
            lines.append(f"{name}: in the snapshot but no longer pinned (run --update)")
            continue
        diff = compare_package(before[name], after[name])
        if diff:
            lines.append(f"{name} {after[name].get('version', '')}:")
            lines.extend("  " + line for line in diff)
    return lines


# ------------------------------------------------------------------ snapshot I/O


def dump_snapshot(snapshot: dict) -> str:
    """JSON with one line per file entry (a reviewable diff, a file a tenth of the indented size)."""
    data = copy.deepcopy(snapshot)
    tokens: dict[str, str] = {}
    for pkg in data.get("packages", {}).values():
        for path, entry in pkg.get("files", {}).items():
            token = f"@@{len(tokens)}@@"
            tokens[token] = json.dumps(entry, sort_keys=True, separators=(", ", ": "))
            pkg["files"][path] = token
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False)
    text = re.sub(r'"(@@\d+@@)"', lambda m: tokens[m.group(1)], text)
    return text + "\n"


def load_snapshot(path: Path) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("format") != SNAPSHOT_FORMAT or not isinstance(data.get("packages"), dict):
        raise ValueError(f"{path}: not a format-{SNAPSHOT_FORMAT} ecosystem snapshot")
    return data


# ------------------------------------------------------------------ figures


def totals(records: dict[str, dict]) -> dict:
    total: dict[str, Any] = {"packages": len(records)}
    for key in ("files_scanned", "files_changed", "diff_files"):
        total[key] = sum(r.get(key, 0) for r in records.values())
    for key in ("rewrites_by_code", "findings_by_code", "skipped_by_reason", "severity"):
        counter: Counter = Counter()
        for r in records.values():
            counter.update(r.get(key, {}))
        total[key] = dict(sorted(counter.items()))
    total["totals"] = {k: sum(r["totals"][k] for r in records.values()) for k in ("rewrites", "reported", "findings")}
    total["skipped_named"] = sum(len(r.get("skipped", [])) for r in records.values())
    total["problems"] = sum(len(r.get("problems", [])) for r in records.values())
    total["errors"] = sum(len(r.get("errors", [])) for r in records.values())
    return total


def _rule_names() -> dict[str, str]:
    try:
        from npu_migrate import catalogue
        return {code: rule.name for code, rule in catalogue.rules().items()}
    except Exception:  # noqa: BLE001 (names are decoration)
        return {}


def figures_text(records: dict[str, dict], seconds: dict[str, float], verbose: bool = False) -> str:
    names = _rule_names()
    out = []
    header = f"{'package':<16}{'version':<10}{'files':>7}{'changed':>8}{'rewrites':>9}{'reported':>9}" \
             f"{'skipped':>8}{'named':>6}{'errors':>7}{'time':>8}"
    out.append(header)
    out.append("-" * len(header))
    for name, r in records.items():
        skipped = sum(r["skipped_by_reason"].values())
        out.append(f"{name:<16}{r.get('version', ''):<10}{r['files_scanned']:>7}{r['files_changed']:>8}"
                   f"{r['totals']['rewrites']:>9}{r['totals']['reported']:>9}{skipped:>8}"
                   f"{len(r['skipped']):>6}{len(r['errors']) + len(r['problems']):>7}"
                   f"{seconds.get(name, 0):>7.1f}s")
    t = totals(records)
    out.append("-" * len(header))
    out.append(f"{'total':<26}{t['files_scanned']:>7}{t['files_changed']:>8}{t['totals']['rewrites']:>9}"
               f"{t['totals']['reported']:>9}{sum(t['skipped_by_reason'].values()):>8}{t['skipped_named']:>6}"
               f"{t['errors'] + t['problems']:>7}{sum(seconds.values()):>7.1f}s")
    out.append("")
    codes = sorted(set(t["rewrites_by_code"]) | set(t["findings_by_code"]))
    cols = list(records)
    out.append("per code (R rewrites, F report-only findings):")
    out.append(f"{'code':<8}{'':<3}{'rule':<30}" + "".join(f"{c[:10]:>11}" for c in cols) + f"{'total':>8}")
    for code in codes:
        for kind, key in (("R", "rewrites_by_code"), ("F", "findings_by_code")):
            if code not in t[key]:
                continue
            row = "".join(f"{records[c].get(key, {}).get(code, 0) or '.':>11}" for c in cols)
            out.append(f"{code:<8}{kind:<3}{names.get(code, '')[:29]:<30}{row}{t[key][code]:>8}")
    out.append("")
    out.append("skipped (reason: count per package):")
    for reason, count in t["skipped_by_reason"].items():
        row = ", ".join(f"{n} {r['skipped_by_reason'].get(reason, 0)}" for n, r in records.items()
                        if r["skipped_by_reason"].get(reason))
        out.append(f"  {reason}: {count} ({row})")
    if t.get("severity"):
        out.append("severity: " + ", ".join(f"{k} {v}" for k, v in t["severity"].items()))
    for name, r in records.items():
        if verbose and r["skipped"]:
            out.append(f"{name}: skipped files and scopes ({len(r['skipped'])}):")
            out.extend(f"    {s}" for s in r["skipped"])
        if r["errors"] or r["problems"]:
            out.append(f"{name}: tool errors and unreadable files:")
            out.extend(f"    {s}" for s in r["errors"] + r["problems"])
    return "\n".join(out)


def git_state() -> str:
    try:
        head = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%h %s"], capture_output=True,
                              text=True, check=False, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "npu_migrate", "rules"],
                               capture_output=True, text=True, check=False, timeout=30).stdout.strip()
        return head + (" (+ uncommitted changes under npu_migrate/ or rules/)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def tool_version(tool: list[str]) -> str:
    proc = subprocess.run([*tool, "--version"], capture_output=True, text=True, check=False, timeout=120)
    return proc.stdout.strip().split()[-1] if proc.stdout.strip() else "unknown"


# ------------------------------------------------------------------ main


def default_cache() -> Path:
    env = os.environ.get("NPU_MIGRATE_ECOSYSTEM_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "npu-migrate-ecosystem"


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pins", type=Path, default=PINS)
    parser.add_argument("--snapshot", type=Path, default=SNAPSHOT)
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="downloaded archives (default $NPU_MIGRATE_ECOSYSTEM_CACHE, else "
                             "~/.cache/npu-migrate-ecosystem)")
    parser.add_argument("--index-url", action="append", default=None,
                        help=f"PEP 503 Simple API to fetch from, tried in order; repeatable (default {DEFAULT_INDEX})")
    parser.add_argument("--package", action="append", default=None, help="only this package; repeatable")
    parser.add_argument("--all", action="store_true", help="also the packages pinned `slow = true`")
    parser.add_argument("--update", action="store_true", help="write the results as the new snapshot")
    parser.add_argument("--json", type=Path, default=None, help="write every figure to this JSON file")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep sources, migrated copies, reports and JSON output in this new folder")
    parser.add_argument("--from-keep", type=Path, default=None,
                        help="read the results from this earlier --keep folder instead of running the tool "
                             "(compare or --update without a second run; the packages it holds)")
    parser.add_argument("--show-diff", action="store_true", help="print the current diff of every file whose diff changed")
    parser.add_argument("--download-only", action="store_true", help="fill the cache and stop")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="npu-migrate worker processes (default 1)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per package run (default 1800)")
    parser.add_argument("-v", "--verbose", action="store_true", help="name every skipped file and scope")
    return parser.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.keep and args.keep.exists():  # never mix two runs' trees (nor delete what is there)
        print(f"error: --keep {args.keep}: already exists; name a new folder", file=sys.stderr)
        return 2
    try:
        pins = load_pins(args.pins)
    except PinsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.package:
        unknown = set(args.package) - {p.name for p in pins}
        if unknown:
            print(f"error: not pinned: {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        pins = [p for p in pins if p.name in args.package]
    elif not args.all:
        slow = [p.name for p in pins if p.slow]
        pins = [p for p in pins if not p.slow]
        if slow:
            print(f"(not run: {', '.join(slow)}, pinned slow = true; --all runs them)")
    cache = args.cache_dir or default_cache()
    indexes = args.index_url or [DEFAULT_INDEX]

    if args.from_keep is not None:
        if args.keep or args.download_only:
            print("error: --from-keep reads an earlier run: it goes with neither --keep nor --download-only",
                  file=sys.stderr)
            return 2
        kept = [p for p in pins if (args.from_keep / p.name).is_dir()]
        missing = [p.name for p in pins if p not in kept]
        if missing and (args.package or not kept):
            print(f"error: --from-keep {args.from_keep}: no run of {', '.join(missing)} there", file=sys.stderr)
            return 2
        if missing:
            print(f"(not in {args.from_keep}: {', '.join(missing)}; their snapshot records stay)")
        pins = kept

    started = time.perf_counter()
    archives: dict[str, Path] = {}
    failed = []
    for pin in pins if args.from_keep is None else []:
        try:
            archives[pin.name] = download(pin, cache, indexes)
        except DownloadError as exc:
            failed.append(str(exc))
    download_seconds = time.perf_counter() - started
    if failed:
        print("error: download failed (a network or registry problem, not a regression of npu-migrate):",
              file=sys.stderr)
        for line in failed:
            print(f"  {line}", file=sys.stderr)
        return 2
    if args.from_keep is None:
        print(f"{len(archives)} archives ready in {cache} ({download_seconds:.1f} s)")
    if args.download_only:
        return 0

    tool = [sys.executable, "-m", "npu_migrate"]
    version = tool_version(tool)
    state = git_state()
    print(f"npu-migrate {version} at {state}")
    records: dict[str, dict] = {}
    seconds: dict[str, float] = {}
    diffs: dict[str, dict[str, str]] = {}
    if args.keep:
        args.keep.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="npu-eco-") as scratch:
        base = args.keep or Path(scratch)
        for pin in pins:
            print(f"  {pin.name} {pin.version} ...", end="", flush=True)
            if args.from_keep is not None:
                try:
                    run = record_from_keep(pin, args.from_keep / pin.name)
                except (OSError, ValueError) as exc:
                    print(f"\nerror: {exc}", file=sys.stderr)
                    return 2
                records[pin.name] = {"version": pin.version, "kind": pin.kind, "archive_sha256": pin.sha256,
                                     **run.record}
                seconds[pin.name], diffs[pin.name] = run.seconds, run.diffs
                print(" read from the kept run")
                continue
            run = run_package(pin, archives[pin.name], base / pin.name, args.jobs, args.timeout, tool)
            record = {"version": pin.version, "kind": pin.kind, "archive_sha256": pin.sha256, **run.record}
            records[pin.name], seconds[pin.name], diffs[pin.name] = record, run.seconds, run.diffs
            print(f" {run.seconds:.1f} s")
    total_seconds = time.perf_counter() - started
    print()
    print(figures_text(records, seconds, args.verbose))
    print(f"\nwall time {total_seconds:.1f} s (downloads {download_seconds:.1f} s, npu-migrate "
          f"{sum(seconds.values()):.1f} s, -j {args.jobs})")

    new = {"format": SNAPSHOT_FORMAT, "tool_version": version, "packages": records}
    if args.json:
        figures = {
            "tool": {"version": version, "git": state},
            "wall_seconds": round(total_seconds, 1),
            "download_seconds": round(download_seconds, 1),
            "packages": {
                name: {**{k: v for k, v in r.items() if k != "files"}, "seconds": round(seconds[name], 1),
                       "pin": {k: getattr(p, k) for k in ("category", "ascend", "why", "filename")},
                       "files_with_findings": sum(1 for e in r["files"].values() if "rewrites" in e or "reported" in e)}
                for name, r in records.items() for p in pins if p.name == name
            },
            "total": totals(records),
        }
        args.json.write_text(json.dumps(figures, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"figures written to {args.json}")

    old: dict = {"format": SNAPSHOT_FORMAT, "packages": {}}
    if args.snapshot.is_file():
        try:
            old = load_snapshot(args.snapshot)
        except (OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            if not args.update:
                return 2
    elif not args.update:
        print(f"error: no snapshot at {args.snapshot}: run with --update to create it", file=sys.stderr)
        return 2
    pinned = {p.name for p in load_pins(args.pins)}
    if args.update:
        merged = copy.deepcopy(old)
        # packages this run left out (--package, slow) keep their records; unpinned ones go
        merged["packages"] = {n: r for n, r in merged["packages"].items() if n in pinned}
        merged["packages"].update(records)
        merged.update({"format": SNAPSHOT_FORMAT, "tool_version": version})
        merged["packages"] = dict(sorted(merged["packages"].items()))
        args.snapshot.parent.mkdir(parents=True, exist_ok=True)
        args.snapshot.write_text(dump_snapshot(merged), encoding="utf-8")
        print(f"snapshot written to {args.snapshot}")
        return 0
    only = {p.name for p in pins} | (set(old["packages"]) - pinned)
    changes = compare(old, new, only)
    if old.get("tool_version") != version:
        print(f"(snapshot taken with npu-migrate {old.get('tool_version')}, this is {version})")
    if not changes:
        print(f"no change against {args.snapshot.relative_to(REPO) if args.snapshot.is_relative_to(REPO) else args.snapshot}")
        return 0
    print(f"\nCHANGES against {args.snapshot}:")
    print("\n".join(changes))
    if args.show_diff:
        for name, record in records.items():
            was = old["packages"].get(name, {}).get("files", {})
            for path in sorted(diffs[name]):
                if was.get(path, {}).get("diff") != record["files"][path]["diff"]:
                    sys.stdout.write(diffs[name][path])
    print("\nIf the change is intended, accept it with: python scripts/ecosystem.py --update")
    return 1


if __name__ == "__main__":
    sys.exit(main())
