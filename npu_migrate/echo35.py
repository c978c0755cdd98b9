"""A test that checks the CUDA string it hands the code under test comes back unchanged (issue
#16, round-34 audit ID#12: vLLM's `tests/multimodal/media/test_video.py`). Per file, read by
families/context.py with the platform-aware scopes (families/platform.py), beside pinned33.py,
before a rule rewrites anything.

    def test_same_backend_keeps_codec_options():
        result = VideoMediaIO.merge_kwargs(
            default_kwargs={"backend": "torchcodec", "device": "cuda"},   # NPU102
            runtime_kwargs={"backend": "torchcodec", "num_frames": 8},
        )
        assert result["device"] == "cuda"                                 # NPU990: not a device

The test hands the code a CUDA device and checks it comes back as the same string. The input is in
a device position and was rewritten to the shim's device; the assertion compares an item of a
dict, which is not provably a device, and stayed "cuda". On an NPU host the merged value is "npu"
and the migrated test fails where the original passed (invariant 1). Such a test checks the code
passes a string through: its inputs are left as written, with the whole test (decorators, so a
`parametrize` table feeding it, included) a named scope (`ECHO`, listed with the skipped scopes),
and the leftover sweep reports each CUDA string in it as NPU991 (information): nothing is silent.

An echo is, in a function whose name starts with `test`, an assertion that compares with a CUDA
string ("cuda", "cuda:1"): `assert <expr> == "cuda"`, `assert "cuda" == <expr>`,
`self.assertEqual(<expr>, "cuda")` (`assertEqual`, `assertEquals`, either order), where

- `<expr>` is one the tool cannot rewrite: an item `<name>[<key>]` or `<name>.get(<key>)` (a
  chain of them, attributes between); for `assertEqual`, which no rule rewrites, also a name or an
  attribute of one; never through an attribute `.device`, `.type`, `.device_type` (`out[0].device.
  type`: a tensor's device, which the test's CUDA input puts on the GPU: as written it fails on an
  NPU host too, and its assertion stays an open finding for the user to change);
- and its root `<name>`, at its last binding before the assertion in the test, holds the test's own
  CUDA string: bound from a call that received a CUDA string (written in the call, or through a
  name the test bound to a value holding one, or a parameter a `parametrize` table of the test
  sets to a value holding one), or bound to a value holding a CUDA string itself (the same dict).

Kept (the nearest true cases, rewritten or reported as before): a comparison the tool rewrites
(`assert t.device.type == "cuda"`: `.type`, a name or attribute named like a device, `str(...)` of
one, through `assert ==`), a test that asserts nothing about the string, a library (non-test)
function, and a test whose "cuda" assertion reads a value bound from a call that received no CUDA
string.

Bounded for a hostile file: the first 2,000 statements of a test are read, and a file gets at most
300 scopes.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache

ECHO = ("a test that checks the CUDA string it passes in comes back unchanged: "
        "its inputs are left as written")

_CUDA = re.compile(r"cuda(?::\d+)?")
_TENSOR_DEVICE = re.compile(r"type|_?device(?:_type)?|is_cuda", re.IGNORECASE)
_ASSERT_EQUAL = ("assertEqual", "assertEquals")
_STATEMENTS = 2000  # (statements of one test read: a hostile file's test stays linear)
_REGIONS = 300


def may_echo(text: str) -> bool:
    """The cheap test first: an echo needs these words."""
    return "cuda" in text and "assert" in text and "test" in text


def _cuda_string(node: Optional[ast.AST]) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and _CUDA.fullmatch(node.value) is not None


def _holds_cuda(node: ast.AST) -> bool:
    return any(_cuda_string(n) for n in ast.walk(node))


def _statements(function: ast.AST) -> list[ast.stmt]:
    """The statements of `function` in source order (nested definitions left out)."""
    out: list[ast.stmt] = []
    stack = [iter(function.body)]
    while stack and len(out) < _STATEMENTS:
        statement = next(stack[-1], None)
        if statement is None:
            stack.pop()
            continue
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        out.append(statement)
        inner = [s for field in ("body", "orelse", "finalbody") for s in getattr(statement, field, ()) or ()]
        inner += [s for handler in getattr(statement, "handlers", ()) or () for s in handler.body]
        if inner:
            stack.append(iter(inner))
    return out


def _root(node: ast.AST, assert_equal: bool) -> Optional[str]:
    """The name an asserted expression reads (see the module docstring), or None."""
    if not assert_equal and not (isinstance(node, ast.Subscript) or isinstance(node, ast.Call)):
        return None  # (`out[0].device.type == "cuda"`: an attribute named like a device, rewritten)
    item = False
    while True:
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Slice):
            item, node = True, node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and not node.keywords:
            item, node = True, node.func.value
        elif isinstance(node, ast.Attribute):
            if _TENSOR_DEVICE.fullmatch(node.attr):
                return None  # (`out[0].device.type`: a tensor's device, not a string passed through)
            node = node.value
        elif isinstance(node, ast.Name):
            return node.id if item or assert_equal else None
        else:
            return None


def _echoed(statement: ast.stmt) -> Optional[ast.AST]:
    """The expression an assertion compares with a CUDA string, with its kind, or None."""
    if isinstance(statement, ast.Assert):
        test = statement.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            left, right = test.left, test.comparators[0]
            if _cuda_string(right):
                return _root(left, False)
            if _cuda_string(left):
                return _root(right, False)
        return None
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        call = statement.value
        if isinstance(call.func, ast.Attribute) and call.func.attr in _ASSERT_EQUAL and len(call.args) >= 2:
            first, second = call.args[0], call.args[1]
            if _cuda_string(second):
                return _root(first, True)
            if _cuda_string(first):
                return _root(second, True)
    return None


def _targets(statement: ast.stmt) -> set[str]:
    targets: list = []
    if isinstance(statement, ast.Assign):
        targets = list(statement.targets)
    elif isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
        targets = [statement.target]
    elif isinstance(statement, (ast.For, ast.AsyncFor)):
        targets = [statement.target]
    elif isinstance(statement, (ast.With, ast.AsyncWith)):
        targets = [i.optional_vars for i in statement.items if i.optional_vars is not None]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _table_names(function: ast.AST) -> set[str]:
    """The parameters a `pytest.mark.parametrize` table of `function` sets to a value holding a
    CUDA string (conservative: a table holding one anywhere names all its parameters)."""
    out: set[str] = set()
    for decorator in getattr(function, "decorator_list", ()):
        if isinstance(decorator, ast.Call) and (astcache.dotted(decorator.func) or "").endswith("parametrize") \
                and len(decorator.args) > 1 and _holds_cuda(decorator.args[1]):
            first = decorator.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                out |= {p.strip() for p in first.value.split(",")}
            elif isinstance(first, (ast.Tuple, ast.List)):
                out |= {e.value for e in first.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return out


def _value(statement: ast.stmt) -> Optional[ast.AST]:
    return statement.value if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None


def _called_with(value: ast.AST, carrying: set[str]) -> bool:
    """`value` calls something and reads a name holding the test's CUDA string (one walk: a
    hostile file's nested calls stay linear)."""
    nodes = list(ast.walk(value))
    return any(isinstance(n, ast.Call) for n in nodes) and any(
        isinstance(n, ast.Name) and n.id in carrying for n in nodes)


def _is_echo(function: ast.AST) -> bool:
    carrying = _table_names(function)  # names holding the test's own CUDA string, so far
    last: dict[str, ast.stmt] = {}  # name -> its last binding so far
    for statement in _statements(function):
        root = _echoed(statement)
        if root is not None:
            binding = last.get(root)
            value = _value(binding) if binding is not None else None
            if value is not None and (_holds_cuda(value) or _called_with(value, carrying)):
                return True
        bound = _targets(statement)
        if bound:
            value = _value(statement)
            carries = value is not None and (_holds_cuda(value) or any(
                isinstance(n, ast.Name) and n.id in carrying for n in ast.walk(value)))
            for name in bound:
                last[name] = statement
                if carries:
                    carrying.add(name)
                else:
                    carrying.discard(name)
    return False


def echo_regions(tree: Optional[ast.Module]) -> list[tuple[ast.AST, ast.AST, str]]:
    """(first node, last node, ECHO) of each test of the file the module docstring names."""
    if tree is None:
        return []
    out = []
    for node in astcache.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test") \
                and _is_echo(node):
            out.append((node.decorator_list[0] if node.decorator_list else node, node, ECHO))
            if len(out) >= _REGIONS:
                break
    return out
