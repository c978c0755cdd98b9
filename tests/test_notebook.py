"""Jupyter notebooks (issue #6): code cells migrated by the engine, everything else byte-identical.

Fixtures (fixtures/notebooks/, patterns.md G38 "notebooks with device="cuda""):
- train_cuda.ipynb: written the way nbformat writes (indent 1, sorted keys, non-ASCII kept, a
  final newline); magics, shell escapes, a %%time and a %%bash cell, outputs with an image/png,
  a cell with a syntax error, a raw cell.
- experiments/eval_cuda.ipynb: in a subfolder, written by another tool (indent 2, insertion key
  order, non-ASCII escaped, one source as a single string, no final newline).
Their code runs on CPU (CUDA paths are guarded), so the migrated notebook is executed next to the
original and must print the same.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest
from rich.console import Console

from npu_migrate import catalogue, inject
from npu_migrate.model import FileResult, Options
from npu_migrate.findings import Finding
from npu_migrate.notebook import file_line, migrate_notebook
from npu_migrate.render import RunSummary, print_findings

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "fixtures" / "notebooks"
TRAIN = "train_cuda.ipynb"
EVAL = "experiments/eval_cuda.ipynb"
OPTIONS = Options(enabled=catalogue.enabled_codes())

# (code, cell, line, column); cell = 1-based index among all cells (markdown and raw included)
TRAIN_FINDINGS = [
    ("NPU102", 3, 1, 10), ("NPU201", 3, 1, 20), ("NPU201", 3, 3, 4), ("NPU101", 3, 4, 13),
    ("NPU201", 5, 2, 4), ("NPU201", 5, 3, 5),
    ("NPU752", 6, 1, 2), ("NPU752", 6, 2, 14), ("NPU752", 6, 3, 9),  # not `!ls -la  # no CUDA here`
    ("NPU101", 7, 1, 11), ("NPU201", 7, 1, 38),  # in `%time ...`: columns count the magic
    ("NPU751", 9, 2, 1),
    ("NPU752", 10, 2, 1),
    ("NPU201", 11, 1, 1), ("NPU201", 11, 2, 15), ("NPU201", 11, 2, 52),
]
TRAIN_SOURCES = {
    2: "%matplotlib inline\n"
       "import torch\n"
       "import torch.nn as nn\n"
       "import npu_compat\n"
       "\n"
       "torch.manual_seed(0)",
    3: "device = npu_compat.device_type() if npu_compat.is_available() else \"cpu\"\n"
       "model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))\n"
       "if npu_compat.is_available():\n"
       "    model = model.to(npu_compat.device())\n"
       "model = model.to(device)\n"
       "print(device, sum(p.numel() for p in model.parameters()))",
    5: "%%time\n"
       "if npu_compat.is_available():\n"
       "    npu_compat.synchronize()\n"
       "loss = nn.functional.mse_loss(y, torch.zeros_like(y))\n"
       "print(f\"loss {loss.item():.4f}\")",
    7: "%time z = torch.ones(2, 2).to(npu_compat.device()) if npu_compat.is_available() else torch.ones(2, 2)\n"
       "print(z.sum().item())\n"
       "torch.cuda.is_available?",
    11: "npu_compat.empty_cache()\n"
        "print(\"peak\", npu_compat.max_memory_allocated() if npu_compat.is_available() else 0)",
}
EVAL_FINDINGS = [
    ("NPU102", 3, 2, 37), ("NPU201", 3, 2, 47), ("NPU106", 3, 3, 8), ("NPU201", 3, 4, 9),
    ("NPU201", 4, 1, 7), ("NPU201", 4, 1, 39),
    ("NPU753", 5, 1, 6),  # %env CUDA_LAUNCH_BLOCKING=1: a magic, reported and kept
]
EVAL_SOURCES = {
    2: "import torch\n"
       "import torch.nn.functional as F\n"
       "try:\n"
       "    import npu_compat\n"
       "except ModuleNotFoundError:  # notebook in a subfolder: make the repository root importable (npu-migrate)\n"
       "    import os\n"
       "    import sys\n"
       "\n"
       "    sys.path.append(os.path.abspath(os.path.join(os.getcwd(), \"..\")))\n"
       "    import npu_compat",
    3: "def evaluate(values):\n"
       "    t = torch.tensor(values, device=npu_compat.device_type() if npu_compat.is_available() else \"cpu\")\n"
       "    if npu_compat.on_accelerator(t):\n"
       "        npu_compat.synchronize()\n"
       "    return F.softmax(t, dim=0)\n"
       "\n"
       "print(evaluate([1.0, 2.0, 3.0]))  # probabilités\n",
    4: "print(npu_compat.device_count() >= 0, npu_compat.is_available())",
}
CASES = {
    TRAIN: (TRAIN_FINDINGS, TRAIN_SOURCES, lambda nb: json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"),
    EVAL: (EVAL_FINDINGS, EVAL_SOURCES, lambda nb: json.dumps(nb, indent=2, ensure_ascii=True)),
}


def migrate(rel: str, source: Optional[bytes] = None, options: Options = OPTIONS) -> FileResult:
    return migrate_notebook((NOTEBOOKS / rel).read_bytes() if source is None else source, rel, options)


def sources(data: bytes) -> dict[int, str]:
    cells = json.loads(data)["cells"]
    return {n: "".join(c["source"]) for n, c in enumerate(cells, start=1)}


def notebook(*cells: str, **metadata) -> bytes:
    """A small nbformat-style notebook of code cells."""
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                     "source": c.splitlines(True)} for c in cells],
          "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}
    return (json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode()


# ------------------------------------------------------------------ findings and migrated cells

@pytest.mark.parametrize("rel", [TRAIN, EVAL])
def test_findings_carry_cell_line_and_column(rel):
    expected, _sources, _style = CASES[rel]
    result = migrate(rel)
    assert [(f.code, f.cell, f.line, f.column) for f in result.findings] == expected
    assert all(f.path == rel for f in result.findings)
    rewrites = {c for c, *_ in expected if catalogue.rule(c).fixable}
    assert all(f.fixable == (f.code in rewrites) for f in result.findings)


def test_findings_name_what_was_set_aside():
    by_place = {(f.cell, f.line): f for f in migrate(TRAIN).findings}
    assert by_place[6, 2].message.endswith("left unchanged: `!pip install flash-attn --no-build-isolation`")
    assert by_place[6, 3].source == "gpus = !nvidia-smi -L"
    assert by_place[10, 2].source == "nvidia-smi --query-gpu=name --format=csv"
    assert "cell was left unchanged" in by_place[9, 2].message


@pytest.mark.parametrize("rel", [TRAIN, EVAL])
def test_migrated_cell_sources(rel):
    _findings, expected, _style = CASES[rel]
    result = migrate(rel)
    before, after = sources(result.original), sources(result.new)
    assert {n for n in before if before[n] != after[n]} == set(expected)
    for number, text in expected.items():
        assert after[number] == text, number


@pytest.mark.parametrize("rel", [TRAIN, EVAL])
def test_only_changed_sources_change_byte_for_byte(rel):
    """The new file is the original document with the new sources, written in the original's
    exact style (indentation, key order, escapes, final newline); nothing else moved."""
    _findings, expected, style = CASES[rel]
    original = (NOTEBOOKS / rel).read_text(encoding="utf-8")
    data = json.loads(original)
    assert style(data) == original  # the fixture is in that style
    result = migrate(rel)
    new = result.new.decode("utf-8")
    new_data = json.loads(new)
    for number, text in expected.items():
        cell = data["cells"][number - 1]
        cell["source"] = text if isinstance(cell["source"], str) else text.splitlines(True)
    assert new_data == data
    assert new == style(data)


def test_outputs_execution_counts_and_non_ascii_survive():
    result = migrate(TRAIN)
    old, new = json.loads(result.original), json.loads(result.new)
    for before, after in zip(old["cells"], new["cells"]):
        assert {k: v for k, v in before.items() if k != "source"} == {k: v for k, v in after.items() if k != "source"}
    image = new["cells"][3]["outputs"][1]
    assert image["output_type"] == "display_data" and image["data"]["image/png"].startswith("iVBORw0KGgo")
    assert new["cells"][3]["execution_count"] == 3
    assert "Entraînement d'un petit modèle — démo ✓".encode() in result.new
    assert sources(result.new)[8] == "raw text: torch.cuda stays as it is"


@pytest.mark.parametrize("rel", [TRAIN, EVAL])
def test_second_run_changes_nothing(rel):
    first = migrate(rel)
    second = migrate(rel, first.new)
    assert second.new is None
    assert second.findings == [f for f in first.findings if not f.fixable]


def test_windows_line_endings_and_bom_are_kept():
    original = (NOTEBOOKS / TRAIN).read_text(encoding="utf-8")
    crlf = "\ufeff" + original.replace("\n", "\r\n")  # JSON whitespace only: "\n" in strings is escaped
    result = migrate(TRAIN, crlf.encode("utf-8"))
    expected = "\ufeff" + migrate(TRAIN).new.decode("utf-8").replace("\n", "\r\n")
    assert result.new.decode("utf-8") == expected


def test_unchanged_notebook_is_not_rewritten():
    result = migrate_notebook(notebook("import torch\nprint(torch.ones(1))"), "nb.ipynb", OPTIONS)
    assert result.new is None and not result.findings and result.skipped == "no CUDA trigger words"
    result = migrate_notebook(notebook("!nvidia-smi\nprint(1)"), "nb.ipynb", OPTIONS)
    assert result.new is None and [(f.code, f.cell, f.line) for f in result.findings] == [("NPU752", 1, 1)]


# ------------------------------------------------------------------ the migrated notebook runs

def as_python(source: str) -> Optional[str]:
    """A code cell as plain Python, the way IPython would run it without its magics; None for
    a cell magic that is not Python. (Independent of npu_migrate.notebook on purpose.)"""
    lines = source.splitlines(True)
    if lines and lines[0].startswith("%%"):
        if not re.match(r"%%(time|capture)\b", lines[0]):
            return None
        lines = ["\n"] + lines[1:]
    out = []
    for line in lines:
        stripped = line.lstrip(" \t")
        indent = line[: len(line) - len(stripped)]
        timed = re.match(r"%time (.*)", stripped)
        if timed:
            out.append(f"{indent}{timed.group(1)}\n")
        elif stripped.startswith(("%", "!")) or re.match(r"\w+ = !", stripped) or stripped.rstrip().endswith("?"):
            out.append(f"{indent}pass\n")
        else:
            out.append(line)
    return "".join(out)


def runnable_cells(path: Path) -> dict[int, str]:
    cells = {}
    for number, cell in enumerate(json.loads(path.read_bytes())["cells"], start=1):
        if cell["cell_type"] != "code":
            continue
        code = as_python("".join(cell["source"]))
        if code is None:
            continue
        try:
            compile(code, f"<cell {number}>", "exec")
        except SyntaxError:
            continue
        cells[number] = code
    return cells


RUNNER = r"""
import json, sys
namespace = {"__name__": "__main__"}
for number, code in json.load(sys.stdin):
    print(f"--- cell {number}")
    exec(compile(code, f"<cell {number}>", "exec"), namespace)
shim = sys.modules.get("npu_compat")
print("SHIM:", getattr(shim, "__file__", None), file=sys.stderr)
"""


def run_notebook(path: Path) -> tuple[str, str]:
    """Run the code cells in order, in the notebook's folder as Jupyter does (no __file__)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NPU_COMPAT_DEVICE")}
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER], input=json.dumps(sorted(runnable_cells(path).items())),
        cwd=path.parent, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def migrated_repo(tmp_path_factory) -> tuple[Path, Path]:
    """(original copy, migrated copy with the shim injected at its root)."""
    base = tmp_path_factory.mktemp("notebooks")
    original, migrated = base / "original", base / "migrated"
    shutil.copytree(NOTEBOOKS, original)
    shutil.copytree(NOTEBOOKS, migrated)
    for rel in (TRAIN, EVAL):
        result = migrate(rel, (migrated / rel).read_bytes())
        (migrated / rel).write_bytes(result.new)
    inject.inject(migrated, "npu_compat")
    return original, migrated


@pytest.mark.parametrize("rel", [TRAIN, EVAL])
def test_migrated_code_cells_compile(migrated_repo, rel):
    _original, migrated = migrated_repo
    cells = json.loads((migrated / rel).read_bytes())["cells"]
    code_cells = {n for n, c in enumerate(cells, start=1) if c["cell_type"] == "code"}
    not_python = {10} if rel == TRAIN else set()  # %%bash
    broken = {9} if rel == TRAIN else set()  # the syntax error, left as it was
    assert set(runnable_cells(migrated / rel)) == code_cells - not_python - broken
    if broken:
        assert sources((migrated / rel).read_bytes())[9] == sources((NOTEBOOKS / rel).read_bytes())[9]


@pytest.mark.parametrize("rel", [TRAIN, EVAL])
def test_migrated_notebook_prints_what_the_original_printed(migrated_repo, rel):
    original, migrated = migrated_repo
    assert set(runnable_cells(original / rel)) == set(runnable_cells(migrated / rel))
    before, _ = run_notebook(original / rel)
    after, stderr = run_notebook(migrated / rel)
    assert after == before
    assert before.count("--- cell") == len(runnable_cells(original / rel)) >= 3
    assert re.search(r"tensor\(|loss \d", before)  # the cells computed something
    # the shim came from the repository root, through the bootstrap for the subfolder notebook
    assert f"SHIM: {migrated / 'npu_compat' / '__init__.py'}" in stderr


# ------------------------------------------------------------------ IPython syntax

def test_magics_shell_and_help_lines_are_set_aside_and_restored():
    cell = ("import torch\n"
            "for i in range(2):\n"
            "    %time torch.cuda.synchronize()\n"
            "    !echo cuda \\\n"
            "      --more\n"
            "text = '''\n"
            "!nvidia-smi stays text\n"
            "'''\n"
            "out = %env CUDA_VISIBLE_DEVICES\n"
            "torch.cuda?\n"
            "x = torch.ones(1).cuda()  # what?")
    result = migrate_notebook(notebook(cell), "nb.ipynb", OPTIONS)
    assert sources(result.new)[1] == (
        "import torch\n"
        "import npu_compat\n"
        "for i in range(2):\n"
        "    %time npu_compat.synchronize()\n"
        "    !echo cuda \\\n"
        "      --more\n"
        "text = '''\n"
        "!nvidia-smi stays text\n"
        "'''\n"
        "out = %env CUDA_VISIBLE_DEVICES\n"
        "torch.cuda?\n"
        "x = torch.ones(1).to(npu_compat.device())  # what?")
    assert [(f.code, f.line, f.column) for f in result.findings] == [
        ("NPU201", 3, 11), ("NPU752", 4, 11), ("NPU753", 9, 12), ("NPU101", 11, 5)]


def test_names_are_known_across_cells():
    result = migrate_notebook(
        notebook("from torch.cuda.amp import autocast\nimport torch", "with autocast():\n    y = torch.ones(1)"),
        "nb.ipynb", OPTIONS)
    assert sources(result.new) == {1: "import torch\nimport npu_compat", 2: "with npu_compat.autocast():\n    y = torch.ones(1)"}
    assert [(f.code, f.cell, f.line) for f in result.findings] == [("NPU206", 1, 1), ("NPU401", 2, 1)]


def test_top_level_await_and_late_future_import_are_python_in_a_notebook():
    result = migrate_notebook(notebook(
        "import asyncio, torch\nawait asyncio.sleep(0)\nx = torch.ones(1).cuda()",
        "async with lock:\n    y = x.cuda()",
        "from __future__ import annotations\nz = x.cuda()"), "nb.ipynb", OPTIONS)
    assert [(f.code, f.cell, f.line) for f in result.findings] == [("NPU101", 1, 3), ("NPU101", 2, 2), ("NPU101", 3, 2)]
    assert sources(result.new)[2] == "async with lock:\n    y = x.to(npu_compat.device())"


def test_cell_magics():
    result = migrate_notebook(notebook(
        "%%timeit -n 3 x = torch.ones(2).cuda()\ny = x.cuda()",  # setup and body are Python; own namespace
        "%%time\nimport torch\nz = torch.zeros(1, device='cuda')",  # the shim import goes here, under %%time
        "%%writefile train.py\nmodel.cuda()\n",
        "%%html\n<b>cuda</b>",
    ), "nb.ipynb", OPTIONS)
    after = sources(result.new)
    assert after[1] == "%%timeit -n 3 x = torch.ones(2).to(npu_compat.device())\ny = x.to(npu_compat.device())"
    assert after[2] == "%%time\nimport torch\nimport npu_compat\nz = torch.zeros(1, device=npu_compat.device_type())"
    assert after[3] == "%%writefile train.py\nmodel.cuda()\n" and after[4] == "%%html\n<b>cuda</b>"
    assert [(f.code, f.cell, f.line, f.column) for f in result.findings] == [
        ("NPU101", 1, 1, 19), ("NPU101", 1, 2, 5), ("NPU102", 2, 3, 27), ("NPU753", 3, 2, 7)]


def test_shim_import_never_hides_a_displayed_magic_and_is_added_once():
    result = migrate_notebook(notebook("import torch\n%pwd", "x = torch.ones(1).cuda()"), "nb.ipynb", OPTIONS)
    assert sources(result.new)[1] == "import torch\nimport npu_compat\n%pwd"
    result = migrate_notebook(notebook("import npu_compat\nimport torch", "x = torch.ones(1).cuda()"), "nb.ipynb", OPTIONS)
    assert sources(result.new)[1] == "import npu_compat\nimport torch"


def test_deeper_notebook_bootstrap_climbs_to_the_root():
    result = migrate_notebook(notebook("import torch\nx = torch.ones(1).cuda()"), "a/b/nb.ipynb", OPTIONS)
    assert 'os.path.join(os.getcwd(), "..", ".."))' in sources(result.new)[1]


def test_a_cell_that_does_not_parse_is_left_alone_and_the_others_migrate():
    result = migrate_notebook(notebook("import torch\nx = torch.ones(1).cuda()", "y = x.cuda(\n",
                                       "print('no trigger words' +"), "nb.ipynb", OPTIONS)
    after = sources(result.new)
    assert after[2] == "y = x.cuda(\n" and after[3] == "print('no trigger words' +"
    assert after[1].endswith("x = torch.ones(1).to(npu_compat.device())")
    # a broken cell without trigger words is not worth a finding, as for a file
    assert [(f.code, f.cell) for f in result.findings] == [("NPU101", 1), ("NPU751", 2)]


def test_a_cell_left_open_does_not_run_into_the_next_one():
    """Joined, an open triple quote in one cell and its closing one in the next parse as one string."""
    quote = '"' * 3
    result = migrate_notebook(notebook(f"import torch\nx = {quote}\nmodel.cuda()", f"{quote}\ny = model.cuda()",
                                       "z = torch.ones(1).cuda()"), "nb.ipynb", OPTIONS)
    after = sources(result.new)
    assert after[1] == f"import torch\nx = {quote}\nmodel.cuda()" and after[2] == f"{quote}\ny = model.cuda()"
    assert after[3] == "import npu_compat\nz = torch.ones(1).to(npu_compat.device())"
    assert [(f.code, f.cell) for f in result.findings] == [("NPU751", 1), ("NPU751", 2), ("NPU101", 3)]


# ------------------------------------------------------------------ suppression, selection, skips

def test_suppression_comments_and_selection():
    source = notebook("!nvidia-smi  # noqa: NPU752\n!nvcc --version\nimport torch\nx = torch.ones(1).cuda()  # noqa: NPU101")
    result = migrate_notebook(source, "nb.ipynb", OPTIONS)
    assert [(f.code, f.line) for f in result.findings] == [("NPU752", 2)]
    assert result.new is None and result.suppressed == 2
    quiet = Options(enabled=catalogue.enabled_codes(ignore=("NPU752",)))
    assert migrate_notebook(source, "nb.ipynb", quiet).findings == []
    skipped = migrate_notebook(notebook("# npu-migrate: skip-file\nimport torch", "!nvidia-smi\nx.cuda()"), "nb.ipynb", OPTIONS)
    assert skipped.skipped == "npu-migrate: skip-file comment" and not skipped.findings and skipped.new is None


def test_npu_aware_and_non_python_notebooks_are_left_alone():
    aware = migrate_notebook(notebook("import torch_npu", "x = torch.ones(1).cuda()"), "nb.ipynb", OPTIONS)
    assert aware.skipped.startswith("already NPU-aware") and aware.new is None
    julia = migrate_notebook(notebook("using CUDA\nx = cu([1, 2])", kernelspec={"language": "julia"}), "nb.ipynb", OPTIONS)
    assert julia.skipped == "not a Python notebook (julia)" and julia.new is None and not julia.findings


@pytest.mark.parametrize("data, code, detail", [
    (b'{"cells": [', "NPU001", "not valid JSON"),
    (b"[1, 2]", "NPU001", "not a Jupyter notebook"),
    (b'{"nbformat": 3, "worksheets": [], "cells": []}', "NPU001", "nbformat 3 is not supported"),
    (b'{"nbformat": 4, "cells": [{"cell_type": "code", "source": 5}]}', "NPU001", "cell 1: source is neither"),
    ('{"nbformat": 4, "cells": [], "x": "é"}'.encode("latin-1"), "NPU002", "must be UTF-8"),
])
def test_a_file_that_is_not_a_notebook_is_a_finding_not_a_crash(data, code, detail):
    result = migrate_notebook(data, "bad.ipynb", OPTIONS)
    assert result.new is None
    assert [(f.code, f.path, f.cell) for f in result.findings] == [(code, "bad.ipynb", None)]
    assert detail in result.findings[0].message


# ------------------------------------------------------------------ the Finding and its rendering

@pytest.mark.parametrize("rel", [TRAIN, EVAL])
def test_file_line_points_into_the_ipynb_text(rel):
    text = (NOTEBOOKS / rel).read_text(encoding="utf-8")
    file_lines = text.splitlines()
    for f in migrate(rel).findings:
        cell = json.loads(text)["cells"][f.cell - 1]
        wanted = "".join(cell["source"]).splitlines()[f.line - 1]
        where = file_lines[file_line(text, f.cell, f.line) - 1]
        if isinstance(cell["source"], list):
            assert json.loads(where.strip().rstrip(",")).rstrip("\n") == wanted
        else:
            assert where.lstrip().startswith('"source": "') and json.dumps(wanted, ensure_ascii=True)[1:-1] in where


def test_findings_sort_by_cell_then_line_and_render_with_the_cell():
    a = Finding("nb.ipynb", 5, 1, "NPU101", "m", True, "", 1)
    b = Finding("nb.ipynb", 1, 1, "NPU101", "m", True, "", 2)
    plain = Finding("a.py", 3, 2, "NPU202", "m", False)
    assert sorted([b, a, plain]) == [plain, a, b]
    assert b.as_dict()["cell"] == 2 and plain.as_dict()["cell"] is None
    assert (b.location, plain.location) == ("cell_2:1:1", "3:2")

    console = Console(record=True, width=200, color_system=None)
    print_findings(console, RunSummary(root=".", dry_run=True, results=[migrate(TRAIN)]))
    text = console.export_text()
    assert "train_cuda.ipynb:cell_6:2:14: NPU752 Shell command" in text
    assert "train_cuda.ipynb:cell_9:2:1: NPU751" in text


def test_a_notebook_whose_only_code_cell_fails_to_parse_is_reported(tmp_path):
    """Every code cell broken: each one with a CUDA word is still NPU751 (it was silent)."""
    import json as _json

    from npu_migrate import catalogue as _catalogue
    from npu_migrate.model import Options as _Options
    from npu_migrate.notebook import migrate_notebook as _migrate_notebook

    nb = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                     "source": ["x = torch.cuda.synchronize(\n"]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    result = _migrate_notebook(_json.dumps(nb).encode(), "nb.ipynb", _Options(enabled=_catalogue.enabled_codes()))
    assert [(f.code, f.cell) for f in result.findings] == [("NPU751", 1)]
    assert not result.changed
