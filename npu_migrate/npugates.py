"""Gates evaluated with NPU-host semantics: what testscopes and reach.py could not yet decide.

The round-12 audits of vLLM and SGLang (issue #16) read findings under gates an NPU host fails as
false: the construct sits behind a condition that is never true there, and a fallback or another
implementation runs instead. testscopes.py evaluates a condition on an NPU host (three values:
true, false, unknown) and reach.py adds what the file's own names and functions show; this module
adds, each a fact of the NPU host:

- `current_platform.is_cpu()` (the project's platform layer, rules/scopes.toml [platform] layer)
  is false: the platform is the NPU's (`pytestmark = skipif(not current_platform.is_cpu(), ...)`
  skips a CPU-kernel test module there);
- a comparison of a backend's name with CUDA-only backend names (`attn_backend.get_name() ==
  "FLASHINFER"`; the names are data, rules/scopes.toml [npugates] cuda_only_backends) is false,
  `!=` true: an NPU host never selects those backends;
- an assignment expression `(backend := f())` has the value of `f()` (a condition `n <= 16 and
  (backend := f())` is false where `f()` is);
- a function of the file whose returns that an NPU host may reach are all falsy (`if
  current_platform.is_device_capability((10, 0)): return "cute-dsl"` then `return None`; or
  `major, _ = torch.cuda.get_device_capability()` then `if major < 9: return False` before the
  function's other returns: the shim answers (0, 0)) is false there (`live_returns_false`, read
  by reach._returns_false); one whose every such return is `None` is None there;
- a private method of a class referenced only (`self._tune()`) from code an NPU host never runs is
  not run either (`methods_reached_only_from`, read by reach.untaken).

The blocks these decide are testscopes.untaken_branches' blocks: the findings inside become info
with the usual "in a branch an NPU host does not take" reason, a named skipped scope (moot.py).
A gate with no else path and nothing else to run is still a gate: what it guards is never run on
an NPU host, whatever follows. Nothing here changes what is rewritten.
"""

from __future__ import annotations

import ast
import functools
import re

from . import astcache, catalogue

_dotted = astcache.dotted
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@functools.lru_cache(maxsize=None)
def _table() -> dict:
    """rules/scopes.toml [npugates]."""
    return catalogue.read_table("scopes.toml").get("npugates", {})


@functools.lru_cache(maxsize=None)
def _layer() -> re.Pattern:
    return re.compile(catalogue.read_table("scopes.toml")["platform"]["layer"])


@functools.lru_cache(maxsize=None)
def cuda_only_backends() -> frozenset:
    return frozenset(_table().get("cuda_only_backends", ()))


@functools.lru_cache(maxsize=None)
def decide_words() -> str:
    """A regular expression of the words this module's conditions need (testscopes' text test)."""
    return _table().get("decide_words", "(?!)")


def _str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _names_backend(node: ast.AST) -> bool:
    """`x.get_name()` with no arguments: a backend's name."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get_name"
            and not node.args and not node.keywords)


def known_value(node: ast.AST, truth):
    """True or False where `node` is certainly so on an NPU host for one of this module's reasons,
    else None. `truth(node)`: testscopes' evaluation (for the value of an assignment expression)."""
    if isinstance(node, ast.NamedExpr):
        value = truth(node.value)
        return value if value in (True, False) else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "is_cpu" \
            and not node.args and not node.keywords:
        receiver = _dotted(node.func.value) or ""
        if isinstance(node.func.value, ast.Call):
            receiver = (_dotted(node.func.value.func) or "") + "()"
        if receiver and _layer().search(receiver):
            return False  # the project's platform answers for the NPU there
        return None
    from .oottree34 import out_of_tree  # (`current_platform.is_out_of_tree()`: True there, oottree34.py)
    if out_of_tree(node, _layer()):
        return True
    if isinstance(node, ast.Compare) and len(node.ops) == 1 \
            and isinstance(node.ops[0], (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
        left, right = node.left, node.comparators[0]
        if _names_backend(right) and isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            left, right = right, left
        if not _names_backend(left):
            return None
        if isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            values = [_str(right)]
        elif isinstance(right, (ast.Tuple, ast.List, ast.Set)) and right.elts:
            values = [_str(e) for e in right.elts]
        else:
            return None
        if all(v is not None and v in cuda_only_backends() for v in values):
            return isinstance(node.ops[0], (ast.NotEq, ast.NotIn))
    return None


def _capability_majors(body: list) -> set[str]:
    """Names bound by `major, minor = torch.cuda.get_device_capability()` in a function's top-level
    statements: the first is 0 on an NPU host (the shim's answer is (0, 0))."""
    out = set()
    for stmt in body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Tuple) \
                and stmt.targets[0].elts and isinstance(stmt.targets[0].elts[0], ast.Name) \
                and isinstance(stmt.value, ast.Call) \
                and _dotted(stmt.value.func) in _table().get("zero_capability_calls", ()):
            out.add(stmt.targets[0].elts[0].id)
    return out


def _major_test(node: ast.AST, majors: set[str]):
    """`major < 9` (True) or `major >= 9` (False) for a name bound to the major capability 0."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.left, ast.Name) \
            and node.left.id in majors:
        bound = node.comparators[0]
        if isinstance(bound, ast.Constant) and isinstance(bound.value, int) and not isinstance(bound.value, bool) \
                and bound.value > 0:
            op = node.ops[0]
            if isinstance(op, (ast.Lt, ast.LtE, ast.NotEq)):
                return True
            if isinstance(op, (ast.Gt, ast.GtE, ast.Eq)):
                return False
    return None


def _falsy_constant(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and not node.value and not isinstance(node.value, str) or (
        isinstance(node, ast.Constant) and node.value == "")


def live_returns(function: ast.AST, truth) -> tuple[list, bool] | None:
    """(the values of the `return`s an NPU host may reach, whether a gate cut any off) of a
    function, or None when it may end without a `return` (an implicit None, or a generator).
    `truth(node)`: a condition's value on an NPU host. The returns inside an `if` whose test is
    false there (or the `else` of one true there) are never reached, and so is everything after
    a top-level `if <true there>: return ...`."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if not body:
        return None
    majors = _capability_majors(body)

    def value(test):
        found = _major_test(test, majors) if majors else None
        return found if found is not None else truth(test)

    out: list = []
    cut = False

    def collect(stmts: list) -> None:
        nonlocal cut
        for stmt in stmts:
            if isinstance(stmt, (*_FUNCTIONS, ast.ClassDef, ast.Lambda)):
                continue
            if isinstance(stmt, ast.Return):
                out.append(stmt.value)
                continue
            if isinstance(stmt, ast.If):
                decided = value(stmt.test)
                if decided is False:
                    cut = True
                    collect(stmt.orelse)
                    continue
                if decided is True:
                    cut = cut or bool(stmt.orelse)
                    collect(stmt.body)
                    continue
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list):
                    collect(inner)

    for index, stmt in enumerate(body):
        if isinstance(stmt, ast.If) and not stmt.orelse and stmt.body and isinstance(stmt.body[-1], ast.Return) \
                and value(stmt.test) is True:
            collect(stmt.body)
            return out, cut or index + 1 < len(body)  # (an exit an NPU host takes: nothing after it runs)
        collect([stmt])
    if not isinstance(body[-1], (ast.Return, ast.Raise)):
        return None
    return out, cut


def live_returns_false(function: ast.AST, truth, cheap_truth=None) -> str | None:
    """"false" when every return of the function an NPU host may reach is falsy there, and a gate
    false there cut off another (a constant stub is no NPU fact); "none" when those are all `None`
    (`f() is None` is then true there); None otherwise. `cheap_truth`: an evaluation without the
    function's own names, for a first test (a top-level `if` it decides) before any other work:
    every function of a file is asked."""
    tests = [s.test for s in function.body if isinstance(s, ast.If)]
    if not tests:
        return None
    if cheap_truth is not None:
        majors = _capability_majors(function.body)
        if not any((majors and _major_test(t, majors) is not None) or cheap_truth(t) in (True, False)
                   for t in tests):
            return None
    found = live_returns(function, truth)
    if found is None:
        return None
    values, cut = found
    if not cut or not values:
        return None
    if any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in ast.walk(function)):
        return None
    if not cut or not values or any(v is None for v in values):
        return None
    if all(isinstance(v, ast.Constant) and v.value is None for v in values):
        return "none"
    if all(_falsy_constant(v) or truth(v) is False for v in values):
        return "false"
    return None


def methods_reached_only_from(tree: ast.Module, blocks: list, holds=lambda first, last: True,
                              lines: list | None = None) -> list:
    """(first line, last line, reason, False) of the private methods (`_tune`, not dunders) of the
    file's classes every reference of which (`self._tune()`, any `x._tune`, the name in a string)
    sits in a block an NPU host never runs, referenced at least once. `blocks`: those blocks."""
    if not blocks:
        return []
    methods: dict[str, list] = {}
    for cls in (n for n in astcache.walk_statements(tree) if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            if isinstance(stmt, _FUNCTIONS) and stmt.name.startswith("_") and not stmt.name.endswith("__") \
                    and not stmt.decorator_list and holds(stmt.lineno, stmt.end_lineno or stmt.lineno):
                methods.setdefault(stmt.name, []).append(stmt)
    if methods and lines is not None:  # (cheap before the walk: the name is in a block's text)
        texts = ["".join(lines[b[0] - 1:b[1]]) for b in blocks]
        methods = {name: d for name, d in methods.items() if any(name in t for t in texts)}
    if not methods:
        return []
    refs: dict[str, list[int]] = {name: [] for name in methods}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in refs:
            refs[node.attr].append(node.lineno if isinstance(node.ctx, ast.Load) else 0)
        elif isinstance(node, ast.Name) and node.id in refs:
            refs[node.id].append(0)  # (a bare name: not a method call this reads)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in refs:
            refs[node.value].append(0)
    out = []
    for name, lines in refs.items():
        if not lines or 0 in lines:
            continue
        spans = [(d.lineno, d.end_lineno or d.lineno) for d in methods[name]]
        reasons = []
        for line in lines:
            if any(first <= line <= last for first, last in spans):
                continue  # (recursion)
            block = next((b for b in blocks if b[0] <= line <= b[1]), None)
            if block is None:
                reasons = None
                break
            reasons.append(block[2])
        if not reasons:
            continue
        reason = reasons[0].split(" an NPU host does not run: ", 1)[-1]
        for first, last in spans:
            out.append((first, last, f"`{name}` is reached only from code an NPU host does not run: {reason}",
                        False))
    return out


def private_method_spans(tree: ast.Module) -> list[tuple[str, int, int]]:
    """(name, first line, last line) of the private methods of the module's top-level classes: the
    lines that name one are worth reading too (reach._interest), so that the block that calls it
    (`if self._should_tune(): self._tune()`) is found."""
    return [(m.name, m.lineno, m.end_lineno or m.lineno) for c in tree.body if isinstance(c, ast.ClassDef)
            for m in c.body if isinstance(m, _FUNCTIONS) and m.name.startswith("_") and not m.name.endswith("__")]


# ------------------------------------------------------------------ helpers nothing calls (whole run)

# (the reason's words: moot.PHRASES holds "in a helper ", so the finding becomes a named skipped scope)
UNUSED_HELPER = "in a helper nothing references"
_LAZY_CODES = frozenset({"NPU910", "NPU911", "NPU915"})
# a test module (as importgates.is_test reads one): no runtime importer, no user calls its helpers
_TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")


def _unused_function(tree: ast.Module, places: list[int]) -> ast.AST | None:
    """The module-level function (undecorated, not a test, not a pytest hook) holding every one of
    `places` inside its body, or None."""
    for stmt in tree.body:
        if isinstance(stmt, _FUNCTIONS) and all(stmt.lineno < line <= (stmt.end_lineno or stmt.lineno)
                                                for line in places):
            if stmt.decorator_list or stmt.name.startswith(("test", "pytest_")):
                return None
            return stmt
    return None


def named_in_file(tree: ast.Module, function: ast.AST) -> bool:
    """Whether the file names the function anywhere but its own `def` (a call, an attribute, a
    string: `__all__`, `getattr`)."""
    name = function.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name) \
                or (isinstance(node, ast.Constant) and isinstance(node.value, str) and name in node.value) \
                or (isinstance(node, ast.alias) and (node.asname or node.name).split(".")[-1] == name):
            return True
    return False


def review_unused_helpers(results: list, paths: dict) -> list:
    """A report-only lazy import of a CUDA-only package (NPU910/NPU911/NPU915) inside a module-level
    function that nothing runs: a test file's helper (or a private function) that its file names
    nowhere but its `def` and no other file of the run names beside the module's own name (a
    benchmark's own function of the same name is no use of it): info, with the reason
    (a named skipped scope, moot.py). Round-12 audit AF#3 (a test module's `flashinfer_qknorm()`
    that its tests never call)."""
    import dataclasses

    from .modpaths import RunTexts

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(
        f.code in _LAZY_CODES and not f.fixable and f.cell is None and f.severity != "info" for f in r.findings)]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)

    python = None
    out = list(results)
    for i in candidates:
        result = results[i]
        data = text_of(i)
        test_file = bool(_TEST_FILE.search(result.relpath))
        if not data or (b"\ndef " not in data if test_file else b"\ndef _" not in data):
            continue
        # (cheap before the parse: a lazy import is indented)
        source = data.split(b"\n")
        if not any(f.code in _LAZY_CODES and not f.fixable and f.cell is None and f.severity != "info"
                   and 0 < f.line <= len(source) and source[f.line - 1][:1] in (b" ", b"\t")
                   for f in result.findings):
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        changed = False
        findings = []
        for finding in result.findings:
            if finding.code in _LAZY_CODES and not finding.fixable and finding.cell is None \
                    and finding.severity != "info":
                function = _unused_function(tree, [finding.line, *(p[0] for p in finding.also)])
                if function is not None and (test_file or function.name.startswith("_")) \
                        and not named_in_file(tree, function):
                    if python is None:
                        python = [j for j, r in enumerate(results) if r.relpath.endswith(".py")]
                    # (another file calls it only through the module: it names the module too; a
                    # benchmark defining its own function of the same name does not)
                    word, stem = function.name.encode(), result.relpath.rsplit("/", 1)[-1][:-3].encode()
                    if not any(j != i and word in (data_j := text_of(j) or b"") and stem in data_j
                               for j in python):
                        finding = dataclasses.replace(
                            finding, severity="info",
                            message=f"{finding.message} ({UNUSED_HELPER}: `{function.name}` is neither called "
                                    f"in its file nor named in another file of the run that names its module)")
                        changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(result, findings=findings)
    return out


# ------------------------------------------------------------------ registrations an NPU host never selects

# decorators of a Triton kernel or of a custom op that wraps one: the function runs only where called
_KERNEL_OR_OP = re.compile(r"(^|\.)(jit|autotune|heuristics|triton_op|custom_op)$")


def _decorator_name(d: ast.AST) -> str:
    return _dotted(d.func if isinstance(d, ast.Call) else d) or ""


def unsupported_registrations(tree: ast.Module, lines: list, truth, segment) -> list:
    """(first line, last line, reason, False) of the module-level functions registered as one
    implementation of an op with `supported=<false on an NPU host>` (`@ir.ops.x.register_impl(
    "triton", supported=HAS_TRITON and current_platform.is_cuda())`): the op's dispatcher never
    selects them there and runs another implementation."""
    out = []
    for stmt in tree.body:
        if not isinstance(stmt, _FUNCTIONS):
            continue
        for d in stmt.decorator_list:
            keyword = next((k for k in getattr(d, "keywords", ()) if k.arg == "supported"), None) \
                if isinstance(d, ast.Call) else None
            if keyword is not None and truth(keyword.value) is False:
                first = min([stmt.lineno, *(x.lineno for x in stmt.decorator_list)])
                out.append((first, stmt.end_lineno or stmt.lineno,
                            f"`{stmt.name}` is registered with `supported={segment(lines, keyword.value)}`, false on "
                            f"an NPU host: another implementation of the op runs there", False))
                break
    return out


def kernels_reached_only_from(tree: ast.Module, blocks: list) -> list:
    """(first line, last line, reason, False) of the file's private module-level Triton kernels and
    custom ops wrapping them (`@triton.jit`, `@triton_op("ns::name")`), every reference of which by
    name sits in one of `blocks` (code an NPU host never runs) or in another such function; a
    custom op whose name string appears elsewhere in the file (a call by name) is left alone."""
    if not blocks:
        return []
    defs = {s.name: s for s in tree.body if isinstance(s, _FUNCTIONS) and s.name.startswith("_")
            and s.decorator_list and all(_KERNEL_OR_OP.search(_decorator_name(d)) for d in s.decorator_list)}
    if not defs:
        return []
    refs: dict[str, list[int]] = {name: [] for name in defs}
    strings: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in refs:
            refs[node.id].append(node.lineno if isinstance(node.ctx, ast.Load) else 0)
        elif isinstance(node, ast.Attribute) and node.attr in refs:
            refs[node.attr].append(0)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings[node.value] = strings.get(node.value, 0) + 1
            if node.value in refs:
                refs[node.value].append(0)
    for name, d in defs.items():
        for decorator in d.decorator_list:
            if isinstance(decorator, ast.Call) and decorator.args and isinstance(decorator.args[0], ast.Constant) \
                    and isinstance(decorator.args[0].value, str) and strings.get(decorator.args[0].value, 0) > 1:
                refs[name].append(0)  # (the op is named again in the file: called by name)
    span = {name: (min([d.lineno, *(x.lineno for x in d.decorator_list)]), d.end_lineno or d.lineno)
            for name, d in defs.items()}
    found: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for name, places in refs.items():
            if name in found or not places or 0 in places:
                continue
            reasons = []
            for line in places:
                if span[name][0] <= line <= span[name][1]:
                    continue
                block = next((b for b in blocks if b[0] <= line <= b[1]), None)
                helper = next((h for h in found if span[h][0] <= line <= span[h][1]), None)
                if block is None and helper is None:
                    reasons = None
                    break
                reasons.append(block[2] if block is not None else found[helper])
            if reasons:
                reason = reasons[0].split(" an NPU host does not run: ", 1)[-1]
                found[name] = f"`{name}` is reached only from code an NPU host does not run: {reason}"
                changed = True
    return [(*span[name], why, False) for name, why in found.items()]
