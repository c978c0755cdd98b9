"""Helpers of tests/test_installed_matrix.py: migrate a copied project, install it for real into a
throw-away virtual environment, run it from outside, compare with the original.

Everything runs in subprocesses with a hermetic environment (no PYTHONPATH, no user site, no
byte-code files), each with a timeout. Two commands run at a time (the machine has 2 cores): the
original and the migrated copy of one usage side by side.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = REPO_ROOT / "fixtures" / "installable"
SHIM = "npu_compat"

TOOL_TIMEOUT = 120
RUN_TIMEOUT = 120
PIP_TIMEOUT = 240
PARALLEL = 2

# Variables that would let a run import something from elsewhere than the environment under test.
_DROPPED_VARS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH", "PYTHONUSERBASE",
                 "PYTHONINSPECT", "VIRTUAL_ENV", "CONDA_PREFIX", "__PYVENV_LAUNCHER__")


def hermetic_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in _DROPPED_VARS and not k.startswith("PYTEST_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONNOUSERSITE"] = "1"
    env["PYTHONHASHSEED"] = "0"
    env.update(extra)
    return env


@dataclass
class Ran:
    """One finished command."""

    cmd: list
    cwd: str
    returncode: int
    stdout: str
    stderr: str

    def describe(self, tail: int = 3000) -> str:
        return (f"$ (cd {self.cwd} && {' '.join(map(str, self.cmd))})\nexit {self.returncode}\n"
                f"--- stdout ---\n{self.stdout[-tail:]}\n--- stderr ---\n{self.stderr[-tail:]}")


@dataclass
class Cmd:
    argv: Sequence
    cwd: Path
    stdin: str | None = None
    env: dict | None = None
    timeout: float = RUN_TIMEOUT


def run(cmd: Cmd) -> Ran:
    argv = [str(a) for a in cmd.argv]
    try:
        proc = subprocess.run(argv, cwd=cmd.cwd, input=cmd.stdin, capture_output=True, text=True,
                              env=cmd.env or hermetic_env(), timeout=cmd.timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        def text(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        return Ran(argv, str(cmd.cwd), -9, text(exc.stdout),
                   text(exc.stderr) + f"\n[timed out after {cmd.timeout} s]")
    return Ran(argv, str(cmd.cwd), proc.returncode, proc.stdout, proc.stderr)


def run_all(cmds: Iterable[Cmd]) -> list[Ran]:
    """Run the commands, PARALLEL at a time; results in the order given."""
    cmds = list(cmds)
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        return list(pool.map(run, cmds))


def map_parallel(fn: Callable, items: Iterable) -> list:
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        return list(pool.map(fn, items))


# ---------------------------------------------------------------------------------------- tool


def tool_cmd(target: Path, cwd: Path) -> Cmd:
    """`python -m npu_migrate TARGET --no-cache`, the tool of the checkout these tests live in."""
    env = hermetic_env(PYTHONPATH=str(REPO_ROOT))
    return Cmd([sys.executable, "-m", "npu_migrate", target, "--no-cache"], cwd, env=env,
               timeout=TOOL_TIMEOUT)


def tool_problem(ran: Ran) -> str | None:
    """Why the tool run counts as a failure: exit 2 (or another code than 0/1), or a traceback."""
    if ran.returncode not in (0, 1) or "Traceback (most recent call last)" in ran.stderr:
        return "npu-migrate failed\n" + ran.describe()
    return None


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under root (relative posix path -> bytes)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() or path.is_symlink():
            out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out


def unified_diffs(before: dict[str, bytes], after: dict[str, bytes], limit: int = 6000) -> str:
    """The text diff of every file that changed or appeared (for failure messages)."""
    import difflib

    chunks = []
    for rel in sorted(set(before) | set(after)):
        old, new = before.get(rel, b""), after.get(rel, b"")
        if old == new:
            continue
        chunks.extend(difflib.unified_diff(
            old.decode("utf-8", "replace").splitlines(keepends=True),
            new.decode("utf-8", "replace").splitlines(keepends=True),
            f"a/{rel}", f"b/{rel}"))
    text = "".join(chunks)
    return text if len(text) <= limit else text[:limit] + "\n[... diff cut]"


def tree_diff(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    lines = []
    for rel in sorted(set(before) | set(after)):
        if rel not in after:
            lines.append(f"removed {rel}")
        elif rel not in before:
            lines.append(f"added {rel}")
        elif before[rel] != after[rel]:
            lines.append(f"changed {rel}")
    return lines


# ------------------------------------------------------------------------------ shim imports

# `import npu_compat`, `import pkg.npu_compat`, `from pkg import npu_compat`, `from . import
# npu_compat`, `from npu_compat import x`, `from .npu_compat import x` (also indented, in a try:).
SHIM_IMPORT = re.compile(
    rf"^[ \t]*(?:import[ \t]+[\w.]*\b{SHIM}\b"
    rf"|from[ \t]+[\w.]*\b{SHIM}\b[\w.]*[ \t]+import\b"
    rf"|from[ \t]+[\w.]+[ \t]+import[ \t]+\(?[^\n]*\b{SHIM}\b)",
    re.MULTILINE,
)


def imports_shim(text: str) -> bool:
    return SHIM_IMPORT.search(text) is not None


def notebook_code(path: Path) -> str:
    """The code cells of a notebook, in order, as one script (what a kernel runs, top to bottom)."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    parts = []
    for cell in cells:
        if cell.get("cell_type") == "code":
            src = cell.get("source", "")
            parts.append("".join(src) if isinstance(src, list) else src)
    return "\n".join(parts) + "\n"


def outermost_regular_package(relpath: str, names: set) -> str | None:
    """The shallowest folder holding `relpath` that is a regular package (has __init__.py), its
    parents being namespace folders at most: `acme/vision` for `acme/vision/train.py` when acme/
    has no __init__.py, `gptlib` for `gptlib/layers/block.py`. None for a top-level module."""
    parts = relpath.split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        folder = "/".join(parts[:depth])
        if f"{folder}/__init__.py" in names:
            return folder
    return None


def shim_placement_problems(names: Iterable[str], read: Callable[[str], bytes]) -> list[str]:
    """What is wrong with where a distribution's files put the shim, as the contract says:
    every file that imports the shim has `<its package>/npu_compat/__init__.py` beside it in the
    distribution, and no copy of the shim sits at the top level or in a namespace folder (shared
    with other distributions, so two migrated libraries would overwrite each other's copy)."""
    names = {n for n in names if n and not n.endswith("/") and not n.startswith("..")
             and ".dist-info/" not in n}
    problems = []
    for name in sorted(names):
        parts = name.split("/")
        if len(parts) >= 2 and parts[-2] == SHIM and parts[-1] == "__init__.py":
            parent = "/".join(parts[:-2])
            if not parent:
                problems.append(f"top-level {SHIM}/ in the distribution ({name}): two migrated "
                                f"libraries would clash")
            elif f"{parent}/__init__.py" not in names:
                problems.append(f"{name}: the shim sits in a namespace folder ({parent}/ has no "
                                f"__init__.py), shared with other distributions")
    for name in sorted(names):
        if not name.endswith(".py") or SHIM in name.split("/")[:-1]:
            continue
        if not imports_shim(read(name).decode("utf-8", errors="replace")):
            continue
        package = outermost_regular_package(name, names)
        if package is None:
            problems.append(f"{name} imports {SHIM} but is a top-level module (no package to hold it)")
        elif f"{package}/{SHIM}/__init__.py" not in names:
            problems.append(f"{name} imports {SHIM} but the distribution has no "
                            f"{package}/{SHIM}/__init__.py")
    return problems


def wheel_placement_problems(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return shim_placement_problems(zf.namelist(), zf.read)


def installed_placement_problems(venv: Venv, dist_name: str) -> list[str]:
    """The same check on what an install put into site-packages, file list from RECORD."""
    site = venv.site_packages
    records = list(site.glob(f"{dist_name}-*.dist-info/RECORD"))
    assert len(records) == 1, f"no single RECORD for {dist_name} in {site}: {records}"
    names = [line.split(",")[0] for line in records[0].read_text().splitlines() if line.strip()]
    return shim_placement_problems(names, lambda n: (site / n).read_bytes())


# ------------------------------------------------------------------------------ environments


@dataclass
class Venv:
    """A virtual environment made without pip; torch and setuptools come from the test
    interpreter's site-packages through a .pth file (not copied)."""

    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def site_packages(self) -> Path:
        return Path(sysconfig.get_path("purelib", vars={"base": str(self.root),
                                                        "platbase": str(self.root)}))


def make_venv(root: Path) -> Venv:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True,
                   capture_output=True, timeout=60, env=hermetic_env())
    venv = Venv(root)
    assert venv.site_packages.is_dir(), venv.site_packages
    (venv.site_packages / "_test_interpreter_site.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    return venv


def pip_install_cmd(venv: Venv, target: Path, editable: bool = False) -> Cmd:
    """The test interpreter's pip installing into `venv`. It runs under the venv's python, which
    imports that very pip through the .pth file: the same as `sys.executable -m pip --python
    VENV/bin/python`, which re-runs pip under the venv's python anyway, one start-up cheaper."""
    argv = [venv.python, "-m", "pip", "install", "--no-deps", "--no-index", "--no-build-isolation",
            "--no-cache-dir", "--disable-pip-version-check"]
    argv += ["-e", target] if editable else [target]
    return Cmd(argv, target.parent, timeout=PIP_TIMEOUT)


def pip_wheel_cmd(project: Path, out: Path) -> Cmd:
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index", "--no-build-isolation",
            "--no-cache-dir", "--disable-pip-version-check", "-w", out, project]
    return Cmd(argv, project.parent, timeout=PIP_TIMEOUT)


def require_ok(ran: Ran, what: str) -> None:
    assert ran.returncode == 0, f"{what} failed\n{ran.describe()}"


# ------------------------------------------------------------------------------- comparison

_DURATION = re.compile(r" in \d+(?:\.\d+)?s(?: \([0-9:]+\))?")


def normalize_pytest(stdout: str) -> str:
    return _DURATION.sub("", stdout)


def assert_same_behaviour(orig: Ran, migrated: Ran, what: str, normalize=lambda s: s) -> None:
    """The original must succeed (else the fixture is broken); the migrated copy must succeed
    and print exactly the same."""
    assert orig.returncode == 0, f"FIXTURE BROKEN: the original fails ({what})\n{orig.describe()}"
    assert orig.stdout.strip(), f"FIXTURE BROKEN: the original prints nothing ({what})"
    assert migrated.returncode == 0, f"the migrated copy fails ({what})\n{migrated.describe()}"
    assert normalize(migrated.stdout) == normalize(orig.stdout), (
        f"the migrated copy prints something else ({what})\n--- original ---\n{orig.stdout}"
        f"\n--- migrated ---\n{migrated.stdout}")


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst
