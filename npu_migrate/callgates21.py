"""Code reached only through calls that another module makes under a gate false on an NPU host
(issue #16, round-21 audit BH#8: "a lazy CUDA-library import inside a method, where the caller
(another module) gates it on a flag computed in `__init__` from
`current_platform.has_device_capability(N)`"). Whole run, from runplan.whole_run_passes, after
flagcalls19.py.

    # ops/fused.py
    class FusedGemm:
        def compile(self, key):
            import cutlass.cute as cute           # NPU911
    def _get_kernel(rank):
        return FusedGemm(rank)
    def fused(x, rank):
        return _get_kernel(rank)(x)
    def warmup(sizes, rank):
        if not current_platform.has_device_capability(90):
            return
        _get_kernel(rank).warm(sizes)

    # layer.py (another module)
    class Layer:
        def __init__(self):
            self._use_fused = w.dtype == torch.bfloat16 and current_platform.has_device_capability(90)
        def forward(self, x):
            use_fused = self._use_fused and x.shape[0] <= 64
            if use_fused:
                return fused(x, self.rank)         # the only call of `fused`

A report-only finding in the body of a module-level function, or of a method of a module-level
class, is a named scope ("in a branch an NPU host does not take") when every reference of the run
to that function (or class) lies in code an NPU host does not run, a few steps deep:

* the body of an `if` whose test is false there (the `else:` of one true there), or the rest of a
  function after an `if` true there whose body leaves (`if not cap(90): return`) or an `assert`
  false there: read by flagcalls19's interpreter (the project's flags and functions, testscopes'
  platform answers), with two more names known: a local bound once, by a plain assignment at the
  top of the function before the test, and `self.X` of a class that assigns it once (`self.X =
  <false there>`) where no other file of the run assigns `.X` or patches it (a `self.X = ...` in a
  file naming neither the class, nor a subclass, nor a base the run defines, is another class's
  own attribute: not counted; round-22 BJ#15);
* or a test testscopes finds skipped there (cuda_only_test_scopes, as optparams20 reads them);
* or the body of another such function or class (`_get_kernel` used only by `fused` and by
  `warmup` after its capability exit).

A public function or class of a library module (no `_` name, not in a test, benchmark, example,
tool or script) whose only references are tests skipped there stays reported: its users call it
(accelerate's `load_and_quantize_model`, whose callers in the run are CUDA-only tests).

A test calling a method of a parameter or local (`runner_backend.is_deep_gemm()`: a backend a
user option chooses) is not decided. Annotations and `__all__` entries are no references; any other mention (a value handed on, a
string, `getattr`) keeps the finding, and so does a reference in a file that does not parse. At
least one reference must lie in another module than the finding's (a file's own dead code is
testscopes'/reach.py's).
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache, classmembers

_DEPTH = 4
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _unit(tree: ast.Module, line: int) -> Optional[ast.AST]:
    """The module-level function, or class (the line in one of its methods' bodies), holding
    `line` in a body (not a decorator, default or annotation)."""
    for stmt in tree.body:
        if not (stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno)):
            continue
        if isinstance(stmt, _DEFS):
            return stmt if stmt.body[0].lineno <= line else None
        if isinstance(stmt, ast.ClassDef):
            for item in stmt.body:
                if isinstance(item, _DEFS) and item.body[0].lineno <= line <= (item.end_lineno or item.lineno):
                    return stmt
        return None
    return None


def _annotations(tree: ast.Module) -> set:
    """ids of the nodes inside annotations and `__all__` lists (no references)."""
    out: set = set()
    for node in astcache.walk(tree):
        parts = []
        if isinstance(node, ast.arg) and node.annotation is not None:
            parts.append(node.annotation)
        elif isinstance(node, _DEFS) and node.returns is not None:
            parts.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            parts.append(node.annotation)
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                parts.append(node.value)
        for part in parts:
            out.update(id(n) for n in ast.walk(part))
    return out


class _Gates:
    keep_public = True  # (False: publichelpers27.py asks who calls a public function, policy P3)

    def __init__(self, run) -> None:
        self.run = run
        self.memo: dict = {}
        self.attrs: dict = {}
        self.indexes: dict = {}
        self.scopes: dict = {}
        self.where: dict = {}  # ((module, class, attr) -> "path:line" of its one assignment)
        self.families: dict = {}  # (class name -> it and the run's classes deriving from it)
        self.headers: Optional[dict] = None  # (class name -> its bases' words, every class line of the run)
        self.notes: list = []  # (what the last truth() read: locals and `self.X`)
        self.locals_of: dict = {}  # (id(function) -> (it, flagtruth.local_names of it): one walk each)
        self.stores_of: dict = {}  # (id(function) -> (it, {name: how many stores}): one walk each)
        self.guards: dict = {}  # ((module, class, attr) -> attrflags27.raise_implied's guard)
        self.built: dict = {}  # ((module, id(class), member) -> capchains30.member_classes: asked again per read)
        self.shadows: dict = {}  # (id(function) -> (it, its own locals): attrflags27.shadowed)
        self.unit_module: Optional[int] = None  # (set by _sites around its dead() question: importfirst33.py)
        self.first_failures: dict = {}  # (module -> its first never-on-NPU top-level import: importfirst33.py)

    def _local_names(self, function) -> frozenset:
        """flagtruth.local_names(function), worked out once per function (a walk of the whole
        function, asked again for every reference and every `if` above it)."""
        from .flagtruth import local_names as _locals

        if function is None:
            return frozenset()
        found = self.locals_of.get(id(function))
        if found is None or found[0] is not function:
            found = self.locals_of[id(function)] = (function, _locals(function))
        return found[1]

    def _stores(self, function) -> dict:
        """{name: how many times the function (nested code included) stores it}, once per function."""
        found = self.stores_of.get(id(function))
        if found is None or found[0] is not function:
            counts: dict = {}
            for n in ast.walk(function):
                if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
                    counts[n.id] = counts.get(n.id, 0) + 1
            found = self.stores_of[id(function)] = (function, counts)
        return found[1]

    # ------------------------------------------------------------------ the value of a test there
    def _function(self, parents: dict, node: ast.AST) -> Optional[ast.AST]:
        node = parents.get(id(node))
        while node is not None and not isinstance(node, (*_DEFS, ast.Lambda)):
            node = parents.get(id(node))
        return node

    def _attr(self, j: int, tree: ast.Module, parents: dict, function: ast.AST, attr: str, used: list):
        """The value of `self.attr` in the class holding `function`, or None where unknown."""
        from .flagtruth import UNKNOWN as _U
        from .propgates26 import is_property, property_value  # (a property returning it: propgates26.py)

        owner = parents.get(id(function))
        if not isinstance(owner, ast.ClassDef):
            return _U
        key = (j, owner.name, attr)
        if key in self.attrs:
            return self.attrs[key]
        self.attrs[key] = _U
        found = classmembers.members(owner, attr)  # (one walk of the class body: classmembers.py)
        stores, others = list(found.self_assigns), list(found.stores)
        if not stores and not others and is_property(owner, attr) and self._assigned_elsewhere(attr, j, owner) == 0:
            value, place = property_value(self.run, j, owner, attr, used)
            self.attrs[key] = value
            if place:
                self.where[key] = place
            return value
        if not stores or len(stores) != len(others) or self._assigned_elsewhere(attr, j, owner) != len(stores):
            return _U
        from .attrflags27 import stores_value  # (its methods' once-bound locals, every store agreeing: attrflags27.py)
        value, place = stores_value(self, j, parents, stores, used)
        if value is _U:
            from .attrflags27 import raise_implied  # (a flag whose True makes __init__ raise there first)
            found = raise_implied(self, j, parents, owner, attr, stores, used)
            if found is not None:
                value, place, self.guards[key] = found
        self.attrs[key] = value
        if value is not _U:
            self.where[key] = place
        return value

    def _assigned_elsewhere(self, attr: str, home: int = -1, owner: Optional[ast.ClassDef] = None) -> int:
        """How many `.attr = ...` assignments (and patches naming it) the run's files hold. A
        `self.attr = ...` in another file that names neither the owner class nor one of its bases
        is another class's own attribute (round-22 BJ#15: `self.enable_cg` of two unrelated ViT
        models): not counted; any other object's `.attr = ...` is."""
        pattern = re.compile(rb"\.\s*" + re.escape(attr.encode()) + rb"\s*(?:=(?!=)|\+=|-=|\|=|&=)")
        own = re.compile(rb"\bself\s*\.\s*" + re.escape(attr.encode()) + rb"\s*(?:=(?!=)|\+=|-=|\|=|&=)")
        named = re.compile(rb"(?:patch|setattr)\b[^\n]*[\"']" + re.escape(attr.encode()) + rb"[\"']")
        related = [] if owner is None else [
            re.compile(rb"\b" + re.escape(n.encode()) + rb"\b")
            for n in {*self._family(owner.name), *(b for b in (
                (astcache.dotted(b) or "").rpartition(".")[2] for b in owner.bases) if b and self._defined(b))}]
        count = 0
        for i, result in enumerate(self.run.results):
            if not result.relpath.endswith(".py"):
                continue
            data = self.run.text_of(i) or b""
            if attr.encode() in data:
                found = len(pattern.findall(data))
                if owner is not None and i != home and not any(r.search(data) for r in related):
                    found -= len(own.findall(data))
                count += found + (2 if named.search(data) else 0)
        return count

    def _classes(self) -> dict:
        """{class name: the words of its bases} of every `class X(...)` line of the run (one scan)."""
        if self.headers is None:
            header = re.compile(rb"^[ \t]*class[ \t]+(\w+)[ \t]*(?:\(([^)]*)\))?", re.MULTILINE)
            self.headers = {}
            for i, result in enumerate(self.run.results):
                data = (self.run.text_of(i) or b"") if result.relpath.endswith(".py") else b""
                if b"class" not in data:
                    continue
                for match in header.finditer(data):
                    bases = {w.decode() for w in re.findall(rb"\w+", match.group(2) or b"")}
                    self.headers.setdefault(match.group(1).decode(), set()).update(bases)
        return self.headers

    def _defined(self, name: str) -> bool:
        """A class of that name is defined in the run (a base such as `nn.Module` is not: a file
        naming `Module` says nothing)."""
        return name in self._classes()

    def _family(self, name: str) -> set:
        """The class and the run's classes deriving from it, a few generations (by their `class X(...)`
        lines): a subclass's `self.attr = ...` sets the attribute on instances of the class too."""
        if name not in self.families:
            names = {name}
            for _round in range(4):
                more = {c for c, bases in self._classes().items() if bases & names}
                if more <= names:
                    break
                names |= more
            self.families[name] = names
        return self.families[name]

    def truth(self, j: int, tree: ast.Module, parents: dict, test: ast.AST, where: ast.AST, used: list):
        """The test's truth on an NPU host at `where` (flagcalls19's reading, with a function's
        once-bound locals and its class's once-assigned `self.X`), or flagcalls19._U."""
        from .attrflags27 import once_bound, read_allowed
        from .flagtruth import UNKNOWN as _U

        self.notes = []
        function = self._function(parents, where)
        local: frozenset = frozenset()
        node = function
        while node is not None:
            local |= self._local_names(node)
            node = self._function(parents, node)
        env: dict = {}
        if function is not None and not isinstance(function, ast.Lambda):
            bound = once_bound(function, where.lineno, self._stores(function))
            from .keptchecks34 import kept_values  # (`x.is_cuda` the run keeps meaning CUDA: False there, keptchecks34.py)
            for key, note in kept_values(self.run, j, [test, *bound.values()]).items():
                env[key] = False
                self.notes.append(note)
            for expr in [test, *bound.values()]:
                for n in ast.walk(expr):
                    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
                        value = self._attr(j, tree, parents, function, n.attr, used)
                        guard = self.guards.get((j, getattr(parents.get(id(function)), "name", ""), n.attr))
                        if value is not _U and read_allowed(guard, function, n):
                            env[f"self.{n.attr}"] = value
                            owner = parents.get(id(function))
                            place = self.where.get((j, getattr(owner, "name", ""), n.attr), "")
                            note = f"`self.{n.attr}` is {value!r} there, " + (
                                place if place.startswith("returned by") else
                                f"set {'at' if ' and at ' in place else 'once at'} {place}")
                            if note not in self.notes:
                                self.notes.append(note)
            from .capchains30 import member_values  # (`self.A.X`, A a member the class builds once: capchains30.py)
            for key, (value, note) in member_values(self, j, tree, parents, function, [test, *bound.values()],
                                                    used).items():
                env[key] = value
                if note not in self.notes:
                    self.notes.append(note)
            for name, expr in bound.items():
                if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(test)):
                    env[name] = self.run.value(j, expr, dict(env), local, 0, used)
                    if env[name] is not _U:
                        shown = " ".join(ast.unparse(expr).split())
                        self.notes.insert(0, f"`{name} = {shown[:60]}{'...' if len(shown) > 60 else ''}`")
        before = len(used)
        answer = self.run.truth(j, test, env, local, 0, used)
        from .attrstores32 import notes as _stores_notes  # (where `getattr(obj, "x", False)`'s stores are: attrstores32.py)
        self.notes.extend(n for n in _stores_notes(self.run, used[before:]) if n not in self.notes)
        return answer

    def dead(self, j: int, tree: ast.Module, parents: dict, node: ast.AST) -> Optional[str]:
        """The reason an NPU host never runs `node` (a gate around it), or None."""
        from .capchains30 import refused_branch as _refused_branch  # (a flag the constructor refuses: capchains30.py)
        from .flagtruth import UNKNOWN as _U
        from .flagtruth import always_exits as _always_exits
        from .keptchecks34 import decides as _kept_decides

        from .sourcereads34 import source_read as _source_read  # (`self.hash_source(..., C)`: sourcereads34.py)

        why = _source_read(parents, node)
        if why is not None:
            return why
        scope = next((sc for sc in self._skipped(j) if sc[0] <= node.lineno <= sc[1]), None)
        if scope is not None:
            from .testscopes import HELPER_NOTE
            why = scope[2].split(": ", 1)[1] if scope[2].startswith(HELPER_NOTE) else scope[2]
            return f"in a test an NPU host skips: `{' '.join(why.split())[:80]}`"
        child, current = node, parents.get(id(node))
        while current is not None and not isinstance(current, ast.Module):
            if isinstance(current, ast.If) and (child in current.body or child in current.orelse) \
                    and (not _chosen(current.test, parents, current, self._local_names)
                         or _kept_decides(self.run, j, current.test)):  # (a kept `x.is_cuda and ...`: keptchecks34.py)
                used: list = []
                truth = self.truth(j, tree, parents, current.test, current, used)
                if truth is not _U and truth == (child in current.orelse):
                    test = " ".join(ast.unparse(current.test).split())[:80]
                    told = f": {'; '.join(self.notes[:3])}" if self.notes else ""
                    return f"`{'not (' + test + ')' if truth else test}` is False there{told}"
            # (`f(...) if enable_x(batch) else None`: a conditional expression's branch, round-28 CC#23)
            if isinstance(current, ast.IfExp) and (child is current.body or child is current.orelse) \
                    and not _chosen(current.test, parents, current, self._local_names):
                used = []
                truth = self.truth(j, tree, parents, current.test, current, used)
                if truth is not _U and truth == (child is current.orelse) and (
                        self._flag_gated(j, current.test) or _refused_branch(self, j, parents, current.test, current)):
                    test = " ".join(ast.unparse(current.test).split())[:80]
                    told = f": {'; '.join(self.notes[:3])}" if self.notes else ""
                    return f"`{'not (' + test + ')' if truth else test}` is False there{told}"
            if isinstance(current, _DEFS) and any(child is stmt for stmt in current.body):
                top = child
                for stmt in current.body:
                    if stmt is top:
                        break
                    used = []
                    if isinstance(stmt, ast.If) and not stmt.orelse and _always_exits(stmt.body):
                        if self.truth(j, tree, parents, stmt.test, stmt, used) is True:
                            test = " ".join(ast.unparse(stmt.test).split())[:80]
                            return f"after `if {test}: {type(stmt.body[-1]).__name__.lower()}`, true there"
                    elif isinstance(stmt, ast.Assert) and self.truth(j, tree, parents, stmt.test, stmt, used) is False:
                        return f"after `assert {' '.join(ast.unparse(stmt.test).split())[:80]}`, false there"
            child, current = current, parents.get(id(current))
        from .importfirst33 import after_failing_import  # (the module stops at its own `import cutlass` first, the gates above aside: importfirst33.py)
        from .initfails34 import in_unbuilt_class  # (a method of a class whose `__init__` fails first there: initfails34.py)
        return after_failing_import(self, self.unit_module, j, tree, node) or in_unbuilt_class(self, j, tree, parents, node)

    def _flag_gated(self, j: int, test: ast.AST) -> bool:
        """A conditional expression's test that calls a function of the run whose body returns `FLAG
        and ...`, FLAG a module-level flag of its module false on an NPU host (`_is_cuda = is_cuda()`,
        the project's CUDA predicate): the gate is the platform's. A probe of an optional package
        (`is_available()` answering a try-import) is not: a user may install it (tests/test_h116.py)."""
        from .flagtruth import UNKNOWN as _U

        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):  # (`enable_x(b) and self.y`)
            return any(self._flag_gated(j, part) for part in test.values)
        if not (isinstance(test, ast.Call) and isinstance(test.func, ast.Name)):
            return False
        target = self.run.lookup(j, test.func.id)
        if target is None or target[0] != "def":
            return False
        body = [s for s in target[1].body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if not (len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.BoolOp)
                and isinstance(body[0].value.op, ast.And) and isinstance(body[0].value.values[0], ast.Name)):
            return False
        value = self.run.value(target[2], body[0].value.values[0], {}, frozenset(), 0, [])
        return value is not _U and not value

    def _skipped(self, j: int) -> list:
        """testscopes' test scopes of module j skipped on an NPU host (optparams20's reading)."""
        if j not in self.scopes:
            from .testscopes import cuda_only_test_scopes

            data = self.run.text_of(j) or b""
            try:
                self.scopes[j] = cuda_only_test_scopes(data.decode("utf-8", "replace")) \
                    if b"skip" in data.lower() else []
            except RecursionError:
                self.scopes[j] = []
        return self.scopes[j]

    # ------------------------------------------------------------------ every reference of a unit
    def _index(self, j: int, tree: ast.Module):
        """(parents, {name: [Name/Attribute nodes]}, {strings}) of module j, annotations and
        `__all__` left out; one walk each."""
        if j not in self.indexes:
            parents = astcache.parents(tree)
            skip = _annotations(tree)
            refs: dict = {}
            strings: set = set()
            for node in astcache.walk(tree):
                if id(node) in skip:
                    continue
                if isinstance(node, ast.Name):
                    refs.setdefault(node.id, []).append(node)
                elif isinstance(node, ast.Attribute):
                    refs.setdefault(node.attr, []).append(node)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                    strings.add(node.value)
            self.indexes[j] = (parents, refs, strings)
        return self.indexes[j]

    def naming(self, name: str, but: int = -1, passes=None):
        """(j, tree) of each Python file of the run whose bytes name `name` (module `but` aside), the
        tree the run holds (None: it does not parse, the caller decides); the files every reading
        of a name's references walks (this walk, and its subclasses' own questions). `passes(j)`:
        true for a file to leave out unparsed (attrrefs31.unreferring)."""
        word = name.encode()
        for j, result in enumerate(self.run.results):
            if j != but and result.relpath.endswith(".py") and word in (self.run.text_of(j) or b"") \
                    and not (passes is not None and passes(j)):
                yield j, self.run.tree(j)

    def sites(self, i: int, unit: ast.AST, depth: int = 0, seen: frozenset = frozenset()) -> Optional[list]:
        """[(module, "path:line (why)")] of every reference of the run to `unit` of module i, each
        in code an NPU host does not run; None where one may run there."""
        key = (i, unit.name)
        if key in seen:
            return []
        if depth == 0 and key in self.memo:
            return self.memo[key]
        result = None if depth > _DEPTH else self._sites(i, unit, depth, seen | {key})
        if depth == 0:
            self.memo[key] = result
        return result

    def _sites(self, i: int, unit: ast.AST, depth: int, seen: frozenset) -> Optional[list]:
        from .attrflags27 import instance_attribute, shadowed
        from .attrrefs31 import foreign, unreferring
        from .capflows29 import may_look_up
        from .instances29 import dead_strings
        from .optobjects30 import another_unit

        run = self.run
        name = unit.name
        found: list = []
        passes = (lambda j: unreferring(self, i, j, name)) if self.skip_locals else None
        for j, tree in self.naming(name, passes=passes):  # (files holding only other objects' `name`: attrrefs31.py)
            if tree is None:
                return None
            result = run.results[j]
            if j != i and any(isinstance(s, (*_DEFS, ast.ClassDef)) and s.name == name for s in tree.body):
                continue  # (its own by that name)
            if j != i and another_unit(run, j, tree, name, i):
                continue  # (it imports another module's unit by that name: optobjects30.py)
            parents, refs, strings = self._index(j, tree)
            side = self.test_file(result.relpath)
            if name in strings and not side and may_look_up(run.text_of(j), run.results[i].relpath, j == i) \
                    and not dead_strings(self, j, tree, parents, name):
                # (named in a string: loaded some other way; only where the name may be looked up,
                # capflows29.may_look_up, and not a string inside dead code, instances29.py)
                return None
            from .kvchoice31 import aliased
            more = aliased(run, i, j, tree, parents, refs, name)  # (`from M import name as other`: kvchoice31.py)
            if more is None:
                return None
            for node in [*refs.get(name, ()), *more]:
                if self.skip_locals and (isinstance(node, ast.Name) and shadowed(node, parents, self.shadows)
                                         or instance_attribute(node)):
                    continue  # (a local of its function by that name, or `self.X`: attrflags27.py)
                if self.skip_locals and foreign(self, i, j, node):
                    continue  # (`args.warmup` in a file naming neither the unit's module nor a re-exporter: attrrefs31.py)
                if not isinstance(node.ctx, ast.Load):
                    if side:
                        continue  # (a test's own name, a monkeypatch target)
                    return None
                if j == i and _inside(node, unit, parents):
                    continue  # (its own recursion, `self.method()` inside the class)
                self.unit_module = i  # (the referenced unit's module, for importfirst33.py)
                why = self.dead(j, tree, parents, node)
                self.unit_module = None
                if why is None and isinstance(unit, ast.ClassDef):  # (`self.A = C()` read only where dead: instances29.py)
                    from .instances29 import unread_instance
                    why = unread_instance(self, j, tree, parents, node, unit)
                if why is not None:
                    found.append((j, f"{result.relpath}:{node.lineno} ({why})"))
                    continue
                spared = self.live_reference(j, result.relpath, node, parents, side)
                if spared is not None:
                    found.append(spared)
                    continue
                from .dictreach32 import dict_units
                through = dict_units(self, j, tree, parents, node, _unit)  # (a private registry's value, a call fed by a private dict's entry: dictreach32.py)
                if through is not None:
                    for outer in dict.fromkeys(through):
                        inner = None if outer is unit else self.sites(j, outer, depth + 1, seen)
                        if inner is None:
                            return None
                        found.extend(inner)
                    continue
                outer, step = _unit(tree, node.lineno), 1
                if outer is None:  # (`direct_register_custom_op("op", f)`: reached through `torch.ops.<ns>.op`: customops32.py)
                    from .customops32 import op_sites
                    registration, inner = op_sites(self, j, tree, parents, node, depth, seen, (_unit, _inside))
                    if registration:
                        if inner is None:
                            return None
                        found.extend(inner)
                        continue
                if outer is None:  # (`class Sub(Base):`: the base runs where the subclass is built, one class: kvchoice31.py)
                    from .kvchoice31 import subclass_of
                    outer, step = subclass_of(tree, parents, node), 0
                if outer is None or outer is unit:
                    return None
                inner = None
                if isinstance(outer, ast.ClassDef):  # (through the method's own calls first: methods29.py)
                    from .methods29 import method_sites
                    inner = method_sites(self, j, tree, parents, node, outer, depth, seen, (_unit, _inside))
                if inner is None:  # (a Triton helper called inside another kernel of its module costs no step: kvchoice31.py)
                    from .kvchoice31 import same_program
                    inner = self.sites(j, outer, depth + (0 if j == i and self.free_program and same_program(unit, outer, node, parents) else step), seen)
                if inner is None:
                    return None
                found.extend(inner)
        if found and self.keep_public and _public_api(run.results[i].relpath, name):
            from .importgates import is_test

            if all(is_test(run.results[j].relpath) for j, _s in found):
                return None  # (a library's public function only skipped tests call: its users call it too)
        return found or None

    # ------------------------------------------------------------------ hooks (testcallers27.py)
    skip_locals = True  # (False: testcallers27.py reads a local or `self.X` by the unit's name as a reference)
    free_program = False  # (True: testcallers27.py follows a kernel's own module's kernels and launcher without a step, kvchoice31.py)

    def test_file(self, relpath: str) -> bool:
        """A file whose live references `live_reference` may spare (tests and benchmarks, policy P2):
        there a string naming the unit, or a store of its name, is no reference. None here."""
        return False

    def live_reference(self, j: int, relpath: str, node: ast.AST, parents: dict, test_file: bool) -> Optional[tuple]:
        """An entry to add to the sites for a reference an NPU host may run (module j, `test_file`:
        test_file(relpath)) that does not keep the unit reached, or None: it is followed to the unit
        holding it. None here (testcallers27.py collects the live references of tests)."""
        return None


_NOT_LIBRARY = frozenset({"benchmarks", "benchmark", "examples", "example", "tools", "scripts", "tests", "test"})


def _public_api(relpath: str, name: str) -> bool:
    """A public function or class of a library module (not a test, benchmark, example, tool or
    script; no `_` name): the project's users may call it, so a skipped test being its only caller
    in the run says nothing about an NPU host (accelerate's `load_and_quantize_model`)."""
    parts = relpath.split("/")
    return not name.startswith("_") and not any(p in _NOT_LIBRARY for p in parts[:-1]) \
        and not parts[-1].startswith(("test_", "bench")) and not parts[-1].endswith("_test.py")


def _chosen(test: ast.AST, parents: dict, where: ast.AST, local_names=None) -> bool:
    """The test calls a method of a parameter or local of its function (`runner_backend.is_deep_gemm()`,
    `backend.is_cuda()`): a value a caller or a user option chooses, not decided here (`self.`
    and module-level names are). `local_names`: flagtruth.local_names, or a memo of it."""
    from .flagtruth import local_names as _locals

    names_of = local_names or _locals
    node = parents.get(id(where))
    while node is not None and not isinstance(node, (*_DEFS, ast.Lambda)):
        node = parents.get(id(node))
    if node is None:
        return False
    local = names_of(node) - {"self", "cls"}
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
               and n.func.value.id in local for n in ast.walk(test))


def _inside(node: ast.AST, unit: ast.AST, parents: dict) -> bool:
    current = parents.get(id(node))
    while current is not None:
        if current is unit:
            return True
        current = parents.get(id(current))
    return False


def lower_units(results: list, text_of, candidates, open_finding, start, reason) -> list:
    """The results, with each open finding (`open_finding`) of the `candidates` (indices of .py
    results) that lies in a function or class body lowered by flagcalls19.lower to what
    `reason(lookup, i, unit)` says of its unit (None: kept). `start()` gives (the flagcalls19 run,
    the lookup `reason` asks) on the first file that needs them. The per-file walk shared by this
    module's review and callees22.py."""
    from .flagcalls19 import lower_result as _lower_result

    state = None
    out = list(results)
    for i in candidates:
        result = results[i]
        data = text_of(i)
        if not data:
            continue
        lines_b = data.split(b"\n")
        places = [n for f in result.findings if open_finding(f) for n in (f.line, *(ln for ln, _c, _s in f.also))]
        if not any(0 < n <= len(lines_b) and lines_b[n - 1][:1] in (b" ", b"\t") for n in places):
            continue  # (module-level code only: no unit holds it)
        tree = astcache.parse(data)
        if tree is None:
            continue
        if state is None:
            state = start()
        run, lookup = state
        tree = run.trees.setdefault(i, tree)  # (the tree the run's lookups hold: nodes compared by identity)

        def reason_of(line: int, tree=tree, i=i) -> Optional[str]:
            unit = _unit(tree, line)
            return None if unit is None else reason(lookup, i, unit)

        out[i] = _lower_result(result, open_finding, reason_of)
    return out


def review(results: list, paths: dict) -> list:
    """The results, with the report-only places of this module's docstring lowered to named scopes."""
    from .flagcalls19 import Run as _Run
    from .flags16 import BRANCH
    from .importgates import is_test
    from .modpaths import RunTexts, open_python
    from .moot import is_open as open_finding

    def reason(gates, i: int, unit) -> Optional[str]:
        from .sourcereads34 import SOURCE_READ

        found = gates.sites(i, unit)
        # (one source read, `self.hash_source(..., C)`, stands for its reader's callers in other
        # modules, which the walk no longer follows: sourcereads34.py)
        if not found or not any(j != i or SOURCE_READ in s for j, s in found):
            return None
        found = sorted(found, key=lambda item: (is_test(item[1].split(":", 1)[0]), SOURCE_READ in item[1]))  # (the library's gates first)
        shown = "; ".join(s for _j, s in found[:2]) + (f"; and {len(found) - 2} more" if len(found) > 2 else "")
        return f"{BRANCH}: `{unit.name}` is reached only from code an NPU host does not run: {shown}"

    def start():
        run = _Run(results, text_of)
        return run, _Gates(run)

    text_of = RunTexts(results, paths)
    candidates = open_python(results, open_finding)
    return lower_units(results, text_of, candidates, open_finding, start, reason)


# (public for callees22.py: the same walk over a unit's references, with more verdicts of the run)
Gates = _Gates
public_api = _public_api  # (publichelpers27.py: the functions policy P3 lowers)
unit_of = _unit
NOT_LIBRARY = _NOT_LIBRARY  # (testcallers27.py)
inside = _inside
