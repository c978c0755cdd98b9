"""npu_migrate.layout: the static reading of a project's packaging metadata."""

from __future__ import annotations

import ast
import configparser
import difflib
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from npu_migrate.layout import Layout, import_name, packaging_edits, read_layout, shim_home

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

SHIM = "npu_compat"


def make(root: Path, files: dict[str, str | bytes]) -> Path:
    """Files under root: "a/b.py" -> content; a name ending in "/" is an empty folder."""
    for rel, content in files.items():
        path = root / rel
        if rel.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(textwrap.dedent(content), encoding="utf-8")
    return root


def pkg(*folders: str) -> dict[str, str]:
    """A regular package for each folder (an __init__.py and a module)."""
    files = {}
    for folder in folders:
        files[f"{folder}/__init__.py"] = ""
        files[f"{folder}/mod.py"] = "import torch\n"
    return files


def edit_and_reread(root: Path, layout: Layout, homes: list[str]) -> tuple[dict, list[str], Layout]:
    """packaging_edits, written to disk, then the layout read again."""
    edits, problems = packaging_edits(layout, homes, SHIM)
    for rel, (old, new) in edits.items():
        assert (root / rel).read_bytes() == old
        (root / rel).write_bytes(new)
    return edits, problems, read_layout(root)


def changed_lines(old: bytes, new: bytes) -> tuple[list[str], list[str]]:
    diff = list(difflib.ndiff(old.decode().splitlines(), new.decode().splitlines()))
    return [d[2:] for d in diff if d.startswith("- ")], [d[2:] for d in diff if d.startswith("+ ")]


# ------------------------------------------------------------------------------------------------
# Not packaged


def test_no_packaging_files(tmp_path):
    make(tmp_path, {**pkg("mypkg"), "train.py": "import torch\n"})
    layout = read_layout(tmp_path)
    assert not layout.packaged and layout.backend is None and layout.packages == ()
    assert shim_home(layout, "mypkg/mod.py") is None
    assert packaging_edits(layout, ["mypkg"], SHIM) == ({}, [])


def test_tool_only_pyproject_and_lint_only_setup_cfg_are_not_packaged(tmp_path):
    make(tmp_path, {**pkg("mypkg"), "pyproject.toml": "[tool.ruff]\nline-length = 100\n",
                    "setup.cfg": "[flake8]\nmax-line-length = 100\n"})
    layout = read_layout(tmp_path)
    assert not layout.packaged
    assert layout.packaging_files == ("pyproject.toml", "setup.cfg")
    assert shim_home(layout, "mypkg/mod.py") is None


# ------------------------------------------------------------------------------------------------
# setuptools: setup.py


def test_setup_py_flat_find_packages(tmp_path):
    make(tmp_path, {
        **pkg("mypkg", "mypkg/models", "tests"),
        "scripts/train.py": "import torch\n",
        "setup.py": """
            from setuptools import setup, find_packages
            setup(name="mypkg", packages=find_packages(exclude=["tests", "tests.*"]))
        """,
    })
    layout = read_layout(tmp_path)
    assert layout.packaged and layout.backend == "setuptools" and layout.name == "mypkg"
    assert layout.packaging_files == ("setup.py",)
    assert layout.packages == ("mypkg",) and layout.import_roots == ("",)
    assert layout.notes == ()
    assert shim_home(layout, "mypkg/models/mod.py") == "mypkg"
    assert shim_home(layout, "mypkg/mod.py") == "mypkg"
    assert shim_home(layout, "scripts/train.py") is None
    assert shim_home(layout, "tests/mod.py") is None
    assert shim_home(layout, "setup.py") is None
    assert import_name(layout, "mypkg") == "mypkg"
    assert packaging_edits(layout, ["mypkg"], SHIM) == ({}, [])


def test_setup_py_src_layout_with_package_dir(tmp_path):
    make(tmp_path, {
        **pkg("src/mypkg", "src/mypkg/models"),
        "setup.py": """
            import setuptools
            setuptools.setup(
                name="mypkg",
                package_dir={"": "src"},
                packages=setuptools.find_packages(where="src"),
            )
        """,
    })
    layout = read_layout(tmp_path)
    assert layout.packages == ("src/mypkg",) and layout.import_roots == ("src",)
    assert shim_home(layout, "src/mypkg/models/mod.py") == "src/mypkg"
    assert import_name(layout, "src/mypkg") == "mypkg"
    assert import_name(layout, "src/mypkg/models") == "mypkg.models"
    assert packaging_edits(layout, ["src/mypkg"], SHIM) == ({}, [])


def test_setup_py_explicit_list_is_edited_one_line(tmp_path):
    setup = """\
        from setuptools import setup

        setup(
            name="mypkg",
            packages=[
                "mypkg",
                "mypkg.models",  # the models
            ],
            install_requires=["torch"],
        )
    """
    make(tmp_path, {**pkg("mypkg", "mypkg/models"), "setup.py": setup})
    layout = read_layout(tmp_path)
    assert layout.packages == ("mypkg",)
    home = shim_home(layout, "mypkg/models/mod.py")
    assert home == "mypkg"
    edits, problems, again = edit_and_reread(tmp_path, layout, [home])
    assert problems == [] and list(edits) == ["setup.py"]
    old, new = edits["setup.py"]
    assert changed_lines(old, new) == ([], ['        "mypkg.npu_compat",'])
    ast.parse(new)
    assert packaging_edits(again, [home], SHIM) == ({}, [])


def test_setup_py_list_through_a_module_level_name(tmp_path):
    make(tmp_path, {**pkg("mypkg"), "setup.py": """\
        from setuptools import setup
        PACKAGES = ['mypkg']
        setup(name='mypkg', packages=PACKAGES)
    """})
    layout = read_layout(tmp_path)
    assert layout.packages == ("mypkg",) and layout.notes == ()
    edits, problems, again = edit_and_reread(tmp_path, layout, ["mypkg"])
    assert problems == []
    assert changed_lines(*edits["setup.py"]) == (
        ["PACKAGES = ['mypkg']"], ["PACKAGES = ['mypkg', 'mypkg.npu_compat']"])
    assert packaging_edits(again, ["mypkg"], SHIM) == ({}, [])


def test_setup_py_find_packages_include_is_extended(tmp_path):
    make(tmp_path, {**pkg("mypkg", "mypkg/sub", "other"), "setup.py": """\
        from setuptools import setup, find_packages
        setup(packages=find_packages(include=("mypkg", "mypkg.sub")))
    """})
    layout = read_layout(tmp_path)
    assert layout.packages == ("mypkg",)
    edits, problems, again = edit_and_reread(tmp_path, layout, ["mypkg"])
    assert problems == []
    assert b'include=("mypkg", "mypkg.sub", "mypkg.npu_compat")' in edits["setup.py"][1]
    assert packaging_edits(again, ["mypkg"], SHIM) == ({}, [])


def test_setup_py_dynamic_packages_note_and_problem(tmp_path):
    make(tmp_path, {**pkg("src/mypkg"), "setup.py": """\
        from setuptools import setup
        def packages():
            return ["mypkg"]
        setup(name="mypkg", package_dir={"": "src"}, packages=packages())
    """})
    layout = read_layout(tmp_path)
    assert any(n.startswith("setup.py:") and "packages=packages()" in n for n in layout.notes)
    assert layout.packages == ("src/mypkg",)  # best effort: automatic discovery
    edits, problems = packaging_edits(layout, ["src/mypkg"], SHIM)
    assert edits == {}
    assert len(problems) == 1 and problems[0].startswith("setup.py:")
    assert "'mypkg.npu_compat'" in problems[0]


def test_setup_py_star_kwargs_dict_literal(tmp_path):
    make(tmp_path, {**pkg("mypkg"), "setup.py": """\
        from setuptools import setup
        META = dict(name="mypkg", packages=["mypkg"])
        setup(**META)
    """})
    layout = read_layout(tmp_path)
    assert layout.packages == ("mypkg",) and layout.notes == ()
    edits, problems = packaging_edits(layout, ["mypkg"], SHIM)
    assert problems == [] and b'["mypkg", "mypkg.npu_compat"]' in edits["setup.py"][1]


def test_setup_py_syntax_error_and_missing_call(tmp_path):
    make(tmp_path, {**pkg("mypkg"), "setup.py": "setup(name='x', packages=[\n"})
    layout = read_layout(tmp_path)
    assert layout.packaged and any(n.startswith("setup.py: not valid Python") for n in layout.notes)
    assert layout.packages == ("mypkg",)  # automatic discovery, best effort
    assert packaging_edits(layout, ["mypkg"], SHIM) == ({}, [])

    (tmp_path / "setup.py").write_text("print('hello')\n")
    layout = read_layout(tmp_path)
    assert any("no setup(...) call" in n for n in layout.notes)


def test_setup_py_py_modules_only(tmp_path):
    make(tmp_path, {"mymod.py": "", **pkg("helpers"), "setup.py": """\
        from setuptools import setup
        setup(name="mymod", py_modules=["mymod"])
    """})
    layout = read_layout(tmp_path)
    assert layout.packages == ()
    assert shim_home(layout, "helpers/mod.py") is None
    assert any("no import package" in n for n in layout.notes)


# ------------------------------------------------------------------------------------------------
# setuptools: setup.cfg


def test_setup_cfg_explicit_multiline_list(tmp_path):
    cfg = """\
        [metadata]
        name = mypkg

        [options]
        packages =
            mypkg
            mypkg.models
        install_requires =
            torch
    """
    make(tmp_path, {**pkg("mypkg", "mypkg/models"), "setup.cfg": cfg,
                    "setup.py": "from setuptools import setup\nsetup()\n"})
    layout = read_layout(tmp_path)
    assert layout.packaging_files == ("setup.cfg", "setup.py")
    assert layout.packages == ("mypkg",) and layout.name == "mypkg"
    edits, problems, again = edit_and_reread(tmp_path, layout, ["mypkg"])
    assert problems == [] and list(edits) == ["setup.cfg"]
    assert changed_lines(*edits["setup.cfg"]) == ([], ["    mypkg.npu_compat"])
    parser = configparser.RawConfigParser()
    parser.read_string(edits["setup.cfg"][1].decode())
    assert parser.get("options", "packages").split() == ["mypkg", "mypkg.models", "mypkg.npu_compat"]
    assert parser.get("options", "install_requires").split() == ["torch"]
    assert packaging_edits(again, ["mypkg"], SHIM) == ({}, [])


def test_setup_cfg_comma_list_crlf(tmp_path):
    cfg = b"[metadata]\r\nname = two\r\n\r\n[options]\r\npackages = pkg_a, pkg_b\r\nzip_safe = false\r\n"
    make(tmp_path, {**pkg("pkg_a", "pkg_b"), "setup.cfg": cfg})
    layout = read_layout(tmp_path)
    assert layout.packages == ("pkg_a", "pkg_b")
    homes = sorted({shim_home(layout, "pkg_a/mod.py"), shim_home(layout, "pkg_b/mod.py")})
    assert homes == ["pkg_a", "pkg_b"]
    edits, problems, again = edit_and_reread(tmp_path, layout, homes)
    assert problems == []
    assert edits["setup.cfg"][1] == cfg.replace(
        b"pkg_a, pkg_b\r\n", b"pkg_a, pkg_b, pkg_a.npu_compat, pkg_b.npu_compat\r\n")
    assert packaging_edits(again, homes, SHIM) == ({}, [])


def test_setup_cfg_find_with_src_and_include(tmp_path):
    cfg = """\
        [options]
        package_dir =
            =src
        packages = find:

        [options.packages.find]
        where = src
        include =
            mypkg
            mypkg.models
    """
    make(tmp_path, {**pkg("src/mypkg", "src/mypkg/models", "src/other"), "setup.cfg": cfg})
    layout = read_layout(tmp_path)
    assert layout.packages == ("src/mypkg",) and layout.import_roots == ("src",)
    assert shim_home(layout, "src/mypkg/models/mod.py") == "src/mypkg"
    assert shim_home(layout, "src/other/mod.py") is None
    edits, problems, again = edit_and_reread(tmp_path, layout, ["src/mypkg"])
    assert problems == []
    assert changed_lines(*edits["setup.cfg"]) == ([], ["    mypkg.npu_compat"])
    assert packaging_edits(again, ["src/mypkg"], SHIM) == ({}, [])


def test_setup_cfg_find_namespace_with_wildcard_include(tmp_path):
    make(tmp_path, {
        "src/nsp/core.py": "import torch\n",
        "src/nsp/sub/deep.py": "import torch\n",
        "setup.cfg": """\
            [options]
            package_dir = =src
            packages = find_namespace:
            [options.packages.find]
            where = src
            include = nsp*
        """,
    })
    layout = read_layout(tmp_path)
    assert layout.packages == ("src/nsp",)
    assert shim_home(layout, "src/nsp/core.py") == "src/nsp"
    assert shim_home(layout, "src/nsp/sub/deep.py") == "src/nsp"
    assert import_name(layout, "src/nsp") == "nsp"
    assert packaging_edits(layout, ["src/nsp"], SHIM) == ({}, [])


def test_setup_cfg_find_excluding_the_shim_is_a_problem(tmp_path):
    make(tmp_path, {**pkg("mypkg"), "setup.cfg": """\
        [options]
        packages = find:
        [options.packages.find]
        exclude = *.npu_compat
    """})
    layout = read_layout(tmp_path)
    edits, problems = packaging_edits(layout, ["mypkg"], SHIM)
    assert edits == {} and len(problems) == 1 and "excludes 'mypkg.npu_compat'" in problems[0]


# ------------------------------------------------------------------------------------------------
# setuptools: pyproject.toml


PROJECT = '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n' \
          '[project]\nname = "mypkg"\nversion = "1.0"\n'


def test_pyproject_explicit_list_with_package_dir(tmp_path):
    toml = PROJECT + textwrap.dedent("""
        [tool.setuptools]
        packages = ["mypkg", "mypkg.models"]  # listed by hand
        package-dir = {"" = "src"}

        [tool.ruff]
        line-length = 100
    """)
    make(tmp_path, {**pkg("src/mypkg", "src/mypkg/models"), "pyproject.toml": toml})
    layout = read_layout(tmp_path)
    assert layout.packages == ("src/mypkg",) and layout.import_roots == ("src",)
    home = shim_home(layout, "src/mypkg/models/mod.py")
    assert home == "src/mypkg" and import_name(layout, home) == "mypkg"
    edits, problems, again = edit_and_reread(tmp_path, layout, [home])
    assert problems == []
    old, new = edits["pyproject.toml"]
    assert changed_lines(old, new) == (
        ['packages = ["mypkg", "mypkg.models"]  # listed by hand'],
        ['packages = ["mypkg", "mypkg.models", "mypkg.npu_compat"]  # listed by hand'])
    data = tomllib.loads(new.decode())
    assert data["tool"]["setuptools"]["packages"][-1] == "mypkg.npu_compat"
    assert data["tool"]["ruff"] == {"line-length": 100}
    assert packaging_edits(again, [home], SHIM) == ({}, [])


def test_pyproject_multiline_list_without_trailing_comma(tmp_path):
    toml = PROJECT + "\n[tool.setuptools]\npackages = [\n  'pkg_a',\n  'pkg_b'\n]\n"
    make(tmp_path, {**pkg("pkg_a", "pkg_b"), "pyproject.toml": toml})
    layout = read_layout(tmp_path)
    edits, problems, again = edit_and_reread(tmp_path, layout, ["pkg_b"])
    assert problems == []
    assert edits["pyproject.toml"][1].decode().endswith(
        "packages = [\n  'pkg_a',\n  'pkg_b',\n  'pkg_b.npu_compat'\n]\n")
    assert packaging_edits(again, ["pkg_b"], SHIM) == ({}, [])


def test_pyproject_package_dir_mapping_a_subpackage(tmp_path):
    toml = PROJECT + textwrap.dedent("""
        [tool.setuptools]
        packages = ["mytool", "mytool.rules"]

        [tool.setuptools.package-dir]
        "mytool.rules" = "rules"
    """)
    make(tmp_path, {**pkg("mytool", "rules"), "pyproject.toml": toml})
    layout = read_layout(tmp_path)
    assert layout.packages == ("mytool", "rules")
    assert shim_home(layout, "rules/mod.py") == "rules"
    assert import_name(layout, "rules") == "mytool.rules"
    edits, problems = packaging_edits(layout, ["rules", "mytool"], SHIM)
    assert problems == []
    assert tomllib.loads(edits["pyproject.toml"][1].decode())["tool"]["setuptools"]["packages"] == [
        "mytool", "mytool.rules", "mytool.npu_compat", "mytool.rules.npu_compat"]


def test_pyproject_find_namespaces_default(tmp_path):
    toml = PROJECT + '\n[tool.setuptools.packages.find]\nwhere = ["src"]\ninclude = ["ns*"]\n'
    make(tmp_path, {"src/ns/sub/__init__.py": "", "src/ns/sub/x.py": "", "src/ns/top.py": "",
                    **pkg("src/other"), "pyproject.toml": toml})
    layout = read_layout(tmp_path)
    assert layout.packages == ("src/ns",) and layout.import_roots == ("src",)
    assert shim_home(layout, "src/ns/sub/x.py") == "src/ns/sub"
    assert shim_home(layout, "src/ns/top.py") == "src/ns"
    assert import_name(layout, "src/ns/sub") == "ns.sub"
    assert packaging_edits(layout, ["src/ns/sub", "src/ns"], SHIM) == ({}, [])


def test_pyproject_find_regular_only_and_narrow_include(tmp_path):
    toml = PROJECT + textwrap.dedent("""
        [tool.setuptools]
        packages = {find = {where = ["src"], include = ["mypkg"], namespaces = false}}
    """)
    make(tmp_path, {**pkg("src/mypkg"), "src/nsonly/x.py": "", "pyproject.toml": toml})
    layout = read_layout(tmp_path)
    assert layout.packages == ("src/mypkg",)
    edits, problems, again = edit_and_reread(tmp_path, layout, ["src/mypkg"])
    assert problems == []
    data = tomllib.loads(edits["pyproject.toml"][1].decode())
    assert data["tool"]["setuptools"]["packages"]["find"]["include"] == ["mypkg", "mypkg.npu_compat"]
    assert packaging_edits(again, ["src/mypkg"], SHIM) == ({}, [])


def test_auto_discovery_src_layout(tmp_path):
    make(tmp_path, {**pkg("src/mypkg", "src/mypkg/models"), "src/nsp/a.py": "",
                    "tests/test_x.py": "", "pyproject.toml": PROJECT})
    layout = read_layout(tmp_path)
    assert layout.backend == "setuptools" and layout.import_roots == ("src",)
    assert layout.packages == ("src/mypkg", "src/nsp")
    assert shim_home(layout, "src/mypkg/models/mod.py") == "src/mypkg"
    assert shim_home(layout, "src/nsp/a.py") == "src/nsp"
    assert shim_home(layout, "tests/test_x.py") is None
    assert packaging_edits(layout, ["src/mypkg"], SHIM) == ({}, [])


def test_auto_discovery_flat_layout_skips_reserved_names(tmp_path):
    make(tmp_path, {**pkg("mypkg", "tests", "docs", "scripts", "_private", "examples"),
                    ".hidden/x.py": "", "my-data/x.py": "",
                    "pyproject.toml": "[project]\nname = 'mypkg'\nversion = '1'\n"})
    layout = read_layout(tmp_path)
    assert layout.backend == "setuptools"  # no [build-system]: setuptools' legacy backend
    assert layout.packages == ("mypkg",) and layout.notes == ()
    assert shim_home(layout, "examples/mod.py") is None


def test_auto_discovery_flat_layout_with_two_packages_is_noted(tmp_path):
    make(tmp_path, {**pkg("pkg_a", "pkg_b"), "setup.py": "from setuptools import setup\nsetup()\n"})
    layout = read_layout(tmp_path)
    assert layout.packages == ("pkg_a", "pkg_b")
    assert any("several top-level packages" in n for n in layout.notes)


# ------------------------------------------------------------------------------------------------
# Other backends


def test_hatch_default_by_project_name(tmp_path):
    make(tmp_path, {**pkg("src/my_pkg", "src/my_pkg/models"), "pyproject.toml": """\
        [build-system]
        requires = ["hatchling"]
        build-backend = "hatchling.build"
        [project]
        name = "My-Pkg"
        version = "1"
    """})
    layout = read_layout(tmp_path)
    assert layout.backend == "hatchling" and layout.packages == ("src/my_pkg",)
    assert layout.name == "My-Pkg"
    assert layout.import_roots == ("src",)
    assert shim_home(layout, "src/my_pkg/models/mod.py") == "src/my_pkg"
    assert import_name(layout, "src/my_pkg") == "my_pkg"
    assert packaging_edits(layout, ["src/my_pkg"], SHIM) == ({}, [])


def test_hatch_explicit_packages_and_missing_default(tmp_path):
    make(tmp_path, {**pkg("lib/foo", "bar"), "pyproject.toml": """\
        [build-system]
        build-backend = "hatchling.build"
        [project]
        name = "something-else"
        [tool.hatch.build.targets.wheel]
        packages = ["lib/foo"]
    """})
    layout = read_layout(tmp_path)
    assert layout.packages == ("lib/foo",) and "lib" in layout.import_roots
    assert import_name(layout, "lib/foo") == "foo"
    assert shim_home(layout, "bar/mod.py") is None

    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nbuild-backend = "hatchling.build"\n[project]\nname = "nothing"\n')
    layout = read_layout(tmp_path)
    assert layout.packages == () and any("hatchling finds no package" in n for n in layout.notes)


def test_flit_default_and_module_name(tmp_path):
    make(tmp_path, {**pkg("flitpkg"), "pyproject.toml": """\
        [build-system]
        build-backend = "flit_core.buildapi"
        [project]
        name = "flitpkg"
    """})
    layout = read_layout(tmp_path)
    assert layout.backend == "flit" and layout.packages == ("flitpkg",)
    assert shim_home(layout, "flitpkg/mod.py") == "flitpkg"

    make(tmp_path, {**pkg("src/real_name"), "pyproject.toml": """\
        [build-system]
        build-backend = "flit_core.buildapi"
        [project]
        name = "dist-name"
        [tool.flit.module]
        name = "real_name"
    """})
    layout = read_layout(tmp_path)
    assert layout.packages == ("src/real_name",) and import_name(layout, "src/real_name") == "real_name"
    assert packaging_edits(layout, ["src/real_name"], SHIM) == ({}, [])


def test_pdm_default_and_package_dir(tmp_path):
    make(tmp_path, {**pkg("src/pdmpkg", "src/tests"), "pyproject.toml": """\
        [build-system]
        build-backend = "pdm.backend"
        [project]
        name = "pdmpkg"
    """})
    layout = read_layout(tmp_path)
    assert layout.backend == "pdm" and layout.packages == ("src/pdmpkg",)
    assert layout.import_roots == ("src",)

    make(tmp_path, {**pkg("code/app"), "pyproject.toml": """\
        [build-system]
        build-backend = "pdm.backend"
        [project]
        name = "app"
        [tool.pdm.build]
        package-dir = "code"
        includes = ["code/app/*.py"]
    """})
    layout = read_layout(tmp_path)
    assert layout.packages == ("code/app",) and import_name(layout, "code/app") == "app"
    edits, problems = packaging_edits(layout, (h for h in ["code/app"]), SHIM)
    assert edits == {} and len(problems) == 1  # *.py does not take the shim's folder
    assert problems[0].startswith("pyproject.toml:") and "code/app/npu_compat" in problems[0]


def test_poetry_default_and_explicit_packages(tmp_path):
    make(tmp_path, {**pkg("poetry_pkg"), "pyproject.toml": """\
        [build-system]
        build-backend = "poetry.core.masonry.api"
        [tool.poetry]
        name = "Poetry.Pkg"
        version = "1"
    """})
    layout = read_layout(tmp_path)
    assert layout.backend == "poetry" and layout.packages == ("poetry_pkg",)

    make(tmp_path, {**pkg("src/inner"), "pyproject.toml": """\
        [build-system]
        build-backend = "poetry.core.masonry.api"
        [tool.poetry]
        name = "outer"
        packages = [{include = "inner", from = "src"}]
    """})
    layout = read_layout(tmp_path)
    assert layout.packages == ("src/inner",) and import_name(layout, "src/inner") == "inner"
    assert packaging_edits(layout, ["src/inner"], SHIM) == ({}, [])


def test_other_backend_is_noted(tmp_path):
    make(tmp_path, {**pkg("python/rusty"), "pyproject.toml": """\
        [build-system]
        build-backend = "maturin"
        [project]
        name = "rusty"
        [tool.maturin]
        python-source = "python"
    """})
    layout = read_layout(tmp_path)
    assert layout.backend == "other" and layout.packages == ("python/rusty",)
    assert import_name(layout, "python/rusty") == "rusty"
    assert any("'maturin' is not modelled" in n for n in layout.notes)


# ------------------------------------------------------------------------------------------------
# Malformed input never raises


@pytest.mark.parametrize("files", [
    {"pyproject.toml": "[project]\nname = 'x\n[tool.setuptools\n"},
    {"pyproject.toml": PROJECT + "[tool.setuptools]\npackages = 5\npackage-dir = 3\n"},
    {"pyproject.toml": PROJECT + "[tool.setuptools.packages.find]\nwhere = 7\ninclude = [1]\n"},
    {"pyproject.toml": b"[project]\nname = '\xff\xfe'\n"},
    {"setup.cfg": b"[options]\npackages = \xff\n"},
    {"setup.cfg": "no section header\n[options\n"},
    {"setup.py": "from setuptools import setup\nsetup(packages=[x for x in 'ab'], package_dir=D)\n"},
    {"setup.py": b"\xff\xfe\x00"},
    {"pyproject.toml": '[build-system]\nbuild-backend = 3\n'},
    {"pyproject.toml": '[build-system]\nbuild-backend = "hatchling.build"\n[project]\nname = 4\n'
                       '[tool.hatch.build.targets.wheel]\npackages = "src"\nsources = 1\n'},
    {"pyproject.toml": '[build-system]\nbuild-backend = "poetry.core.masonry.api"\n'
                       '[tool.poetry]\nname = "p"\npackages = [{include = 3}, "x"]\n'},
    {"pyproject.toml": '[build-system]\nbuild-backend = "pdm.backend"\n'
                       '[tool.pdm.build]\npackage-dir = 1\nincludes = "x"\n'},
])
def test_malformed_input_gives_notes(tmp_path, files):
    make(tmp_path, {**pkg("mypkg"), **files})
    layout = read_layout(tmp_path)
    assert layout.packaged
    assert layout.notes, layout
    for note in layout.notes:
        assert note.split(":")[0] in ("pyproject.toml", "setup.cfg", "setup.py", "packages are given in")
    shim_home(layout, "mypkg/mod.py")
    packaging_edits(layout, ["mypkg"], SHIM)


def test_invalid_toml_still_says_packaged(tmp_path):
    make(tmp_path, {**pkg("mypkg"), "pyproject.toml": '[build-system]\nbuild-backend = "flit_core.buildapi"\n'
                    '[project]\nname = "mypkg"\nversion = \n'})
    layout = read_layout(tmp_path)
    assert layout.packaged and layout.backend == "flit" and layout.packages == ("mypkg",)
    assert any("not valid TOML" in n for n in layout.notes)


def test_uneditable_list_is_a_problem(tmp_path):
    make(tmp_path, {**pkg("mypkg"), "setup.py": """\
        from setuptools import setup
        PKGS = "mypkg", "mypkg.sub"
        setup(packages=PKGS)
    """})
    layout = read_layout(tmp_path)
    edits, problems = packaging_edits(layout, ["mypkg"], SHIM)
    assert edits == {} and len(problems) == 1
    assert problems[0].startswith("setup.py:") and "'mypkg.npu_compat'" in problems[0]


# ------------------------------------------------------------------------------------------------
# The edit works: a real wheel


def test_wheel_of_an_edited_explicit_list_ships_the_shim(tmp_path):
    project = make(tmp_path / "proj", {
        "pkg/__init__.py": "",
        "pkg/core.py": "from pkg import npu_compat\n",
        "pkg/npu_compat/__init__.py": "DEVICE = 'npu'\n",
        "pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n'
                          'build-backend = "setuptools.build_meta"\n\n'
                          '[project]\nname = "pkg"\nversion = "0.1"\n\n'
                          '[tool.setuptools]\npackages = ["pkg"]\n',
    })
    layout = read_layout(project)
    home = shim_home(layout, "pkg/core.py")
    assert home == "pkg"
    edits, problems, _ = edit_and_reread(project, layout, [home])
    assert problems == [] and list(edits) == ["pyproject.toml"]
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-q", "-w", str(out), str(project)],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        assert "pkg/npu_compat/__init__.py" in zf.namelist()


# ------------------------------------------------------------------------------------------------
# Edits keep the file's bytes: encodings, BOM, line endings


def test_setup_py_with_a_coding_cookie_keeps_its_encoding(tmp_path):
    source = "# -*- coding: latin-1 -*-\nfrom setuptools import setup\n" \
             "setup(author='Jos\xe9', packages=['mypkg'])\n"
    make(tmp_path, {**pkg("mypkg"), "setup.py": source.encode("latin-1")})
    layout = read_layout(tmp_path)
    assert layout.notes == () and layout.packages == ("mypkg",)
    edits, problems, again = edit_and_reread(tmp_path, layout, ["mypkg"])
    assert problems == []
    assert edits["setup.py"][1] == source.replace(
        "['mypkg']", "['mypkg', 'mypkg.npu_compat']").encode("latin-1")
    assert packaging_edits(again, ["mypkg"], SHIM) == ({}, [])


def test_pyproject_bom_crlf_trailing_comma(tmp_path):
    text = "\ufeff" + PROJECT.replace("\n", "\r\n") + \
        '\r\n[tool.setuptools]\r\npackages = [\r\n    "pkg_a",  # first\r\n]\r\n'
    make(tmp_path, {**pkg("pkg_a"), "pyproject.toml": text.encode("utf-8")})
    layout = read_layout(tmp_path)
    assert layout.packages == ("pkg_a",)
    edits, problems, again = edit_and_reread(tmp_path, layout, ["pkg_a"])
    assert problems == []
    assert edits["pyproject.toml"][1] == text.replace(
        '"pkg_a",  # first\r\n', '"pkg_a",  # first\r\n    "pkg_a.npu_compat",\r\n').encode("utf-8")
    assert packaging_edits(again, ["pkg_a"], SHIM) == ({}, [])


def test_several_homes_one_edit_of_a_find_include(tmp_path):
    toml = PROJECT + '\n[tool.setuptools.packages.find]\ninclude = ["pkg_a", "pkg_b"]\n'
    make(tmp_path, {**pkg("pkg_a", "pkg_b"), "pyproject.toml": toml})
    layout = read_layout(tmp_path)
    assert layout.packages == ("pkg_a", "pkg_b")
    edits, problems, again = edit_and_reread(tmp_path, layout, ["pkg_b", "pkg_a", "pkg_a"])
    assert problems == []
    assert changed_lines(*edits["pyproject.toml"]) == (
        ['include = ["pkg_a", "pkg_b"]'],
        ['include = ["pkg_a", "pkg_b", "pkg_a.npu_compat", "pkg_b.npu_compat"]'])
    assert packaging_edits(again, ["pkg_a", "pkg_b"], SHIM) == ({}, [])


def test_package_dir_maps_a_package_to_the_root(tmp_path):
    make(tmp_path, {"__init__.py": "", "core.py": "import torch\n", "sub/__init__.py": "",
                    "sub/x.py": "", "setup.py": """\
        from setuptools import setup
        setup(name="flatroot", package_dir={"flatroot": "."}, packages=["flatroot", "flatroot.sub"])
    """})
    layout = read_layout(tmp_path)
    assert layout.packages == ("",)
    assert shim_home(layout, "sub/x.py") == "" and shim_home(layout, "core.py") == ""
    assert import_name(layout, "") == "flatroot" and import_name(layout, "sub") == "flatroot.sub"
    edits, problems = packaging_edits(layout, [""], SHIM)
    assert problems == [] and b'"flatroot.sub", "flatroot.npu_compat"]' in edits["setup.py"][1]


def test_pdm_whole_folder_include_needs_no_edit(tmp_path):
    make(tmp_path, {**pkg("src/app"), "pyproject.toml": """\
        [build-system]
        build-backend = "pdm.backend"
        [tool.pdm.build]
        includes = ["src/app"]
    """})
    layout = read_layout(tmp_path)
    assert layout.packages == ("src/app",) and layout.import_roots == ("src",)
    assert packaging_edits(layout, ["src/app"], SHIM) == ({}, [])


def test_package_search_does_not_walk_unrelated_trees(tmp_path, monkeypatch):
    deep = "node_modules/" + "/".join(f"d{i}" for i in range(10)) + "/x.py"
    toml = PROJECT + '\n[tool.setuptools.packages.find]\ninclude = ["mypkg*"]\n'
    make(tmp_path, {**pkg("mypkg", "mypkg/a/b"), deep: "", "pyproject.toml": toml})
    import npu_migrate.layout as layout_module

    seen: list[str] = []
    real = layout_module.os.scandir

    def counting(path):
        seen.append(str(path))
        return real(path)

    monkeypatch.setattr(layout_module.os, "scandir", counting)
    layout = read_layout(tmp_path)
    assert layout.packages == ("mypkg",)
    assert seen == [str(tmp_path)]  # the root only: mypkg matches, node_modules cannot
