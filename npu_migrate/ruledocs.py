"""The rules reference, docs/rules.md, rendered from the rule families.

Each family documents itself (see `families/base.py`): its docstring says what it does and why,
its codes come with their catalogue entry (`rules/codes*.toml`), and its examples are the very
snippets tests/test_family_examples.py runs through npu-migrate. So the reference cannot drift
from the tool: a test compares docs/rules.md with `family_docs(FAMILIES)`. Regenerate it with

    python -m npu_migrate.ruledocs > docs/rules.md

The families come in as an argument (this module knows nothing of the rules themselves); they are
shown in code order (NPU1xx first), whatever order the dispatcher asks them in.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Sequence

from . import catalogue
from .families.base import Example, Family

REGENERATE = "python -m npu_migrate.ruledocs > docs/rules.md"

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


def _findings(example: Example) -> str:
    shown = [f"`{code}` {'rewrite' if catalogue.rule(code).fixable else 'report'}" for code in example.codes]
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


if __name__ == "__main__":  # pragma: no cover - `python -m npu_migrate.ruledocs > docs/rules.md`
    import sys

    from .families import FAMILIES

    sys.stdout.write(family_docs(FAMILIES))
