"""An attribute every store of the run sets to a value false on an NPU host, read through
`getattr(obj, "name", <false>)` (issue #16, round-31 audit FA#27; flagcalls19.py's interpreter asks
this module, which imports none of the passes; its readers callgates21.py and the passes built on
it get the answer too).

    # minimax_m3/nvidia/sparse_attention_msa.py
    class MSAImpl:
        def __init__(self, ...):
            self.use_cutlass_decode = supports_cutlass_sparse_decode(...)   # `... and
                                        # current_platform.is_cuda() and is_device_capability_family(100)`

    # minimax_m3/nvidia/model.py (another module)
    def _allocate_query_fp8(self, qkv):
        if not getattr(self.impl, "use_cutlass_decode", False):
            return None
        return torch.empty(..., dtype=torch.float8_e4m3fn)                  # NPU913: never reached there

    # tests/.../test_msa_cutlass_sparse_decode.py (module-level skip unless capability family 100)
    impl.use_cutlass_decode = True                                          # a store an NPU host never runs

`getattr(obj, "name", D)` (D a false constant) is False on an NPU host when the run holds at least
one store `<value>.name = <expr>` whose value is worked out there (not a constant) and every store
of `.name` the run holds is a single-target assignment whose value flagcalls19 reads as false there,
or lies in a test scope testscopes finds skipped there. Anything else that may set the attribute
keeps the read unknown: a keyword `name=` anywhere (a constructor, `SimpleNamespace(name=True)`,
`dataclasses.replace`), a class-level `name = ...` (a class attribute, a dataclass field), a
`def name` (a property or method of that name), an augmented or tuple store, the string "name"
other than as `getattr`/`hasattr`'s second argument (`setattr`, `patch.object`, a dict key), a
file naming it that does not parse, or more than `_FILES` files naming it (a common word).

Kept (the nearest true cases, tests/test_h162.py): a store of True in a library function (or a
test not skipped there); a store of a value unknown there (a user option); a keyword argument or
`setattr` of that name somewhere in the run; a property of that name; a plain `obj.name` read (an
object the run does not build may carry it: only `getattr` with a false default says the attribute
is the project's own, maybe unset).

Cost: one scan of the run's bytes for `.name =` stores (`_stored`, once per run, when a getattr of
this shape is first read: about 2 s over vLLM's 5,600 files on this loaded machine); then per
attribute name asked (memoised), the files holding a store are read first (a name with none, or
with a store of a value not false there outside a skipped test, ends there), and only for the rest
one byte search of the run's files and one walk of each tree naming it (`_facts`, once per file).
On a copy of vLLM's model_executor/layers: 215 s before, 205 s after (noise; no finding changed).
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache
from .flagtruth import UNKNOWN as _U
from .flagtruth import local_names as _locals

_FILES = 40  # (files naming an attribute beyond which it is read as a common word: unknown)
KEY = " attribute stores"  # (the name flagcalls19's `used` records: a space, so _describe reads run.origin)


def getattr_value(run, i: int, node: ast.AST, local: frozenset, used: list):
    """The value of `getattr(obj, "name", <false constant>)` in module i on an NPU host (False), or
    UNKNOWN (this module's docstring); `used` gets the module of a store it read and its note."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and "getattr" not in local and len(node.args) == 3 and not node.keywords):
        return _U
    name, default = node.args[1], node.args[2]
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value.isidentifier()
            and isinstance(default, ast.Constant) and not default.value):
        return _U
    found = _stores_false(run, name.value)
    if found is None:
        return _U
    k, note, reads = found
    run.origin[(k, name.value + KEY)] = note
    used.append((k, name.value + KEY))
    used.extend(reads)
    return False


def _stores_false(run, name: str) -> Optional[tuple]:
    """(the module of a live store, the note naming the stores, the flags they read) where every
    store of `.name` in the run is false on an NPU host or never run there; None otherwise."""
    memo = vars(run).setdefault("_attrstores32", {})
    if name not in memo:
        memo[name] = None
        memo[name] = _decide(run, name)
    return memo[name]


def _decide(run, name: str) -> Optional[tuple]:
    from .importgates import is_test
    from .testscopes import cuda_only_test_scopes

    stored = _stored(run).get(name)
    if not stored or len(stored) > _FILES:
        return None  # (no `<value>.name = ...` in the run, or a common word)
    live: list = []  # ((module, store, function), ...) of the stores an NPU host may run
    skipped: list = []  # ("path:line", ...) of the stores in skipped tests
    # (the modules holding a store first, their values read; only then every module naming it)
    word = name.encode()
    order = sorted(stored, key=lambda k: is_test(run.results[k].relpath))  # (a library's stores first)
    for j in _then(order, lambda: [k for k, r in enumerate(run.results) if k not in stored
                                   and r.relpath.endswith(".py") and word in (run.text_of(k) or b"")]):
        if j is None:
            return None  # (more than _FILES modules name it: a common word)
        facts = _facts(run, j)
        if facts is None:
            return None
        scopes = None
        for kind, store, holder in facts.get(name, ()):
            if kind != "store":
                return None  # (a keyword, a class attribute, the name as a string, another store)
            if _false_there(run, j, store, holder):
                live.append((j, store, holder))
                continue
            if not is_test(run.results[j].relpath):
                return None
            if scopes is None:  # (a test's store of another value: only in a test an NPU host skips)
                text = (run.text_of(j) or b"").decode("utf-8", "replace")
                try:
                    scopes = cuda_only_test_scopes(text) if "skip" in text.lower() else []
                except RecursionError:
                    scopes = []
            if not any(first_line <= store.lineno <= last for first_line, last, _why in scopes):
                return None
            skipped.append(f"{run.results[j].relpath}:{store.lineno}")
    reads: list = []
    computed = None
    for j, store, function in live:
        used: list = []
        _false_there(run, j, store, function, used)
        if not isinstance(store.value, ast.Constant):
            reads.extend(used)
            computed = computed or (j, store)
    if computed is None:
        return None  # (only constants: nothing on the platform decides it)
    j, store = computed
    shown = " ".join(ast.unparse(store).split())
    shown = shown if len(shown) <= 70 else shown[:67] + "..."
    note = (f"`.{name}` is False there, as every store of the run: {run.results[j].relpath}:{store.lineno} "
            f"`{shown}`" + (f" and {len(live) - 1} more" if len(live) > 1 else "")
            + (f"; {len(skipped)} in tests an NPU host skips ({', '.join(skipped[:2])})" if skipped else ""))
    return j, note, reads


def _then(first: list, rest):
    """The modules of `first`, then those `rest()` gives (None instead where they are more than
    `_FILES`): the rest is asked only once every store of `first` is read false."""
    yield from first
    more = rest()
    if len(first) + len(more) > _FILES:
        yield None
        return
    yield from more


def _false_there(run, j: int, store: ast.Assign, function, used: Optional[list] = None) -> bool:
    """The value `store` (module j) assigns is false on an NPU host; `used` gets what it read."""
    local = _locals(function) if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) \
        else frozenset()
    return run.truth(j, store.value, {}, local, 0, [] if used is None else used) is False


_STORE = re.compile(rb"\.[ \t]*(\w+)[ \t]*=(?!=)")


def _stored(run) -> dict:
    """{name: {modules whose bytes hold `.name =`}} of the run, one scan of its files."""
    found = vars(run).get("_attrstores32_index")
    if found is None:
        found = vars(run)["_attrstores32_index"] = {}
        for j, r in enumerate(run.results):
            if r.relpath.endswith(".py"):
                for match in _STORE.finditer(run.text_of(j) or b""):
                    found.setdefault(match.group(1).decode(), set()).add(j)
    return found


def _facts(run, j: int) -> Optional[dict]:
    """{name: [(kind, node, holder)]} of module j, one walk per module (None: it does not parse):
    ("store", the `Assign`, the function or class holding it) for a single-target `<value>.name =
    ...`; ("other", node, None) for anything else that may set an attribute `name` (another store
    of `.name`, a keyword `name=`, a class-level `name = ...`, a `def name` (a property), the
    string "name" other than as a getattr/hasattr name)."""
    memo = vars(run).setdefault("_attrstores32_facts", {})
    if j in memo:
        return memo[j]
    tree = run.tree(j)
    if tree is None:
        memo[j] = None
        return None
    parents = astcache.parents(tree)
    facts: dict = {}
    for node in astcache.walk(tree):
        if isinstance(node, ast.keyword) and node.arg:
            facts.setdefault(node.arg, []).append(("other", node, None))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            if not _getattr_name(node, parents):
                facts.setdefault(node.value, []).append(("other", node, None))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            facts.setdefault(node.name, []).append(("other", node, None))  # (a property, a method)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            if isinstance(_holder(node, parents), ast.ClassDef):
                facts.setdefault(node.id, []).append(("other", node, None))
        elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            store = parents.get(id(node))
            if isinstance(store, ast.Assign) and store.targets == [node]:
                facts.setdefault(node.attr, []).append(("store", store, _holder(node, parents)))
            else:
                facts.setdefault(node.attr, []).append(("other", node, None))
    memo[j] = facts
    return facts


def _getattr_name(node: ast.AST, parents: dict) -> bool:
    """The string is the attribute name of a `getattr`/`hasattr` call (a read)."""
    call = parents.get(id(node))
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Name) \
        and call.func.id in ("getattr", "hasattr") and len(call.args) >= 2 and call.args[1] is node


def _holder(node: ast.AST, parents: dict) -> Optional[ast.AST]:
    """The function or class whose body holds `node` (None: module level)."""
    current = parents.get(id(node))
    while current is not None and not isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                           ast.Lambda, ast.ClassDef)):
        current = parents.get(id(current))
    return current


def notes(run, used: list) -> list:
    """The notes of the attribute stores an answer read (`used`: flagcalls19's), for a reason."""
    return [run.origin[(k, name)] for k, name in dict.fromkeys(used)
            if name and name.endswith(KEY) and (k, name) in run.origin]
