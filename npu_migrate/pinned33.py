"""A test that pins the platform's device type to CUDA (issue #16, round-33 audit GA#35: vLLM's
`tests/config/test_multimodal_config.py`). Per file, read by families/context.py with the
platform-aware scopes (families/platform.py), before a rule rewrites anything.

    def test_accelerator_mm_processor_allowed_on_encoder_instance():
        with patch("vllm.platforms.current_platform.device_type", "cuda"):
            _validate_mm_processor_device(device="cuda", ec_role="ec_producer")   # NPU102

The test makes the platform say "cuda" on every host and hands the code under test the device it
then expects: the validator compares the two. Rewriting the argument alone (to the shim's device)
makes it say "npu" on an NPU host while the pinned platform still says "cuda": the validation under
test returns early and `pytest.raises` fails where the original passed (invariant 1). The strings
such a test hands the pinned code are written against the platform it pins, like a mock's value
(round 32 GB#36, mocked29.py): they are left as written, the scope is named (`PINNED`, listed with
the skipped scopes) and the leftover sweep reports each CUDA string in it as NPU991 (information),
so nothing is silent.

A pin is a call that replaces a device attribute (`device_type`, `device`, `device_name`, with or
without a leading underscore, any case: `DEVICE_TYPE`) by a CUDA device ("cuda", "cuda:1",
`torch.device("cuda"...)`):
`patch("a.b.device_type", "cuda")` (`mock.patch`, `mocker.patch`, `new=`),
`patch.object(platform, "device_type", "cuda")`, `monkeypatch.setattr(platform, "device_type", "cuda")`
and `monkeypatch.setattr("a.b.device_type", "cuda")` (a method `setattr`, not the builtin, which
sets a real attribute). Its scope:

- `with <pin>:`: the `with` statement; the statements before it in the same block that bind a name
  (or an attribute of one) the scope reads, transitively (the test's inputs, `cfg = Config(device=
  "cuda")`); the statements after it in the block that read a name the scope binds (its result
  checked against the CUDA string the pinned platform yields); the enclosing function's
  `pytest.mark.parametrize` decorators whose parameter names the scope reads.
- `@<pin>` on a function or class: the whole definition, decorators included.
- `<pin>` as a statement (`monkeypatch.setattr`, `mocker.patch`): it and the rest of its block (a
  monkeypatch holds until the test ends), with the statements before it and the decorators as for
  `with`. In a `pytest.fixture` function: the whole of each function of the file that takes the
  fixture as a parameter, and the whole class or module where the fixture is `autouse=True`.
- a simple statement of the file that calls a function of the file holding a pin
  (`assert _resolve(ec_role="ec_producer", device="cuda") == {"device": "cuda"}`): the statement.

Bounded for a hostile file: the inputs and results of the first 200 pins are followed (50
statements each way), one pin per block holds the rest of it, and a file gets at most 300 scopes
(each rewrite asks every scope); past that, the old rewrites.

Kept (the nearest true cases): the same `device="cuda"` call in a function that pins nothing, or
after the pin's `with` when it reads nothing the scope bound; a `patch("x.y.name", "cuda")` of an
attribute not named as a device (conservative: only the names above, which a platform object
answers with its device; a `backend`, a `name` or a `default` may be anything), and a pin to a
non-CUDA value (`patch(..., "cpu")`: the test pins a platform without an accelerator).
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache

PINNED = "a test pins the platform's device type to CUDA, and hands the pinned code its own CUDA devices"

PAIRED = ("a test's parameter table pairs a CUDA device with the CUDA device string it expects back: "
          "a value the test normalizes, the same on every host")

_DEVICE_ATTRIBUTE = re.compile(r"_?device(?:_type|_name)?", re.IGNORECASE)
_CUDA = re.compile(r"cuda(?::\d+)?")


def may_pin(text: str) -> bool:
    """The cheap test first: a pin, or a parameter table with an expected column, needs these words."""
    return "cuda" in text and ((("patch" in text or "setattr" in text) and ("device" in text or "DEVICE" in text))
                               or ("parametrize" in text and "expected" in text))


def _string(node: Optional[ast.AST]) -> Optional[str]:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _cuda_value(node: Optional[ast.AST]) -> bool:
    value = _string(node)
    if value is not None:
        return _CUDA.fullmatch(value) is not None
    if isinstance(node, ast.Call) and astcache.dotted(node.func) in ("torch.device", "device") and node.args:
        return _cuda_value(node.args[0])
    return False


def _argument(call: ast.Call, index: int, keyword: str) -> Optional[ast.AST]:
    if len(call.args) > index and not isinstance(call.args[index], ast.Starred):
        return call.args[index]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def is_pin(node: ast.AST) -> bool:
    """`node` replaces a device attribute by a CUDA device (see the module docstring)."""
    parts = _pin_parts(node)
    return parts is not None and _cuda_value(parts[1])


def _pin_parts(node: ast.AST) -> Optional[tuple[str, Optional[ast.AST]]]:
    """(the device attribute, the value) of a call that replaces a device attribute, or None."""
    if not isinstance(node, ast.Call):
        return None
    name = astcache.dotted(node.func) or ""
    last = name.rsplit(".", 1)[-1]
    if name.endswith("patch.object") or (last == "setattr" and isinstance(node.func, ast.Attribute)
                                         and _string(_argument(node, 0, "target")) is None):
        attribute, value = _string(_argument(node, 1, "attribute" if last == "object" else "name")), \
            _argument(node, 2, "new" if last == "object" else "value")
    elif last == "patch" or (last == "setattr" and isinstance(node.func, ast.Attribute)):
        target = _string(_argument(node, 0, "target")) or ""
        attribute = target.rsplit(".", 1)[-1] if "." in target else None
        value = _argument(node, 1, "new" if last == "patch" else "value")
    else:
        return None
    if attribute is None or _DEVICE_ATTRIBUTE.fullmatch(attribute) is None:
        return None
    return attribute, value


def is_parametrized_pin(node: ast.AST, owner: ast.AST) -> bool:
    """Round-33 audit HC#20: a pin whose value is a parameter of the test (`patch.object(
    current_platform, "device_type", device_type)`) that the test's `pytest.mark.parametrize`
    table sets to a CUDA device in at least one row: for those rows the test pins the platform to
    CUDA exactly as a literal pin does (the table's other values, "cpu", "xpu", pin platforms
    without one). A parameter no table sets to CUDA is no pin."""
    parts = _pin_parts(node)
    if parts is None or not isinstance(parts[1], ast.Name) or not isinstance(owner, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    name = parts[1].id
    if name not in {a.arg for a in (*owner.args.posonlyargs, *owner.args.args, *owner.args.kwonlyargs)}:
        return False
    for decorator in _parametrized(owner, {name}):
        names = _argnames(decorator)
        if len(decorator.args) < 2 or not isinstance(decorator.args[1], (ast.List, ast.Tuple)) or name not in names:
            continue
        column = names.index(name)
        for row in decorator.args[1].elts:
            values = row.args if isinstance(row, ast.Call) and (astcache.dotted(row.func) or "").endswith("param") \
                else row.elts if isinstance(row, (ast.Tuple, ast.List)) and len(names) > 1 else [row]
            if len(values) == len(names) and _cuda_value(values[column]):
                return True
    return False


_READS: dict = {}  # (id of a statement -> the names it reads; within one pinned_regions call)
_BINDS: dict = {}


def _reads(nodes) -> set[str]:
    out: set[str] = set()
    for node in nodes:
        found = _READS.get(id(node))
        if found is None:
            found = _READS[id(node)] = frozenset(
                n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
        out |= found
    return out


def _binds(statement: ast.stmt) -> set[str]:
    """Names the statement binds, or whose attributes or items it sets."""
    found = _BINDS.get(id(statement))
    if found is None:
        found = _BINDS[id(statement)] = frozenset(_bound(statement))
    return found


def _bound(statement: ast.stmt) -> set[str]:
    out: set[str] = set()
    targets: list = []
    if isinstance(statement, ast.Assign):
        targets = list(statement.targets)
    elif isinstance(statement, (ast.AugAssign, ast.AnnAssign)):
        targets = [statement.target]
    elif isinstance(statement, (ast.With, ast.AsyncWith)):
        targets = [item.optional_vars for item in statement.items if item.optional_vars is not None]
        out.update(n for s in statement.body for n in _binds(s))
    elif isinstance(statement, (ast.For, ast.AsyncFor)):
        targets = [statement.target]
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                out.add(node.id)
    return out


def _blocks(tree: ast.Module):
    """(block, owner) for each statement list of the file; owner: the function, class or module."""
    stack: list = [(tree, tree)]
    while stack:
        node, owner = stack.pop()
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, field, None)
            if not isinstance(block, list) or not block:
                continue
            if field != "handlers":
                yield block, owner
            for child in block:
                inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else owner
                stack.append((child, inner))
        if isinstance(node, ast.Match):
            for case in node.cases:
                yield case.body, owner
                stack.extend((child, owner) for child in case.body)


def _parametrized(function: ast.AST, names: set[str]) -> list:
    """The `pytest.mark.parametrize` decorators of `function` whose parameter names are in `names`."""
    out = []
    for decorator in getattr(function, "decorator_list", ()):
        if not (isinstance(decorator, ast.Call) and (astcache.dotted(decorator.func) or "").endswith("parametrize")):
            continue
        first = decorator.args[0] if decorator.args else None
        params: set[str] = set()
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            params = {p.strip() for p in first.value.split(",")}
        elif isinstance(first, (ast.Tuple, ast.List)):
            params = {e.value for e in first.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        if params & names:
            out.append(decorator)
    return out


_REACH = 50  # (statements read before and after a pin: a hostile file's thousands of pins stay linear)
_REGIONS = 300  # (scopes a file gets: each rewrite asks every scope; past them, the old rewrites)
_FLOWS = 200  # (pins whose inputs and results are followed; past them, the pin's own statement only)


def _flow(block: list, first: int, last: int) -> list:
    """The statements of block[first:last + 1] and those the module docstring adds around them."""
    kept = block[first:last + 1]
    reads, binds = _reads(kept), {n for s in kept for n in _binds(s)}
    before = []
    for statement in reversed(block[max(0, first - _REACH):first]):
        if _binds(statement) & reads:
            before.append(statement)
            reads |= _reads([statement])
    after = []
    for statement in block[last + 1:last + 1 + _REACH]:
        if _reads([statement]) & binds:
            after.append(statement)
            binds |= _binds(statement)
    return [*reversed(before), *kept, *after]


def _is_fixture(function: ast.AST) -> tuple[bool, bool]:
    """(a pytest fixture, autouse)."""
    for decorator in getattr(function, "decorator_list", ()):
        call = decorator if isinstance(decorator, ast.Call) else None
        name = astcache.dotted(call.func if call is not None else decorator) or ""
        if name.endswith("fixture"):
            autouse = call is not None and any(k.arg == "autouse" and isinstance(k.value, ast.Constant)
                                               and k.value.value is True for k in call.keywords)
            return True, autouse
    return False, False


def _definition_start(node: ast.AST) -> ast.AST:
    decorators = getattr(node, "decorator_list", None)
    return decorators[0] if decorators else node


def pinned_regions(tree: Optional[ast.Module]) -> list[tuple[ast.AST, ast.AST, str]]:
    """(first node, last node, PINNED) of each region of the file the module docstring names."""
    if tree is None:
        return []
    try:
        return _regions(tree)
    finally:
        _READS.clear()
        _BINDS.clear()


def _regions(tree: ast.Module) -> list[tuple[ast.AST, ast.AST, str]]:
    regions: list[tuple[ast.AST, ast.AST]] = []
    pinning: set[str] = set()  # the file's functions that hold a pin
    fixtures: dict[str, tuple[ast.AST, bool]] = {}  # pinning fixture -> (its owner, autouse)
    owners: dict[int, ast.AST] = {}
    flows = 0
    for block, owner in _blocks(tree):
        held = False
        for index, statement in enumerate(block):
            owners[id(statement)] = owner
            pinned_here = None
            if isinstance(statement, (ast.With, ast.AsyncWith)) and any(
                    is_pin(i.context_expr) or is_parametrized_pin(i.context_expr, owner) for i in statement.items):
                flows += 1
                pinned_here = _flow(block, index, index) if flows <= _FLOWS else [statement]
            elif isinstance(statement, ast.Expr) and is_pin(statement.value) and not held:
                held = True  # (the rest of the block is pinned: a later pin in it adds nothing)
                flows += 1
                pinned_here = _flow(block, index, len(block) - 1) if flows <= _FLOWS else block[index:]
            elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                    and any(is_pin(d) for d in statement.decorator_list):
                regions.append((_definition_start(statement), statement))
                if not isinstance(statement, ast.ClassDef):
                    pinning.add(statement.name)
                continue
            if pinned_here is None:
                continue
            regions.extend((s, s) for s in pinned_here)
            if isinstance(owner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                pinning.add(owner.name)
                regions.extend((d, d) for d in _parametrized(owner, _reads(pinned_here)))
                fixture, autouse = _is_fixture(owner)
                if fixture:
                    fixtures[owner.name] = (owners.get(id(owner), tree), autouse)
    regions_paired = _paired_rows(tree)
    if not regions:
        return [(first, last, PAIRED) for first, last in regions_paired][:_REGIONS]
    for node in astcache.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}
            if params & fixtures.keys():
                regions.append((_definition_start(node), node))
    for owner, autouse in fixtures.values():
        if autouse and getattr(owner, "body", None):
            regions.append((_definition_start(owner) if owner is not tree else owner.body[0],
                            owner if owner is not tree else owner.body[-1]))
    if pinning:
        for block, _owner in _blocks(tree):
            for statement in block:
                if isinstance(statement, (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Assert, ast.Return)) \
                        and any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in pinning
                                for n in ast.walk(statement)):
                    regions.append((statement, statement))
    seen: set = set()
    out = []
    for first, last in regions:
        key = (first.lineno, first.col_offset, last.end_lineno, last.end_col_offset)
        if key not in seen:
            seen.add(key)
            out.append((first, last, PINNED))
    out += [(first, last, PAIRED) for first, last in regions_paired
            if (first.lineno, first.col_offset, last.end_lineno, last.end_col_offset) not in seen]
    return out[:_REGIONS]


def _argnames(decorator: ast.Call) -> list[str]:
    first = decorator.args[0] if decorator.args else None
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return [p.strip() for p in first.value.split(",")]
    if isinstance(first, (ast.Tuple, ast.List)):
        return [e.value if isinstance(e, ast.Constant) and isinstance(e.value, str) else "" for e in first.elts]
    return []


def _paired_rows(tree: ast.Module) -> list[tuple[ast.AST, ast.AST]]:
    """The rows of a `pytest.mark.parametrize` table with an `expected...` column that pair a CUDA
    device ("cuda:1", `torch.device("cuda", 1)`) with the CUDA device string they expect back (see
    the module docstring)."""
    out = []
    for decorator in astcache.walk(tree):
        if not (isinstance(decorator, ast.Call) and (astcache.dotted(decorator.func) or "").endswith("parametrize")
                and len(decorator.args) > 1 and isinstance(decorator.args[1], (ast.List, ast.Tuple))):
            continue
        names = _argnames(decorator)
        expected = [i for i, name in enumerate(names) if name.startswith("expected")]
        if not expected or len(names) < 2:
            continue
        for row in decorator.args[1].elts:
            values = row.args if isinstance(row, ast.Call) and (astcache.dotted(row.func) or "").endswith("param") \
                else row.elts if isinstance(row, (ast.Tuple, ast.List)) else []
            if len(values) != len(names):
                continue
            if any(_CUDA.fullmatch(_string(values[i]) or "") for i in expected) and any(
                    _cuda_value(value) for i, value in enumerate(values) if i not in expected):
                out.append((row, row))
    return out
