"""A kernel test's reference (oracle) helpers, for the test folds of jitfolds23.py (issue #16,
precision wave 25, round-25 audit BT#13).

jitfolds23.py folds a test's or benchmark's FP8 (NPU913) into the NPU912 of the project's CUDA JIT
kernel it tests when every FP8 place only feeds that kernel (the kernel's output buffer). A test of
the kernel also holds the FP8 of the pure-torch result it is compared with (SGLang's
`test_per_tensor_quant_fp8.py`: `torch_scaled_fp8_quant(x, scale)` casts to `torch.float8_e4m3fn`,
and the test `assert_close`s the kernel's output with it), and a module-level dtype
(`fp8_type_ = torch.float8_e4m3fnuz if _is_hip else torch.float8_e4m3fn`) that the tests hand to
the kernel's output allocation. Both exist only to run and check that kernel, which fails first on
an NPU host; porting the test is porting the kernel.

* **A reference helper** (`oracle_kernels`): a module-level function of the test file, not a test
  itself (its name does not start with `test`), that calls no kernel function, whose name is read
  only as the callee of calls (never passed, stored or exported by another use), at least one, each
  inside a test function (`test*`, at module level or in a class) that calls a kernel function
  (a name imported from the kernel module, not rebound there) directly or through a module-level
  helper of the file that calls one directly. The kernels those tests call are what its FP8 feeds.
  A helper a non-test function also calls, one with no caller, one passed as a value, or a test
  that calls no kernel: not a reference helper (its FP8 keeps its finding).
* **A module-level FP8 binding read only where it feeds** (`binding_reads`): the reads of a
  module-level name, each inside a function (never at module level, never under `global`), for
  jitfolds23 to test one by one with its own "feeds the kernel" reading, where the kernel's output
  buffer may also be compared with the reference (an argument of `assert_close`, `allclose`, ...:
  `COMPARES`), as it may be returned. Any other read (another call, FP8 compute beside the
  kernel) keeps the finding.

Pure AST, no file reading: jitfolds23 passes the parsed test module and the kernel names it imports.
"""

from __future__ import annotations

import ast
from typing import Optional

from . import astcache

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# (calls that compare a kernel's output with its reference in a test: reading it so is checking it)
COMPARES = frozenset({"assert_close", "assert_allclose", "allclose", "isclose", "assert_equal",
                      "assert_array_equal", "assert_array_almost_equal"})


def _binds(function: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(function))


def _direct_kernels(function: ast.AST, kernel_names: dict) -> list:
    """The kernels (kernel_names' values) `function` calls by a name it does not rebind."""
    return [kernel_names[n.func.id] for n in ast.walk(function)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in kernel_names
            and not _binds(function, n.func.id)]


def _enclosing_function(node: ast.AST, parents: dict) -> Optional[ast.AST]:
    holder = parents.get(id(node))
    while holder is not None and not isinstance(holder, _FUNCTIONS):
        holder = parents.get(id(holder))
    return holder


def _is_test(function: ast.AST, tree: ast.Module, parents: dict) -> bool:
    if not function.name.startswith("test"):
        return False
    owner = parents.get(id(function))
    return owner is tree or (isinstance(owner, ast.ClassDef) and parents.get(id(owner)) is tree)


def oracle_kernels(tree: ast.Module, function: ast.AST, kernel_names: dict) -> Optional[list]:
    """The kernels whose tests alone call the reference helper `function` (module's doc, first
    shape), or None when it is not one."""
    if function not in tree.body or function.name.startswith("test") or _direct_kernels(function, kernel_names):
        return None
    parents = astcache.parents(tree)
    wrappers = {n.name: _direct_kernels(n, kernel_names) for n in tree.body if isinstance(n, _FUNCTIONS)}
    kernels: list = []
    calls = 0
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and node.id == function.name and isinstance(node.ctx, ast.Load)):
            continue
        call = parents.get(id(node))
        if not (isinstance(call, ast.Call) and call.func is node):
            return None
        test = _enclosing_function(node, parents)
        if test is None or not _is_test(test, tree, parents) or _binds(test, function.name):
            return None
        found = _direct_kernels(test, kernel_names)
        for n in ast.walk(test):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id != function.name \
                    and not _binds(test, n.func.id):
                found += wrappers.get(n.func.id, [])
        if not found:
            return None
        kernels += found
        calls += 1
    return list(dict.fromkeys(kernels)) if calls else None


def binding_reads(tree: ast.Module, name: str) -> Optional[list[tuple[ast.AST, ast.Name]]]:
    """(function, read) for each read of the module-level name `name` (module's doc, second
    shape), skipping functions that bind their own; None when one is at module level or in a
    function that declares it `global`/`nonlocal` (not a plain read)."""
    parents = astcache.parents(tree)
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)):
            continue
        function = _enclosing_function(node, parents)
        if function is None or any(
                isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names for n in ast.walk(function)):
            return None
        if not _binds(function, name):  # (a function binding its own reads that one)
            out.append((function, node))
    return out
