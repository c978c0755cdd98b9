"""CUDA-only modules that only deferred, name-selected or guarded imports load (issue #16, round 21).

A module that imports a CUDA-only package unguarded at module level (NPU911: `from sgl_kernel
import ...`, `import cutlass.cute`; NPU910: `import triton` above its kernels) is reported as an
error "imported unguarded at module level, so the module fails to import where it is not
installed". That is true of the module, and it matters where the package's own import chain loads
it: then `import pkg` fails on an NPU host. Round-21 audits (BF#17, BF#25, BF#39, BH#31) found
modules that no such chain reaches:

* Triton kernel modules loaded only through a package `__init__` that only a backend module loads,
  which only a function imports lazily, under `if flash_impl_name == "FA3":` (a name-selected
  branch), after the API module's capability gate;
* a vendored CuTe-DSL package whose `__init__` imports `cutlass.cute`, whose only importer wraps
  it in `try: ... except Exception: f = None`;
* an attention backend module imported only inside `@register_attention_backend("fa3")` creators
  and methods that a dict keyed by backend names selects (`{"fa3": self._create_fa3_backend}`).

`review` (whole run, from runplan.whole_run_passes after the folds) decides per import site of the
module, test files aside (a test is no runtime importer), how the site loads it:

* `guarded`: at module level inside a `try` whose handlers catch ImportError (or Exception, or
  everything) and none re-raises: the importer degrades (binds the names to None, sets a flag);
* `selected`: inside a function, under an `if` of that function that compares a name with a
  string (`impl == "FA3"`, not a device or communication-backend word, nor the default of the
  parameter it compares) or has a plain conjunct reading a flag False by default (a field
  `enable_x: bool = False` of a class body of the run, never `= True` there nor a method's
  name, read on another object than `self`; or the function's own parameter defaulting to
  False), or inside a `try` there that catches the failure without re-raising; or in a function that a name selects: decorated by a registry call with a string
  (`@register_backend("fa3")`), or referenced in its file only as values of a dict display under
  string keys (`{"fa3": self._create_fa3_backend}`);
* `typing`: under `if TYPE_CHECKING:` (never at run time);
* `eager`: at module level (class bodies and ordinary `if`s included), or in a `try` whose
  handler raises; and `unknown`: in any other function (which a default path may call). Either
  runs whenever the importer is loaded there: the importer's own sites decide, a few steps up, and
  a default-loaded importer keeps the finding.

A module is also loaded only so when its parent package's `__init__` is (Python runs it first); a
package `__init__`'s sites are the imports of it or any of its submodules from outside the
package. A module with no library importer (an entry point a user imports), one whose dotted name
a library string holds (a dynamic import), or one any site of which is unknown or eager from a
default-loaded importer keeps its error. When every way in is guarded or selected, the finding
becomes info: the "imported unguarded" clause goes and the message says what really happens (the
package imports on an NPU host; only selecting the feature, or calling the degraded function,
fails there) and names the sites. A finding whose message names a fold of files elsewhere
(another folder's paths) is left as it is, and one that folds its folder's modules
(importfolders.py) only when it is the folder's `__init__` (every folded module is then loaded
through it). Nothing is dropped or scoped: the module does fail to import on an NPU host, and a
user who selects the feature there meets it. The ways that lie in a backend the project's NPU
defaults never select (dispatch.gates) are named apart, after the open ones (npudefaults24.py).
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
from collections import defaultdict
from typing import Optional

from . import astcache
from .enumchoices29 import built_only_when_selected, option_choices, predicates, selection as enum_selection
from .tritonguards import UNGUARDED, catches_import_errors, parents, run_imports

CODES = ("NPU910", "NPU911")
LOADED_ONLY = ("the module fails to import where {package} is missing, but no import an NPU host runs by "
               "default loads it: it is loaded only {how}: importing the package works on an NPU host, "
               "and only {what} fails there")
_MAX_DEPTH = 8
_MAX_SHOWN = 3
# strings compared in a branch that picks a device or a communication backend, not a feature
_DEVICE_WORDS = frozenset(("cuda", "cpu", "npu", "xpu", "hip", "rocm", "mps", "gpu", "meta", "nccl", "hccl",
                           "gloo", "mpi", "auto", "default", "none", ""))
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_PATH = re.compile(r"[\w.-]+(?:/[\w.-]+)+\.py")
_BOOL_FIELD = re.compile(rb"^[ \t]+\w+[ \t]*:[ \t]*bool[ \t]*=[ \t]*False[ \t]*(?:#[^\n]*)?$", re.MULTILINE)
_PACKAGE = re.compile(r"import (?:of|from) `([\w.]+)`")


def _target(finding) -> bool:
    return (finding.code in CODES and not finding.fixable and finding.cell is None
            and finding.severity != "info" and UNGUARDED in finding.message)


@dataclasses.dataclass(frozen=True)
class Way:
    """An import site that loads the module only when selected or in a degrading `try`."""
    relpath: str
    line: int
    kind: str  # "guarded" or "selected"
    how: str


def _is_type_checking(test: ast.AST) -> bool:
    return (astcache.dotted(test) or "").rsplit(".", 1)[-1] == "TYPE_CHECKING"


def _handler_raises(handler: ast.ExceptHandler) -> bool:
    return any(isinstance(n, ast.Raise) for n in handler.body)


def _bound_names(statement: ast.Try) -> list[str]:
    """The names the handlers bind (to None, a flag): what the importer degrades to."""
    out = []
    for handler in statement.handlers:
        for node in handler.body:
            if isinstance(node, ast.Assign):
                out.extend(t.id for t in node.targets if isinstance(t, ast.Name) and not t.id.startswith("_e"))
    return list(dict.fromkeys(out))


def _selection(test: ast.AST, function: Optional[ast.AST]) -> Optional[str]:
    """`name == "FA3"` (or `in ("a", "b")`) comparing a name with a feature's string: the text."""
    for node in ([test.values[0]] if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else []) + [test]:
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.In))):
            continue
        left, right = node.left, node.comparators[0]
        if isinstance(left, ast.Constant):
            left, right = right, left
        words = [right.value] if isinstance(right, ast.Constant) else [
            e.value for e in getattr(right, "elts", []) if isinstance(e, ast.Constant)]
        if not words or not all(isinstance(w, str) and w.lower() not in _DEVICE_WORDS for w in words):
            continue
        if not isinstance(left, (ast.Name, ast.Attribute)):
            continue
        if isinstance(left, ast.Name) and function is not None and _default_of(function, left.id) in words:
            continue  # (the parameter's default selects it: a default path)
        return " ".join(ast.unparse(node).split())[:70]
    return None


def _opt_in(test: ast.AST, function: ast.AST, false_flags: frozenset) -> Optional[str]:
    """A plain conjunct of the test (not negated) that reads a flag False by default: a field
    `flag: bool = False` of a class of the run read on another object (`server_args.enable_x`;
    `self.x` is the instance's own state, set anywhere), or the function's own parameter
    defaulting to False."""
    for node in test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]:
        if isinstance(node, ast.Attribute) and node.attr in false_flags \
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            return astcache.dotted(node) or node.attr
        if isinstance(node, ast.Name) and _default_of(function, node.id) is False:
            return node.id
    return None


def _default_of(function: ast.AST, name: str):
    args = function.args
    positional = args.posonlyargs + args.args
    for arg, default in zip(positional[len(positional) - len(args.defaults):], args.defaults):
        if arg.arg == name and isinstance(default, ast.Constant):
            return default.value
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        if arg.arg == name and isinstance(default, ast.Constant):
            return default.value
    return None


def _registered(function: ast.AST) -> Optional[str]:
    """`@register_backend("fa3")`: the decorator's text, for a function a registry selects by name."""
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call) and decorator.args and isinstance(decorator.args[0], ast.Constant) \
                and isinstance(decorator.args[0].value, str):
            return f'@{astcache.dotted(decorator.func) or "..."}("{decorator.args[0].value}")'
    return None


def _dict_selected(tree: ast.Module, name: str) -> Optional[str]:
    """The key of a string-keyed dict display that holds the function (`"fa3": self._create_fa3`),
    where every reference to it in the file is such a value (or its own definition)."""
    keys, other = [], False
    parent = None
    for node in astcache.walk(tree):
        ref = (isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name)
        if not ref:
            continue
        if parent is None:
            parent = parents(tree)
        key = _dict_key(node, parent)
        if key is None:
            other = True
            break
        keys.append(key)
    return None if other or not keys else keys[0]


def _dict_key(node: ast.AST, parent: dict) -> Optional[str]:
    child, up = node, parent.get(id(node))
    while isinstance(up, ast.IfExp) and child is not up.test:
        child, up = up, parent.get(id(up))
    if isinstance(up, ast.Dict):
        for key, value in zip(up.keys, up.values):
            if value is child and isinstance(key, ast.Constant) and isinstance(key.value, str):
                return key.value
    return None


def classify(tree: ast.Module, line: int, false_flags: frozenset = frozenset(),
             choices: Optional[dict] = None) -> tuple[str, str]:
    """(kind, how) of the import statement(s) at `line`: "typing", "guarded", "selected", "eager"
    or "unknown" (see the module's doc); `choices`: the run's enum predicates (enumchoices29.py)."""
    statements = [n for n in astcache.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno == line]
    if not statements:
        return "unknown", ""
    parent = parents(tree)
    kinds = {_classify(tree, statement, parent, false_flags, choices or {}) for statement in statements}
    return next(iter(kinds)) if len(kinds) == 1 else ("unknown", "")


def _classify(tree: ast.Module, node: ast.AST, parent: dict, false_flags: frozenset,
              choices: Optional[dict] = None) -> tuple[str, str]:
    chain = []
    child, up = node, parent.get(id(node))
    while up is not None:
        chain.append((child, up))
        child, up = up, parent.get(id(up))
    functions = [up for _c, up in chain if isinstance(up, _FUNCTIONS)]
    for child, up in chain:
        if isinstance(up, ast.If) and child in up.body and _is_type_checking(up.test):
            return "typing", ""
    if functions:
        for child, up in chain:
            if isinstance(up, _FUNCTIONS + (ast.Lambda,)):
                break
            if isinstance(up, ast.Try) and child in up.body and catches_import_errors(up) \
                    and not any(_handler_raises(h) for h in up.handlers):
                return "selected", f"in `{functions[0].name}`, inside a `try` that catches the failure"
            if isinstance(up, ast.If) and child in up.body:
                found = _selection(up.test, functions[0])
                if found:
                    return "selected", f"in `{functions[0].name}` under `{found}`"
                chosen = enum_selection(up.test, choices or {})  # (an enum member a user chooses: enumchoices29.py)
                if chosen:
                    return "selected", f"in `{functions[0].name}` {chosen}"
                flag = _opt_in(up.test, functions[0], false_flags)
                if flag:
                    return "selected", f"in `{functions[0].name}` under the opt-in `{flag}` (False by default)"
        for function in functions:
            registered = _registered(function)
            if registered:
                return "selected", f"in `{function.name}`, registered as `{registered}`"
        for function in functions:
            key = _dict_selected(tree, function.name)
            if key is not None:
                return "selected", f'in `{function.name}`, chosen by the "{key}" entry of a dict keyed by name'
        return "unknown", ""
    for child, up in chain:
        if isinstance(up, ast.Try) and child in up.body and catches_import_errors(up):
            if any(_handler_raises(h) for h in up.handlers):
                return "eager", ""
            bound = _bound_names(up)
            caught = ", ".join(dict.fromkeys((astcache.dotted(h.type) or "...") if h.type is not None else "everything"
                                             for h in up.handlers))
            return "guarded", (f"in a module-level `try`/`except {caught}`"
                               + (f" that binds `{'`, `'.join(bound[:3])}` instead" if bound else ""))
    return "eager", ""


class _Reach:
    """How each module of the run is loaded (see the module's doc)."""

    def __init__(self, results, paths) -> None:
        from .importgates import is_test
        from .modpaths import ImportIndex

        self.results = results
        self.python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
        self.library = [i for i in self.python if not is_test(results[i].relpath)]
        imports, self.text_of = run_imports(results, self.python, paths)
        index = ImportIndex(results, self.python)
        self.sites: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for i in self.library:
            for j, line in index.files(imports[i], i):
                self.sites[j].append((i, line))
        self.by_stem = {results[i].relpath[:-3]: i for i in self.python}
        self.trees: dict[int, Optional[ast.Module]] = {}
        self.memo: dict[int, Optional[list[Way]]] = {}
        self.named: dict[int, bool] = {}
        self.cycles = 0
        self._false_flags: Optional[frozenset] = None
        self._choices: Optional[dict] = None

    def choices(self) -> dict:
        """The run's enum predicates (`is_ngram` -> "SpeculativeAlgorithm.NGRAM": enumchoices29.py)."""
        if self._choices is None:
            def trees(word: bytes):
                return (t for t in (self.tree(i) for i in self.library if word in (self.text_of(i) or b""))
                        if t is not None)

            self._choices = predicates(trees(b"Enum"), option_choices(trees(b"choices")))
        return self._choices

    def naming(self, name: str):
        """(relpath, tree) of the library files whose text holds `name`."""
        for i in self.library:
            if name.encode() in (self.text_of(i) or b""):
                tree = self.tree(i)
                if tree is not None:
                    yield self.results[i].relpath, tree

    def built_when_selected(self, tree: ast.Module, line: int) -> Optional[tuple[str, int, str]]:
        """An import in a method of a class the run builds only under a selection (enumchoices29.py)."""
        def selects(test: ast.AST, function: ast.AST) -> Optional[str]:
            found = _selection(test, function)
            return f"under `{found}`" if found else enum_selection(test, self.choices())

        return built_only_when_selected(tree, line, self.naming, selects, parents)

    def false_flags(self) -> frozenset:
        """Fields declared `name: bool = False` in a class body of the run's library files, never
        `= True` there nor a method's name (a property)."""
        if self._false_flags is None:
            off, on = set(), set()
            for i in self.library:
                data = self.text_of(i) or b""
                if not _BOOL_FIELD.search(data):
                    continue
                tree = self.tree(i)
                for node in astcache.walk(tree) if tree is not None else ():
                    if not isinstance(node, ast.ClassDef):
                        continue
                    for statement in node.body:
                        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) \
                                and isinstance(statement.value, ast.Constant) and isinstance(statement.value.value, bool):
                            (on if statement.value.value else off).add(statement.target.id)
                        elif isinstance(statement, _FUNCTIONS):
                            on.add(statement.name)
            self._false_flags = frozenset(off - on)
        return self._false_flags

    def tree(self, i: int) -> Optional[ast.Module]:
        if i not in self.trees:
            data = self.text_of(i)
            self.trees[i] = astcache.parse(data) if data is not None else None
        return self.trees[i]

    def parent_package(self, i: int) -> Optional[int]:
        """The nearest package `__init__` above file i that Python runs before it."""
        folder = os.path.dirname(self.results[i].relpath)
        if os.path.basename(self.results[i].relpath) == "__init__.py":
            folder = os.path.dirname(folder)
        while folder:
            j = self.by_stem.get(f"{folder}/__init__")
            if j is not None:
                return j
            folder = os.path.dirname(folder)
        return None

    def named_in_a_string(self, i: int) -> bool:
        """The module's dotted or slashed name (its folder and name) in a string of a library file."""
        if i not in self.named:
            relpath = self.results[i].relpath[:-3]
            parts = relpath.split("/")
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found = False
            if parts:
                stem = parts[-1].encode()
                tail = re.escape(parts[-2].encode()) + rb"[./]" if len(parts) > 1 else b""
                quoted = re.compile(rb"[\"'][\w./:-]*\b" + tail + re.escape(stem) + rb"\b[\w./:-]*[\"']")
                found = any(j != i and stem in (self.text_of(j) or b"") and quoted.search(self.text_of(j) or b"")
                            for j in self.library)
            self.named[i] = found
        return self.named[i]

    def ways(self, i: int, stack: Optional[set] = None, depth: int = 0) -> Optional[list[Way]]:
        """The guarded or selected sites every load of file i goes through, or None where a
        default import chain (or an unknown site) loads it."""
        if i in self.memo:
            return self.memo[i]
        stack = stack if stack is not None else set()
        if i in stack:
            self.cycles += 1
            return []  # (a cycle adds no way in: the others decide)
        if depth > _MAX_DEPTH or self.named_in_a_string(i):
            return None
        stack.add(i)
        before = self.cycles
        try:
            result = self._ways(i, stack, depth)
        finally:
            stack.discard(i)
        if result is None or self.cycles == before:  # (a result that assumed a cycle member is not kept)
            self.memo[i] = result
        return result

    def _ways(self, i: int, stack: set, depth: int) -> Optional[list[Way]]:
        package = self.parent_package(i)
        if package is not None:
            through = self.ways(package, stack, depth + 1)
            if through:
                return through
        relpath = self.results[i].relpath
        inside = os.path.dirname(relpath) + "/" if relpath.endswith("__init__.py") else None
        found: list[Way] = []
        counted = False
        for k, line in sorted(set(self.sites.get(i, ()))):
            if inside is not None and self.results[k].relpath.startswith(inside):
                continue  # (a module of the package runs after its __init__)
            tree = self.tree(k)
            if tree is None:
                return None
            kind, how = classify(tree, line, self.false_flags(), self.choices())
            if kind == "typing":
                continue
            counted = True
            built = self.built_when_selected(tree, line) if kind == "unknown" else None
            if built is not None:  # (a class built only when a name or an enum choice selects it)
                found.append(Way(built[0], built[1], "selected", built[2]))
                continue
            if kind in ("guarded", "selected"):
                found.append(Way(self.results[k].relpath, line, kind, how))
                continue
            through = self.ways(k, stack, depth + 1)
            if through is None:
                return None
            found.extend(through)
        if not counted or not found:
            return None
        return list(dict.fromkeys(found))


def _folds_elsewhere(finding, relpath: str) -> bool:
    """The message names files outside the finding's folder (another pass folded them in)."""
    from .importfolders import FOLDED

    folder = os.path.dirname(relpath) + "/"
    if FOLDED in finding.message and not relpath.endswith("__init__.py"):
        return True
    return any(not p.startswith(folder) for p in _PATH.findall(finding.message) if p != relpath)


def _message(finding, ways: list[Way], closed: Optional[list] = None) -> str:
    from .npudefaults24 import closed_note

    shown = [f"{w.relpath}:{w.line} {w.how}" for w in ways[:_MAX_SHOWN]]
    if len(ways) > _MAX_SHOWN:
        shown.append(f"and {len(ways) - _MAX_SHOWN} more")
    if closed:  # (ways in backends the NPU defaults never select: npudefaults24.py)
        shown.append(f"ways the NPU defaults close: {closed_note(closed)}")
    selected = any(w.kind == "selected" for w in ways)
    guarded = any(w.kind == "guarded" for w in ways)
    how = ("through imports that run only when a feature is selected (by a name or an opt-in flag), or that degrade when they fail"
           if selected and guarded else
           "through imports that run only when a feature is selected (by a name or an opt-in flag)" if selected else
           "through imports in a `try` that degrades when they fail")
    what = ("selecting that feature (or calling what the importer binds in its place)" if selected and guarded else
            "selecting that feature" if selected else "calling what the importer binds in its place")
    named = _PACKAGE.search(finding.message)
    package = f"`{named.group(1)}`" if named else "the package"
    return (f"{finding.message.replace(UNGUARDED, '')} ({LOADED_ONLY.format(package=package, how=how, what=what)}: "
            f"{'; '.join(shown)})")


def review(results: list, paths: Optional[dict[str, str]] = None) -> list:
    """Lower the "imported unguarded" NPU910/NPU911 errors of modules only guarded or
    name-selected imports load to info (see the module's doc)."""
    from .importgates import is_test

    targets = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and not is_test(r.relpath)
               and any(_target(f) for f in r.findings)]
    if not targets:
        return results
    from .npudefaults24 import NOT_GONE, closed_note, decided_ways, split_ways

    reach = _Reach(results, paths or {})
    out, decided, scoped = list(results), None, []
    for i in targets:
        ways = reach.ways(i)
        if not ways:
            continue
        if decided is None:
            from .dispatch import gates
            from .modpaths import RunTexts

            decided = decided_ways(results, gates(results, reach.python, RunTexts(results, paths or {})))
        ways, closed = split_ways(ways, decided)
        relpath = results[i].relpath
        findings = [dataclasses.replace(f, severity="info", message=(
            _message(f, ways, closed) if ways else f"{f.message.replace(UNGUARDED, '')} ({NOT_GONE}: {closed_note(closed)})"))
            if _target(f) and not _folds_elsewhere(f, relpath) else f for f in results[i].findings]
        if findings != results[i].findings:
            out[i] = dataclasses.replace(results[i], findings=findings)
            if not ways:
                scoped.append(i)
    if scoped:
        from .moot import to_scopes

        for i, result in zip(scoped, to_scopes([out[i] for i in scoped])):
            out[i] = result
    return out
