"""A capability check that itself fails on an NPU host: the project's own capability query answers
(None, None) there, and a caller compares or multiplies a part of it (issue #16, round-25 audit
BR#22). Whole run, from runplan.whole_run_passes, after validated.py.

    # utils/common.py (already NPU-aware: the run leaves it as written)
    def get_device_capability(device_id=0):
        major, minor = None, None
        if torch.cuda.is_available() or is_musa():       # false on an NPU host, left as written
            major, minor = torch.cuda.get_device_capability(device_id)
        if torch.xpu.is_available():
            major, minor = None, None
        return major, minor

    # quantization/config.py
    from pkg.utils import get_device_capability
    class Config:
        def _check_scheme_supported(self, min_capability, error=True):
            capability_tuple = get_device_capability()
            if capability_tuple is not None:               # a tuple: true
                assert 0 <= capability_tuple[1] < 10      # NPU931: TypeError on an NPU host
                capability = capability_tuple[0] * 10 + capability_tuple[1]

validated.py already reads such a checker as one that never passes there (the scheme it guards is
never built); what it did not say is that the check raises instead of answering False, so every
caller of the checker fails (a `get_linear_scheme` that checks every scheme it picks).

Read here:

* a query: a module-level function whose first statement binds two or more names to None
  (`major, minor = None, None`, `major = minor = None`), whose last statement returns them as a
  tuple, and whose every other binding of them is another all-None one or lies in the body of an
  `if` whose test an NPU host answers False: built only of other accelerators' availability
  probes (`torch.cuda.is_available()`, `torch.xpu.is_available()`, the project's `is_musa()`,
  `hasattr(torch, "cuda")`, joined by `and`/`or`), on lines the run rewrites nothing (a rewritten
  `torch.cuda.is_available()` is the shim's, true there);
* a use: in another function, a local bound once by a call of the query's name, imported from
  the query's module or a package above it (`from pkg.utils import get_device_capability`, the
  package re-exporting it), and the first statement that reads a part of it (`t[1]`, or a name
  unpacked from the call) in an ordering comparison or in arithmetic; only an enclosing `if t is
  not None:` (true for a tuple) is allowed between the function's body and that statement (no
  other branch, loop or `try`).

The use becomes an NPU931 error (device-properties-field: the capability is missing on an NPU
host) naming the query and its line; nothing else changes. A query whose branches an NPU host may
take, a file that rewrites the probe, a use inside a `try` or another branch are left alone.
"""

from __future__ import annotations

import ast
import re

from . import astcache
from .findings import Finding

# (other accelerators' availability probes: false on an Ascend host, as written)
_OTHER_PROBE = re.compile(r"^(?:torch\.(?:cuda|musa|xpu|hpu|mps)\.is_available"
                          r"|(?:\w+\.)?is_(?:cuda|musa|xpu|hpu|hip|rocm|mps)(?:_available)?)$")
_OTHER_DEVICE = frozenset({"cuda", "musa", "xpu", "hpu", "mps"})
_ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
MESSAGE = ("Device capability `{what}` is None on an NPU host: the project's `{query}()` ({where}) "
           "answers None there (its probes ask only for other accelerators), so `{expr}` raises "
           "TypeError and this capability check fails instead of answering False; test for None "
           "first, or ask the shim's `npu_compat.get_device_capability()`, which answers (0, 0)")


def _false_probe(test: ast.AST) -> bool:
    """Whether `test` is built only of other accelerators' availability probes (false there)."""
    if isinstance(test, ast.BoolOp):
        return all(_false_probe(v) for v in test.values)
    if not isinstance(test, ast.Call):
        return False
    name = astcache.dotted(test.func)
    if name == "hasattr" and len(test.args) == 2 and isinstance(test.args[1], ast.Constant):
        return test.args[1].value in _OTHER_DEVICE
    return not test.args and not test.keywords and bool(_OTHER_PROBE.match(name or ""))


def _none_names(stmt: ast.stmt) -> list[str] | None:
    """The names `a, b = None, None` / `a = b = None` binds to None, else None."""
    if not isinstance(stmt, ast.Assign):
        return None
    names = []
    for target in stmt.targets:
        elts = target.elts if isinstance(target, ast.Tuple) else [target]
        if not all(isinstance(e, ast.Name) for e in elts):
            return None
        names += [e.id for e in elts]
    value = stmt.value
    values = value.elts if isinstance(value, ast.Tuple) else [value]
    if not all(isinstance(v, ast.Constant) and v.value is None for v in values):
        return None
    return names


def _bound_names(node: ast.AST) -> set[str]:
    out = set()
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
        node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)) else []
    for target in targets:
        for n in ast.walk(target):
            if isinstance(n, ast.Name):
                out.add(n.id)
    return out


def none_query(function: ast.AST, rewritten: set[int]) -> bool:
    """Whether the module-level `function` answers a tuple of Nones on an NPU host (docstring)."""
    body = [s for s in function.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) < 2:
        return False
    names = _none_names(body[0])
    last = body[-1]
    if not names or len(names) < 2 or not (isinstance(last, ast.Return) and isinstance(last.value, ast.Tuple)
                                           and [getattr(e, "id", None) for e in last.value.elts] == names):
        return False
    wanted = set(names)
    parents = {id(child): node for node in ast.walk(function) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(function):
        if node is body[0] or isinstance(node, (ast.Global, ast.Nonlocal)):
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                return False
            continue
        if not (_bound_names(node) & wanted) and not (isinstance(node, ast.NamedExpr)
                                                       and node.target.id in wanted):
            continue
        if isinstance(node, ast.Assign) and _none_names(node) is not None:
            continue
        # (another binding: only in the body of an `if` false there, on lines left as written)
        child, holder, ok = node, parents.get(id(node)), False
        while holder is not None and holder is not function:
            if isinstance(holder, ast.If) and child in holder.body and _false_probe(holder.test) and not any(
                    line in rewritten for line in range(holder.test.lineno, (holder.test.end_lineno or 0) + 1)):
                ok = True
                break
            child, holder = holder, parents.get(id(holder))
        if not ok:
            return False
    return True


def _queries(results, texts) -> dict[str, list[tuple[int, str, int]]]:
    """{function name: [(result index, module stem, line)]} of the run's None-answering queries."""
    out: dict[str, list[tuple[int, str, int]]] = {}
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py"):
            continue
        data = texts(i) or b""
        if b"None, None" not in data and b"= None\n" not in data:
            continue
        if b"is_available" not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        rewritten = {f.line for f in result.findings if f.fixable}
        for node in tree.body:
            if isinstance(node, _DEFS) and not node.name.startswith("_") and none_query(node, rewritten):
                stem = result.relpath[:-3]
                if stem.endswith("/__init__"):
                    stem = stem[: -len("/__init__")]
                out.setdefault(node.name, []).append((i, stem, node.lineno))
    return out


def _imported_from(tree: ast.Module, name: str) -> list[str]:
    """The dotted modules `from M import name` (module level, no alias) names in `tree`."""
    return [stmt.module for stmt in tree.body if isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level
            and any(a.name == name and a.asname is None for a in stmt.names)]


def _matches(module: str, stem: str) -> bool:
    """Whether `from module import` may reach the query in the file `stem` (the module itself, or
    a package above it that re-exports it)."""
    path = module.replace(".", "/")
    return stem == path or stem.endswith("/" + path) or stem.startswith(path + "/") or ("/" + path + "/") in stem


def _part_read(node: ast.AST, local: str, unpacked: set[str]) -> ast.AST | None:
    """The operand of an ordering comparison or of arithmetic that is a part of the capability."""
    def part(n: ast.AST) -> bool:
        return (isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == local
                and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, int)) or (
            isinstance(n, ast.Name) and n.id in unpacked)

    for n in _always(node):
        if isinstance(n, ast.Compare) and any(isinstance(op, _ORDERING) for op in n.ops):
            found = next((o for o in [n.left, *n.comparators] if part(o)), None)
            if found is not None:
                return n
        if isinstance(n, ast.BinOp) and isinstance(n.op, _ARITHMETIC) and (part(n.left) or part(n.right)):
            return n
    return None


def _always(node: ast.AST):
    """The nodes of `node` evaluated whenever it is: not the arms of a conditional expression, the
    operands of `and`/`or` after the first, comprehensions or lambdas (`-1 if t[0] is None else
    t[0] * 10` asks first)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, (ast.Lambda, *_DEFS, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        if isinstance(n, ast.IfExp):
            stack.append(n.test)
        elif isinstance(n, ast.BoolOp):
            stack.append(n.values[0])
        else:
            stack.extend(ast.iter_child_nodes(n))


def _not_none_test(test: ast.AST, local: str) -> bool:
    return (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot)
            and isinstance(test.left, ast.Name) and test.left.id == local
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None)


def _first_use(body: list, local: str, unpacked: set[str], after: int):
    """(statement, expression) of the first statement past line `after` reading a part, through
    `if local is not None:` bodies only; None where another construct comes first."""
    for stmt in body:
        if stmt.lineno <= after:
            continue
        if isinstance(stmt, ast.If) and _not_none_test(stmt.test, local):
            found = _first_use(stmt.body, local, unpacked, after)
            if found is not None:
                return found
            continue
        mentions = any(isinstance(n, ast.Name) and (n.id == local or n.id in unpacked) for n in ast.walk(stmt))
        if not mentions:
            if isinstance(stmt, (ast.Return, ast.Raise)):
                return None
            continue
        if isinstance(stmt, (ast.If, ast.While, ast.For, ast.AsyncFor, ast.Try, ast.With, ast.AsyncWith, *_DEFS,
                             ast.ClassDef)):
            return None
        expr = _part_read(stmt, local, unpacked)
        return (stmt, expr) if expr is not None else None
    return None


def _uses(tree: ast.Module, name: str):
    """(function, call statement, local, unpacked names) of each `t = name()` / `a, b = name()`."""
    for function in ast.walk(tree):
        if not isinstance(function, _DEFS):
            continue
        for stmt in function.body:
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Call)
                    and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == name):
                continue
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                yield function, stmt, target.id, set()
            elif isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts):
                yield function, stmt, "", {e.id for e in target.elts}


def _once(function: ast.AST, names: set[str]) -> bool:
    """Whether each of `names` is bound once in `function`."""
    counts: dict[str, int] = {}
    for node in ast.walk(function):
        for n in _bound_names(node) & names:
            counts[n] = counts.get(n, 0) + 1
    return all(counts.get(n, 0) == 1 for n in names)


def review(results: list, paths: dict) -> list:
    """The results, with an NPU931 error at each capability check that fails on an NPU host
    because the project's query answers None there (this module's docstring)."""
    import dataclasses

    from .modpaths import RunTexts

    texts = RunTexts(results, paths)
    queries = _queries(results, texts)
    if not queries:
        return results
    out = list(results)
    words = {name: re.compile(rb"\b" + name.encode() + rb"\(") for name in queries}
    stems = {r.relpath[:-3].removesuffix("/__init__"): i for i, r in enumerate(results) if r.relpath.endswith(".py")}
    defines: dict[int, bool] = {}

    def shadows(module: str, name: str, query: int) -> bool:
        """Whether the imported module itself (a package above the query) defines `name` again."""
        path = module.replace(".", "/")
        k = next((i for stem, i in stems.items() if stem == path or stem.endswith("/" + path)), None)
        if k is None or k == query:
            return False
        if k not in defines:
            tree = astcache.parse(texts(k) or b"")
            defines[k] = tree is None or any(isinstance(n, (*_DEFS, ast.ClassDef)) and n.name == name
                                             or isinstance(n, ast.Assign) and any(
                                                 isinstance(t, ast.Name) and t.id == name for t in n.targets)
                                             for n in tree.body)
        return defines[k]

    for j, result in enumerate(results):
        if not result.relpath.endswith(".py"):
            continue
        data = texts(j) or b""
        wanted = [n for n in queries if n.encode() in data and words[n].search(data)]
        if not wanted:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        added = []
        for name in wanted:
            if any(isinstance(n, _DEFS) and n.name == name for n in tree.body):
                continue
            modules = _imported_from(tree, name)
            query = next(((i, stem, line) for i, stem, line in queries[name]
                          if i != j and any(_matches(m, stem) and not shadows(m, name, i) for m in modules)), None)
            if query is None:
                continue
            for function, stmt, local, unpacked in _uses(tree, name):
                if not _once(function, {local} | unpacked - {""}):
                    continue
                found = _first_use(function.body, local, unpacked, stmt.lineno)
                if found is None:
                    continue
                use, expr = found
                if any(f.line == use.lineno and f.code == "NPU931" for f in result.findings):
                    continue
                what = local or ", ".join(sorted(unpacked))
                message = MESSAGE.format(what=what, query=name, where=f"{results[query[0]].relpath}:{query[2]}",
                                         expr=ast.unparse(expr))
                added.append(Finding(path=result.relpath, line=use.lineno, column=use.col_offset + 1, code="NPU931",
                                     message=message, fixable=False, source=ast.unparse(expr),
                                     severity="error"))
        if added:
            out[j] = dataclasses.replace(result, findings=sorted([*result.findings, *added],
                                                                 key=lambda f: (f.line, f.column, f.code)))
    return out
