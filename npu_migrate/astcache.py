"""One `ast` parse of a file's bytes, shared by the passes that need it: the hot-slice reduction
(hotslice.py) before libcst, the scopes read after the engine (testscopes.py) and the whole-run
passes of runplan.py, each of which asks for the trees of the files it reads. Parsing is the
largest cost after libcst's own; a file is parsed once per process, not once per question.

The trees are kept by a digest of the text (not by the text itself), up to a budget of source bytes
(`BUDGET`: about 32 bytes of tree a byte of source, so 4 MiB of source hold about 130 MiB of
trees, under a tenth of a cold check of torch's peak), and only within `shared()`, which
runplan.py holds around the whole-run passes (the per-file engine, in its workers, keeps the last
two trees only, as before). The passes walk the run's files in the same order one after the
other, so once the budget is full the kept trees stay and a new text is only held among the last
two asked for (a least-recently-used cache smaller than the run would miss every time). On
torch/_inductor (wave 25, measured under load) the passes' parses fell from 4.3 to 2.2 a text with
4 MiB (1.6 with 12 MiB, for +20% peak RSS against +4%; +11% with the walks kept too). Sharing is safe because the passes only read
the trees (audited in wave 25: every `ast.NodeTransformer` of the tool works on a
`copy.deepcopy`, no pass assigns to a node's fields, the caches keyed by a node's `id` are per
pass or hold the node); `changed()` checks it after a run, for the tests."""

from __future__ import annotations

import ast
import contextlib
import hashlib
from collections import OrderedDict
from typing import Optional

BUDGET = 4 << 20  # bytes of source whose trees are kept (see the module's docstring)
_RECENT_SIZE = 2
_KEPT: dict[bytes, tuple[Optional[ast.Module], int]] = {}  # digest -> (tree, bytes of source), never evicted
_RECENT: OrderedDict[bytes, tuple[Optional[ast.Module], int]] = OrderedDict()  # the last two asked for
_held = 0
_keeping = False
_KEPT_IDS: set[int] = set()  # id() of the kept trees (their walks are kept with them: `_entry`)
_SEVERAL: frozenset = frozenset()  # digests of texts several files of the run hold (`shared`)


@contextlib.contextmanager
def shared(texts=()):
    """Within it, trees are kept up to `BUDGET` (the whole-run passes, runplan.run_engine); at its
    end they are all forgotten. Outside it (the per-file engine, its workers), the last two only.
    `texts`: the run's files' texts; one that several files hold is never kept, so that two files
    never share one tree (a pass may key what it learns of a file's functions by their `id`), as
    before the trees were shared."""
    global _keeping, _SEVERAL
    seen: set = set()
    several = {key for key in map(_digest, texts) if key in seen or seen.add(key)}
    outer, _keeping = _keeping, True
    outer_several, _SEVERAL = _SEVERAL, frozenset(several) | _SEVERAL
    try:
        yield
    finally:
        _keeping, _SEVERAL = outer, outer_several
        if not outer:
            clear()


def _digest(body) -> bytes:
    if isinstance(body, str):  # (a text, not its bytes: its own key, as the old cache had)
        return hashlib.blake2b(body.encode("utf-8", "surrogatepass"), digest_size=16, person=b"str").digest()
    return hashlib.blake2b(body, digest_size=16).digest()


def parse(body: bytes) -> Optional[ast.Module]:
    """The tree of `body` (UTF-8, no BOM), or None when it does not parse. Callers only read it:
    the same text gives the same tree to every pass of the process (within `shared()`), and
    always among the last two texts asked for (the two-tree cache this one grew from)."""
    global _held
    key = _digest(body)
    found = _RECENT.get(key)
    if found is not None:
        _RECENT.move_to_end(key)
    else:
        found = _KEPT.get(key)
        if found is None:
            try:
                tree: Optional[ast.Module] = ast.parse(body)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                tree = None
            found = (tree, len(body))
        _RECENT[key] = found
        while len(_RECENT) > _RECENT_SIZE:
            _RECENT.popitem(last=False)
    if _keeping and key not in _KEPT and key not in _SEVERAL and _held + found[1] <= BUDGET:
        _KEPT[key] = found
        _held += found[1]
        if found[0] is not None:
            _KEPT_IDS.add(id(found[0]))
    return found[0]


def clear() -> None:
    """Forget every kept tree (the end of a run that holds no more use for them; tests)."""
    global _held
    _KEPT.clear()
    _KEPT_IDS.clear()
    _RECENT.clear()
    _INDEXED.clear()
    _WALKS.clear()
    _held = 0


def held() -> tuple[int, int]:
    """(trees, bytes of their source) kept within the budget now."""
    return len(_KEPT), _held


def changed(texts) -> list[bytes]:
    """Of `texts` (bytes), those whose kept tree differs from a fresh parse (fields and positions):
    a pass changed a shared tree in place. For the tests: empty after every run."""
    out = []
    for body in texts:
        key = _digest(body)
        found = _KEPT.get(key) or _RECENT.get(key)
        if found is None or found[0] is None:
            continue
        tree = found[0]
        fresh = ast.parse(body)
        if ast.dump(tree, include_attributes=True) != ast.dump(fresh, include_attributes=True):
            out.append(body)
            continue
        entry = _WALKS.get(id(tree))
        if entry is not None and entry[0] is tree and (  # (and its kept walk: nodes, parents, by type)
                entry[1] != list(ast.walk(tree))
                or (entry[2] is not None and entry[2] != _parents_of(entry[1]))
                or any(found_ != [n for n in entry[1] if isinstance(n, types)] for types, found_ in entry[3].items())):
            out.append(body)
    return out


# ----------------------------------------------------------------------------- one walk per tree
# Most passes ask the same question of a whole module: each of its nodes, or the parent of one.
# `ast.walk` is a generator of about 1.7 microseconds a node; a file's passes walked its module
# about fifteen times (torch's tree: 40 million nodes on a cold run). The nodes and the parents of
# the last few modules are kept, in `ast.walk`'s order, with the tree itself (so its id stays its
# own). Callers only read them; a pass that changes a tree works on a copy (`copy.deepcopy`).
# Within `shared()`, the walks of the kept trees are kept with them (about a fifth of a tree's
# memory more: the passes alternate between modules, and the one-module index computed the parents
# of torch/_inductor's modules about 2,000 times for its 219 texts, a third of a profiled cold run).
_INDEX_SIZE = 1
_INDEXED: OrderedDict[int, list] = OrderedDict()  # id(tree) -> [tree, nodes, parents, {types: nodes}]
_WALKS: dict[int, list] = {}  # the same, of the kept trees (within `shared()`)


def _parents_of(nodes: list) -> dict:
    return {id(child): node for node in nodes for child in ast.iter_child_nodes(node)}


def _entry(tree: ast.Module) -> list:
    key = id(tree)
    entry = _WALKS.get(key)
    if entry is not None and entry[0] is tree:
        return entry
    entry = _INDEXED.get(key)
    if entry is not None and entry[0] is tree:
        _INDEXED.move_to_end(key)
        return entry
    entry = [tree, list(ast.walk(tree)), None, {}]
    if _keeping and key in _KEPT_IDS:
        _WALKS[key] = entry
        return entry
    _INDEXED[key] = entry
    while len(_INDEXED) > _INDEX_SIZE:
        _INDEXED.popitem(last=False)
    return entry


def walk(node: ast.AST):
    """The nodes `ast.walk(node)` gives, in its order; for a module, computed once and shared
    (a list: do not change it)."""
    if not isinstance(node, ast.Module):
        return ast.walk(node)
    return _entry(node)[1]


def nodes(tree: ast.Module, types) -> list:
    """The module's nodes that are instances of `types` (a class or a tuple of them), in
    `ast.walk`'s order (a shared list: do not change it)."""
    entry = _entry(tree)
    found = entry[3].get(types)
    if found is None:
        found = entry[3][types] = [n for n in entry[1] if isinstance(n, types)]
    return found


def parents(tree: ast.Module) -> dict:
    """{id(node): its parent} for every node of the module but the module (shared: do not change)."""
    entry = _entry(tree)
    if entry[2] is None:
        entry[2] = _parents_of(entry[1])
    return entry[2]


def strings_at(tree: ast.Module) -> dict:
    """{(line, column + 1): node} of the module's string constants: a finding's place (1-based
    column, as findings give it) to the literal it names."""
    return {(n.lineno, n.col_offset + 1): n for n in nodes(tree, ast.Constant) if isinstance(n.value, str)}


def dotted(node: ast.AST, strict: bool = False) -> Optional[str]:
    """`a.b.c` of an attribute chain on a name. A chain on something else (a call, a subscript)
    gives its attribute names (`f().x.y` -> `x.y`), or None when `strict`."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif strict:
        return None
    return ".".join(reversed(parts))


def walk_statements(tree: ast.Module, blocks: dict | None = None):
    """Every statement of the file, nested blocks included, without walking expressions;
    `blocks`, when given, gets id(statement) -> id(the list of statements that holds it)."""
    stack: list = [tree]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.stmt):
            yield current
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(current, field, None)
            if isinstance(block, list):
                children = [child for child in block if isinstance(child, (ast.stmt, ast.excepthandler,
                                                                            ast.match_case))]
                if blocks is not None:
                    blocks.update((id(child), id(block)) for child in children)
                stack.extend(children)
