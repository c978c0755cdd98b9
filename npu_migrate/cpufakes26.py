"""CPU fakes of torch in tests: the two halves of one device kept alike (issue #16, round 26 BU#9;
invariant 1, faithful on CUDA/CPU hosts).

A test that emulates CUDA on the CPU patches a torch allocator with a local function that moves
the allocation to the CPU and remembers which calls asked for the CUDA device:

    def allocate_on_cpu(*args, **kwargs):
        is_target = kwargs.get("device") == torch.device("cuda")
        kwargs.update(device="cpu")
        return allocate(*args, **kwargs)

    with patch.object(torch, "empty", side_effect=allocate_on_cpu):
        client.load_tensors(specs, "cuda")

The device family rewrote the comparison (`torch.device("cuda")` is provably a device) but not the
"cuda" handed to the code under test (an argument of the project's own function, not provably a
device), so the migrated test compared "npu" with what was still "cuda" and failed where the
original, which needs no GPU at all, ran on any host. Both halves are one device label the fake
reads: they are left as written, together. The test runs unchanged on an NPU host (the fake puts
every allocation on the CPU), so each of the two strings becomes information with that reason
(`runs as written on an NPU host`, moot.AS_WRITTEN), never a silent omission.

The shape, decided on the exact constructs:
- the fake is a function defined in the file and installed over a torch name by
  `patch.object(torch, "name", side_effect=F | new=F)` (or `patch.object(torch.Tensor, ...)`),
  `patch("torch.name", side_effect=F | new=F)` or `monkeypatch.setattr(torch, "name", F)` /
  `monkeypatch.setattr("torch.name", F)`;
- its body allocates on the CPU: a `device="cpu"` keyword in a call (`kwargs.update(device="cpu")`,
  `allocate(*args, device="cpu")`) or `kwargs["device"] = "cpu"`;
- its body compares (`==`, `!=`) with `torch.device("cuda")`: that call is kept (`kept_comparison`);
- the "cuda" strings given as call arguments in the body of the `with` statement that installs the
  fake (or, after `monkeypatch.setattr`, in the rest of the test function) are the other half
  (`mark`).
The nearest true cases stay as they were: a `torch.device("cuda")` comparison in a side effect that
allocates on the device it is given (a spy, not a CPU fake), or in a test without a fake, is
rewritten; a "cuda" passed under such a spy keeps its warning.

The device family calls `kept_comparison` before it rewrites `torch.device(...)`; the leftover sweep
calls `mark` for each node it enters (Sweep.on_visit).
"""

from __future__ import annotations

import ast

from . import astcache
from typing import Any, Optional

Sweep = Any  # sweep.Sweep
Context = Any  # families.context.Context

REASON = ('a device a test\'s CPU fake of torch compares, left as written with it: `{fake}` installed over '
          '`torch.{name}` (line {line}) puts the allocation on the CPU')


def kept_comparison(ctx: Context, node) -> bool:
    """`node` (a libcst `torch.device("cuda")` call) is compared inside a CPU fake of torch: keep it."""
    found = _found(ctx)
    return bool(found) and tuple(ctx.position(node)) in found["calls"]


def mark(sweep: Sweep, node) -> None:
    """A "cuda" string of a CPU fake's pair: information with the reason."""
    if type(node).__name__ != "SimpleString":
        return
    found = _found(sweep.m)
    if not found:
        return
    reason = found["strings"].get(tuple(sweep.m.position(node)))
    if reason:
        sweep.label_info.setdefault(id(node), reason)


def _found(ctx: Context) -> Optional[dict]:
    """{"calls": positions of kept `torch.device("cuda")` calls, "strings": {position: reason}}, once
    per file (cached on the context), or None where the file has no CPU fake."""
    cached = getattr(ctx, "_cpufakes26", None)
    if cached is not None:
        return cached or None
    found: dict = {}
    text = ctx.file_text()
    if "cuda" in text and "cpu" in text and ("patch" in text or "setattr" in text):
        tree = ctx._ast()
        if tree is not None:
            found = _scan(tree)
    ctx._cpufakes26 = found
    return found or None


def _dotted(node: ast.AST) -> str:
    """`a.b.c` of an attribute chain on a name, "" for a chain on anything else."""
    return astcache.dotted(node, strict=True) or ""


def _const(node: Optional[ast.AST]) -> Optional[str]:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_torch_device_cuda(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and _dotted(node.func) == "torch.device" and len(node.args) == 1
            and not node.keywords and _const(node.args[0]) == "cuda")


def _allocates_on_cpu(fake: ast.AST) -> bool:
    for sub in ast.walk(fake):
        if isinstance(sub, ast.Call) and any(k.arg == "device" and _const(k.value) == "cpu" for k in sub.keywords):
            return True
        if isinstance(sub, ast.Assign) and _const(sub.value) == "cpu" and any(
                isinstance(t, ast.Subscript) and _const(t.slice) == "device" for t in sub.targets):
            return True
    return False


def _kept_calls(fake: ast.AST) -> list[ast.Call]:
    out = []
    for sub in ast.walk(fake):
        if isinstance(sub, ast.Compare) and all(isinstance(op, (ast.Eq, ast.NotEq)) for op in sub.ops):
            out.extend(o for o in (sub.left, *sub.comparators) if _is_torch_device_cuda(o))
    return out


def _installed(call: ast.Call) -> Optional[tuple[str, str]]:
    """(fake's name, torch attribute) when `call` installs a local function over a torch name."""
    func = _dotted(call.func)
    last = func.rsplit(".", 1)[-1]
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    fake = keywords.get("side_effect") or keywords.get("new")
    if func.endswith("patch.object") and len(call.args) >= 2:
        owner, name = _dotted(call.args[0]), _const(call.args[1])
        if fake is None and len(call.args) >= 3:
            fake = call.args[2]
        if owner.split(".")[0] == "torch" and name and isinstance(fake, ast.Name):
            return fake.id, name if owner == "torch" else f"{owner[len('torch.'):]}.{name}"
    elif last == "patch" and call.args and (_const(call.args[0]) or "").startswith("torch."):
        if fake is None and len(call.args) >= 2:
            fake = call.args[1]
        if isinstance(fake, ast.Name):
            return fake.id, _const(call.args[0])[len("torch."):]
    elif last == "setattr" and func != "setattr" and call.args:
        first = call.args[0]
        if _dotted(first).split(".")[0] == "torch" and len(call.args) >= 3 and _const(call.args[1]):
            fake = call.args[2]
            owner = _dotted(first)
            name = _const(call.args[1]) if owner == "torch" else f"{owner[len('torch.'):]}.{_const(call.args[1])}"
        elif (_const(first) or "").startswith("torch.") and len(call.args) >= 2:
            fake, name = call.args[1], _const(first)[len("torch."):]
        else:
            return None
        if isinstance(fake, ast.Name):
            return fake.id, name
    return None


def _argument_strings(nodes: list[ast.AST]) -> list[ast.Constant]:
    """The "cuda" literals given as call arguments (positional or keyword) in `nodes`."""
    out = []
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                for value in (*sub.args, *(k.value for k in sub.keywords)):
                    if _const(value) == "cuda":
                        out.append(value)
    return out


def _scan(tree: ast.AST) -> dict:
    calls: set = set()
    strings: dict = {}
    for scope in ast.walk(tree):
        if not isinstance(scope, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        # the fakes this scope defines: name -> the kept comparisons' calls (CPU fakes only)
        fakes = {}
        for stmt in scope.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and _allocates_on_cpu(stmt):
                kept = _kept_calls(stmt)
                if kept:
                    fakes[stmt.name] = (stmt, kept)
        if not fakes:
            continue
        for index, stmt in enumerate(scope.body):
            for node in ast.walk(stmt):
                if isinstance(node, (ast.With, ast.AsyncWith)):
                    for item in node.items:
                        expr = item.context_expr
                        got = _installed(expr) if isinstance(expr, ast.Call) else None
                        if got and got[0] in fakes:
                            _pair(fakes[got[0]], got, expr, node.body, calls, strings)
                elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and node is stmt:
                    got = _installed(node.value)
                    if got and got[0] in fakes and not _dotted(node.value.func).endswith("patch.object"):
                        _pair(fakes[got[0]], got, node.value, scope.body[index + 1:], calls, strings)
    return {"calls": calls, "strings": strings} if calls else {}


def _pair(fake: tuple, got: tuple[str, str], install: ast.Call, body: list, calls: set, strings: dict) -> None:
    """Keep the fake's comparisons and name the "cuda" arguments under it, when there are some."""
    passed = _argument_strings(body)
    if not passed:
        return  # nothing hands the fake a "cuda": the comparison is rewritten as any other
    stmt, kept = fake
    reason = REASON.format(fake=stmt.name, name=got[1], line=install.lineno)
    for call in kept:
        calls.add((call.lineno, call.col_offset + 1))
        arg = call.args[0]
        strings[(arg.lineno, arg.col_offset + 1)] = reason
    for value in passed:
        strings[(value.lineno, value.col_offset + 1)] = reason
