"""Same-file guards and small shapes (issue #16, precision wave 25, round-25 audits BS#5, BS#6,
BS#16, BS#23, BT#2).

Per file (run.migrate_file, after labels24.review: the findings are merged per construct), on
report-only findings; each shape decides on the exact construct, and each place of a merged finding
is judged on its own (findings.lower_pieces):

- **A function-local `import torch.cuda.X as alias` restated by its use** (BS#5, `_fold_local_imports`):
  the NPU990 "import of `torch.cuda.X`" at an import inside a function whose every read of the alias in
  that function lies on a place of one other open finding that names the alias (`self._prof = alias`,
  reported NPU202 `torch.cuda.profiler`): one construct, one finding: the import's place is folded into
  that finding (its "also at" lists the import's line). typerefs.py does this for module-level imports;
  an import whose alias is read where no finding is, or never read, keeps its NPU990.
- **FP8 dtypes a test only hands to `torch.finfo`/`torch.iinfo`** (BS#6, `_finfo_only`): the NPU913
  places that are values of a `@pytest.mark.parametrize` case list whose test reads the parameter only
  to unpack it, and reads the names so bound only as the argument of `torch.finfo(...)`/
  `torch.iinfo(...)`, as `.is_floating_point`/`.itemsize`/`.bits`, in `print`/`str`/`repr` or an
  f-string: a dtype's limits are metadata every torch build has, no tensor is made: lowered with
  fp8data.NOT_COMPUTE (moot.NO_WORK, a named scope). A parameter that reaches a cast, a tensor factory
  or any other call keeps the error.
- **A test body after `if device != "cuda": pytest.skip(...)` whose devices never include CUDA or the
  NPU** (BS#16, `_never_cuda_skip`): a place in a test function after a leading `if <name> != "cuda":
  pytest.skip(...)` (as written or as the run rewrote it to accept the accelerator too), where `<name>`
  is a parameter of the test, or unpacked from one, given by a `parametrize` of the file (a decorator
  call, or a module-level name bound to one), and the file's only source of device strings is a
  module-level list that gets "cuda" only behind a CUDA check kept as written (testprobes.PROBED_LIST;
  no other "cuda" or NPU string in a list, tuple or call argument of the file): on an NPU host the
  cases are the list's other devices, each skipped: testprobes.SKIPPED_TEST (moot.PHRASES). A "cuda"
  case listed in the file itself (`parametrize("device", ["cpu", "cuda"])`) keeps the findings.
- **Code after complementary exits** (BS#23, `_dead_after_exits`): in a function's block, the
  statements after both `if X: <always leaves>` and a later `if not X: <always leaves>` (X a name or an
  attribute chain, read twice with nothing between that could rebind it; "always leaves": the block
  ends in `return`/`raise`, or in an `if`/`else` both of whose arms do) are reached on no host: their
  places are lowered with notcompute.TOLERANCE's phrase "in a branch an NPU host does not take", and so
  are the places in the body of a module-private function (`_name`) every reference of which in the
  file lies in such dead code ("in a helper called only from code no host reaches", moot.PHRASES).
  The raise itself is the reachable failure; a call after only one of the two exits keeps its
  findings.
- **A CUDA word as the label field of the file's own dataclass** (BT#2, `_label_field`): the NPU990
  on `"nccl"`/`"cuda"` given positionally or by keyword to a class of the same file decorated
  `@dataclass` (or a `NamedTuple`), for a field named as a label (`name`, `label`, `title`, `tag`,
  `desc`, `description`, `display_name`), where the file never hands that field's attribute to a
  call (`init_process_group(c.name)`): an entry's name for logs and result tables, not a backend or a
  device: lowered with resolved.LABEL (moot.NO_WORK, a named scope). A field named otherwise
  (`backend`), or a label field handed to a call, keeps the finding.
"""

from __future__ import annotations

import ast
import builtins
import re
from typing import Optional

from . import astcache
from .findings import Finding, lower_pieces, split_merged

LABEL = "a label the code resolves, not a device: "  # (moot.NO_WORK; resolved.LABEL's phrase)
NOT_COMPUTE = "not FP8 compute: "  # (moot.NO_WORK; fp8data.NOT_COMPUTE's phrase)
SKIPPED_TEST = "in a test that does not run on an NPU host"  # (moot.PHRASES; testprobes.SKIPPED_TEST)
DEAD_BRANCH = "in a branch an NPU host does not take"  # (moot.PHRASES)
DEAD_HELPER = "in a helper called only from code no host reaches"  # (moot.PHRASES: "in a helper ")

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_LABEL_FIELDS = frozenset(("name", "label", "title", "tag", "desc", "description", "display_name"))
_LABEL_WORDS = frozenset(('"nccl"', '"cuda"'))
_DTYPE_ATTRS = frozenset(("is_floating_point", "itemsize", "bits", "is_signed", "is_complex"))
_SHOWN = frozenset(("print", "str", "repr", "format"))
_INFO = frozenset(("torch.finfo", "torch.iinfo"))
_SKIP_CALLS = frozenset(("skip", "skipTest"))
_BUILTINS = frozenset(dir(builtins))


def _open(finding: Finding) -> bool:
    return not finding.fixable and finding.cell is None and finding.severity != "info"


def review(findings: list[Finding], text: str, relpath: str = "") -> list[Finding]:
    """The findings of the shapes of the module doc, lowered to named scopes or folded."""
    imports = any(_open(f) and f.code == "NPU990" and "import of `torch.cuda." in f.message for f in findings)
    labels = ("dataclass" in text or "NamedTuple" in text) and any(
        _open(f) and f.code == "NPU990" and f.source in _LABEL_WORDS for f in findings)
    finfo = "parametrize" in text and ("finfo" in text or "iinfo" in text) and any(
        _open(f) and f.code == "NPU913" for f in findings)
    skips = "skip" in text and "parametrize" in text and any(_open(f) for f in findings)
    exits = "raise" in text and "return" in text and any(_open(f) for f in findings)
    if not (imports or labels or finfo or skips or exits):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    parents = astcache.parents(tree)
    reasons: dict[int, str] = {}  # line -> reason (for every open finding's places on the line)
    fp8_reasons: dict[int, str] = {}
    label_reasons: dict[int, str] = {}
    if exits:
        reasons.update(_dead_after_exits(tree))
    if skips:
        for line, why in _never_cuda_skip(tree, parents, findings).items():
            reasons.setdefault(line, why)
    if finfo:
        fp8_reasons = _finfo_only(tree, parents)
    if labels:
        label_reasons = _label_field(tree, parents)
    out: list[Finding] = []
    for finding in findings:
        if not _open(finding):
            out.append(finding)
            continue
        table = dict(reasons)
        if finding.code == "NPU913":
            table.update(fp8_reasons)
        if finding.code == "NPU990" and finding.source in _LABEL_WORDS:
            table.update(label_reasons)
        lowered = lower_pieces(finding, table.get) if table else None
        out.extend(lowered if lowered is not None else [finding])
    if len(out) != len(findings) or any(a is not b for a, b in zip(out, findings)):
        out = sorted(out)
    return _fold_local_imports(out, tree) if imports else out


# ----------------------------------------------------------------------------- BS#5: local imports
def _fold_local_imports(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    from .folding import Fold, places_of

    local: dict[int, tuple[str, ast.AST]] = {}  # line -> (alias, the function holding the import)
    for function in astcache.nodes(tree, _FUNCTIONS):
        for node in ast.walk(function):
            if isinstance(node, ast.Import) and len(node.names) == 1 and node.names[0].asname \
                    and node.names[0].name.startswith("torch.cuda.") and _holder(function, node):
                local[node.lineno] = (node.names[0].asname, function)
    if not local:
        return findings
    fold = None
    for finding in findings:
        if not (_open(finding) and finding.code == "NPU990" and "import of `torch.cuda." in finding.message):
            continue
        for piece in split_merged(finding):
            if piece.line not in local:
                continue
            alias, function = local[piece.line]
            reads = [n for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == alias
                     and isinstance(n.ctx, ast.Load)]
            if not reads:
                continue
            holders = []
            for read in reads:
                holder = next((f for f in findings if f is not finding and not f.fixable and f.cell is None
                               and f.code != "NPU990" and any(line == read.lineno and alias in (source or "")
                                                              for line, _c, source in places_of(f))), None)
                if holder is None:
                    holders = []
                    break
                holders.append(holder)
            targets = list({id(h): h for h in holders}.values())
            if len(targets) != 1:
                continue
            fold = fold or Fold(findings)
            if fold.movable(finding, targets[0]):
                fold.move(finding, [(piece.line, piece.column, piece.source)], targets[0])
    return fold.result() if fold is not None else findings


def _holder(function: ast.AST, node: ast.AST) -> bool:
    """`node` lies in `function` itself, not in a function nested in it."""
    for inner in ast.walk(function):
        if inner is not function and isinstance(inner, (*_FUNCTIONS, ast.Lambda, ast.ClassDef)) and any(
                n is node for n in ast.walk(inner)):
            return False
    return True


# ----------------------------------------------------------------------------- BS#23: complementary exits
def _leaves(block: list) -> bool:
    if not block:
        return False
    last = block[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return True
    return isinstance(last, ast.If) and bool(last.orelse) and _leaves(last.body) and _leaves(last.orelse)


def _flag(test: ast.AST) -> tuple[Optional[str], bool]:
    """(the flag's dotted name, negated) of `X` / `not X`, X a name or an attribute chain."""
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    inner = test.operand if negated else test
    name = astcache.dotted(inner, strict=True) if isinstance(inner, (ast.Name, ast.Attribute)) else None
    return name, negated


def _how(block: list) -> str:
    """How an always-leaving block leaves: "returns", "raises" or "returns or raises"."""
    kinds = set()
    todo = [block]
    while todo:
        last = todo.pop()[-1]
        if isinstance(last, ast.If):
            todo += [last.body, last.orelse]
        else:
            kinds.add("raises" if isinstance(last, ast.Raise) else "returns")
    return " or ".join(sorted(kinds, reverse=True))


def _shown_test(test: ast.AST) -> str:
    return f"if {ast.unparse(test)}:"


def _rebinds(statements: list, name: str) -> bool:
    root = name.split(".")[0]
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and node.id == root and not isinstance(node.ctx, ast.Load):
                return True
            if isinstance(node, (ast.Global, ast.Nonlocal)) or isinstance(node, ast.Call) and "." in name:
                return True  # (a call could change an attribute: only a plain name survives it)
    return False


def _dead_spans(tree: ast.Module) -> list[tuple[int, int, str]]:
    """(first line, last line, the two tests) of the statements after complementary exits."""
    spans = []
    for function in astcache.nodes(tree, _FUNCTIONS):
        for node in ast.walk(function):
            for field in ("body", "orelse", "finalbody"):
                block = getattr(node, field, None)
                if not isinstance(block, list) or not block or not isinstance(block[0], ast.stmt):
                    continue
                seen: dict[tuple[str, bool], int] = {}
                for index, statement in enumerate(block):
                    if not (isinstance(statement, ast.If) and not statement.orelse and _leaves(statement.body)):
                        continue
                    name, negated = _flag(statement.test)
                    if name is None:
                        continue
                    first = seen.get((name, not negated))
                    if first is not None and not _rebinds(block[first + 1:index], name) \
                            and index + 1 < len(block):
                        rest = block[index + 1:]
                        earlier = block[first]
                        shown = (f"`{_shown_test(earlier.test)}` {_how(earlier.body)} (line {earlier.lineno}) and "
                                 f"`{_shown_test(statement.test)}` {_how(statement.body)} (line {statement.lineno})")
                        spans.append((rest[0].lineno, rest[-1].end_lineno or rest[-1].lineno, shown))
                        break
                    seen.setdefault((name, negated), index)
    return spans


def _dead_after_exits(tree: ast.Module) -> dict[int, str]:
    spans = _dead_spans(tree)
    if not spans:
        return {}
    out: dict[int, str] = {}
    for first, last, shown in spans:
        for line in range(first, last + 1):
            out.setdefault(line, f"{DEAD_BRANCH}: {shown} leave the function before it, so no host reaches "
                                 "it: a host meets one of those exits instead")
    dead = [(first, last) for first, last, _s in spans]
    private = {f.name: f for f in tree.body if isinstance(f, _FUNCTIONS) and f.name.startswith("_")
               and not f.decorator_list}
    called = {n.id for first, last, _s in spans for n in astcache.nodes(tree, (ast.Name,))
              if n.id in private and first <= n.lineno <= last}
    if not called:
        return out
    shown = ast.unparse(tree)
    for name in sorted(called):
        function = private[name]
        refs = [n for n in astcache.nodes(tree, (ast.Name,)) if n.id == name]
        words = sum(1 for _ in re.finditer(rf"\b{re.escape(name)}\b", shown))
        if words != len(refs) + 1:  # (the def, and every other mention a plain name: no string, no attribute)
            continue
        if all(any(a <= r.lineno <= b for a, b in dead) for r in refs):
            lines = ", ".join(str(r.lineno) for r in refs)
            for line in range(function.lineno, (function.end_lineno or function.lineno) + 1):
                why = next(shown for first, last, shown in spans if any(first <= r.lineno <= last for r in refs))
                out.setdefault(line, f"{DEAD_HELPER}: `{function.name}` is called only at line {lines}, after "
                                     f"{why}, which leave the function first: a host meets one of those exits "
                                     "instead")
    return out


# ----------------------------------------------------------------------------- BS#6: dtype limits only
def _dtype_name(function: ast.AST, params: list[str], cases: ast.AST, node: ast.AST, parents: dict) -> Optional[str]:
    """The name the test binds the case value `node` to: the parameter itself, or the name an
    `a, b = param` of its body unpacks at its position (the first such); None when not one such name."""
    parent = parents.get(id(node))
    if parent is cases and len(params) == 1:
        return params[0]
    if not (isinstance(parent, ast.Tuple) and parents.get(id(parent)) is cases):
        return None
    index = parent.elts.index(node)
    if len(params) > 1:
        return params[index] if index < len(params) else None
    for statement in ast.walk(function):
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Name) \
                and statement.value.id == params[0] and len(statement.targets) == 1 \
                and isinstance(statement.targets[0], ast.Tuple) and len(statement.targets[0].elts) == len(parent.elts):
            element = statement.targets[0].elts[index]
            return element.id if isinstance(element, ast.Name) else None
    return None


def _metadata_read(read: ast.Name, parents: dict) -> bool:
    parent = parents.get(id(read))
    if isinstance(parent, ast.Call) and read in parent.args:
        callee = astcache.dotted(parent.func) or ""
        return callee in _INFO or callee in _SHOWN
    if isinstance(parent, ast.Attribute) and parent.value is read:
        return parent.attr in _DTYPE_ATTRS
    return isinstance(parent, ast.FormattedValue)


def _finfo_only(tree: ast.Module, parents: dict) -> dict[int, str]:
    out: dict[int, str] = {}
    for function in astcache.nodes(tree, _FUNCTIONS):
        for decorator in function.decorator_list:
            if not (isinstance(decorator, ast.Call) and (astcache.dotted(decorator.func) or "").endswith("parametrize")
                    and len(decorator.args) >= 2 and isinstance(decorator.args[0], ast.Constant)
                    and isinstance(decorator.args[0].value, str)
                    and isinstance(decorator.args[1], (ast.List, ast.Tuple))):
                continue
            params = [n.strip() for n in decorator.args[0].value.split(",") if n.strip()]
            for node in ast.walk(decorator.args[1]):
                if not (isinstance(node, ast.Attribute) and node.attr.startswith("float8_")
                        and astcache.dotted(node) == f"torch.{node.attr}"):
                    continue
                name = _dtype_name(function, params, decorator.args[1], node, parents)
                stores = [n for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == name
                          and not isinstance(n.ctx, ast.Load)]
                if name is None or len(stores) > (0 if name in params else 1):
                    continue  # (bound once: as the parameter, or by the unpacking)
                reads = [n for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == name
                         and isinstance(n.ctx, ast.Load)]
                if not reads or not all(_metadata_read(r, parents) for r in reads) or not any(
                        (astcache.dotted(parents[id(r)].func) or "") in _INFO for r in reads
                        if isinstance(parents.get(id(r)), ast.Call)):
                    continue
                out[node.lineno] = (f"{NOT_COMPUTE}a dtype of the parametrized cases of `{function.name}`, which "
                                    f"reads `{name}` only for its limits (`torch.finfo`/`torch.iinfo`): no FP8 "
                                    "tensor is made")
    return out


# ----------------------------------------------------------------------------- BS#16: a skip no case passes
_DEVICE_WORD = re.compile(r"(?i)(cuda|npu|gpu)(:\d+)?")


def _probed_device_list(tree: ast.Module) -> Optional[tuple[str, int]]:
    """The module-level list that gets "cuda" only behind a `torch.cuda.is_available()` (its name,
    the probe's line); None when the module adds "cuda" to a list otherwise too."""
    found = None
    for statement in tree.body:
        if isinstance(statement, (*_FUNCTIONS, ast.ClassDef)):
            continue
        guarded = _probe_adds(statement)
        if guarded is not None:
            if found is not None and found[0] != guarded:
                return None
            found = (guarded, statement.lineno)
    return found


def _probe_adds(statement: ast.stmt) -> Optional[str]:
    """`L += ["cuda"] if torch.cuda.is_available() else []`, `if torch.cuda.is_available():
    L.append("cuda")` (or `+=`): L."""
    if isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name) \
            and isinstance(statement.value, ast.IfExp) and _is_cuda_probe(statement.value.test) \
            and _only_cuda(statement.value.body) and _only_cuda(statement.value.orelse, empty=True):
        return statement.target.id
    if isinstance(statement, ast.If) and _is_cuda_probe(statement.test) and not statement.orelse \
            and len(statement.body) == 1:
        inner = statement.body[0]
        if isinstance(inner, ast.AugAssign) and isinstance(inner.target, ast.Name) and _only_cuda(inner.value):
            return inner.target.id
        if isinstance(inner, ast.Expr) and isinstance(inner.value, ast.Call) and len(inner.value.args) == 1 \
                and isinstance(inner.value.func, ast.Attribute) and isinstance(inner.value.func.value, ast.Name) \
                and inner.value.func.attr in ("append", "extend") and _only_cuda(inner.value.args[0]):
            return inner.value.func.value.id
    return None


def _only_cuda(node: ast.AST, empty: bool = False) -> bool:
    if isinstance(node, ast.Constant):
        return node.value == "cuda" and not empty
    if isinstance(node, (ast.List, ast.Tuple)):
        return all(isinstance(e, ast.Constant) and e.value == "cuda" for e in node.elts) and (empty or bool(node.elts))
    return False


def _is_cuda_probe(test: ast.AST) -> bool:
    return isinstance(test, ast.Call) and astcache.dotted(test.func) == "torch.cuda.is_available" and not test.args


class _Sources:
    """Whether a parametrize call's cases take their devices from the probed list only."""

    def __init__(self, tree: ast.Module, listed: str) -> None:
        self.listed = listed
        self.defs: dict[str, list[ast.AST]] = {}
        for statement in tree.body:
            if isinstance(statement, (*_FUNCTIONS, ast.ClassDef)):
                self.defs.setdefault(statement.name, []).append(statement)
            elif isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            self.defs.setdefault(name.id, []).append(statement)

    def only_listed(self, nodes: list) -> bool:
        """The nodes reference the probed list, and nothing they reach in the module holds a device
        string of its own: module-level values followed through their names, and the functions the
        nodes name themselves (the case generator; what it calls in turn builds shapes, not devices)."""
        seen: set[str] = set()
        todo = [(node, True) for node in nodes]
        reaches = False
        while todo:
            node, direct = todo.pop()
            for inner in ast.walk(node):
                if isinstance(inner, ast.Constant) and isinstance(inner.value, str) \
                        and _DEVICE_WORD.fullmatch(inner.value):
                    return False
                if isinstance(inner, ast.Name) and inner.id not in seen:
                    seen.add(inner.id)
                    if inner.id == self.listed:
                        reaches = True
                        continue
                    for definition in self.defs.get(inner.id, ()):
                        if not isinstance(definition, (*_FUNCTIONS, ast.ClassDef)):
                            todo.append((definition, direct))
                        elif direct and isinstance(definition, _FUNCTIONS):
                            todo.append((definition, False))
        return reaches

    def local_names(self, nodes: list, name: str) -> bool:
        """Every name the case expressions read is the probed list, one the module defines or a
        builtin (an imported list of devices could hold "cuda"), and every loop of the case
        generators they call that binds `name` iterates over something reading the probed list."""
        for node in nodes:
            for inner in ast.walk(node):
                if isinstance(inner, ast.Name) and inner.id != self.listed and inner.id not in self.defs \
                        and inner.id not in _BUILTINS:
                    return False
                if isinstance(inner, ast.Name) and inner.id in self.defs:
                    for definition in self.defs[inner.id]:
                        if isinstance(definition, _FUNCTIONS) and not self._loops_listed(definition, name):
                            return False
        return True

    def _loops_listed(self, function: ast.AST, name: str) -> bool:
        for loop in ast.walk(function):
            if isinstance(loop, (ast.For, ast.comprehension)) and any(
                    isinstance(n, ast.Name) and n.id == name for n in ast.walk(loop.target)) and not any(
                    isinstance(n, ast.Name) and n.id == self.listed for n in ast.walk(loop.iter)):
                return False
        return True

    def parametrize_of(self, decorator: ast.AST) -> Optional[ast.Call]:
        if isinstance(decorator, ast.Name) and len(self.defs.get(decorator.id, ())) == 1:
            statement = self.defs[decorator.id][0]
            decorator = statement.value if isinstance(statement, ast.Assign) else None
        if isinstance(decorator, ast.Call) and (astcache.dotted(decorator.func) or "").endswith("parametrize") \
                and decorator.args and isinstance(decorator.args[0], ast.Constant) \
                and isinstance(decorator.args[0].value, str):
            return decorator
        return None


def _never_cuda_skip(tree: ast.Module, parents: dict, findings: list[Finding]) -> dict[int, str]:
    probed = _probed_device_list(tree)
    if probed is None:
        return {}
    # (a probe the run rewrote answers for the NPU: the list then gets the accelerator)
    if any(f.fixable and f.cell is None and f.line == probed[1] for f in findings):
        return {}
    sources = _Sources(tree, probed[0])
    out: dict[int, str] = {}
    for function in astcache.nodes(tree, _FUNCTIONS):
        if not function.name.startswith("test"):
            continue
        given: dict[str, ast.Call] = {}
        for decorator in function.decorator_list:
            call = sources.parametrize_of(decorator)
            if call is not None:
                for name in call.args[0].value.split(","):
                    given[name.strip()] = call
        if not given:
            continue
        origin = {name: name for name in given}
        for index, statement in enumerate(function.body):
            if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Name) \
                    and statement.value.id in origin:
                for target in statement.targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            origin[name.id] = origin[statement.value.id]
                continue
            if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                continue
            name = _skips_unless_cuda(statement)
            if name is None or name not in origin or index + 1 >= len(function.body):
                break
            call = given[origin[name]]
            cases = [*call.args[1:], *(k.value for k in call.keywords)]
            if not sources.only_listed(cases) or not sources.local_names(cases, name):
                break
            rest = function.body[index + 1:]
            shown = ast.unparse(statement.test)
            for line in range(rest[0].lineno, (rest[-1].end_lineno or rest[-1].lineno) + 1):
                out[line] = (f"{SKIPPED_TEST}: `{shown}` skips it first, and its `{name}` comes from cases built "
                             f'from `{probed[0]}`, which gets "cuda" only behind `torch.cuda.is_available()` '
                             f"(line {probed[1]}), kept as written: False there")
            break
    return out


def _skips_unless_cuda(statement: ast.stmt) -> Optional[str]:
    """`if name != "cuda": pytest.skip(...)`: name."""
    if not (isinstance(statement, ast.If) and not statement.orelse and statement.body and all(
            isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
            and (astcache.dotted(s.value.func) or "").rpartition(".")[2] in _SKIP_CALLS for s in statement.body)):
        return None
    test = statement.test
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotEq) \
            and isinstance(test.left, ast.Name) and isinstance(test.comparators[0], ast.Constant) \
            and test.comparators[0].value == "cuda":
        return test.left.id
    return None


# ----------------------------------------------------------------------------- BT#2: label fields
def _label_field(tree: ast.Module, parents: dict) -> dict[int, str]:
    classes: dict[str, list[str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        decorated = any("dataclass" in (astcache.dotted(getattr(d, "func", d)) or "") for d in node.decorator_list)
        named_tuple = len(node.bases) == 1 and (astcache.dotted(node.bases[0]) or "").endswith("NamedTuple")
        fields = [s for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
        # (inherited fields or ones left out of __init__ would shift the positions: not read)
        plain = all("ClassVar" not in ast.unparse(s.annotation) and "init=False" not in ast.unparse(s)
                    for s in fields) and not node.keywords
        if plain and ((decorated and not node.bases) or named_tuple):
            classes[node.name] = [s.target.id for s in fields]
    if not classes:
        return {}
    handed = {a.attr for c in astcache.nodes(tree, (ast.Call,)) for arg in [*c.args, *(k.value for k in c.keywords)]
              for a in [arg] if isinstance(a, ast.Attribute) and (astcache.dotted(c.func) or "") not in _SHOWN}
    out: dict[int, str] = {}
    for call in astcache.nodes(tree, (ast.Call,)):
        if not (isinstance(call.func, ast.Name) and call.func.id in classes):
            continue
        fields = classes[call.func.id]
        bound = [*zip(fields, call.args), *((k.arg, k.value) for k in call.keywords if k.arg)]
        for field, value in bound:
            if field in _LABEL_FIELDS and field not in handed and isinstance(value, ast.Constant) \
                    and value.value in ("nccl", "cuda"):
                out[value.lineno] = (f"{LABEL}the `{field}` field of `{call.func.id}`, this file's own record, "
                                     "used as the entry's name, never handed to a call")
    return out


