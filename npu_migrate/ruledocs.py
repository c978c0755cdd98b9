"""The rules reference, docs/rules.md, and one page per rule, docs/rules/<CODE>.md, rendered
from the rule families and the catalogue.

Each family documents itself (see `families/base.py`): its docstring says what it does and why,
its codes come with their catalogue entry (`rules/codes*.toml`), and its examples are the very
snippets tests/test_family_examples.py runs through npu-migrate. So the reference cannot drift
from the tool: a test compares docs/rules.md with `family_docs(FAMILIES)`, and docs/rules/ with
`rule_pages(FAMILIES)`. Regenerate both with

    python -m npu_migrate.ruledocs --write

(`python -m npu_migrate.ruledocs > docs/rules.md`, as before, prints the reference alone). The
page of one rule is also what `npu-migrate rule CODE` prints (`rule_text`, from the same data).
Codes no family example shows (scripts, configs, notebooks, the tool's own codes) take their
example from `EXTRA_EXAMPLES` below; tests/test_rule_pages.py runs each of those too.

The families come in as an argument (this module knows nothing of the rules themselves); they are
shown in code order (NPU1xx first), whatever order the dispatcher asks them in.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from . import catalogue
from .families.base import Example, Family

REGENERATE = "python -m npu_migrate.ruledocs > docs/rules.md"
WRITE_ALL = "python -m npu_migrate.ruledocs --write"  # docs/rules.md and docs/rules/*.md
PAGES_DIR = "docs/rules"  # one page per rule, <CODE>.md, relative to the repository

_INTRO = f"""\
<!-- Generated from npu_migrate/families/ by `{REGENERATE}`: do not edit by hand. -->

# Rules reference

npu-migrate's rules come in families, one per kind of CUDA-only code. Each family below says
what it rewrites, what it only reports and why, lists its codes (`npu-migrate rules` has the
whole catalogue, with guidance), and shows examples: whole files before and after
`npu-migrate`, and files it leaves alone. Every example is a test, so the output shown is
exactly what the tool writes. "Findings" lists what the run reports for the file, in file
order; a code of another family may appear where its rule applies too. "Severity" says what the
construct does on an NPU host as written: error (it fails there), warning (it runs but behaves
differently), info (it runs; review it).
"""


def family_docs(families: Iterable[type[Family]]) -> str:
    """The Markdown rules reference for `families` (Family subclasses)."""
    ordered = sorted(families, key=lambda family: (not family.CODES, min(family.CODES, default="")))
    parts = [_INTRO, _contents(ordered)]
    parts.extend(_family_section(family) for family in ordered)
    return "\n".join(parts)


def _contents(families: Sequence[type[Family]]) -> str:
    lines = ["## Families", ""]
    for family in families:
        codes = ", ".join(family.CODES)
        lines.append(f"- [{family.TITLE}](#{_slug(family.TITLE)}) (`{family.NAME}`): {codes}")
    return "\n".join(lines) + "\n"


def _family_section(family: type[Family]) -> str:
    doc = inspect.cleandoc(family.__dict__.get("__doc__") or "")
    parts = [f"## {family.TITLE}\n", f"Family `{family.NAME}`.\n"]
    if doc:
        parts.append(doc + "\n")
    parts.append(_code_table(family.CODES))
    acting = [example for example in family.EXAMPLES if example.rewrites or example.codes]
    alone = [example for example in family.EXAMPLES if not (example.rewrites or example.codes)]
    if acting:
        parts.append("### Examples\n")
        parts.extend(_example(example) for example in acting)
    if alone:
        parts.append("### Left alone\n")
        parts.append("Files that come back byte-identical, with no finding of this family:\n")
        for example in alone:
            if example.note:
                parts.append(_sentence(example.note) + "\n")
            parts.append(_code_block(example.before))
    return "\n".join(parts)


def _code_table(codes: Sequence[str]) -> str:
    lines = ["| Code | Name | Action | Severity | Message |", "|---|---|---|---|---|"]
    for code in codes:
        rule = catalogue.rule(code)
        action = "rewrites" if rule.fixable else "reports"
        lines.append(f"| {code} | {rule.name} | {action} | {catalogue.severity(code)} | {_cell(rule.message)} |")
    return "\n".join(lines) + "\n"


def _example(example: Example) -> str:
    codes = ", ".join(dict.fromkeys(example.codes))
    heading = f"#### {_sentence(example.note)} ({codes})\n" if example.note else f"#### {codes}\n"
    parts = [heading, _findings(example), "Before:\n", _code_block(example.before)]
    if example.after is not None:
        parts.extend(["After:\n", _code_block(example.after)])
    else:
        parts.append("The file is left unchanged.\n")
    return "\n".join(parts)


def _kind(code: str) -> str:
    if code == "NPU991":  # moot.py: named in the platform-aware scope's skipped entry
        return "named with its skipped scope"
    return "rewrite" if catalogue.rule(code).fixable else "report"


def _findings(example: Example) -> str:
    shown = [f"`{code}` {_kind(code)}" for code in example.codes]
    return "Findings: " + (", ".join(shown) if shown else "none") + ".\n"


def _code_block(text: str) -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") else text + "\n"
    return f"{fence}python\n{body}{fence}\n"


def _sentence(note: str) -> str:
    """A note as the docs show it: capitalised, without a closing full stop."""
    note = " ".join(note.split()).rstrip(".")
    return note[:1].upper() + note[1:]


def _cell(text: str) -> str:
    """Text for one cell of a Markdown table: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _slug(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


# ------------------------------------------------------------------ one rule

SEVERITY_MEANING = {
    "error": "as written, the construct fails on an NPU host (it raises, does not import or does not build)",
    "warning": "as written, the construct runs on an NPU host but behaves differently (a setting "
               "ignored, a branch not taken, slower or less precise)",
    "info": "the construct runs on an NPU host; the finding asks for a review",
}
# A report-only finding carries its own severity: the catalogue's is the default, lowered where the
# tool proves the code guarded or optional (a bitsandbytes test helper is a warning, a guarded
# import info) and raised where it proves more (a "cuda" string that reaches a device).
OWN_SEVERITY = ("Each finding carries its own severity, shown with it in every output format; it differs "
                "from this default where the tool knows more about the code around it (lower for "
                "guarded or optional code).")


def _severity_cell(data: dict) -> str:
    return data["severity"] if data["fixable"] else f"{data['severity']} (default; each finding shows its own)"


EFFORT_MEANING = {
    "auto": "npu-migrate rewrites it; review the diff",
    "review": "check the decision the finding describes",
    "manual": "port it by hand",
}


@dataclass(frozen=True)
class FileExample:
    """An example for a code no family example shows: a file of another kind (`name` tells it).
    A notebook's `text` is the source of its code cells, separated by CELL_BREAK lines."""

    name: str
    text: str
    note: str = ""

    @property
    def cells(self) -> list[str]:
        return self.text.split(CELL_BREAK)


CELL_BREAK = "# --- next cell ---\n"


EXTRA_EXAMPLES: dict[str, FileExample] = {
    "NPU001": FileExample("example.py", "import torch\nprint 'no parentheses'\nx = torch.zeros(1).cuda()\n",
                          "Python 2 syntax: the file does not parse and is left unchanged"),
    "NPU701": FileExample("train.sh", "#!/bin/bash\nexport CUDA_VISIBLE_DEVICES=0,1\npython train.py\n"),
    "NPU702": FileExample("train.sh", "#!/bin/bash\nexport PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
                                      "torchrun train.py\n"),
    "NPU703": FileExample("train.sh", "#!/bin/bash\nexport NCCL_P2P_DISABLE=1\ntorchrun train.py\n"),
    "NPU704": FileExample("check_gpu.sh", "#!/bin/bash\nnvidia-smi\n"),
    "NPU705": FileExample("config.yaml", "distributed:\n  backend: nccl\n"),
    "NPU706": FileExample("config.yaml", "trainer:\n  device: cuda\n"),
    "NPU707": FileExample("Dockerfile", "FROM nvidia/cuda:12.1.0-runtime-ubuntu22.04\nRUN pip install torch\n"),
    "NPU708": FileExample("Dockerfile", "FROM python:3.11\nRUN pip install flash-attn\n"),
    "NPU709": FileExample("docker-compose.yaml",
                          "services:\n  train:\n    image: trainer\n    runtime: nvidia\n"),
    "NPU751": FileExample("notebook.ipynb", "import torch\nx = torch.ones(1)\n" + CELL_BREAK + "y = x.cuda(\n",
                          "a notebook whose second cell does not parse (the cells' sources are shown)"),
    "NPU752": FileExample("notebook.ipynb", "!nvidia-smi\nimport torch\n",
                          "a shell line in a notebook cell (the cell's source is shown)"),
    "NPU753": FileExample("notebook.ipynb", "%env CUDA_VISIBLE_DEVICES=0\nimport torch\n",
                          "an IPython magic in a notebook cell (the cell's source is shown)"),
    "NPU912": FileExample("kernels/add.cu",
                          "__global__ void add(float *x, float *y) {\n  int i = threadIdx.x;\n"
                          "  y[i] += x[i];\n}\n"),
}
# Codes that take no example: the tool's own findings about the project rather than about code.
NO_EXAMPLE = {
    "NPU002": "the file cannot be read or decoded (binary data, a wrong coding cookie)",
    "NPU003": "the shim a migrated file imports is missing from the repository (`check` reports it)",
    "NPU004": "a file imports a shim of another package; npu-migrate points it at its own package's shim",
}


def rule_example(code: str, families: Iterable[type[Family]]):
    """The example of a code: the first family example that reports it, else EXTRA_EXAMPLES."""
    for family in families:
        for example in family.EXAMPLES:
            if code in example.codes:
                return example
    return EXTRA_EXAMPLES.get(code)


def _family_of(code: str, families: Iterable[type[Family]]):
    for family in families:
        if code in family.CODES:
            return family
    return None


def _lang(name: str) -> str:
    lower = name.lower()
    for suffix, lang in ((".sh", "bash"), (".yaml", "yaml"), (".yml", "yaml"), (".toml", "toml"),
                         (".cu", "cuda"), (".ipynb", "python"), (".py", "python")):
        if lower.endswith(suffix):
            return lang
    return "dockerfile" if "dockerfile" in lower else ""


def _fenced(text: str, lang: str) -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") else text + "\n"
    return f"{fence}{lang}\n{body}{fence}\n"


def rule_data(code: str, families: Optional[Iterable[type[Family]]] = None) -> dict:
    """Everything known about one rule, from the catalogue and the families."""
    if families is None:
        from .families import FAMILIES as families
    families = list(families)
    rule = catalogue.rule(code)
    severity = catalogue.severity(code)
    family = _family_of(code, families)
    return {
        "code": code,
        "name": rule.name,
        "fixable": rule.fixable,
        "action": "rewrites" if rule.fixable else "reports",
        "severity": severity,
        "severity_meaning": SEVERITY_MEANING.get(severity, ""),
        "effort": rule.effort,
        "effort_meaning": EFFORT_MEANING.get(rule.effort, ""),
        "area": rule.family,
        "family": family,
        "message": " ".join(rule.message.split()),
        "guidance": " ".join(rule.guidance.split()),
        "example": rule_example(code, families),
    }


def _why(data: dict) -> str:
    family = data["family"]
    first = ""
    # the family's own description, where the code is of its kind (the device family also lists
    # the sweep's NPU990/NPU991, which its examples produce: their "why" is not moving tensors)
    if family is not None and family.CODES[0][3] == data["code"][3]:
        doc = inspect.cleandoc(family.__dict__.get("__doc__") or "")
        first = " ".join(doc.split("\n\n", 1)[0].split()) if doc else ""
    if data["fixable"]:
        parts = [f"Severity {data['severity']}: {data['severity_meaning']}."]
    else:
        parts = [f"Severity {data['severity']} by default: {data['severity_meaning']}. {OWN_SEVERITY}"]
    if first:
        parts.append(first)
    return " ".join(parts)


def _fix(data: dict) -> str:
    if data["fixable"]:
        how = ("npu-migrate rewrites it: `npu-migrate PATH` (or `npu-migrate check --fix`); "
               "`npu-migrate check` reports what it would rewrite.")
        if data["code"].startswith("NPU7"):
            how = "npu-migrate rewrites shell scripts with `--rewrite-scripts`; elsewhere it reports."
    else:
        how = "npu-migrate only reports it; the change is yours."
    return f"{how} {data['guidance']}"


def rule_page(code: str, families: Optional[Iterable[type[Family]]] = None) -> str:
    """The Markdown page of one rule (docs/rules/<CODE>.md)."""
    data = rule_data(code, families)
    family = data["family"]
    family_line = (f"[{family.TITLE}](../rules.md#{_slug(family.TITLE)}) (`{family.NAME}`)"
                   if family is not None else data["area"])
    lines = [
        f"<!-- Generated from rules/codes*.toml and npu_migrate/families/ by `{WRITE_ALL}`: "
        "do not edit by hand. -->",
        "",
        f"# {code} {data['name']}",
        "",
        "| | |",
        "|---|---|",
        f"| Action | {data['action']} |",
        f"| Severity | {_severity_cell(data)} |",
        f"| Effort | {data['effort']} ({data['effort_meaning']}) |",
        f"| Family | {family_line} |",
        "",
        "## What it finds",
        "",
        _cell(data["message"]).replace("\\|", "|"),
        "",
        "## Why",
        "",
        _why(data),
        "",
        "## Example",
        "",
        *_example_lines(data),
        "## Fix",
        "",
        _fix(data),
        "",
        "## Suppress",
        "",
        f"On the line: `# noqa: {code}` (or `# npu-migrate: ignore[{code}]`); for a file, "
        f"`# npu-migrate: skip-file[{code}]`; for a project, `ignore = [\"{code}\"]` or "
        f"`per-file-ignores` under `[tool.npu-migrate]` in pyproject.toml.",
        "",
        f"`npu-migrate rule {code}` prints this page; [all rules](../rules.md).",
        "",
    ]
    return "\n".join(lines)


def _example_lines(data: dict) -> list[str]:
    example = data["example"]
    code = data["code"]
    if example is None:
        return [f"No example: {NO_EXAMPLE.get(code, 'the tool reports it about the project')}.", ""]
    if isinstance(example, FileExample):
        note = _sentence(example.note) + ". " if example.note else ""
        return [f"{note}`{example.name}`:", "", _fenced(example.text, _lang(example.name))]
    out = []
    if example.note:
        out += [_sentence(example.note) + ".", ""]
    out += ["Before:", "", _code_block(example.before)]
    if example.after is not None:
        out += ["After `npu-migrate`:", "", _code_block(example.after)]
    else:
        out += ["npu-migrate leaves the file unchanged and reports it.", ""]
    return out


def rule_pages(families: Iterable[type[Family]]) -> dict[str, str]:
    """{"NPU101.md": page, ...}: every rule's page, for docs/rules/."""
    families = list(families)
    return {f"{code}.md": rule_page(code, families) for code in catalogue.rules()}


def rule_text(code: str) -> str:
    """What `npu-migrate rule CODE` prints: the rule's page as plain text."""
    data = rule_data(code)
    example = _example_lines(data)
    text = "\n".join([
        f"{code} {data['name']}",
        f"  {data['action']}, severity {_severity_cell(data)}, effort {data['effort']} "
        f"({data['effort_meaning']})",
        "",
        "What it finds:",
        "  " + data["message"],
        "",
        "Why:",
        "  " + _why(data),
        "",
        "Example:",
        *("  " + line if line else "" for line in "\n".join(example).splitlines()),
        "",
        "Fix:",
        "  " + _fix(data),
        "",
        f"Suppress: # noqa: {code}   (docs: {PAGES_DIR}/{code}.md)",
        "",
    ])
    return text


def rule_json(code: str) -> dict:
    data = rule_data(code)
    example = data["example"]
    shown = None
    if isinstance(example, FileExample):
        shown = {"file": example.name, "before": example.text, "after": None}
    elif example is not None:
        shown = {"file": "example.py", "before": example.before, "after": example.after}
    return {
        "code": code, "name": data["name"], "fixable": data["fixable"], "severity": data["severity"],
        "effort": data["effort"], "message": data["message"], "why": _why(data), "fix": _fix(data),
        "example": shown, "page": f"{PAGES_DIR}/{code}.md",
    }


def write_docs(repo: Path, families: Iterable[type[Family]]) -> list[Path]:
    """Write docs/rules.md and docs/rules/<CODE>.md under `repo`; pages of codes that no longer
    exist are removed. The paths written or removed."""
    families = list(families)
    changed = []
    reference = repo / "docs" / "rules.md"
    text = family_docs(families)
    if not reference.exists() or reference.read_text(encoding="utf-8") != text:
        reference.write_text(text, encoding="utf-8")
        changed.append(reference)
    folder = repo / PAGES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    pages = rule_pages(families)
    for name, page in pages.items():
        path = folder / name
        if not path.exists() or path.read_text(encoding="utf-8") != page:
            path.write_text(page, encoding="utf-8")
            changed.append(path)
    for path in folder.glob("NPU*.md"):
        if path.name not in pages:
            path.unlink()
            changed.append(path)
    return changed


if __name__ == "__main__":  # pragma: no cover - `python -m npu_migrate.ruledocs [--write]`
    import sys

    from .families import FAMILIES

    if "--write" in sys.argv[1:]:
        for changed in write_docs(Path(__file__).resolve().parent.parent, FAMILIES):
            print(f"wrote {changed}")
    else:
        sys.stdout.write(family_docs(FAMILIES))
