"""npu_migrate/imports.py: the shim import where ruff's isort puts it, unused imports dropped.

The property tests write many realistic, ruff-clean files (made clean by `ruff check --select I
--fix` itself), edit them with `add_import` / `remove_import_bindings`, and ask the real ruff
(`--select I,F401`) whether they are still clean. They are skipped when ruff is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest

from npu_migrate import imports
from npu_migrate.imports import add_import, names_used_in_text, newly_unused, remove_import_bindings

ROOT = Path(__file__).resolve().parent.parent
FIRST_PARTY = frozenset({"mypkg", "npu_compat"})
RUFF_CONFIG = 'lint.isort.known-first-party = ["mypkg", "npu_compat"]'


def _ruff_command() -> list[str] | None:
    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"]
    beside = Path(sys.executable).parent / "ruff"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("ruff")
    return [found] if found else None


RUFF = _ruff_command()
needs_ruff = pytest.mark.skipif(RUFF is None, reason="ruff is not installed (pip install ruff)")


def ruff(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*RUFF, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def ruff_findings(folder: Path, select: str = "I,F401") -> list[dict]:
    """ruff's findings for every .py file under `folder` (default isort settings, our first party)."""
    done = ruff("check", "--isolated", "--config", RUFF_CONFIG, "--select", select,
                "--output-format", "json", "--no-cache", ".", cwd=folder)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout or "[]")


def ruff_fix(folder: Path) -> None:
    done = ruff("check", "--isolated", "--config", RUFF_CONFIG, "--select", "I", "--fix",
                "--no-cache", ".", cwd=folder)
    assert done.returncode in (0, 1), done.stderr


def add(code: str, name: str = "npu_compat", from_module: str | None = None,
        first_party=FIRST_PARTY) -> str:
    module = cst.parse_module(code)
    return add_import(module, name=name, from_module=from_module, first_party=first_party).code


def remove(code: str, *names: str) -> str:
    return remove_import_bindings(cst.parse_module(code), set(names)).code


# ---------------------------------------------------------------------------------------------
# Realistic import blocks


# (section, statement, names it binds)
POOL = [
    ("stdlib", "import os", ["os"]),
    ("stdlib", "import sys", ["sys"]),
    ("stdlib", "import json", ["json"]),
    ("stdlib", "import collections.abc", ["collections"]),
    ("stdlib", "from typing import Any, Optional", ["Any", "Optional"]),
    ("stdlib", "from pathlib import Path", ["Path"]),
    ("third", "import numpy as np", ["np"]),
    ("third", "import torch", ["torch"]),
    ("third", "import torch.nn as nn", ["nn"]),
    ("third", "from torch import Tensor", ["Tensor"]),
    ("third", "import yaml", ["yaml"]),
    ("third", "from tqdm import tqdm", ["tqdm"]),
    ("first", "import mypkg", ["mypkg"]),
    ("first", "import mypkg.models", ["mypkg"]),
    ("first", "from mypkg import a, b", ["a", "b"]),
    ("first", "from mypkg import CONFIG, Zeta, zeta", ["CONFIG", "Zeta", "zeta"]),
    ("first", "from mypkg import alpha_long_name_one, beta_long_name_two, gamma_long_name", [
        "alpha_long_name_one", "beta_long_name_two", "gamma_long_name"]),
    ("first", "from mypkg.utils import helper", ["helper"]),
    ("first", "from npu_compat import flash_attn as fa", ["fa"]),
    ("local", "from . import x", ["x"]),
    ("local", "from .utils import helper2", ["helper2"]),
    ("local", "from .. import up", ["up"]),
    ("local", "from .models import Model", ["Model"]),
]
COMMENTS = ["# the model", "# noqa-free comment", "# first party", "# TODO: drop this"]


def _header(rng: random.Random) -> str:
    return rng.choice([
        "",
        '"""Train a model."""\n\n',
        '"""Train a model.\n\nMore words.\n"""\n',
        "# Copyright 2024 Someone\n# Licensed under Apache-2.0\n\n",
        "#!/usr/bin/env python\n# -*- coding: utf-8 -*-\n",
        '#!/usr/bin/env python\n"""Script."""\n\n',
        '"""Docstring."""\n\n# a comment about the file\n\n',
    ])


def _trailer(rng: random.Random, uses: list[str]) -> str:
    used = ", ".join(uses) if uses else ""
    return rng.choice([
        f"\n\ndef main():\n    npu_compat.synchronize()\n    return ({used})\n",
        f"\nUSES = ({used})\nnpu_compat.synchronize()\n",
        f"\n\nclass Model:\n    uses = ({used})\n    device = npu_compat.device_str()\n",
        "\ntry:\n    import ujson as fast_json\nexcept ImportError:\n    fast_json = None\n\n"
        f"USES = ({used}, fast_json)\nnpu_compat.synchronize()\n",
        f"\n\n@decorator\ndef main():\n    return ({used}, npu_compat.x())\n",
        f"\n# a comment before the code\nUSES = ({used})\nnpu_compat.synchronize()\n",
        f"\n\n# a comment right above a function\ndef main():\n    return ({used}, npu_compat.x())\n",
        f"\n# a comment, then code\n\ndef main():\n    return ({used}, npu_compat.x())\n",
    ])


def realistic_sources(count: int, seed: int = 1234):
    """(file text, bound names, names left unused) triples: messy but valid import blocks (ruff
    sorts them); every other file uses all the names it imports."""
    rng = random.Random(seed)
    for number in range(count):
        items = rng.sample(POOL, rng.randint(0, 9))
        if rng.random() < 0.3:
            items.append(("future", "from __future__ import annotations", []))
        rng.shuffle(items)
        lines = []
        names: list[str] = []
        for _section, text, bound in items:
            if rng.random() < 0.2:
                lines.append(rng.choice(COMMENTS))
            lines.append(text)
            names.extend(n for n in bound if n not in names)
        block = "\n".join(lines) + ("\n" if lines else "")
        header = _header(rng)
        # one to three names left unused (for the removal property), the others used
        unused = rng.sample(names, min(len(names), rng.randint(1, 3))) if number % 2 else []
        uses = [n for n in names if n not in unused] or ["None"]
        yield header + block + _trailer(rng, uses), names, unused


def _write_clean_cases(folder: Path, count: int) -> list[tuple[Path, list[str], list[str]]]:
    folder.mkdir()
    cases = []
    for number, (text, names, unused) in enumerate(realistic_sources(count)):
        path = folder / f"case_{number:03d}.py"
        path.write_text(text)
        cases.append((path, names, unused))
    ruff_fix(folder)
    # the starting point is clean but for the names left unused on purpose
    for finding in ruff_findings(folder):
        path = Path(finding["filename"])
        unused = next(u for p, _n, u in cases if p.name == path.name)
        assert finding["code"] == "F401" and unused, (finding, path.read_text())
    return cases


# add_import's arguments, and the name the import binds (the ruff check sees it used)
FORMS = {
    "import-shim": ({"name": "npu_compat"}, "npu_compat"),
    "from-mypkg": ({"name": "npu_compat", "from_module": "mypkg"}, "npu_compat"),
    "stdlib": ({"name": "abc"}, "abc"),
    "third-party-first": ({"name": "aaa_vendor"}, "aaa_vendor"),
    "from-torch": ({"name": "cuda", "from_module": "torch"}, "cuda"),
    "from-typing-constant": ({"name": "TYPE_CHECKING", "from_module": "typing"}, "TYPE_CHECKING"),
    "dotted-first-party": ({"name": "mypkg.zmod"}, "mypkg"),
    "relative": ({"name": "sibling", "from_module": "."}, "sibling"),
    "future": ({"name": "division", "from_module": "__future__"}, None),
}


@pytest.fixture(scope="module")
def clean_cases(tmp_path_factory):
    """Ruff-clean files (but for the names left unused on purpose), written once for the module."""
    if RUFF is None:
        pytest.skip("ruff is not installed (pip install ruff)")
    return _write_clean_cases(tmp_path_factory.mktemp("imports") / "cases", 240)


@needs_ruff
@pytest.mark.parametrize("form", list(FORMS))
def test_add_import_keeps_ruff_clean(tmp_path, clean_cases, form):
    kwargs, binding = FORMS[form]
    cases = clean_cases
    out = tmp_path / "out"
    out.mkdir()
    for path, _names, unused in cases:
        if unused:
            continue
        source = path.read_text()
        module = cst.parse_module(source)
        added = add_import(module, first_party=FIRST_PARTY, **kwargs)
        assert added.code != source or binding == "mypkg"
        # idempotent
        again = add_import(added, first_party=FIRST_PARTY, **kwargs)
        assert again.code == added.code
        use = f"\n_ADDED = {binding}\n" if binding else ""
        (out / path.name).write_text(added.code + use)
    findings = ruff_findings(out)
    details = [(f["filename"], f["code"], f["message"], (out / Path(f["filename"]).name).read_text())
               for f in findings]
    assert not findings, details


@needs_ruff
def test_remove_import_bindings_keeps_ruff_clean(tmp_path, clean_cases):
    cases = clean_cases
    out = tmp_path / "out"
    out.mkdir()
    checked = 0
    for path, _names, unused in cases:
        if not unused:
            continue
        module = cst.parse_module(path.read_text())
        pruned = remove_import_bindings(module, set(unused))
        (out / path.name).write_text(pruned.code)
        checked += 1
    assert checked > 100
    findings = ruff_findings(out)
    details = [(f["filename"], f["code"], f["message"], (out / Path(f["filename"]).name).read_text())
               for f in findings]
    assert not findings, details


HANDWRITTEN_CLEAN = [
    # member insertion into a wrapped, parenthesized import; a comment on a member
    '"""Doc."""\n\nimport torch\n\nfrom mypkg import (\n    alpha_long_name_one,  # the first\n'
    "    beta_long_name_two,\n    zeta_long_name_three,\n)\n\nUSES = (torch, alpha_long_name_one,"
    " beta_long_name_two, zeta_long_name_three)\nnpu_compat.x()\n",
    # magic trailing comma, short
    "from mypkg import (\n    a,\n    b,\n)\n\nUSES = (a, b)\nnpu_compat.x()\n",
    # a from-import that becomes too long: wrapped like ruff wraps it
    "from mypkg import alpha_long_name_one, beta_long_name_two, gamma_long_name_three\n\n"
    "USES = (alpha_long_name_one, beta_long_name_two, gamma_long_name_three)\nnpu_compat.x()\n",
    # same, with a comment on the line
    "from mypkg import alpha_long_name_one, beta_long_name_two, gamma_name  # ours\n\n"
    "USES = (alpha_long_name_one, beta_long_name_two, gamma_name)\nnpu_compat.x()\n",
    # comments above imports, one of them the first of its section
    "import os\n\n# the framework\nimport torch\n\n# ours\nfrom mypkg import zz\n\n"
    "USES = (os, torch, zz)\nnpu_compat.x()\n",
    # only a future import
    "from __future__ import annotations\n\nnpu_compat.x()\n",
    # TYPE_CHECKING imports are not the leading block
    "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import numpy\n\n"
    "def f(a: numpy.ndarray):\n    return npu_compat.x(a)\n",
    # a first-party module that sorts after the shim, an aliased import of the shim
    "import zlib\n\nimport mypkg\nimport npu_compat as nc\n\nUSES = (mypkg, nc, zlib)\nnpu_compat.x()\n",
    # relative imports only
    "from .. import up\nfrom . import x\n\nUSES = (up, x)\nnpu_compat.x()\n",
    # the comment above the first import of the block
    '"""Doc."""\n\n# framework\nimport torch\n\nUSES = (torch,)\nnpu_compat.x()\n',
    # the blank lines between the block and the code when there was no import
    "# a note\n\ndef f():\n    return npu_compat.x()\n",
    '"""Doc."""\n# about f\ndef f():\n    return npu_compat.x()\n',
    '"""Doc."""\n\n\nclass A:\n    x = npu_compat.x()\n',
    # natural order: mod2 before mod10
    "import mod2\nimport Mod3\nimport mod10\n\nUSES = (mod2, Mod3, mod10)\nnpu_compat.x()\n",
]


@needs_ruff
@pytest.mark.parametrize("form", [{}, {"from_module": "mypkg"}], ids=["import", "from-mypkg"])
def test_add_import_handwritten_cases_stay_clean(tmp_path, form):
    cases = tmp_path / "cases"
    cases.mkdir()
    for number, text in enumerate(HANDWRITTEN_CLEAN):
        (cases / f"hand_{number:02d}.py").write_text(text)
    before = ruff_findings(cases, "I")
    assert not before, [(f["filename"], f["code"]) for f in before]  # the inputs are clean
    for number, text in enumerate(HANDWRITTEN_CLEAN):
        (cases / f"hand_{number:02d}.py").write_text(add(text, **form))
    findings = ruff_findings(cases)
    details = [(f["filename"], f["code"], (cases / Path(f["filename"]).name).read_text()) for f in findings]
    assert not findings, details


@needs_ruff
def test_shim_is_isort_clean():
    done = ruff("check", "--isolated", "--select", "I,F401", "--no-cache", "npu_migrate/shim", cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_ruff
def test_shim_copied_into_a_package_is_isort_clean(tmp_path):
    """The shim as users get it: copied under their package (relative imports only)."""
    package = tmp_path / "mypkg"
    (package / "npu_compat").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for source in (ROOT / "npu_migrate" / "shim").glob("*.py"):
        shutil.copy(source, package / "npu_compat" / source.name)
    assert not ruff_findings(tmp_path)


# ---------------------------------------------------------------------------------------------
# add_import: exact output


def test_first_party_section_after_third_party():
    code = '"""Doc."""\n\nimport os\n\nimport torch\n\nx = 1\n'
    assert add(code) == '"""Doc."""\n\nimport os\n\nimport torch\n\nimport npu_compat\n\nx = 1\n'


def test_straight_import_before_from_imports_of_the_section():
    code = "import torch\n\nimport mypkg\nfrom mypkg import a\n\nx = 1\n"
    assert add(code) == "import torch\n\nimport mypkg\nimport npu_compat\nfrom mypkg import a\n\nx = 1\n"


def test_from_form_joins_an_existing_statement_in_member_order():
    code = "from mypkg import CONFIG, Zeta, alpha, zeta\n\nx = 1\n"
    expected = "from mypkg import CONFIG, Zeta, alpha, npu_compat, zeta\n\nx = 1\n"
    assert add(code, from_module="mypkg") == expected


def test_from_form_leaves_an_aliased_statement_alone():
    code = "from mypkg import a as b\n\nx = 1\n"
    expected = "from mypkg import a as b\nfrom mypkg import npu_compat\n\nx = 1\n"
    assert add(code, from_module="mypkg") == expected


def test_wraps_a_statement_grown_too_long():
    code = "from mypkg import alpha_long_name_one, beta_long_name_two, gamma_long_name_three\n"
    assert add(code, from_module="mypkg") == (
        "from mypkg import (\n    alpha_long_name_one,\n    beta_long_name_two,\n"
        "    gamma_long_name_three,\n    npu_compat,\n)\n"
    )


def test_multiline_member_insertion_keeps_layout_and_comments():
    code = "from mypkg import (\n    a,  # first\n    b,\n    zz,\n)\n"
    assert add(code, from_module="mypkg") == (
        "from mypkg import (\n    a,  # first\n    b,\n    npu_compat,\n    zz,\n)\n"
    )
    code = "from mypkg import (\n    a,\n    b,  # last\n)\n"
    assert add(code, from_module="mypkg") == (
        "from mypkg import (\n    a,\n    b,  # last\n    npu_compat,\n)\n"
    )
    code = "from mypkg import (\n    a,\n    b\n)\n"
    assert add(code, from_module="mypkg") == "from mypkg import (\n    a,\n    b,\n    npu_compat\n)\n"


def test_idempotent():
    code = "import os\n\nimport npu_compat\n\nx = 1\n"
    module = cst.parse_module(code)
    assert add_import(module, name="npu_compat", first_party=FIRST_PARTY) is module
    code = "from mypkg import a, npu_compat\n"
    module = cst.parse_module(code)
    assert add_import(module, name="npu_compat", from_module="mypkg", first_party=FIRST_PARTY) is module


def test_unsorted_block_gets_the_import_last():
    code = "import sys\nimport os\n\nx = 1\n"
    assert add(code) == "import sys\nimport os\nimport npu_compat\n\nx = 1\n"
    code = "import os, sys\n\nx = 1\n"
    assert add(code) == "import os, sys\nimport npu_compat\n\nx = 1\n"
    code = "import os; import sys\n\nx = 1\n"
    assert add(code) == "import os; import sys\nimport npu_compat\n\nx = 1\n"


def test_no_imports_yet():
    assert add("x = 1\n") == "import npu_compat\n\nx = 1\n"
    expected = '"""Doc."""\n\nimport npu_compat\n\n\ndef f():\n    pass\n'
    assert add('"""Doc."""\ndef f():\n    pass\n') == expected
    assert add('"""Doc."""\n') == '"""Doc."""\n\nimport npu_compat\n'
    assert add("#!/usr/bin/env python\n# -*- coding: utf-8 -*-\nx = 1\n") == (
        "#!/usr/bin/env python\n# -*- coding: utf-8 -*-\nimport npu_compat\n\nx = 1\n"
    )
    assert add("") == "import npu_compat\n"


def test_blank_lines_before_the_code():
    # the comments at the top of a file stay there (a licence, a shebang)
    assert add("# about f\ndef f():\n    pass\n") == "# about f\nimport npu_compat\n\n\ndef f():\n    pass\n"
    code = '"""Doc."""\n# about f\ndef f():\n    pass\n'
    assert add(code) == '"""Doc."""\n\nimport npu_compat\n\n\n# about f\ndef f():\n    pass\n'
    expected = "# a note\n\nimport npu_compat\n\n\ndef f():\n    pass\n"
    assert add("# a note\n\ndef f():\n    pass\n") == expected
    code = '"""Doc."""\n# a note\n\ndef f():\n    pass\n'
    assert add(code) == '"""Doc."""\n\nimport npu_compat\n\n# a note\n\ndef f():\n    pass\n'
    expected = '"""Doc."""\n\nimport npu_compat\n\n\nclass A:\n    pass\n'
    assert add('"""Doc."""\nclass A:\n    pass\n') == expected


def test_try_block_ends_the_leading_block():
    code = "import os\n\ntry:\n    import ujson\nexcept ImportError:\n    ujson = None\n"
    assert add(code) == (
        "import os\n\nimport npu_compat\n\ntry:\n    import ujson\nexcept ImportError:\n    ujson = None\n"
    )


def test_comment_above_the_first_import_stays_with_it():
    code = '"""Doc."""\n\n# framework\nimport torch\n\nx = 1\n'
    assert add(code, name="aaa_first", first_party={"aaa_first"}) == (
        '"""Doc."""\n\n# framework\nimport torch\n\nimport aaa_first\n\nx = 1\n'
    )
    assert add(code, name="numpy") == '"""Doc."""\n\nimport numpy\n\n# framework\nimport torch\n\nx = 1\n'
    assert add(code, name="os") == '"""Doc."""\n\nimport os\n\n# framework\nimport torch\n\nx = 1\n'


def test_relative_from_module():
    code = "import torch\n\nfrom . import x\n"
    assert add(code, name="npu_compat", from_module=".") == "import torch\n\nfrom . import npu_compat, x\n"
    assert add(code, name="y", from_module="..") == "import torch\n\nfrom .. import y\nfrom . import x\n"


def test_classification():
    assert imports.section_of("__future__", 0) == imports.FUTURE
    assert imports.section_of("os.path", 0) == imports.STDLIB
    assert imports.section_of("torch.nn", 0) == imports.THIRD_PARTY
    assert imports.section_of("mypkg.sub", 0, {"mypkg"}) == imports.FIRST_PARTY
    assert imports.section_of(None, 1) == imports.LOCAL_FOLDER
    assert imports.natural_compare("mod2", "mod10") < 0
    assert imports.natural_compare("mod_a", "moda") < 0


# ---------------------------------------------------------------------------------------------
# Unused imports


def _unused(before: str, after: str) -> set[str]:
    return newly_unused(cst.parse_module(before), cst.parse_module(after))


def test_newly_unused_finds_the_import_the_rewrite_emptied():
    before = "import os\nimport torch\n\ntorch.cuda.synchronize()\nos.getcwd()\n"
    after = "import os\nimport torch\n\nimport npu_compat\n\nnpu_compat.synchronize()\nos.getcwd()\n"
    assert _unused(before, after) == {"torch"}


def test_newly_unused_never_names_an_import_unused_before():
    before = "import torch_npu\nimport torch\n\ntorch.cuda.synchronize()\n"
    after = "import torch_npu\nimport torch\n\nnpu_compat.synchronize()\n"
    assert _unused(before, after) == {"torch"}
    # a name unused on both sides stays
    assert _unused("import os\nx = 1\n", "import os\nx = 2\n") == set()


def test_newly_unused_counts_string_annotations_and_all():
    before = "import torch\n\ndef f(x: 'torch.Tensor'):\n    torch.cuda.synchronize()\n"
    after = "import torch\n\ndef f(x: 'torch.Tensor'):\n    npu_compat.synchronize()\n"
    assert _unused(before, after) == set()
    before = "import torch\n\n__all__ = ['torch']\ntorch.cuda.synchronize()\n"
    after = "import torch\n\n__all__ = ['torch']\nnpu_compat.synchronize()\n"
    assert _unused(before, after) == set()
    before = "import torch\nfrom typing import cast\n\ny = cast('torch.Tensor', x)\ntorch.cuda.x()\n"
    after = "import torch\nfrom typing import cast\n\ny = cast('torch.Tensor', x)\nnpu_compat.x()\n"
    assert _unused(before, after) == set()


def test_newly_unused_bindings():
    block = (
        "from __future__ import annotations\n"
        "import torch.nn as nn\nimport torch.cuda\nfrom a import b as c\n"
    )
    before = block + "nn.x; torch.y; c.z\n"
    after = block + "q = 1\n"
    assert _unused(before, after) == {"nn", "torch", "c"}
    # attributes named like the import are not uses; keyword names are not either
    after = "import torch.nn as nn\nimport torch.cuda\nfrom a import b as c\nx.torch; f(nn=1); c.z\n"
    assert _unused(before, after) == {"nn", "torch"}


def test_names_used_in_text():
    names = {"torch", "np", "os"}
    assert names_used_in_text("x = torch.zeros(1)\n", names) == {"torch"}
    assert names_used_in_text("import torch\nfrom os import path\nx = a.torch\n", names) == set()
    assert names_used_in_text("y = 'np.ndarray'\n", names) == {"np"}
    assert names_used_in_text("try: import np\nexcept ImportError: os = None\n", names) == {"os"}
    assert names_used_in_text("import os; x = np.array(1)\n", names) == {"np"}
    assert names_used_in_text("raise X from torch_error\n", names) == set()
    assert names_used_in_text("x = f'{torch.x}'\n", names) == {"torch"}
    assert names_used_in_text("        x = (1,\n", names) == names  # does not tokenize
    assert names_used_in_text("    x = torch\n", names) == {"torch"}
    assert names_used_in_text("x = 1", set()) == set()


def test_remove_the_only_name_of_a_statement_with_a_comment_above():
    code = "import os\n# the framework\nimport torch\nimport yaml\n\nx = os, yaml\n"
    assert remove(code, "torch") == "import os\n\n# the framework\nimport yaml\n\nx = os, yaml\n"
    code = "import os\n\n# the framework\nimport torch\n\nx = os\n"
    assert remove(code, "torch") == "import os\n\n# the framework\nx = os\n"


def test_remove_keeps_sections_apart():
    code = "import os\n\nimport torch\n\nimport mypkg\n\nx = 1\n"
    assert remove(code, "torch") == "import os\n\nimport mypkg\n\nx = 1\n"
    code = "import os\n\nimport numpy\nimport torch\n\nx = 1\n"
    assert remove(code, "numpy") == "import os\n\nimport torch\n\nx = 1\n"
    code = '"""Doc."""\n\nimport torch\n\n\ndef f():\n    pass\n'
    assert remove(code, "torch") == '"""Doc."""\n\n\ndef f():\n    pass\n'
    code = "import torch\n\nx = 1\n"
    assert remove(code, "torch") == "x = 1\n"
    code = '"""Doc."""\n\nimport torch\nimport yaml\n\nx = 1\n'
    assert remove(code, "torch") == '"""Doc."""\n\nimport yaml\n\nx = 1\n'


def test_remove_one_name_of_several():
    assert remove("import os, torch\nx = os\n", "torch") == "import os\nx = os\n"
    assert remove("from torch import cuda, nn\nx = nn\n", "cuda") == "from torch import nn\nx = nn\n"
    assert remove("from torch import cuda, nn\nx = cuda\n", "nn") == "from torch import cuda\nx = cuda\n"
    code = "from torch import (\n    cuda,  # c\n    nn,\n)\n"
    assert remove(code, "nn") == "from torch import (\n    cuda,  # c\n)\n"
    assert remove(code, "cuda") == "from torch import (\n    nn,\n)\n"
    assert remove("import os; import torch\nx = os\n", "torch") == "import os\nx = os\n"
    code = "import torch.nn as nn\nimport torch\nx = nn\n"
    assert remove(code, "torch") == "import torch.nn as nn\nx = nn\n"


def test_rewrite_flow_add_then_prune():
    before_text = (
        '"""Doc."""\n\nimport os\n\nimport torch\n\nimport mypkg\n\n\n'
        "def f():\n    torch.cuda.synchronize()\n    return os, mypkg\n"
    )
    before = cst.parse_module(before_text)
    after = cst.parse_module(before_text.replace("torch.cuda.synchronize", "npu_compat.synchronize"))
    after = add_import(after, name="npu_compat", first_party=FIRST_PARTY)
    unused = newly_unused(before, after)
    assert unused == {"torch"}
    assert names_used_in_text("x = torch.ones(1)\n", unused) == {"torch"}  # a cold statement using it
    assert remove_import_bindings(after, unused).code == (
        '"""Doc."""\n\nimport os\n\nimport mypkg\nimport npu_compat\n\n\n'
        "def f():\n    npu_compat.synchronize()\n    return os, mypkg\n"
    )
    assert remove("import torch\n", "torch") == ""


def test_remove_leaves_the_rest_alone():
    code = "import os\n\nif x:\n    import torch\n\nfrom a import b as b\n"
    assert remove(code, "torch", "b") is not None
    assert remove(code, "torch", "b") == code
    assert remove("import torch\n# last comment\n", "torch") == "# last comment\n"
