"""Values the code itself resolves: labels, backends and library notes that ask for no port work
(issue #16, round-12 audits AE#8, AE#21, AE#26, AE#30, AE#37, AF#22, AF#30, AG#14, AG#18, AG#29).

A per-file rule sees one statement; the code around it often settles what the rule leaves open.
This whole-run pass (runplan.whole_run_passes, before moot.to_scopes) reads the consumer of each
such value, in the file or in the project, and lowers a finding to information with the reason
in its message when the value provably needs no change on an NPU host; moot.py then names it as a
skipped scope (`--show-skipped`, JSON `skipped`): nothing is silent.

- "cuda" as a label (NPU990): a string passed to a project function (or the default of a parameter)
  whose every use is a comparison with strings, a key of a table or a value shown in a message
  (`non_model_data_list("cuda")`, `TensorPlacementPolicyFactory.create("cuda")`: a name mapped to
  a class that picks its device elsewhere); the keys of a table looked up only with keys built from
  the same literal (`TABLE["cuda:" + str(gpu_id)]`).
- a process-group backend (NPU304) assigned from a helper that reads
  `dist.Backend.default_device_backend_map` (torch_npu registers "npu": "hccl" there) or has an
  "hccl" branch, from a literal table with an "npu": "hccl" entry, or a parameter whose "nccl"
  default the run itself rewrote (the run's new text says so), no caller in the file passing
  "nccl" for it.
- bitsandbytes (NPU914): an import run only when the caller already passed an 8-bit or paged
  optimizer (`if optimizer_cls.__name__ in eight_bit_names: import bitsandbytes`) that only reaches
  `bitsandbytes.optim.GlobalOptimManager`; and the generic note on a file that uses only the
  layers (no optimizer, no CUDA-only call): given once per package, the other sites folded into it.
- an SDPA switch (NPU405) that only enables backends: nothing differs (moot.NO_EFFECT names it).
- FP8 in a test (NPU913) whose `device` fixture (the nearest conftest.py) lists "cuda" only behind
  a CUDA check kept as written: an NPU host runs it on the CPU only, where FP8 casts work.

Each check reads files only where a finding of its kind asks (a byte pre-test before any parse).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from typing import Callable, Optional

from . import astcache, catalogue
from .findings import Finding, lower_pieces, split_merged
from .model import FileResult
from .modpaths import result_bytes

# The reasons (moot.NO_WORK / AS_WRITTEN list them: the finding becomes a named skipped scope)
LABEL = "a label the code resolves, not a device: "
BACKEND = "a backend the code resolves to HCCL on an NPU host: "
CALLER_OPTIMIZER = "bitsandbytes loaded only for an optimizer the caller already chose: "
FOLDED = "the bitsandbytes note given once for the package at "
CPU_FP8 = "FP8 on CPU tensors in a CPU test"  # (moot.AS_WRITTEN, notcompute.py's phrase)
DEVICE_LIST = 'a test device list that gets "cuda" only behind a CUDA check kept as written'  # testprobes.py

TABLE_LABEL = "of a table keyed by device string: a label unless looked up by an NPU device's name"
BOOKKEEPING = re.compile(r"passed to the project's own bookkeeping method `(\w+)`")
ALSO = re.compile(r" \(also at [^()]*\)")
LAYERS_ONLY = "imported only behind an availability test of the package"


@functools.lru_cache(maxsize=None)
def _table() -> dict:
    return catalogue.read_table("sweep.toml").get("resolved", {})


def _source_words() -> tuple[bytes, ...]:
    """What a helper's body names when it picks the backend for the device: torch's map, or an
    "hccl" literal (quoted: a comment naming HCCL is not a branch)."""
    words = []
    for word in _table().get("backend_sources", ()):
        words.extend((f'"{word}"'.encode(), f"'{word}'".encode()) if word == "hccl" else (word.encode(),))
    return tuple(words)


DEF = re.compile(rb"\bdef\s+(\w+)\s*\(")


# A function name defined in more files than this is not resolved (every definition would have to
# qualify): on torch's tree, `defs("to")`-style questions parsed hundreds of files, 27 s and 900 MiB.
MAX_DEFINING_FILES = 8


class _Run:
    """The run's files, read and parsed only when a check asks."""

    def __init__(self, results: list[FileResult], paths: dict[str, str]) -> None:
        self.results, self.paths = results, paths
        self.by_path = {r.relpath: r for r in results}
        self._bytes: dict[str, Optional[bytes]] = {}
        self._trees: dict[str, Optional[ast.Module]] = {}
        self._defined: Optional[dict[str, list[str]]] = None
        self._defs: dict[str, list] = {}
        self._external: dict[str, frozenset] = {}
        self._tops: Optional[set] = None

    def data(self, relpath: str) -> Optional[bytes]:
        if relpath not in self._bytes:
            result = self.by_path.get(relpath)
            self._bytes[relpath] = None if result is None else result_bytes(result, self.paths)
        return self._bytes[relpath]

    def tree(self, relpath: str) -> Optional[ast.Module]:
        if relpath not in self._trees:
            data = self.data(relpath) if relpath.endswith(".py") else None
            self._trees[relpath] = None if data is None else astcache.parse(data)
        return self._trees[relpath]

    def external_names(self, relpath: str) -> frozenset:
        """The names `relpath` binds by importing a module the run does not hold (its top package
        is no folder or module of the run)."""
        if relpath not in self._external:
            if self._tops is None:
                self._tops = {part for r in self.results for part in _tops(r.relpath)}
            names, tree = set(), self.tree(relpath)
            for node in astcache.walk_statements(tree) if tree is not None else ():  # (imports: statements)
                if isinstance(node, ast.Import):
                    names.update((a.asname or a.name).split(".")[0] for a in node.names
                                 if a.name.split(".")[0] not in self._tops)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                        and node.module.split(".")[0] not in self._tops:
                    names.update(a.asname or a.name for a in node.names)
            self._external[relpath] = frozenset(names)
        return self._external[relpath]

    def defs(self, name: str) -> list:
        """[(relpath, FunctionDef)] of every function or method `name` of the run's Python files:
        one regex pass over the files' bytes indexes the names each defines (built once, at the
        first question); only the files that define `name` are parsed."""
        if self._defined is None:
            self._defined = {}
            for result in self.results:
                data = self.data(result.relpath) if result.relpath.endswith(".py") else None
                if data and b"def" in data:
                    for found in dict.fromkeys(DEF.findall(data)):
                        self._defined.setdefault(found.decode("ascii", "replace"), []).append(result.relpath)
        if name not in self._defs:
            found = []
            where = self._defined.get(name, ())
            if len(where) > MAX_DEFINING_FILES:
                where = ()  # (a name many files define: which one a call reaches is not known)
            for relpath in where:
                tree = self.tree(relpath)
                if tree is not None:
                    found.extend((relpath, node) for node in astcache.walk_statements(tree)
                                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name)
            self._defs[name] = found
        return self._defs[name]


def _tops(relpath: str) -> tuple[str, ...]:
    """The names a file's top package may be imported by: its first folder (or module), and the
    one under `src/`."""
    parts = relpath.split("/")
    first = parts[0][:-3] if parts[0].endswith(".py") else parts[0]
    if parts[0] in ("src", "lib", "python") and len(parts) > 1:
        return (first, parts[1][:-3] if parts[1].endswith(".py") else parts[1])
    return (first,)


def review(results: list[FileResult], paths: dict[str, str]) -> list[FileResult]:
    """The run's results with the findings whose values the code resolves lowered to info (with
    the reason), and the generic bitsandbytes notes folded to one per package."""
    run = _Run(results, paths)
    out = []
    for result in results:
        if not any(_asks(f) for f in result.findings):
            out.append(result)
            continue
        findings = []
        for finding in result.findings:
            check = _asks(finding)
            pieces = lower_pieces(finding, lambda line, f=finding, c=check: c(run, result, f, line),
                                  _without_also) if check else None
            findings.extend(pieces if pieces is not None else [finding])
        out.append(dataclasses.replace(result, findings=sorted(findings)))
    return _fold_bnb_notes(out, run)


def _without_also(piece: Finding) -> Finding:
    """A place of a merged finding without the "(also at ...)" of the group, wherever it stands
    (split_merged drops it only at the end of the message)."""
    return dataclasses.replace(piece, message=ALSO.sub("", piece.message))


def _asks(finding: Finding) -> Optional[Callable]:
    """The check that may resolve this finding (None: none applies)."""
    if finding.fixable or finding.cell is not None:
        return None
    if finding.code == "NPU990" and '"cuda' in finding.source:
        return _label
    if finding.code == "NPU304" and finding.severity != "info":
        return _backend
    if finding.code == "NPU914" and finding.severity != "info":
        return _caller_optimizer
    if finding.code == "NPU913" and finding.severity != "info" and "test" in finding.path:
        return _cpu_test_fp8
    return None


# ----------------------------------------------------------------------------- shared helpers
def _parents(tree: ast.AST) -> dict:
    cached = getattr(tree, "_resolved_parents", None)
    if cached is None:
        cached = {id(child): parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
        tree._resolved_parents = cached  # (one map per parsed tree)
    return cached


def _enclosing(tree: ast.AST, line: int, kinds: tuple) -> Optional[ast.AST]:
    """The innermost node of `kinds` whose lines (decorators included) hold `line`."""
    best = None
    for node in ast.walk(tree):
        if isinstance(node, kinds):
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
            if first <= line <= (node.end_lineno or node.lineno):
                if best is None or first >= best[0]:
                    best = (first, node)
    return None if best is None else best[1]


def _constant_at(tree: ast.AST, line: int, column: int) -> Optional[ast.Constant]:
    index = getattr(tree, "_resolved_strings", None)
    if index is None:  # (one walk per tree: a file's merged findings ask many times)
        index = {(n.lineno, n.col_offset + 1): n for n in ast.walk(tree)
                 if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        tree._resolved_strings = index
    return index.get((line, column))


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _params(func: ast.AST) -> list[ast.arg]:
    a = func.args
    return [*a.posonlyargs, *a.args, *a.kwonlyargs]


def _default_of(func: ast.AST, name: str) -> Optional[ast.AST]:
    a = func.args
    positional = [*a.posonlyargs, *a.args]
    for arg, default in zip(positional[len(positional) - len(a.defaults):], a.defaults):
        if arg.arg == name:
            return default
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        if arg.arg == name:
            return default
    return None


def _loads(func: ast.AST, name: str) -> list[ast.Name]:
    return [n for n in ast.walk(func) if isinstance(n, ast.Name) and n.id == name]


# ----------------------------------------------------------------------------- labels (NPU990)
def _label(run: _Run, result: FileResult, finding: Finding, line: int) -> Optional[str]:
    tree = run.tree(result.relpath)
    if tree is None:
        return None
    piece = next((p for p in split_merged(finding) if p.line == line), finding)
    node = _constant_at(tree, line, piece.column)
    if node is None or not isinstance(node.value, str) or not node.value.startswith("cuda"):
        return None
    parents = _parents(tree)
    parent = parents.get(id(node))
    if TABLE_LABEL in finding.message and isinstance(parent, ast.Dict):
        return _table_keys(run, result, tree, parents, parent)
    if isinstance(parent, ast.Call) and node in parent.args:
        why = _label_argument(run, result.relpath, parent, parent.args.index(node))
        if why is None and node.value == "cuda" and not _external(run, result.relpath, parent.func):
            from .labels7 import detected_device  # (a project resolver of the detected accelerator)

            why = detected_device(run, result.relpath, parent, parent.args.index(node))
        return None if why is None else LABEL + why
    if isinstance(parent, ast.arguments) and node.value == "cuda":
        func = parents.get(id(parent))
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None  # (a lambda's default)
        name = next((arg.arg for arg in _params(func) if _default_of(func, arg.arg) is node), None)
        if name is not None:
            return _label_parameter(run, result.relpath, func, name)
    return None


def _label_use(run: _Run, relpath: str, use: ast.Name, parents: dict, depth: int) -> Optional[str]:
    """How one use of a label parameter reads it: compared with strings, a table's key, shown in
    a message, or passed on to a project function that only does so; None for any other use."""
    parent = parents.get(id(use))
    if isinstance(parent, ast.Compare):
        others = [o for o in (parent.left, *parent.comparators) if o is not use]
        if others and all(_is_str(o) or (isinstance(o, (ast.List, ast.Tuple, ast.Set))
                                         and all(_is_str(e) for e in o.elts)) for o in others):
            return "compared with strings"
        return None
    if isinstance(parent, ast.Subscript) and parent.slice is use:
        return "a table's key"
    if isinstance(parent, ast.FormattedValue):
        return "shown in a message"
    if isinstance(parent, ast.Call) and use in parent.args and depth < 2:
        why = _label_argument(run, relpath, parent, parent.args.index(use), depth + 1)
        return None if why is None else f"passed to {why}"
    return None


def _external(run: _Run, relpath: str, func: ast.AST) -> bool:
    """Whether a called name chain starts at a module the project does not hold (`torch.device`,
    `np.array`, a name imported from another package): not the project's function."""
    root = func
    while isinstance(root, ast.Attribute):
        root = root.value
    if not isinstance(root, ast.Name):
        return False
    if root.id in ("torch", "np", "numpy", "os", "math", "jax", "tf"):
        return True
    return root.id in run.external_names(relpath)


def _label_function(run: _Run, relpath: str, func: ast.AST, name: str, depth: int) -> Optional[str]:
    """Why `func`'s parameter `name` is a label (every use of it resolves), or None."""
    tree = run.tree(relpath)
    if tree is None:
        return None
    parents = _parents(tree)
    uses = _loads(func, name)
    if not uses or any(not isinstance(u.ctx, ast.Load) for u in uses):
        return None  # never read, or rebound: nothing to resolve
    ways = []
    for use in uses:
        way = _label_use(run, relpath, use, parents, depth)
        if way is None:
            return None
        ways.append(way)
    return " and ".join(dict.fromkeys(ways))


def _label_argument(run: _Run, relpath: str, call: ast.Call, index: int, depth: int = 0) -> Optional[str]:
    """Why the `index`-th positional argument of `call` is a label: every project function of the
    called name (the method, when called on an attribute) only compares, indexes or shows it."""
    callee = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
    if not callee or _external(run, relpath, call.func):
        return None
    defs = run.defs(callee)
    owner = call.func.value.id if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) else ""
    if owner[:1].isupper():  # `Factory.create(...)`: the methods of that class only
        defs = [(where, func) for where, func in defs
                if getattr(_parents(run.tree(where)).get(id(func)), "name", None) == owner]
    if not defs:
        return None
    shown = []
    for where, func in defs:
        params = [*func.args.posonlyargs, *func.args.args]
        skip = 1 if params and params[0].arg in ("self", "cls") and isinstance(call.func, ast.Attribute) else 0
        if isinstance(func, ast.FunctionDef) and any(getattr(d, "id", "") == "staticmethod" for d in func.decorator_list):
            skip = 0
        if index + skip >= len(params):
            return None
        why = _label_function(run, where, func, params[index + skip].arg, depth)
        if why is None:
            return None
        shown.append(f"`{callee}` ({where}:{func.lineno}) only has it {why}")
    return "; ".join(shown[:2])


def _label_parameter(run: _Run, relpath: str, func: ast.AST, name: str) -> Optional[str]:
    why = _label_function(run, relpath, func, name, 0)
    if why is None:
        return None
    return f"{LABEL}the default of `{name}`, which `{func.name}` only has {why}"


def _table_keys(run: _Run, result: FileResult, tree: ast.Module, parents: dict, table: ast.Dict) -> Optional[str]:
    """A module table of "cuda:N" keys looked up only with keys built from the same literal."""
    assign = parents.get(id(table))
    if not isinstance(assign, ast.Assign) or len(assign.targets) != 1 or not isinstance(assign.targets[0], ast.Name):
        return None
    name = assign.targets[0].id
    lookups = 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.Name) or node.id != name or node is assign.targets[0]:
            continue
        parent = parents.get(id(node))
        if isinstance(node.ctx, ast.Store) or isinstance(parent, ast.FormattedValue):
            continue  # rebound from configuration, or shown in a log line
        if isinstance(parent, ast.Subscript) and parent.value is node and _built_from_cuda(parent.slice):
            lookups += 1
            continue
        return None
    pattern = re.compile(rb"import[^\n]*\b" + re.escape(name.encode()) + rb"\b")
    for other in run.results:
        data = run.data(other.relpath) if other.relpath != result.relpath and other.relpath.endswith(".py") else None
        if data is not None and name.encode() in data and pattern.search(data):
            return None  # read in another file too
    if not lookups:
        return None
    return (f"{LABEL}`{name}` is looked up only with keys built from the same literal "
            f"(`\"cuda:\" + ...`, {lookups} place{'s' if lookups > 1 else ''}), whatever the device")


def _built_from_cuda(key: ast.AST) -> bool:
    if isinstance(key, ast.BinOp) and isinstance(key.op, ast.Add):
        return _is_str(key.left) and key.left.value.startswith("cuda")
    if isinstance(key, ast.JoinedStr) and key.values:
        return _is_str(key.values[0]) and key.values[0].value.startswith("cuda")
    return False


# ----------------------------------------------------------------------------- backends (NPU304)
def _backend(run: _Run, result: FileResult, finding: Finding, line: int) -> Optional[str]:
    tree = run.tree(result.relpath)
    if tree is None:
        return None
    piece = next((p for p in split_merged(finding) if p.line == line), finding)
    source = piece.source.strip()
    if re.fullmatch(r"[A-Za-z_][\w.]*\(\)", source):
        # (the backend given as the call itself: `backend=helper.get_process_group_backend()`,
        # the project's function with an "hccl" branch; round-16 audit AQ#24)
        why = _backend_value(run, result, tree, tree, ast.parse(source, mode="eval").body)
        return BACKEND + why if why else None
    if not re.fullmatch(r"(self\.)?[A-Za-z_]\w*", source):
        return None
    func = _enclosing(tree, line, (ast.FunctionDef, ast.AsyncFunctionDef))
    scope = _enclosing(tree, line, (ast.ClassDef,)) if source.startswith("self.") else func
    if scope is None:
        return None
    values = [node.value for node in ast.walk(scope) if isinstance(node, (ast.Assign, ast.AnnAssign))
              and node.value is not None
              and any(ast.unparse(t) == source for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))]
    whys = []
    # (a parameter the function's body assigns again before the line, at its top level: ColossalAI's
    # `backend = cur_accelerator.communication_backend` over `backend: str = "nccl"`, AV#29)
    reassigned = func is not None and any(
        isinstance(s, ast.Assign) and s.lineno < line and any(isinstance(t, ast.Name) and t.id == source for t in s.targets)
        for s in func.body)
    if not source.startswith("self.") and not reassigned and any(a.arg == source for a in _params(func)):
        why = _rewritten_default(run, result, tree, func, source)
        if why is None:
            return None
        whys.append(why)
    elif not values:
        return None
    for value in values:
        why = _backend_value(run, result, tree, scope, value)
        if why is None:
            return None
        if why:
            whys.append(why)
    return BACKEND + "; ".join(dict.fromkeys(whys)) if whys else None


def _backend_value(run: _Run, result: FileResult, tree: ast.Module, scope: ast.AST, value: ast.AST) -> Optional[str]:
    """Why an assigned backend value is right on an NPU host ("" for a literal other than "nccl",
    which NPU301 reads), or None."""
    if _is_str(value):
        return None if "nccl" in value.value else ""
    if isinstance(value, ast.IfExp):
        body = _backend_value(run, result, tree, scope, value.body)
        orelse = _backend_value(run, result, tree, scope, value.orelse)
        return None if body is None or orelse is None else (body or orelse)
    text = ast.unparse(value)
    sources = _table().get("backend_sources", ())
    if any(s in text for s in sources if s != "hccl"):
        return f"`{text}` reads torch's device-to-backend map"
    if isinstance(value, ast.Subscript):
        base = ast.unparse(value.value)
        table = _literal_table(tree, scope, base)
        if table is not None and any(_is_str(k) and k.value == "npu" and _is_str(v) and v.value == "hccl"
                                     for k, v in zip(table.keys, table.values)):
            return f"`{base}` has \"npu\": \"hccl\" (line {table.lineno})"
        return None
    if isinstance(value, ast.Attribute) and _accelerator_object(scope, value.value):
        # (`get_accelerator().communication_backend`: the project's NPU accelerator sets it to "hccl",
        # round-17 audit AV#29; labels9.py)
        from .labels9 import hccl_attribute

        where = hccl_attribute(run, value.attr)
        return f"`{text}`: the project's NPU accelerator sets `{value.attr}` to \"hccl\" ({where})" if where else None
    if isinstance(value, ast.Call):
        callee = value.func.attr if isinstance(value.func, ast.Attribute) else getattr(value.func, "id", None)
        defs = run.defs(callee) if callee and not _external(run, result.relpath, value.func) else []
        if not defs:
            return None
        for relpath, func in defs:
            data = run.data(relpath) or b""
            body = b"\n".join(data.splitlines()[func.lineno - 1:func.end_lineno])
            if not any(word in body for word in _source_words()):
                return None
        relpath, func = defs[0]
        return f"`{callee}` ({relpath}:{func.lineno}) picks it for the device (torch's device-to-backend map or an \"hccl\" branch)"
    return None


def _accelerator_object(scope: ast.AST, value: ast.AST) -> bool:
    """A call's result (`get_accelerator()`), or a name the scope binds only to one."""
    if isinstance(value, ast.Call):
        return True
    if not isinstance(value, ast.Name):
        return False
    bound = [n.value for n in ast.walk(scope) if isinstance(n, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == value.id for t in n.targets)]
    return bool(bound) and all(isinstance(v, ast.Call) for v in bound)


def _literal_table(tree: ast.Module, scope: ast.AST, base: str) -> Optional[ast.Dict]:
    """The dict literal a class attribute (`self._TABLE`, `Class._TABLE`) or module name holds."""
    name = base.split(".")[-1]
    holders = [scope] if isinstance(scope, ast.ClassDef) else []
    holders.append(tree)
    for holder in holders:
        for node in holder.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) \
                    and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return node.value
            if isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Dict) \
                    and isinstance(node.target, ast.Name) and node.target.id == name:
                return node.value
    return None


def _rewritten_default(run: _Run, result: FileResult, tree: ast.Module, func: ast.AST, name: str) -> Optional[str]:
    """A parameter whose literal "nccl" default the run rewrote (its new text differs), no call
    in the file passing "nccl" for it."""
    default = _default_of(func, name)
    if not (_is_str(default) and default.value == "nccl") or result.new is None:
        return None
    new_tree = astcache.parse(result.new)
    if new_tree is None:
        return None
    twins = [n for n in ast.walk(new_tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
             and n.name == func.name and any(a.arg == name for a in _params(n))]
    if len(twins) != 1:
        return None
    new_default = _default_of(twins[0], name)
    if new_default is None or _is_str(new_default):
        return None
    positional = [a.arg for a in (*twins[0].args.posonlyargs, *twins[0].args.args)]
    for call in ast.walk(new_tree):  # (the calls as the run leaves them: a rewritten literal is HCCL's)
        if not (isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", None)) == func.name):
            continue
        given = next((k.value for k in call.keywords if k.arg == name), None)
        if given is None and name in positional:
            index = positional.index(name) - (1 if positional[0] in ("self", "cls")
                                               and isinstance(call.func, ast.Attribute) else 0)
            given = call.args[index] if 0 <= index < len(call.args) else None
        if given is not None and not _seen_backend(given):
            return None
    return f"the default of `{name}` is rewritten to `{ast.unparse(new_default)}`, and the calls here pass none or one the platform layer gives"


@functools.lru_cache(maxsize=None)
def _platform_layer() -> re.Pattern:
    return re.compile(catalogue.read_table("scopes.toml")["platform"]["layer"])


def _seen_backend(value: ast.AST) -> bool:
    """A backend a caller passes that is right on an NPU host: a literal other than "nccl", the
    shim's (a rewritten literal), or one the project's platform layer gives
    (`current_platform.get_torch_distributed_backend_str()`)."""
    if _is_str(value):
        return "nccl" not in value.value
    text = ast.unparse(value)
    return "dist_backend(" in text or bool(_platform_layer().search(text))


# ----------------------------------------------------------------------------- bitsandbytes (NPU914)
def _caller_optimizer(run: _Run, result: FileResult, finding: Finding, line: int) -> Optional[str]:
    tree = run.tree(result.relpath)
    if tree is None:
        return None
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import) and n.lineno == line
               and any(a.name == "bitsandbytes" for a in n.names)]
    if len(imports) != 1:
        return None
    node = imports[0]
    bound = next(a.asname or a.name for a in node.names if a.name == "bitsandbytes")
    parents = _parents(tree)
    guard, child = parents.get(id(node)), node
    while guard is not None and not (isinstance(guard, ast.If) and child in guard.body):
        child, guard = guard, parents.get(id(guard))
    func = _enclosing(tree, line, (ast.FunctionDef, ast.AsyncFunctionDef))
    if guard is None or func is None or not _names_optimizer_classes(guard.test, func):
        return None
    for use in _loads(func, bound):
        chain = ast.unparse(parents.get(id(parents.get(id(use)))) or use)
        if not chain.startswith(f"{bound}.optim.GlobalOptimManager"):
            return None
    return (f"{CALLER_OPTIMIZER}`import {bound}` runs only under `{ast.unparse(guard.test)}` (line "
            f"{guard.lineno}) and only registers `GlobalOptimManager` overrides, pure Python; the "
            "8-bit optimizer is the caller's, reported where it is chosen")


def _names_optimizer_classes(test: ast.AST, func: ast.AST) -> bool:
    """`cls.__name__ in ["Adam8bit", "PagedAdamW8bit", ...]` (the list inline or a local name)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.In)
            and isinstance(test.left, ast.Attribute) and test.left.attr == "__name__"):
        return False
    names = test.comparators[0]
    if isinstance(names, ast.Name):
        names = next((n.value for n in ast.walk(func) if isinstance(n, ast.Assign)
                      and any(isinstance(t, ast.Name) and t.id == names.id for t in n.targets)), None)
    return isinstance(names, (ast.List, ast.Tuple, ast.Set)) and bool(names.elts) and all(
        _is_str(e) and "8bit" in e.value for e in names.elts)


def _fold_bnb_notes(results: list[FileResult], run: _Run) -> list[FileResult]:
    """The generic bitsandbytes note (NPU914, info) on files that use only the layers: kept at the
    first such file of each package, the others folded into it (info with the reason)."""
    words = tuple(w.encode() for w in _table().get("bnb_cuda_words", ()))
    notes: dict[str, list[tuple[int, Finding]]] = {}
    for index, result in enumerate(results):
        for finding in result.findings:
            if finding.code == "NPU914" and finding.severity == "info" and not finding.fixable \
                    and LAYERS_ONLY in finding.message:
                data = run.data(result.relpath) or b""
                if not any(w in data for w in words):
                    notes.setdefault(_package(result.relpath), []).append((index, finding))
    out = list(results)
    for group in notes.values():
        if len(group) < 2:
            continue
        (first_index, first), rest = group[0], group[1:]
        where = f"{first.path}:{first.line}"
        for index, finding in rest:
            result = out[index]
            lowered = dataclasses.replace(
                finding, message=f"{finding.message} ({FOLDED}{where}: this file uses only "
                                 "its layers, no optimizer and no CUDA-only call)")
            out[index] = dataclasses.replace(result, findings=[lowered if f is finding else f for f in result.findings])
        shown = ", ".join(f"{f.path}:{f.line}" for _i, f in rest[:4]) + (f" and {len(rest) - 4} more" if len(rest) > 4 else "")
        result = out[first_index]
        kept = dataclasses.replace(first, message=f"{first.message} (the same note for {len(rest)} more "
                                                  f"layer-only import site{'s' if len(rest) > 1 else ''}: {shown})")
        out[first_index] = dataclasses.replace(result, findings=[kept if f is first else f for f in result.findings])
    return out


def _package(relpath: str) -> str:
    parts = relpath.split("/")
    return "/".join(parts[:2]) if parts[0] in ("src", "lib", "python") and len(parts) > 2 else parts[0]


# ----------------------------------------------------------------------------- FP8 in CPU-only tests (NPU913)
def _cpu_test_fp8(run: _Run, result: FileResult, finding: Finding, line: int) -> Optional[str]:
    data = run.data(result.relpath)
    if not data or b"device" not in data:
        return None
    tree = run.tree(result.relpath)
    if tree is None:
        return None
    test = _enclosing(tree, line, (ast.FunctionDef, ast.AsyncFunctionDef))
    if test is None or not test.name.startswith("test") or not any(a.arg == "device" for a in _params(test)):
        return None
    body = ast.unparse(test)
    if re.search(r"[\"'](cuda|npu)", body) or ".cuda(" in body:
        return None  # the test names a device of its own
    conftest = _device_fixture(run, result.relpath)
    if conftest is None:
        return None
    return (f"{CPU_FP8}: the `device` fixture of {conftest} lists \"cuda\" only behind a CUDA check "
            "kept as written, so an NPU host runs this test on the CPU, where FP8 casts work")


def _device_fixture(run: _Run, relpath: str) -> Optional[str]:
    """The nearest conftest.py above `relpath` that defines a `device` fixture whose "cuda" entry
    testprobes.py found behind a CUDA check kept as written (its named scope says so)."""
    parts = relpath.split("/")[:-1]
    while True:
        candidate = "/".join([*parts, "conftest.py"]) if parts else "conftest.py"
        conftest = run.by_path.get(candidate)
        data = run.data(candidate) if conftest is not None else None
        if data is not None and re.search(rb"def\s+device\s*\(", data):
            tree = run.tree(candidate)
            fixture = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "device"),
                           None) if tree is not None else None
            if fixture is None or not any("fixture" in ast.unparse(d) and "params" in ast.unparse(d)
                                          for d in fixture.decorator_list):
                return None
            named = [why for _f, _l, why in conftest.skipped_scopes] + [f.message for f in conftest.findings]
            if any(DEVICE_LIST in why for why in named) and \
                    not re.search(rb"[\"']npu", data):
                return candidate
            return None
        if not parts:
            return None
        parts.pop()


# (public for probes19.py: the run's files, a rewritten "nccl" default, as the NPU304 check reads them)
Run, enclosing, params, rewritten_default = _Run, _enclosing, _params, _rewritten_default
