"""A Triton kernel module loaded only after its importer's own unguarded `import triton` (issue #16,
round-33 audit HB#7; helper h193). Whole run (runplan.whole_run_passes, right after firstfail22.py).

firstfail22.fold_covered_helpers folds a CUDA-only helper's NPU911 error into the finding of an
importer that fails first on the same package. The same shape with Triton (NPU910):

    # ep/permute.py                                   # NPU910 error at 8 (and its kernel at 288)
    import triton                                     # line 8: fails first where Triton is missing
    from .kernels import generate_permute_indices     # line 15

    # ep/kernels.py                                   # NPU910 error at 10, 11, 18
    import triton
    @triton.jit
    def _fill_indices_kernel(...): ...

Where the module's NPU910 error says its `triton` import is unguarded at module level (one of its
lines a top-level `import triton` / `from triton ...`), and every import of the module in the run
either comes after a top-level import of `triton` in the importer (before the site's line; anywhere
in the module for a site inside a function: firstfail22.site_covered) or lies in a test scope an
NPU host never runs (a module-level skip before it: testscopes.cuda_only_test_scopes), an NPU host
never loads the module without first failing at the importer's own import, and porting the
importer's Triton code is porting the module's (one root cause). The module's finding folds into
the importer's open NPU910 error on that import (an error first, then by path), whose message
names the module, its lines and the count of other importers. Nothing is dropped silently.

Kept: a module with no importer (an entry point), one run by its path or named in a string of
another file (firstfail22.RunIndex.dynamic), one with an importer that loads it before its own
`import triton`, under `try`, or without importing Triton at all (the module is then the first to
fail), one whose importer holds no open NPU910 error on that import, and any finding not an
error.
"""

from __future__ import annotations

import posixpath
from typing import Optional

from . import firstfail22

CODE = "NPU910"
UNGUARDED = "imported unguarded at module level"
COVERED = ("also covers {what}, which every import in the run loads only after the importing module's own "
           "unguarded import of `triton` (this module's{count}), which fails first where it is missing: "
           "port it with them")
_MAX_DEPTH = 8
_RANK = {"error": 0, "warning": 1, "info": 2}
_PACKAGES = ("triton",)


def _open_triton_import(finding) -> bool:
    from .moot import is_moot, named

    return (finding.code == CODE and not finding.fixable and finding.cell is None and finding.severity == "error"
            and UNGUARDED in finding.message and not is_moot(finding) and not named(finding))


def _top_triton_lines(tree) -> set:
    from .localcover23 import statement_packages

    return {node.lineno for node in tree.body if statement_packages(node, _PACKAGES)}


def _never_run(run, k: int, line: int, cache: dict) -> bool:
    """The site lies in a test scope an NPU host never runs (a module-level skip before it)."""
    if k not in cache:
        from .testscopes import cuda_only_test_scopes

        data = run.text_of(k)
        try:
            cache[k] = cuda_only_test_scopes(data.decode("utf-8", "replace")) if data else []
        except (SyntaxError, ValueError, RecursionError):
            cache[k] = []
    return any(first < line <= last for first, last, _why in cache[k])


def _carrier(run, i: int, cache: dict) -> Optional[tuple[int, int, int]]:
    """(importer, its finding, count of covering importers) module i's finding folds into."""
    sites = run.sites(i)
    if not sites:
        return None
    covering: dict[int, set] = {}
    for k, line in sites:
        tree = run.tree(k)
        if tree is None:
            return None
        if _never_run(run, k, line, cache):
            continue
        lines = firstfail22.site_covered(tree, line, {"triton"}, _PACKAGES)
        if lines is None:
            return None
        if lines:
            covering.setdefault(k, set()).update(lines)
    best = None
    for k, lines in covering.items():
        for index, f in enumerate(run.results[k].findings):
            if _open_triton_import(f) and set(firstfail22.finding_lines(f)) & lines:
                key = (_RANK.get(f.severity, 3), run.results[k].relpath, index)
                if best is None or key < best[0]:
                    best = (key, k, index)
    if best is None or run.dynamic(i):  # (named in a string, run by its path: last, the costliest)
        return None
    return best[1], best[2], len(covering)


def fold_covered_triton_modules(results: list, paths: Optional[dict] = None) -> list:
    """Module's doc: a Triton module's NPU910 error folded into its only importers' own."""
    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py")
                  and any(_open_triton_import(f) for f in r.findings)]
    if not candidates:
        return results
    run = firstfail22.RunIndex(results, paths or {})
    cache: dict = {}
    carriers: dict[tuple[int, int], tuple[int, int, int]] = {}
    for i in candidates:
        tree = run.tree(i)
        if tree is None or posixpath.basename(results[i].relpath) == "__init__.py":
            continue
        tops = _top_triton_lines(tree)
        for k, f in enumerate(results[i].findings):
            if not _open_triton_import(f) or not set(firstfail22.finding_lines(f)) & tops:
                continue
            carrier = _carrier(run, i, cache)
            if carrier is not None:
                carriers[(i, k)] = carrier
            break
    if not carriers:
        return results
    notes: dict[tuple[int, int], list[str]] = {}
    gone: set = set()
    for (i, k), (j, kj, count) in sorted(carriers.items(), key=lambda e: results[e[0][0]].relpath):
        root, seen = (j, kj), {(i, k)}
        while root in carriers and root not in seen and len(seen) <= _MAX_DEPTH:
            seen.add(root)
            root = carriers[root][:2]
        if root in seen or root in carriers:
            continue  # (a cycle, or a chain too long: kept)
        f = results[i].findings[k]
        what = f"`{results[i].relpath}` ({firstfail22.what(f)}, {firstfail22.lines_text(firstfail22.finding_lines(f))})"
        others = f", and those of {count - 1} more importer{'s' if count != 2 else ''}" if count > 1 else ""
        notes.setdefault(root, []).append(COVERED.format(what=what, count=others))
        gone.add((i, k))
    return firstfail22.apply_folds(results, notes, gone)
