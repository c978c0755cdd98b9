"""Notes whose own text says nothing is to be done, and device labels (issue #16, round-14 audits).

- A handler of `Tensor.cuda` itself (`@implements_torch_function(torch.Tensor.cuda)`,
  `@implements([aten.cuda.default])`): a tensor subclass's function that forwards a caller's
  `.cuda(*args)` to its inner tensors. It runs only when someone calls `.cuda()` on such a tensor,
  and that caller's `.cuda()` is rewritten to `.to(...)` or reported where it is. Its forwarded
  `.cuda(*args)` (NPU990: star arguments, not mappable to `.to()`) asks for no work: information
  with that reason (a named scope, moot.NO_WORK). A `.cuda(*args)` elsewhere keeps its warning.

- a Triton test gate from a project probe that returns False where `torch.cuda.is_available()` is
  False, a check the run leaves as written (`_triton_available = pkg._is_triton_available()`): the
  tests skip on an NPU host, Triton-Ascend or not (optionalext.review_triton_skipped_tests calls
  `cuda_gated_probe`; a named scope, moot.PHRASES);
- "cuda" (no index) passed to a project function that rebuilds a device without an index with the
  detected accelerator's type (`get_device("cuda")` -> `_setup_device`: `torch.device(type=
  get_device_support().device_type, index=local_rank)`): a label (resolved._label calls
  `detected_device`; resolved.LABEL, a named scope). "cuda" given to `torch.device` stays rewritten.
- a float64 tensor made on the device only to be passed to a local function (or its
  `torch.compile`) whose body returns it converted to another dtype (NPU930): creating and casting
  float64 works on an NPU host, nothing computes in it (diagnostics.py calls `conversion_source`;
  moot.NO_WORK). float64 arithmetic on the device stays a finding.

device.py (`_cuda_method`) calls `cuda_handler` for a `.cuda(*args)` it cannot map.
"""

from __future__ import annotations

import ast
from typing import Optional

from . import astcache

CUDA_HANDLER = ("a handler of `Tensor.cuda` itself, run only by `.cuda()` calls, which the migration rewrites "
                "or reports where they are: `{name}` (line {line})")


def _names_cuda_method(node: ast.AST) -> bool:
    """`torch.Tensor.cuda`, `Tensor.cuda`, `aten.cuda`, `aten.cuda.default`: the CUDA method itself."""
    dotted = astcache.dotted(node) or ""
    parts = dotted.split(".")
    if "cuda" not in parts[1:]:
        return False
    owner = parts[parts.index("cuda", 1) - 1]
    return owner in ("Tensor", "aten") and parts[-1] in ("cuda", "default")


def _registers_cuda(decorator: ast.AST) -> bool:
    """A decorator call whose arguments name the CUDA method (`@implements(torch.Tensor.cuda)`,
    `@implements([aten.cuda.default])`)."""
    if not isinstance(decorator, ast.Call):
        return False
    args = [*decorator.args, *(k.value for k in decorator.keywords)]
    for arg in args:
        items = arg.elts if isinstance(arg, (ast.List, ast.Tuple, ast.Set)) else [arg]
        if any(isinstance(item, ast.Attribute) and _names_cuda_method(item) for item in items):
            return True
    return False


def cuda_handler(tree: Optional[ast.AST], line: int) -> Optional[str]:
    """The reason when `line` lies in a function registered as the handler of `Tensor.cuda`."""
    if tree is None:
        return None
    for node in astcache.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if not node.lineno <= line <= (node.end_lineno or node.lineno):
            continue
        decorator = next((d for d in node.decorator_list if _registers_cuda(d)), None)
        if decorator is not None:
            return CUDA_HANDLER.format(name=" ".join(ast.unparse(decorator).split())[:80], line=decorator.lineno)
    return None


# ------------------------------------------------------------------ a Triton test gate that needs CUDA
# (moot.PHRASES) the tests' gate comes from a project availability function that returns False where
# `torch.cuda.is_available()` is False, a check the run leaves as written (round 14, AK#18: xformers'
# `_is_triton_available()`): Triton-Ascend does not make it true on an NPU host
CUDA_GATED_TESTS = ("in tests an NPU host skips: they skip unless `{flag}`, whose `{probe}` is `{call}`, which "
                    "returns False where `torch.cuda.is_available()` is False ({where}, a check left as "
                    "written){opt_in}")


def _cuda_unavailable_exit(statement: ast.stmt) -> bool:
    """`if not torch.cuda.is_available(): return False`."""
    test = statement.test if isinstance(statement, ast.If) else None
    return (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Call)
            and astcache.dotted(test.operand.func) == "torch.cuda.is_available" and not statement.orelse
            and len(statement.body) == 1 and isinstance(statement.body[0], ast.Return)
            and isinstance(statement.body[0].value, ast.Constant) and statement.body[0].value.value is False)


def _opt_in(statement: ast.stmt) -> Optional[str]:
    """`if os.environ.get("X_ENABLE", "0") == "1": return True`: an environment opt-in (its test)."""
    if not (isinstance(statement, ast.If) and not statement.orelse and len(statement.body) == 1
            and isinstance(statement.body[0], ast.Return)):
        return None
    test = " ".join(ast.unparse(statement.test).split())
    return test if ("os.environ" in test or "os.getenv" in test) else None


def _requires_cuda(function: ast.FunctionDef) -> Optional[tuple[int, list[str]]]:
    """(line of the exit, the opt-ins before it) when the function's top-level statements reach
    `if not torch.cuda.is_available(): return False` with nothing before it but a docstring,
    environment opt-ins and other early exits that return False."""
    opt_ins = []
    for statement in function.body:
        if _cuda_unavailable_exit(statement):
            return statement.lineno, opt_ins
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue
        found = _opt_in(statement)
        if found is None:
            return None
        opt_ins.append(found)
    return None


def cuda_gated_probe(results: list, paths: dict, importer: ast.Module, value: ast.AST, flag: str,
                     probe: str) -> Optional[str]:
    """The reason when `value` (what a test gate's Triton probe is bound to) calls a function of the
    run (`pkg._is_triton_available()`, `pkg` imported whole, or a name imported from a module of the
    run) that returns False where `torch.cuda.is_available()` is False, and the run leaves that check
    as written (no rewrite at its line); None otherwise. Reads one module of the run, parsed only
    when its bytes define the function."""
    from .modpaths import module_names, result_bytes

    if not (isinstance(value, ast.Call) and not value.args and not value.keywords):
        return None
    dotted = astcache.dotted(value.func, strict=True)
    if dotted is None:
        return None
    module, _, name = dotted.rpartition(".")
    if not module:  # a bare name: `from pkg.mod import name`
        module = next((n.module for n in importer.body if isinstance(n, ast.ImportFrom) and not n.level and n.module
                       and any((a.asname or a.name) == name and a.name == name for a in n.names)), "")
    elif not any(isinstance(n, ast.Import) and any(a.name == module and a.asname is None for a in n.names)
                 for n in importer.body):
        module = ""
    if not module:
        return None
    for result in results:
        if not (result.relpath.endswith(".py") and module in module_names(result.relpath)):
            continue
        data = result_bytes(result, paths)
        if data is None or f"def {name}(".encode() not in data or b"torch.cuda.is_available" not in data:
            return None
        tree = astcache.parse(data)
        function = next((n for n in getattr(tree, "body", ()) if isinstance(n, ast.FunctionDef) and n.name == name), None)
        found = _requires_cuda(function) if function is not None else None
        if found is None:
            return None
        line, opt_ins = found
        if any(f.fixable and f.line == line for f in result.findings):
            return None  # (rewritten to the shim's check: true on an NPU host)
        opt_in = f"; unless the opt-in `{opt_ins[0][:70]}` holds" if opt_ins else ""
        return CUDA_GATED_TESTS.format(flag=flag[:60], probe=probe[:60], call=f"{dotted}()",
                                       where=f"{result.relpath}:{line}", opt_in=opt_in)
    return None


# ------------------------------------------------------------------ "cuda" given to a device resolver
# (resolved.LABEL, moot.NO_WORK) "cuda" passed to a project function that turns a device without an
# index into the detected accelerator's (round 14, AK#7: torchtune's `get_device("cuda")`, whose
# `_setup_device` builds `torch.device(type=get_device_support().device_type, index=local_rank)`):
# on an NPU host the tensor lands on the NPU, the string only says "the accelerator"
DETECTED = ("`{callee}` ({where}:{line}) replaces a device without an index with the detected accelerator's "
            "(`torch.device(type={type}, ...)` at {at})")


def _params_of(func: ast.AST) -> list[str]:
    a = func.args
    return [arg.arg for arg in (*a.posonlyargs, *a.args)]


def _rebuilds(func: ast.AST, name: str) -> Optional[tuple[str, int]]:
    """(type, line) of `if name.index is None: name = torch.device(type=T, index=...)` in `func`,
    T a name bound in `func` from something other than `name` (the detected device type)."""
    bound = {t.id: n.value for n in ast.walk(func) if isinstance(n, ast.Assign) for t in n.targets
             if isinstance(t, ast.Name)}
    for node in ast.walk(func):
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and astcache.dotted(node.test.left) == f"{name}.index" and len(node.test.ops) == 1
                and isinstance(node.test.ops[0], ast.Is) and isinstance(node.test.comparators[0], ast.Constant)
                and node.test.comparators[0].value is None):
            continue
        for statement in node.body:
            value = statement.value if isinstance(statement, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in statement.targets) else None
            if not (isinstance(value, ast.Call) and astcache.dotted(value.func) == "torch.device"):
                continue
            kind = next((k.value for k in value.keywords if k.arg == "type"), value.args[0] if value.args else None)
            if not isinstance(kind, ast.Name) or kind.id == name or kind.id not in bound:
                continue
            source = bound[kind.id]
            if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(source)):
                continue
            return kind.id, statement.lineno
    return None


def detected_device(run, relpath: str, call: ast.Call, index: int) -> Optional[str]:
    """Why "cuda" (no index) as the `index`-th argument of `call` resolves to the detected
    accelerator: every project function of the called name (resolved.py's `run`: its `defs` and
    `tree`) rebuilds its parameter with the detected type, itself or through one project function
    it passes the parameter to (`device = _setup_device(torch.device(device))`); None otherwise."""
    callee = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
    if not callee or call.keywords and index >= len(call.args):
        return None
    defs = run.defs(callee)
    if not defs:
        return None
    shown = []
    for where, func in defs:
        params = _params_of(func)
        if index >= len(params):
            return None
        name = params[index]
        found = _rebuilds(func, name)
        at = f"{where}:{found[1]}" if found else ""
        if found is None:
            for node in ast.walk(func):  # `name = helper(name)` / `name = helper(torch.device(name))`
                if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and node.value.args
                        and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)):
                    continue
                first = node.value.args[0]
                if not (isinstance(first, ast.Name) and first.id == name):
                    continue
                helper = getattr(node.value.func, "id", None)
                inner = [d for d in run.defs(helper)] if helper else []
                if len(inner) != 1 or not _params_of(inner[0][1]):
                    continue
                found = _rebuilds(inner[0][1], _params_of(inner[0][1])[0])
                if found is not None:
                    at = f"`{helper}`, {inner[0][0]}:{found[1]}"
                    break
        if found is None:
            return None
        shown.append(DETECTED.format(callee=callee, where=where, line=func.lineno, type=found[0], at=at))
    return "; ".join(shown[:2])


# ------------------------------------------------------------------ float64 only converted (NPU930)
# (moot.NO_WORK) a float64 tensor created on the device only to be passed to a local function that
# returns it converted to another dtype (round 14, AM#3: `compiled(torch.ones(4, device="cuda",
# dtype=torch.float64), torch.ones(4, device="cuda", dtype=torch.float32))`, `compiled =
# torch.compile(convert_like)`, `convert_like` returning `x.to(device=like.device, dtype=like.dtype)`):
# creating and casting a float64 tensor works on an NPU host; nothing computes in float64
CONVERSION_SOURCE = ("the source of a dtype conversion only: `{function}` (line {line}) returns it converted to "
                     "{dtype}; nothing computes in float64")
_FLOAT64 = frozenset({"torch.float64", "torch.double"})


def _dtype_keyword(call: ast.AST) -> Optional[str]:
    if not isinstance(call, ast.Call):
        return None
    found = next((k.value for k in call.keywords if k.arg == "dtype"), None)
    return astcache.dotted(found) if found is not None else None


def _function_named(scopes: list, name: str) -> Optional[ast.FunctionDef]:
    """The function `name` stands for in the innermost of `scopes` that binds it: a `def`, or
    `name = torch.compile(f, ...)` of such a `def`."""
    for scope in scopes:
        for statement in scope.body:
            if isinstance(statement, ast.FunctionDef) and statement.name == name:
                return statement
            if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                    and isinstance(statement.targets[0], ast.Name) and statement.targets[0].id == name
                    and isinstance(statement.value, ast.Call) and astcache.dotted(statement.value.func) == "torch.compile"
                    and statement.value.args and isinstance(statement.value.args[0], ast.Name)):
                return _function_named(scopes, statement.value.args[0].id)
    return None


def conversion_source(tree: Optional[ast.Module], line: int, column: int) -> Optional[str]:
    """The reason when the float64 call at (line, column, 1-based) is an argument of a call to a
    local function whose body is only `return x.to(..., dtype=D)` of that parameter, D a
    non-float64 dtype: a literal, or `other.dtype` of a parameter given a tensor made with one."""
    if tree is None:
        return None
    parents = astcache.parents(tree)
    node = next((n for n in astcache.walk(tree) if isinstance(n, ast.Call) and n.lineno == line
                 and n.col_offset + 1 == column), None)
    consumer = parents.get(id(node)) if node is not None else None
    if not (isinstance(consumer, ast.Call) and node in consumer.args and isinstance(consumer.func, ast.Name)):
        return None
    scopes, current = [], parents.get(id(consumer))
    while current is not None:
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            scopes.append(current)
        current = parents.get(id(current))
    function = _function_named(scopes, consumer.func.id)
    if function is None or len(function.body) != 1 or not isinstance(function.body[0], ast.Return):
        return None
    params = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    index = consumer.args.index(node)
    returned = function.body[0].value
    if index >= len(params) or not (isinstance(returned, ast.Call) and isinstance(returned.func, ast.Attribute)
                                    and returned.func.attr == "to" and isinstance(returned.func.value, ast.Name)
                                    and returned.func.value.id == params[index]):
        return None
    dtype = next((k.value for k in returned.keywords if k.arg == "dtype"), None)
    if isinstance(dtype, ast.Attribute) and isinstance(dtype.value, ast.Name) and dtype.attr == "dtype" \
            and dtype.value.id in params and dtype.value.id != params[index]:
        other = params.index(dtype.value.id)
        shown = _dtype_keyword(consumer.args[other]) if other < len(consumer.args) else None
    else:
        shown = astcache.dotted(dtype) if dtype is not None else None
    if not shown or not shown.startswith("torch.") or shown in _FLOAT64:
        return None
    return CONVERSION_SOURCE.format(function=function.name, line=function.lineno, dtype=f"`{shown}`")


# ------------------------------------------------------------------ shared with gates16.py
requires_cuda_exit = _requires_cuda
