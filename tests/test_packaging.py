"""The release artefacts: the sdist and the wheel built from this checkout, their metadata, and
the wheel installed into a fresh virtual environment without torch.

Built offline (`python -m build --no-isolation`, with the setuptools of the test environment,
which the `[test]` extra keeps within `[build-system]`'s range) from a copy of the files git
would commit, so the checkout's own build/ and egg-info are not touched. The fresh environment
gets the wheel and, through a .pth file, its declared dependencies (and nothing else) from this
environment: no network, and no torch, so the CLI is shown to work without it.
"""

from __future__ import annotations

import email.parser
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from npu_migrate import __version__
from npu_migrate.inject import TEMPLATE_FILES

REPO = Path(__file__).resolve().parent.parent
NAME = "npu_migrate"
WHEEL = f"{NAME}-{__version__}-py3-none-any.whl"
SDIST = f"{NAME}-{__version__}.tar.gz"
PLACEHOLDER = re.compile(r"[<>]|example\.(com|org)|todo|tbd|xxx|placeholder", re.I)

pytestmark = pytest.mark.integration


def _tool(module: str) -> None:
    try:
        __import__(module)
    except ImportError:
        pytest.skip(f"{module} is not installed (pip install -e '.[test]')")


SKIPPED_DIRS = {".git", ".venv", "venv", "build", "dist", "__pycache__", ".pytest_cache", ".ruff_cache"}


def _source_files() -> list[str]:
    """The files a commit of this checkout would hold (tracked, and untracked but not ignored);
    outside a git checkout, every file but those of the usual generated folders."""
    try:
        proc = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                              cwd=REPO, capture_output=True, text=True)
    except OSError:
        proc = None
    if proc is not None and proc.returncode == 0 and (REPO / ".git").exists():
        return [name for name in proc.stdout.split("\0") if name and (REPO / name).is_file()]
    return sorted(
        str(path.relative_to(REPO)) for path in REPO.rglob("*")
        if path.is_file() and not any(part in SKIPPED_DIRS or part.endswith(".egg-info")
                                      for part in path.relative_to(REPO).parts))


@pytest.fixture(scope="module")
def source_files() -> list[str]:
    return _source_files()


@pytest.fixture(scope="module")
def dist(tmp_path_factory, source_files) -> Path:
    """sdist and wheel, built offline from a copy of the checkout."""
    _tool("build")
    top = tmp_path_factory.mktemp("packaging")
    source = top / "src"
    for name in source_files:
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    out = top / "dist"
    env = {**os.environ, "PYTHONWARNINGS": "default"}  # deprecation warnings are what we look for
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
                          capture_output=True, text=True, env=env, timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    # setuptools warns about the pre-PEP 639 license forms (a table, a License classifier)
    assert "Deprecat" not in log, [line for line in log.splitlines() if "eprecat" in line]
    # a folder of the package that pyproject.toml's `packages` does not list would not ship
    assert "absent from the `packages` configuration" not in log, [
        line for line in log.splitlines() if "absent from the" in line]
    assert sorted(p.name for p in out.iterdir()) == sorted([SDIST, WHEEL])
    return out


def _metadata(text: str):
    return email.parser.Parser().parsestr(text)


def wheel_metadata(dist: Path):
    with zipfile.ZipFile(dist / WHEEL) as wheel:
        return _metadata(wheel.read(f"{NAME}-{__version__}.dist-info/METADATA").decode())


def test_twine_check(dist):
    _tool("twine")
    proc = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(dist / SDIST), str(dist / WHEEL)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("PASSED") == 2, proc.stdout


def test_license_metadata_is_pep_639(dist):
    license_text = (REPO / "LICENSE").read_text()
    assert license_text.lstrip().startswith("Apache License\n")
    assert "Copyright 2026 The npu-migrate authors" in license_text
    with tarfile.open(dist / SDIST) as sdist:
        pkg_info = _metadata(sdist.extractfile(f"{NAME}-{__version__}/PKG-INFO").read().decode())
        assert sdist.extractfile(f"{NAME}-{__version__}/LICENSE").read().decode() == license_text
    with zipfile.ZipFile(dist / WHEEL) as wheel:
        assert wheel.read(f"{NAME}-{__version__}.dist-info/licenses/LICENSE").decode() == license_text
    for meta in (wheel_metadata(dist), pkg_info):
        assert meta["Metadata-Version"] == "2.4"
        assert meta["Name"] == "npu-migrate" and meta["Version"] == __version__
        assert meta["License-Expression"] == "Apache-2.0"
        assert meta.get_all("License-File") == ["LICENSE"]
        assert meta["License"] is None  # the legacy free-text field is gone
        classifiers = meta.get_all("Classifier") or []
        assert classifiers and not [c for c in classifiers if c.startswith("License ::")]
        assert meta["Requires-Python"] == ">=3.10"
        assert meta["Description-Content-Type"] == "text/markdown"
        # no Project-URL until the project is hosted, and never a made-up one
        assert not [url for url in meta.get_all("Project-URL") or [] if PLACEHOLDER.search(url)]


def test_the_tool_requires_no_torch(dist):
    requires = wheel_metadata(dist).get_all("Requires-Dist")
    runtime = [r for r in requires if "extra ==" not in r]
    assert sorted(re.split(r"[<>=;\s]", r)[0] for r in runtime) == ["click", "libcst", "rich", "tomli"]
    assert not [r for r in requires if r.startswith("torch")]


def test_build_requirement_is_bounded():
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    requires = pyproject["build-system"]["requires"]
    assert requires == [next(r for r in requires if r.startswith("setuptools"))]
    assert re.fullmatch(r"setuptools>=(\d+),<(\d+)", requires[0]), requires
    low, high = map(int, re.findall(r"\d+", requires[0]))
    assert low >= 77 and high > low  # 77: the first with PEP 639's `license` expression
    test_pin = next(r for r in pyproject["project"]["optional-dependencies"]["test"]
                    if r.startswith("setuptools"))
    assert test_pin == requires[0]  # --no-isolation builds use the test environment's setuptools


def test_wheel_and_sdist_hold_the_package_data(dist, source_files):
    with zipfile.ZipFile(dist / WHEEL) as wheel:
        names = set(wheel.namelist())
        entry_points = wheel.read(f"{NAME}-{__version__}.dist-info/entry_points.txt").decode()
    # every file of the package a commit would hold (modules, shim templates, data), and the
    # rule tables, which live in rules/
    expected = {name for name in source_files if name.startswith(f"{NAME}/")}
    expected |= {f"{NAME}/{name}" for name in source_files
                 if name.startswith("rules/") and name.endswith((".py", ".toml", ".json"))}
    assert expected <= names, f"not in the wheel (pyproject.toml's packages / package-data): {sorted(expected - names)}"
    assert {f"{NAME}/shim/{name}" for name in TEMPLATE_FILES} <= names
    assert f"{NAME}/rules/codes.toml" in names and f"{NAME}/rules/torch_npu_api.json" in names
    assert "npu-migrate = npu_migrate.cli:run" in entry_points
    assert not [n for n in names if n.startswith(("tests/", "fixtures/", "rules/")) or "__pycache__" in n]

    with tarfile.open(dist / SDIST) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    for name in ("LICENSE", "README.md", "pyproject.toml", "PKG-INFO", "rules/codes.toml",
                 "rules/torch_npu_api.json", *(f"{NAME}/shim/{n}" for n in TEMPLATE_FILES)):
        assert name in members, name


# --------------------------------------------------------------------------------------------
# The wheel in a fresh environment, without torch


def _closure(requirements: list[str]) -> list[metadata.Distribution]:
    """The installed distributions that ``requirements`` (Requires-Dist lines) need, transitively."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, metadata.Distribution] = {}
    todo = list(requirements)
    while todo:
        requirement = Requirement(todo.pop())
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        key = canonicalize_name(requirement.name)
        if key not in found:
            found[key] = metadata.distribution(requirement.name)
            todo.extend(found[key].requires or [])
    return list(found.values())


@pytest.fixture(scope="module")
def fresh(dist, tmp_path_factory) -> Path:
    """A virtual environment with the wheel and its dependencies only: the folder of its bin/."""
    top = tmp_path_factory.mktemp("fresh")
    venv = top / "venv"
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
                           "--no-deps", "--disable-pip-version-check", "--no-compile", str(dist / WHEEL)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the declared dependencies, linked from this environment (no network)
    deps = top / "deps"
    deps.mkdir()
    for distribution in _closure(wheel_metadata(dist).get_all("Requires-Dist")):
        tops = {Path(str(f)).parts[0] for f in distribution.files or () if not str(f).startswith("..")}
        for name in tops:
            source = Path(str(distribution.locate_file(name)))
            if source.exists() and not (deps / name).exists():
                (deps / name).symlink_to(source)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "_npu_migrate_test_deps.pth").write_text(f"{deps}\n")
    return venv / "bin"


def _run(bin_dir: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONHOME")}
    env["NO_COLOR"] = "1"
    return subprocess.run([str(bin_dir / argv[0]), *argv[1:]], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_wheel_installs_and_runs_without_torch(fresh, tmp_path):
    where = _run(fresh, "python", "-c", "import npu_migrate, importlib.util as u; "
                 "print(npu_migrate.__file__); print(u.find_spec('torch'))", cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    module_file, torch_spec = where.stdout.splitlines()
    assert Path(module_file).is_relative_to(fresh.parent)  # the wheel's copy, not this checkout
    assert torch_spec == "None"  # torch is not there

    version = _run(fresh, "npu-migrate", "--version", cwd=tmp_path)
    assert version.returncode == 0 and __version__ in version.stdout, version.stdout + version.stderr
    assert _run(fresh, "npu-migrate", "--help", cwd=tmp_path).returncode == 0
    rules = _run(fresh, "npu-migrate", "rules", cwd=tmp_path)
    assert rules.returncode == 0 and "NPU201" in rules.stdout, rules.stderr

    # the README's first command, then a write run and a check, on a copy of the example project
    project = tmp_path / "nanochat_mini"
    shutil.copytree(REPO / "fixtures" / "projects" / "nanochat_mini", project)
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    dry = _run(fresh, "npu-migrate", str(project), "--dry-run", cwd=tmp_path)
    assert dry.returncode in (0, 1), dry.stdout + dry.stderr
    assert "torch.cuda" in dry.stdout and "npu_compat" in dry.stdout  # a diff was shown
    assert {p: p.read_bytes() for p in project.rglob("*") if p.is_file()} == before
    wrote = _run(fresh, "npu-migrate", str(project), "-q", cwd=tmp_path)
    assert wrote.returncode in (0, 1), wrote.stdout + wrote.stderr
    assert (project / "npu_compat" / "__init__.py").is_file()  # the shim, from the wheel's templates
    assert {p: p.read_bytes() for p in project.rglob("*") if p.is_file()} != before
    check = _run(fresh, "npu-migrate", "check", str(project), cwd=tmp_path)
    assert check.returncode in (0, 1), check.stdout + check.stderr
    assert not re.search(r"NPU\d+ \[\*\]", check.stdout), check.stdout  # nothing rewritable is left
    for proc in (dry, wrote, check):
        assert "Traceback" not in proc.stderr, proc.stderr

    # the doctor reports the missing torch as a row, with this environment's pip
    doctor = _run(fresh, "npu-migrate", "doctor", cwd=tmp_path)
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert re.search(r"^torch\s+fail\s+torch is not importable", doctor.stdout, re.M), doctor.stdout
    assert f"{fresh / 'python'} -m pip install torch" in doctor.stdout
    assert "Traceback" not in doctor.stderr
