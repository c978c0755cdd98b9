"""Classes an NPU host never builds: a capability gate in the class itself keeps its methods off it.

Real projects keep Blackwell- and Hopper-only code in classes that refuse to exist elsewhere
(issue #16, round-7 audits of SGLang and vLLM):

- an `__init__` that raises unless a predicate false on an NPU host holds (`if not
  is_blackwell_supported(): raise ValueError("Current platform does not support NVFP4")`): no
  instance exists there, so no instance method runs;
- a selection classmethod or staticmethod (`is_supported`, `can_implement`, `is_available`: the
  names are data, rules/scopes.toml [capability] gate_methods) whose first decision returns False,
  or a falsy tuple `(False, reason)`, on such a predicate (`if not current_platform.
  is_device_capability_family(100): return False, "requires sm_10x"`): the project's kernel
  framework builds only the classes whose check answers true.

A flag of such a class helps the same way: `if self.use_trtllm:` where every assignment of the
attribute in the file is `self.use_trtllm = <false on an NPU host>` (in the class itself).

`gated_methods(tree, lines, truth, segment)` gives the instance methods of such classes (and the
rest of a raising `__init__`) as blocks in testscopes.untaken_branches' shape; the findings inside
become info with the usual "in a branch an NPU host does not take" reason, naming the gate (a
named skipped scope, moot.py). Classmethods and staticmethods are left alone (they run without an
instance), as is a class that another class of the same file derives from (a subclass may build
without the gate). Nothing here changes what is rewritten.
"""

from __future__ import annotations

import ast
import copy
import functools

from . import astcache, catalogue

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@functools.lru_cache(maxsize=None)
def gate_methods() -> frozenset:
    """rules/scopes.toml [capability] gate_methods: the names of selection checks."""
    table = catalogue.read_table("scopes.toml").get("capability", {})
    return frozenset(table.get("gate_methods", ()))


def _decorators(function: ast.AST) -> set[str]:
    out = set()
    for d in function.decorator_list:
        node = d.func if isinstance(d, ast.Call) else d
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
    return out


def docless_body(function: ast.AST) -> list:
    """A function's statements after its docstring."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:]
    return body


def _returns(stmt: ast.stmt) -> bool:
    """Whether a statement may return from the function it is in (nested functions aside)."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            return True
        if isinstance(node, (*_FUNCTIONS, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


def _falsy(node: ast.AST | None, truth) -> bool:
    """`False`, `None`, `0`, a value false on an NPU host, or a tuple whose first item is one."""
    if node is None:
        return False
    if isinstance(node, ast.Tuple) and node.elts:
        return _falsy(node.elts[0], truth)
    if isinstance(node, ast.Constant):
        return node.value in (False, None, 0) and not isinstance(node.value, str)
    return truth(node) is False


def _raising_gate(init: ast.AST, truth) -> ast.stmt | None:
    """The `if <true on an NPU host>: raise ...` of `__init__` that runs before any return, or None."""
    for stmt in docless_body(init):
        if isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], ast.Raise) \
                and not any(_returns(s) for s in stmt.body) and truth(stmt.test) is True:
            return stmt
        if _returns(stmt):
            return None
    return None


def _false_gate(check: ast.AST, truth) -> ast.stmt | None:
    """The decision of a selection check that returns a falsy value on an NPU host: `if <true
    there>: return False[, reason]` before any other return, the `if`s an NPU host never takes
    (`if current_platform.is_xpu(): return True, None`) passed over; or, after such passed-over
    `if`s, a final `return False, reason`; or a check that is one `return <a conjunction false
    there>` (`return p.is_cuda() and p.is_device_capability_family(100)`: "supports only
    Blackwell"). (A check that is one `return <false there>` of another shape is left alone: a
    class may call it as a run-time test.)"""
    passed = False
    for stmt in docless_body(check):
        if isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], ast.Return) \
                and truth(stmt.test) is True:
            inner = [s for s in stmt.body[:-1] if _returns(s)]
            return stmt if not inner and _falsy(stmt.body[-1].value, truth) else None
        if isinstance(stmt, ast.If) and not stmt.orelse and truth(stmt.test) is False:
            passed = True  # (never taken on an NPU host)
            continue
        if isinstance(stmt, ast.Return) and stmt.value is not None and _falsy(stmt.value, truth) and (
                passed or (isinstance(stmt.value, ast.BoolOp) and isinstance(stmt.value.op, ast.And))):
            return stmt
        if _returns(stmt):
            return None
    return None


def _called_inside(cls: ast.ClassDef, check: ast.AST) -> bool:
    """Whether the class's other methods ask the check themselves (`if self.is_supported():`): then
    it is a run-time test inside a class that is built anyway, not the framework's selection."""
    for method in cls.body:
        if method is check or not isinstance(method, _FUNCTIONS):
            continue
        for node in ast.walk(method):
            if isinstance(node, ast.Attribute) and node.attr == check.name:
                return True
    return False


def _derived(tree: ast.Module) -> set[str]:
    """Names of the file's classes that another class of the file derives from."""
    out = set()
    for node in astcache.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                if isinstance(base, ast.Name):
                    out.add(base.id)
                elif isinstance(base, ast.Attribute):
                    out.add(base.attr)
    return out


def _classes(tree: ast.Module, interest: set | None) -> list[ast.ClassDef]:
    """The file's classes, outer ones first (as `ast.walk` gives them), found through statements
    only; with `interest` (lines), only those holding one of them."""
    found = [node for node in astcache.walk_statements(tree) if isinstance(node, ast.ClassDef)]
    if interest is not None:
        found = [c for c in found if any(c.lineno <= line <= (c.end_lineno or c.lineno) for line in interest)]
    return sorted(found, key=lambda c: (c.col_offset, c.lineno))


def gated_methods(tree: ast.Module, lines: list, truth, segment,
                  interest: set | None = None) -> list[tuple[int, int, str, bool]]:
    """(first line, last line, the reason, False) of the code of classes an NPU host never builds;
    with `interest` (the lines of reported findings), only of the classes holding one of them
    (the others' blocks would lower nothing: a cold run of the torch tree spent a tenth of its
    time on them)."""
    out: list[tuple[int, int, str, bool]] = []
    derived = None
    classes = _classes(tree, interest)
    if not classes:
        return out
    by_name = None  # (the file's classes by name, for _inherited_gate: built once, on first need)
    for cls in classes:
        methods = [s for s in cls.body if isinstance(s, _FUNCTIONS)]
        gate = why = None
        init = next((m for m in methods if m.name == "__init__"), None)
        if init is not None:
            gate = _raising_gate(init, truth)
            if gate is not None:
                why = (f"`{cls.name}.__init__` raises on an NPU host (`{segment(lines, gate.test)}`): "
                       f"no instance exists there")
        if gate is None:
            for check in methods:
                if check.name in gate_methods() and _decorators(check) & {"classmethod", "staticmethod"} \
                        and not _called_inside(cls, check):
                    found = _false_gate(check, truth)
                    if found is not None:
                        shown = segment(lines, found.test if isinstance(found, ast.If) else found.value)
                        gate, why = check, (f"`{cls.name}.{check.name}` answers False on an NPU host "
                                            f"(`{shown}`): the class is never selected there")
                        break
        if gate is None and any(isinstance(b, ast.Name) for b in cls.bases):
            if by_name is None:
                by_name = {c.name: c for c in astcache.walk_statements(tree) if isinstance(c, ast.ClassDef)}
            gate, why = _inherited_gate(by_name, cls, truth, lines, segment)
        if gate is None:
            continue
        if derived is None:
            derived = _derived(tree)
        if cls.name in derived:
            continue  # (a subclass of the file may build without the gate)
        from_init = init is not None and isinstance(gate, ast.If) and gate in init.body
        if from_init:
            rest = init.body[init.body.index(gate) + 1:]
            if rest:
                out.append((rest[0].lineno, rest[-1].end_lineno or rest[-1].lineno, why, False))
        for method in methods:
            if method is gate or (from_init and method is init) or _decorators(method) & {"classmethod", "staticmethod"}:
                continue
            first = min([method.lineno, *(d.lineno for d in method.decorator_list)])
            out.append((first, method.end_lineno or method.lineno, why, False))
    out += _false_attribute_branches(tree, classes, lines, truth, segment,
                                     (lambda: derived) if derived is not None else (lambda: _derived(tree)))
    return out


def _own_gate(cls: ast.ClassDef, truth) -> tuple[ast.AST, ast.stmt] | None:
    """(the check, its decision) of a class's own selection check false on an NPU host, or None."""
    for check in cls.body:
        if isinstance(check, _FUNCTIONS) and check.name in gate_methods() \
                and _decorators(check) & {"classmethod", "staticmethod"} and not _called_inside(cls, check):
            found = _false_gate(check, truth)
            if found is not None:
                return check, found
    return None


def _inherited_gate(classes: dict, cls: ast.ClassDef, truth, lines, segment, seen=None):
    """(the check, the reason) when a base class of the same file (by name) has a selection check
    false on an NPU host (its own or inherited) that `cls` does not define again: the framework
    asks the subclass the base's check (`TrtLlmNvFp4ExpertsModular(TrtLlmNvFp4ExpertsBase, ...)`,
    the base's `_supports_current_device()` requiring `p.is_cuda()`); (None, None) otherwise."""
    seen = set() if seen is None else seen
    if cls.name in seen:
        return None, None
    seen.add(cls.name)
    own = {m.name for m in cls.body if isinstance(m, _FUNCTIONS)}
    for base in cls.bases:
        parent = classes.get(base.id) if isinstance(base, ast.Name) else None
        if parent is None or parent is cls:
            continue
        found = _own_gate(parent, truth)
        if found is not None and found[0].name not in own and not _called_inside(cls, found[0]):
            check, decision = found
            shown = segment(lines, decision.test if isinstance(decision, ast.If) else decision.value)
            return check, (f"`{cls.name}` inherits `{parent.name}.{check.name}`, which answers False on "
                           f"an NPU host (`{shown}`): the class is never selected there")
        if found is None:
            check, why = _inherited_gate(classes, parent, truth, lines, segment, seen)
            if check is not None and check.name not in own:
                return check, why.replace(f"`{parent.name}` inherits", f"`{cls.name}` inherits", 1)
    return None, None


class _Substitute(ast.NodeTransformer):
    """`self.<name>` as an NPU host sees it: False (names: the class's flags false there)."""

    def __init__(self, names: set):
        self.names = names

    def visit_Attribute(self, node: ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in self.names:
            return ast.copy_location(ast.Constant(False), node)
        return self.generic_visit(node)


def _tested_flags(classes: list) -> set[str]:
    """The names of `self.<name>` read in the tests of `if` statements of the classes' methods."""
    out = set()
    for cls in classes:
        for method in cls.body:
            if isinstance(method, _FUNCTIONS):
                for node in astcache.walk_statements(method):
                    if isinstance(node, ast.If):
                        out.update(n.attr for n in ast.walk(node.test) if isinstance(n, ast.Attribute)
                                   and isinstance(n.value, ast.Name) and n.value.id == "self")
    return out


def self_assignments(tree: ast.Module, names: set | None = None) -> tuple[dict[int, dict[str, list]], set[str]]:
    """({id(class): {attribute: [values]}}, names assigned elsewhere) of the file's `self.<name> =
    <value>` assignments in methods (a nested class's counted in the outermost), for the
    attributes in `names` (all when None); "elsewhere": `obj.name = ...`, a tuple target, an
    augmented assignment; "*" in it when the file calls `setattr`."""
    assigned_elsewhere: set[str] = set()
    per_class: dict[int, dict[str, list]] = {}
    parents = astcache.parents(tree)

    def owner(node: ast.AST) -> ast.ClassDef | None:
        # the outermost class with a method holding the node
        found, current = None, node
        while (parent := parents.get(id(current))) is not None:
            if isinstance(current, _FUNCTIONS) and isinstance(parent, ast.ClassDef):
                found = parent
            current = parent
        return found

    for node in astcache.nodes(tree, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Call)):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for element in (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]):
                if not isinstance(element, ast.Attribute) or (names is not None and element.attr not in names):
                    continue
                cls = owner(node)
                if (isinstance(node, ast.Assign) and len(targets) == 1 and element is target and cls is not None
                        and isinstance(element.value, ast.Name) and element.value.id == "self"):
                    per_class.setdefault(id(cls), {}).setdefault(element.attr, []).append(node.value)
                else:
                    assigned_elsewhere.add(element.attr)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            assigned_elsewhere.add("*")
    return per_class, assigned_elsewhere


def _false_attribute_branches(tree: ast.Module, classes: list, lines: list, truth, segment, derived) -> list:
    """The bodies of `if self.use_x:` in a class (of `classes`) whose every assignment of
    `self.use_x` is a value false on an NPU host (`self.use_x = is_sm100_supported() and has_x`),
    the attribute being assigned nowhere else in the file (`obj.use_x = ...`, `setattr`) and the
    class derived by none of the file's classes (`derived()`: their names)."""
    flags = _tested_flags(classes)
    if not flags:
        return []
    per_class, assigned_elsewhere = self_assignments(tree, flags)
    if "*" in assigned_elsewhere:
        return []
    out = []
    derived_names = None
    for cls in classes:
        attrs = per_class.get(id(cls), {})
        false = {name for name, values in attrs.items() if name not in assigned_elsewhere
                 and all(truth(v) is False for v in values)
                 and any(not isinstance(v, ast.Constant) for v in values)}  # (a constant is no NPU fact)
        if not false:
            continue
        if derived_names is None:
            derived_names = derived()
        if cls.name in derived_names:
            continue
        for method in cls.body:
            if not isinstance(method, _FUNCTIONS):
                continue
            for node in ast.walk(method):
                if not isinstance(node, ast.If) or not node.body:
                    continue
                shown = _Substitute(false).visit(copy.deepcopy(node.test))
                if truth(shown) is False and truth(node.test) is not False:
                    flag = next(n.attr for n in ast.walk(node.test) if isinstance(n, ast.Attribute)
                                and isinstance(n.value, ast.Name) and n.value.id == "self" and n.attr in false)
                    source = next(segment(lines, v) for v in attrs[flag])
                    why = (f"`{segment(lines, node.test)}`: `self.{flag}` is only ever `{source}`, "
                           f"false on an NPU host")
                    out.append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno, why, False))
    return out
