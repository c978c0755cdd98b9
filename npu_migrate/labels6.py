"""Labels, not devices: more shapes the leftover sweep (NPU990) met on real projects that only name
CUDA (issue #16, round-10 audits).

- "cuda" among implementation names (`RESHAPE_IMPLEMENTATIONS = ["cuda", "triton"]`, `assert
  implementation in ["cuda", "triton"]`): a list whose other strings are all implementation words
  (sweep.toml [labels6] `implementation_words`: Triton, torch, a reference, ...) names kernels, not
  devices (a device list has "cpu" or "npu" beside "cuda"). A comparison with a variable named for
  an implementation (`implementation == "cuda"`) is a label too (labelflow.py, `label_variable`);
- a test parameter that only labels a direction and is mapped to the real device
  (`COPYING_DIRECTION = [("cuda", "cpu"), ...]` given to `parametrize("direction", ...)` where the
  test only reads `device if direction[0] == "cuda" else "cpu"` and `"cpu" in direction`): the
  device the test uses is the `device` variable, reported or rewritten where it is set;
- "cuda" of a pytest fixture's `params` (`@pytest.fixture(params=["cpu", "cuda"])`) whose body
  skips that parameter first where CUDA is missing (`if device == "cuda" and not
  torch.cuda.is_available(): pytest.skip(...)`, the check left as written): that case does not run
  on an NPU host, which runs the others; information with that reason (a named skipped scope,
  moot.py). A fixture with no such skip, or whose availability check the run rewrites to the shim's,
  keeps its warning: there "cuda" becomes the test's device on an NPU host.

The sweep calls `mark` for each node it enters (Sweep.on_visit, after labels5.mark); what is found
goes into the sweep's gates (not reported) or its `label_info` (information, with the reason).
"""

from __future__ import annotations

import ast
import functools
import re
from typing import Any, Optional

from . import astcache, catalogue

Sweep = Any  # sweep.Sweep

FIXTURE_SKIP = ("in a test that does not run on an NPU host: the fixture `{name}` skips its \"cuda\" parameter "
                "where `{check}` is False (line {line}), a check left as written")


@functools.lru_cache(maxsize=None)
def _implementation_words() -> frozenset:
    table = catalogue.read_table("sweep.toml").get("labels6", {})
    return frozenset(table.get("implementation_words", ()))


def mark(sweep: Sweep, node) -> None:
    # (libcst's SimpleString, named: runplan imports this module for review_unread_settings, and a
    # warm `check` never loads libcst)
    if type(node).__name__ != "SimpleString":
        return
    found = _found(sweep)
    if not found:
        return
    reason = found.get(tuple(sweep.m.position(node)), False)
    if reason is None:
        sweep.gates.add(id(node))
    elif reason:
        sweep.label_info.setdefault(id(node), reason)


def _found(sweep: Sweep) -> dict:
    """{(line, column): None (a label: not reported) or an information reason} for the "cuda"
    strings of the file that this module reads as labels, once per file."""
    found = getattr(sweep, "_labels6_found", None)
    if found is not None:
        return found
    found = {}
    tree = sweep.m._ast()
    if tree is not None and "cuda" in sweep.m.file_text():
        parents = astcache.parents(tree)
        _implementation_lists(tree, found)
        _direction_labels(tree, parents, found)
        _skipping_fixtures(sweep, tree, found)
        _cuda_block_ops(sweep, tree, found)
    sweep._labels6_found = found
    return found


def _cuda(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == "cuda"


def _at(node: ast.AST) -> tuple[int, int]:
    return node.lineno, node.col_offset + 1


# ----------------------------------------------------------------------------- implementation names
def _implementation_lists(tree: ast.AST, found: dict) -> None:
    words = _implementation_words()
    for node in astcache.walk(tree):
        if not isinstance(node, (ast.List, ast.Tuple, ast.Set)) or not node.elts:
            continue
        if not all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            continue
        others = {e.value for e in node.elts} - {"cuda"}
        if others and len(others) < len(node.elts) and all(o.lower() in words for o in others):
            for element in node.elts:
                if _cuda(element):
                    found.setdefault(_at(element), None)


# ----------------------------------------------------------------------------- direction labels
def _label_read(name: str, use: ast.Name, parents: dict) -> Optional[ast.Constant]:
    """How a use of the parameter `name` reads it: `name[i] == "cuda"` (the "cuda" compared), or
    `"cpu" in name` (the string tested); None for any other use (passed on, used as a device)."""
    parent = parents.get(id(use))
    if isinstance(parent, ast.Subscript) and parent.value is use:
        compare = parents.get(id(parent))
        if isinstance(compare, ast.Compare) and len(compare.ops) == 1 and isinstance(compare.ops[0], (ast.Eq, ast.NotEq)):
            other = compare.comparators[0] if compare.left is parent else compare.left
            if isinstance(other, ast.Constant) and isinstance(other.value, str):
                return other
    if isinstance(parent, ast.Compare) and len(parent.ops) == 1 and isinstance(parent.ops[0], (ast.In, ast.NotIn)) \
            and parent.comparators[0] is use and isinstance(parent.left, ast.Constant) \
            and isinstance(parent.left.value, str):
        return parent.left
    return None


def _direction_labels(tree: ast.Module, parents: dict, found: dict) -> None:
    """A module constant of string tuples given to `parametrize("name", CONSTANT)` whose tests read
    `name` only by comparing its items with strings: its "cuda" strings, and those compared, label
    the direction; the device each side gets is another variable."""
    constants = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and isinstance(stmt.value, (ast.List, ast.Tuple)) and stmt.value.elts \
                and all(isinstance(e, ast.Tuple) and e.elts and all(isinstance(s, ast.Constant)
                                                                      and isinstance(s.value, str) for s in e.elts)
                        for e in stmt.value.elts):
            constants[stmt.targets[0].id] = stmt.value
    if not constants:
        return
    for function in astcache.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for decorator in function.decorator_list:
            if not isinstance(decorator, ast.Call) or len(decorator.args) < 2 \
                    or not (astcache.dotted(decorator.func) or "").endswith("parametrize"):
                continue
            names, values = decorator.args[0], decorator.args[1]
            if not (isinstance(names, ast.Constant) and isinstance(names.value, str) and names.value.isidentifier()
                    and isinstance(values, ast.Name) and values.id in constants):
                continue
            name = names.value
            if name not in {a.arg for a in function.args.args}:
                continue
            uses = [n for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == name]
            reads = [_label_read(name, use, parents) for use in uses]
            if not uses or any(r is None for r in reads):
                continue
            for element in constants[values.id].elts:
                for string in element.elts:
                    if _cuda(string):
                        found.setdefault(_at(string), None)
            for read in reads:
                if _cuda(read):
                    found.setdefault(_at(read), None)


# ----------------------------------------------------------------------------- fixtures that skip "cuda"
def _availability(node: ast.AST) -> Optional[ast.Call]:
    """`not torch.cuda.is_available()` (or `not <...>.is_available()`): the call, or None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and isinstance(node.operand, ast.Call):
        call = node.operand
        if (astcache.dotted(call.func) or "").endswith("cuda.is_available") and not call.args:
            return call
    return None


def _skip_test(test: ast.AST, names: set) -> Optional[ast.Call]:
    """`X == "cuda" and not torch.cuda.is_available()` with X one of `names`: the availability call."""
    if not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and len(test.values) == 2):
        return None
    compare, check = test.values
    if isinstance(compare, ast.Compare) and len(compare.ops) == 1 and isinstance(compare.ops[0], ast.Eq) \
            and isinstance(compare.left, ast.Name) and compare.left.id in names and _cuda(compare.comparators[0]):
        return _availability(check)
    return None


def _skipping_fixtures(sweep: Sweep, tree: ast.AST, found: dict) -> None:
    rewritten = {f.line for f in sweep.m.findings if f.fixable}
    for function in astcache.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for decorator in function.decorator_list:
            if not isinstance(decorator, ast.Call) or not (astcache.dotted(decorator.func) or "").endswith("fixture"):
                continue
            params = next((k.value for k in decorator.keywords if k.arg == "params"), None)
            strings = [e for e in getattr(params, "elts", ()) if _cuda(e)]
            if not strings:
                continue
            names = {"request.param"}
            for stmt in function.body[:6]:
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                        and (astcache.dotted(stmt.value) or "") == "request.param":
                    names.add(stmt.targets[0].id)
                if not isinstance(stmt, ast.If):
                    continue
                check = _skip_test(stmt.test, names)
                skips = any(isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
                            and (astcache.dotted(s.value.func) or "").endswith("skip") for s in stmt.body)
                if check is None or not skips or check.lineno in rewritten:
                    continue
                reason = FIXTURE_SKIP.format(name=function.name, check=ast.unparse(check), line=stmt.lineno)
                for string in strings:
                    found.setdefault(_at(string), reason)
                break


# ----------------------------------------------------------------------------- a custom op in a CUDA-only block
_REGISTRATIONS = frozenset({"torch.library.custom_op", "torch.library.register_kernel", "torch.library.triton_op",
                            "custom_op", "register_kernel", "triton_op"})
CUDA_BLOCK = ("in a branch an NPU host does not take: `{test}` (line {line}), whose `{name}` is set only where "
              "{why}; the custom op's dispatch key names the CUDA kernels it wraps")


def _cuda_packages() -> frozenset:
    from .fp8tests import compiled_packages as _compiled_packages
    return _compiled_packages()[0]


def _cuda_only_condition(test: ast.AST, cuda_names: dict) -> Optional[str]:
    """Why `test` is False on an NPU host ('' for no), for the shapes an NPU host provably fails:
    `importlib.util.find_spec("flash_attn")` of a CUDA-only package, or a name bound at module level
    to a `torch.version.hip is None and torch.backends.cuda...` availability test left as written."""
    if isinstance(test, ast.Call) and (astcache.dotted(test.func) or "").endswith("find_spec") and test.args \
            and isinstance(test.args[0], ast.Constant) and isinstance(test.args[0].value, str) \
            and test.args[0].value.split(".")[0] in _cuda_packages():
        return f"`{test.args[0].value}` (a CUDA-only package) is installed"
    if isinstance(test, ast.Name) and test.id in cuda_names:
        return cuda_names[test.id]
    return None


def _cuda_block_ops(sweep: Sweep, tree: ast.Module, found: dict) -> None:
    """`device_types="cuda"` of custom ops registered in a module-level `if NAME != "0.0.0":` whose
    NAME keeps that default unless a CUDA-only package is found or a CUDA backend probe holds."""
    text = sweep.m.file_text()
    if "custom_op" not in text and "register_kernel" not in text:
        return
    rewritten = {f.line for f in sweep.m.findings if f.fixable}
    cuda_names: dict = {}
    defaults: dict = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            value = ast.unparse(stmt.value)
            if isinstance(stmt.value, ast.Constant):
                defaults.setdefault(stmt.targets[0].id, stmt.value.value)
            elif "torch.backends.cuda." in value and "available" in value and \
                    not any(line in rewritten for line in range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1)):
                cuda_names[stmt.targets[0].id] = f"`{stmt.targets[0].id}` (`{' '.join(value.split())}`) holds"
    for block in tree.body:
        if not isinstance(block, ast.If):
            continue
        test = block.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.NotEq, ast.IsNot)) \
                and isinstance(test.left, ast.Name) and isinstance(test.comparators[0], ast.Constant):
            name, default = test.left.id, test.comparators[0].value
        else:
            continue
        if name not in defaults or defaults[name] != default:
            continue
        whys = _setters(tree, name, cuda_names, block)
        if not whys:
            continue
        reason = CUDA_BLOCK.format(test=f"if {ast.unparse(test)}", line=block.lineno, name=name,
                                   why=" or ".join(dict.fromkeys(whys)))
        for node in ast.walk(block):
            if isinstance(node, ast.Call) and (astcache.dotted(node.func) or "") in _REGISTRATIONS:
                for keyword in node.keywords:
                    if keyword.arg == "device_types":
                        for string in [keyword.value, *getattr(keyword.value, "elts", ())]:
                            if _cuda(string):
                                found.setdefault(_at(string), reason)


def _setters(tree: ast.Module, name: str, cuda_names: dict, block: ast.If) -> list:
    """The reasons of every module-level branch that assigns `name` other than its default (each
    must be CUDA-only: its `if` / `elif` test), or [] when one is not (or none assigns it)."""
    whys: list = []

    def visit(body: list, why: Optional[str]) -> bool:
        for stmt in body:
            if stmt is block:
                continue
            if isinstance(stmt, ast.If):
                inner = _cuda_only_condition(stmt.test, cuda_names)
                if not visit(stmt.body, inner or why):
                    return False
                if not visit(stmt.orelse, why):
                    return False
                continue
            targets = [t for n in ast.walk(stmt) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                       for t in (n.targets if isinstance(n, ast.Assign) else [n.target])]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets) or \
                    (isinstance(stmt, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == name
                                                                           for a in stmt.names)):
                if why is None:
                    if isinstance(stmt, ast.Assign) and stmt in tree.body and isinstance(stmt.value, ast.Constant):
                        continue  # the default
                    return False
                whys.append(why)
        return True

    ok = visit(tree.body, None)
    return whys if ok else []


# ----------------------------------------------------------------------------- a setting read nowhere
UNREAD_SETTING = ("the default of a setting nothing reads: `{name}` ({why}) is named by no other file of the "
                  "project and only declared in this one")


def _setting_calls(tree: ast.AST) -> dict[tuple[int, int], ast.Call]:
    """{(line, column) of the string: the call} of the calls `reader("NAME", "cuda")` of the file,
    by the place of their second argument (one walk: a file is asked for each of its findings)."""
    found: dict[tuple[int, int], ast.Call] = {}
    for node in astcache.walk(tree):
        if isinstance(node, ast.Call) and len(node.args) >= 2 and _cuda(node.args[1]) \
                and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and node.args[0].value.isupper() \
                and node.args[0].value.isidentifier() and "_" in node.args[0].value:
            found.setdefault(_at(node.args[1]), node)
    return found


def _only_declared(tree: ast.AST, name: str) -> bool:
    """Whether `name` appears in the file only as strings (a table key, the reader's argument) and
    as annotated declarations (`NAME: str = "cuda"` under TYPE_CHECKING): nothing reads it here."""
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Store):
            return False
        if isinstance(node, ast.Attribute) and node.attr == name:
            return False
    return True


_READER_CALL = re.compile(rb"\(\s*[\"'][\w.-]+[\"']\s*,\s*[\"']cuda[\"']")


def review_unread_settings(results: list, paths: dict) -> list:
    """NPU990 on the "cuda" default of a setting's reader (`_lazy_str("X_TARGET_DEVICE", "cuda")`
    in an environment table) that no other file of the project names: information with a
    NO_WORK reason (a named scope, moot.py). A setting read elsewhere keeps its warning."""
    import dataclasses

    from .modpaths import result_bytes as _bytes

    def candidate(f) -> bool:
        return f.code == "NPU990" and not f.fixable and f.severity == "warning" and f.source == '"cuda"' \
            and f.cell is None and all(source == '"cuda"' for _line, _column, source in f.also)

    targets = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(candidate(f) for f in r.findings)]
    if not targets:
        return results
    out = list(results)
    texts: Optional[dict] = None

    def unread(name: str, relpath: str) -> bool:
        nonlocal texts
        if texts is None:
            texts = {}
            for result in results:
                texts[result.relpath] = (_bytes(result, paths) if len(texts) < 20000 else None) or b""
        needle = name.encode()
        return not any(needle in raw for rel, raw in texts.items() if rel != relpath)

    for i in targets:
        data = _bytes(results[i], paths)
        # (a cheap test before the parse: a reader call `f("NAME", "cuda")` in the text)
        tree = astcache.parse(data) if data and _READER_CALL.search(data) else None
        if tree is None:
            continue
        findings, at = [], _setting_calls(tree)
        for finding in results[i].findings:
            places = [(finding.line, finding.column), *((line, column) for line, column, _s in finding.also)]
            calls = [at.get(place) for place in places] if candidate(finding) else [None]
            names = [call.args[0].value for call in calls if call is not None]
            if len(names) == len(places) and all(_only_declared(tree, n) and unread(n, results[i].relpath)
                                                 for n in names):
                why = ", ".join(f"`{ast.unparse(c.func)}(\"{c.args[0].value}\", \"cuda\")`" for c in calls)
                finding = dataclasses.replace(finding, severity="info", message=(
                    f"{finding.message} ({UNREAD_SETTING.format(name=', '.join(names), why=why)})"))
            findings.append(finding)
        out[i] = dataclasses.replace(results[i], findings=findings)
    return out
