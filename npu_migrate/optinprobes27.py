"""Same-file opt-in shapes of round 27's second sample (audit BW, issue #16, policy P1).

Per file (run.migrate_file, after optin27.review), on report-only errors and warnings; each
place of a merged finding is judged on its own (findings.lower_pieces), and a place that fits is
lowered to info with a message that says who chooses it (P1: code an NPU host reaches only when a
user explicitly chooses it is an info note, never an error, never dropped):

- **A lazy import of an optional package right after its own probe raises** (BW#13,
  `_probed_imports`): an NPU911 place on an import (`from pkg._C import f`) inside a function whose
  block has, before it, `if not probe(): raise ...` (also `if not probe: raise`), where `probe` is
  a module-level function of the same file whose body names the imported top-level package as a
  string (`return _has_module("pkg")`, `find_spec("pkg") is not None`): where the package is not
  installed the user gets the probe's own error and the import never runs; it is reached only
  once the user installs the optional package. A probe of another package, a probe that only
  warns, an import before the probe or in another block: kept.
- **An FP8 dtype a string converter returns for the option that names it** (BW#21,
  `_converter_returns`): an NPU913 place that is the whole value of `return torch.float8_*` as the
  only statement of an `if <parameter> == "<string>":` whose string names an FP8 format (`fp8`,
  `float8`, `e4m3`, `e5m2`, `e8m0`) in a function taking that parameter (an argparse `type=`
  converter, a dtype-name lookup): the dtype is a label for the option; FP8 runs only where the
  user passes that option, in the code that uses the value (its own findings). Any other use of
  the dtype (a cast, a factory, a default) keeps the error.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from typing import Optional

from . import astcache
from .findings import Finding, merge_per_file, split_merged

_FP8_WORD = re.compile(r"(?i)fp8|float8|e4m3|e5m2|e8m0")
_EXITS = (ast.Raise,)


def _open(finding: Finding) -> bool:
    return not finding.fixable and finding.cell is None and finding.severity != "info"


def review(findings: list[Finding], text: str, relpath: str = "") -> list[Finding]:
    """The places of the module doc's shapes lowered to info with who chooses them."""
    imports = "raise" in text and any(_open(f) and f.code == "NPU911" for f in findings)
    converters = "return" in text and "==" in text and any(_open(f) and f.code == "NPU913" for f in findings)
    if not (imports or converters):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    by_code: dict[str, dict[int, str]] = {}
    if imports:
        by_code["NPU911"] = _probed_imports(tree)
    if converters:
        by_code["NPU913"] = _converter_returns(tree)
    out: list[Finding] = []
    changed = False
    for finding in findings:
        table = by_code.get(finding.code) if _open(finding) else None
        lowered = _lower(finding, table) if table else None
        if lowered is None:
            out.append(finding)
        else:
            out.extend(lowered)
            changed = True
    return sorted(out) if changed else findings


def _lower(finding: Finding, table: dict[int, str]) -> Optional[list[Finding]]:
    """The places of the finding with a reason as one info finding (the file's one finding of the
    code, as merge_per_file made it), naming each reason once; the other places stay merged at
    their severity. None when no place has a reason."""
    pieces = split_merged(finding)
    lowered = [p for p in pieces if p.line in table]
    if not lowered:
        return None
    kept = [p for p in pieces if p.line not in table]
    why = "; ".join(dict.fromkeys(table[p.line] for p in lowered))
    first = lowered[0]
    note = replace(first, severity="info", also=tuple((p.line, p.column, p.source) for p in lowered[1:]),
                   message=f"{first.message} ({why})" + _also(lowered[1:]))
    return [note, *(merge_per_file(kept) if kept else [])]


def _also(rest: list[Finding]) -> str:
    if not rest:
        return ""
    lines = [str(p.line) for p in rest]
    return f" (also at line {lines[0]})" if len(lines) == 1 else f" (also at lines {', '.join(lines)})"


# ----------------------------------------------------------------------------- BW#13: probed imports
def _probes(tree: ast.Module) -> dict[str, set[str]]:
    """Module-level functions of the file and the strings their bodies name: name -> strings."""
    out: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = {sub.value for sub in ast.walk(node)
                              if isinstance(sub, ast.Constant) and isinstance(sub.value, str)}
    return out


def _probe_name(test: ast.AST) -> Optional[str]:
    """`probe` of `not probe()` / `not probe`."""
    if not (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)):
        return None
    inner = test.operand
    if isinstance(inner, ast.Call) and not inner.args and not inner.keywords:
        inner = inner.func
    return inner.id if isinstance(inner, ast.Name) else None


def _imported_top(stmt: ast.stmt) -> Optional[str]:
    if isinstance(stmt, ast.ImportFrom) and not stmt.level and stmt.module:
        return stmt.module.split(".")[0]
    if isinstance(stmt, ast.Import) and len(stmt.names) == 1:
        return stmt.names[0].name.split(".")[0]
    return None


def _probed_imports(tree: ast.Module) -> dict[int, str]:
    probes = _probes(tree)
    if not probes:
        return {}
    reasons: dict[int, str] = {}
    for function in astcache.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        checked: dict[str, tuple[str, int]] = {}  # package -> (probe, line) raised on before here
        for stmt in function.body:
            if (isinstance(stmt, ast.If) and not stmt.orelse and stmt.body and isinstance(stmt.body[-1], _EXITS)):
                name = _probe_name(stmt.test)
                for word in probes.get(name or "", ()):
                    if re.fullmatch(r"[A-Za-z_]\w*", word):
                        checked.setdefault(word, (name, stmt.lineno))
                continue
            top = _imported_top(stmt)
            if top is not None and top in checked:
                probe, line = checked[top]
                why = (f"reached on an NPU host only when the optional package `{top}` is installed: "
                       f"`{probe}()` raises first where it is not (line {line})")
                for number in range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1):
                    reasons[number] = why
    return reasons


# ----------------------------------------------------------------------------- BW#21: converters
def _converter_returns(tree: ast.Module) -> dict[int, str]:
    reasons: dict[int, str] = {}
    for function in astcache.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        params = {a.arg for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)}
        for stmt in ast.walk(function):
            if not (isinstance(stmt, ast.If) and len(stmt.body) == 1 and isinstance(stmt.body[0], ast.Return)):
                continue
            test, value = stmt.test, stmt.body[0].value
            if not (isinstance(test, ast.Compare) and len(test.ops) == 1
                    and isinstance(test.ops[0], (ast.Eq, ast.In))):
                continue
            sides = (test.left, test.comparators[0])
            names = [s.id for s in sides if isinstance(s, ast.Name)]
            strings = _strings(test.comparators[0]) if isinstance(test.ops[0], ast.In) else [
                s.value for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)]
            dotted = astcache.dotted(value) if value is not None else None
            if (names and names[0] in params and strings and all(_FP8_WORD.search(w) for w in strings)
                    and dotted and dotted.startswith("torch.float8_")):
                options = " or ".join(repr(w) for w in strings)
                reasons[value.lineno] = (f"reached on an NPU host only when the option {options} is chosen: "
                                         f"`{function.name}` returns this dtype for that string only; FP8 runs "
                                         "where the value is used")
    return reasons


def _strings(node: ast.AST) -> list[str]:
    """The strings of a tuple, list or set display of strings only ([] otherwise)."""
    if not isinstance(node, (ast.Tuple, ast.List, ast.Set)) or not node.elts:
        return []
    out = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return out if len(out) == len(node.elts) else []
