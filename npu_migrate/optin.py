"""Opt-in CUDA backends whose selection on an NPU host ends in the project's own error (issue #16).

SGLang's Mamba selective-state-update dispatch (round 8, read as false) keeps its FlashInfer
backend behind a server option: the class imports `flashinfer.mamba` lazily, in its `__init__`,
and the only place that builds it does so inside

    try:
        _mamba_ssu_backend = backend_cls()      # backend_cls = _BACKEND_REGISTRY.get(requested)
    except ImportError:
        raise ValueError("Mamba backend ... requested but its dependencies are not available ... "
                         "use a different --mamba-backend value.")

An NPU host never imports the package unless a user selects the backend, and then the project
answers with its own error naming the option: the lazy import is the project's answer, not port
work. `review` lowers such an NPU911 error (a CUDA-only compiled package imported inside a
function) to info with the AS_WRITTEN reason OPT_IN (moot.py names it as a skipped scope), where
all of this holds:

* the import lies inside a module-level function, or the `__init__` of a module-level class (the
  entry: its name);
* the file has a `try` whose `except ImportError` / `except ModuleNotFoundError` handler ends in
  `raise <ProjectError>(...)` (not an import error again, not a bare `raise`): the opt-in `try`;
* every other mention of the entry in the file is a call inside the body of such a `try`, or an
  item of a module-level dict (a registry) whose every use is `R.get(...)` / `R[...]` assigned to
  a local name called only inside such a `try` of the same function (or `R.keys()`, `name in R`,
  the registry shown in a message);
* no other Python file of the project names the entry (a subclass, a test or a caller elsewhere
  could build it without the `try`: the error stays).

A module-level import, an import whose function is called anywhere else, or a handler that falls
back or re-raises the ImportError keeps the error. Nothing is dropped and no rewrite changes.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from . import astcache
from .capability import docless_body
from .findings import Finding

# the reason (moot.AS_WRITTEN holds its first words)
OPT_IN = "an opt-in backend: selecting it on an NPU host raises the project's error"

_IMPORT_ERRORS = frozenset(("ImportError", "ModuleNotFoundError"))
_CODES = frozenset(("NPU911",))
_UNGUARDED = "imported unguarded at module level"
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _opt_in_tries(tree: ast.Module) -> list[tuple[ast.Try, ast.Raise]]:
    """The `try` statements whose ImportError handler ends in raising the project's own error."""
    out = []
    for node in astcache.walk_statements(tree):
        if not isinstance(node, ast.Try):
            continue
        for handler in node.handlers:
            kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
            if not kinds or not all(k is not None and _name(k) in _IMPORT_ERRORS for k in kinds):
                continue
            last = handler.body[-1] if handler.body else None
            if (isinstance(last, ast.Raise) and isinstance(last.exc, ast.Call)
                    and _name(last.exc.func) and _name(last.exc.func) not in _IMPORT_ERRORS):
                out.append((node, last))
                break
    return out


def _inside(node: ast.AST, tries: list) -> ast.Raise | None:
    """The handler's raise of the opt-in `try` whose body holds `node`, or None."""
    line = getattr(node, "lineno", None)
    if line is None:
        return None
    for statement, raised in tries:
        first, last = statement.body[0].lineno, statement.body[-1].end_lineno or statement.body[-1].lineno
        if first <= line <= last:
            return raised
    return None


def _entry(tree: ast.Module, line: int) -> tuple[str, ast.AST] | None:
    """(name, definition) of the module-level function, or class whose `__init__`, holds `line`."""
    for node in tree.body:
        if not (node.lineno <= line <= (node.end_lineno or node.lineno)):
            continue
        if isinstance(node, _FUNCTIONS):
            return node.name, node
        if isinstance(node, ast.ClassDef):
            init = next((m for m in node.body if isinstance(m, _FUNCTIONS) and m.name == "__init__"), None)
            if init is not None and init.lineno <= line <= (init.end_lineno or init.lineno):
                return node.name, node
    return None


def _parents(tree: ast.Module) -> dict[int, ast.AST]:
    out = {}
    for node in astcache.walk(tree):
        for child in ast.iter_child_nodes(node):
            out[id(child)] = node
    return out


def _function_of(node: ast.AST, parents: dict) -> ast.AST | None:
    current = parents.get(id(node))
    while current is not None and not isinstance(current, _FUNCTIONS):
        current = parents.get(id(current))
    return current


def _registry_ok(tree: ast.Module, registry: str, tries: list, parents: dict) -> ast.Raise | None:
    """Whether every use of the module-level dict `registry` picks a value called only inside an
    opt-in `try`: the raise of that `try`, or None."""
    raised = None
    for node in astcache.walk(tree):
        if not (isinstance(node, ast.Name) and node.id == registry and isinstance(node.ctx, ast.Load)):
            continue
        parent = parents.get(id(node))
        if isinstance(parent, ast.Attribute) and parent.attr in ("keys", "items", "values"):
            if parent.attr == "keys":
                continue
            return None
        if isinstance(parent, ast.Compare) and node is not parent.left:
            continue  # (`name in R`)
        if isinstance(parent, ast.FormattedValue) or (
                isinstance(parent, ast.Call) and _name(parent.func) in ("list", "sorted", "str", "repr")
                and isinstance(parents.get(id(parent)), ast.FormattedValue)):
            continue
        picked = parents.get(id(parent)) if isinstance(parent, ast.Attribute) and parent.attr == "get" else parent
        if isinstance(parent, ast.Attribute) and parent.attr == "get":
            if not (isinstance(picked, ast.Call) and picked.func is parent):
                return None
        elif not isinstance(parent, ast.Subscript):
            return None
        assign = parents.get(id(picked))
        if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0], ast.Name)):
            return None
        local, function = assign.targets[0].id, _function_of(assign, parents)
        if function is None:
            return None
        for use in ast.walk(function):
            if isinstance(use, ast.Name) and use.id == local and isinstance(use.ctx, ast.Load):
                call = parents.get(id(use))
                if isinstance(call, ast.Compare):  # (`if backend_cls is None: raise ...`)
                    continue
                if not (isinstance(call, ast.Call) and call.func is use):
                    return None
                found = _inside(call, tries)
                if found is None:
                    return None
                raised = raised or found
    return raised


def _registries(tree: ast.Module, entry: str) -> dict[int, str]:
    """{id(Name node): registry name} of the entry's mentions as values of a module-level dict."""
    out = {}
    for node in tree.body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target, value = node.target.id, node.value
        if target and isinstance(value, ast.Dict):
            for item in value.values:
                if isinstance(item, ast.Name) and item.id == entry:
                    out[id(item)] = target
    return out


def _selected_only_in_try(tree: ast.Module, entry: str, definition: ast.AST, tries: list) -> ast.Raise | None:
    """The raise answering a failed import where every mention of `entry` in the file is reached
    only inside an opt-in `try` (see the module docstring); None otherwise."""
    parents = _parents(tree)
    registries = _registries(tree, entry)
    raised = None
    first, last = definition.lineno, definition.end_lineno or definition.lineno
    for node in astcache.walk(tree):
        if not (isinstance(node, ast.Name) and node.id == entry):
            continue
        if first <= node.lineno <= last:
            return None  # (recursion or a mention inside itself: not the simple shape)
        if id(node) in registries:
            found = _registry_ok(tree, registries[id(node)], tries, parents)
        elif isinstance(node.ctx, ast.Load) and isinstance(parents.get(id(node)), ast.Call) \
                and parents[id(node)].func is node:
            found = _inside(node, tries)
        else:
            found = None
        if found is None:
            return None
        raised = raised or found
    for node in astcache.walk(tree):  # (a string naming it: a lookup by name, `getattr(module, "X")`)
        if isinstance(node, ast.Constant) and node.value == entry:
            return None
    return raised


def candidates(finding: Finding) -> bool:
    return (finding.code in _CODES and finding.severity == "error" and not finding.fixable
            and _UNGUARDED not in finding.message)


def review(findings: list[Finding], text: str, others=None) -> list[Finding]:
    """Lower the lazy CUDA-only imports of opt-in backends (see the module docstring).
    `others(name) -> bool`: whether another Python file of the project names `name` (None: no
    file does)."""
    if not any(candidates(f) for f in findings) or "ImportError" not in text and "ModuleNotFoundError" not in text:
        return findings
    tree = astcache.parse(text.encode("utf-8", "replace"))
    if tree is None:
        return findings
    tries = _opt_in_tries(tree)
    if not tries:
        return findings
    out = []
    for finding in findings:
        if candidates(finding):
            places = [finding.line, *(line for line, _column, _source in finding.also)]
            entries = {_entry(tree, line) for line in places} if all(_entry(tree, n) for n in places) else set()
            entries = {(name, node) for name, node in entries} if entries else set()
            if len(entries) == 1 and not any(_within_try(tree, n) for n in places):
                name, definition = next(iter(entries))
                raised = _selected_only_in_try(tree, name, definition, tries)
                if raised is not None and not (others is not None and others(name)):
                    shown = f"raise {_name(raised.exc.func)}(...)"
                    reason = (f"{OPT_IN}: `{name}` is built only inside the `try` whose `except ImportError` "
                              f"raises at line {raised.lineno} (`{shown}`)")
                    finding = dataclasses.replace(finding, severity="info", message=f"{finding.message} ({reason})")
        out.append(finding)
    return out


def _within_try(tree: ast.Module, line: int) -> bool:
    """Whether the import at `line` has its own `try` (the guarded-import steps judge it)."""
    for node in astcache.walk_statements(tree):
        if isinstance(node, ast.Try) and node.body and node.body[0].lineno <= line <= (node.body[-1].end_lineno or 0) \
                and any(h.type is None or any(_name(k) in _IMPORT_ERRORS | {"Exception"} for k in
                        (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type])) for h in node.handlers):
            return True
    return False


def names_elsewhere(texts: dict, own: int):
    """`others` for `review`: whether a file of `texts` ({index: bytes}) but `own` names `name`."""
    def others(name: str) -> bool:
        word = re.compile(rb"\b" + re.escape(name.encode()) + rb"\b")
        return any(i != own and data and name.encode() in data and word.search(data) for i, data in texts.items())
    return others


# ------------------------------------------------------------- kernels behind a raising device check

DEVICE_RAISE = ("CUDA kernels behind the project's own device check: it raises unless the tensor is on CUDA, "
                "so they never launch on an NPU host")
_KERNEL_DECORATOR = re.compile(r"(^|\.)(jit|autotune|heuristics)$")
_KERNEL_CODES = frozenset(("NPU910",))


def _dotted(node: ast.AST) -> str:
    """`a.b.c` of an attribute chain, or of a call's function."""
    return astcache.dotted(node.func if isinstance(node, ast.Call) else node) or ""


# the text of a `_not_cuda` test (`x.device.type != "cuda"`, `"cuda" != x.device.type`, `not x.is_cuda`)
# on an `if` line whose block raises within its next two lines
_NOT_CUDA_TEXT = re.compile(
    rb"""(?:device\.type\s*!=\s*["']cuda["']|["']cuda["']\s*!=|\bnot\s+[\w.()\[\]]+\.is_cuda\b)[^\n]*:[ \t]*(?:#[^\n]*)?"""
    rb"""\n(?:[^\n]*\n)?[ \t]+raise\b""")


def _not_cuda(test: ast.AST) -> bool:
    """`x.device.type != "cuda"` or `not x.is_cuda`."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotEq):
        sides = [test.left, *test.comparators]
        return (any(isinstance(s, ast.Constant) and s.value == "cuda" for s in sides)
                and any(isinstance(s, ast.Attribute) and s.attr == "type" and isinstance(s.value, ast.Attribute)
                        and s.value.attr == "device" for s in sides))
    return (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Attribute)
            and test.operand.attr == "is_cuda")


def _device_guard(function: ast.AST, rewritten: frozenset = frozenset()) -> bool:
    """Whether the function's leading statements are `if ...: raise` checks, one of them raising
    unless a tensor is on CUDA (nothing before them returns), a test the migration left as written
    (`rewritten`: the lines of its rewrites; one rewritten to the accelerator lets an NPU through)."""
    for stmt in docless_body(function):
        if not (isinstance(stmt, ast.If) and not stmt.orelse and stmt.body and isinstance(stmt.body[-1], ast.Raise)):
            return False
        if _not_cuda(stmt.test):
            return not any(stmt.test.lineno <= n <= (stmt.test.end_lineno or stmt.test.lineno) for n in rewritten)
    return False


def _launchers(tree: ast.Module) -> set[str]:
    """The module-level functions and classes that launch (or reach, within the file) a kernel."""
    kernels = {n.name for n in astcache.walk(tree) if isinstance(n, _FUNCTIONS)
               and any(_KERNEL_DECORATOR.search(_dotted(d)) for d in n.decorator_list)}
    tops = {n.name: n for n in astcache.walk_statements(tree) if isinstance(n, (*_FUNCTIONS, ast.ClassDef))
            and n.name not in kernels and any(n is s for s in _top_level(tree))}
    names = {name: {m.id for m in ast.walk(node) if isinstance(m, ast.Name)} for name, node in tops.items()}
    out = {name for name, used in names.items() if used & kernels}
    changed = True
    while changed:
        changed = False
        for name, used in names.items():
            if name not in out and used & out:
                out.add(name)
                changed = True
    return out


def _top_level(tree: ast.Module) -> list:
    """Module-level statements, those of module-level `if`/`try` blocks included."""
    out, stack = [], list(tree.body)
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, ast.If):
            stack.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])
    return out


def _same(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a) == ast.dump(b)


def _guarded_use(function: ast.AST, use: ast.AST, alias: str, guards: set, parents: dict) -> str | None:
    """Where `use` (`alias.entry(...)`) lies in a branch `if C:` (or `elif C:`) of `function` and an
    earlier top-level statement of it is `if C [and not self.flag]: alias.guard(...)`, the flag set
    True only right after that call: the guard's name. Otherwise None."""
    branch = parents.get(id(use))
    while branch is not None and branch is not function and not (
            isinstance(branch, ast.If) and any(use is n for s in branch.body for n in ast.walk(s))):
        branch = parents.get(id(branch))
    if not isinstance(branch, ast.If):
        return None
    condition = branch.test
    for stmt in docless_body(function):
        if stmt.lineno >= use.lineno:
            return None
        if not (isinstance(stmt, ast.If) and not stmt.orelse and stmt.body):
            continue
        call = stmt.body[0]
        if not (isinstance(call, ast.Expr) and isinstance(call.value, ast.Call)
                and isinstance(call.value.func, ast.Attribute) and call.value.func.attr in guards
                and _dotted(call.value.func.value) == alias):
            continue
        test = stmt.test
        flag = None
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and len(test.values) == 2 \
                and isinstance(test.values[1], ast.UnaryOp) and isinstance(test.values[1].op, ast.Not) \
                and isinstance(test.values[1].operand, ast.Attribute):
            test, flag = test.values[0], test.values[1].operand
        if not _same(test, condition):
            continue
        if flag is not None and not _flag_set_only_after(function, stmt, flag, parents):
            continue
        return call.value.func.attr
    return None


def _flag_set_only_after(function: ast.AST, stmt: ast.If, flag: ast.Attribute, parents: dict) -> bool:
    """Whether `self.flag` is set truthy only by the statement right after the guard call, in the
    whole class (False elsewhere)."""
    cls = parents.get(id(function))
    if not isinstance(cls, ast.ClassDef):
        return False
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and any(_same(t, flag) for t in node.targets):
            if isinstance(node.value, ast.Constant) and node.value.value is False:
                continue
            if not (len(stmt.body) >= 2 and node is stmt.body[1]):
                return False
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and _same(node.target, flag):
            return False
    return True


def kernels_behind_device_check(relpath: str, data: bytes, importers,
                                rewritten: frozenset = frozenset()) -> str | None:
    """The reason, where every kernel of the Triton module `data` launches only after a device
    check that raises unless the tensor is on CUDA: each module-level public function that reaches
    a kernel calls such a check first, or is used only by other modules (`importers`: [(relpath,
    bytes)] naming the module) in a branch `if C:` after `if C: module.check(...)` in the same
    function; nothing else reaches a kernel (the file's private launchers are used only by these).
    `importers` is read once, after the cheaper tests."""
    if b"raise" not in data or not _NOT_CUDA_TEXT.search(data):
        return None
    tree = astcache.parse(data)
    if tree is None:
        return None
    top = {n.name: n for n in tree.body if isinstance(n, _FUNCTIONS)}
    guards = {name for name, node in top.items() if _device_guard(node, rewritten)}
    if not guards:
        return None
    launchers = _launchers(tree)
    if not launchers:
        return None
    public = {name for name in launchers if not name.startswith("_")}
    for name in launchers - public:  # a private launcher must be used only inside the file's launchers
        for node in tree.body:
            if (not isinstance(node, (*_FUNCTIONS, ast.ClassDef)) or node.name not in launchers) \
                    and any(isinstance(m, ast.Name) and m.id == name for m in ast.walk(node)):
                return None
    if any(isinstance(n, ast.Name) and n.id in public for n in astcache.walk(tree)):
        return None  # (a public launcher named inside the file: not the simple shape)
    unchecked = set()
    for name in public:
        node = top.get(name)
        if node is None:
            return None  # (a public class: anything may build it)
        first = docless_body(node)[:1]
        if first and isinstance(first[0], ast.Expr) and isinstance(first[0].value, ast.Call) \
                and _dotted(first[0].value.func) in guards:
            continue
        unchecked.add(name)
    stem = relpath[:-3].replace("/", ".")
    used = set()
    for other, text in importers:
        other_tree = astcache.parse(text)
        if other_tree is None:
            return None
        aliases = set()
        for node in ast.walk(other_tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if _names(stem, full):
                        aliases.add(alias.asname or alias.name)
                    elif _names(stem, node.module) and alias.name in public:
                        return None  # (an entry imported by name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if _names(stem, alias.name) and alias.asname:
                        aliases.add(alias.asname)
        parents = _parents(other_tree)
        for node in ast.walk(other_tree):
            if isinstance(node, ast.Attribute) and node.attr in public:
                if _dotted(node.value) not in aliases:
                    if node.attr in unchecked:
                        return None
                    continue
                if node.attr not in unchecked:
                    continue
                function = _function_of(node, parents)
                if function is None or _guarded_use(function, node, _dotted(node.value), guards, parents) is None:
                    return None
                used.add(node.attr)
            elif isinstance(node, ast.Name) and node.id in unchecked:
                return None
    if unchecked - used:
        return None  # (an entry no module of the project calls: anyone may)
    shown = " or ".join(f"`{g}`" for g in sorted(guards))
    return (f"{DEVICE_RAISE}: every entry calls {shown} first, and the raise is the project's answer there"
            if not used else f"{DEVICE_RAISE}: every entry calls {shown} first, or its callers do under the "
            f"same condition; the raise is the project's answer there")


def _names(stem: str, dotted: str) -> bool:
    """Whether the dotted module name `dotted` is the file `stem` (dotted path, maybe under `src.`)."""
    return stem == dotted or stem.endswith("." + dotted)


def kernel_candidates(finding: Finding) -> bool:
    return (finding.code in _KERNEL_CODES and finding.severity == "error" and not finding.fixable
            and "imported unguarded" not in finding.message)


def review_kernels(result, data: bytes, texts: dict, own: int):
    """Lower a Triton module's kernel findings where `kernels_behind_device_check` holds; `texts`:
    {index: bytes} of the project's Python files (the importers are those naming the module)."""
    if b"triton" not in data or not any(kernel_candidates(f) for f in result.findings):
        return result
    last = result.relpath[:-3].rsplit("/", 1)[-1].encode()
    # (a generator: read only once the module has a device check and launchers, rarely)
    importers = ((str(i), text) for i, text in texts.items() if i != own and text and last in text)
    rewritten = frozenset(f.line for f in result.findings if f.fixable)
    why = kernels_behind_device_check(result.relpath, data, importers, rewritten)
    if why is None:
        return result
    findings = [dataclasses.replace(f, severity="info", message=f"{f.message} ({why})") if kernel_candidates(f) else f
                for f in result.findings]
    return dataclasses.replace(result, findings=findings)
