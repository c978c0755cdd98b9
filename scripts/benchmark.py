#!/usr/bin/env python3
"""Measure how fast `npu-migrate` is on whatever machine runs this, in one run (issue #7).

Every measurement is a subprocess of the installed `npu-migrate` console script, so interpreter
startup and imports count as they do for a user. For each run it records the wall time, lines
per second, the peak memory and the ratio to a floor: `ast.parse` of the very same files, in a
subprocess of the same interpreter, serially (one process), measured in the same run.

Memory, two figures:
  * tree RSS: the sum of the resident set sizes of the process and all its descendants (the
    worker processes), sampled from /proc every 20 ms. Pages shared between the parent and its
    forked workers are counted once per process, so this is an upper bound. This is the figure
    compared with the 1 GiB target.
  * max single RSS: the largest resident set of any one process of the tree, from the rusage
    of os.wait4. Linux keeps the high-water mark across exec, so this figure is never below
    what the benchmark process itself held when it started the command (printed; ~40 MiB).
  * tree PSS: the proportional set size summed over the tree (shared pages split between the
    processes sharing them), sampled every 0.2 s: closer to what the run really costs the machine.

Corpora:
  torch      the Python tree of the installed torch package (found without importing torch)
  synthetic  one generated 100,000-line file: tables of constants (patterns.md G37) plus a few
             CUDA constructs, so the byte prefilter lets it through and it is really parsed
  precommit  5 mid-sized torch files that mention cuda, copied into a temporary git repository,
             checked as pre-commit does: `npu-migrate check f1 .. f5`
  startup    what a user waits for on every call: `npu-migrate --help`, and `check` of one file
             without a CUDA word and of one file with CUDA code (a short training script), in a git
             repository; each the median of 5 runs after one warm-up run

Every command runs the way an installed tool runs: with the bytecode pip writes at install time.
PYTHONDONTWRITEBYTECODE is removed from the commands' environment (some CI images set it, and then
every run compiles the tool's modules again: about +0.1 s per start here), and one warm-up call of
each command lets an editable install write its `__pycache__` first.

Cold runs start with a fresh empty cache directory (`--cache-dir`), warm runs reuse it. When the
installed npu-migrate has no `--cache-dir`, both runs go without a cache and the warm rows say
"no cache".

    python scripts/benchmark.py                      # everything (several minutes)
    python scripts/benchmark.py --only precommit     # seconds
    python scripts/benchmark.py --json bench.json --markdown

With `--against REV` it measures only the torch tree's `check` (cold and warm), for REV (checked
out in a temporary `git worktree`, as scripts/compare_output.py does) and for this checkout
(uncommitted changes included; copied when the run starts, so an edit during the run changes
nothing), interleaved in the same run: REV, this checkout, REV, this
checkout ... for `--rounds N` rounds; it prints both medians and the ratio this/REV, so that
"within 5% of the figure before the change" is read from one run on one machine. Both sides run
the same way, `python -c <bootstrap> CHECKOUT check ...` with this interpreter, so neither is
favoured by its launcher.

    python scripts/benchmark.py --against 4639881 --rounds 5

With `--shim-overhead` it measures only the runtime shim (issue #16): the time of a forwarded
attribute (`npu_compat.synchronize`, `npu_compat.device_count()`, ...) against the direct
`torch.cuda` one on this machine, and against `torch.npu` with the fake torch_npu of tests/fake_npu,
with timeit (best of `--rounds`); the target is at most 1 us over the direct access.
`--shim-template DIR` times another copy of the shim (for a before/after comparison).

    python scripts/benchmark.py --shim-overhead
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

GIB = 1024**3
RSS_TARGET = 1 * GIB
SAMPLE_SECONDS = 0.02
PSS_EVERY = 10  # PSS is sampled every 10th RSS sample (0.2 s)
CORPORA = ("torch", "synthetic", "precommit", "startup")
STARTUP_RUNS = 5
SYNTHETIC_LINES = 100_000
PRECOMMIT_FILES = 5
PRECOMMIT_LINE_RANGE = (150, 600)

# Seconds allowed per measurement (issue #7, for a 2-core machine).
TARGETS = {
    ("torch", "check", "cold"): 20.0,
    ("torch", "check", "warm"): 2.0,
    ("torch", "dry-run", "cold"): 90.0,
    ("torch", "dry-run", "warm"): 90.0,
    ("synthetic", "check", "cold"): 20.0,
    ("synthetic", "check", "warm"): 20.0,
    ("synthetic", "dry-run", "cold"): 20.0,
    ("synthetic", "dry-run", "warm"): 20.0,
    ("precommit", "check", "cold"): 1.0,
    ("precommit", "check", "warm"): 1.0,
    # issue #18: "help and a one-file check start in well under 0.3 s"
    ("startup", "help", ""): 0.3,
    ("startup", "check", "no cuda"): 0.3,
    ("startup", "check", "cuda"): 0.3,
}

# The environment of every measured command: as a user's, with bytecode.
USER_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

# The floor: parse every listed file with the standard library's parser, one after the other.
FLOOR_CODE = r"""
import ast, sys
files = lines = failed = 0
with open(sys.argv[1], encoding="utf-8") as listing:
    paths = [p for p in listing.read().split("\n") if p]
for path in paths:
    with open(path, "rb") as handle:
        data = handle.read()
    files += 1
    lines += data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    try:
        ast.parse(data, filename=path)
    except (SyntaxError, ValueError):
        failed += 1
print(files, lines, failed)
"""


class BenchmarkError(Exception):
    """The benchmark cannot run (no torch, no npu-migrate, ...)."""


@dataclass
class Measurement:
    name: str
    corpus: str
    kind: str  # "floor", "check" or "dry-run"
    phase: str  # "cold", "warm" or "" (floor)
    command: list[str]
    files: int
    lines: int
    wall_s: float = 0.0
    rss_tree_peak: int = 0  # bytes, sampled sum over the process tree
    rss_max_single: int = 0  # bytes, from wait4 rusage
    pss_tree_peak: int = 0  # bytes, sampled sum of PSS over the process tree (every 0.2 s)
    exit_code: int | None = None
    status: str = "ok"  # ok, failed, timeout
    floor_ratio: float | None = None
    target_s: float | None = None
    met: bool | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def lines_per_s(self) -> float:
        return self.lines / self.wall_s if self.wall_s > 0 else 0.0


# ------------------------------------------------------------------ process tree and memory

def _children(pid: int) -> list[int]:
    """Direct children of pid: /proc/PID/task/*/children, or a scan of /proc without it."""
    task_dir = Path(f"/proc/{pid}/task")
    found: list[int] = []
    try:
        tasks = list(task_dir.iterdir())
    except OSError:
        return []
    for task in tasks:
        try:
            found.extend(int(c) for c in (task / "children").read_text().split())
        except FileNotFoundError:
            return _children_by_scan(pid)
        except OSError:
            continue
    return found


def _children_by_scan(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name (field 2) may hold spaces or parentheses: split after its last ")".
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _rss(pid: int, page_size: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page_size
    except (OSError, IndexError, ValueError):
        return 0


def _pss(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    match = re.search(r"^Pss:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else 0


def process_tree(pid: int) -> list[int]:
    """pid and all its descendants, now."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        if current not in found:
            found.append(current)
            todo.extend(_children(current))
    return found


def tree_rss(pid: int) -> int:
    """Resident bytes of pid and all its descendants, now (shared pages counted in each)."""
    page_size = os.sysconf("SC_PAGE_SIZE")
    return sum(_rss(p, page_size) for p in process_tree(pid))


def tree_pss(pid: int) -> int:
    """Proportional set size of the tree: shared pages split between their sharers."""
    return sum(_pss(p) for p in process_tree(pid))


def run_measured(command: list[str], cwd: Path, out_path: Path, timeout: float) -> dict:
    """Run command, sampling the tree's RSS; return wall time, peaks, exit code, stderr."""
    err_path = out_path.with_suffix(".stderr")
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=USER_ENV)
        peak = [0, 0]  # RSS, PSS
        done = threading.Event()

        def sample() -> None:
            n = 0
            while not done.is_set():
                peak[0] = max(peak[0], tree_rss(proc.pid))
                n += 1
                # The kernel walks the page tables for PSS: less often, and not right at the start
                # (before exec the child is a copy of this process). Runs under 0.2 s get none.
                if n % PSS_EVERY == 0:
                    peak[1] = max(peak[1], tree_pss(proc.pid))
                done.wait(SAMPLE_SECONDS)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        timer = threading.Timer(timeout, lambda: _kill_group(proc.pid))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:  # Ctrl-C: the command runs in its own session, so stop it here
            _kill_group(proc.pid)
            os.waitpid(proc.pid, 0)
            raise
        finally:
            timer.cancel()
            done.set()
            sampler.join()
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    timed_out = proc.returncode < 0 and wall >= timeout
    return {
        "wall_s": wall,
        "rss_tree_peak": peak[0],
        "pss_tree_peak": peak[1],
        "rss_max_single": usage.ru_maxrss * 1024,  # Linux reports KiB
        "exit_code": proc.returncode,
        "timed_out": timed_out,
        "stderr": err_path.read_text(errors="replace"),
    }


def _kill_group(pid: int) -> None:
    """Stop a measurement that ran past --timeout: its own process group only."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# ------------------------------------------------------------------ machine

def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    for key in ("model name", "Hardware", "cpu model", "Processor"):
        match = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
        if match:
            return match.group(1).strip()
    return platform.machine()


def _mem_total() -> int:
    try:
        match = re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
        return int(match.group(1)) * 1024 if match else 0
    except OSError:
        return 0


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine() -> dict:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 1
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count() or 1,
        "usable_cores": usable,
        "ram_bytes": _mem_total(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": _version("torch"),
        "libcst": _version("libcst"),
        "npu_migrate": _version("npu-migrate"),
        "load_average_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }


# ------------------------------------------------------------------ corpora

def torch_root() -> Path:
    """The installed torch package directory, found without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise BenchmarkError("torch is not installed in this interpreter (pip install torch==2.13.0)")
    return Path(next(iter(spec.submodule_search_locations)))


def python_files(root: Path) -> list[Path]:
    """Every .py file under root, sorted; no symbolic links, no __pycache__."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if name.endswith(".py") and not path.is_symlink() and path.is_file():
                found.append(path)
    return found


def count_lines(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def synthetic_source(total_lines: int = SYNTHETIC_LINES) -> bytes:
    """A generated module of `total_lines` lines: three tables of constants and a few CUDA lines."""
    header = [
        '"""Generated lookup tables: synthetic input of the npu-migrate benchmark (patterns.md G37)."""',
        "import torch",
        "",
        'DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")',
        "",
    ]
    footer = [
        "",
        "",
        "def table_tensor():",
        "    rows = torch.tensor(ROWS, dtype=torch.int64).cuda()",
        "    torch.cuda.synchronize()",
        "    return rows",
    ]
    room = total_lines - len(header) - len(footer) - 6  # 2 x (opening, closing, blank line)
    n_consts = room // 5
    n_dict = 2 * room // 5
    n_rows = room - n_consts - n_dict
    lines = list(header)
    lines += [f"CONST_{i:06d} = 0x{(i * 2654435761) % 65536:04x}" for i in range(n_consts)]
    lines += ["", "TABLE = {"]
    lines += [f'    "key_{i:06d}": ({i % 97}, {i / 8:.3f}, "name_{i:06d}"),' for i in range(n_dict)]
    lines += ["}", "", "ROWS = ["]
    lines += [f"    ({i}, {i % 7}, {i % 13}, {i % 31})," for i in range(n_rows)]
    lines += ["]"]
    lines += footer
    data = ("\n".join(lines) + "\n").encode()
    assert count_lines(data) == total_lines, count_lines(data)
    return data


def pick_precommit_files(root: Path, files: list[Path]) -> list[Path]:
    """5 mid-sized files that mention cuda and parse, spread over the sorted tree."""
    import ast

    low, high = PRECOMMIT_LINE_RANGE
    candidates = []
    for path in files:
        data = path.read_bytes()
        if b"cuda" in data and low <= count_lines(data) <= high:
            candidates.append(path)
    if len(candidates) < PRECOMMIT_FILES:
        raise BenchmarkError(f"{root}: only {len(candidates)} files of {low}-{high} lines mention cuda")
    step = len(candidates) / PRECOMMIT_FILES
    chosen = []
    for i in range(PRECOMMIT_FILES):
        for path in candidates[int(step * (i + 0.5)):]:
            try:
                ast.parse(path.read_bytes())
            except (SyntaxError, ValueError):
                continue
            if path not in chosen:
                chosen.append(path)
                break
    return chosen


# ------------------------------------------------------------------ the runs

class Bench:
    def __init__(self, exe: str, jobs: int, timeout: float, work: Path, verbose: bool = True,
                 probe_cache: bool = True):
        self.exe = exe
        self.jobs = jobs
        self.timeout = timeout
        self.work = work
        self.verbose = verbose
        self.results: list[Measurement] = []
        self.notes: list[str] = []
        self.cache = {cmd: self._has_cache_flag(cmd) for cmd in ("check", "migrate")} if probe_cache else {}
        self._n = 0

    def _has_cache_flag(self, command: str) -> bool:
        out = subprocess.run([self.exe, command, "--help"], capture_output=True, text=True, timeout=120,
                             check=False, env=USER_ENV)
        return "--cache-dir" in out.stdout

    def _log(self, text: str) -> None:
        if self.verbose:
            print(text, file=sys.stderr, flush=True)

    def _run(self, m: Measurement, cwd: Path) -> Path:
        """Run one measurement, record it; return the file holding its standard output."""
        self._n += 1
        shown = " ".join("<ast.parse floor>" if arg == FLOOR_CODE else "<bootstrap>" if "\n" in arg else arg
                         for arg in m.command)
        self._log(f"[{self._n}] {m.name}: {shown}")
        out = self.work / f"run{self._n}.out"
        got = run_measured(m.command, cwd, out, self.timeout)
        m.wall_s = got["wall_s"]
        m.rss_max_single = got["rss_max_single"]
        m.pss_tree_peak = got["pss_tree_peak"]
        # Sampling can miss a short peak; the tree never holds less than its largest process.
        m.rss_tree_peak = max(got["rss_tree_peak"], m.rss_max_single)
        m.exit_code = got["exit_code"]
        ok_codes = (0,) if m.kind == "floor" else (0, 1)  # 1: findings remain, not a failure
        if got["timed_out"]:
            m.status = "timeout"
            m.notes.append(f"killed after {self.timeout:.0f} s")
        elif m.exit_code not in ok_codes:
            m.status = "failed"
            m.notes.append(f"exit {m.exit_code}: {got['stderr'].strip()[-400:]}")
        self._log(f"    {m.wall_s:.2f} s, tree RSS {_size(m.rss_tree_peak)}, exit {m.exit_code}")
        self.results.append(m)
        return out

    def floor(self, corpus: str, files: list[Path], lines: int, cwd: Path) -> Measurement:
        listing = self.work / f"{corpus}.files"
        listing.write_text("\n".join(str(p) for p in files) + "\n", encoding="utf-8")
        m = Measurement(f"{corpus}: ast.parse floor (serial)", corpus, "floor", "",
                        [sys.executable, "-c", FLOOR_CODE, str(listing)], len(files), lines)
        out = self._run(m, cwd)
        if m.status == "ok":
            parsed_files, _lines, failed = (int(x) for x in out.read_text().split())
            if failed:
                m.notes.append(f"{failed} of {parsed_files} files do not parse with ast")
        return m

    def tool(self, corpus: str, kind: str, phase: str, targets: list[str], files: int, lines: int,
             cwd: Path, cache_dir: Path) -> Measurement:
        command = [self.exe, "check"] if kind == "check" else [self.exe]
        command += targets
        command += ["--output-format", "json"] if kind == "check" else ["--dry-run"]
        command += ["-j", str(self.jobs)]
        has_cache = self.cache["check" if kind == "check" else "migrate"]
        if has_cache:
            cache_dir.mkdir(exist_ok=True)  # cold: fresh and empty; warm: the same folder again
            command += ["--cache-dir", str(cache_dir)]
        label = f"{corpus}: {kind} ({phase}{'' if has_cache or phase == 'cold' else ', no cache'})"
        m = Measurement(label, corpus, kind, phase, command, files, lines)
        m.target_s = TARGETS.get((corpus, kind, phase))
        out = self._run(m, cwd)
        if m.status == "ok":
            seen = self._files_seen(kind, out)
            if seen is not None and seen != files:
                m.notes.append(f"npu-migrate looked at {seen} files, the corpus has {files}")
        if not has_cache and phase == "warm":
            m.notes.append("this npu-migrate has no --cache-dir: a second run without a cache")
        return m

    @staticmethod
    def _files_seen(kind: str, out: Path) -> int | None:
        text = out.read_text(errors="replace")
        if kind == "check":
            try:
                return int(json.loads(text)["files_checked"])
            except (ValueError, KeyError, TypeError):
                return None
        match = re.search(r"files scanned\D+(\d+)", text)
        return int(match.group(1)) if match else None

    def finish(self) -> None:
        """Ratios to the floor of the same corpus, and whether each target is met."""
        floors = {m.corpus: m for m in self.results if m.kind == "floor" and m.status == "ok"}
        for m in self.results:
            floor = floors.get(m.corpus)
            if m.kind != "floor" and floor is not None and floor.wall_s > 0:
                m.floor_ratio = m.wall_s / floor.wall_s
            if m.target_s is not None:
                m.met = m.status == "ok" and m.wall_s <= m.target_s and m.rss_tree_peak <= RSS_TARGET


def bench_torch(bench: Bench) -> None:
    root = torch_root()
    files = python_files(root)
    lines = sum(count_lines(p.read_bytes()) for p in files)
    bench.notes.append(f"torch tree: {root} ({len(files):,} .py files, {lines:,} lines)")
    bench.floor("torch", files, lines, root)
    for kind in ("check", "dry-run"):
        cache = bench.work / f"cache-torch-{kind}"
        for phase in ("cold", "warm"):
            bench.tool("torch", kind, phase, [str(root)], len(files), lines, bench.work, cache)


def bench_synthetic(bench: Bench) -> None:
    folder = bench.work / "synthetic"
    folder.mkdir()
    target = folder / "generated_tables.py"
    data = synthetic_source()
    target.write_bytes(data)
    bench.notes.append(
        f"synthetic: {target.name}, {count_lines(data):,} lines of generated constant tables plus "
        "3 CUDA lines (torch.device(\"cuda\"), .cuda(), torch.cuda.synchronize()) so the prefilter "
        "lets it through and it is parsed"
    )
    bench.floor("synthetic", [target], count_lines(data), folder)
    for kind in ("check", "dry-run"):
        cache = bench.work / f"cache-synthetic-{kind}"
        for phase in ("cold", "warm"):
            bench.tool("synthetic", kind, phase, [str(target)], 1, count_lines(data), folder, cache)


def bench_precommit(bench: Bench) -> None:
    root = torch_root()
    chosen = pick_precommit_files(root, python_files(root))
    repo = bench.work / "precommit-repo"
    repo.mkdir()
    names = []
    for i, path in enumerate(chosen, 1):
        name = f"f{i}_{path.name}"
        shutil.copyfile(path, repo / name)
        names.append(name)
    if shutil.which("git"):
        subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
        subprocess.run(["git", "add", *names], cwd=repo, check=True)
    else:
        bench.notes.append("precommit: git is not installed; the 5 files are in a plain folder")
    lines = sum(count_lines((repo / n).read_bytes()) for n in names)
    shown = ", ".join(str(p.relative_to(root)) for p in chosen)
    bench.notes.append(f"precommit: {len(names)} torch files ({lines:,} lines): {shown}")
    bench.floor("precommit", [repo / n for n in names], lines, repo)
    cache = bench.work / "cache-precommit"
    for phase in ("cold", "warm"):
        bench.tool("precommit", "check", phase, names, len(names), lines, repo, cache)


STARTUP_CUDA_FILE = """\
import torch
import torch.distributed as dist


def train(model, loader, steps):
    dist.init_process_group("nccl")
    device = torch.device("cuda", torch.cuda.current_device())
    model = model.cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.cuda.amp.GradScaler()
    for step, (x, y) in enumerate(loader):
        x, y = x.to(device), y.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if step == steps:
            break
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated()
"""
STARTUP_PLAIN_FILE = """\
def mean(values):
    return sum(values) / len(values)
"""


def bench_startup(bench: Bench) -> None:
    """--help and one-file checks: the median of STARTUP_RUNS runs, after one warm-up run each."""
    repo = bench.work / "startup-repo"
    repo.mkdir()
    (repo / "train.py").write_text(STARTUP_CUDA_FILE, encoding="utf-8")
    (repo / "stats.py").write_text(STARTUP_PLAIN_FILE, encoding="utf-8")
    if shutil.which("git"):
        subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
        subprocess.run(["git", "add", "train.py", "stats.py"], cwd=repo, check=True)
    bench.notes.append(f"startup: median of {STARTUP_RUNS} runs after a warm-up run; train.py is "
                       f"{count_lines(STARTUP_CUDA_FILE.encode())} lines of CUDA training code, "
                       "stats.py has no CUDA word; no cache (--no-cache), as a first pre-commit run")
    cases = [
        ("startup: --help", "help", "", [bench.exe, "--help"], 0, 0),
        ("startup: check of a file without CUDA", "check", "no cuda",
         [bench.exe, "check", "stats.py", "--no-cache"], 1, count_lines(STARTUP_PLAIN_FILE.encode())),
        ("startup: check of a file with CUDA code", "check", "cuda",
         [bench.exe, "check", "train.py", "--no-cache"], 1, count_lines(STARTUP_CUDA_FILE.encode())),
    ]
    for name, kind, phase, command, files, lines in cases:
        m = Measurement(name, "startup", kind, phase, command, files, lines)
        m.target_s = TARGETS.get(("startup", kind, phase))
        bench._log(f"[{name}] {' '.join(command[1:])} x {STARTUP_RUNS + 1}")
        runs = []
        for i in range(STARTUP_RUNS + 1):
            got = run_measured(command, repo, bench.work / f"startup-{kind}-{i}.out", bench.timeout)
            if got["exit_code"] not in (0, 1):
                m.status = "failed"
                m.notes.append(f"exit {got['exit_code']}: {got['stderr'].strip()[-400:]}")
                break
            if i:  # the first run is the warm-up: it may write bytecode
                runs.append(got)
        if runs:
            m.wall_s = statistics.median(r["wall_s"] for r in runs)
            m.rss_max_single = max(r["rss_max_single"] for r in runs)
            m.rss_tree_peak = max(max(r["rss_tree_peak"], r["rss_max_single"]) for r in runs)
            m.exit_code = runs[-1]["exit_code"]
            m.notes.append("runs: " + ", ".join(f"{r['wall_s']:.3f}" for r in runs) + " s")
            bench._log(f"    median {m.wall_s:.3f} s")
        bench.results.append(m)


RUNNERS = {"torch": bench_torch, "synthetic": bench_synthetic, "precommit": bench_precommit,
           "startup": bench_startup}


# ------------------------------------------------------------------ --against REV

AB_PHASES = ("cold", "warm")
AB_TOLERANCE = 0.05  # "within 5% of the figure before the change"


def _compare_output():
    """scripts/compare_output.py (its worktree and launcher), loaded by path: this script is also
    loaded by path (tests), so its folder is not necessarily on sys.path."""
    path = Path(__file__).resolve().with_name("compare_output.py")
    spec = importlib.util.spec_from_file_location("_npu_migrate_compare_output", path)
    if spec is None or spec.loader is None:
        raise BenchmarkError(f"{path}: cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@dataclass
class Side:
    """One checkout of an A/B run: its command prefix and its measurements."""

    label: str  # "old" or "new"
    what: str
    prefix: list[str]
    cache_flag: bool = True
    runs: dict = field(default_factory=lambda: {phase: [] for phase in AB_PHASES})  # phase -> [Measurement]
    seen: set = field(default_factory=set)  # (files checked, findings) per run, a sanity check

    def median(self, phase: str, key: str = "wall_s") -> float | None:
        values = [getattr(m, key) for m in self.runs[phase] if m.status == "ok"]
        return statistics.median(values) if values else None


def ab_check(bench: Bench, side: Side, phase: str, n: int, root: Path, files: int, lines: int,
             cache_dir: Path) -> Measurement:
    """One `check` of the torch tree by one side: cold (fresh empty cache) or warm (the same)."""
    command = [*side.prefix, "check", str(root), "--output-format", "json", "-j", str(bench.jobs)]
    if side.cache_flag:
        cache_dir.mkdir(exist_ok=True)
        command += ["--cache-dir", str(cache_dir)]
    m = Measurement(f"torch: check ({phase}) {side.label} #{n}", "torch", "check", phase, command, files, lines)
    m.target_s = TARGETS.get(("torch", "check", phase))
    out = bench._run(m, bench.work)
    if m.status == "ok":
        try:
            report = json.loads(out.read_text(errors="replace"))
            side.seen.add((report["files_checked"], len(report["findings"])))
        except (ValueError, KeyError, TypeError):
            m.notes.append("no JSON report on stdout")
    side.runs[phase].append(m)
    return m


def _ratio(old: float | None, new: float | None) -> float | None:
    return new / old if old and new is not None else None


def ab_table(sides: list[Side]) -> list[str]:
    old, new = sides
    head = ("measurement", f"{old.label} median", f"{new.label} median", "new/old", f"within {AB_TOLERANCE:.0%}")
    rows_ = [head]
    for phase in AB_PHASES:
        for key, unit in (("wall_s", "s"), ("rss_tree_peak", "RSS")):
            a, b = old.median(phase, key), new.median(phase, key)
            if a is None and b is None:
                continue
            ratio = _ratio(a, b)
            if unit == "s":
                cells = (f"torch: check ({phase}) wall s", f"{a:.2f}" if a is not None else "failed",
                         f"{b:.2f}" if b is not None else "failed")
            else:
                cells = (f"torch: check ({phase}) peak RSS (tree)", _size(int(a)) if a is not None else "failed",
                         _size(int(b)) if b is not None else "failed")
            within = "" if ratio is None or unit != "s" else ("yes" if ratio <= 1 + AB_TOLERANCE else "no")
            rows_.append((*cells, f"{ratio:.3f}" if ratio is not None else "", within))
    widths = [max(len(r[i]) for r in rows_) for i in range(len(head))]
    lines = []
    for n, row in enumerate(rows_):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths))).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt


def snapshot_checkout(repo: Path, dest: Path) -> Path:
    """A copy of the tool's sources of `repo` (npu_migrate/, rules/, pyproject.toml) at `dest`."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    dest.mkdir(parents=True)
    for name in ("npu_migrate", "rules"):
        source = repo / name
        # (npu_migrate/rules is a link to ../rules in a development checkout: copied as a link)
        shutil.copytree(source, dest / name, symlinks=True, ignore=ignore)
    if (repo / "pyproject.toml").is_file():
        shutil.copy2(repo / "pyproject.toml", dest / "pyproject.toml")
    return dest


def run_against(args: argparse.Namespace, info: dict) -> int:
    """--against REV: the torch tree's `check`, REV and this checkout interleaved, medians."""
    co = _compare_output()
    root = torch_root()
    try:
        with co.worktree(args.against) as old_tree, tempfile.TemporaryDirectory(prefix="npu-migrate-bench-") as tmp:
            files = python_files(root)
            lines = sum(count_lines(p.read_bytes()) for p in files)
            co.probe(old_tree.path)
            changes = co.uncommitted()
            # this checkout as it is now, copied: an edit during the run (they take many minutes)
            # would otherwise mix two versions of the tool in one side, and change the cache's
            # fingerprint between its cold and warm runs (every warm entry then misses)
            this = snapshot_checkout(co.REPO, Path(tmp) / "this-checkout")
            co.probe(this)
            sides = [
                Side("old", f"{args.against} = {old_tree.describe}", co.launcher(old_tree.path)),
                Side("new", f"{co.REPO} (working tree, copied at the start"
                            + (f"; {changes} uncommitted changes under npu_migrate/ and rules/)" if changes else ")"),
                     co.launcher(this)),
            ]
            bench = Bench(sys.executable, args.jobs, args.timeout, Path(tmp), verbose=not args.quiet,
                          probe_cache=False)
            for side in sides:
                helped = subprocess.run([*side.prefix, "check", "--help"], capture_output=True, text=True,
                                        timeout=120, check=False, cwd=tmp)
                side.cache_flag = "--cache-dir" in helped.stdout
                if helped.returncode != 0:
                    raise BenchmarkError(f"{side.label} ({side.what}): `check --help` exit {helped.returncode}: "
                                         f"{helped.stderr.strip()[-600:]}")
            bench.notes.append(f"torch tree: {root} ({len(files):,} .py files, {lines:,} lines)")
            # The floor first: it also brings the corpus into the page cache before round 1.
            bench.floor("torch", files, lines, root)
            for n in range(1, args.rounds + 1):
                for side in sides:
                    cache = bench.work / f"cache-{side.label}-{n}"
                    for phase in AB_PHASES:
                        if phase == "warm" and not side.cache_flag:
                            continue
                        ab_check(bench, side, phase, n, root, len(files), lines, cache)
            bench.finish()
    except co.SetupError as exc:
        raise BenchmarkError(str(exc)) from None
    info["load_average_at_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None

    print(describe(info))
    for side in sides:
        print(f"{side.label}: {side.what}")
    print(f"both run as `{Path(sys.executable).name} -c <bootstrap> CHECKOUT check TORCH --output-format json "
          f"-j {args.jobs} --cache-dir DIR` (compare_output.launcher); cold: a fresh empty DIR, warm: the "
          f"same DIR again; {args.rounds} rounds, interleaved old, new, old, new ...; medians")
    for side in sides:
        if not side.cache_flag:
            print(f"note: {side.label} has no --cache-dir: no warm run")
    for note in bench.notes:
        print(note)
    print()
    print(text_table(bench.results))
    for m in bench.results:
        for note in m.notes:
            print(f"note: {m.name}: {note}")
    print()
    for line in ab_table(sides):
        print(line)
    old, new = sides
    if len(old.seen | new.seen) > 1:
        print(f"note: files checked and findings (per run) differ: old {sorted(old.seen)}, new {sorted(new.seen)}")
    if args.json_file:
        payload = {
            "machine": info,
            "jobs": args.jobs,
            "against": {"rev": args.against, "describe": old.what},
            "new": new.what,
            "rounds": args.rounds,
            "notes": bench.notes,
            "medians": {
                side.label: {phase: {"wall_s": side.median(phase), "rss_tree_peak": side.median(phase, "rss_tree_peak")}
                             for phase in AB_PHASES}
                for side in sides
            },
            "ratio_new_old": {phase: _ratio(old.median(phase), new.median(phase)) for phase in AB_PHASES},
            "results": [
                {**asdict(m), "side": side.label, "round": i, "lines_per_s": m.lines_per_s}
                for side in sides for phase in AB_PHASES for i, m in enumerate(side.runs[phase], 1)
            ],
        }
        Path(args.json_file).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 1 if any(m.status != "ok" for m in bench.results) else 0


# ------------------------------------------------------------------ --shim-overhead

SHIM_TEMPLATE = Path(__file__).resolve().parent.parent / "npu_migrate" / "shim"
FAKE_NPU = Path(__file__).resolve().parent.parent / "tests" / "fake_npu"
SHIM_OVERHEAD_TARGET_NS = 1000.0  # issue #16: a forwarded attribute costs at most 1 us over the direct one

# Run in a child with the shim importable as `npu_compat`: time each shim expression against the
# direct torch one (timeit, best of ROUNDS), print one JSON object. On the fake NPU every torch.npu
# call appends to torch_npu.calls: that list is replaced by a sink so that memory stays flat.
SHIM_OVERHEAD_CODE = r"""
import json, sys, timeit
import torch
import npu_compat as s
number, rounds = int(sys.argv[1]), int(sys.argv[2])
npu = s.device_type() == "npu"
if npu:
    import torch_npu
    torch_npu.calls = type("Sink", (list,), {"append": lambda self, item: None})()
mod = "torch.npu" if npu else "torch.cuda"
amp = "sys.modules['torch_npu.npu.amp']" if npu else "torch.cuda.amp"
cases = [
    ("npu_compat.synchronize", "s.synchronize", mod + ".synchronize"),
    ("npu_compat.memory_allocated", "s.memory_allocated", mod + ".memory_allocated"),
    ("npu_compat.Stream", "s.Stream", mod + ".Stream"),
    ("npu_compat.autocast", "s.autocast", amp + ".autocast"),
    ("npu_compat.device_count()", "s.device_count()", mod + ".device_count()"),
    ("npu_compat.is_available()", "s.is_available()", mod + ".is_available()"),
    ("npu_compat.GradScaler", "s.GradScaler", amp + ".GradScaler"),
    ("npu_compat.get_device_name", "s.get_device_name", mod + ".get_device_name"),
    ("npu_compat.host_memory_stats", "s.host_memory_stats" if not npu else "s.mem_get_info",
     mod + (".host_memory_stats" if not npu else ".mem_get_info")),
    ("npu_compat.VISIBLE_DEVICES_ENV", "s.VISIBLE_DEVICES_ENV", "s.DEVICE_ENV"),
]
if npu:
    cases += [
        ("npu_compat.synchronize()", "s.synchronize()", mod + ".synchronize()"),
        ("npu_compat.memory_allocated(0)", "s.memory_allocated(0)", mod + ".memory_allocated(0)"),
    ]
    # an adapted call (keywords renamed, issue #16) does work of its own: shown, not held to the target
    if hasattr(s, "_NPU_PARAMETERS"):
        cases += [("npu_compat.get_device_name(device=0) [adapter]", "s.get_device_name(device=0)",
                   mod + ".get_device_name(device_name=0)", False)]
scope = {"s": s, "torch": torch, "sys": sys}
out = []
for name, shim, direct, *target in cases:
    eval(shim, scope), eval(direct, scope)  # resolve once, fail early
    best = {}
    for label, stmt in (("shim", shim), ("direct", direct)):
        timer = timeit.Timer(stmt, globals=scope)
        best[label] = min(timer.repeat(repeat=rounds, number=number)) / number * 1e9
    out.append({"name": name, "direct": direct, "shim_ns": best["shim"], "direct_ns": best["direct"],
                "overhead_ns": best["shim"] - best["direct"], "target": bool(target[0]) if target else True})
print(json.dumps({"device_type": s.device_type(), "torch": torch.__version__, "cases": out}))
"""


def shim_overhead(template: Path, number: int, rounds: int) -> list[dict]:
    """Time the shim's forwarded attributes against direct torch.cuda / torch.npu access.

    Two children: this machine as it is (no NPU: the CUDA path) and, when tests/fake_npu exists,
    the fake torch_npu on the path (the NPU path). The shim is `template` copied as npu_compat.
    """
    runs = []
    with tempfile.TemporaryDirectory(prefix="npu-migrate-shim-") as tmp:
        package = Path(tmp) / "npu_compat"
        package.mkdir()
        for source in sorted(template.glob("*.py")):
            shutil.copyfile(source, package / source.name)
        modes = [("cuda path (no NPU)", [tmp])]
        if FAKE_NPU.is_dir():
            modes.append(("npu path (tests/fake_npu)", [tmp, str(FAKE_NPU)]))
        for label, path in modes:
            env = {k: v for k, v in os.environ.items()
                   if k not in ("PYTHONPATH", "NPU_COMPAT_DEVICE", "TORCH_NPU_DEVICE_CAPABILITY")}
            env.update(PYTHONPATH=os.pathsep.join(path), TORCH_DEVICE_BACKEND_AUTOLOAD="0",
                       PYTHONDONTWRITEBYTECODE="1", PYTHONWARNINGS="ignore")
            proc = subprocess.run([sys.executable, "-c", SHIM_OVERHEAD_CODE, str(number), str(rounds)],
                                  cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                raise BenchmarkError(f"shim overhead child ({label}) failed:\n{proc.stderr[-2000:]}")
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            result["mode"] = label
            runs.append(result)
    return runs


def run_shim_overhead(args: argparse.Namespace, info: dict) -> int:
    template = Path(args.shim_template) if args.shim_template else SHIM_TEMPLATE
    try:
        runs = shim_overhead(template, args.shim_number, args.rounds)
    except BenchmarkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(describe(info))
    print(f"shim: {template}; timeit: best of {args.rounds} x {args.shim_number}; "
          f"target: at most {SHIM_OVERHEAD_TARGET_NS:.0f} ns over the direct access")
    missed = 0
    for run in runs:
        print()
        print(f"{run['mode']}: device_type() = {run['device_type']!r}, torch {run['torch']}")
        table = [("shim expression", "direct", "direct ns", "shim ns", "overhead ns", "target")]
        for case in run["cases"]:
            met = case["overhead_ns"] <= SHIM_OVERHEAD_TARGET_NS
            held = case.get("target", True)
            missed += held and not met
            table.append((case["name"], case["direct"], f"{case['direct_ns']:.0f}", f"{case['shim_ns']:.0f}",
                          f"{case['overhead_ns']:+.0f}", ("met" if met else "MISSED") if held else "-"))
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        for row in table:
            print("  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))))
    if args.json_file:
        payload = {"machine": info, "shim": str(template), "number": args.shim_number, "rounds": args.rounds,
                   "target_ns": SHIM_OVERHEAD_TARGET_NS, "runs": runs}
        Path(args.json_file).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 1 if missed else 0


# ------------------------------------------------------------------ output

def _size(n: int) -> str:
    if n >= GIB:
        return f"{n / GIB:.2f} GiB"
    return f"{n / 1024**2:.0f} MiB"


def _met(m: Measurement) -> str:
    if m.status != "ok":
        return m.status
    if m.met is None:
        return ""
    if m.met:
        return "yes"
    why = []
    if m.target_s is not None and m.wall_s > m.target_s:
        why.append("time")
    if m.rss_tree_peak > RSS_TARGET:
        why.append("RSS")
    return f"no ({', '.join(why)})"


COLUMNS = ("measurement", "files", "lines", "wall s", "lines/s", "peak RSS (tree)", "max 1 proc",
           "PSS (tree)", "x floor", "target", "met?")


def rows(results: list[Measurement]) -> list[tuple[str, ...]]:
    out = []
    for m in results:
        out.append((
            m.name,
            f"{m.files:,}",
            f"{m.lines:,}",
            f"{m.wall_s:.2f}",
            f"{m.lines_per_s:,.0f}",
            _size(m.rss_tree_peak),
            _size(m.rss_max_single),
            _size(m.pss_tree_peak) if m.pss_tree_peak else "",
            f"{m.floor_ratio:.1f}" if m.floor_ratio is not None else "",
            f"<= {m.target_s:g} s, <= 1 GiB" if m.target_s is not None else "",
            _met(m),
        ))
    return out


def text_table(results: list[Measurement]) -> str:
    table = [COLUMNS, *rows(results)]
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS))]
    right = {1, 2, 3, 4, 5, 6, 7, 8}
    lines = []
    for n, row in enumerate(table):
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(results: list[Measurement]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in rows(results)]
    return "\n".join(lines)


def describe(info: dict) -> str:
    load = info.get("load_average_at_start")
    load_text = ", ".join(f"{x:.2f}" for x in load) if load else "unknown"
    return (
        f"machine: {info['cpu']}, {info['cores']} cores ({info['usable_cores']} usable), "
        f"{info['ram_bytes'] / GIB:.1f} GiB RAM, {info['os']}\n"
        f"software: Python {info['python']}, torch {info['torch']}, libcst {info['libcst']}, "
        f"npu-migrate {info['npu_migrate']}\n"
        f"load average at start (1, 5, 15 min): {load_text}"
    )


def _own_peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def npu_migrate_exe() -> str:
    beside = Path(sys.executable).with_name("npu-migrate")
    if beside.exists():
        return str(beside)
    found = shutil.which("npu-migrate")
    if not found:
        raise BenchmarkError("npu-migrate is not installed (pip install -e .) next to this Python or on PATH")
    return found


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                        help="worker processes passed to npu-migrate (default: the number of CPUs)")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help=f"run only these corpora ({', '.join(CORPORA)}); repeatable or comma-separated")
    parser.add_argument("--json", dest="json_file", metavar="FILE", help="save the results as JSON")
    parser.add_argument("--markdown", action="store_true", help="also print the table as README rows")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds before one measurement is killed (default 1800)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--against", metavar="REV",
                        help="only the torch tree's check, for REV (a git worktree) and this checkout, "
                             "interleaved; prints both medians and the ratio")
    parser.add_argument("--rounds", type=int, default=3,
                        help="with --against: measurements of each side; with --shim-overhead: timeit "
                             "repeats (default 3)")
    parser.add_argument("--shim-overhead", action="store_true",
                        help="only time the shim's forwarded attributes (npu_compat.synchronize, "
                             "device_count() ...) against torch.cuda / torch.npu, on this machine and "
                             "on the fake NPU of tests/fake_npu")
    parser.add_argument("--shim-template", metavar="DIR",
                        help="with --shim-overhead: the shim to time (default npu_migrate/shim/)")
    parser.add_argument("--shim-number", type=int, default=200_000,
                        help="with --shim-overhead: timeit loops per repeat (default 200000)")
    args = parser.parse_args(argv)
    if args.against is not None and args.only:
        parser.error("--against measures the torch tree's check only; leave out --only")
    if args.shim_overhead and (args.against is not None or args.only):
        parser.error("--shim-overhead times the shim only; leave out --against and --only")
    if args.shim_template and not args.shim_overhead:
        parser.error("--shim-template needs --shim-overhead")
    if args.shim_number < 1:
        parser.error("--shim-number must be at least 1")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    only = [n.strip() for value in args.only for n in value.split(",") if n.strip()]
    unknown = sorted(set(only) - set(CORPORA))
    if unknown:
        parser.error(f"--only: unknown corpus {', '.join(unknown)} (choose from {', '.join(CORPORA)})")
    args.only = [c for c in CORPORA if c in only] if only else list(CORPORA)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    info = machine()
    if args.shim_overhead:
        return run_shim_overhead(args, info)
    if args.against is not None:
        signal.signal(signal.SIGTERM, _terminate)  # the worktree is removed as after Ctrl-C
        try:
            return run_against(args, info)
        except BenchmarkError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("interrupted (the worktree was removed)", file=sys.stderr)
            return 130
    try:
        exe = npu_migrate_exe()
        with tempfile.TemporaryDirectory(prefix="npu-migrate-bench-") as tmp:
            bench = Bench(exe, args.jobs, args.timeout, Path(tmp), verbose=not args.quiet)
            for corpus in args.only:
                RUNNERS[corpus](bench)
            bench.finish()
    except BenchmarkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    info["load_average_at_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    results = bench.results

    print(describe(info))
    print(f"npu-migrate: {exe}, -j {args.jobs}; cache flags: "
          + ", ".join(f"{cmd} {'--cache-dir' if ok else 'none (warm = no cache)'}"
                      for cmd, ok in bench.cache.items()))
    print("floor: ast.parse of the same files in one subprocess, serial; x floor = wall / floor wall")
    print("peak RSS (tree): sampled sum over the process tree, compared with the 1 GiB target; "
          "max 1 proc: largest single process (wait4 rusage; never below this benchmark's own "
          f"{_size(_own_peak_rss())}); PSS (tree): shared pages split, sampled every 0.2 s")
    for note in bench.notes:
        print(note)
    print()
    print(text_table(results))
    for m in results:
        for note in m.notes:
            print(f"note: {m.name}: {note}")
    missed = [m.name for m in results if m.met is False]
    if missed:
        print(f"targets missed: {len(missed)} of {sum(m.met is not None for m in results)}")
    if args.markdown:
        print()
        print(markdown_table(results))
    if args.json_file:
        payload = {
            "machine": info,
            "jobs": args.jobs,
            "npu_migrate": exe,
            "cache_flags": bench.cache,
            "notes": bench.notes,
            "results": [
                {**{k: v for k, v in asdict(m).items()}, "lines_per_s": m.lines_per_s} for m in results
            ],
        }
        Path(args.json_file).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 1 if any(m.status != "ok" for m in results) else 0


if __name__ == "__main__":
    sys.exit(main())
