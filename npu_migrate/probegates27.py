"""FP8 code built only past a same-file probe of a package an NPU host never has (issue #16,
round 27's audit BW#7). Per file, from run.py after optinprobes27.py.

    flashlib_comm = None
    if find_spec("flashlib"):                 # a package with no NPU build (sweep.toml
        import flashlib.comm as flashlib_comm   #  [availability] never_on_npu)

    class FusedQuantPattern(BasePattern):
        def __init__(self, eps):
            self.quant_dtype = torch.float8_e4m3fn     # NPU913: lowered to info (below)

    class FusionPass:
        def __init__(self, config):
            if flashlib_comm is None:
                logger.warning("flashlib not installed, skipping the pass")
                return
            self.register_patterns()

        def register_patterns(self):
            FusedQuantPattern(1e-5).register(self.patterns)

A **probed name** is a module-level name bound to None at module level and rebound only inside a
module-level `if` whose test asks `find_spec("<pkg>")` of such a package. A **gate** is a
top-level `if <name> is None:` (or `if not <name>:`) of a function's body whose body ends in
`return` or `raise` (no `else`): the function's statements after it run only where the package is
installed. What runs only there, in the same file: those statements; a method every reference of
which (`.m`, `m`) lies in such code; a module-level class every reference of which (`C(...)`, a base,
an annotation) lies in such code; to a fixed point. An NPU913 place inside it is lowered to info
(policy P3: a public class nothing in the file reaches on an NPU host is still API another module
may build): the message names the class or method, the gate, and the probe. A class referenced
anywhere else in the file (a subclass, a module-level table), code before the gate, a probe of a
package an NPU host may have (`triton`), a gate that only logs: kept as they are.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import replace
from typing import Optional

from . import astcache, catalogue
from .findings import Finding, lower_pieces
from .folding import ALSO as _ALSO
from .libgates23 import tested_name  # (`x` of `x is None` or `not x`)


@functools.lru_cache(maxsize=None)
def _never_on_npu() -> frozenset:
    return frozenset(catalogue.read_table("sweep.toml").get("availability", {}).get("never_on_npu", ()))


def _open(finding: Finding) -> bool:
    return not finding.fixable and finding.cell is None and finding.severity != "info"


def review(findings: list[Finding], text: str, relpath: str = "") -> list[Finding]:
    """NPU913 places in code the file runs only past a probe gate, lowered to info (module doc)."""
    if "find_spec" not in text or not any(_open(f) and f.code == "NPU913" for f in findings):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    reasons = _reasons(tree)
    if not reasons:
        return findings
    out: list[Finding] = []
    changed = False
    for finding in findings:
        places = [finding.line, *(line for line, _c, _s in finding.also)]
        if not (_open(finding) and finding.code == "NPU913" and any(p in reasons for p in places)):
            out.append(finding)
            continue
        changed = True
        if all(p in reasons for p in places) and len({reasons[p][1] for p in places}) == 1:
            # (one construct: one note naming the classes and methods it lies in)
            named = list(dict.fromkeys(f"`{reasons[p][0]}` (line {p})" for p in places if reasons[p][0]))
            why = reasons[finding.line][1]
            if named:
                why = f"in {', '.join(named)}, {why}"
            also = _ALSO.search(finding.message)
            base = finding.message[:also.start()] if also else finding.message
            out.append(replace(finding, severity="info", message=f"{base} ({why})" + (also.group(0) if also else "")))
            continue
        out.extend(lower_pieces(finding, lambda line: (
            f"in `{reasons[line][0]}`, {reasons[line][1]}" if reasons[line][0] else reasons[line][1])
            if line in reasons else None) or [finding])
    return sorted(out) if changed else findings


def _probe_package(test: ast.AST) -> Optional[str]:
    for call in ast.walk(test):
        if (isinstance(call, ast.Call) and (astcache.dotted(call.func) or "").rsplit(".", 1)[-1] == "find_spec"
                and call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)):
            top = call.args[0].value.split(".")[0]
            if top in _never_on_npu():
                return top
    return None


def _assigned(nodes) -> set[str]:
    names = set()
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign):
                names.update(t.id for t in sub.targets if isinstance(t, ast.Name))
            elif isinstance(sub, (ast.AnnAssign, ast.AugAssign)) and isinstance(sub.target, ast.Name):
                names.add(sub.target.id)
            elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name.split(".")[0]) for a in sub.names)
    return names


def _probed_names(tree: ast.Module) -> dict[str, tuple[str, int]]:
    """name -> (package, line of the probe)."""
    nones: set[str] = set()
    probed: dict[str, tuple[str, int]] = {}
    elsewhere: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and isinstance(stmt.value, ast.Constant) \
                and stmt.value.value is None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            nones.update(t.id for t in targets if isinstance(t, ast.Name))
            continue
        package = _probe_package(stmt.test) if isinstance(stmt, ast.If) else None
        if package is not None:
            for name in _assigned(stmt.body):
                probed.setdefault(name, (package, stmt.lineno))
            elsewhere.update(_assigned(stmt.orelse))
        else:
            elsewhere.update(_assigned([stmt]))
    for function in astcache.walk(tree):  # (a `global name` rebinding it in a function: unknown)
        if isinstance(function, ast.Global):
            elsewhere.update(function.names)
    return {n: p for n, p in probed.items() if n in nones and n not in elsewhere}


def _reasons(tree: ast.Module) -> dict[int, tuple[str, str]]:
    probed = _probed_names(tree)
    if not probed:
        return {}
    # (first line, last line, what it is) of the code run only past a gate
    dead: list[tuple[int, int]] = []
    gates: list[str] = []
    owners = {id(node): owner.name for owner in astcache.walk(tree) if isinstance(owner, ast.ClassDef)
              for node in owner.body}
    for function in astcache.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        qualname = f"{owners[id(function)]}.{function.name}" if id(function) in owners else function.name
        for index, stmt in enumerate(function.body[:-1]):
            if not (isinstance(stmt, ast.If) and not stmt.orelse and stmt.body
                    and isinstance(stmt.body[-1], (ast.Return, ast.Raise))):
                continue
            name = tested_name(stmt.test)
            if name in probed:
                after = function.body[index + 1:]
                dead.append((after[0].lineno, after[-1].end_lineno or after[-1].lineno))
                package, probe_line = probed[name]
                gates.append(f"past `if {name} is None: return` (line {stmt.lineno}, in `{qualname}`): "
                             f"`{name}` stays None unless `find_spec(\"{package}\")` (line {probe_line}) finds "
                             f"`{package}`, which has no NPU build")
                break
    if not dead:
        return {}
    # the file's references to each name (loads, attribute names)
    refs: dict[str, list[int]] = {}
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            refs.setdefault(node.id, []).append(node.lineno)
        elif isinstance(node, ast.Attribute):
            refs.setdefault(node.attr, []).append(node.lineno)
    definitions = [(node, owner) for owner in tree.body if isinstance(owner, ast.ClassDef)
                   for node in owner.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    within = lambda line: any(a <= line <= b for a, b in dead)  # noqa: E731
    reached: dict[str, tuple[int, int]] = {}
    changed = True
    while changed:
        changed = False
        for node, owner in definitions:
            key = f"{owner.name}.{node.name}"
            # (a name other classes define too: the references inside its own class, and those
            # outside every class defining it)
            spans = [(o.lineno, o.end_lineno or o.lineno) for n, o in definitions if n.name == node.name]
            own = (owner.lineno, owner.end_lineno or owner.lineno)
            lines = [x for x in refs.get(node.name, [])
                     if own[0] <= x <= own[1] or not any(a <= x <= b for a, b in spans)]
            if key not in reached and lines and not node.name.startswith("__") and all(within(x) for x in lines):
                reached[key] = (node.lineno, node.end_lineno or node.lineno)
                dead.append(reached[key])
                changed = True
        for node in classes:
            lines = refs.get(node.name, [])
            if node.name not in reached and lines and all(within(x) for x in lines):
                reached[node.name] = (node.lineno, node.end_lineno or node.lineno)
                dead.append(reached[node.name])
                changed = True
    gate = gates[0] if len(gates) == 1 else gates[0] + f" (and {len(gates) - 1} more such gates)"
    reasons: dict[int, tuple[str, str]] = {}  # line -> (what, why)
    for first, last in dead[:len(gates)]:
        for line in range(first, last + 1):
            reasons[line] = ("", f"reached only {gate}")
    for what, (first, last) in reached.items():
        for line in range(first, last + 1):
            reasons.setdefault(line, (what, f"used in this file only {gate}; an NPU host reaches this code "
                                            "only through another module"))
    return reasons
