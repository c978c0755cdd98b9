"""Blocks behind a module-level platform flag an NPU host answers False, the flag's predicate
defined in another module of the project (issue #16, round-16 audit AQ#14, AQ#15, AQ#20, AQ#27).
Whole run, from runplan.whole_run_passes.

SGLang writes `_is_cuda = is_cuda()` (and `_is_xpu = is_xpu()`, `_use_sgl_xpu =
use_intel_xpu_backend()`) at module level, or imports such a flag by name from a module that binds
it (`from sglang.srt.models.deepseek_common.utils import _is_cuda`), and imports its CUDA kernel
package under `if _is_cuda:`, `elif _is_xpu:`, `if not (_is_npu or _is_hip) and _is_cuda:`.
The predicates live in the project's utils:

    def is_cuda(): return torch.cuda.is_available() and torch.version.cuda   # None on an NPU host
    def is_xpu(): return hasattr(torch, "xpu") and torch.xpu.is_available()  # False there
    def use_intel_xpu_backend(): return get_bool_env_var("...") and is_xpu()  # False there

importgates.false_predicates and gatedcalls.predicate_branches read the first kind (names of
CUDA/ROCm) for a flag the file binds itself and lower a finding only when all its places are
inside; this pass adds:

* predicates named for any platform (xpu too) whose one `return` is false once the project's
  other false predicates are read as False (a fixed point: `use_intel_xpu_backend()` through
  `is_xpu()`); every top-level definition of the name in the run must be false;
* flags imported by name from the run's module that binds them once (`from .utils import _is_cuda`),
  resolved in that module;
* merged findings split (findings.lower_pieces): the places inside such a block become info, the
  others stay as they were (fused_moe.py's probe under `if not _is_cuda and not _is_hip ...:`).

A name such an import binds (and nothing outside the blocks binds) that is read in a block an NPU
host takes whenever the code around it runs (the `else:` of `if _is_cuda: ... elif _is_hip: ...`,
in the same function) is a NameError there (SGLang's moe_runner/triton.py `vllm_ops.moe_sum` in its
last `else`): that read is reported (error), and the import itself is info. A read elsewhere (in a
function an NPU host may never call) is not taken as proof either way: the import is lowered, as
gatedcalls.predicate_branches lowers one under a flag the file binds itself. The lowered places are info with "in a branch an NPU host does
not take" (moot.PHRASES: a named skipped scope), quoting the condition and the predicates read.

A merged NPU911 whose only import lies in such a block and whose other places are FP8 uses folded
into it (minicpm3.py's `bmm_fp8`, round-17 AT#36) is split too: the import is a named scope, and each
FP8 use stays only in another open finding of the file whose statement holds it, else comes back as
its own NPU913 (`unfold_fp8`). FP8 in a function that launches the module's CuTe-DSL kernels folds
into the NPU911 of the module's `cutlass` import (`fold_cute_fp8`, AV#18).

Cheap byte tests select the files before any parse: an open report-only finding on an indented line,
an `if` naming a flag bound or imported by the file; predicates are read once per run, only from
files whose bytes hold a platform-named `def` with a one-line `return`.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import re
from typing import Optional

from . import astcache
from .modpaths import RunModules

_PLATFORM = re.compile(r"cuda|hip|rocm|xpu|hopper|blackwell|gfx\d|(^|_)sm_?\d", re.IGNORECASE)
# a top-level function with no parameters whose body is one `return` (decorators allowed)
_PREDICATE_DEF = re.compile(rb"^def[ \t]+(\w+)[ \t]*\([ \t]*\)[^:\n]*:[ \t]*\n(?:[ \t]*(?:#[^\n]*|\"\"\"[^\n]*\"\"\")?\n)*"
                            rb"[ \t]+return[ \t]+([^\n]+)$", re.MULTILINE)
_ANY_DEF = re.compile(rb"^def[ \t]+(\w+)[ \t]*\(", re.MULTILINE)
_CALL_FLAG = re.compile(rb"^(\w+)[ \t]*=[ \t]*[^\n]*\b\w+\(", re.MULTILINE)
_IMPORTED_FLAG = re.compile(rb"\b(_?(?:is|use|has|on)_\w+)\b")
_MAX_DEPTH = 4


def false_predicates(results: list, text_of) -> frozenset:
    """Names of the run's top-level functions without parameters whose every definition is one
    `return` false on an NPU host, reading calls of the others found so as False."""
    from . import catalogue

    rocm = re.compile(catalogue.read_table("scopes.toml")["files"]["rocm_name"], re.IGNORECASE)
    bodies: dict[str, list[Optional[ast.AST]]] = {}
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py") or rocm.search(result.relpath.rsplit("/", 1)[-1][:-3]):
            continue  # (a ROCm module's own `is_hip()`, asking Triton's backend, is no project predicate)
        data = text_of(i)
        if not data or b"return" not in data or b"def " not in data:
            continue
        names = [m.group(1).decode() for m in _ANY_DEF.finditer(data)]
        names = [n for n in names if _PLATFORM.search(n)]
        if not names:
            continue
        single = {m.group(1).decode(): m.group(2).decode("utf-8", "replace") for m in _PREDICATE_DEF.finditer(data)}
        for name in names:
            body = single.get(name)
            node = None
            if body is not None:
                try:
                    node = ast.parse(body.strip(), mode="eval").body
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    try:  # (a trailing comment)
                        node = ast.parse(body.split("#")[0].strip(), mode="eval").body
                    except (SyntaxError, ValueError, RecursionError, MemoryError):
                        node = None
            bodies.setdefault(name, []).append(node)
    from .testscopes import npu_truth

    found: set[str] = set()
    while True:
        grew = False
        for name, nodes in bodies.items():
            if name in found or any(n is None for n in nodes):
                continue
            if all(npu_truth(_Resolve({}, frozenset(found)).visit(copy.deepcopy(n))) is False for n in nodes):
                found.add(name)
                grew = True
        if not grew:
            return frozenset(found)


class _Resolve(ast.NodeTransformer):
    """A condition with the module's flags replaced by their bound (or imported) value, and the
    calls of the project's false predicates by False."""

    def __init__(self, bound: dict, predicates: frozenset):
        self.bound, self.predicates, self.depth = bound, predicates, 0

    def visit_Name(self, node: ast.Name):
        from .testscopes import npu_truth

        value = self.bound.get(node.id)
        if value is not None and self.depth < _MAX_DEPTH and npu_truth(node) not in (True, False):
            # (a name testscopes decides by itself, `_is_hip`, keeps its answer)
            self.depth += 1
            try:
                return self.visit(copy.deepcopy(value))
            finally:
                self.depth -= 1
        return node

    def visit_Call(self, node: ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id in self.predicates and not node.args and not node.keywords:
            return ast.copy_location(ast.Constant(False), node)
        self.generic_visit(node)
        return node


class _Modules(RunModules):
    """The run's modules by dotted name, and the flags each binds once at module level."""

    def binding(self, module: str, name: str, depth: int = 0) -> Optional[ast.AST]:
        """The value `name` is bound to once at the top of `module` (followed through that
        module's own `from X import name`), with its own flags resolved in place; or None."""
        i = self.by_name.get(module)
        if i is None or depth > 2:
            return None
        data = self.text_of(i) or b""
        if not re.search(rb"\b" + re.escape(name.encode()) + rb"\b", data):
            return None
        tree = self.tree(i)
        if tree is None:
            return None
        bound = bindings(tree, self, self.results[i].relpath, depth + 1)
        value = bound.get(name)
        if value is None:
            return None
        return _Resolve(bound, frozenset()).visit(copy.deepcopy(value))


def bindings(tree: ast.Module, modules: Optional[_Modules], relpath: str, depth: int = 0) -> dict[str, ast.AST]:
    """The module's names bound exactly once, at its top level: by an assignment
    (importgates.module_bindings), or by a `from M import name` of a run module that binds it."""
    from .importgates import module_bindings
    from .modpaths import resolve_relative

    bound = dict(module_bindings(tree))
    if modules is None:
        return bound
    stores: dict[str, int] = {}
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            stores[node.id] = stores.get(node.id, 0) + 1
        elif isinstance(node, ast.alias):
            name = (node.asname or node.name).split(".")[0]
            stores[name] = stores.get(name, 0) + 1
    same: dict[str, list] = {}  # (a flag bound twice to the same call at the top: `_is_xpu = is_xpu()` twice)
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            same.setdefault(stmt.targets[0].id, []).append(stmt.value)
    for name, values in same.items():
        if name not in bound and len(values) == stores.get(name, 0) > 1 and len({ast.dump(v) for v in values}) == 1:
            bound[name] = values[0]
    for stmt in tree.body:
        if not isinstance(stmt, ast.ImportFrom) or any(a.name == "*" for a in stmt.names):
            continue
        module = resolve_relative(relpath, stmt.level, stmt.module or "").replace("/", ".") if stmt.level \
            else stmt.module or ""
        for alias in stmt.names:
            local = alias.asname or alias.name
            if local in bound or stores.get(local, 0) != 1 or not _IMPORTED_FLAG.fullmatch(alias.name.encode()):
                continue
            value = modules.binding(module, alias.name, depth)
            if value is not None:
                bound[local] = value
    return bound


def false_blocks(tree: ast.Module, lines: list[str], bound: dict, predicates: frozenset,
                 taken: Optional[list] = None) -> list[tuple[int, int, str]]:
    """(first, last, condition) of the `if` bodies false on an NPU host once flags and predicates
    are read, and the `else` of those true there; `taken`, when given, gets the blocks an NPU host
    takes whenever it reaches their `if` (the body of a test true there, the plain `else:` of one
    false there: the last arm of `if _is_cuda: ... elif _is_hip: ... else: ...`)."""
    from .testscopes import if_statements, npu_truth, source_segment

    resolver = _Resolve(bound, predicates)
    out = []
    for node in if_statements(tree):
        if not node.body:
            continue
        names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
        calls = {n.func.id for n in ast.walk(node.test) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        if not (names & bound.keys()) and not (calls & predicates):
            continue
        truth = npu_truth(resolver.visit(copy.deepcopy(node.test)))
        shown = source_segment(lines, node.test)
        if truth is False:
            out.append((min([node.body[0].lineno, *(d.lineno for d in getattr(node.body[0], "decorator_list", ()))]),
                        node.body[-1].end_lineno or node.body[-1].lineno, shown))
            if taken is not None and node.orelse and not (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)):
                taken.append((node.orelse[0].lineno, node.orelse[-1].end_lineno or node.orelse[-1].lineno, f"not ({shown})"))
        elif truth is True:
            if node.orelse:
                out.append((node.orelse[0].lineno, node.orelse[-1].end_lineno or node.orelse[-1].lineno, f"not ({shown})"))
            if taken is not None:
                taken.append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno, shown))
    return out


_FROM_SOURCE = re.compile(r"from\s+([\w.]+)\s+import\b")
_FROM_MESSAGE = re.compile(r"^(C\+\+/CUDA extension or CUDA-only compiled package: import from )`[\w.]+`")


def _own_module(piece):
    """A place split from a merged NPU911 names its own module (`from vllm import _custom_ops`
    merged under "import from `sgl_kernel`" says vllm once on its own)."""
    match = _FROM_SOURCE.match(piece.source or "")
    if match is None or not _FROM_MESSAGE.match(piece.message):
        return piece
    return dataclasses.replace(piece, message=_FROM_MESSAGE.sub(lambda m: f"{m.group(1)}`{match.group(1)}`", piece.message, 1))


def _only_folded(pieces: list, tree: ast.Module) -> bool:
    """Whether the places a split NPU911 keeps are all uses folded into its imports (no import
    statement among them): left alone, they would stand under the import's message at a line that
    holds none (`torch.float8_e4m3fn` "in a class that computes with this CUDA-only package's ops");
    the finding then stays whole, as it was."""
    kept = [p for p in pieces if p.severity != "info"]
    places = [n for p in kept for n in (p.line, *(line for line, _c, _s in p.also))]
    return bool(places) and not any(_import_at(tree, n) is not None for n in places)


def _function_at(tree: ast.Module, line: int) -> Optional[ast.AST]:
    """The innermost function whose body holds `line` (None: module level)."""
    best = None
    for node in astcache.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and node.body:
            first = node.body[0].lineno if isinstance(node.body, list) else node.lineno
            if first <= line <= (node.end_lineno or node.lineno) and (best is None or node.lineno >= best.lineno):
                best = node
    return best


def _told(condition: str, bound: dict, predicates: frozenset) -> str:
    """What makes the condition false: the project's predicates its flags are bound to (`(the
    project's `is_cuda()` is false or None there)`), or a flag bound so in another module."""
    try:
        node = ast.parse(condition.removesuffix("...").strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    resolved = _Resolve({n: v for n, v in bound.items() if n in names}, frozenset()).visit(node)
    called = sorted({n.func.id for n in ast.walk(resolved) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                     and n.func.id in predicates})
    if called:
        return f" (the project's {', '.join(f'`{p}()`' for p in called)} {'is' if len(called) == 1 else 'are'} false or None there)"
    return " (a flag bound to a platform check false there)" if names & bound.keys() else ""


def _import_at(tree: ast.Module, line: int) -> Optional[ast.stmt]:
    for node in astcache.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and node.lineno <= line <= (node.end_lineno or node.lineno):
            return node
    return None


def read_outside(tree: ast.Module, statement: ast.stmt, blocks: list) -> list[tuple[str, int]]:
    """(name, line) of the names the import binds that some line outside every block reads, where
    no binding of the name lies outside the blocks (a NameError on an NPU host)."""
    names = {(a.asname or a.name).split(".")[0] for a in statement.names if a.name != "*"}

    def inside(n: int) -> bool:
        return any(first <= n <= last for first, last, _why in blocks)

    bound_outside: set[str] = set()
    reads: list[tuple[str, int]] = []
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name) and node.id in names:
            if isinstance(node.ctx, ast.Load):
                if not inside(node.lineno):
                    reads.append((node.id, node.lineno))
            elif not inside(node.lineno):
                bound_outside.add(node.id)
        elif isinstance(node, ast.alias) and node is not None:
            name = (node.asname or node.name).split(".")[0]
            if name in names and not inside(getattr(node, "lineno", 0) or 0):
                bound_outside.add(name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in names:
            if not inside(node.lineno):
                bound_outside.add(node.name)
        elif isinstance(node, ast.arg) and node.arg in names:
            bound_outside.add(node.arg)
    return sorted((n, line) for n, line in reads if n not in bound_outside)


BRANCH = "in a branch an NPU host does not take"  # (moot.PHRASES)


def _in_branch(finding) -> bool:
    return finding.severity == "info" and f"({BRANCH}" in finding.message


def review(results: list, paths: dict) -> list:
    """The results, with the report-only places inside the blocks of this module's docstring
    lowered to info (a named skipped scope), and a CUDA-only import (NPU911) in such a block whose
    names are read where an NPU host goes reported at that read instead (a NameError there)."""
    from .findings import lower_pieces
    from .modpaths import RunTexts
    from .moot import is_moot

    def open_places(result) -> list[int]:
        return [n for f in result.findings if not f.fixable and f.cell is None and (
                    not is_moot(f) or f.code == "NPU911" and _in_branch(f))
                for n in (f.line, *(line for line, _c, _s in f.also))]

    text_of = RunTexts(results, paths)
    results = soften_caught(results, text_of)
    results = fold_cute_fp8(results, text_of)
    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and open_places(r)]
    if not candidates:
        return results
    predicates: Optional[frozenset] = None
    modules: Optional[_Modules] = None
    out = list(results)
    for i in candidates:
        data = text_of(i)
        if not data or b"if " not in data:
            continue
        lines_b = data.split(b"\n")
        places = open_places(results[i])
        if not any(0 < n <= len(lines_b) and lines_b[n - 1][:1] in (b" ", b"\t") for n in places):
            continue  # (a place inside an `if` block is indented)
        # (a cheap byte test: an `if` naming a flag the file binds by a call or imports by name)
        flags = {m.group(1) for m in _CALL_FLAG.finditer(data)} | set(_IMPORTED_FLAG.findall(data))
        flags = {f for f in flags if _PLATFORM.search(f.decode("ascii", "replace")) or f.startswith((b"_is_", b"_use_"))}
        if not flags or not re.search(rb"^[ \t]*(?:el)?if\b[^\n]*\b(?:" + b"|".join(
                re.escape(f) for f in sorted(flags)) + rb")\b", data, re.MULTILINE):
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        if predicates is None:
            predicates = false_predicates(results, text_of)
            modules = _Modules(results, text_of)
        bound = bindings(tree, modules, results[i].relpath)
        text_lines = data.decode("utf-8", "replace").splitlines(keepends=True)
        taken: list = []
        blocks = false_blocks(tree, text_lines, bound, predicates, taken)
        if not blocks:
            continue
        def block_at(line: int, blocks=blocks):
            return next((b for b in blocks if b[0] <= line <= b[1]), None)

        def told(condition: str, bound=bound, predicates=predicates) -> str:
            return _told(condition, bound, predicates)

        def reason_of(line: int, block_at=block_at, told=told) -> Optional[str]:
            block = block_at(line)
            if block is None:
                return None
            return f"{BRANCH}: `{block[2]}`{told(block[2])}"

        changed, findings, opened = False, [], []
        for finding in results[i].findings:
            pieces = None
            if finding.code == "NPU911" and not finding.fixable and finding.cell is None and (
                    not is_moot(finding) or _in_branch(finding)):
                pieces = _moved_reads(finding, tree, blocks, taken, block_at, told)
            if pieces is not None:  # (the other places of the finding, lowered as below)
                pieces = [q for p in pieces for q in (
                    (lower_pieces(p, reason_of) or [p]) if not p.fixable and not is_moot(p) else [p])]
            elif not finding.fixable and finding.cell is None and not is_moot(finding):
                pieces = lower_pieces(finding, reason_of, _own_module if finding.code == "NPU911" else None)
                if pieces and finding.code == "NPU911" and _only_folded(pieces, tree):
                    # (the places left are FP8 uses folded into the import: the import becomes a named
                    # scope, and each FP8 use is reported once, by another finding or as its own NPU913)
                    pieces, fp8 = unfold_fp8(pieces, finding, results[i].findings, tree)
                    opened.extend(fp8)
            changed = changed or pieces is not None
            findings.extend([finding] if pieces is None else pieces)
        if opened:
            findings = with_fp8(findings, opened)
        if changed:
            out[i] = dataclasses.replace(results[i], findings=sorted(findings))
    return out


def _statement_span(tree: ast.Module, line: int) -> tuple[int, int]:
    """(first, last) line of the innermost simple statement holding `line` (its own line alone
    when none does)."""
    best = (line, line)
    for node in astcache.walk(tree):
        if isinstance(node, ast.stmt) and not isinstance(node, _COMPOUND) and \
                node.lineno <= line <= (node.end_lineno or node.lineno):
            span = (node.lineno, node.end_lineno or node.lineno)
            if best == (line, line) or span[1] - span[0] < best[1] - best[0]:
                best = span
    return best


_COMPOUND = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.AsyncFor, ast.While,
             ast.With, ast.AsyncWith, ast.Try)


def unfold_fp8(pieces: list, finding, others: list, tree: ast.Module) -> tuple[list, list]:
    """A CUDA-only import (NPU911) lowered as under a branch an NPU host does not take whose other
    places are FP8 uses folded into it (round-17 audit AT#36, AT#32): (the lowered places, the FP8
    uses as their own NPU913 findings). A use in a statement another open finding of the file
    already lists stays there only (minicpm3.py's `torch.float8_e4m3fn` inside the
    `input_to_float8(...)` NPU913 reports); the others are never dropped: an FP8 use is FP8 port work
    whether or not the import beside it runs."""
    from .findings import split_merged
    from .moot import is_moot

    lowered = [p for p in pieces if p.severity == "info"]
    spans = [_statement_span(tree, n) for f in others if f is not finding and not f.fixable and f.cell is None
             and not is_moot(f) for n in (f.line, *(line for line, _c, _s in f.also))]
    import_of = next((p.message for p in lowered), finding.message)
    match = _FROM_MESSAGE.match(import_of)
    named = re.search(r"`([\w.]+)`", import_of[match.end(1):] if match else import_of)
    package = f"`{named.group(1)}`" if named else "a CUDA-only package"
    fp8 = []
    for piece in (q for p in pieces if p.severity != "info" for q in split_merged(p)):
        if any(first <= piece.line <= last for first, last in spans):
            continue  # (listed by another finding of the file)
        fp8.append(dataclasses.replace(
            piece, code="NPU913", severity="error", also=(),
            message=f"FP8 compute: `{piece.source}` (in code that computes with {package}'s ops, whose import is "
                    f"in a branch an NPU host does not take; this FP8 use is reported on its own)"))
    return lowered, fp8


def with_fp8(findings: list, fp8: list) -> list:
    """The file's findings with the FP8 uses `unfold_fp8` gave: in the file's open NPU913 error
    when it has one (one finding per file, as the catalogue merges NPU913), else as one."""
    from .findings import merge_per_file
    from .folding import absorb
    from .moot import is_moot

    target = next((f for f in findings if f.code == "NPU913" and f.severity == "error" and not f.fixable
                   and f.cell is None and not is_moot(f)), None)
    if target is None:
        return findings + merge_per_file(fp8)
    return [absorb(f, fp8, UNFOLDED) if f is target else f for f in findings]


UNFOLDED = "in code that computes with a CUDA-only package's ops whose import an NPU host skips"



def _moved_reads(finding, tree: ast.Module, blocks: list, taken: list, block_at, told) -> Optional[list]:
    """A CUDA-only import (NPU911) under a block an NPU host never runs whose names are read, unbound,
    in a block an NPU host takes whenever it gets there (`else: vllm_ops.moe_sum(...)` after `elif
    _is_hip:`): a finding at the first such read says what fails there (a NameError, error); the
    import's own place becomes info (it never runs). An already lowered import keeps its place and
    gets the read beside it. None when there is no such read (the finding is left to the lowering,
    which keeps an import whose names are read outside the blocks)."""
    from .findings import merge_per_file, split_merged

    moved, kept, done = [], [], False
    for piece in split_merged(finding) if finding.severity != "info" else [finding]:
        block = block_at(piece.line)
        statement = _import_at(tree, piece.line) if block is not None else None
        reads = read_outside(tree, statement, blocks) if statement is not None else []
        # (the read in the taken block itself, not in a function defined there: the `if` is decided
        # each time the code around the read runs, fp8_kernel.py's `else:` defining a function is not)
        sure = [(name, line) for name, line in reads
                if any(a <= line <= b and _function_at(tree, a) is _function_at(tree, line) for a, b, _why in taken)]
        if not sure:
            kept.append(piece)
            continue
        done = True
        name, line = sure[0]
        also = sorted({n for _name, n in sure} - {line})
        more = f" (also read at line{'s' if len(also) > 1 else ''} {', '.join(map(str, also[:6]))})" if also else ""
        moved.append(dataclasses.replace(
            piece, line=line, column=1, also=(), severity="error", source=name,
            message=f"`{name}` is bound only by a CUDA-only import under `if {block[2]}:` (line {piece.line}), "
                    f"a branch an NPU host does not take{told(block[2])}, and read here, in a branch an NPU host takes: a "
                    f"NameError on an NPU host{more}"))
        if piece.severity == "info":
            moved.append(piece)  # (already lowered, with its reason)
        else:
            moved.append(dataclasses.replace(piece, severity="info", message=f"{piece.message} ({BRANCH}: `{block[2]}`"
                                                                             f"{told(block[2])}; its read at line {line} is reported)"))
    if not done:
        return None
    opened = [f for f in kept if f.severity != "info"]
    return moved + [f for f in kept if f.severity == "info"] + (merge_per_file(opened) if opened else [])


# ----------------------------------------------------------------------------- a CUDA call whose failure is caught
CAUGHT = ("inside a `try` whose `{caught}` only reports or ignores the failure and goes on: on an NPU host the call "
          "fails there and the program continues without it")
_BROAD = frozenset({"Exception", "BaseException"})


def _caught_by(tree: ast.Module, line: int) -> Optional[str]:
    """The handler name of the innermost `try` whose body holds `line` when every handler of it is
    broad (`except Exception`, a bare `except`), none raises, exits or skips, and each only logs
    or passes (fallbacks.goes_on: None); else None."""
    from .fallbacks import goes_on

    best = None
    for node in astcache.walk(tree):
        if isinstance(node, ast.Try) and node.body and node.body[0].lineno <= line <= (node.body[-1].end_lineno or 0):
            if best is None or node.lineno > best.lineno:
                best = node
    if best is None or not best.handlers:
        return None
    names = []
    for handler in best.handlers:
        kind = handler.type
        name = "" if kind is None else kind.id if isinstance(kind, ast.Name) else None
        if name is None or (name and name not in _BROAD):
            return None
        if any(isinstance(n, ast.Raise) for n in ast.walk(handler)) or goes_on(handler.body) is False:
            return None
        if any(not isinstance(s, (ast.Expr, ast.Pass)) for s in handler.body):
            return None  # (a handler that binds or returns a fallback is another shape)
        names.append(name or ":")
    return names[0] if names[0] != ":" else ""


caught_by = _caught_by  # (wording21.py: an NVIDIA profiler mode selected by name, its failure caught)


def soften_caught(results: list, text_of) -> list:
    """NPU202 (an API torch_npu lacks) called only inside a `try` whose broad handlers only log and
    go on (SGLang's `try: torch.cuda.cudart().cudaProfilerStart() except Exception as e:
    rank_print(f"Failed to start CUDA profiler: {e}")`, round-16 audit AQ#29): it does not fail on
    an NPU host, it does nothing there: a warning (runs but differs), with the reason."""
    from .findings import merge_per_file, split_merged

    out = list(results)
    for i, result in enumerate(results):
        wanted = [f for f in result.findings if f.code == "NPU202" and not f.fixable and f.cell is None
                  and f.severity == "error"]
        if not wanted or not result.relpath.endswith(".py"):
            continue
        data = text_of(i)
        if not data or b"try:" not in data or b"except" not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        findings, changed = [], False
        for finding in result.findings:
            if finding not in wanted:
                findings.append(finding)
                continue
            softened, kept = [], []
            for piece in split_merged(finding):
                caught = _caught_by(tree, piece.line)
                if caught is None:
                    kept.append(piece)
                    continue
                handler = f"except {caught}" if caught else "except"
                softened.append(dataclasses.replace(piece, severity="warning",
                                                    message=f"{piece.message} ({CAUGHT.format(caught=handler)})"))
            changed = changed or bool(softened)
            # (the softened places are one warning, as the engine merges a file's places per code and severity)
            findings.extend((merge_per_file(softened) if len(softened) > 1 else softened)
                            + (merge_per_file(kept) if softened and kept else [] if softened else [finding]))
        if changed:
            out[i] = dataclasses.replace(result, findings=sorted(findings))
    return out


# ----------------------------------------------------------------------------- FP8 in a CuTe-DSL kernel's wrapper
CUTE = "in a function that launches this module's CuTe-DSL kernels, whose `cutlass` import fails on an NPU host"
_CUTE_PACKAGES = ("cutlass", "cuda.bindings")


def _cute_names(tree: ast.Module) -> set[str]:
    """The names the module binds by importing a `cutlass` module (`import cutlass.cute as cute`)."""
    names = set()
    for node in astcache.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.asname for a in node.names if a.asname and a.name.split(".")[0] == "cutlass")
            names.update("cutlass" for a in node.names if not a.asname and a.name.split(".")[0] == "cutlass")
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "cutlass":
            names.update(a.asname or a.name for a in node.names if a.name != "*")
    return names


def _launches(function: ast.AST, kernels: set[str], cute: set[str]) -> bool:
    """Whether the function uses a CuTe name itself (`cute.compile(...)`) or calls, by name, one
    of the module's functions that does."""
    for node in ast.walk(function):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in cute:
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in kernels:
            return True
    return False


def fold_cute_fp8(results: list, text_of) -> list:
    """FP8 uses (NPU913) inside a function that launches the module's CuTe-DSL kernels (uses
    `cute.` names, or calls a module function that does) folded into the module's open NPU911 of its
    `cutlass` import (round-17 audit AV#18: torchao's `mxfp8_quantize_cutedsl_2d_1x32` allocates its
    FP8 output, then calls `_compile_...()`, which imports `cutlass.cute`): the port item is the CuTe
    kernel, already reported. FP8 in a function with no CuTe use stays reported."""
    from .folding import Fold, ours, places_of
    from .moot import is_moot

    def open_(finding, code: str) -> bool:
        return finding.code == code and ours(finding) and finding.severity != "info" and not is_moot(finding)

    out = list(results)
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py") or not any(open_(f, "NPU913") for f in result.findings):
            continue
        targets = [f for f in result.findings if open_(f, "NPU911") and any(
            (s or "").lstrip().startswith((f"import {p}", f"from {p}")) for _l, _c, s in places_of(f) for p in _CUTE_PACKAGES)]
        if not targets:
            continue
        data = text_of(i)
        if not data or b"cutlass" not in data or b"float8" not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        cute = _cute_names(tree)
        if not cute:
            continue
        functions = [n for n in astcache.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        kernels = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                   and _launches(n, set(), cute)}
        fold = Fold(result.findings)
        target = targets[0]
        fold.targets.add(id(target))
        for finding in result.findings:
            if not open_(finding, "NPU913"):
                continue
            for place in places_of(finding):
                holding = [n for n in functions if n.lineno <= place[0] <= (n.end_lineno or n.lineno)]
                if holding and _launches(min(holding, key=lambda n: (n.end_lineno or n.lineno) - n.lineno), kernels, cute) \
                        and fold.movable(finding, target):
                    fold.move(finding, [place], target)
        folded = fold.result(name_them=CUTE)
        if folded is not result.findings:
            out[i] = dataclasses.replace(result, findings=sorted(folded))
    return out
