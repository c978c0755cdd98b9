"""An FP8 storage dtype that only feeds Triton kernels already reported, followed through a class's
attributes and helper methods and into another module's kernel wrappers (issue #16, round 26 BU#22,
BU#28; BU#14 left: see below). Whole run, from runplan.whole_run_passes (after fp8folds19.py).

fp8folds19.fold_triton_fp8 folds an FP8 place bound to a name that the same function passes only
into a launch of the same module's kernels. The round-26 reviewers found the same storage reached
less directly, each time a redundant "FP8 compute" error beside the kernels' NPU910:

    def _allocate(self):                                  # FP8 place: the table's storage dtype
        return torch.empty(rows, dim, dtype=torch.float8_e4m3fn)
    def __init__(self):
        self.weight = nn.Parameter(self._allocate(), requires_grad=False)
    def _storage(self):
        return self.weight.data
    def lookup(self, ids):
        weight = self._storage()
        _lookup_kernel[(grid,)](weight, ids, ...)         # the only compute on it

    self.cache_fp8_dtype = torch.float8_e5m2              # a user-chosen KV-cache dtype
    ...
    kv = kv_cache.view(self.cache_fp8_dtype) if self.use_fp8 else kv_cache
    sparse_attn_decode(q, kv, ...)                        # another module's Triton kernel wrapper

The FP8 tensor's only compute is the kernels, which an NPU host cannot run until they are ported
(the NPU910 already asks for that); porting them decides the storage too. So the FP8 finding folds
into the kernels' NPU910, whose message names it ("with ... an FP8 storage that only feeds these
Triton kernels"). In another module, the kernel module's NPU910 names the file and lines.

How the value is followed, inside the class that holds the FP8 place (decided on the exact
constructs; anything else keeps the finding):
- from the statement holding the place: an assignment (its targets: local names, `self.attr`,
  tuple targets) or a method's `return` (the method's calls `self.method(...)`);
- a value stays the same storage through attribute reads (`.data`), subscripts, tuples, conditional
  expressions, `nn.Parameter(...)`, a `for` over it, view-like methods (`.view`, `.reshape`,
  `.squeeze`, ...), `x.view(dtype)` / `x.to(dtype)` / an allocation's `dtype=` (a dtype becomes a
  tensor), and a call of something not in torch whose result is bound (`get_views(self.weight)`);
- it is harmless in a comparison, a metadata read (`.shape`, `.dtype`, `.data_ptr()`, `.stride()`,
  ...), `isinstance`/`len`/`id`/`type`, and a call of a run function that only sets attributes on
  its argument (`setattr` in a loop);
- it is consumed by a launch `kernel[grid](...)` of a Triton kernel (the module's own or an imported
  one) or a call of a run function that launches one (every import of the name that the run
  resolves: `if is_rocm(): from amd import f` / `else: from common import f`); the kernels' module
  must hold an open NPU910 finding;
- anything else (arithmetic, a torch function, a store into a container, a method of the class read
  from outside it: `obj.attr` in this file or `.attr` / `.method(` in another file of the run)
  keeps the finding.

Another file's reads count only outside tests (wave 27, h126: BU#22's table is read by two kernel
tests, which keep their own findings; policy P2, tests do not make library code reached).

Left (BU#14, folded by fp8optin27.py when an opt-in setting picks the dtype): a dtype stored on a cache object (`self.dtype = cache_dtype`) that the framework's
cache manager reads to allocate the tensor elsewhere: the flow leaves the class through the
framework, so it stays reported.
"""

from __future__ import annotations

import ast
import dataclasses
import posixpath
from typing import Optional

from . import astcache

WHERE = "an FP8 storage that only feeds these Triton kernels (ported with them)"
_TRITON_DECORATORS = frozenset({"jit", "autotune", "heuristics"})
_META_ATTRS = frozenset({"shape", "dtype", "device", "is_meta", "is_cuda", "nbytes", "ndim", "itemsize",
                         "requires_grad"})
_META_METHODS = frozenset({"data_ptr", "stride", "numel", "size", "dim", "element_size", "storage_offset",
                           "is_contiguous", "nelement", "untyped_storage", "get_device"})
_VIEW_METHODS = frozenset({"view", "reshape", "squeeze", "unsqueeze", "flatten", "contiguous", "narrow",
                           "transpose", "permute", "detach", "t", "select", "unflatten", "as_strided",
                           "view_as", "movedim", "expand"})
_DTYPE_METHODS = frozenset({"view", "to"})
_META_FUNCTIONS = frozenset({"isinstance", "len", "id", "type", "hasattr"})
_ALLOCATORS = frozenset({"empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like",
                         "full_like", "empty_strided", "tensor", "randn", "rand"})
_MAX_STEPS = 200


def _open(finding, code: str) -> bool:
    from .folding import ours
    from .moot import is_moot

    return finding.code == code and ours(finding) and finding.severity != "info" and not is_moot(finding)


def _dotted(node: ast.AST) -> str:
    return astcache.dotted(node, strict=False) or ""


def _kernels(tree: ast.Module) -> dict[str, int]:
    """{name: decorator line} of the module's top-level Triton kernels."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                name = _dotted(decorator.func if isinstance(decorator, ast.Call) else decorator)
                if name.rsplit(".", 1)[-1] in _TRITON_DECORATORS:
                    out[node.name] = decorator.lineno
                    break
    return out


class _Flow:
    """The run, as far as one FP8 place needs it."""

    def __init__(self, results: list, text_of, run):
        self.results, self.text_of, self.run = results, text_of, run
        self._parents: dict[int, dict] = {}
        self._texts: Optional[list] = None

    def parents(self, i: int) -> dict:
        if i not in self._parents:
            tree = self.run.tree(i)
            parents = {}
            for node in ast.walk(tree) if tree is not None else ():
                for child in ast.iter_child_nodes(node):
                    parents[id(child)] = node
            self._parents[i] = parents
        return self._parents[i]

    def read_elsewhere(self, i: int, needle: bytes, owner: bytes) -> bool:
        """Whether another file of the run that names `owner` (the class) has `needle` (`.attr`,
        `.method(`) in its text."""
        from .importgates import is_test

        if self._texts is None:
            # (a test's reads are the test's own code, reported there: policy P2, wave 27 BU#22)
            self._texts = [self.text_of(k) if self.results[k].relpath.endswith(".py")
                           and not is_test(self.results[k].relpath) else None
                           for k in range(len(self.results))]
        return any(data and owner in data and needle in data for k, data in enumerate(self._texts) if k != i)

    def open_kernels(self, k: int) -> bool:
        return any(_open(f, "NPU910") for f in self.results[k].findings)

    def kernel_sinks(self, i: int, call: ast.Call) -> Optional[list[tuple[int, int]]]:
        """[(module, kernel decorator line)] when `call` launches a Triton kernel or calls a run
        function that launches one (every import of its name resolved that way), else None."""
        tree = self.run.tree(i)
        func = call.func
        if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name):
            name = func.value.id
            own = _kernels(tree)
            if name in own:
                return [(i, own[name])] if self.open_kernels(i) else None
            found = self.run.definition(i, name)
            if found is not None:
                k, node = found
                line = _kernels(self.run.tree(k)).get(getattr(node, "name", ""))
                return [(k, line)] if line is not None and self.open_kernels(k) else None
            return None
        if not isinstance(func, ast.Name):
            return None
        definitions = self._definitions(i, func.id)
        if not definitions:
            return None
        sinks = []
        for k, node in definitions:
            launched = self._launches(k, node)
            if launched is None:
                return None
            if self.open_kernels(k):
                sinks.extend((k, line) for line in launched)
        return sinks or None

    def _definitions(self, i: int, name: str) -> list[tuple[int, ast.AST]]:
        tree = self.run.tree(i)
        out = [(i, n) for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
        for node in astcache.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name and alias.name != "*":
                        k = self.run.module_of(i, node)
                        found = self.run.definition(k, alias.name) if k is not None and k != i else None
                        if found is None:
                            return []  # (an import the run cannot follow)
                        out.append(found)
        return out

    def _launches(self, k: int, function: ast.AST) -> Optional[list[int]]:
        """Decorator lines of the module's kernels `function` launches, or None when it launches none."""
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        kernels = _kernels(self.run.tree(k))
        lines = [kernels[n.func.value.id] for n in ast.walk(function)
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
                 and isinstance(n.func.value, ast.Name) and n.func.value.id in kernels]
        return lines or None

    def sets_attributes_only(self, i: int, name: str, position: int) -> bool:
        """A run function that only sets attributes on the argument at `position`: every read of
        that parameter is the object of `setattr` / `hasattr` / `getattr`, one `setattr` at least."""
        found = self.run.definition(i, name)
        function = found[1] if found is not None else None
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or position >= len(function.args.args):
            return False
        param = function.args.args[position].arg
        uses = [n for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == param and isinstance(n.ctx, ast.Load)]
        calls = {id(c.args[0]): c.func.id for c in ast.walk(function) if isinstance(c, ast.Call)
                 and isinstance(c.func, ast.Name) and c.func.id in ("setattr", "hasattr", "getattr") and c.args}
        return bool(uses) and all(id(u) in calls for u in uses) and "setattr" in calls.values()


def _method_of(tree: ast.Module, parents: dict, line: int):
    """(class, method) holding `line`: the innermost function, directly in a top-level class."""
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= (node.end_lineno or 0):
            if best is None or node.lineno >= best.lineno:
                best = node
    if best is None:
        return None
    owner = parents.get(id(best))
    return (owner, best) if isinstance(owner, ast.ClassDef) else None


def _enclosing_function(parents: dict, node: ast.AST):
    while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        node = parents.get(id(node))
    return node


def _is_self_attr(node: ast.AST, attr: Optional[str] = None) -> bool:
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
            and (attr is None or node.attr == attr))


class _Trace:
    """The flow of one FP8 place inside its class: None when it escapes, else the kernel sinks."""

    def __init__(self, flow: _Flow, i: int, cls: ast.ClassDef):
        self.flow, self.i, self.cls = flow, i, cls
        self.parents = flow.parents(i)
        self.tree = flow.run.tree(i)
        self.methods = {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.seen: set = set()
        self.todo: list = []
        self.sinks: list = []

    def run(self, method: ast.AST, line: int) -> Optional[list]:
        statement = self._statement(method, line)
        if statement is None or not self._bind(statement, method):
            return None
        steps = 0
        while self.todo:
            steps += 1
            if steps > _MAX_STEPS:
                return None
            item = self.todo.pop()
            for node, function in self._occurrences(item):
                if not self._climb(node, function):
                    return None
        return self.sinks or None

    def _statement(self, method: ast.AST, line: int) -> Optional[ast.stmt]:
        best = None
        for node in ast.walk(method):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.Return)) and \
                    node.lineno <= line <= (node.end_lineno or node.lineno) and (best is None or node.lineno >= best.lineno):
                best = node
        return best

    def _add(self, item) -> None:
        if item not in self.seen:
            self.seen.add(item)
            self.todo.append(item)

    def _bind(self, statement: ast.stmt, function: ast.AST) -> bool:
        """Follow what `statement` binds (an assignment's targets, a method's return)."""
        if isinstance(statement, ast.Return):
            if function not in self.methods.values():
                return False
            self._add(("ret", function.name))
            return True
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        for target in targets:
            for node in ([*target.elts] if isinstance(target, (ast.Tuple, ast.List)) else [target]):
                if isinstance(node, ast.Starred):
                    node = node.value
                if isinstance(node, ast.Name):
                    self._add(("name", id(function), node.id))
                elif _is_self_attr(node):
                    self._add(("attr", node.attr))
                else:
                    return False
        return True

    def _occurrences(self, item):
        kind = item[0]
        if kind == "name":
            function = next(f for f in ast.walk(self.cls) if id(f) == item[1])
            for node in ast.walk(function):
                if isinstance(node, ast.Name) and node.id == item[2] and isinstance(node.ctx, ast.Load):
                    yield node, _enclosing_function(self.parents, node)
            return
        name = item[1]
        if self._used_outside(name, kind):
            yield None, None
            return
        for node in ast.walk(self.cls):
            if _is_self_attr(node, name) and isinstance(node.ctx, ast.Load):
                if kind == "attr":
                    yield node, _enclosing_function(self.parents, node)
                else:
                    call = self.parents.get(id(node))
                    if isinstance(call, ast.Call) and call.func is node:
                        yield call, _enclosing_function(self.parents, call)
                    else:
                        yield None, None  # (the method passed on as a value)

    def _used_outside(self, name: str, kind: str) -> bool:
        """`obj.name` read in this file on anything but `self` (another class's `self.name` is its
        own), or `.name` in another file of the run that names the class."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.ctx, ast.Load) \
                    and not _is_self_attr(node) and not self._other_instance(node.value):
                return True
        needle = f".{name}(" if kind == "ret" else f".{name}"
        return self.flow.read_elsewhere(self.i, needle.encode(), self.cls.name.encode())

    def _other_instance(self, value: ast.AST) -> bool:
        """`value` is a local name its function binds to an instance of another class of this file
        (`storage = SharedStorage(...)`; `storage.weight` is that object's, not the class's)."""
        if not isinstance(value, ast.Name):
            return False
        function = _enclosing_function(self.parents, value)
        classes = {n.name for n in self.tree.body if isinstance(n, ast.ClassDef)} - {self.cls.name}
        bound = [n for n in ast.walk(function) if isinstance(n, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == value.id for t in n.targets)] if function else []
        return bool(bound) and all(isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
                                   and n.value.func.id in classes for n in bound)

    def _climb(self, node: Optional[ast.AST], function) -> bool:
        if node is None or function is None:
            return False
        parents = self.parents
        while True:
            parent = parents.get(id(node))
            if isinstance(parent, ast.keyword):
                keyword, parent = parent, parents.get(id(parent))
            else:
                keyword = None
            if isinstance(parent, ast.Attribute) and parent.value is node:
                call = parents.get(id(parent))
                if isinstance(call, ast.Call) and call.func is parent:
                    if parent.attr in _META_METHODS:
                        return True
                    if parent.attr in _VIEW_METHODS:
                        node = call
                        continue
                    return False
                if parent.attr in _META_ATTRS:
                    return True
                node = parent
                continue
            if isinstance(parent, ast.Subscript) and parent.value is node:
                node = parent
                continue
            if isinstance(parent, (ast.Tuple, ast.List, ast.Starred)):
                node = parent
                continue
            if isinstance(parent, ast.IfExp):
                if node is parent.test:
                    return True
                node = parent
                continue
            if isinstance(parent, ast.Compare):
                return True
            if isinstance(parent, ast.Call):
                verdict = self._call(parent, node, keyword)
                if verdict == "through":
                    node = parent
                    continue
                return verdict == "ok"
            if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node:
                return self._bind(parent, function)
            if isinstance(parent, ast.Return):
                return self._bind(parent, function)
            if isinstance(parent, ast.For) and parent.iter is node:
                if isinstance(parent.target, ast.Name):
                    self._add(("name", id(function), parent.target.id))
                    return True
                return False
            if isinstance(parent, ast.Expr):
                return True
            return False

    def _call(self, call: ast.Call, node: ast.AST, keyword: Optional[ast.keyword]) -> str:
        """"ok" (consumed harmlessly or by a kernel), "through" (the result is the same storage) or "no"."""
        sinks = self.flow.kernel_sinks(self.i, call)
        if sinks is not None:
            self.sinks.extend(sinks)
            return "ok"
        name = _dotted(call.func)
        last = name.rsplit(".", 1)[-1]
        if isinstance(call.func, ast.Attribute) and last in _DTYPE_METHODS and (
                (keyword is None and call.args and call.args[0] is node) or (keyword is not None and keyword.arg == "dtype")):
            return "through"  # `x.view(fp8)`, `x.to(dtype=fp8)`: a tensor of that dtype
        if keyword is not None and keyword.arg == "dtype" and last in _ALLOCATORS:
            return "through"
        if last == "Parameter":
            return "through"
        if isinstance(call.func, ast.Name) and call.func.id in _META_FUNCTIONS:
            return "ok"
        statement = self.parents.get(id(call))
        if isinstance(call.func, ast.Name) and isinstance(statement, ast.Expr) and keyword is None and \
                node in call.args and self.flow.sets_attributes_only(self.i, call.func.id, call.args.index(node)):
            return "ok"
        if name.startswith("torch.") or name.startswith("nn.") or name.startswith("F."):
            return "no"
        if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.Return, ast.Tuple)) or \
                isinstance(self.parents.get(id(call)), (ast.Tuple, ast.IfExp)):
            return "through"  # (a project helper's result, followed in turn)
        return "no"


def review(results: list, paths: dict) -> list:
    """Module's doc."""
    from .findings import split_merged
    from .folding import RANK as _RANK, drop_taken, places_of
    from .fp8folds19 import RunDefinitions
    from .modpaths import RunTexts

    candidates = [(i, f) for i, r in enumerate(results) if r.relpath.endswith(".py")
                  for f in r.findings if _open(f, "NPU913") and "(with `" not in f.message]
    if not candidates or not any(_open(f, "NPU910") for r in results for f in r.findings):
        return results
    text_of = RunTexts(results, paths)
    run = RunDefinitions(results, text_of)
    flow = _Flow(results, text_of, run)
    moves: dict[tuple[int, int], list] = {}  # (kernel module, kernel line) -> [(file, finding, places)]
    for i, finding in candidates:
        data = text_of(i)
        if not data or b"float8" not in data or b"class " not in data:
            continue
        tree = run.tree(i)
        if tree is None:
            continue
        parents = flow.parents(i)
        by_target: dict[tuple[int, int], list] = {}
        for place in places_of(finding):
            held = _method_of(tree, parents, place[0])
            sinks = _Trace(flow, i, held[0]).run(held[1], place[0]) if held else None
            if sinks:
                by_target.setdefault(min(sinks), []).append(place)
        for key, places in by_target.items():
            moves.setdefault(key, []).append((i, finding, places))
    if not moves:
        return results
    out = list(results)
    taken: dict[int, dict[int, list]] = {}  # file -> id(finding) -> places that moved
    for (k, line), moved in moves.items():
        target = next((f for f in out[k].findings if _open(f, "NPU910") and any(
            p.line == line for p in split_merged(f))), None) or next(
            (f for f in out[k].findings if _open(f, "NPU910")), None)
        if target is None:
            continue
        moved = [m for m in moved if _RANK[m[1].severity] <= _RANK[target.severity]]
        if not moved:
            continue  # (an error does not fold into a lower finding)
        notes = []
        for i, finding, places in moved:
            lines = sorted({p[0] for p in places})
            shown = ", ".join(map(str, lines))
            what = places[0][2] or "FP8 dtype"
            at = "" if i == k else \
                f" in `{posixpath.relpath(results[i].relpath, posixpath.dirname(results[k].relpath) or '.')}`"
            notes.append(f"`{what}`{at} (line{'s' if len(lines) > 1 else ''} {shown})")
            taken.setdefault(i, {}).setdefault(id(finding), []).extend(places)
        more = f" and {len(notes) - 3} more" if len(notes) > 3 else ""
        note = f"also {', '.join(notes[:3])}{more}: {WHERE}"
        out[k] = dataclasses.replace(out[k], findings=sorted(
            dataclasses.replace(f, message=f"{f.message} ({note})") if f is target else f for f in out[k].findings))
    drop_taken(out, taken)
    return out
