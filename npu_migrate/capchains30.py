"""Capability gates read one step further than callgates21.py read them (issue #16, round-30 audit
EA#11, EA#35 and EA#18 here; EA#14 for supportgates27.raising_init, `inline_refusal`; EA#13 for
capflows29.spans, `exit_spans`; callgates21, methods29, supportgates27 and capflows29 ask this
module, which imports none of them).

Two shapes of vLLM's model-private kernels stayed errors although every way to them passes a
gate an NPU host answers False (vllm-ascend's platform answers `get_device_capability()` with
None, so every SM test is false there):

    # step5/nvidia/model.py (EA#11, EA#14, EA#35: the DSA constructor refuses the NPU host)
    class Step5Attention(nn.Module):
        def __init__(self, ...):
            self.use_dsa_backend = sparse_config is not None and sliding_window is None
            if self.use_dsa_backend:
                capability = current_platform.get_device_capability()
                if capability is None or not Backend.supports_compute_capability(capability):
                    raise NotImplementedError("Step5 DSA requires SM90, SM100 or SM103")
            ...
            self.sparse_attn = (
                Step5SparseAttention(self, sparse_config)    # the only builder of the kernels' user
                if self.use_dsa_backend
                else None
            )

attrflags27.raise_implied already reads `self.use_dsa_backend` as False after that refusal, and
callgates21 follows an `if self.use_dsa_backend:` body; a conditional expression's branch,
though, it follows only behind a function whose body returns a platform flag
(callgates21._flag_gated: a probe of an optional package a user may install is no gate).
`refused_branch` adds the one more conditional expression whose test is such a refused flag
(`self.X` or `not self.X`, the answer raise_implied gave): its False comes from the platform's
capability refusal, not from a package the user may install.

    # flint/model.py (EA#18: the flag lives on a member built by the class)
    class FlintAttention(nn.Module):
        def __init__(self, ...):
            self.flint_decode = _flint_kernels(quant_config)   # False unless capability family 100
        def forward_ll(self, ...):
            q, residual = flint_qkv_fused(...)                 # the lazy `import cutlass` behind it
    class FlintDecoderLayer(nn.Module):
        def __init__(self, ...):
            self.self_attn = FlintAttention(...)
        def forward(self, ...):
            if self.self_attn.flint_decode:
                ll = self.self_attn.forward_ll(...)            # the only call of forward_ll

callgates21.truth knew `self.X` of the reading class only. `member_values` gives `self.A.X` where
the class assigns `self.A` once, to a construction `C(...)` of a class C of the same module, no
other `.A = ...` of the run (callgates21's count) rebinds it, and C assigns `self.X` once to a
value callgates21 knows there (its `_attr` reading, with its rules: no other store of `.X`
elsewhere in the run, a property read the same way). The value is keyed `self.A.X` in the
interpreter's environment (flagcalls19.Run.value reads a dotted key of that form).

Kept (the nearest true cases, tests/test_h142.py): a conditional expression on a flag the
constructor does not refuse (`self.X = use_fast` from an opt-in option), `self.A` assigned twice
or to something other than a construction of a class of the module, and `self.A.X` where C's
`self.X` is unknown or true there.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import classmembers

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_CAPABILITY_WORDS = re.compile(r"device_capability|compute_capability")


def _owner(gates, parents: dict, where: ast.AST) -> tuple[Optional[ast.AST], Optional[ast.ClassDef]]:
    function = gates._function(parents, where)
    owner = parents.get(id(function)) if function is not None else None
    return function, owner if isinstance(owner, ast.ClassDef) else None


def refused_branch(gates, j: int, parents: dict, test: ast.AST, where: ast.AST) -> bool:
    """`test` (of a conditional expression at `where`, already read by gates.truth) is `self.X` or
    `not self.X` where X is a flag attrflags27.raise_implied answered False (the class's
    `__init__` refuses an NPU host's capability before any instance with X True exists)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    if not (isinstance(test, ast.Attribute) and isinstance(test.value, ast.Name) and test.value.id == "self"):
        return False
    _function, owner = _owner(gates, parents, where)
    return owner is not None and gates.guards.get((j, owner.name, test.attr)) is not None


def member_classes(gates, j: int, tree: ast.Module, owner: ast.ClassDef, member: str) -> Optional[list]:
    """The module-level classes of module j that `owner` builds into `self.<member>`: every store
    of `.member` in the class a plain `self.<member> = C(...)` (a bare annotation aside), C a class
    of the module no top-level statement rebinds, and no other `.member = ...` in the run
    (callgates21's count); None otherwise."""
    key = (j, id(owner), member)
    if key not in gates.built:
        gates.built[key] = _member_classes(gates, j, tree, owner, member)
    return gates.built[key]


def _member_classes(gates, j: int, tree: ast.Module, owner: ast.ClassDef, member: str) -> Optional[list]:
    found = classmembers.members(owner, member)  # (one walk of the class body: classmembers.py)
    stores, assigns, bare = found.stores, found.self_assigns, found.bare
    if not assigns or len(stores) != len(assigns) + len(bare) \
            or _member_stores(gates, member, j, owner) != len(assigns):
        return None
    classes = {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}
    out = []
    for assign in assigns:
        value = assign.value
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in classes):
            return None
        if any(isinstance(n, ast.Name) and n.id == value.func.id and not isinstance(n.ctx, ast.Load)
               for s in tree.body if not isinstance(s, ast.ClassDef) for n in ast.walk(s)):
            return None  # (the name rebound at module level)
        out.append(classes[value.func.id])
    return out


def _member_stores(gates, member: str, home: int, owner: ast.ClassDef) -> int:
    """How many `.member = ...` stores (and patches naming it) the run holds that may land on an
    instance of `owner`: every one in its own module, and in another file only where that file
    names the class or a class deriving from it (a test's `layer.self_attn = attn` on another
    model's layer, in a file that never names the class, sets another object's member)."""
    pattern = re.compile(rb"\.\s*" + re.escape(member.encode()) + rb"\s*(?:=(?!=)|\+=|-=|\|=|&=)")
    named = re.compile(rb"(?:patch|setattr)\b[^\n]*[\"']" + re.escape(member.encode()) + rb"[\"']")
    family = [re.compile(rb"\b" + re.escape(n.encode()) + rb"\b") for n in gates._family(owner.name)]
    count = 0
    for i, result in enumerate(gates.run.results):
        if not result.relpath.endswith(".py"):
            continue
        data = gates.run.text_of(i) or b""
        if member.encode() not in data or (i != home and not any(f.search(data) for f in family)):
            continue
        count += len(pattern.findall(data)) + (2 if named.search(data) else 0)
    return count


def other_members(gates, j: int, tree: ast.Module, parents: dict, ref: ast.AST, home: str) -> bool:
    """`ref` (`.M` read by methods29's walk over the calls of method M of class `home`) is
    `self.A.M` where every object `self.A` can be is one the class builds from classes of its
    module none of which is `home` or derives from it (flint's `self.mlp.forward_ll(...)`, an MoE
    block's method, beside the attention's `forward_ll`): not a call of `home`'s method."""
    if not (isinstance(ref, ast.Attribute) and isinstance(ref.value, ast.Attribute)
            and isinstance(ref.value.value, ast.Name) and ref.value.value.id == "self"):
        return False
    _function, owner = _owner(gates, parents, ref)
    if owner is None:
        return False
    built = member_classes(gates, j, tree, owner, ref.value.attr)
    family = gates._family(home)
    return bool(built) and not any(c.name in family for c in built)


def member_values(gates, j: int, tree: ast.Module, parents: dict, function: ast.AST, exprs, used: list) -> dict:
    """{"self.A.X": (value, note)} of each `self.A.X` in `exprs` (nodes read in `function`, a
    method) callgates21 knows there through the class of `self.A` (this module's docstring)."""
    from .flagtruth import UNKNOWN as _U

    owner = parents.get(id(function))
    if not isinstance(owner, ast.ClassDef):
        return {}
    out: dict = {}
    for expr in exprs:
        for n in ast.walk(expr):
            if not (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute)
                    and isinstance(n.value.value, ast.Name) and n.value.value.id == "self"):
                continue
            key = f"self.{n.value.attr}.{n.attr}"
            if key in out:
                continue
            built = member_classes(gates, j, tree, owner, n.value.attr)
            member = built[0] if built and len(built) == 1 else None
            method = next((s for s in member.body if isinstance(s, _DEFS)), None) if member is not None else None
            if method is None:
                continue
            value = gates._attr(j, tree, parents, method, n.attr, used)
            if value is _U:
                continue
            place = gates.where.get((j, member.name, n.attr), "")
            out[key] = (value, f"`self.{n.value.attr}` is a `{member.name}`, whose `self.{n.attr}` is "
                               f"{value!r} there, set once at {place}")
    return out


def inline_refusal(gates, j: int, tree: ast.Module, parents: dict, stmt: ast.stmt) -> Optional[str]:
    """The words for a statement of a class's `__init__` that is itself `if T: raise ...` with T
    true on an NPU host, read with the once-bound locals before it (callgates21.truth:
    `capability = current_platform.get_device_capability()` is None there), for
    supportgates27.raising_init (EA#14: Step5's DSA attention impl refuses any capability but
    SM90/100/103 in its own `__init__`, so `_forward_prefill`, the only launcher of
    `stage_prefill_pages`, never runs there); None otherwise."""
    if not (isinstance(stmt, ast.If) and not stmt.orelse and stmt.body and isinstance(stmt.body[-1], ast.Raise)
            and stmt.body[-1].exc is not None):
        return None
    if any(isinstance(n, (ast.Return, ast.Try)) for s in stmt.body for n in ast.walk(s)):
        return None
    if gates.truth(j, tree, parents, stmt.test, stmt, []) is not True:
        return None
    test = " ".join(ast.unparse(stmt.test).split())[:80]
    return f"raises on an NPU host (line {stmt.lineno}: `if {test}: raise`, true there)"


def exit_spans(tree: ast.Module, text: str, lines: set) -> list:
    """(first line, last line, condition) of the rest of a function after a top-level statement
    `if T: return ...` (or `raise`) of its body with T true on an NPU host (testscopes' truth,
    a capability test in it), holding one of `lines` (lazy imports), for capflows29.spans (EA#13:
    `maybe_create_gemm_rs` returns None `if not current_platform.is_cuda() or not
    current_platform.is_device_capability(103) or ...` after binding a local first, then imports
    a module loading cutlass at module level). testscopes' early-return reading takes the
    function's first statement only. Kept: a test calling through a name the function binds before
    it (`platform = ...; if not platform.is_cuda(): return`: a local the reading does not see), a
    test unknown or false there, an `if` with an `else`."""
    from .flagtruth import always_exits
    from .testscopes import npu_truth

    out = []
    for function in ast.walk(tree):
        if not isinstance(function, _DEFS):
            continue
        last = function.end_lineno or function.lineno
        if not any(function.lineno < n <= last for n in lines):
            continue
        stored: set = set()
        for index, stmt in enumerate(function.body[:-1]):
            if not stored and not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
                # (the first statement: testscopes' early-return reading, as it always read it)
                stored.update(n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load))
                stored.add("")
                continue
            if isinstance(stmt, ast.If) and not stmt.orelse and always_exits(stmt.body) \
                    and isinstance(stmt.body[-1], (ast.Return, ast.Raise)) \
                    and not (_called_roots(stmt.test) & stored) \
                    and _CAPABILITY_WORDS.search(ast.unparse(stmt.test)) and npu_truth(stmt.test) is True:
                rest = function.body[index + 1]
                if any(rest.lineno <= n <= last for n in lines):
                    out.append((rest.lineno, last, f"not ({' '.join(ast.unparse(stmt.test).split())})"))
                break
            stored.update(n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load))
    return out


def _called_roots(test: ast.AST) -> set:
    """The names the calls of `test` go through (`current_platform` of `current_platform.is_cuda()`,
    `is_sm100` of `is_sm100()`)."""
    out = set()
    for n in ast.walk(test):
        if isinstance(n, ast.Call):
            root = n.func
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name):
                out.add(root.id)
    return out
