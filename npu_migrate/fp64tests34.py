"""A test's float64 reported once (issue #16, round-33 audit HB#16; helper h193). Whole run
(runplan.whole_run_passes, right after folds24.fold_file_notes), one file at a time.

NPU930 ("float64 on the accelerator") is one finding per expression, so a test whose float64 work
lies in two places is reported twice, though its user ports the test's float64 once:

    def _dtype_converting_h2d_nonblocking():
        torch.zeros(4, dtype=torch.float64).pin_memory().to("cuda", ...)     # NPU930 at 203
    def _dtype_converting_d2h_via_copy_():
        torch.zeros(4).copy_(torch.zeros(4, dtype=torch.float64, device="cuda"))  # NPU930 at 252
    def test_genuinely_async_transfers_pass(monkeypatch):
        for fn in (..., _dtype_converting_h2d_nonblocking, _dtype_converting_d2h_via_copy_, ...):
            fn()

In a test module (`test_*.py` / `*_test.py`), each open report-only NPU930 finding is given the
test it belongs to: the module-level `test_*` function whose body holds every place of it, or, for
a place in a module-level helper, the one test whose body holds every reference to the helper's
name in the file (one caller, read one step: no reference elsewhere, not at module level, not in
another helper or test). Findings of one test fold into its first (by severity, then line:
folding.absorb lists their lines in its message, "in the same test `test_x`"); the carrier is never
less severe than what it takes. Kept: a test's only float64 finding, a helper referenced by two
tests or from module level, a finding with places in two tests, findings of other files.
"""

from __future__ import annotations

import ast
import dataclasses
import posixpath
from typing import Optional

from . import astcache

CODE = "NPU930"
_RANK = {"error": 0, "warning": 1, "info": 2}
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _open(finding) -> bool:
    from .moot import is_moot, named

    return (finding.code == CODE and not finding.fixable and finding.cell is None
            and not is_moot(finding) and not named(finding))


def _test_module(relpath: str) -> bool:
    name = posixpath.basename(relpath)
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def _span(node: ast.AST) -> tuple[int, int]:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    return first, node.end_lineno or node.lineno


def _owners(tree: ast.Module) -> dict[str, str]:
    """{module-level function name: the test it belongs to} (a test: itself; a helper: the one
    test whose body holds every reference to its name)."""
    functions = {s.name: s for s in tree.body if isinstance(s, _FUNCTIONS)}
    tests = {n: s for n, s in functions.items() if n.startswith("test")}
    owners = {n: n for n in tests}
    spans = {n: _span(s) for n, s in tests.items()}
    references: dict[str, list[int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in functions:
            references.setdefault(node.id, []).append(node.lineno)
    for name in functions:
        if name in tests or not references.get(name):
            continue
        holders = {t for line in references[name] for t, (a, b) in spans.items() if a <= line <= b}
        inside = all(any(a <= line <= b for a, b in spans.values()) for line in references[name])
        if len(holders) == 1 and inside:
            owners[name] = holders.pop()
    return owners


def _test_of(finding, tree: ast.Module, owners: dict) -> Optional[str]:
    spans = [(s.name, _span(s)) for s in tree.body if isinstance(s, _FUNCTIONS) and s.name in owners]
    found = set()
    for line in [finding.line, *(a[0] for a in finding.also)]:
        holder = next((owners[n] for n, (a, b) in spans if a <= line <= b), None)
        if holder is None:
            return None
        found.add(holder)
    return found.pop() if len(found) == 1 else None


def fold_test_fp64(results: list, paths: Optional[dict] = None) -> list:
    """Module's doc: a test's second float64 finding folded into its first."""
    from .folding import absorb
    from .modpaths import result_bytes

    out = list(results)
    for index, result in enumerate(results):
        if not _test_module(result.relpath):
            continue
        candidates = [f for f in result.findings if _open(f)]
        if len(candidates) < 2:
            continue
        data = result_bytes(result, paths or {})
        tree = astcache.parse(data) if data else None
        if tree is None:
            continue
        owners = _owners(tree)
        groups: dict[str, list] = {}
        for f in candidates:
            test = _test_of(f, tree, owners)
            if test is not None:
                groups.setdefault(test, []).append(f)
        replaced, gone = {}, set()
        for test, group in groups.items():
            if len(group) < 2:
                continue
            group.sort(key=lambda f: (_RANK.get(f.severity, 3), f.line, f.column))
            target, folded = group[0], group[1:]
            replaced[id(target)] = absorb(target, folded, name_them=f"in the same test `{test}`")
            gone |= {id(f) for f in folded}
        if replaced:
            out[index] = dataclasses.replace(result, findings=[replaced.get(id(f), f) for f in result.findings
                                                               if id(f) not in gone])
    return out
