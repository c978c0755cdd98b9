#!/usr/bin/env python3
"""Is the output of this checkout byte-identical to that of another revision? (refactor check)

The other revision (REV) is checked out with `git worktree add --detach` into a temporary folder;
both the old code (that worktree) and the new code (this checkout, uncommitted changes included)
then run, through their public command line only, over the same copy of a corpus, with the cache
off, the configuration ignored and the same options:

    npu-migrate migrate INPUT --output OUT --output-format json --report OUT.md --report-csv DIR
                        --rewrite-scripts --no-cache --isolated -j N
    npu-migrate check INPUT --output-format json --no-cache --isolated -j N

and, per file, compares the migrated copy (bytes, and the file mode) and the findings of both
commands (every field: code, line, column, message, fixable, source, cell, and for `check` the
rule name and fingerprint); then the rest of both JSON reports, the Markdown report, the CSV files,
the exit codes and the standard error (paths of the run's own folders replaced by placeholders).

Corpora: the Python tree of the installed torch package and the standard library (without its
site-packages), found as scripts/robustness.py finds them, or any folder. Only the files a run
reads are copied into the input folder (.py, .ipynb, shell scripts, YAML, TOML, Dockerfiles,
.env files, .cu/.cuh; discover.is_target), so the shared libraries of torch are not copied twice
more; both runs see the very same input. With --force-parse a line `# cuda` is appended to every
copied .py file, so that every one of them goes through the pipeline (ast, hot slices, the libcst
parse of what they keep, rules, code generation) instead of being skipped by the byte prefilter:
useful for the standard library, where few files mention CUDA.

"files compared" counts every path of either migrated copy (the input files, the shim) and every
path that has a finding; a file is identical when its bytes, its mode and its findings are.

Each side runs as `python -c <bootstrap> CHECKOUT ...`: the bootstrap puts CHECKOUT first on
sys.path and serves `npu_migrate.rules` from CHECKOUT/rules (as the wheel and the editable install
do), so the editable install of this checkout cannot leak into the old side.

    python scripts/compare_output.py --against 4639881 --corpus stdlib
    python scripts/compare_output.py --against 4639881 --corpus both --force-parse
    python scripts/compare_output.py --against HEAD --corpus torch --keep /tmp/cmp

Exit codes: 0 identical, 1 differences (listed), 2 setup failure (no such revision, no corpus, a
run that failed or printed no report), 130 interrupted. The worktree is removed at the end, also
after Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # scripts/corpora.py, also when loaded by path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpora  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})  # as robustness.py
PROBE_LINE = b"# cuda\n"
MAX_LISTED = 20
RUN_OK = (0, 1)  # 1: findings remain

# Runs npu_migrate from the checkout named by argv[1], whatever is installed: that checkout first
# on sys.path, the editable install of npu_migrate (a meta path finder) dropped, and the package
# `npu_migrate.rules` served from CHECKOUT/rules while it lives there (pyproject.toml package-dir).
BOOTSTRAP = r"""
import importlib.util, os, runpy, sys
root = os.path.abspath(sys.argv.pop(1))
if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]
sys.meta_path[:] = [f for f in sys.meta_path
                    if "npu_migrate" not in str(getattr(f, "__module__", ""))]
rules = os.path.join(root, "rules", "__init__.py")
if os.path.isfile(rules) and not os.path.isdir(os.path.join(root, "npu_migrate", "rules")):
    class _Rules:
        @classmethod
        def find_spec(cls, name, path=None, target=None):
            if name != "npu_migrate.rules":
                return None
            return importlib.util.spec_from_file_location(
                name, rules, submodule_search_locations=[os.path.dirname(rules)])
    sys.meta_path.insert(0, _Rules)
sys.path.insert(0, root)
if sys.argv[1:] == ["--probe"]:
    import importlib.resources
    import npu_migrate
    print(os.path.dirname(os.path.abspath(npu_migrate.__file__)))
    print(importlib.resources.files("npu_migrate.rules"))
    sys.exit(0)
runpy.run_module("npu_migrate", run_name="__main__", alter_sys=True)
"""


class SetupError(Exception):
    """The comparison cannot run: no such revision, no corpus, a run without a report."""


# ------------------------------------------------------------------ git and the two checkouts

def git(*args: str, check: bool = True) -> str:
    """git in this repository (our own, not a target: plain subprocess)."""
    proc = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise SetupError(f"git {' '.join(args)}: {proc.stderr.strip() or f'exit {proc.returncode}'}")
    return proc.stdout.strip()


@dataclass(frozen=True)
class Checkout:
    """The old side: a revision checked out in a temporary worktree."""

    rev: str
    sha: str
    path: Path

    @property
    def describe(self) -> str:
        subject = git("log", "-1", "--format=%h %s", self.sha, check=False)
        return subject or self.sha[:12]


@contextlib.contextmanager
def worktree(rev: str) -> Iterator[Checkout]:
    """`git worktree add --detach` of rev in a temporary folder; removed on exit, also after
    Ctrl-C or SIGTERM (a second Ctrl-C during the removal is ignored)."""
    sha = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if not sha:
        raise SetupError(f"--against {rev}: not a commit of {REPO}")
    tmp = Path(tempfile.mkdtemp(prefix="npu-migrate-old-"))
    path = tmp / "checkout"
    try:
        git("worktree", "add", "--detach", "--quiet", str(path), sha)
        yield Checkout(rev, sha, path)
    finally:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            if path.exists():
                git("worktree", "remove", "--force", str(path), check=False)
            git("worktree", "prune", check=False)
            shutil.rmtree(tmp, ignore_errors=True)
        finally:
            signal.signal(signal.SIGINT, previous)


def launcher(checkout: Path) -> list[str]:
    """The command prefix that runs `npu-migrate` from `checkout` with this interpreter."""
    return [sys.executable, "-c", BOOTSTRAP, str(checkout)]


def probe(checkout: Path) -> None:
    """SetupError unless the bootstrap really imports npu_migrate and its rules from checkout."""
    proc = subprocess.run([*launcher(checkout), "--probe"], capture_output=True, text=True, check=False,
                          cwd=tempfile.gettempdir(), stdin=subprocess.DEVNULL)
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(lines) != 2:
        raise SetupError(f"{checkout}: cannot import npu_migrate from it: {proc.stderr.strip()[-600:]}")
    real = checkout.resolve()
    for line in lines:
        if real not in Path(line).resolve().parents:
            raise SetupError(f"{checkout}: npu_migrate or its rules come from {line}, not from this checkout")


def uncommitted(paths: tuple[str, ...] = ("npu_migrate", "rules")) -> int:
    """How many entries `git status` lists under the tool's sources in this checkout."""
    out = git("status", "--porcelain", "--", *paths, check=False)
    return len([line for line in out.splitlines() if line.strip()])


# ------------------------------------------------------------------ corpora

def corpus_root(name: str) -> Path:
    try:
        return corpora.corpus_root(name)
    except LookupError as exc:
        raise SetupError(str(exc)) from None


def is_input(name: str) -> bool:
    """Files a run reads, by name (discover.is_target and textfiles.target_kind when written)."""
    low = name.lower()
    return (
        low.endswith((".py", ".ipynb", ".sh", ".bash", ".zsh", ".yaml", ".yml", ".toml", ".cu", ".cuh",
                      ".dockerfile", ".env"))
        or low.startswith(("dockerfile.", "containerfile.", ".env."))
        or low in ("dockerfile", "containerfile")
    )


def copy_corpus(root: Path, dest: Path, force_parse: bool) -> tuple[int, int]:
    """Copy the files a run reads from root to dest (no links, no installed packages); with
    force_parse, a line `# cuda` ends every .py file. Returns (files, .py files probed)."""
    files = probed = 0
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not (here / d).is_symlink())
        for name in sorted(filenames):
            src = here / name
            if not is_input(name) or src.is_symlink() or not src.is_file():
                continue
            dst = dest / src.relative_to(root)
            dst.parent.mkdir(parents=True, exist_ok=True)
            data = src.read_bytes()
            if force_parse and name.endswith(".py"):
                data += (b"" if not data or data.endswith(b"\n") else b"\n") + PROBE_LINE
                probed += 1
            dst.write_bytes(data)
            files += 1
    return files, probed


# ------------------------------------------------------------------ one side

@dataclass
class Side:
    """What one checkout produced for one corpus."""

    label: str  # "old" or "new"
    folder: Path
    migrate_exit: int | None = None
    check_exit: int | None = None
    migrate_s: float = 0.0
    check_s: float = 0.0
    migrate_json: dict = field(default_factory=dict)
    check_json: dict = field(default_factory=dict)
    migrate_stderr: str = ""
    check_stderr: str = ""

    @property
    def tree(self) -> Path:
        return self.folder / "tree"

    @property
    def report(self) -> Path:
        return self.folder / "report.md"

    @property
    def csv(self) -> Path:
        return self.folder / "csv"


def _normalise(text: str, side: Side, inputs: Path) -> str:
    """The run's own folders by placeholders (the two sides write to different folders)."""
    return text.replace(str(side.folder), "<OUT>").replace(str(inputs), "<INPUT>")


def _run(command: list[str], cwd: Path, timeout: float) -> tuple[int, str, str, float]:
    started = time.perf_counter()
    try:
        proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise SetupError(f"killed after {timeout:.0f} s: {' '.join(command[3:])}") from exc
    return proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - started


def run_side(side: Side, checkout: Path, input_dir: Path, jobs: int, timeout: float) -> None:
    """Both commands over input_dir, from its parent folder (so `check` names files from there)."""
    side.folder.mkdir(parents=True)
    prefix = launcher(checkout)
    common = ["--output-format", "json", "--no-cache", "--isolated", "-j", str(jobs)]
    migrate = [*prefix, "migrate", str(input_dir), "--output", str(side.tree), "--report", str(side.report),
               "--report-csv", str(side.csv), "--rewrite-scripts", *common]
    check = [*prefix, "check", str(input_dir), *common]
    for kind, command in (("migrate", migrate), ("check", check)):
        code, out, err, took = _run(command, input_dir.parent, timeout)
        (side.folder / f"{kind}.json").write_text(out, encoding="utf-8")
        (side.folder / f"{kind}.stderr").write_text(err, encoding="utf-8")
        if code not in RUN_OK:
            raise SetupError(f"{side.label}: `npu-migrate {kind}` exit {code}: {err.strip()[-800:]}")
        try:
            payload = json.loads(_normalise(out, side, input_dir.parent))
        except ValueError as exc:
            raise SetupError(f"{side.label}: `npu-migrate {kind}` printed no JSON report ({exc})") from None
        setattr(side, f"{kind}_exit", code)
        setattr(side, f"{kind}_s", took)
        setattr(side, f"{kind}_json", payload)
        setattr(side, f"{kind}_stderr", _normalise(err, side, input_dir.parent))


# ------------------------------------------------------------------ comparison

def _files(root: Path) -> dict[str, Path]:
    """Every file and link under root, by relative path (links not followed)."""
    found = {}
    if not root.is_dir():
        return found
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        links = [d for d in dirnames if (here / d).is_symlink()]
        dirnames[:] = [d for d in dirnames if d not in links]
        for name in [*filenames, *links]:
            found[(here / name).relative_to(root).as_posix()] = here / name
    return found


def _short(line: bytes, width: int = 100) -> str:
    text = repr(line.rstrip(b"\r\n"))[2:-1]
    return text if len(text) <= width else text[:width] + "..."


def first_difference(old: bytes, new: bytes) -> str:
    """`line N: old '...' / new '...'` for the first line that differs."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    for n, (x, y) in enumerate(zip(a, b), 1):
        if x != y:
            return f"line {n}: old '{_short(x)}' / new '{_short(y)}'"
    n = min(len(a), len(b)) + 1
    if len(a) > len(b):
        return f"line {n}: old '{_short(a[n - 1])}' / new: no such line ({len(b)} lines)"
    if len(b) > len(a):
        return f"line {n}: old: no such line ({len(a)} lines) / new '{_short(b[n - 1])}'"
    return "same lines, different bytes"


def _entry(path: Path) -> tuple[str, bytes, int]:
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        return "link", os.readlink(path).encode(), 0
    return "file", path.read_bytes(), stat.S_IMODE(mode)


def compare_trees(old: Path, new: Path) -> tuple[list[str], dict[str, str]]:
    """All relative paths of both trees, and a reason for each one that differs."""
    a, b = _files(old), _files(new)
    differ: dict[str, str] = {}
    for rel in sorted(set(a) | set(b)):
        if rel not in b:
            differ[rel] = "only in the old copy"
        elif rel not in a:
            differ[rel] = "only in the new copy"
        else:
            (kind_a, data_a, mode_a), (kind_b, data_b, mode_b) = _entry(a[rel]), _entry(b[rel])
            if kind_a != kind_b:
                differ[rel] = f"old is a {kind_a}, new a {kind_b}"
            elif data_a != data_b:
                differ[rel] = first_difference(data_a, data_b)
            elif mode_a != mode_b:
                differ[rel] = f"mode {mode_a:o} / {mode_b:o}"
    return sorted(set(a) | set(b)), differ


def _rel(path: object, prefix: str = "") -> str:
    """A path from the input folder's parent: `check` names files from its working folder (that
    parent), `migrate` and the copy from the run's root (prefix: the root from that parent)."""
    return prefix + str(path).removeprefix("<INPUT>/")


def _by_path(findings: list[dict], prefix: str) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for f in findings:
        grouped.setdefault(_rel(f.get("path"), prefix), []).append(f)
    return grouped


def _show(f: dict | None) -> str:
    if f is None:
        return "none"
    where = f"{f.get('line')}:{f.get('column')}" + (f" cell {f['cell']}" if f.get("cell") else "")
    return (f"{f.get('code')} {where} fixable={f.get('fixable')} {str(f.get('message'))[:80]!r} "
            f"source={str(f.get('source'))[:60]!r}")


def compare_findings(old: list[dict], new: list[dict], prefix: str = "") -> dict[str, str]:
    """A reason for each path whose findings differ (every field, in the order printed)."""
    a, b = _by_path(old, prefix), _by_path(new, prefix)
    differ = {}
    for path in sorted(set(a) | set(b)):
        x, y = a.get(path, []), b.get(path, [])
        if x == y:
            continue
        if sorted(map(_key, x)) == sorted(map(_key, y)):
            differ[path] = "the same findings in another order"
            continue
        for n, (p, q) in enumerate(zip(x, y), 1):
            if p != q:
                keys = sorted(k for k in set(p) | set(q) if p.get(k) != q.get(k))
                differ[path] = f"finding {n} ({', '.join(keys)}): old {_show(p)} / new {_show(q)}"
                break
        else:
            n = min(len(x), len(y)) + 1
            extra = _show(x[n - 1]) if len(x) > len(y) else _show(y[n - 1])
            differ[path] = f"{len(x)} findings old, {len(y)} new; first extra: {extra}"
    return differ


def _key(f: dict) -> str:
    return json.dumps(f, sort_keys=True)


def compare_reports(old: dict, new: dict, skip: tuple[str, ...] = ("findings",)) -> list[str]:
    """Top-level keys of two JSON reports that differ (per-file findings are compared apart)."""
    keys = sorted((set(old) | set(new)) - set(skip))
    return [f"{k}: old {json.dumps(old.get(k))[:200]} / new {json.dumps(new.get(k))[:200]}"
            for k in keys if old.get(k) != new.get(k)]


def compare_files(old: Path, new: Path, side_old: Side, side_new: Side, inputs: Path) -> str | None:
    """None when the two report files (or CSV folders) say the same, else the first difference."""
    if old.is_dir() or new.is_dir():
        _paths, differ = compare_trees(old, new)
        if not differ:
            return None
        rel = next(iter(differ))
        return f"{rel}: {differ[rel]}" + (f" (and {len(differ) - 1} more)" if len(differ) > 1 else "")
    if not old.exists() or not new.exists():
        return None if old.exists() == new.exists() else f"written by the {'old' if old.exists() else 'new'} side only"
    a = _normalise(old.read_text(encoding="utf-8", errors="replace"), side_old, inputs).encode()
    b = _normalise(new.read_text(encoding="utf-8", errors="replace"), side_new, inputs).encode()
    return None if a == b else first_difference(a, b)


@dataclass
class Outcome:
    corpus: str
    files: int = 0  # paths compared: files of both copies and paths with findings
    identical: int = 0
    differing: dict = field(default_factory=dict)  # path -> reasons
    findings_old: dict = field(default_factory=dict)  # "migrate"/"check" -> count
    findings_new: dict = field(default_factory=dict)
    findings_differ: dict = field(default_factory=dict)  # "migrate"/"check" -> paths
    other: list[str] = field(default_factory=list)  # report-level differences

    @property
    def same(self) -> bool:
        return not self.differing and not self.other


def compare_sides(name: str, old: Side, new: Side, input_dir: Path) -> Outcome:
    """Every path is shown from the input folder's parent (`torch/cuda/__init__.py`)."""
    out = Outcome(name)
    root = str(old.migrate_json.get("root", "<INPUT>"))
    prefix = root.removeprefix("<INPUT>").strip("/")
    prefix = f"{prefix}/" if prefix else ""
    paths, tree_differ = compare_trees(old.tree, new.tree)
    reasons: dict[str, list[str]] = {prefix + rel: [f"copy: {why}"] for rel, why in tree_differ.items()}
    every = {prefix + rel for rel in paths}
    for kind in ("migrate", "check"):
        a, b = getattr(old, f"{kind}_json"), getattr(new, f"{kind}_json")
        fa, fb = a.get("findings", []), b.get("findings", [])
        out.findings_old[kind], out.findings_new[kind] = len(fa), len(fb)
        kind_prefix = prefix if kind == "migrate" else ""
        every |= {_rel(f.get("path"), kind_prefix) for f in fa + fb}
        differ = compare_findings(fa, fb, kind_prefix)
        out.findings_differ[kind] = sorted(differ)
        for path, why in differ.items():
            reasons.setdefault(path, []).append(f"{kind} findings: {why}")
        out.other += [f"{kind} JSON {line}" for line in compare_reports(a, b)]
        if getattr(old, f"{kind}_exit") != getattr(new, f"{kind}_exit"):
            out.other.append(f"{kind} exit code: old {getattr(old, f'{kind}_exit')} / new {getattr(new, f'{kind}_exit')}")
        if getattr(old, f"{kind}_stderr") != getattr(new, f"{kind}_stderr"):
            why = first_difference(getattr(old, f"{kind}_stderr").encode(), getattr(new, f"{kind}_stderr").encode())
            out.other.append(f"{kind} stderr: {why}")
    for label, a_path, b_path in (("report", old.report, new.report), ("CSV", old.csv, new.csv)):
        why = compare_files(a_path, b_path, old, new, input_dir.parent)
        if why:
            out.other.append(f"{label}: {why}")
    out.files = len(every)
    out.differing = {p: reasons[p] for p in sorted(reasons)}
    out.identical = out.files - len(out.differing)
    return out


# ------------------------------------------------------------------ the run

def summary(out: Outcome, old: Side, new: Side) -> str:
    lines = [
        (f"  runs: old migrate {old.migrate_s:.1f} s (exit {old.migrate_exit}), check {old.check_s:.1f} s "
         f"(exit {old.check_exit}); new migrate {new.migrate_s:.1f} s (exit {new.migrate_exit}), "
         f"check {new.check_s:.1f} s (exit {new.check_exit})"),
        f"  files compared {out.files:,}: identical {out.identical:,}, differing {len(out.differing):,}",
    ]
    for kind in ("migrate", "check"):
        n = len(out.findings_differ[kind])
        verdict = "identical" if n == 0 else f"differ in {n:,} files"
        lines.append(f"  {kind} findings: old {out.findings_old[kind]:,}, new {out.findings_new[kind]:,}: {verdict}")
    lines.append(f"  reports, CSV, exit codes, stderr: {'identical' if not out.other else 'differ'}")
    if out.differing:
        lines.append(f"  differing files (first {min(MAX_LISTED, len(out.differing))} of {len(out.differing):,}):")
        for path in list(out.differing)[:MAX_LISTED]:
            for why in out.differing[path]:
                lines.append(f"    {path}: {why}")
    for line in out.other[:MAX_LISTED]:
        lines.append(f"  differs: {line}")
    return "\n".join(lines)


def compare_corpus(name: str, old_checkout: Path, work: Path, args: argparse.Namespace) -> Outcome:
    root = corpus_root(name)
    label = name if name in ("torch", "stdlib") else Path(name).name or "corpus"
    base = work / label
    # The corpus keeps its folder name (torch is the package `torch`: the run's root is then the
    # folder above it, as for the installed tree); the outputs lie beside, outside the root.
    input_dir = base / "input" / (root.name or "corpus")
    input_dir.mkdir(parents=True)
    files, probed = copy_corpus(root, input_dir, args.force_parse)
    if not files:
        raise SetupError(f"{root}: no file to compare")
    print(f"{label}: {root}: {files:,} files copied" + (f", `# cuda` appended to {probed:,} .py files"
                                                         if args.force_parse else ""), flush=True)
    old, new = Side("old", base / "old"), Side("new", base / "new")
    run_side(old, old_checkout, input_dir, args.jobs, args.timeout)
    run_side(new, REPO, input_dir, args.jobs, args.timeout)
    outcome = compare_sides(label, old, new, input_dir)
    print(summary(outcome, old, new), flush=True)
    return outcome


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", required=True, metavar="REV",
                        help="the revision whose output is the reference (e.g. the commit before a refactor)")
    parser.add_argument("--corpus", default="both", metavar="torch|stdlib|both|DIR",
                        help="the installed torch package, the standard library, both (default), or a folder")
    parser.add_argument("--force-parse", action="store_true",
                        help="append a line `# cuda` to every copied .py file, so every file is parsed")
    parser.add_argument("--keep", metavar="DIR", type=Path,
                        help="keep the input copy and both outputs in DIR (new or empty) for inspection")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="worker processes of each run (default 2)")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds before one run is given up (default 1800)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.keep is not None and args.keep.exists() and (not args.keep.is_dir() or any(args.keep.iterdir())):
        parser.error(f"--keep {args.keep}: exists and is not an empty folder")
    return args


def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt  # SIGTERM and SIGHUP clean up as Ctrl-C does


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _terminate)
    names = ("torch", "stdlib") if args.corpus == "both" else (args.corpus,)
    started = time.perf_counter()
    outcomes = []
    try:
        with worktree(args.against) as tree, tempfile.TemporaryDirectory(prefix="npu-migrate-compare-") as tmp:
            work = args.keep.absolute() if args.keep else Path(tmp)
            work.mkdir(parents=True, exist_ok=True)
            probe(tree.path)
            probe(REPO)
            changes = uncommitted()
            print(f"old: {tree.rev} = {tree.describe} (worktree {tree.path})")
            print(f"new: {REPO} (working tree" + (f"; {changes} uncommitted changes under npu_migrate/ and rules/)"
                                                 if changes else ", nothing uncommitted under npu_migrate/ and rules/)"))
            print(f"-j {args.jobs}, no cache, --isolated" + (", --force-parse" if args.force_parse else ""), flush=True)
            for name in names:
                outcomes.append(compare_corpus(name, tree.path, work, args))
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted (the worktree was removed)", file=sys.stderr)
        return 130
    same = all(o.same for o in outcomes)
    total = sum(o.files for o in outcomes)
    print(f"total: {total:,} files compared, {sum(o.identical for o in outcomes):,} identical, "
          f"{sum(len(o.differing) for o in outcomes):,} differing; "
          f"{'IDENTICAL' if same else 'DIFFERENT'} ({time.perf_counter() - started:.0f} s)")
    if args.keep:
        print(f"kept in {args.keep}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
