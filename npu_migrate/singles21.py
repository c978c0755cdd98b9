"""Single cases left from the round-21 audits (issue #16), helpers the whole-run passes call.

- **A package attribute named like its submodule** (round 21 BF#4, for optionalext.py's guarded
  Triton modules): `from pkg import rms_layernorm` where `pkg/__init__.py` binds `rms_layernorm`
  with `from .rms_layernorm import rms_layernorm` only under a Triton-availability `if` (`if
  HAS_TRITON:`). The run's import facts resolve the name to the submodule `pkg/rms_layernorm.py`,
  so optionalext.py read the line as an unguarded import of that module and kept its NPU910 an
  error, where its siblings (the same `try: import triton` / `if HAS_TRITON:` shape, imported by
  other names) were info. What the line imports is the package's attribute: the package runs its
  `__init__` (whose import of the submodule is the gated site already counted), and where Triton
  is missing the attribute is unbound and Python falls back to importing the submodule, which
  guards Triton itself and imports cleanly. So the line is no unguarded import of the module; the
  missing name (a module object where the kernel function was meant) is the importer's own matter,
  which importguards20.py reports at the package's first importer. `reaches_package_attribute`
  answers that for one importer line; an `__init__` that binds the name unconditionally, or binds
  another name, keeps the site as it was.
- **A host-only `.cu` helper of a reported source** (round 21 BG#18, whole run after
  srcfolds17.py): srcfolds17's `name_host_helpers` words the NPU912 info of a `.cu` with no kernel,
  no op registration and no `Tensor`, every exported function of which another reported `.cu`
  calls ("no kernel in the file: ... only host code that the reported source `x.cu` calls";
  xformers' pt_stable_utils.cu, a device-properties cache). Compiled by the same CUDA-gated build
  as that caller (the same "not compiled on an NPU host (setup.py:N builds ..." of buildgated.py),
  it adds no work the caller's finding does not: `fold_host_helpers` folds it into the first named
  caller's open NPU912 finding, which names it ("also `../pt_stable_utils.cu`, host code with no
  kernel that it calls, compiled by the same build"). A helper built by another build (or none
  named), or whose caller's finding is moot or gone, keeps its finding.
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import replace
from typing import Optional


def _gated_binding(init: ast.Module, name: str, is_gate) -> bool:
    """`init` binds `name` by `from .name import ...` (as `name`) only inside a module-level `if`
    whose test `is_gate` accepts (a Triton-availability test)."""
    found = False
    for statement in init.body:
        for node in ast.walk(statement):
            if not (isinstance(node, ast.ImportFrom) and node.level == 1 and node.module == name):
                continue
            if not any((a.asname or a.name) == name for a in node.names):
                continue
            if not (isinstance(statement, ast.If) and is_gate(statement.test)
                    and any(node in ast.walk(s) for s in statement.body)):
                return False
            found = True
    return found


def reaches_package_attribute(importer: Optional[ast.Module], line: int, modules, init: Optional[ast.Module],
                              is_gate) -> bool:
    """Every import statement of `importer` at `line` is `from <package> import <name>` (among other
    names), `<package>.<name>` one of the submodule's dotted names (`modules`), and the package's
    `__init__` (`init`) binds `name` from that submodule only under a gate `is_gate` accepts: the
    line imports the package's attribute, not the submodule."""
    if importer is None or init is None:
        return False
    return any(_attribute_site(importer, line, *module.rsplit(".", 1), init, is_gate)
               for module in modules if "." in module)


def _attribute_site(importer: ast.Module, line: int, package: str, name: str, init: ast.Module,
                    is_gate) -> bool:
    statements = [n for n in ast.walk(importer) if isinstance(n, (ast.Import, ast.ImportFrom))
                  and n.lineno == line]
    if not statements:
        return False
    for node in statements:
        if not (isinstance(node, ast.ImportFrom) and not node.level and node.module == package
                and any(a.name == name for a in node.names)):
            return False
    return _gated_binding(init, name, is_gate)


# ----------------------------------------------------------------------------- host-only .cu helpers
_CALLER = re.compile(r"only host code that the reported sources? `([^`]+)`")
_BUILD = re.compile(r"not compiled on an NPU host \((\S+) builds CUDA sources only when")
HOST_HELPER = "host code with no kernel that it calls, compiled by the same build"


def _open_source(finding) -> bool:
    from .moot import is_moot

    return finding.code == "NPU912" and not finding.fixable and finding.cell is None and not is_moot(finding)


def fold_host_helpers(results: list, paths: Optional[dict] = None) -> list:
    """Module's doc, second shape (a new list)."""
    by_path = {r.relpath: i for i, r in enumerate(results)}
    out = list(results)
    for k, result in enumerate(results):
        if not result.relpath.lower().endswith(".cu"):
            continue
        helper = next((f for f in result.findings if _open_source(f) and f.severity == "info"
                       and _CALLER.search(f.message) and _BUILD.search(f.message)), None)
        if helper is None:
            continue
        first = by_path.get(_CALLER.search(helper.message).group(1))
        if first is None or first == k:
            continue
        target = next((f for f in out[first].findings if _open_source(f)), None)
        build = _BUILD.search(target.message) if target is not None else None
        if build is None or build.group(1) != _BUILD.search(helper.message).group(1):
            continue  # (another build, or none named: the helper may be compiled where the caller is not)
        base = posixpath.relpath(result.relpath, posixpath.dirname(out[first].relpath) or ".")
        note = f"also `{base}`, {HOST_HELPER}"
        out[first] = replace(out[first], findings=[
            replace(f, message=f"{f.message} ({note})") if f is target else f for f in out[first].findings])
        out[k] = replace(out[k], findings=[f for f in out[k].findings if f is not helper])
    return out
