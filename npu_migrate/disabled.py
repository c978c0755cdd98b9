"""CUDA-only code behind the code's own switch-off where CUDA is missing (issue #16, round-8 audits).

Real projects probe for a CUDA library and turn the feature off where it is missing; the CUDA
code they keep behind the probe runs only where the probe succeeded, never on an NPU host. The
audits read the findings there as false. `review(findings, text)` lowers them to info with a
reason moot.py names as a skipped scope (nothing is dropped: each keeps its code and lines):

- a library bound in a `try` whose `except` disables the feature (`try: self.nccl =
  NCCLLibrary(path) except Exception: self.disabled = True; return`): the uses of `self.nccl`
  after the `try` in the same method (when the handler returns) or behind a test of the flag
  the handler sets (`if self.disabled: return` first, `if not self.disabled:`, `if self.nccl is
  None: return`) run only where the CUDA library loaded. Reason `LIBRARY_DISABLED` (AS_WRITTEN:
  the handler, the code's own answer to a missing library, is what an NPU host runs). Only a
  value whose callee names a CUDA library (`_CUDA_LIBRARY`: NCCL, cuBLAS, NVML, the CUDA
  runtime, cupy, NVSHMEM; never `torch.cuda.*`, which the migration rewrites) counts; a use that no flag test guards stays a finding.
- a flag true on an NPU host (`self.disabled = disabled or not current_platform.is_cuda()`,
  every assignment of it in the class true there, as testscopes' `_truth` reads it) and a
  branch `if self.disabled: ... else: <CUDA code>`: the `else` is a branch an NPU host does not
  take (the mirror of capability.py's `_false_attribute_branches` for true flags); reason "in a
  branch an NPU host does not take" (moot.PHRASES).
- the mirror for `or` (round 28, CB#5): a CUDA reference in the test of an `if` that is an `or`
  whose part before it is true on an NPU host (`not current_platform.is_cuda_alike() or
  torch.cuda.memory.get_allocator_backend() != "native"`): the reference is never evaluated
  there, and the branch (the code's own fallback) runs as written; reason `TRUE_TEST`
  (AS_WRITTEN). A reference before the true part, or one that is the true part, stays.
- a CUDA reference inside the test of an `if` that is an `and` with another part false on an
  NPU host (`_is_device("cuda", t.device) and is_sm_at_least_90()`, `current_platform.is_cuda()
  and torch.cuda.is_current_stream_capturing()`): the test's value there does not depend on the
  reference, and the code after it (the fallback) runs as written; reason `FALSE_TEST`
  (AS_WRITTEN). The false part must come first (it short-circuits the reference), unless the
  reference is a string literal; a reference that is the whole test stays.

The CUDA version probes in a `try` with a fallback (`torch.cuda.nccl.version()`) are
versionprobes.py's. Nothing here changes what is rewritten.
"""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import replace

from . import astcache
from .astcache import dotted as _dotted
from .astcache import walk_statements
from .capability import self_assignments
from .findings import Finding
from .probes import parse_text

LIBRARY_DISABLED = ("a CUDA library loaded in a `try` whose `except` disables the feature: "
                    "its uses run only where the library loaded, never on an NPU host")
FALSE_TEST = ("a CUDA test inside a condition false on an NPU host: the fallback after it runs there as written")
TRUE_TEST = ("a CUDA test after a part true on an NPU host in an `or`: it is never evaluated there, "
             "and the branch the `or` opens runs there as written")

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# a CUDA library's loader (`NCCLLibrary(path)`, `CudaRTLibrary()`, `pynvml.nvmlInit`); not `torch.cuda.*`,
# which the migration rewrites to torch.npu (it loads there, and the feature stays on)
_CUDA_LIBRARY = re.compile(r"(?i)nccl|cublas|nvml|cupy|nvshmem|cudnn|cufile|cudart|cudalibrary|libcuda")
_TRIGGER = re.compile(r"(?i)\btry\b|\bif\b")


def _self_attr(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _exits(block: list) -> bool:
    return bool(block) and isinstance(block[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


# ----------------------------------------------------------------------------- (a) a library the handler disables
def _library_tries(method: ast.AST):
    """(try, attribute, flags, handler returns) of each `try` of the method binding `self.<attr> =
    <CUDA library call>` whose handlers disable it: flags maps a flag the handler sets to the value
    (`self.disabled = True` -> True, `self.available = False` -> False; `self.<attr> = None` -> None
    under the attribute's own name)."""
    for stmt in walk_statements(method):
        if not isinstance(stmt, ast.Try) or not stmt.handlers:
            continue
        for inner in stmt.body:
            if not (isinstance(inner, ast.Assign) and len(inner.targets) == 1 and isinstance(inner.value, ast.Call)):
                continue
            attr = _self_attr(inner.targets[0])
            callee = _dotted(inner.value.func) or ""
            if attr is None or callee.startswith("torch.") or not _CUDA_LIBRARY.search(callee):
                continue
            flags: dict[str, object] = {}
            ok, returns = True, True
            for handler in stmt.handlers:
                if any(isinstance(n, ast.Raise) for n in ast.walk(handler)):
                    ok = False
                    break
                here: dict[str, object] = {}
                for node in handler.body:
                    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Constant):
                        name = _self_attr(node.targets[0])
                        if name is not None and node.value.value in (True, False, None):
                            here[name] = node.value.value
                    elif isinstance(node, ast.Assign) and any(_self_attr(t) == attr for t in node.targets):
                        ok = False  # (binds a substitute: its uses run on an NPU host)
                if here.get(attr, None) is not None:
                    ok = False
                returns = returns and _exits(handler.body) and isinstance(handler.body[-1], ast.Return)
                for name, value in here.items():
                    if name in flags and flags[name] != value:
                        ok = False
                    flags[name] = value
            if ok and (flags or returns):
                yield stmt, attr, flags, returns


def _disables(test: ast.AST, attr: str, flags: dict) -> bool:
    """Whether `test` true means the feature is off: `self.disabled`, `not self.available`,
    `self.nccl is None`, or an `or` holding one."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return any(_disables(v, attr, flags) for v in test.values)
    name = _self_attr(test)
    if name is not None:
        return flags.get(name) is True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        name = _self_attr(test.operand)
        return name is not None and flags.get(name) is False
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is)
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None):
        name = _self_attr(test.left)
        return name is not None and (name == attr or flags.get(name) is None and name in flags)
    return False


def _enables(test: ast.AST, attr: str, flags: dict) -> bool:
    """Whether `test` true means the feature is on: `not self.disabled`, `self.available`,
    `self.nccl is not None`, or an `and` holding one."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_enables(v, attr, flags) for v in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _disables(test.operand, attr, flags)
    name = _self_attr(test)
    if name is not None:
        return flags.get(name) is False or name == attr
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot)
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None):
        name = _self_attr(test.left)
        return name is not None and (name == attr or flags.get(name) is None and name in flags)
    return False


def _guarded_lines(method: ast.AST, attr: str, flags: dict) -> set[int]:
    """The lines of the method that run only where the feature is on: after a top-level `if
    <off>: ... return`, in the body of `if <on>:` or the `else` of `if <off>:`."""
    out: set[int] = set()
    for index, stmt in enumerate(method.body):
        if isinstance(stmt, ast.If) and _exits(stmt.body) and _disables(stmt.test, attr, flags):
            for later in method.body[index + 1:]:
                out.update(range(later.lineno, (later.end_lineno or later.lineno) + 1))
            break
    for node in ast.walk(method):
        if isinstance(node, ast.If):
            if node.body and _enables(node.test, attr, flags):
                out.update(range(node.body[0].lineno, (node.body[-1].end_lineno or node.body[-1].lineno) + 1))
            if node.orelse and _disables(node.test, attr, flags):
                out.update(range(node.orelse[0].lineno, (node.orelse[-1].end_lineno or node.orelse[-1].lineno) + 1))
    return out


def _bound_once(tree: ast.Module):
    """(class, its methods, method, the `try`, attribute, flags, returns) of each _library_tries
    entry of a class's method whose `self.<attribute>` the class binds once (bound elsewhere too:
    its uses may meet another value on an NPU host). Shared with disabledcallers27.py."""
    for cls in (n for n in astcache.walk(tree) if isinstance(n, ast.ClassDef)):
        methods = [m for m in cls.body if isinstance(m, _FUNCTIONS)]
        bound: dict[str, int] = {}
        for method in methods:
            for node in ast.walk(method):
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                        name = _self_attr(target)
                        if name is not None:
                            bound[name] = bound.get(name, 0) + 1
        for method in methods:
            for stmt, attr, flags, returns in _library_tries(method):
                if bound.get(attr, 0) == 1:
                    yield cls, methods, method, stmt, attr, flags, returns


def _loaded_only_helpers(tree: ast.Module, methods: list, loaded: set) -> set[int]:
    """The lines of each private method of a class (`_init_comm`, not a dunder) whose every
    reference in the file is a `self._init_comm(...)` call on a line of `loaded` (lines that run only
    where the library loaded), or on such a method's own lines: it runs only there too (round 31
    FC#4: pynccl's `ncclCommInitRank` in `_init_comm`, which `__init__` and `from_unique_id_bytes`
    call only after `self.nccl = NCCLLibrary(path)` succeeded). A private name is the file's own;
    one named anywhere else in the file (stored, passed on, in a string) keeps its lines."""
    private = {m.name: m for m in methods if m.name.startswith("_") and not m.name.endswith("__")}
    added: set[int] = set()
    if not private:
        return added
    refs: dict[str, list] = {}
    for node in astcache.walk(tree):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else (
            node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None)
        if name in private:
            refs.setdefault(name, []).append(node)
    parents = astcache.parents(tree)

    def called_where_loaded(ref: ast.AST, name: str) -> bool:
        call = parents.get(id(ref))
        return (isinstance(ref, ast.Attribute) and _self_attr(ref) == name and isinstance(call, ast.Call)
                and call.func is ref and (ref.lineno in loaded or ref.lineno in added))

    changed = True
    while changed:
        changed = False
        for name, method in private.items():
            if method.lineno in added or not refs.get(name):
                continue
            if all(called_where_loaded(r, name) for r in refs[name]):
                first = min([method.lineno, *(d.lineno for d in method.decorator_list)])
                added.update(range(first, (method.end_lineno or method.lineno) + 1))
                changed = True
    return added


def _library_lines(tree: ast.Module, lines: list) -> dict[int, str]:
    """Line -> the attribute, for each line that uses a disabled library only where it loaded (the
    `try` body binding it included)."""
    out: dict[int, str] = {}
    for _cls, methods, method, stmt, attr, flags, returns in _bound_once(tree):
        body_end = max(s.end_lineno or s.lineno for s in stmt.body)
        for line in range(stmt.body[0].lineno, body_end + 1):
            out[line] = attr
        if returns and stmt in method.body:
            end = method.end_lineno or method.lineno
            for line in range((stmt.end_lineno or stmt.lineno) + 1, end + 1):
                out.setdefault(line, attr)
        for other in methods:
            for line in _guarded_lines(other, attr, flags):
                out.setdefault(line, attr)
        for line in _loaded_only_helpers(tree, methods, {n for n, a in out.items() if a == attr}):
            out.setdefault(line, attr)
    return out


# ----------------------------------------------------------------------------- (c) a flag true on an NPU host
class _Substitute(ast.NodeTransformer):
    def __init__(self, names: set):
        self.names = names

    def visit_Attribute(self, node: ast.Attribute):
        if _self_attr(node) in self.names:
            return ast.copy_location(ast.Constant(True), node)
        return self.generic_visit(node)


def true_flag_branches(tree: ast.Module, lines: list, truth, segment) -> list[tuple[int, int, str]]:
    """(first, last, why) of the `else` of `if self.flag:` in a class whose every assignment of
    `self.flag` is a value true on an NPU host (not a constant), the attribute being assigned
    nowhere else in the file and no `setattr` in it, and the class derived by none of the file's
    classes."""
    if "setattr" in "".join(lines):
        return []
    derived = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
               for c in astcache.walk(tree) if isinstance(c, ast.ClassDef) for b in c.bases}
    classes = [c for c in astcache.walk(tree) if isinstance(c, ast.ClassDef)]
    per_class, elsewhere = self_assignments(tree)
    assigned: dict[str, list] = {}
    owners: dict[str, set] = {}
    for cls_id, attrs in per_class.items():
        for name, values in attrs.items():
            assigned.setdefault(name, []).extend(values)
            owners.setdefault(name, set()).add(cls_id)
    true = {name for name, values in assigned.items() if name not in elsewhere and len(owners[name]) == 1
            and all(not isinstance(v, ast.Constant) and truth(v) is True for v in values)}
    if not true:
        return []
    out = []
    for cls in classes:
        if cls.name in derived:
            continue
        for method in (m for m in cls.body if isinstance(m, _FUNCTIONS)):
            for node in ast.walk(method):
                if not isinstance(node, ast.If) or not node.orelse:
                    continue
                names = {_self_attr(n) for n in ast.walk(node.test)} & true
                if not names or truth(node.test) is True:
                    continue
                shown = _Substitute(names).visit(copy.deepcopy(node.test))
                if truth(shown) is True:
                    flag = sorted(names)[0]
                    source = segment(lines, assigned[flag][0])
                    why = (f"not ({segment(lines, node.test)}): `self.{flag}` is only ever `{source}`, "
                           f"true on an NPU host")
                    out.append((node.orelse[0].lineno, node.orelse[-1].end_lineno or node.orelse[-1].lineno, why))
    return out


# ----------------------------------------------------------------------------- (4) a CUDA test in a false condition
def _operands(test: ast.AST, op: type) -> list[ast.AST]:
    """The operands of a chain of one boolean operator (`a and (b and c)`: a, b, c)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, op):
        return [part for value in test.values for part in _operands(value, op)]
    return [test]


def _decided_tests(tree: ast.Module, truth, op: type, value: bool) -> list[tuple[ast.AST, list]]:
    """(test, the parts that decide it) of each `if` whose test is a chain of `op` with a part of
    `value` on an NPU host: an `and` with a false part, an `or` with a true part
    (`not current_platform.is_cuda_alike() or torch.cuda.x() != "native"`). A CUDA reference in
    another part does not decide the test there (one that decides it, like
    `torch.is_autocast_enabled("cuda")` alone, stays: on an NPU host its answer is the question)."""
    out = []
    for node in walk_statements(tree):
        if isinstance(node, ast.If) and truth(node.test) is value:
            parts = _operands(node.test, op)
            deciding = [part for part in parts if truth(part) is value]
            if deciding and len(parts) > 1:
                out.append((node.test, deciding))
    return out


def _within(finding: Finding, node: ast.AST) -> bool:
    start = (node.lineno, node.col_offset)
    end = (node.end_lineno or node.lineno, node.end_col_offset or 0)
    return start <= (finding.line, finding.column) < end or start <= (finding.line, finding.column - 1) < end


def review(findings: list[Finding], text: str) -> list[Finding]:
    """Report-only findings in code behind the code's own switch-off where CUDA is missing, lowered
    to info with the reason (see the module's doc)."""
    candidates = [f for f in findings if not f.fixable and f.cell is None and f.severity != "info"]
    if not candidates or not _TRIGGER.search(text):
        return findings
    tree = parse_text(text)
    if tree is None:
        return findings
    from .testscopes import npu_truth as _truth  # (lazily, as run.py imports testscopes)
    from .testscopes import source_segment as _segment

    lines = text.splitlines(keepends=True)
    reasons: dict[int, str] = {}
    library = _library_lines(tree, lines) if "try" in text else {}
    for f in candidates:
        attr = library.get(f.line)
        if attr is not None and (f"self.{attr}" in (f.source or "") or f.line in library and (
                f"self.{attr}" in lines[f.line - 1] if f.line - 1 < len(lines) else False)):
            reasons[id(f)] = f"{LIBRARY_DISABLED} (`self.{attr}`)"
    branches = true_flag_branches(tree, lines, _truth, _segment)
    for f in candidates:
        if id(f) in reasons:
            continue
        for first, last, why in branches:
            if first <= f.line <= last:
                reasons[id(f)] = f"in a branch an NPU host does not take: {why}"
                break
    tests = _decided_tests(tree, _truth, ast.And, False)
    for f in candidates:
        if id(f) in reasons:
            continue
        for test, false in tests:
            # a false part before the reference short-circuits it; one after it leaves a call to
            # run on an NPU host (it may raise there), so only a string literal (`"cuda"`) passes
            before = any((p.end_lineno or p.lineno, p.end_col_offset or 0) <= (f.line, f.column - 1) for p in false)
            literal = (f.source or "")[:1] in ("'", '"')
            if _within(f, test) and any(not _within(f, part) for part in false) and (before or literal):
                reasons[id(f)] = f"{FALSE_TEST}: `{_segment(lines, test)}`"
                break
    for f in candidates:
        if id(f) in reasons:
            continue
        for test, true in _decided_tests(tree, _truth, ast.Or, True):
            # (only a true part before the reference short-circuits it: one after it leaves it to run)
            before = any((p.end_lineno or p.lineno, p.end_col_offset or 0) <= (f.line, f.column - 1) for p in true)
            if _within(f, test) and before and not any(_within(f, part) for part in true):
                reasons[id(f)] = f"{TRUE_TEST}: `{_segment(lines, test)}`"
                break
    if not reasons:
        return findings
    return [replace(f, severity="info", message=f"{f.message} ({reasons[id(f)]})") if id(f) in reasons else f
            for f in findings]


# ----------------------------------------------------------------------------- (d) a CUDA op builder beside an NPU one
# DeepSpeed's op builders: `CUDAOpBuilder(OpBuilder)` builds the CUDA extensions, and a project
# whose accelerator builds its ops for NPU has `op_builder/npu/` with an `NPUOpBuilder(OpBuilder)`
# of its own: an NPU host never instantiates the CUDA one (its accelerator's op builders are the
# NPU ones), so `CUDAOpBuilder`'s methods, and the module functions only they call (named in no
# other file), never run there. Whole-program (runplan.py, after wholeprogram.review).
CUDA_BUILDERS = ("CUDAOpBuilder",)
_ALSO_ANYWHERE = re.compile(r" \(also at lines? [^()]*\)")
_NPU_BUILDER = re.compile(rb"^[ \t]*class[ \t]+(\w+)[ \t]*\([ \t]*OpBuilder[ \t]*\)", re.MULTILINE)


def _npu_builder(results, texts) -> tuple[str, str] | None:
    """(class, path) of an op builder for NPU: a class deriving from OpBuilder in `op_builder/npu/`."""
    for i, result in enumerate(results):
        rel = result.relpath
        if rel.endswith(".py") and "op_builder/npu/" in rel:
            data = texts(i) or b""
            match = _NPU_BUILDER.search(data)
            if match:
                return match.group(1).decode(), rel
    return None


def _builder_spans(tree: ast.Module, name_free) -> list[tuple[int, int, str]]:
    """(first, last, what) of the CUDA builder's methods and of the module functions only they call."""
    spans = []
    classes = [c for c in tree.body if isinstance(c, ast.ClassDef) and c.name in CUDA_BUILDERS]
    if not classes:
        return spans
    inside: set[int] = set()
    for cls in classes:
        for method in (m for m in cls.body if isinstance(m, _FUNCTIONS)):
            first = min([method.lineno, *(d.lineno for d in method.decorator_list)])
            spans.append((first, method.end_lineno or method.lineno, f"`{cls.name}.{method.name}`"))
            inside.update(id(n) for n in ast.walk(method))
    for function in (f for f in tree.body if isinstance(f, _FUNCTIONS)):
        uses = [n for n in astcache.walk(tree) if isinstance(n, ast.Name) and n.id == function.name]
        if uses and all(id(n) in inside for n in uses) and name_free(function.name):
            callers = sorted({f"`{c.name}`" for c in classes})
            spans.append((function.lineno, function.end_lineno or function.lineno,
                          f"`{function.name}`, called only by {', '.join(callers)}"))
    return spans


def review_builders(results: list, paths: dict | None = None) -> list:
    """The report-only findings in a CUDA op builder's methods (and the functions only they call)
    of a project that builds its ops for NPU with a builder of its own, lowered to info with the
    reason: a named scope (moot.PHRASES). A merged finding with places outside is split: those stay."""
    from .findings import lower_pieces
    from .moot import is_moot
    from .modpaths import result_bytes

    def _lowerable(finding) -> bool:
        return not finding.fixable and finding.cell is None and not is_moot(finding)

    paths = paths or {}
    holders = [i for i, r in enumerate(results) if r.relpath.endswith(".py")
               and any(_lowerable(f) and f.severity != "info" for f in r.findings)]
    if not holders:
        return results
    cache: dict[int, bytes | None] = {}

    def texts(i: int) -> bytes | None:
        if i not in cache:
            cache[i] = result_bytes(results[i], paths)
        return cache[i]

    candidates = [i for i in holders if b"class CUDAOpBuilder" in (texts(i) or b"")]
    if not candidates:
        return results
    twin = _npu_builder(results, texts)
    if twin is None:
        return results
    npu_class, npu_path = twin
    out = list(results)
    for i in candidates:
        data = texts(i) or b""
        tree = parse_text(data.decode("utf-8", "replace"))
        if tree is None:
            continue

        def name_free(name: str, i=i, data=data) -> bool:
            word = re.compile(rb"\b" + re.escape(name.encode()) + rb"\b")
            return not any(j != i and results[j].relpath.endswith(".py") and (texts(j) or b"") != data
                           and word.search(texts(j) or b"") for j in range(len(results)))

        spans = _builder_spans(tree, name_free)
        if not spans:
            continue
        def reason(line: int, spans=spans):
            span = next((s for s in spans if s[0] <= line <= s[1]), None)
            return None if span is None else (
                f"in a CUDA op builder the project does not build for NPU: {span[2]}; "
                f"the project builds its ops for NPU with `{npu_class}` in {npu_path}")

        def tidy(piece):
            return replace(piece, message=_ALSO_ANYWHERE.sub("", piece.message))

        findings, changed = [], False
        for finding in results[i].findings:
            lowered = (lower_pieces(finding, reason, tidy)
                       if _lowerable(finding) and finding.severity != "info" else None)
            changed |= lowered is not None
            findings += [finding] if lowered is None else lowered
        if changed:
            out[i] = replace(results[i], findings=sorted(findings))
    return out


# public names for labels20.py (a CUDA library attribute bound in a disabling `try` and a raising one)
library_tries = _library_tries
guarded_lines = _guarded_lines
self_attr = _self_attr
CUDA_LIBRARY = _CUDA_LIBRARY
disables = _disables  # (disabledcallers27.py)
enables = _enables
exits = _exits
library_lines = _library_lines
bound_once = _bound_once  # (disabledcallers27.py)
loaded_only_helpers = _loaded_only_helpers  # (labels20.py)
