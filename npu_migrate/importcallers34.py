"""CUDA-only modules imported only inside functions an NPU host never calls (issue #16, round 33:
HC#13; helper h185). Whole run, from runplan.whole_run_passes, late (just before unreached25.py:
after the passes that make an opt-in probe's import info, which this pass must not scope:
tests/test_h107.py).

    # ops/cute_dsl/_down_fma.py                     # ops/cute_dsl/down.py
    import cutlass                    # NPU911      class DownGemm:
    import cutlass.cute as cute                         def compile(self, key):
                                                            from ._down_fma import DownFma
    # layers/hyper.py (another module)                      ...
    self._use_down = current_platform.has_device_capability(90)
    ...  if self._use_down: return down_gemm(x)    # DownGemm's only users, under that flag

callgates21.py lowers the findings inside `DownGemm` when every reference of the run to it lies
in code an NPU host does not run; the kernel module's own NPU911 ("imported unguarded at module
level, so the module fails to import where it is not installed") stayed an error, although its
only import sits in that class. Here: an open NPU911 with that clause, in a module (no
`__init__.py`, no test) every import site of which (resolved as importers19 resolves them; none
in a test, the module named in no string of the library) lies inside a module-level function or
class of another module whose references callgates21's `Gates.sites` finds all in code an NPU
host does not run, becomes a named scope (flags16.BRANCH) naming the importer and the gate.
Kept: an import at module level, one inside a unit referenced anywhere that may run (or nowhere:
a public entry point), a test importing the module (its own finding), a module loaded by name.
One Gates for the run, built on the first candidate.
"""

from __future__ import annotations

import re
from typing import Optional

_TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")


def review(results: list, paths: Optional[dict] = None) -> list:
    from .callgates21 import Gates, unit_of
    from .flagcalls19 import Run, lower_result
    from .flags16 import BRANCH
    from .modpaths import module_names
    from .moot import is_open, to_scopes
    from .tritonguards import UNGUARDED, named_in_a_string, run_imports

    def wanted(finding) -> bool:
        return (finding.code == "NPU911" and not finding.fixable and finding.cell is None
                and finding.severity != "info" and UNGUARDED in finding.message and is_open(finding))

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py")
                  and not r.relpath.endswith("__init__.py") and not _TEST_FILE.search(r.relpath)
                  and any(map(wanted, r.findings))]
    if not candidates:
        return results
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    imports, text_of = run_imports(results, python, paths or {})
    outside_tests = [j for j in python if not _TEST_FILE.search(results[j].relpath)]
    gates = None
    out = list(results)
    changed = []
    for i in candidates:
        relpath = results[i].relpath
        names, stem = set(module_names(relpath)), relpath[:-3]
        sites = sorted({(j, line) for j in python if j != i for name, line, relative in imports[j]
                        if (relative and name == stem) or (not relative and name in names)})
        if not sites or any(_TEST_FILE.search(results[j].relpath) for j, _l in sites) \
                or named_in_a_string(results, i, text_of, outside_tests):
            continue
        if gates is None:
            gates = Gates(Run(results, text_of))
        shown = []
        for j, line in sites:
            tree = gates.run.tree(j)
            unit = unit_of(tree, line) if tree is not None else None
            found = gates.sites(j, unit) if unit is not None else None
            if not found:
                break
            shown.append(f"{results[j].relpath}:{line} in `{unit.name}`, reached only from {found[0][1]}")
        else:
            reason = (f"{BRANCH}: imported only in code an NPU host does not run: {'; '.join(shown[:2])}"
                      + (f"; and {len(shown) - 2} more" if len(shown) > 2 else ""))
            lowered = lower_result(out[i], wanted, lambda _line, reason=reason: reason)
            if lowered is not out[i]:
                out[i] = lowered
                changed.append(i)
    for i, result in zip(changed, to_scopes([out[i] for i in changed])):  # (it runs after the
        out[i] = result  # shared pass that turns such reasons into scopes, as firstfail33 does)
    return out
