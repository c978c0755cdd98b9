"""Repeats of a CUDA-only import the file already reports, read across a class and its loaders
(issue #16, round-13 audit AI#36).

foldbackend.fold_repeated_imports folds the same import finding twice in one class or at one
file's top level. A class whose methods call a module-level loader of the file (`_load_flash_attn()`
at the start of `RingAttention.attention`), whose body imports a CUDA-only package the run reports
(`from flash_attn.flash_attn_interface import ...`, an error), and which imports that package again
in a method (`import flash_attn` for a `__version__` check in `RingAttention.forward`): the second
import restates the loader's finding, under the same code and package. It is folded into that
finding (listed in its "also at lines ...", with the reason), at the same severity or a lower one:
nothing is dropped. A class that calls no such loader, or another package's import, keeps its own.
"""

from __future__ import annotations

import ast
import re

from .findings import Finding

REPEATED = ("NPU502", "NPU911", "NPU902", "NPU915")  # import findings of a package an NPU host lacks
IN_LOADER_CLASS = "imported again in a class whose methods call the loader that imports it"
_PACKAGE = re.compile(r"\bimport (?:of|from) (?:compiled extension module )?`([\w.]+)`")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _package(finding: Finding) -> str | None:
    match = _PACKAGE.search(finding.message)
    return match.group(1).split(".")[0] if match else None


def _inside(node: ast.AST, line: int) -> bool:
    return node.lineno <= line <= (node.end_lineno or node.lineno)


def fold_class_loader_imports(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    """An import finding in a class folded into the same package's finding in a module-level
    function the class's methods call (see the module's doc)."""
    from .folding import Fold, ours

    imports = [f for f in findings if f.code in REPEATED and ours(f) and f.severity != "info" and _package(f)]
    if len(imports) < 2:
        return findings
    functions = {n.name: n for n in tree.body if isinstance(n, _FUNCTIONS)}
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    if not functions or not classes:
        return findings
    # (code, package) -> the first finding in each loader
    in_loader: dict[str, dict[tuple, Finding]] = {}
    for finding in sorted(imports):
        for name, function in functions.items():
            if _inside(function, finding.line):
                in_loader.setdefault(name, {}).setdefault((finding.code, _package(finding)), finding)
    if not in_loader:
        return findings
    fold = Fold(findings)
    for cls in classes:
        called = {n.func.id for n in ast.walk(cls) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                  and n.func.id in in_loader}
        anchors: dict[tuple, Finding] = {}
        for name in sorted(called, key=lambda n: functions[n].lineno):
            for key, finding in in_loader[name].items():
                anchors.setdefault(key, finding)
        if not anchors:
            continue
        for finding in imports:
            anchor = anchors.get((finding.code, _package(finding)))
            if anchor is None or not _inside(cls, finding.line) or not fold.movable(finding, anchor):
                continue
            places = [p for p in [(finding.line, finding.column, finding.source), *finding.also] if _inside(cls, p[0])]
            fold.move(finding, places, anchor)
    return fold.result(IN_LOADER_CLASS) if fold.moved else findings
