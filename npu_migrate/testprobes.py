"""Test-only device probes and CUDA values only recorded (issue #16, round 11).

The round-11 audits read as false a group of report-only findings about `"cuda"` in tests and
benchmarks that an NPU host either never runs or runs as written with a clean result.
`review(findings, text, relpath)` (run.migrate_file, after the per-file merge) judges one file's
findings against these shapes; each place of a merged finding is judged on its own
(findings.lower_pieces), and a place that fits is lowered to info with its reason in the message
(the reasons are moot.py phrases: the places become named skipped scopes, nothing is dropped):

- **A `"cuda"` test case an NPU host skips** (`SKIPPED_CASE`, moot.PHRASES): a `"cuda"` value of
  `@pytest.mark.parametrize` whose case is skipped by a condition that stays CUDA-only after the
  migration: `pytest.param("cuda", marks=pytest.mark.skipif(not current_platform.is_cuda()))`, or
  a test body that starts with `if device == "cuda" and not torch.cuda.is_available():
  pytest.skip(...)`. The condition is read as the migrated file has it: a `torch.cuda.is_available()`
  the run rewrote (a fixable finding inside the call) answers for the NPU and is unknown here; one
  left as written is False on an NPU host; `device == "cuda"` (or its rewrite
  `npu_compat.is_accelerator_type(device)`) is True for the `"cuda"` case; the rest is
  testscopes.false_on_npu. A case the migrated test runs on an NPU host keeps its finding.
- **A test device list that gets `"cuda"` only behind a CUDA check kept as written**
  (`PROBED_LIST`, moot.AS_WRITTEN): `["cpu"] + (["cuda"] if torch.cuda.is_available() else [])`,
  `if torch.cuda.is_available(): devices += ["cuda"]`, in a test, conftest or benchmark file, the
  other arm a plain list: the NPU host runs the list's other devices; adding "npu" would test the
  NPU (said in the reason).
- **`torch.version.cuda` stored only as a value of a record** (`STORED_VERSION`, moot.AS_WRITTEN):
  the value of a dict literal's key or of a `dict(...)` keyword (a JSON or CSV report's metadata)
  whose key the file never reads back (`report["cuda_version"]`, `.get("cuda")`): None on an NPU
  build of torch, written as null; a use that parses or compares it stays a finding (labelflow.py
  names the reads only displayed).

Three more of the same audits' shapes: a place in a test after a statement of its block that skips
the test on an NPU host whatever the case, and the `case == "cuda"` comparison that picks out a
skipped case (`SKIPPED_TEST`, `SKIPPED_CASE`: moot.PHRASES); an operator name in a table a
comprehension reads only through `hasattr(lib, op)` / `getattr(lib, op)` (`OP_NAME`, xformers'
FLOP table: moot.AS_WRITTEN); `import bitsandbytes as bnb` in a function that never reads `bnb`
(a `sys.modules` marker a launcher test checks: `UNREAD_IMPORT`, moot.NO_WORK).
"""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import replace
from typing import Optional

from . import astcache
from .findings import Finding, lower_pieces
from .moot import is_moot
from .testscopes import false_on_npu

# the reasons (each starts with a moot.PHRASES or moot.AS_WRITTEN phrase)
SKIPPED_CASE = 'a "cuda" test case an NPU host skips'
PROBED_LIST = 'a test device list that gets "cuda" only behind a CUDA check kept as written'
STORED_VERSION = "`torch.version.cuda` stored only as a value of a record"
SKIPPED_TEST = "in a test that does not run on an NPU host"  # (moot.PHRASES, as testscopes says it)
OP_NAME = "an operator name in a table read only through `hasattr`"
UNREAD_IMPORT = "an import of bitsandbytes whose name nothing reads"

_TRIGGER = re.compile(r"parametrize|is_available|version\.cuda|hasattr|import bitsandbytes")
_CUDA_STRING = re.compile(r"cuda(:\d+)?")
_TEST_PATH = re.compile(r"(^|/)(tests?|testing|benchmarks?)/|(^|/)(test_[^/]*|[^/]*_test|conftest)\.py$")
_SAME_STATEMENT = re.compile(r" \(with `[^`]*` in the same statement\)")
_CODES = frozenset(("NPU990", "NPU110", "NPU914"))
_SKIP_CALLS = frozenset(("skip", "skipTest", "SkipTest", "xfail"))


def _cuda_string(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(_CUDA_STRING.fullmatch(node.value))
    if isinstance(node, ast.JoinedStr) and node.values:  # f"cuda:{i}"
        first = node.values[0]
        return isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.startswith("cuda:")
    return False


class _File:
    def __init__(self, tree: ast.Module, findings: list[Finding]) -> None:
        self.tree = tree
        self.parents: dict[ast.AST, ast.AST] = {}
        self.at: dict[tuple[int, int], list[ast.AST]] = {}
        for parent in astcache.walk(tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent
            if hasattr(parent, "col_offset"):
                self.at.setdefault((parent.lineno, parent.col_offset + 1), []).append(parent)
        # where the run rewrote something: a check holding one answers for the NPU once migrated
        self.rewritten = sorted((f.line, f.column - 1) for f in findings if f.fixable and f.cell is None)

    def rewritten_in(self, node: ast.AST) -> bool:
        start = (node.lineno, node.col_offset)
        end = (node.end_lineno or node.lineno, node.end_col_offset or node.col_offset)
        return any(start <= place < end for place in self.rewritten)

    def up(self, node: ast.AST) -> Optional[ast.AST]:
        return self.parents.get(node)


# ----------------------------------------------------------------------------- a condition's value
def _value(node: ast.AST, file: _File, binding: dict[str, str]) -> Optional[bool]:
    """The truth of a condition on an NPU host as the migrated file has it (None: unknown);
    `binding`: test parameters -> the values of the case."""
    if isinstance(node, ast.Constant):
        return bool(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _value(node.operand, file, binding)
        return None if inner is None else not inner
    if isinstance(node, ast.BoolOp):
        values = [_value(v, file, binding) for v in node.values]
        decisive = isinstance(node.op, ast.Or)
        if decisive in values:
            return decisive
        return None if None in values else not decisive
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = node.left, node.comparators[0]
        if isinstance(right, ast.Name) and right.id in binding:
            left, right = right, left
        if isinstance(left, ast.Name) and left.id in binding:
            value = binding[left.id]
            op = node.ops[0]
            if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(right, ast.Constant):
                return (right.value == value) == isinstance(op, ast.Eq)
            if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)) \
                    and all(isinstance(e, ast.Constant) for e in right.elts):
                return (value in [e.value for e in right.elts]) == isinstance(op, ast.In)
        return None
    if isinstance(node, ast.Call):
        name = astcache.dotted(node.func) or ""
        if name == "torch.cuda.is_available" and not node.args:
            return None if file.rewritten_in(node) else False  # (kept as written: no CUDA there)
        if name.rpartition(".")[2] == "is_accelerator_type" and len(node.args) == 1 \
                and isinstance(node.args[0], ast.Name) and binding.get(node.args[0].id, "").startswith("cuda"):
            return True  # (the shim: `value == "cuda" or value == device_type()`)
    if file.rewritten_in(node):
        return None
    return False if false_on_npu(ast.unparse(node)) else None


# ----------------------------------------------------------------------------- a skipped "cuda" case
def _argnames(node: ast.AST) -> Optional[list[str]]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [n.strip() for n in node.value.split(",") if n.strip()]
    if isinstance(node, (ast.Tuple, ast.List)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [e.value for e in node.elts]
    return None


def _is_call(node: Optional[ast.AST], last: str) -> bool:
    return isinstance(node, ast.Call) and (astcache.dotted(node.func) or "").rpartition(".")[2] == last


def _skip_conditions(marks: ast.AST) -> list[ast.AST]:
    items = marks.elts if isinstance(marks, (ast.List, ast.Tuple)) else [marks]
    return [m.args[0] for m in items if _is_call(m, "skipif") and m.args]


def _case(node: ast.AST, file: _File):
    """(the parametrize call, the argument's index in a case, the pytest.param call or None) of a
    "cuda" value of `@pytest.mark.parametrize`, or None."""
    index, param, current = 0, None, node
    parent = file.up(current)
    if isinstance(parent, ast.Tuple):  # ("cuda", 4096, 8)
        index = parent.elts.index(current)
        current, parent = parent, file.up(parent)
    elif _is_call(parent, "param") and current in parent.args:  # pytest.param("cuda", ..., marks=...)
        index, param = parent.args.index(current), parent
        current, parent = parent, file.up(parent)
    if not isinstance(parent, (ast.List, ast.Tuple)):
        return None
    call = file.up(parent)
    if not (_is_call(call, "parametrize") and len(call.args) >= 2 and call.args[1] is parent):
        return None
    return call, index, param


def _skips_only(statement: ast.stmt) -> bool:
    """`if ...: pytest.skip(...)` (or `raise unittest.SkipTest(...)`), with no `else`."""
    return isinstance(statement, ast.If) and not statement.orelse and bool(statement.body) and all(
        (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
         and (astcache.dotted(s.value.func) or "").rpartition(".")[2] in _SKIP_CALLS)
        or (isinstance(s, ast.Raise) and s.exc is not None
            and (astcache.dotted(getattr(s.exc, "func", s.exc)) or "").endswith("SkipTest"))
        for s in statement.body)


def _leading_skips(function: ast.AST) -> list[ast.AST]:
    """The conditions of the `if ...: pytest.skip(...)` statements a test body starts with; a
    first `if A:` whose block starts with `if B: pytest.skip(...)` gives `A and B`."""
    conditions = []
    for statement in function.body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # (a docstring)
        if _skips_only(statement):
            conditions.append(statement.test)
            continue
        if isinstance(statement, ast.If) and statement.body and _skips_only(statement.body[0]):
            conditions.append(ast.BoolOp(op=ast.And(), values=[statement.test, statement.body[0].test]))
        break
    return conditions


def _case_selector(node: ast.AST, file: _File) -> Optional[str]:
    """`if device == "cuda" ...: pytest.skip(...)` at the start of a parametrized test: the
    comparison only picks out the "cuda" case, which that skip skips on an NPU host."""
    if not (isinstance(node, ast.Constant) and _cuda_string(node)):
        return None
    compare = file.up(node)
    if not (isinstance(compare, ast.Compare) and len(compare.ops) == 1
            and isinstance(compare.ops[0], ast.Eq)):
        return None
    other = compare.left if compare.comparators[0] is node else compare.comparators[0]
    if not isinstance(other, ast.Name):
        return None
    statement = compare
    while statement is not None and not isinstance(statement, ast.stmt):
        statement = file.up(statement)
    function = file.up(statement) if statement is not None else None
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or not any(
            _is_call(d, "parametrize") and other.id in (_argnames(d.args[0]) or ()) if isinstance(d, ast.Call)
            and d.args else False for d in function.decorator_list):
        return None
    binding = {other.id: node.value}
    for condition in _leading_skips(function):
        inside = any(n is compare for n in ast.walk(condition))
        if inside and _value(condition, file, binding) is True:
            return (f"{SKIPPED_CASE}: this comparison picks it out and `{ast.unparse(condition)}` skips it, "
                    "CUDA-only after the migration")
    return None


def _skipped_before(node: ast.AST, file: _File) -> Optional[str]:
    """A place in a test function after a statement of its own block that skips the test on an NPU
    host whatever the case (`if not torch.cuda.is_available(): pytest.skip(...)`, kept as written)."""
    current, parent = node, file.up(node)
    while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                                          ast.ClassDef, ast.Module)):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and current in block:
                for statement in block[:block.index(current)]:
                    if _skips_only(statement) and _value(statement.test, file, {}) is True:
                        shown = ast.unparse(statement.test)
                        function = parent
                        while function is not None and not isinstance(function, (ast.FunctionDef,
                                                                                 ast.AsyncFunctionDef)):
                            function = file.up(function)
                        if function is None or not function.name.startswith("test"):
                            return None
                        return (f"{SKIPPED_TEST}: `{shown}` skips it first and stays CUDA-only after "
                                "the migration")
        current, parent = parent, file.up(parent)
    if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) and parent.name.startswith("test"):
        for statement in parent.body[:parent.body.index(current)] if current in parent.body else ():
            if _skips_only(statement) and _value(statement.test, file, {}) is True:
                return (f"{SKIPPED_TEST}: `{ast.unparse(statement.test)}` skips it first and stays "
                        "CUDA-only after the migration")
    return None


def _skipped_case(node: ast.AST, file: _File) -> Optional[str]:
    if not (isinstance(node, ast.Constant) and _cuda_string(node)):
        return None
    found = _case(node, file)
    if found is None:
        return None
    call, index, param = found
    names = _argnames(call.args[0])
    function = file.up(call)
    if not names or index >= len(names) or not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) \
            or call not in function.decorator_list:
        return None
    binding = {names[index]: node.value}
    conditions = [c for k in (param.keywords if param is not None else ()) if k.arg == "marks"
                  for c in _skip_conditions(k.value)]
    conditions += [c for d in function.decorator_list if _is_call(d, "skipif") and d.args for c in d.args[:1]]
    conditions += _leading_skips(function)
    for condition in conditions:
        if _value(condition, file, binding) is True:
            shown = ast.unparse(condition)
            shown = shown if len(shown) <= 90 else shown[:87] + "..."
            return (f"{SKIPPED_CASE}: `{shown}` skips it and stays CUDA-only after the migration; "
                    "add an \"npu\" case to test the NPU")
    return None


# ----------------------------------------------------------------------------- a branch only a skipped case takes
def _cases(function: ast.AST) -> dict[str, list[str]]:
    """{parameter: its string values} of the test's one-name `@pytest.mark.parametrize` lists."""
    out = {}
    for decorator in function.decorator_list:
        if _is_call(decorator, "parametrize") and len(decorator.args) >= 2:
            names = _argnames(decorator.args[0])
            values = decorator.args[1]
            if names and len(names) == 1 and isinstance(values, (ast.List, ast.Tuple)) and values.elts and all(
                    isinstance(e, ast.Constant) and isinstance(e.value, str) for e in values.elts):
                out[names[0]] = [e.value for e in values.elts]
    return out


class _CaseReading(ast.NodeTransformer):
    """A condition of the test read for one case of `name`: `name.type` is the case's device type
    where the test only rebinds `name = torch.device(name)`, `npu_compat.is_accelerator_type(name)`
    is whether the case names the accelerator, and `x is not None` of a name bound once to `a if
    <cond> else None` is `<cond>`."""

    def __init__(self, function: ast.AST, name: str, value: str) -> None:
        self.name, self.value = name, value
        stores: dict[str, list[ast.AST]] = {}
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                stores.setdefault(node.targets[0].id, []).append(node.value)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name):
                stores.setdefault(node.target.id, []).append(None)
        self.typed = all(isinstance(v, ast.Call) and astcache.dotted(v.func) == "torch.device" and len(v.args) == 1
                         and isinstance(v.args[0], ast.Name) and v.args[0].id == name for v in stores.get(name, ()))
        self.optional = {n: v[0].test for n, v in stores.items() if n != name and len(v) == 1
                         and isinstance(v[0], ast.IfExp) and isinstance(v[0].orelse, ast.Constant)
                         and v[0].orelse.value is None}

    def visit_Attribute(self, node: ast.Attribute):
        if self.typed and node.attr == "type" and isinstance(node.value, ast.Name) and node.value.id == self.name:
            return ast.copy_location(ast.Name(id=self.name, ctx=ast.Load()), node)
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call):
        node = self.generic_visit(node)
        if (astcache.dotted(node.func) or "").rpartition(".")[2] == "is_accelerator_type" and len(node.args) == 1 \
                and isinstance(node.args[0], ast.Name) and node.args[0].id == self.name:
            return ast.copy_location(ast.Constant(self.value.split(":")[0] in ("cuda", "npu")), node)
        return node

    def visit_Compare(self, node: ast.Compare):
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)) and isinstance(node.left, ast.Name) \
                and node.left.id in self.optional and isinstance(node.comparators[0], ast.Constant) \
                and node.comparators[0].value is None:
            test = self.visit(copy.deepcopy(self.optional[node.left.id]))
            return test if isinstance(node.ops[0], ast.IsNot) else ast.copy_location(
                ast.UnaryOp(op=ast.Not(), operand=test), node)
        return self.generic_visit(node)


def _case_branch(node: ast.AST, file: _File) -> Optional[str]:
    """A place in a parametrized test reached only in a branch that the test's skipped cases alone
    take (round 28 CA#19): `if device == "cuda" and not torch.cuda.is_available(): pytest.skip()`
    first (kept as written: False there), then `device = torch.device(device)` and `x if
    device.type == "cuda" else None`, or `if x is not None:` of that value: every case an NPU host
    runs ("cpu") takes the other branch."""
    function = node
    while function is not None and not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        function = file.up(function)
    if function is None or not function.name.startswith("test"):
        return None
    cases, skips = _cases(function), _leading_skips(function)
    if not cases or not skips:
        return None
    current, parent = node, file.up(node)
    while parent is not None and parent is not function:
        test = parent.test if (isinstance(parent, ast.IfExp) and current is parent.body) or (
            isinstance(parent, ast.If) and current in parent.body) else None
        for name, values in cases.items() if test is not None else ():
            skipped = [v for v in values if any(_value(s, file, {name: v}) is True for s in skips)]
            live = [v for v in values if v not in skipped]
            if skipped and live and all(_value(_CaseReading(function, name, v).visit(copy.deepcopy(test)), file,
                                               {name: v}) is False for v in live):
                return (f"{SKIPPED_CASE}: only the {', '.join(map(repr, skipped))} case of `{name}` takes "
                        f"`{ast.unparse(test)}`, and the test's `{ast.unparse(skips[0])}` skips it, CUDA-only "
                        "after the migration")
        current, parent = parent, file.up(parent)
    return None


# ----------------------------------------------------------------------------- a probed device list
def _label_list(node: ast.AST) -> bool:
    """A list or tuple of device labels (or of cases made of constants): what a probe adds."""
    if not isinstance(node, (ast.List, ast.Tuple)):
        return False
    return all(isinstance(e, ast.Constant) or (isinstance(e, (ast.Tuple, ast.List)) and all(
        isinstance(x, ast.Constant) or isinstance(x, ast.Attribute) for x in e.elts)) for e in node.elts)


def _adds_labels(statement: ast.stmt) -> bool:
    """`devices += ["cuda"]`, `devices.append("cuda")`, `devices.extend([...])`."""
    if isinstance(statement, ast.AugAssign) and isinstance(statement.op, ast.Add):
        return _label_list(statement.value)
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        call = statement.value
        if isinstance(call.func, ast.Attribute) and len(call.args) == 1 and not call.keywords:
            if call.func.attr == "append":
                return isinstance(call.args[0], ast.Constant)
            if call.func.attr == "extend":
                return _label_list(call.args[0])
    return False


def _only_adds(block: list) -> bool:
    if len(block) == 1 and isinstance(block[0], ast.If):  # elif
        return _only_adds(block[0].body) and _only_adds(block[0].orelse)
    return all(_adds_labels(s) for s in block)


def _probed_list(node: ast.AST, file: _File) -> Optional[str]:
    current = node
    while current is not None and not isinstance(current, (ast.stmt, ast.IfExp)):
        current = file.up(current)
    if isinstance(current, ast.IfExp):
        probe = current
        if not (_label_list(probe.body) and _label_list(probe.orelse)):
            return None
        test = probe.test
    else:
        # the statement holding the place: the `if` itself, or one the `if` directly holds
        probe = current
        if not isinstance(probe, ast.If):
            probe = file.up(current)
            if not isinstance(probe, ast.If) or current not in probe.body:
                return None
        if not (_only_adds(probe.body) and _only_adds(probe.orelse)):
            return None
        test = probe.test
    if _value(test, file, {}) is not False:
        return None
    return (f"{PROBED_LIST}: an NPU host runs the list's other devices, as any machine without CUDA; "
            "adding \"npu\" would test the NPU")


# ----------------------------------------------------------------------------- a recorded version
def _key_read(key: str, text: str) -> bool:
    quoted = f"(?:'{re.escape(key)}'|\"{re.escape(key)}\")"
    return re.search(rf"\[\s*{quoted}\s*\]|\.get\(\s*{quoted}|\.pop\(\s*{quoted}", text) is not None


def _stored_version(node: ast.AST, file: _File, text: str) -> Optional[str]:
    if not (isinstance(node, ast.Attribute) and astcache.dotted(node) == "torch.version.cuda"):
        return None
    parent = file.up(node)
    key = None
    if isinstance(parent, ast.Dict) and node in parent.values:
        key_node = parent.keys[parent.values.index(node)]
        if isinstance(key_node, ast.Constant) and isinstance(key_node.value, str):
            key = key_node.value
    elif isinstance(parent, ast.keyword) and parent.arg and _is_call(file.up(parent), "dict") \
            and isinstance(file.up(parent).func, ast.Name):
        key = parent.arg
    if key is None or _key_read(key, text):
        return None
    return (f"{STORED_VERSION}: the value of `{key}`, None on an NPU build of torch and recorded as "
            "such; nothing in the file reads it back")


# (a read of a report's field that None passes: a presence or equality test, or a display)
_NONE_SAFE = (ast.Is, ast.IsNot, ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _field_read_safe(file: _File, read: ast.AST) -> bool:
    parent = file.up(read)
    if isinstance(parent, ast.FormattedValue):
        return True
    return (isinstance(parent, ast.Compare) and parent.left is read and len(parent.ops) == 1
            and isinstance(parent.ops[0], _NONE_SAFE))


def _field_reads_safe(key: str, file: _File) -> bool:
    """Whether every read of the report field `key` in the file (`x.key`, `x["key"]`,
    `x.get("key")`) only tests it against a value or shows it."""
    for node in astcache.walk(file.tree):
        if isinstance(node, ast.Attribute) and node.attr == key and isinstance(node.ctx, ast.Load):
            read = node
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.slice, ast.Constant) \
                and node.slice.value == key:
            read = node
        elif _is_call(node, "get") and isinstance(node.func, ast.Attribute) and node.args \
                and isinstance(node.args[0], ast.Constant) and node.args[0].value == key:
            read = node
        else:
            continue
        if not _field_read_safe(file, read):
            return False
    return True


def _reported_version(node: ast.AST, file: _File, text: str) -> Optional[str]:
    """`torch.version.cuda` (directly, or through a local name bound once to it, its other bindings
    constant strings) handed only as a keyword `key=` to a record the file formats into its report
    (the text holds the `{key}` placeholder), every read of the field a None-safe test or a display
    (round-28 audit CA#9, h137: vLLM's collect_env)."""
    if not (isinstance(node, ast.Attribute) and astcache.dotted(node) == "torch.version.cuda"):
        return None
    parent = file.up(node)
    uses: list[ast.AST] = [node]
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        name = parent.targets[0].id
        scope = file.up(parent)
        while scope is not None and not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
            scope = file.up(scope)
        if scope is None:
            return None  # (a module-level name may be imported elsewhere)
        names = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name]
        for store in (n for n in names if isinstance(n.ctx, ast.Store)):
            bound = file.up(store)
            if bound is not parent and not (isinstance(bound, ast.Assign) and isinstance(bound.value, ast.Constant)
                                            and isinstance(bound.value.value, str)):
                return None
        uses = [n for n in names if isinstance(n.ctx, ast.Load)]
    keys = []
    for use in uses:
        holder = file.up(use)
        if not (isinstance(holder, ast.keyword) and holder.arg and isinstance(file.up(holder), ast.Call)):
            return None
        keys.append(holder.arg)
    if not keys:
        return None
    for key in dict.fromkeys(keys):
        if "{" + key + "}" not in text or not _field_reads_safe(key, file):
            return None
    return (f"{STORED_VERSION}: the value of `{keys[0]}` in the report this file formats (`{{{keys[0]}}}`), "
            "None on an NPU build of torch and shown as such; the file only tests it against a value, "
            "which None passes")


# ----------------------------------------------------------------------------- an operator's name
def _op_name(node: ast.AST, file: _File) -> Optional[str]:
    """`for lib, op, ... in [(torch.ops.aten, "_scaled_dot_product_flash_attention_backward", ...)]
    if hasattr(lib, op)`: the string is an operator's name, read only by `hasattr`/`getattr`."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return None
    row = file.up(node)
    table = file.up(row) if isinstance(row, ast.Tuple) else None
    loop = file.up(table) if isinstance(table, (ast.List, ast.Tuple)) else None
    if not (isinstance(loop, ast.comprehension) and loop.iter is table and isinstance(loop.target, ast.Tuple)
            and len(loop.target.elts) == len(row.elts)):
        return None
    target = loop.target.elts[row.elts.index(node)]
    comprehension = file.up(loop)
    if not isinstance(target, ast.Name) or comprehension is None:
        return None
    uses = [n for n in ast.walk(comprehension) if isinstance(n, ast.Name) and n.id == target.id
            and isinstance(n.ctx, ast.Load)]
    lookups = [n for n in uses if _is_call(file.up(n), "getattr") or _is_call(file.up(n), "hasattr")]
    guarded = any(_is_call(test, "hasattr") and len(test.args) == 2 and isinstance(test.args[1], ast.Name)
                  and test.args[1].id == target.id for test in loop.ifs)
    if not guarded or len(lookups) != len(uses) or any(
            len(file.up(n).args) < 2 or file.up(n).args[1] is not n for n in lookups):
        return None
    return (f"{OP_NAME}: `{node.value}` names an operator looked up with `hasattr` first; "
            "a build without it leaves the entry out")


# ----------------------------------------------------------------------------- an unread import
def _unread_import(node: ast.AST, file: _File) -> Optional[str]:
    """`import bitsandbytes as bnb` inside a function that never reads `bnb`: the import only
    loads the package (a `sys.modules` marker a test checks); nothing of it runs."""
    if not (isinstance(node, ast.Import) and len(node.names) == 1
            and node.names[0].name.split(".")[0] == "bitsandbytes"):
        return None
    alias = node.names[0]
    bound = alias.asname or alias.name.split(".")[0]
    scope = file.up(node)
    while scope is not None and not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        scope = file.up(scope)
    if scope is None:
        return None  # (a module's name may be imported from it elsewhere)
    if any(isinstance(n, ast.Name) and n.id == bound for n in ast.walk(scope) if n is not node):
        return None
    return f"{UNREAD_IMPORT}: `{bound}` is never read in `{scope.name}`; no bitsandbytes op runs here"


# ----------------------------------------------------------------------------- the pass
def _judge(node: ast.AST, file: _File, text: str, relpath: str) -> Optional[str]:
    return (_skipped_case(node, file)
            or _skipped_before(node, file)
            or _case_selector(node, file)
            or (_probed_list(node, file) if _TEST_PATH.search(relpath) else None)
            or _stored_version(node, file, text)
            or _reported_version(node, file, text)
            or _op_name(node, file)
            or _unread_import(node, file))


def _reason_at(file: _File, text: str, relpath: str, line: int, column: int, code: str = "") -> Optional[str]:
    for node in file.at.get((line, column), ()):
        why = _judge(node, file, text, relpath) if code in _CODES else _case_branch(node, file)
        if why:
            return why
    return None


def review(findings: list[Finding], text: str, relpath: str) -> list[Finding]:
    """The findings, with the places about a test-only device probe or a recorded CUDA version
    lowered to info with the reason."""
    candidates = [f for f in findings if not f.fixable and f.cell is None and f.code in _CODES
                  and (f.severity != "info" or ('the label "cuda"' in f.message or f.code == "NPU914")
                       and not is_moot(f))]
    if "parametrize" in text and "skip" in text and _TEST_PATH.search(relpath):
        # (any other open code: only a branch a skipped case alone takes, `_case_branch`)
        candidates += [f for f in findings if not f.fixable and f.cell is None and f.code not in _CODES
                       and f.severity != "info" and not is_moot(f)]
    if not candidates or not _TRIGGER.search(text):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    try:
        file = _File(tree, findings)
        chosen = {id(f) for f in candidates}
        out: list[Finding] = []
        for finding in findings:
            if id(finding) not in chosen:
                out.append(finding)
                continue
            places = [(finding.line, finding.column), *((ln, c) for ln, c, _s in finding.also)]
            reasons: dict[int, Optional[str]] = {}
            for line, column in places:
                why = _reason_at(file, text, relpath, line, column, finding.code)
                # (one line, one verdict: a line with a place that does not fit keeps its finding)
                reasons[line] = why if reasons.get(line, why) == why else None
            if finding.code == "NPU110" and None in reasons.values():
                # (a kept check's finding speaks of the check: it goes whole or stays whole)
                out.append(finding)
                continue
            # (a merged finding's pieces take its message: what the first place said of its
            # statement is not said of the others)
            pieces = lower_pieces(finding, reasons.get, tidy=lambda piece, first=finding.line: piece if (
                piece.line == first) else replace(piece, message=_SAME_STATEMENT.sub("", piece.message)))
            out.extend([finding] if pieces is None else pieces)
        return sorted(out)
    except RecursionError:
        return findings
