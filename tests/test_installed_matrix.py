"""Migrated projects still work the way their users use them: installed, editable, as wheels, as
scripts, as notebooks.

The matrix (fixtures/installable/, one folder per project shape):

  flat_find       flat layout, setup.py, packages=find_packages()      pip install . ; run from outside
  flat_explicit   flat layout, setup.py, packages=["gptlib", ...]      pip install . ; run from outside
  src_setuptools  src layout, pyproject, setuptools auto-discovery     pip install -e . ; wheel in a fresh venv
  src_hatch       src layout, pyproject, hatchling                     pip install -e . ; wheel in a fresh venv
  multi_pkg       two top-level packages + tests/ + scripts/           pytest, python scripts/x.py, python -m pkg.mod
  namespace_src   acme/ namespace (no __init__.py) + acme.vision       wheel ; pip install -e .
  scripts_only    no packaging: train.py, tools/eval.py, models/       python path/to/script.py (two cwds), -m
  notebooks_pkg   explore.ipynb + notebooks/analysis.ipynb + vislib/   code cells run in the notebook's folder
  single_file     `npu-migrate single_file/fitkit/util.py` only        import from the root, -m, pip install .

For every row the fixture is copied twice (orig/, migrated/), `python -m npu_migrate` migrates one
copy (exit 0 or 1; 2 or a traceback fails), and each usage runs on both copies: the original must
succeed and the migrated copy must succeed and print exactly the same (on a machine without an NPU
the shim is torch.cuda). Running the tool again on the migrated copy must change no byte.

Installs are real: a fresh virtual environment per install (made without pip; the test
interpreter's site-packages reach it through a .pth file, for torch, setuptools, hatchling and
pip), pip installing into it with --no-index --no-build-isolation, and the code run from a folder
outside the project with no PYTHONPATH. Wheels and installed file lists must hold the shim inside the
package that imports it (`gptlib/npu_compat/__init__.py`) and never a top-level `npu_compat/` (two
migrated libraries would overwrite each other's copy) nor one in a namespace folder.
"""

from __future__ import annotations

import importlib.util
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.install_helpers import (
    FIXTURES,
    SHIM,
    Cmd,
    Ran,
    assert_same_behaviour,
    copy_tree,
    imports_shim,
    installed_placement_problems,
    make_venv,
    map_parallel,
    normalize_pytest,
    notebook_code,
    pip_install_cmd,
    pip_wheel_cmd,
    require_ok,
    run,
    run_all,
    snapshot,
    tool_cmd,
    tool_problem,
    tree_diff,
    unified_diffs,
    wheel_placement_problems,
)

pytestmark = pytest.mark.integration

HAS_HATCHLING = importlib.util.find_spec("hatchling") is not None
HAS_EDITABLES = importlib.util.find_spec("editables") is not None
needs_hatchling = pytest.mark.skipif(
    not HAS_HATCHLING,
    reason="hatchling is not installed in the test environment (pip install hatchling; it is on "
           "the configured index)",
)
needs_hatch_editable = pytest.mark.skipif(
    not (HAS_HATCHLING and HAS_EDITABLES),
    reason="hatchling's editable install needs hatchling and editables in the test environment "
           "(pip install hatchling editables)",
)


@dataclass(frozen=True)
class Spec:
    name: str  # folder under fixtures/installable/
    rewritten: tuple  # files the migration must change so that they import the shim
    target: str = ""  # what is named on the command line, relative to the project ('' = itself)


SPECS = {
    s.name: s
    for s in (
        Spec("flat_find", ("tinynet/train.py", "tinynet/layers/mlp.py")),
        Spec("flat_explicit", ("gptlib/trainer.py", "gptlib/layers/block.py")),
        Spec("src_setuptools", ("src/srclib/engine.py", "src/srclib/nn/regressor.py")),
        Spec("src_hatch", ("src/hatchlib/device.py", "src/hatchlib/main.py")),
        Spec("multi_pkg", ("alpha/model.py", "beta/data.py", "scripts/train_both.py",
                           "tests/test_alpha.py")),
        Spec("namespace_src", ("src/acme/vision/net.py", "src/acme/vision/train.py")),
        Spec("scripts_only", ("train.py", "tools/eval.py", "models/mlp.py")),
        Spec("notebooks_pkg", ("vislib/fit.py", "explore.ipynb", "notebooks/analysis.ipynb")),
        Spec("single_file", ("fitkit/util.py",), target="fitkit/util.py"),
    )
}
SIDES = ("orig", "migrated")


@dataclass
class Row:
    spec: Spec
    base: Path
    migration: Ran | None = None
    again_diff: list | None = None  # files the second run changed; None: not run
    again_run: Ran | None = None
    again_details: str = ""  # the diff the second run made
    _installs: dict = field(default_factory=dict)

    @property
    def orig(self) -> Path:
        return self.base / "orig"

    @property
    def migrated(self) -> Path:
        return self.base / "migrated"

    def side(self, name: str) -> Path:
        return self.base / name

    def require_migrated(self) -> None:
        problem = tool_problem(self.migration)
        assert problem is None, problem

    # -- installs, shared by the tests of a row ------------------------------------------------
    def install(self, mode: str) -> dict:
        """Install both copies, each into its own fresh venv: mode "install" (pip install .),
        "editable" (pip install -e .) or "wheel" (pip wheel, then pip install the .whl).
        {side: (venv, wheel or None, [Ran...])}, cached per row and mode."""
        if mode not in self._installs:
            self.require_migrated()
            self._installs[mode] = dict(zip(SIDES, map_parallel(lambda s: self._install_side(s, mode), SIDES)))
        return self._installs[mode]

    def _install_side(self, side: str, mode: str):
        work = self.base / f"{mode}-{side}"
        work.mkdir()
        venv = make_venv(work / "venv")
        wheel = None
        # Build from a copy: an in-tree build leaves build/ and *.egg-info behind.
        src = copy_tree(self.side(side), work / "src") if mode != "editable" else \
            copy_tree(self.side(side), work / "project")
        steps = []
        if mode == "wheel":
            dist = work / "dist"
            steps.append(run(pip_wheel_cmd(src, dist)))
            wheels = sorted(dist.glob("*.whl")) if steps[-1].returncode == 0 else []
            if not wheels:
                return venv, None, steps
            wheel = wheels[0]
            steps.append(run(pip_install_cmd(venv, wheel)))
        else:
            steps.append(run(pip_install_cmd(venv, src, editable=(mode == "editable"))))
        return venv, wheel, steps

    def installed(self, mode: str) -> dict:
        """The installs, asserting that they worked (the original's: else the fixture is broken)."""
        result = self.install(mode)
        for side in SIDES:
            for step in result[side][2]:
                prefix = "FIXTURE BROKEN: " if side == "orig" else ""
                require_ok(step, f"{prefix}{mode} of the {side} copy of {self.spec.name}")
            if mode == "wheel":
                assert result[side][1] is not None, f"no wheel built for the {side} copy"
        return {side: result[side][0] for side in SIDES}

    def wheel(self, side: str) -> Path:
        self.installed("wheel")
        return self.install("wheel")[side][1]


def _migrate(row: Row) -> None:
    target = row.migrated / row.spec.target if row.spec.target else row.migrated
    row.migration = run(tool_cmd(target, row.base))


def _again(row: Row) -> None:
    """Idempotency: the tool run on (a copy of) the migrated copy changes nothing."""
    if tool_problem(row.migration) is not None:
        return
    again = copy_tree(row.migrated, row.base / "again")
    before = snapshot(again)
    target = again / row.spec.target if row.spec.target else again
    row.again_run = run(tool_cmd(target, row.base))
    after = snapshot(again)
    row.again_diff = tree_diff(before, after)
    row.again_details = unified_diffs(before, after)


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> dict:
    """Every row copied and migrated once for the module (two at a time)."""
    root = tmp_path_factory.mktemp("installed_matrix")
    made = {}
    for name, spec in SPECS.items():
        base = root / name
        for side in SIDES:
            copy_tree(FIXTURES / name, base / side)
        made[name] = Row(spec, base)
    map_parallel(_migrate, made.values())
    map_parallel(_again, made.values())
    return made


@pytest.fixture
def outside(tmp_path) -> Path:
    """A working directory outside every project."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    return folder


def run_both(row: Row, make: Callable[[Path], Cmd]) -> tuple[Ran, Ran]:
    """make(side_root) -> Cmd for each copy; run side by side."""
    orig, migrated = run_all([make(row.orig), make(row.migrated)])
    return orig, migrated


def run_in_venvs(venvs: dict, argv_of, cwd: Path) -> tuple[Ran, Ran]:
    """argv_of(venv) -> argv, run in each side's venv from cwd."""
    orig, migrated = run_all([Cmd(argv_of(venvs[s]), cwd) for s in SIDES])
    return orig, migrated


# ============================================================================ every row


@pytest.mark.parametrize("name", list(SPECS))
def test_migration_rewrites_package_files(rows, name):
    """The tool succeeds, and the fixture really exercises it: the listed files change and import
    the shim (a fixture the tool leaves alone would prove nothing)."""
    row = rows[name]
    row.require_migrated()
    before, after = snapshot(row.orig), snapshot(row.migrated)
    for rel in row.spec.rewritten:
        assert after[rel] != before[rel], f"{rel} was not rewritten\n{row.migration.describe()}"
        text = after[rel].decode("utf-8")
        code = notebook_code(row.migrated / rel) if rel.endswith(".ipynb") else text
        assert imports_shim(code), f"{rel} was rewritten but does not import {SHIM}:\n{text}"
    if row.spec.target:
        # Only the named file is rewritten; the rest of the project is as it was (new shim files aside).
        changed = [rel for rel in before if rel != row.spec.target and after.get(rel) != before[rel]]
        assert not changed, f"files not named on the command line changed: {changed}"


@pytest.mark.parametrize("name", list(SPECS))
def test_second_run_changes_nothing(rows, name):
    row = rows[name]
    row.require_migrated()
    problem = tool_problem(row.again_run)
    assert problem is None, "second run: " + problem
    assert row.again_diff == [], (f"running the tool again on the migrated copy changed files: "
                                  f"{row.again_diff}\n{row.again_details}\n"
                                  f"{row.again_run.describe()}")


# ============================================================================ flat layouts


def test_flat_find_pip_install_console_script_from_outside(rows, outside):
    venvs = rows["flat_find"].installed("install")
    orig, migrated = run_in_venvs(venvs, lambda v: [v.bin / "tinynet-train"], outside)
    assert_same_behaviour(orig, migrated, "tinynet-train after pip install .")


def test_flat_find_installed_shim_inside_package(rows):
    venvs = rows["flat_find"].installed("install")
    assert installed_placement_problems(venvs["orig"], "tinynet") == []
    problems = installed_placement_problems(venvs["migrated"], "tinynet")
    assert problems == [], "\n".join(problems)


def test_flat_explicit_pip_install_import_from_outside(rows, outside):
    venvs = rows["flat_explicit"].installed("install")
    orig, migrated = run_in_venvs(
        venvs, lambda v: [v.python, "-c", "import gptlib; gptlib.main()"], outside)
    assert_same_behaviour(orig, migrated, "python -c 'import gptlib; gptlib.main()' after pip install .")


def test_flat_explicit_installed_shim_inside_package(rows):
    venvs = rows["flat_explicit"].installed("install")
    assert installed_placement_problems(venvs["orig"], "gptlib") == []
    problems = installed_placement_problems(venvs["migrated"], "gptlib")
    assert problems == [], "\n".join(problems)


# ============================================================================ src layouts


def test_src_setuptools_editable_import_from_outside(rows, outside):
    venvs = rows["src_setuptools"].installed("editable")
    orig, migrated = run_in_venvs(
        venvs, lambda v: [v.python, "-c", "from srclib.cli import main; main()"], outside)
    assert_same_behaviour(orig, migrated, "srclib after pip install -e .")


def test_src_setuptools_wheel_console_script_in_fresh_venv(rows, outside):
    venvs = rows["src_setuptools"].installed("wheel")
    orig, migrated = run_in_venvs(venvs, lambda v: [v.bin / "srclib-train"], outside)
    assert_same_behaviour(orig, migrated, "srclib-train from the wheel")


def test_src_setuptools_wheel_has_shim_inside_package(rows):
    row = rows["src_setuptools"]
    assert wheel_placement_problems(row.wheel("orig")) == []
    problems = wheel_placement_problems(row.wheel("migrated"))
    assert problems == [], "\n".join(problems)


@needs_hatch_editable
def test_src_hatch_editable_console_script_from_outside(rows, outside):
    venvs = rows["src_hatch"].installed("editable")
    orig, migrated = run_in_venvs(venvs, lambda v: [v.bin / "hatchlib-train"], outside)
    assert_same_behaviour(orig, migrated, "hatchlib-train after pip install -e . (hatchling)")


@needs_hatchling
def test_src_hatch_wheel_import_in_fresh_venv(rows, outside):
    venvs = rows["src_hatch"].installed("wheel")
    orig, migrated = run_in_venvs(
        venvs, lambda v: [v.python, "-c", "import hatchlib.main as m; m.main()"], outside)
    assert_same_behaviour(orig, migrated, "hatchlib from the wheel (hatchling)")


@needs_hatchling
def test_src_hatch_wheel_has_shim_inside_package(rows):
    row = rows["src_hatch"]
    assert wheel_placement_problems(row.wheel("orig")) == []
    problems = wheel_placement_problems(row.wheel("migrated"))
    assert problems == [], "\n".join(problems)


# ============================================================================ several packages


# The `pytest` command of the test environment (no cwd on sys.path, unlike `python -m pytest`:
# the project's root conftest.py is what puts the root there).
PYTEST_COMMAND = Path(sys.executable).parent / "pytest"


@pytest.mark.skipif(not PYTEST_COMMAND.exists(), reason=f"no {PYTEST_COMMAND}")
def test_multi_pkg_pytest_from_root(rows):
    argv = [PYTEST_COMMAND, "-q", "-s", "-p", "no:cacheprovider", "-p", "no:warnings"]
    orig, migrated = run_both(rows["multi_pkg"], lambda root: Cmd(argv, root))
    assert_same_behaviour(orig, migrated, "pytest from the root", normalize_pytest)


def test_multi_pkg_script_from_root(rows):
    orig, migrated = run_both(
        rows["multi_pkg"], lambda root: Cmd([sys.executable, "scripts/train_both.py"], root))
    assert_same_behaviour(orig, migrated, "python scripts/train_both.py")


def test_multi_pkg_module_not_installed(rows):
    orig, migrated = run_both(
        rows["multi_pkg"], lambda root: Cmd([sys.executable, "-m", "alpha.train"], root))
    assert_same_behaviour(orig, migrated, "python -m alpha.train")


# ============================================================================ namespace package


def test_namespace_wheel_import_in_fresh_venv(rows, outside):
    venvs = rows["namespace_src"].installed("wheel")
    orig, migrated = run_in_venvs(
        venvs, lambda v: [v.python, "-c", "from acme.vision.train import main; main()"], outside)
    assert_same_behaviour(orig, migrated, "acme.vision from the wheel")


def test_namespace_wheel_has_shim_inside_package(rows):
    row = rows["namespace_src"]
    assert wheel_placement_problems(row.wheel("orig")) == []
    wheel = row.wheel("migrated")
    problems = wheel_placement_problems(wheel)
    with zipfile.ZipFile(wheel) as zf:
        if "acme/__init__.py" in zf.namelist():
            problems.append("acme/__init__.py in the wheel: the namespace package became a regular one")
    assert problems == [], "\n".join(problems)


def test_namespace_editable_console_script_from_outside(rows, outside):
    venvs = rows["namespace_src"].installed("editable")
    orig, migrated = run_in_venvs(venvs, lambda v: [v.bin / "acme-vision-train"], outside)
    assert_same_behaviour(orig, migrated, "acme-vision-train after pip install -e .")


# ============================================================================ no packaging

SCRIPT_CASES = {
    "train-from-root": (["train.py"], "root"),
    "train-from-elsewhere": (["{root}/train.py"], "outside"),
    "tools-eval-from-elsewhere": (["{root}/tools/eval.py"], "outside"),
    "m-tools-eval-from-root": (["-m", "tools.eval"], "root"),
}


@pytest.mark.parametrize("case", list(SCRIPT_CASES))
def test_scripts_only(rows, outside, case):
    args, where = SCRIPT_CASES[case]

    def make(root: Path) -> Cmd:
        argv = [sys.executable, *(a.format(root=root) for a in args)]
        return Cmd(argv, root if where == "root" else outside)

    rows["scripts_only"].require_migrated()
    orig, migrated = run_both(rows["scripts_only"], make)
    assert_same_behaviour(orig, migrated, f"python {' '.join(args)} ({where})")


# ============================================================================ notebooks


@pytest.mark.parametrize("notebook", ["explore.ipynb", "notebooks/analysis.ipynb"],
                         ids=["root-notebook", "subfolder-notebook"])
def test_notebook_cells_in_kernel_cwd(rows, notebook):
    """A kernel started in the notebook's folder: its code cells, in order, fed to `python -`
    (so '' = the notebook's folder is on sys.path, as in a kernel)."""
    row = rows["notebooks_pkg"]
    row.require_migrated()

    def make(root: Path) -> Cmd:
        path = root / notebook
        return Cmd([sys.executable, "-"], path.parent, stdin=notebook_code(path))

    orig, migrated = run_both(row, make)
    assert_same_behaviour(orig, migrated, f"the code cells of {notebook}")


# ============================================================================ a single file named


def test_single_file_importers_from_root(rows):
    code = ("import fitkit.util as u; u.seed(0); print('util device', u.device().type); "
            "import torch; print('draw', round(torch.rand(1).item(), 6))")
    row = rows["single_file"]
    row.require_migrated()
    orig, migrated = run_both(row, lambda root: Cmd([sys.executable, "-c", code], root))
    assert_same_behaviour(orig, migrated, "python -c 'import fitkit.util' from the root")


def test_single_file_module_main_from_root(rows):
    row = rows["single_file"]
    row.require_migrated()
    orig, migrated = run_both(row, lambda root: Cmd([sys.executable, "-m", "fitkit.main"], root))
    assert_same_behaviour(orig, migrated, "python -m fitkit.main")


def test_single_file_pip_install_from_outside(rows, outside):
    venvs = rows["single_file"].installed("install")
    orig, migrated = run_in_venvs(venvs, lambda v: [v.bin / "fitkit"], outside)
    assert_same_behaviour(orig, migrated, "the fitkit console script after pip install .")


def test_single_file_installed_shim_inside_package(rows):
    venvs = rows["single_file"].installed("install")
    assert installed_placement_problems(venvs["orig"], "fitkit") == []
    problems = installed_placement_problems(venvs["migrated"], "fitkit")
    assert problems == [], "\n".join(problems)
