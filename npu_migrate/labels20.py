"""Labels, fake set-ups and test-only shapes read as CUDA code (issue #16, precision wave 20).

Per file, right after disabled.review (run.py), on the report-only findings before the per-file
merge (one finding per place); `fold_profiler_branch` after redundant.fold_redundant. Each shape is
decided on the exact construct; the nearest true case stays reported:

* **An attribute name a test patches** (NPU990 on `"cuda"`): `monkeypatch.setattr(torch.Tensor,
  "cuda", stub)` / `mock.patch.object(torch.Tensor, "cuda", ...)`: the string names the method
  replaced, every torch build has it, nothing fails there. Info with PATCHED_METHOD, which also
  says what may matter: the migration rewrites `.cuda()` calls (`.to(npu_compat.device(...))`), so
  a stub of `Tensor.cuda` may no longer intercept them. `setattr(torch, "cuda", ...)` (the module
  itself) stays.
* **A setting's choice value in a test** (NPU990 on `"cuda"`): `assert env_func() == "cuda"` (a
  call, or a name of a setting: `envs.KERNEL`) in a test function whose body also lists `"cuda"`
  beside a non-device value (`for v in ("cuda", "triton")`; not a `parametrize` list of cases):
  "cuda" is one value of a setting's choices (a kernel implementation's label), not a device.
  Info with CHOICE_VALUE (moot.NO_WORK: a named scope). A comparison with "cuda" in a test that
  lists no such other value (`assert get_device() == "cuda"`), a device compared (`x.device.type`)
  and a test case picked out (`case == "cuda"`, testprobes.py's) stay.
* **A fake (meta) implementation** (NPU913): FP8 calls inside a function passed as `fake_impl=` /
  `abstract_impl=` to a registration call, given to `register_fake(...)`/`impl_abstract(...)`, or
  decorated with one of them: it runs on fake tensors while tracing, to compute the output's
  shape. Info with FAKE_IMPL (moot.NO_WORK). Only when the function's name is used nowhere else in
  the file (never called as the real implementation); the real op's FP8 calls stay.
* **FP8 bytes packed into a byte buffer** (NPU913 on `torch.float8_*`): `x.to(torch.float8_e4m3fn)`
  whose result is only viewed as bytes (`.view(torch.uint8)` at once, or a name whose every read is
  such a view or a cast back to a wider type, `.float()` or `[:, i:j].float()`, a test's reference,
  one view at least):
  no FP8 arithmetic. Info with BYTES_ONLY, an accurate message that keeps the one
  thing to check (the cast itself runs on the device: on hardware without FP8 dtypes, make the
  bytes on the CPU). An FP8 tensor used in any other way (`torch._scaled_mm(x, ...)`) stays.
* **An import under a fake module** (NPU911): `import cutlass.cute` inside `with
  mock.patch.dict(sys.modules, {...}):`, or inside `with helper():` where `helper` is a function of
  the same file holding such a `patch.dict(sys.modules, ...)`, or after `monkeypatch.setitem(
  sys.modules, "cutlass", fake)` / `sys.modules["cutlass"] = fake` earlier in the same function;
  the file must name the imported module (or its top package) as a string (the fake's key or
  `ModuleType` name). The real package is never loaded. Info with FAKE_MODULE (moot.NO_WORK). The
  same import outside the set-up stays.
* **A torch name in a type alias** (NPU990 on `torch.*`): `_PROFILER = Union[torch.profiler.profile,
  torch.autograd.profiler.emit_nvtx]` at module level (a subscript of `Union`/`Optional`/`Type`/...),
  or an annotation: a name every torch build has, never called there. Info with TYPE_ALIAS
  (moot.NO_WORK). Its uses elsewhere stay.
* **An Nsight capture range behind an `nsys` switch** (NPU202 on `torch.cuda.cudart`):
  `torch.cuda.cudart().cudaProfilerStart()` in a class or function of the file that the file uses
  only in the body of an `if` whose test reads an Nsight switch (a name containing `nsys`,
  `nsight` or `nvtx`: `if nsys: return NsysProfiler(...)`): an opt-in mode for running under
  Nsight Systems, which does not exist on an NPU host. Info with NSIGHT_ONLY, which names the
  NPU-side profilers. A capture range outside such a switch stays an error.
* **A CUDA library attribute loaded twice** (NPU990 on `self.nccl`): disabled.py reads the uses of
  `self.nccl = NCCLLibrary(path)` in a `try` whose `except` disables the object, but only when the
  attribute is bound once. A second binding in a `try` whose handlers all raise (`raise
  RuntimeError("failed to load the NCCL library") from e`) gives no other value: the uses after it
  in its method run only where the library loaded. The uses disabled.py would accept, and those,
  are info with disabled.LIBRARY_DISABLED (moot.AS_WRITTEN); the second binding itself stays a
  finding, its message saying that this path raises the project's own error on an NPU host.
* **Two CUDA-profiler constructs in one branch** (`fold_profiler_branch`, after the merge): an
  NPU990 on a profiler name (`torch.autograd.profiler.emit_nvtx`) in the body of the same `if` as
  an error about another profiler construct (`torch.cuda.profiler.profile()`, NPU202): one mode
  to port. The NPU990 places in that branch (a body of under 12 lines) fold into the error, whose message names them.

Nothing is dropped silently; nothing here changes what is rewritten.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace

from . import astcache
from .findings import Finding

PATCHED_METHOD = ("the name of a torch method a test patches, not a device: every torch build has "
                  "`Tensor.cuda`; the migration rewrites `.cuda()` calls to `.to(npu_compat.device(...))`, "
                  "so check that the stub still intercepts what the test means it to")
CHOICE_VALUE = "a setting's value among its other choices, not a device: "
FAKE_IMPL = "in a fake (meta-tensor) implementation: it only computes output shapes while tracing: "
BYTES_ONLY = ("FP8 bytes packed into a byte buffer: the cast's result is only viewed as `{view}` (or cast "
              "back to a wider type), no FP8 arithmetic; the cast itself runs on the device: where it has no FP8 dtypes, make the bytes "
              "on the CPU and move the byte buffer")
FAKE_MODULE = "imported inside a fake module set-up, the real package is never loaded: "
TYPE_ALIAS = "a torch name in a type alias or annotation, never called: "
NSIGHT_ONLY = ("an Nsight Systems capture range, used only when {switch} is set: Nsight Systems does not "
               "run on an NPU host; profile there with msprof or `torch_npu.profiler`")
RAISES_ON_NPU = ("the `except` raises the project's own error where the library is missing: "
                 "this path fails on an NPU host")
BRANCH = "in the same `if` branch (one profiling mode to port)"

LEFTOVER = "NPU990"
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DEVICES = frozenset({"cpu", "cuda", "npu", "xpu", "mps", "hip", "rocm", "meta", "hpu", "mlu", "musa",
                      "gpu", "tpu", "xla", "lazy", "ipu", "privateuseone", "vulkan", "auto", "cuda_alike"})
_LABEL = re.compile(r"[a-z][a-z0-9_]*")
_SETTING = re.compile(r"(?i)env|setting|option|config")
_FAKE_KEYWORDS = frozenset({"fake_impl", "abstract_impl"})
_FAKE_REGISTRARS = frozenset({"register_fake", "impl_abstract", "register_abstract", "register_meta"})
_ALIAS_BASES = frozenset({"Union", "Optional", "Type", "List", "Tuple", "Sequence", "Callable", "type"})
_NSIGHT = re.compile(r"(?i)nsys|nsight|nvtx")
_PROFILER = re.compile(r"(?i)profil|nvtx")
_BRANCH_LINES = 12  # an `if` body this short is one mode's set-up
_WIDER_METHODS = frozenset({"float", "half", "bfloat16", "double"})
_WIDER = frozenset({"torch.float32", "torch.float", "torch.float16", "torch.half", "torch.bfloat16", "torch.float64"})
_UPCAST = "upcast"
_BYTE_VIEWS = frozenset({"torch.uint8", "torch.int8"})


def _open(f: Finding) -> bool:
    return not f.fixable and f.cell is None and f.severity != "info"


def _lower(f: Finding, reason: str) -> Finding:
    return replace(f, severity="info", message=f"{f.message} ({reason})")


def _at(tree: ast.Module, line: int, column: int, types) -> list:
    """The nodes of `types` starting at the finding's place (1-based column), outermost first."""
    found = [n for n in astcache.nodes(tree, types)
             if getattr(n, "lineno", None) == line and getattr(n, "col_offset", None) == column - 1]
    return sorted(found, key=lambda n: -((n.end_lineno or 0) * 10000 + (n.end_col_offset or 0)))


def _chain(node: ast.AST, parents: dict) -> list:
    out = []
    while id(node) in parents:
        node = parents[id(node)]
        out.append(node)
    return out


def _function(node: ast.AST, parents: dict):
    return next((n for n in _chain(node, parents) if isinstance(n, (*_FUNCTIONS, ast.Lambda))), None)


def _string(node: ast.AST):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


# ----------------------------------------------------------------------------- "cuda" strings
def _patched_method(node: ast.AST, parents: dict) -> bool:
    """`monkeypatch.setattr(torch.Tensor, "cuda", stub)`: the string is the attribute patched on a
    torch class (not `torch` itself, whose "cuda" is the CUDA module)."""
    call = parents.get(id(node))
    if not isinstance(call, ast.Call) or len(call.args) < 2 or call.args[1] is not node:
        return False
    name = astcache.dotted(call.func) or ""
    if not (name.endswith("setattr") and name != "setattr" or name.endswith("patch.object")):
        return False
    owner = astcache.dotted(call.args[0], strict=True) or ""
    return owner.startswith("torch.") and owner.rsplit(".", 1)[-1][:1].isupper()


def _choice_value(node: ast.AST, parents: dict) -> str | None:
    """The other choices, when `"cuda"` is compared in a test function that also lists it beside a
    non-device value."""
    compare = parents.get(id(node))
    if not (isinstance(compare, ast.Compare) and len(compare.ops) == 1
            and isinstance(compare.ops[0], (ast.Eq, ast.NotEq))):
        return None
    other = compare.left if compare.comparators[0] is node else compare.comparators[0]
    shown = astcache.dotted(other.func if isinstance(other, ast.Call) else other) or ""
    if not (isinstance(other, ast.Call) or isinstance(other, (ast.Name, ast.Attribute)) and _SETTING.search(shown)):
        return None  # (a setting's getter or a setting; `case == "cuda"` picks a test case: testprobes.py's)
    if "device" in shown.lower() or shown.endswith(".type"):
        return None  # (`x.device.type == "cuda"`: a device, whatever else the test lists)
    function = _function(node, parents)
    if not isinstance(function, _FUNCTIONS) or not function.name.startswith("test"):
        return None
    for sub in (n for statement in function.body for n in ast.walk(statement)):
        if isinstance(sub, (ast.Tuple, ast.List, ast.Set)):
            values = [_string(e) for e in sub.elts]
            if "cuda" in values and all(v is not None for v in values):
                others = [v for v in values if v not in _DEVICES and not v.startswith("cuda:")]
                if others and all(_LABEL.fullmatch(v) for v in others):
                    return ", ".join(f'"{v}"' for v in others)
    return None


# ----------------------------------------------------------------------------- fake implementations
def _fake_functions(tree: ast.Module) -> dict[str, str]:
    """{function name: how it is registered} of the file's fake (meta) implementations whose name
    is used only by the registration."""
    registered: dict[str, str] = {}
    for call in astcache.nodes(tree, ast.Call):
        name = (astcache.dotted(call.func) or "").rsplit(".", 1)[-1]
        for keyword in call.keywords:
            if keyword.arg in _FAKE_KEYWORDS and isinstance(keyword.value, ast.Name):
                registered[keyword.value.id] = f"passed as `{keyword.arg}=`"
        if name in _FAKE_REGISTRARS:
            for arg in call.args:
                if isinstance(arg, ast.Name):
                    registered[arg.id] = f"given to `{name}(...)`"
    for function in astcache.nodes(tree, _FUNCTIONS):
        for decorator in function.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            name = (astcache.dotted(target) or "").rsplit(".", 1)[-1]
            if name in _FAKE_REGISTRARS:
                registered[function.name] = f"decorated with `{name}`"
    if not registered:
        return {}
    uses: dict[str, int] = {}
    for node in astcache.nodes(tree, ast.Name):
        if node.id in registered:
            uses[node.id] = uses.get(node.id, 0) + 1
    allowed: dict[str, int] = {}
    for call in astcache.nodes(tree, ast.Call):
        for keyword in call.keywords:
            if keyword.arg in _FAKE_KEYWORDS and isinstance(keyword.value, ast.Name):
                allowed[keyword.value.id] = allowed.get(keyword.value.id, 0) + 1
        if (astcache.dotted(call.func) or "").rsplit(".", 1)[-1] in _FAKE_REGISTRARS:
            for arg in call.args:
                if isinstance(arg, ast.Name):
                    allowed[arg.id] = allowed.get(arg.id, 0) + 1
    defined = {f.name for f in astcache.nodes(tree, _FUNCTIONS)}
    return {name: how for name, how in registered.items()
            if name in defined and uses.get(name, 0) <= allowed.get(name, 0)}


# ----------------------------------------------------------------------------- FP8 bytes
def _byte_view(node: ast.AST, parents: dict) -> str | None:
    """`<expr>.view(torch.uint8)` on `node`: the view's dtype, or None."""
    attribute = parents.get(id(node))
    if not (isinstance(attribute, ast.Attribute) and attribute.value is node and attribute.attr == "view"):
        return None
    call = parents.get(id(attribute))
    if not (isinstance(call, ast.Call) and call.func is attribute and len(call.args) == 1 and not call.keywords):
        return None
    dtype = astcache.dotted(call.args[0], strict=True)
    return dtype if dtype in _BYTE_VIEWS else None


def _packed_bytes(node: ast.AST, parents: dict, tree: ast.Module) -> str | None:
    """The byte view, when the FP8 dtype at `node` is the argument of a `.to(...)` cast whose result
    is only viewed as bytes."""
    call = parents.get(id(node))
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "to"
            and (node in call.args or any(k.value is node for k in call.keywords))):
        return None
    view = _byte_view(call, parents)
    if view is not None:
        return view
    assign = parents.get(id(call))
    if not (isinstance(assign, ast.Assign) and assign.value is call and len(assign.targets) == 1
            and isinstance(assign.targets[0], ast.Name)):
        return None
    name = assign.targets[0].id
    scope = _function(assign, parents) or tree
    reads = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name and n is not assign.targets[0]]
    if not reads or any(not isinstance(n.ctx, ast.Load) for n in reads):
        return None
    views = {_byte_view(n, parents) or _upcast(_sliced(n, parents), parents) for n in reads}
    views.discard(_UPCAST)
    return next(iter(views)) if len(views) == 1 and None not in views else None


def _sliced(node: ast.AST, parents: dict) -> ast.AST:
    """`name[:, a:b]`, when `node` is so sliced; else `node`."""
    outer = parents.get(id(node))
    return outer if isinstance(outer, ast.Subscript) and outer.value is node else node


def _upcast(node: ast.AST, parents: dict) -> str | None:
    """`<name>.float()` (`.half()`, `.bfloat16()`, `.to(torch.float32)`): the FP8 values cast back to a
    wider type (a test's reference), or None."""
    attribute = parents.get(id(node))
    if not (isinstance(attribute, ast.Attribute) and attribute.value is node):
        return None
    call = parents.get(id(attribute))
    if not (isinstance(call, ast.Call) and call.func is attribute and not call.keywords):
        return None
    if attribute.attr in _WIDER_METHODS and not call.args:
        return _UPCAST
    if attribute.attr == "to" and len(call.args) == 1 and astcache.dotted(call.args[0], strict=True) in _WIDER:
        return _UPCAST
    return None


# ----------------------------------------------------------------------------- fake modules
def _patches_modules(node: ast.AST) -> bool:
    """A `patch.dict(sys.modules, ...)` call inside `node`."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and (astcache.dotted(sub.func) or "").endswith("patch.dict") and sub.args:
            target = sub.args[0]
            if astcache.dotted(target, strict=True) == "sys.modules" or _string(target) == "sys.modules":
                return True
    return False


def _fake_module(node: ast.AST, parents: dict, tree: ast.Module, module: str) -> str | None:
    """How the test fakes `module` around the import at `node`, or None."""
    names = {module, module.split(".", 1)[0]}
    strings = {n.value for n in astcache.nodes(tree, ast.Constant) if isinstance(n.value, str)}
    if not names & strings:
        return None
    helpers = {f.name: f for f in astcache.nodes(tree, _FUNCTIONS) if _patches_modules(f)}
    for outer in _chain(node, parents):
        if isinstance(outer, (ast.With, ast.AsyncWith)):
            for item in outer.items:
                expr = item.context_expr
                if _patches_modules(expr):
                    return "`patch.dict(sys.modules, ...)`"
                if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in helpers:
                    return f"`{expr.func.id}()`, which patches `sys.modules`"
    function = _function(node, parents)
    if isinstance(function, _FUNCTIONS):
        for sub in ast.walk(function):
            if getattr(sub, "lineno", node.lineno) >= node.lineno:
                continue
            if isinstance(sub, ast.Call) and (astcache.dotted(sub.func) or "").endswith("setitem") \
                    and len(sub.args) >= 2 and astcache.dotted(sub.args[0], strict=True) == "sys.modules" \
                    and _string(sub.args[1]) in names:
                return f"`setitem(sys.modules, {_string(sub.args[1])!r}, ...)`"
            if isinstance(sub, ast.Assign) and any(
                    isinstance(t, ast.Subscript) and astcache.dotted(t.value, strict=True) == "sys.modules"
                    and _string(t.slice) in names for t in sub.targets):
                return "`sys.modules[...] = <fake>`"
    return None


# ----------------------------------------------------------------------------- type aliases
def _in_type_alias(node: ast.AST, parents: dict) -> bool:
    for outer in _chain(node, parents):
        if isinstance(outer, ast.Subscript):
            base = astcache.dotted(outer.value) or ""
            if base.rsplit(".", 1)[-1] in _ALIAS_BASES:
                holder = _chain(outer, parents)
                statement = next((h for h in holder if isinstance(h, ast.stmt)), None)
                if isinstance(statement, ast.Assign) and isinstance(parents.get(id(statement)), ast.Module):
                    return True
        if isinstance(outer, ast.arg) and outer.annotation is not None:
            return _within(node, outer.annotation)
        if isinstance(outer, ast.AnnAssign):
            return _within(node, outer.annotation)
        if isinstance(outer, _FUNCTIONS):
            return outer.returns is not None and _within(node, outer.returns)
        if isinstance(outer, ast.stmt):
            return False
    return False


def _within(node: ast.AST, outer: ast.AST) -> bool:
    return any(n is node for n in ast.walk(outer))


# ----------------------------------------------------------------------------- Nsight switches
def _nsight_switch(node: ast.AST, parents: dict, tree: ast.Module) -> str | None:
    """The Nsight switch behind which the file alone uses the class or function holding `node`."""
    holder = next((n for n in _chain(node, parents) if isinstance(n, (ast.ClassDef, *_FUNCTIONS))), None)
    if isinstance(holder, _FUNCTIONS) and isinstance(parents.get(id(holder)), ast.ClassDef):
        holder = parents[id(holder)]
    if holder is None or _NSIGHT.search(holder.name) is None and not isinstance(holder, ast.ClassDef):
        return None
    uses = [n for n in astcache.nodes(tree, ast.Name) if n.id == holder.name]
    if not uses:
        return None
    switches = set()
    for use in uses:
        switch = None
        previous = use
        for outer in _chain(use, parents):
            if isinstance(outer, ast.If) and any(previous is s for s in outer.body):
                found = next((n for n in _positive_names(outer.test) if _NSIGHT.search(n)), None)
                if found is not None and _is_parameter(found, outer, parents):
                    return None  # (a parameter: optparams20.py decides, from the run's callers)
                if found is not None:
                    switch = found
                    break
            previous = outer
        if switch is None:
            return None
        switches.add(switch)
    return ", ".join(f"`{s}`" for s in sorted(switches))


def _is_parameter(name: str, node: ast.AST, parents: dict) -> bool:
    """`name` is a parameter of the function holding `node` (`def f(..., nsys=False)`): whether a
    call sets it is a question for the whole run (optparams20.py), not for this file."""
    function = next((n for n in _chain(node, parents) if isinstance(n, _FUNCTIONS)), None)
    if function is None:
        return False
    args = function.args
    return any(a.arg == name for a in (*args.posonlyargs, *args.args, *args.kwonlyargs))


def _positive_names(test: ast.AST) -> list[str]:
    """The names and attributes a test reads outside any `not` (`enable and nsys`: both)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return []
    if isinstance(test, ast.BoolOp):
        return [n for value in test.values for n in _positive_names(value)]
    return [n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(test)
            if isinstance(n, (ast.Name, ast.Attribute))]


# ----------------------------------------------------------------------------- a library bound twice
def _library_lines(tree: ast.Module) -> tuple[dict[int, str], dict[int, str]]:
    """({line: attribute} of the uses that run only where the library loaded, {line: attribute} of
    the bindings in a `try` whose handlers raise), for attributes disabled.py leaves alone because
    they are bound twice: once in a disabling `try`, every other time in a raising one."""
    from . import disabled

    uses: dict[int, str] = {}
    loud: dict[int, str] = {}
    for cls in astcache.nodes(tree, ast.ClassDef):
        methods = [m for m in cls.body if isinstance(m, _FUNCTIONS)]
        bindings: dict[str, list] = {}
        for method in methods:
            for node in ast.walk(method):
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                        name = disabled.self_attr(target)
                        if name is not None:
                            bindings.setdefault(name, []).append(node)
        quiet = [(method, t) for method in methods for t in disabled.library_tries(method)]
        for method, (stmt, attr, flags, returns) in quiet:
            if len(bindings.get(attr, ())) < 2:
                continue  # (disabled.py's own case)
            raising = _raising_tries(methods, attr)
            quiet_binding = [s for s in stmt.body if isinstance(s, ast.Assign)
                             and any(disabled.self_attr(t) == attr for t in s.targets)]
            if len(quiet_binding) + len(raising) != len(bindings[attr]):
                continue  # (bound elsewhere too: another value may reach its uses)
            lines: set[int] = set(range(stmt.body[0].lineno, max(s.end_lineno or s.lineno for s in stmt.body) + 1))
            if returns and stmt in method.body:
                lines.update(range((stmt.end_lineno or stmt.lineno) + 1, (method.end_lineno or method.lineno) + 1))
            for other in methods:
                lines.update(disabled.guarded_lines(other, attr, flags))
            for other, tried, binding in raising:
                if tried in other.body:
                    lines.update(range((tried.end_lineno or tried.lineno) + 1, (other.end_lineno or other.lineno) + 1))
                loud[binding.lineno] = attr
            lines |= disabled.loaded_only_helpers(tree, methods, lines)  # (round 31 FC#4: `self._init_comm()`)
            for line in lines:
                uses.setdefault(line, attr)
    return uses, loud


def _raising_tries(methods: list, attr: str) -> list:
    """(method, try, binding) of each `try` binding `self.<attr> = <call>` whose handlers all end
    in a raise."""
    from . import disabled

    out = []
    for method in methods:
        for stmt in astcache.walk_statements(method):
            if not isinstance(stmt, ast.Try) or not stmt.handlers:
                continue
            binding = next((s for s in stmt.body if isinstance(s, ast.Assign) and isinstance(s.value, ast.Call)
                            and any(disabled.self_attr(t) == attr for t in s.targets)), None)
            if binding is None:
                continue
            callee = astcache.dotted(binding.value.func) or ""
            if callee.startswith("torch.") or not disabled.CUDA_LIBRARY.search(callee):
                continue
            if all(h.body and isinstance(h.body[-1], ast.Raise) for h in stmt.handlers):
                out.append((method, stmt, binding))
    return out


# ----------------------------------------------------------------------------- the review
def review(findings: list[Finding], text: str, relpath: str = "") -> list[Finding]:
    """The findings, with the shapes of the module's doc lowered to info (or re-worded) with the reason."""
    candidates = [f for f in findings if _open(f) and f.code in (LEFTOVER, "NPU913", "NPU911", "NPU202")]
    if not candidates:
        return findings
    tree = astcache.parse(text.encode("utf-8"))
    if tree is None:
        return findings
    parents = astcache.parents(tree)
    library = None
    fakes = None
    reasons: dict[int, str] = {}
    notes: dict[int, str] = {}
    for f in candidates:
        source = (f.source or "").strip()
        if f.code == LEFTOVER and source in ('"cuda"', "'cuda'"):
            node = next(iter(_at(tree, f.line, f.column, ast.Constant)), None)
            if node is None:
                continue
            if _patched_method(node, parents):
                notes[id(f)] = PATCHED_METHOD
                continue
            others = _choice_value(node, parents)
            if others:
                reasons[id(f)] = f'{CHOICE_VALUE}"cuda" is compared in a test that lists it beside {others}'
        elif f.code == LEFTOVER and source.startswith("self."):
            if library is None:
                library = _library_lines(tree) if "try" in text else ({}, {})
            attr = library[0].get(f.line)
            if attr is not None and (source == f"self.{attr}" or source.startswith(f"self.{attr}.")) \
                    and f.line not in library[1]:
                from .disabled import LIBRARY_DISABLED

                reasons[id(f)] = f"{LIBRARY_DISABLED} (`self.{attr}`; its other binding raises where it is missing)"
            elif library[1].get(f.line) is not None and source == f"self.{library[1][f.line]}":
                f_note = RAISES_ON_NPU
                notes[id(f)] = f_note
        elif f.code == LEFTOVER and source.startswith("torch."):
            node = next(iter(_at(tree, f.line, f.column, (ast.Attribute, ast.Name))), None)
            if node is not None and astcache.dotted(node, strict=True) == source and _in_type_alias(node, parents):
                reasons[id(f)] = f"{TYPE_ALIAS}`{source}` exists in every torch build"
        elif f.code == "NPU913":
            # (kernels.review may have merged a file's FP8 places already: each must fit)
            if fakes is None:
                fakes = _fake_functions(tree)
            places = [(line, column, (text_ or "").strip()) for line, column, text_ in
                      ((f.line, f.column, f.source), *f.also)]
            nodes = [next(iter(_at(tree, line, column, (ast.Attribute, ast.Name))), None) for line, column, _s in places]
            if any(n is None for n in nodes):
                continue
            functions = [_function(n, parents) for n in nodes]
            if all(isinstance(fn, _FUNCTIONS) and fn.name in fakes and _function(fn, parents) is None
                   for fn in functions):
                shown = sorted({fn.name for fn in functions})
                reasons[id(f)] = ", ".join(f"`{name}` is {fakes[name]}" for name in shown)
                reasons[id(f)] = f"{FAKE_IMPL}{reasons[id(f)]}"
                continue
            if all(s_.startswith("torch.float8") for _l, _c, s_ in places):
                views = {_packed_bytes(n, parents, tree) for n in nodes}
                if len(views) == 1 and None not in views:
                    notes[id(f)] = BYTES_ONLY.format(view=views.pop())
        elif f.code == "NPU911":
            imports = _at(tree, f.line, f.column, (ast.Import, ast.ImportFrom))
            node = next(iter(imports), None)
            if node is None:
                continue
            module = node.names[0].name if isinstance(node, ast.Import) else (node.module or "")
            if not module or getattr(node, "level", 0):
                continue
            how = _fake_module(node, parents, tree, module)
            if how is not None:
                reasons[id(f)] = f"{FAKE_MODULE}`{module}` is faked by {how}"
        elif f.code == "NPU202" and source == "torch.cuda.cudart":
            node = next(iter(_at(tree, f.line, f.column, ast.Attribute)), None)
            switch = _nsight_switch(node, parents, tree) if node is not None else None
            if switch:
                notes[id(f)] = NSIGHT_ONLY.format(switch=switch)
    if not reasons and not notes:
        return findings
    out = []
    for f in findings:
        if id(f) in reasons:
            f = _lower(f, reasons[id(f)])
        elif id(f) in notes:
            note = notes[id(f)]
            f = replace(f, message=f"{f.message} ({note})",
                        severity=f.severity if note == RAISES_ON_NPU else "info")
        out.append(f)
    return out


# ----------------------------------------------------------------------------- one profiling mode
def fold_profiler_branch(findings: list[Finding], text: str) -> list[Finding]:
    """NPU990 places on a profiler name in the body of the `if` that holds an error about another
    profiler construct fold into that error (after the per-file merge)."""
    if not any(f.code == LEFTOVER and _open(f) and _PROFILER.search(f.source or "") for f in findings):
        return findings
    tree = astcache.parse(text.encode("utf-8"))
    if tree is None:
        return findings
    spans = []
    for stmt in astcache.walk_statements(tree):
        if isinstance(stmt, ast.If):
            for block in (stmt.body, stmt.orelse):
                if block and (block[-1].end_lineno or block[-1].lineno) - block[0].lineno < _BRANCH_LINES:
                    spans.append((block[0].lineno, block[-1].end_lineno or block[-1].lineno))
    from .folding import Fold, ours, places_of

    anchors = [f for f in findings if ours(f) and f.code != LEFTOVER and f.severity == "error"
               and _PROFILER.search(f.source or "")]
    if not anchors or not spans:
        return findings
    fold = Fold(findings)
    for finding in findings:
        if not (finding.code == LEFTOVER and _open(finding) and _PROFILER.search(finding.source or "")):
            continue
        for anchor in anchors:
            moved = [p for p in places_of(finding)
                     if any(s[0] <= p[0] <= s[1] and any(s[0] <= q[0] <= s[1] for q in places_of(anchor))
                            for s in spans)]
            if moved and fold.movable(finding, anchor):
                fold.move(finding, moved, anchor)
                break
    return fold.result(name_them=BRANCH)
