"""Single shapes left from the round-22 audits (issue #16): tests, labels, backend parameters, severity.

Per file (run.migrate_file), on report-only findings; each shape decides on the exact construct:

- **A skip made through a module-local helper** (round 22 BI#1, testscopes.py calls
  `helper_skip`): a test whose statement is a bare call of a module-level function of the same
  file (`_skip_unless_rope_quant()`), whose body is imports, assignments and docstrings followed
  by `if <condition>: pytest.skip(...)`, the condition certainly true on an NPU host
  (`not current_platform.is_device_capability_family(100)`). The test is skipped there exactly as
  if the `if` were written in it, so testscopes.py makes the same scope (its reason names the
  helper: "`not ...` in `_skip_unless_rope_quant()`"), from the statement after the call (the
  helper itself runs on an NPU host, to skip), and the helpers only such tests call follow.
  A helper whose skip condition an NPU host may fail (a rewritten `torch.cuda.is_available()`),
  one that returns or branches before the skip, and a call that is not a bare statement keep the
  findings.
- **"nccl" as a registry key** (BI#6, `registry_key`): an NPU990 "nccl" that is the first argument
  of a `register...("nccl", Engine)` call that registers something (a second argument), or the
  left side of `"nccl" in X._registry` (a name or attribute whose last part names a registry). The
  string names an implementation in the project's own table; it reaches no process group, and the
  registered class is reported where it runs NCCL. Lowered with REGISTRY_KEY (a moot.NO_WORK
  phrase: a named scope). A lookup (`Factory.create("nccl")`) selects that implementation and stays.
- **The fallback of `getattr(obj, "device", "cuda")`** (BI#27): the code reads the object's own
  device, which is the NPU on an NPU host; the "cuda" applies only to an object without a `device`
  attribute. Lowered with DEVICE_FALLBACK (moot.AS_WRITTEN: runs as written). A `getattr` of
  another attribute (`getattr(cfg, "place", "cuda")`) stays.
- **"cuda" in the old-torch fallback of a `torch.accelerator` branch** (BI#32): an NPU990 "cuda"
  in the `else:` of an `if` whose test reads `__version__` and whose body calls
  `torch.accelerator` (which answers the NPU on an NPU host). The string is reached only with a
  torch older than `torch.accelerator` (2.6: torch_npu 2.5 and older): true, but only there, so it
  is lowered to information with OLD_TORCH (not a named scope: such a host may exist). An `else:`
  of any other test stays.
- **Severity of certain failures** (BK#17, BK#31): an NPU304 warning whose function's callers in
  the file pass the literal `"nccl"` (redundant.fold_backend_callers' "with `"nccl"` passed by the
  calls of the function in this file") reaches the process group unchanged: an error
  (`review_folded`, after the fold). An NPU990 "cuda" key of a per-device table (sweep.py's "a key
  of a table of per-device values") whose dict literal is subscripted on the spot
  (`{"cpu": ..., "cuda": ...}[device.type]`) raises KeyError on an NPU host: an error. A table
  read with `.get(...)` (a default) or bound to a name stays a warning.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Callable, Optional

from . import astcache
from .findings import Finding

REGISTRY_KEY = "a registry key naming an implementation, not a backend: "
DEVICE_FALLBACK = "the fallback of a `getattr` of the object's `device`"
OLD_TORCH = "reached only with a torch older than `torch.accelerator`"
FAILS = "a certain failure on an NPU host"
_FOLDED_NCCL = 'with `"nccl"` passed by the calls of the function in this file'
_TABLE_KEY = "a key of a table of per-device values"

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_PLAIN = (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.Expr, ast.Pass)


# ----------------------------------------------------------------------------- skip through a helper
def helper_skip(stmt: ast.stmt, helpers: dict, skipping_if: Callable) -> Optional[tuple[ast.AST, str]]:
    """(the skip condition, the helper's name) when `stmt` is a bare call `helper()` of a
    module-level function (`helpers`: name -> def) that skips on an NPU host (`skipping_if` gives the
    condition of an `if` that certainly skips there) before anything else decides."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name)):
        return None
    helper = helpers.get(stmt.value.func.id)
    if helper is None or not isinstance(helper, _FUNCTIONS):
        return None
    for inner in helper.body:
        condition = skipping_if(inner)
        if condition is not None:
            return condition, helper.name
        if not isinstance(inner, _PLAIN) or (isinstance(inner, ast.Expr) and not isinstance(inner.value, ast.Constant)):
            return None  # (a call, a branch or a return may decide first)
    return None


# ----------------------------------------------------------------------------- per-file review
def _literal(tree: ast.Module, finding: Finding) -> Optional[ast.Constant]:
    return astcache.strings_at(tree).get((finding.line, finding.column))


def _last(node: ast.AST) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def registry_key(node: ast.Constant, parents: dict) -> Optional[str]:
    """The construct when the string is a registry key (module doc), else None."""
    parent = parents.get(id(node))
    if (isinstance(parent, ast.Call) and parent.args and parent.args[0] is node
            and _last(parent.func).lower().startswith("register")
            and (len(parent.args) > 1 or parent.keywords)):
        return f"`{_last(parent.func)}({node.value!r}, ...)`".replace("'", '"')
    if (isinstance(parent, ast.Compare) and parent.left is node and len(parent.ops) == 1
            and isinstance(parent.ops[0], (ast.In, ast.NotIn))
            and isinstance(parent.comparators[0], (ast.Name, ast.Attribute))
            and "registry" in _last(parent.comparators[0]).lower()):
        return f'`"{node.value}" in {astcache.dotted(parent.comparators[0])}`'
    return None


def _getattr_device(node: ast.Constant, parents: dict) -> bool:
    parent = parents.get(id(node))
    return (isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "getattr"
            and len(parent.args) == 3 and parent.args[2] is node and isinstance(parent.args[1], ast.Constant)
            and parent.args[1].value == "device")


def _reads(node: ast.AST, predicate) -> bool:
    return any(predicate(n) for n in ast.walk(node))


def _old_torch_else(node: ast.Constant, parents: dict) -> Optional[int]:
    """The `if` line when the string lies in the `else:` of a torch-version test whose body asks
    `torch.accelerator`."""
    child, parent = node, parents.get(id(node))
    while parent is not None and not isinstance(parent, _FUNCTIONS + (ast.Module,)):
        if isinstance(parent, ast.If) and any(child is s for s in parent.orelse):
            version = _reads(parent.test, lambda n: isinstance(n, ast.Attribute) and n.attr == "__version__")
            accelerator = any(_reads(s, lambda n: isinstance(n, ast.Attribute)
                                     and astcache.dotted(n) == "torch.accelerator") for s in parent.body)
            return parent.lineno if version and accelerator else None
        child, parent = parent, parents.get(id(parent))
    return None


def _looked_up_on_the_spot(node: ast.Constant, parents: dict) -> bool:
    table = parents.get(id(node))
    if not (isinstance(table, ast.Dict) and any(k is node for k in table.keys)):
        return False
    if any(isinstance(k, ast.Constant) and k.value == "npu" for k in table.keys):
        return False
    subscript = parents.get(id(table))
    return isinstance(subscript, ast.Subscript) and subscript.value is table


def review(findings: list[Finding], text: str) -> list[Finding]:
    """NPU990 "nccl"/"cuda" strings of the shapes of the module doc, before the per-file merge."""
    hits = [f for f in findings if f.code == "NPU990" and not f.fixable and f.cell is None
            and f.severity != "info" and f.source in ('"nccl"', '"cuda"', "'nccl'", "'cuda'")]
    if not hits:
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    parents = astcache.parents(tree)
    out = []
    for finding in findings:
        node = _literal(tree, finding) if any(finding is h for h in hits) else None
        if node is not None and node.value == "nccl":
            construct = registry_key(node, parents)
            if construct is not None:
                finding = dataclasses.replace(finding, severity="info", message=(
                    f"{finding.message} ({REGISTRY_KEY}{construct}: the string names an entry of the project's "
                    "own table and reaches no process group; the registered class is reported where it runs NCCL)"))
        elif node is not None and node.value == "cuda":
            if _getattr_device(node, parents):
                finding = dataclasses.replace(finding, severity="info", message=(
                    f"{finding.message} ({DEVICE_FALLBACK}, used only where the object has none: the code reads the "
                    "object's own device, the NPU on an NPU host)"))
            elif _TABLE_KEY in finding.message and _looked_up_on_the_spot(node, parents):
                finding = dataclasses.replace(finding, severity="error", message=(
                    f"{finding.message} ({FAILS}: the table has no \"npu\" key and is looked up on the spot, "
                    "a KeyError there)"))
            else:
                line = _old_torch_else(node, parents)
                if line is not None:
                    finding = dataclasses.replace(finding, severity="info", message=(
                        f"{finding.message} ({OLD_TORCH} (2.6; torch_npu 2.5 and older): the `else:` of the torch "
                        f"version test at line {line}, whose branch asks `torch.accelerator`, which answers the NPU "
                        "on an NPU host; review it only for such an old torch)"))
        out.append(finding)
    return out


_ALSO = re.compile(r" \(also at [^()]*\)$")  # (findings.merge_per_file's suffix)


def review_folded(findings: list[Finding]) -> list[Finding]:
    """NPU304 warnings whose callers in the file pass a literal "nccl" (module doc): errors."""
    out = []
    for finding in findings:
        if (finding.code == "NPU304" and not finding.fixable and finding.severity == "warning"
                and _FOLDED_NCCL in finding.message and FAILS not in finding.message):
            message = _ALSO.sub("", finding.message)
            also = finding.message[len(message):]
            finding = dataclasses.replace(finding, severity="error", message=(
                f"{message} ({FAILS}: the literal reaches the process group unchanged, and torch_npu "
                f"has no NCCL backend){also}"))
        out.append(finding)
    return out
