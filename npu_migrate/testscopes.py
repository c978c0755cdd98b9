"""Tests that never run on an NPU host: the findings inside them are for review, not errors.

A test module, class or function that pytest or unittest skips unless the host is CUDA or ROCm
(`pytestmark = pytest.mark.skipif(not current_platform.is_cuda(), ...)`, `@skipUnless(
torch.version.hip, ...)`, `if not on_gfx950(): pytest.skip(..., allow_module_level=True)`) is
skipped on an NPU host too, because npu-migrate leaves such platform checks alone: a project's own
`is_cuda()` method, `torch.version.cuda`, a compute-capability test. What it reports inside such a
test is true of the code but changes nothing on the NPU: the run lowers those report-only findings
to `info` and says which skip keeps the test off the NPU.

The skip condition is evaluated as an NPU host would see it, in three values (true, false,
unknown): the CUDA/ROCm-only predicates are false there, `torch.version.cuda` and
`torch.version.hip` are None, and anything else is unknown. Only a condition that is *certainly*
true off CUDA (for `skipif`; false for `skipUnless`) makes a scope: `skipif(current_platform.is_rocm())`
runs on the NPU, and `skipif(not torch.cuda.is_available())` runs there too once migrated (the
availability check is rewritten), so neither is one, unless the migration left that check as
written because the test uses CUDA-only code (NPU110 on the decorator): then it still skips.
"""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import replace

from . import astcache, capability, capgates, catalogue, cudaonly21, lambdas19, npugates, predicates, reach, settled, setupskips
from . import ifexp29, modskips32, singles22, singles23
from .findings import Finding


# Methods and functions that answer "is this a CUDA or ROCm host / GPU generation" (vLLM's and
# SGLang's platform objects, test helpers named for an architecture).
@functools.lru_cache(maxsize=None)
def _table():
    """rules/scopes.toml [platform]: (methods false on an NPU host, architecture names, ROCm flags)."""
    t = catalogue.read_table("scopes.toml")["platform"]
    return (frozenset(t["false_methods"]), re.compile(t["arch_name"], re.IGNORECASE),
            re.compile(t["rocm_flag"], re.IGNORECASE), frozenset(t["false_calls"]))


_UNKNOWN = object()  # neither true nor false
_NONE = object()  # a value that is None on an NPU host (torch.version.cuda)


_dotted = astcache.dotted  # (`a.b.c` of an attribute chain)


def _value(node: ast.AST):
    """The value of `node` on an NPU host: True, False, _NONE or _UNKNOWN."""
    if isinstance(node, ast.NamedExpr):  # (`(mode := X) is None`: X's value, None kept, ifexp29)
        return ifexp29.value(node, _value, _truth, _UNKNOWN)
    known = reach.known_value(node)  # (a CUDA build's custom ops, Windows and macOS checks)
    if known is not None:
        return known
    if reach.missing_op(node):  # (`getattr(torch.ops._C, "op", None)`: no CUDA build's op there, HC#9)
        return _NONE
    known = npugates.known_value(node, _truth)  # (`current_platform.is_cpu()`, `get_name() == "FLASHINFER"`)
    if known is not None:
        return known
    known = settled.known_value(node)  # (`isinstance(self, CUDAOpBuilder)`)
    if known is not None:
        return known
    known = cudaonly21.known_value(node)  # (`torch.cuda.get_device_capability()[0] < 9`)
    if known is not None:
        return known
    if isinstance(node, ast.Constant):
        return _NONE if node.value is None else bool(node.value)
    if isinstance(node, ast.IfExp):  # (round 29 DA#36: `X if is_cuda_alike() else None`)
        return ifexp29.value(node, _value, _truth, _UNKNOWN)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _truth(node.operand)
        return _UNKNOWN if inner is _UNKNOWN else not inner
    if isinstance(node, ast.BoolOp):
        values = [_truth(v) for v in node.values]
        decisive = isinstance(node.op, ast.Or)  # `or`: one true decides; `and`: one false
        if decisive in values:
            return decisive
        return _UNKNOWN if _UNKNOWN in values else not decisive
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
        left, right = _value(node.left), _value(node.comparators[0])
        if _NONE in (left, right) and _UNKNOWN not in (left, right):
            same = left is right
            return same if isinstance(node.ops[0], ast.Is) else not same
        return _UNKNOWN
    if isinstance(node, ast.Attribute) and _dotted(node) in ("torch.version.cuda", "torch.version.hip"):
        return _NONE
    if (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.left, ast.Call)
            and _dotted(node.left.func).rpartition(".")[2] == "get_device_capability"
            and isinstance(node.ops[0], (ast.Gt, ast.GtE, ast.Eq, ast.Lt, ast.LtE, ast.NotEq))):
        # the shim answers (0, 0) on an NPU host: `>= (8, 9)` is false there, `< (9, 0)` true
        bound = node.comparators[0]
        if (isinstance(bound, ast.Tuple) and bound.elts and isinstance(bound.elts[0], ast.Constant)
                and isinstance(bound.elts[0].value, int) and bound.elts[0].value > 0):
            return isinstance(node.ops[0], (ast.Lt, ast.LtE, ast.NotEq))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Lambda):
        body = lambdas19.bind(node)  # (`(lambda x: x is None or ...)(current_platform.get_device_capability())`)
        return _UNKNOWN if body is None else _value(body)
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if isinstance(func, ast.Attribute) and name in _table()[0] and not _dotted(func).startswith("torch."):
            return False
        if _dotted(func) in _table()[3]:
            return False  # torch.xpu.is_available(), accelerate's is_xpu_available(): another accelerator's
        if name and _table()[1].search(name):
            return False
        from .rocmops34 import rocm_predicate  # (`rocm_aiter_ops.is_fp8bmm_enabled()`: rocmops34.py)
        if rocm_predicate(node):
            return False
        if _dotted(func) in reach.none_calls():
            return _NONE  # `current_platform.get_device_capability()`: no capability on an NPU host
        absent = _absent_package(name, node)
        if absent is not None:
            return absent
        values = [*node.args, *(k.value for k in node.keywords)]
        if re.search(r"avail|^has_|^is_", name or "") and any(
                isinstance(v, ast.Constant) and isinstance(v.value, str) and re.search(r"(^|_)cuda($|_)", v.value)
                for v in values):
            return False  # `is_extension_available("quanto_cuda")`: a CUDA build, absent on an NPU host
    if isinstance(node, ast.Name) and (_table()[1].search(node.id) or _table()[2].match(node.id)):
        return False
    return _UNKNOWN


absent_packages = catalogue.absent_packages  # (packages with no NPU build: in catalogue.py, which capgates.py reads too)


_AVAILABLE = re.compile(r"(?:is_|has_)(\w+?)(?:_\d+)?(?:_available|_installed|_supported)?$")


def _absent_package(name: str, call: ast.Call):
    """`importlib.util.find_spec("flash_attn")` (None) and `is_flash_attn_available()` (False) on
    an NPU host, for a package with no NPU build (absent_packages); None otherwise."""
    if name == "find_spec" and call.args:
        first = call.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str) \
                and first.value.split(".")[0] in absent_packages():
            return _NONE
        return None
    match = _AVAILABLE.fullmatch(name or "")
    if match and not call.args and not call.keywords and match.group(1) in absent_packages():
        return False
    # `has_flashinfer_nvlink_one_sided()`: a feature probe of such a package (round-10 audit: a
    # skip marker built from it skips the test where the package is missing)
    # Strict (wave 20): the name must probe that package alone. `has_cutlass_or_numpy()` is true
    # wherever numpy is installed, so a disjunction word in the feature part makes no probe.
    if match and name.startswith("has_") and not call.args and not call.keywords and any(
            match.group(1).startswith(package + "_")
            and not _DISJUNCTION.intersection(match.group(1)[len(package) + 1:].split("_"))
            for package in absent_packages()):
        return False
    return None


_DISJUNCTION = frozenset({"or", "either", "otherwise", "else", "fallback"})


def _truth(node: ast.AST):
    value = _value(node)
    return False if value is _NONE else value


def _skip_condition(decorator: ast.AST, marks: dict[str, ast.AST], kept: frozenset = frozenset()) -> ast.AST | None:
    """The expression that skips the decorated test on an NPU host, or None. `kept`: lines where
    the migration left a `torch.cuda.is_available()` skip as written (it guards CUDA-only code,
    NPU110), so it still skips the test off CUDA."""
    if isinstance(decorator, ast.Name) and decorator.id in marks:
        return _skip_condition(marks[decorator.id], {})
    if kept and isinstance(decorator, ast.Call) and decorator.args and any(
            line in kept for line in range(decorator.lineno, (decorator.end_lineno or decorator.lineno) + 1)):
        name = _dotted(decorator.func).rpartition(".")[2].lower()
        condition = decorator.args[0]
        kept_value = _truth(_AvailabilityKept().visit(copy.deepcopy(condition)))
        if (name == "skipif" and kept_value is True) or (name == "skipunless" and kept_value is False):
            return condition
    if isinstance(decorator, (ast.List, ast.Tuple)):  # pytestmark = [mark, mark]
        for element in decorator.elts:
            found = _skip_condition(element, marks)
            if found is not None:
                return found
        return None
    if _dotted(decorator.func if isinstance(decorator, ast.Call) else decorator).rpartition(".")[2] == "skip":
        return decorator  # `@pytest.mark.skip(...)`, `@unittest.skip(...)`: no host runs it
    if isinstance(decorator, ast.Call) and decorator.args:
        name = _dotted(decorator.func).rpartition(".")[2].lower()
        condition = decorator.args[0]
        if name in ("skipif",) and _truth(condition) is True:
            return condition
        if name == "skipunless" and _truth(condition) is False:
            return condition
        return None
    name = _dotted(decorator).rpartition(".")[2]
    if name and _table()[1].search(name) and re.match(r"(requires|needs|only|skip)", name, re.IGNORECASE):
        return decorator
    if name and _skip_decorators().match(name):
        return decorator  # `@require_cuda_or_xpu`: skips on an NPU host
    return None


@functools.lru_cache(maxsize=None)
def _skip_decorators() -> re.Pattern:
    return re.compile(catalogue.read_table("scopes.toml")["platform"].get("skip_decorators", "(?!)"))


@functools.lru_cache(maxsize=None)
def _skip_decorator_text() -> re.Pattern:
    """One of the skip_decorators applied somewhere in a file's text (a cheap test, no parse)."""
    pattern = catalogue.read_table("scopes.toml")["platform"].get("skip_decorators", "(?!)")
    return re.compile(r"@(?:\w+\.)*(?:" + pattern.lstrip("^").rstrip("$") + r")\b")


def _skip_decorator_lines(text: str) -> set[int]:
    """The lines of `skipif`/`skipIf`/`skipUnless` decorators and marks (`pytest.param(...,
    marks=pytest.mark.skipif(...))` too), and the tests of `if`s whose body only skips the test
    (`if device == "cuda" and not torch.cuda.is_available(): pytest.skip(...)`)."""
    tree = _parse(text)
    lines: set[int] = set()
    if tree is None:
        return lines
    for node in astcache.walk(tree):
        if isinstance(node, ast.Call) and _dotted(node.func).rpartition(".")[2].lower() in ("skipif", "skipunless"):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        elif isinstance(node, ast.If) and len(node.body) == 1 and not node.orelse and _skips(node.body[0]):
            lines.update(range(node.test.lineno, (node.test.end_lineno or node.test.lineno) + 1))
    return lines


class _AvailabilityKept(ast.NodeTransformer):
    """`torch.cuda.is_available()` as an NPU host sees it where the migration left it as written:
    False."""

    def visit_Call(self, node: ast.Call):
        if _dotted(node.func) in ("torch.cuda.is_available", "cuda.is_available"):
            return ast.copy_location(ast.Constant(False), node)
        return self.generic_visit(node)


def _skips(stmt: ast.stmt) -> bool:
    """`pytest.skip(...)` or `raise unittest.SkipTest(...)` in a block."""
    for node in ast.walk(stmt):
        if isinstance(node, ast.Call) and _dotted(node.func).rpartition(".")[2] in ("skip", "SkipTest"):
            return True
    return False


def _skipping_if(stmt: ast.stmt) -> ast.AST | None:
    skips = isinstance(stmt, ast.If) and not stmt.orelse and any(_skips(s) for s in stmt.body)
    return stmt.test if skips and _truth(stmt.test) is True else None


_ALWAYS_SKIP_CALLS = frozenset({"pytest.skip", "self.skipTest"})


def _always_skip(stmt: ast.stmt) -> ast.AST | None:
    """The call of a statement of a function's own body that skips it on an NPU host whatever
    comes before (round 28 CC#17, CA#4): an unconditional `pytest.skip("TODO ...")`,
    `self.skipTest(...)` or `raise unittest.SkipTest(...)` (no host runs the rest), and
    `pytest.importorskip("cupy")` of a package with no NPU build (absent_packages: skipped where
    it is missing). None otherwise: a skip under an `if`, an importorskip of a package an NPU host
    may have (numpy, torch, triton)."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and _dotted(stmt.value.func) in _ALWAYS_SKIP_CALLS:
        return stmt.value
    if isinstance(stmt, ast.Raise) and stmt.exc is not None and _dotted(
            stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc).rpartition(".")[2] == "SkipTest":
        return stmt.exc
    asked = capgates.importorskip_module(stmt)
    if asked is not None and asked.split(".")[0] in absent_packages():
        return stmt.value
    return None


@functools.lru_cache(maxsize=None)
def _may_decide_re() -> re.Pattern:
    """A cheap text test before any parse: without one of these words no condition of the file
    can be known on an NPU host (the parse costs about as much as the engine's own)."""
    table = catalogue.read_table("scopes.toml")["platform"]
    methods = "|".join(map(re.escape, table["false_methods"]))
    calls = "|".join(re.escape(c.rpartition(".")[0]) for c in table["false_calls"])
    absent = "|".join(map(re.escape, sorted(absent_packages())))
    return re.compile(rf"version\.(cuda|hip)\b|\b({methods})\s*\(|avail\w*\([^)\n]*cuda|\b({calls})\."
                      rf"|find_spec\(\s*[\"']({absent})\b"
                      rf"|\b(is|has)_({absent})(_\d+)?(_available|_installed|_supported)?\(\)|\bhas_({absent})_\w+\(\)"
                      rf"|{table['arch_name']}|\b{table['rocm_flag'].rstrip('$')}\b"
                      rf"|{reach.decide_words()}|{npugates.decide_words()}|{settled.decide_words()}", re.IGNORECASE)


def _may_decide(text: str) -> bool:
    return _may_decide_re().search(text) is not None


_TYPE_CHECKING_LINE = re.compile(r"^([ \t]*)if (typing\.)?TYPE_CHECKING\s*:", re.MULTILINE)


def _in_type_checking_block(text: str, lines: set[int]) -> bool:
    """Whether one of `lines` may sit in an `if TYPE_CHECKING:` block, by indentation alone (a
    cheap test: the parse that answers exactly runs only when this says maybe)."""
    if "TYPE_CHECKING" not in text:
        return False
    source = text.splitlines()
    for match in _TYPE_CHECKING_LINE.finditer(text):
        start = text.count("\n", 0, match.start()) + 1  # the `if` line, 1-based
        indent = len(match.group(1).expandtabs())
        line = start
        while line < len(source):
            body = source[line]  # (line is 0-based here: the line after `if`)
            if body.strip() and len(body) - len(body.lstrip()) <= indent and not body.lstrip().startswith("#"):
                break
            line += 1
            if line in lines:
                return True
    return False


def _parse(text: str) -> ast.Module | None:
    """The file's tree: the one the hot-slice reduction parsed before the engine ran, when it did
    (astcache), else parsed here once for both questions (tests skipped off CUDA, untaken branches)."""
    body = text.encode("utf-8", "surrogatepass")
    return astcache.parse(body[3:] if body.startswith(b"\xef\xbb\xbf") else body)


_SCOPES_MEMO: OrderedDict = OrderedDict()  # (text digest, kept, classes) -> the scopes, newest last
_SCOPES_MEMO_SIZE = 4096


def cuda_only_test_scopes(text: str, kept: frozenset = frozenset(), classes: bool = False) -> list[tuple[int, int, str]]:
    """(first line, last line, the skip condition's source) of every test scope skipped off CUDA.
    `kept`: lines of availability skips the migration left as written (`_skip_condition`);
    `classes`: module-level classes count as helpers too (a pytest test module: `_helper_scopes`).
    Worked out once per text in a process: several whole-run passes ask it of the same files (a
    cold check of torch/_inductor asked 99 times about 61 files, most of the time spent in
    reach.with_file_facts). The memo holds a digest of the text, not the text."""
    key = (hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest(), frozenset(kept), classes)
    found = _SCOPES_MEMO.get(key)
    if found is None:
        found = _SCOPES_MEMO[key] = tuple(_test_scopes(text, key[1], classes))
        while len(_SCOPES_MEMO) > _SCOPES_MEMO_SIZE:
            _SCOPES_MEMO.popitem(last=False)
    else:
        _SCOPES_MEMO.move_to_end(key)
    return list(found)


def _test_scopes(text: str, kept: frozenset, classes: bool) -> list[tuple[int, int, str]]:
    tree = _parse(text)
    if tree is None:
        return []
    tree = reach.with_file_facts(tree, _truth)  # (`skipif(not _op_available())`: the file's own functions)
    from .fp8tests import with_capability_names

    tree = with_capability_names(tree, text)  # (`skipif(compute_capability < (9, 0))`: (0, 0) on an NPU host)
    from .removedmembers34 import with_removed_members

    tree = with_removed_members(tree)  # (`skipif(X not in LIST)`, LIST dropping X without flashinfer: removedmembers34.py)
    scopes: list[tuple[int, int, str]] = []

    def show(node: ast.AST) -> str:
        segment = ast.get_source_segment(text, node) or ""
        segment = " ".join(segment.split())
        return segment if len(segment) <= 70 else segment[:67] + "..."

    marks: dict[str, ast.AST] = {}
    end = len(text.splitlines()) or 1
    for stmt in modskips32.module_statements(tree):  # (a `try` that guards only `import pytest`: modskips32.py)
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name = stmt.targets[0].id
            if name == "pytestmark":
                condition = _skip_condition(stmt.value, marks)
                if condition is not None:
                    return [(1, end, show(condition))]
            else:
                marks[name] = stmt.value
        condition = _skipping_if(stmt)
        if condition is None:  # (`if pytest and <condition>:`, pytest a module: modskips32.py)
            modules_true = modskips32.with_modules_true(stmt, tree)
            condition = stmt.test if modules_true is not None and _skipping_if(modules_true) is not None else None
        if condition is not None:
            scopes.append((stmt.lineno, end, show(condition)))
            return scopes
        condition = singles23.else_skip(stmt, _truth)  # (`if is_cuda(): ... else: pytest.skip(...)`)
        if condition is not None:
            scopes.append((stmt.lineno, end, f"not ({show(condition)})"))
            return scopes

    helpers = {stmt.name: stmt for stmt in tree.body if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def visit(body: Iterable[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found = next((c for c in (_skip_condition(d, marks, kept) for d in stmt.decorator_list)
                              if c is not None), None)
                if found is not None:
                    first = min([stmt.lineno, *(d.lineno for d in stmt.decorator_list)])
                    scopes.append((first, stmt.end_lineno or stmt.lineno, show(found)))
                    continue
                if isinstance(stmt, ast.ClassDef):
                    setup = setupskips.skipping_setup(stmt, kept, _truth)  # (`setUp` skips on an NPU host)
                    if setup is not None:
                        first = min([stmt.lineno, *(d.lineno for d in stmt.decorator_list)])
                        scopes.append((first, stmt.end_lineno or stmt.lineno, f"{show(setup[0])}` in `{setup[1]}"))
                        continue
                if not isinstance(stmt, ast.ClassDef):
                    for inner in stmt.body:
                        condition = _always_skip(inner)  # (`pytest.skip("TODO")`, `pytest.importorskip("cupy")`)
                        if condition is not None:
                            scopes.append((inner.lineno, stmt.end_lineno or inner.lineno, show(condition)))
                            break
                        condition = _skipping_if(inner)
                        if condition is not None:
                            scopes.append((inner.lineno, stmt.end_lineno or inner.lineno, show(condition)))
                            break
                        through = singles22.helper_skip(inner, helpers, _skipping_if)  # (`_skip_unless_x()`)
                        if through is not None:
                            # (after the call: the helper itself runs on an NPU host, to skip)
                            scopes.append(((inner.end_lineno or inner.lineno) + 1, stmt.end_lineno or inner.lineno,
                                           f"{show(through[0])}` in `{through[1]}()"))
                            break
                visit(stmt.body)

    try:
        visit(tree.body)
    except RecursionError:
        return scopes
    if scopes:
        scopes += _helper_scopes(tree, scopes, classes)
    return scopes


HELPER_NOTE = "called only from tests that do not run on an NPU host"


def _helper_scopes(tree: ast.Module, scopes: list[tuple[int, int, str]],
                   classes: bool = False) -> list[tuple[int, int, str]]:
    """Module-level functions and classes that only tests skipped off CUDA reach, through the file's own call
    graph: every reference to the helper's name (a call, or a target handed to `mp.spawn`,
    `multiprocessing.Process(target=...)`, `functools.partial`) sits inside such a test or inside
    another such helper. A helper referenced anywhere else (module level, a test that runs on the
    NPU, `__all__`) or never referenced in the file (others may import it) is not one.
    (first line, last line, `HELPER_NOTE: <the skip condition>`)."""
    # (classes too, in a pytest test module, which other test files do not import as a shared helpers
    # module would: a context manager or a module a skipped test builds, round 15, AN#2, AO#10)
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef) if classes else (ast.FunctionDef, ast.AsyncFunctionDef)
    defs = {stmt.name: stmt for stmt in tree.body if isinstance(stmt, kinds)}
    if not defs:
        return []
    refs: dict[str, list[int]] = {name: [] for name in defs}
    # (a forward reference, `-> "MOETensors8Bit"`: read where the annotation is, round 26 BV#2)
    annotations = {id(a) for node in astcache.walk(tree) for a in _annotations(node)}
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name) and node.id in refs and isinstance(node.ctx, ast.Load):
            refs[node.id].append(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in refs:
            # named in a string (`__all__`, getattr): reached from outside
            refs[node.value].append(node.lineno if id(node) in annotations else 0)
    span = {name: (min([d.lineno, *(x.lineno for x in d.decorator_list)]), d.end_lineno or d.lineno)
            for name, d in defs.items()}
    found: dict[str, str] = {}  # helper -> the skip condition of a test that reaches it

    def reason(line: int, own: str) -> str | None:
        if span[own][0] <= line <= span[own][1]:
            return ""  # recursion
        scope = next((s for s in scopes if s[0] <= line <= s[1]), None)
        if scope is not None:
            return scope[2].split(": ", 1)[1] if scope[2].startswith(HELPER_NOTE) else scope[2]
        helper = next((h for h in found if span[h][0] <= line <= span[h][1]), None)
        return found[helper] if helper is not None else None

    changed = True
    while changed:
        changed = False
        for name, lines in refs.items():
            if name in found or name.startswith(("test", "Test")) or not lines or any(line == 0 for line in lines):
                continue
            reasons = [reason(line, name) for line in lines]
            if any(r is None for r in reasons):
                continue
            real = [r for r in reasons if r]
            if real:
                found[name] = real[0]
                changed = True
    return [(*span[name], f"{HELPER_NOTE}: {why}") for name, why in found.items()]


helper_scopes = _helper_scopes  # (testgates26.py: tests another module's flag skips)


def _annotations(node: ast.AST) -> list:
    """The string annotations `node` holds itself (a return, its parameters', an annotated name)."""
    found: list = []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = node.args
        found = [node.returns, *(a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                                                         args.vararg, args.kwarg) if a is not None)]
    elif isinstance(node, ast.AnnAssign):
        found = [node.annotation]
    return [a for a in found if isinstance(a, ast.Constant) and isinstance(a.value, str)]


_ALWAYS_SKIPPED = re.compile(r"skip(if|If)?\(\s*True\b|\.skip\b\s*(\(|$)|\.importorskip\(|\.skipTest\(|\bSkipTest\b",
                             re.MULTILINE)


def _lowerable(finding: Finding) -> bool:
    """A report-only finding not yet about code an NPU host never runs: an error or a warning, or
    an info finding (an NCCL tuning variable, a vLLM import) that a skipped test or an untaken
    branch makes moot just the same."""
    from .moot import is_moot

    return not finding.fixable and finding.cell is None and not is_moot(finding)


_TEST_MODULE = re.compile(r"(^|/)(test_[^/]*|[^/]*_test)\.py$")


def lower_in_cuda_only_tests(findings: list[Finding], text: str, relpath: str = "") -> list[Finding]:
    """The findings, with the report-only ones inside a test skipped off CUDA lowered to info
    (`relpath` a pytest test module: the classes only such tests use too)."""
    if not any(_lowerable(f) for f in findings):
        return findings
    # availability skips left as written because the test uses CUDA-only code (NPU110)
    kept = frozenset(f.line for f in findings if f.code == "NPU110" and f.source.endswith("is_available"))
    if not _skip_decorator_text().search(text) and (
            ("skip" not in text and "Skip" not in text) or not (kept or _may_decide(text) or _ALWAYS_SKIPPED.search(text)
                                                                or setupskips.may_skip(text))):
        return findings
    scopes = cuda_only_test_scopes(text, kept, classes=bool(_TEST_MODULE.search(relpath)))
    skips = _skip_decorator_lines(text) if kept else set()
    if not scopes and not skips:
        return findings
    out = []
    for finding in findings:
        if _lowerable(finding):
            scope = next((s for s in scopes if s[0] <= finding.line <= s[1]), None)
            if scope is None and finding.line in kept and finding.line in skips:
                # a skip left as written: all it changes is that the test keeps skipping off CUDA
                finding = replace(finding, severity="info", message=(
                    f"{finding.message} (a test skip: the test keeps being skipped on an NPU host)"))
            if scope is not None and scope[2].startswith(HELPER_NOTE):
                note, why = scope[2].split(": ", 1)
                finding = replace(finding, severity="info", message=f"{finding.message} (in a helper {note}: `{why}`)")
            elif scope is not None:
                finding = replace(finding, severity="info",
                                  message=f"{finding.message} (in a test that does not run on an NPU host: `{scope[2]}`)")
        out.append(finding)
    return out


_TRITON_KERNEL = re.compile(r"triton\.(jit|autotune|heuristics|language)|\btl\.|^\s*@jit\b|import\s+language", re.MULTILINE)


# `from triton.runtime import driver`, `from triton import (cdiv, Config)`: what a file imports from Triton
_TRITON_FROM = re.compile(r"^[ \t]*from[ \t]+(triton(?:\.[\w.]+)?)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.MULTILINE)
_TRITON_IMPORT = re.compile(r"^[ \t]*import[ \t]+(triton\.[\w.]+)", re.MULTILINE)
_HARNESS_NAMES = frozenset({"testing", "cdiv", "next_power_of_2", "__version__"})


def _harness_imports(text: str) -> bool:
    """Whether the file imports from Triton only its benchmark harness (`triton.testing`) and host
    helpers: `from triton.runtime import driver` or `from triton import Config` is more than a
    harness (round-14 audit AM#16: a performance model reading the driver and the GPU's peak
    numbers was called "only `triton.testing`")."""
    for match in _TRITON_FROM.finditer(text):
        module, names = match.group(1), match.group(2)
        if module.startswith("triton.testing"):
            continue
        if module != "triton":
            return False
        listed = {n.split(" as ")[0].strip() for n in re.sub(r"#[^\n]*", "", names).strip().strip("()").split(",")} - {""}
        if not listed <= _HARNESS_NAMES:
            return False
    return all(m.group(1).startswith("triton.testing") for m in _TRITON_IMPORT.finditer(text))


def lower_triton_harness(findings: list[Finding], text: str) -> list[Finding]:
    """NPU910 as info in a file that uses Triton only as a benchmark harness (`triton.testing.
    do_bench`, `perf_report`) and defines or calls no kernel of its own: it measures, it does not
    compute, and the kernels it times are reported where they are."""
    if not any(f.code == "NPU910" and f.severity != "info" for f in findings):
        return findings
    if "triton.testing" not in text or _TRITON_KERNEL.search(text) or not _harness_imports(text):
        return findings
    return [replace(f, severity="info", message=f"{f.message} (only `triton.testing`, a benchmark harness)")
            if f.code == "NPU910" else f for f in findings]


def raise_module_level_cuda_version(findings: list[Finding], text: str) -> list[Finding]:
    """NPU990 on `torch.version.cuda` as an error where a statement at module level works with
    its value unguarded (`version.parse(torch.version.cuda)`, `.split(".")`, `>= "11.8"`): it is
    None on an NPU host, so importing the module fails there (a test module: collection fails)."""
    if not any(f.code == "NPU990" and f.severity == "warning" and f.source.startswith("torch.version.cuda")
               for f in findings):
        return findings
    tree = _parse(text)
    if tree is None:
        return findings
    from .families.platform import version_references, version_uses  # (the gates' notion of a value worked with)

    refs_re = version_references()
    out = []
    for finding in findings:
        if (finding.code == "NPU990" and finding.severity == "warning" and finding.cell is None
                and finding.source.startswith("torch.version.cuda") and _used_at_module_level(tree, finding, refs_re, version_uses)):
            finding = replace(finding, severity="error", message=(
                f"{finding.message} (torch.version.cuda is None on an NPU host: this module-level use fails at import)"))
        out.append(finding)
    return out


def _used_at_module_level(tree: ast.Module, finding: Finding, refs_re, quiet_of) -> bool:
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.Try, ast.With,
                             ast.For, ast.While)) or not stmt.lineno <= finding.line <= (stmt.end_lineno or stmt.lineno):
            continue
        quiet, used = quiet_of(stmt, refs_re)
        for node in ast.walk(stmt):
            if (isinstance(node, ast.Attribute) and node.lineno == finding.line
                    and node.col_offset + 1 == finding.column and _dotted(node) == "torch.version.cuda"):
                return id(node) in used and id(node) not in quiet
    return False


_TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")


def lower_uncalled_compile(findings: list[Finding], text: str, relpath: str) -> list[Finding]:
    """NPU903 as info in a test file where the compiled object is never called in the function
    that compiles it (`model = torch.compile(model, mode="reduce-overhead")` only to assert that a
    helper refuses or warns about a compiled model): no CUDA graph is ever captured there."""
    if not any(f.code == "NPU903" and f.severity != "info" for f in findings) or not _TEST_FILE.search(relpath):
        return findings
    tree = _parse(text)
    if tree is None:
        return findings
    out = []
    for finding in findings:
        if finding.code == "NPU903" and finding.severity != "info" and finding.cell is None:
            if _uncalled_compile(tree, finding.line):
                finding = replace(finding, severity="info", message=(
                    f"{finding.message} (in a test that never calls the compiled object: no graph is captured)"))
        out.append(finding)
    return out


def _uncalled_compile(tree: ast.Module, line: int) -> bool:
    """Whether the function holding `torch.compile(...)` on `line` never calls what it makes
    (False when it is called, or when that cannot be told)."""
    function = None
    stack: list = [tree]
    while stack:  # the innermost function whose lines hold `line`
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.stmt, ast.excepthandler)) and child.lineno <= line <= (child.end_lineno or child.lineno):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    if any(d.lineno <= line <= (d.end_lineno or d.lineno) for d in child.decorator_list):
                        return False  # `@torch.compile(mode=...)`: the decorated function is what runs
                    function = child
                stack.append(child)
    if function is None:
        return False
    parents: dict[int, ast.AST] = {}
    compiles = []
    for node in ast.walk(function):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
        if (isinstance(node, ast.Call) and _dotted(node.func) in ("torch.compile", "compile")
                and node.lineno <= line <= (node.end_lineno or node.lineno)):
            compiles.append(node)
    if len(compiles) != 1:
        return False
    call = compiles[0]
    parent = parents.get(id(call))
    if isinstance(parent, ast.Expr):
        target = None  # compiled and dropped (`with pytest.raises(...): torch.compile(...)`)
    elif isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        target = parent.targets[0].id
    else:
        return False  # called at once, returned, stored, handed on: it may run
    if target is not None:
        for node in ast.walk(function):
            if isinstance(node, ast.Call):
                func = node.func
                while isinstance(func, ast.Attribute):  # `model.generate(...)` runs it too
                    func = func.value
                if isinstance(func, ast.Name) and func.id == target:
                    return False
            elif isinstance(node, (ast.Return, ast.Yield)) and isinstance(node.value, ast.Name) and node.value.id == target:
                return False
    return True


_TYPE_ALIASES = frozenset({"Union", "Optional", "Type", "type"})


def in_annotation(text: str):
    """A predicate: whether a finding sits in a type annotation (of a variable, a parameter, a
    return) or a type alias (`X = Union[...]`): a merged finding should stand on a use instead
    (`findings.merge_per_file`)."""
    tree = _parse(text)
    spans = []
    if tree is not None:
        for node in astcache.walk(tree):
            notes = []
            if isinstance(node, ast.AnnAssign):
                notes.append(node.annotation)
            elif isinstance(node, ast.arg) and node.annotation is not None:
                notes.append(node.annotation)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
                notes.append(node.returns)
            elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript)
                  and (astcache.dotted(node.value.value) or "").rsplit(".", 1)[-1] in _TYPE_ALIASES):
                notes.append(node.value)  # `_PROFILER = Union[profile, emit_nvtx]`: a type alias
            spans += [((n.lineno, n.col_offset + 1), (n.end_lineno or n.lineno, n.end_col_offset or 0))
                      for n in notes]

    def secondary(finding: Finding) -> bool:
        place = (finding.line, finding.column)
        return finding.cell is None and any(start <= place < end for start, end in spans)

    return secondary


# ----------------------------------------------------------------------------- branches an NPU host never takes
def has_decidable_branches(text: str) -> bool:
    """Whether `untaken_branches(text)` may find anything: a cheap text test, no parse."""
    return "TYPE_CHECKING" in text or _may_decide(text)


def _is_type_checking(test: ast.AST) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def untaken_branches(text: str, relpath: str = "", interest: set | None = None) -> list[tuple[int, int, str, bool]]:
    """(first line, last line, the condition's source, type-checking only) of the blocks an NPU
    host never runs: the body of `if TYPE_CHECKING:` (no host runs it), of an `if` whose test is
    false there (`if _is_hip:`, `if current_platform.is_rocm():`, `if torch.version.cuda:`), and
    the `else` of one whose test is true there (and what reach.py shows from the file's own
    flags, functions and exits, read only where `interest`'s lines are). Tests the migration rewrites
    (`torch.cuda.is_available()`, `x.is_cuda`) are unknown, so never make a block."""
    if "if " not in text and "class " not in text and "supported=" not in text:
        # (a class's selection check may be one `return`; an op registered as unsupported, npugates.py)
        return []
    tree = _parse(text)
    if tree is None:
        return []
    out = []
    lines = text.splitlines(keepends=True)
    for node in _if_statements(tree):
        if not node.body:
            continue
        if _is_type_checking(node.test):
            out.append((_first_line(node.body[0]), node.body[-1].end_lineno or node.body[-1].lineno,
                        _segment(lines, node.test), True))
            continue
        truth = _truth(node.test)
        if truth is False:
            out.append((_first_line(node.body[0]), node.body[-1].end_lineno or node.body[-1].lineno,
                        _segment(lines, node.test), False))
        elif truth is True and node.orelse:
            out.append((_first_line(node.orelse[0]), node.orelse[-1].end_lineno or node.orelse[-1].lineno,
                        f"not ({_segment(lines, node.test)})", False))
    for first, last, test in _early_returns(tree):
        shown = test.operand if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) else None
        out.append((first, last, _segment(lines, shown) if shown is not None else f"not ({_segment(lines, test)})",
                    False))
    try:  # what the file's own flags, functions and exits show (reach.py)
        out += reach.untaken(tree, text, relpath, out, _truth, _segment, interest)
        out += capability.gated_methods(tree, lines, _truth, _segment, interest)  # (classes an NPU host never builds)
        out += predicates.short_circuit_blocks(tree, lines, _truth, _segment, interest)  # (`and` operands never evaluated)
        out += settled.untaken(tree, lines, _truth, _segment, interest)  # (a backend its resolver never gives)
    except RecursionError:
        pass
    return out


def _first_line(stmt: ast.stmt) -> int:
    """The first line of a statement, its decorators included: a `@triton.jit` kernel defined only
    under `if current_platform.is_cuda_alike():` is reported at its decorator's line."""
    return min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))])


def _early_returns(tree: ast.Module):
    """(first line, last line, test) of the code after an early return an NPU host always takes:
    a function whose first statement (after its docstring) is `if not has_flashinfer(): return
    False`, with a test true there, runs nothing after it on an NPU host."""
    for node in _if_statements(tree, (ast.FunctionDef, ast.AsyncFunctionDef)):
        body = node.body
        start = 1 if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                      and isinstance(body[0].value.value, str)) else 0
        if len(body) <= start + 1:
            continue
        guard = body[start]
        if (isinstance(guard, ast.If) and not guard.orelse and len(guard.body) == 1
                and isinstance(guard.body[0], ast.Return) and _truth(guard.test) is True):
            yield body[start + 1].lineno, body[-1].end_lineno or body[-1].lineno, guard.test


def _if_statements(tree: ast.Module, kinds: tuple = (ast.If,)):
    """The `if` statements (or other `kinds`) of the file, nested blocks included, without
    walking expressions (a whole `ast.walk` visits ten times as many nodes)."""
    stack: list = [tree]
    while stack:
        current = stack.pop()
        if isinstance(current, kinds):
            yield current
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(current, field, None)
            if isinstance(block, list):
                stack.extend(child for child in block if isinstance(child, (ast.stmt, ast.excepthandler,
                                                                            ast.match_case)))


def _segment(lines: list[str], node: ast.AST) -> str:
    """A condition's source on one line, at most 70 characters (from the file's lines, split once:
    `ast.get_source_segment` splits the whole file on every call)."""
    first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
    if first == last:
        text = lines[first].encode("utf-8")[node.col_offset:node.end_col_offset].decode("utf-8", "replace")
    else:
        parts = [lines[first].encode("utf-8")[node.col_offset:].decode("utf-8", "replace"),
                 *lines[first + 1:last],
                 lines[last].encode("utf-8")[:node.end_col_offset].decode("utf-8", "replace")]
        text = "".join(parts)
    text = " ".join(text.split())
    return text if len(text) <= 70 else text[:67] + "..."


npu_truth = _truth  # (for disabled.py: a condition's value on an NPU host: True, False or unknown)
npu_value = _value  # (for flagcalls19.py: True, False, NONE_THERE (None there: `torch.version.hip`) or unknown)
NONE_THERE = _NONE
source_segment = _segment  # (for disabled.py)
if_statements = _if_statements  # (for tests15.py: the `if` statements of a tree, nested ones included)


def review_untaken_branches(findings: list[Finding], text: str,
                            relpath: str = "") -> tuple[list[Finding], list[tuple[int, int, str]]]:
    """(findings, skipped scopes): report-only findings under `if TYPE_CHECKING:` go (the block
    is named as a skipped scope: type checkers read it, no host runs it); those in a branch an
    NPU host never takes are lowered to info, with the condition."""
    reported = {f.line for f in findings if not f.fixable and f.cell is None}
    if not reported or not (_may_decide(text) or _in_type_checking_block(text, reported)):
        return findings, []
    branches = untaken_branches(text, relpath, reported)
    if not branches:
        return findings, []
    out, scopes = [], []
    for finding in findings:
        if not finding.fixable and finding.cell is None:
            branch = next((b for b in branches if b[0] <= finding.line <= b[1]), None)
            if branch is not None and branch[3]:
                # named (once) as a skipped scope: the block held what would have been reported
                scope = (branch[0], branch[1], "only for type checkers (`if TYPE_CHECKING:`)")
                if scope not in scopes:
                    scopes.append(scope)
                continue
            if branch is not None and _lowerable(finding) and not any(
                    not any(b[0] <= place[0] <= b[1] for b in branches) for place in finding.also or ()):
                # (a finding that stands for places outside every such branch keeps its severity)
                why = branch[2] if "`" in branch[2] else f"`{branch[2]}`"  # (reach.py's reasons quote their code)
                finding = replace(finding, severity="info",
                                  message=f"{finding.message} (in a branch an NPU host does not take: {why})")
        out.append(finding)
    return out, scopes


def false_on_npu(condition: str) -> bool:
    """Whether the source of one condition (`_is_hip`, `current_platform.is_rocm()`) is certainly
    false on an NPU host; `TYPE_CHECKING` counts as false (no host runs its block)."""
    try:
        node = ast.parse(condition.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return _is_type_checking(node) or _truth(node) is False


def drop_untaken_gates(findings: list[Finding], text: str) -> list[Finding]:
    """NPU110 (a device check left meaning CUDA) on the test of an `if`/`elif`/`while` that is
    false on an NPU host for another reason (`elif torch.version.hip and torch.cuda.is_available():`,
    an `and` operand None there): the branch is never taken on an NPU host whatever the check
    answers, so keeping the check changes nothing there. Not reported."""
    gates = [f for f in findings if f.code == "NPU110" and not f.fixable and f.cell is None]
    if not gates or not _may_decide(text):
        return findings
    tree = _parse(text)
    if tree is None:
        return findings
    tests = [node.test for node in _if_statements(tree, (ast.If, ast.While))]
    untaken = [t for t in tests if any(t.lineno <= g.line <= (t.end_lineno or t.lineno) for g in gates)
               and _truth(t) is False]
    if not untaken:
        return findings
    return [f for f in findings if not (f in gates and any(
        t.lineno <= f.line <= (t.end_lineno or t.lineno) for t in untaken))]


# public names for optparams20.py (a skipif decorator's test, a test's truth on an NPU host)
skipping_if = _skipping_if
truth = _truth
