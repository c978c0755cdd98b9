"""FP8 dtypes used as data or metadata, not FP8 compute (NPU913; issue #16, round 11).

The round-11 audits read as false the NPU913 errors whose FP8 dtype never reaches an FP8
computation on a device. The sweep (sweep.py, `_fp8` and `_flag_import`) asks `FileData.reason`
about each FP8 place of a file; a place that fits one of these shapes only names an FP8 dtype (the
sweep's "named" kind): a file with no other FP8 place gets one information finding that says so
(`names FP8 dtypes only`, a named skipped scope through moot.NO_WORK), and a file that computes
in FP8 elsewhere keeps its error, anchored there.

* **Metadata.** `torch.float8_e8m0fnu.itemsize` (a size constant), `dtype.is_floating_point`,
  `.is_signed`: the dtype object answers a question, no tensor is made. (`torch.finfo(...)` and
  comparisons `x.dtype == torch.float8_e4m3fn` the sweep already reads as naming.)
* **A supported-dtypes listing.** `SUPPORTED_DTYPES = {torch.half} | ({torch.float8_e4m3fn} if
  HAS_FP8 else set())` in a class body or at module level (a name that says it lists dtypes): an
  operator's capability declaration, read by its dispatcher; with `SUPPORTED_DEVICES = {"cuda"}`
  in the same class the operator is not even a candidate on an NPU host.
* **FP8 data on the CPU.** An FP8 place inside a function (or in the `parametrize`/`expand`
  decorator of a test) whose tensors stay on the CPU: the function (and the file's own functions
  it calls, and its class's `setUp`) names no device other than `"cpu"` (no `"cuda"` string, no
  `device=` other than `"cpu"`, no `.cuda()`/`.to(<not a dtype>)`, no name that holds a device or
  asks a platform, no `torch.cuda.*` call) and builds tensors itself: with `device="cpu"`
  anywhere, or, in a test file that sets no default device, with a torch factory and no device.
  A mocked kernel fed CPU tensors, a weight loader fed an FP8 checkpoint built on the CPU, a
  layer-casting hook on a CPU model: storage, which an NPU host's CPU holds as any other.
* **An import used only for type checks.** `from torchao.float8.float8_linear import Float8Linear`
  (inside a function, or guarded) whose names the file only uses as `isinstance`/`issubclass`
  classes: the class is never built or called here.

Kept as FP8 compute: tensors made or cast on a device (`device="cuda"`, a `device` variable, a
default device set), `torch._scaled_mm` (reported by name, never asked here), FP8 GEMM and quant
kernels (kernels.py raises a names-only file back to an error when it calls a cast helper).
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_TEST_PATH = re.compile(r"(^|/)tests?/|(^|/)test_[^/]*\.py$|_test\.py$")
# attributes of a dtype that only describe it
_METADATA = frozenset({"itemsize", "is_floating_point", "is_signed", "is_complex"})
# names of a listing of supported dtypes
_DTYPE_LISTING = re.compile(r"(?i)^(\w*_)?(supported|allowed|valid)_?\w*dtypes?$|^\w*_dtypes$|^dtypes$")
_DEVICE_STRING = re.compile(r"^(cuda|npu|xpu|hpu|mps|gpu|xla|musa)(:\d+)?$")
# a name that holds a device or asks a platform (`device`, `torch_device`, `self.device`,
# `current_platform`, `is_cuda`, `accelerator`)
_DEVICE_NAME = re.compile(r"(?i)device|cuda|accelerat|platform|(^|_)(gpu|npu|xpu|hpu|mps)s?(_|$)")
_FACTORIES = frozenset({"empty", "zeros", "ones", "full", "rand", "randn", "randint", "randperm", "arange",
                        "tensor", "as_tensor", "from_numpy", "empty_strided", "linspace", "eye"})
# patching calls: their arguments name what is replaced, nothing runs there
_PATCH = re.compile(r"(^|\.)(setattr|setitem|patch|object|delattr)$")
_SETUP = frozenset({"setUp", "setUpClass", "setup_method", "setup_class", "__init__"})
_DTYPE_ARG = re.compile(r"(?i)dtype|^torch\.(u?int\d*|float\w*|bfloat16|half|double|bool|complex\w*|long|short)$")
_PARAMETRIZE = re.compile(r"(^|\.)(parametrize|expand|parameterized)$")
_MAX_DEPTH = 4
# pytest's own fixtures: none brings a device
_PLAIN_FIXTURES = frozenset({"monkeypatch", "tmp_path", "tmpdir", "tmp_path_factory", "capsys", "capfd", "caplog",
                             "request", "recwarn", "mocker", "subtests", "pytestconfig"})

CPU_DATA = "FP8 data on the CPU"
# the start of every reason (moot.NO_WORK: a file whose FP8 places all have one is a named scope)
NOT_COMPUTE = "not FP8 compute: "


class FileData:
    """One file's answers, built on the first FP8 place the sweep asks about."""

    def __init__(self, tree: Optional[ast.Module], relpath: str, text: str) -> None:
        self.tree = tree
        self.relpath, self.text = relpath, text
        self.test_file = bool(_TEST_PATH.search(relpath))
        self.default_device = bool(re.search(r"set_default_device\((?!\s*None\s*\))", text))
        self.parents: dict[int, ast.AST] = {}  # filled a statement at a time (`_index`)
        self.starts: dict[tuple[int, int], list[ast.AST]] = {}
        self.functions: dict[str, ast.AST] = {}  # module-level functions by name
        self._loads: Optional[dict[str, list[ast.Name]]] = None
        self._device_free: dict[int, bool] = {}
        self._cpu: dict[int, bool] = {}
        self._explicit: dict[int, bool] = {}
        # (first line, last line, statement, its parent): a module's statements, a class's own
        if tree is None:
            return
        self._units: list[tuple[int, int, ast.AST, ast.AST]] = []
        self._indexed: set[int] = set()
        for stmt in tree.body:
            if isinstance(stmt, ast.ClassDef):
                self.parents[id(stmt)] = tree
                header = [*stmt.decorator_list, *stmt.bases, *stmt.keywords]
                self._units += [(n.lineno, n.end_lineno or n.lineno, n, stmt) for n in header]
                self._units += [(_first(n), n.end_lineno or n.lineno, n, stmt) for n in stmt.body]
            else:
                self._units.append((_first(stmt), stmt.end_lineno or stmt.lineno, stmt, tree))
        self.functions = {n.name: n for n in tree.body if isinstance(n, _FUNCTIONS)}

    def _index(self, line: int) -> None:
        """The parents and start positions of the nodes of the statements holding `line` (a
        file's FP8 places lie in a few of its statements: the rest is never walked)."""
        for first, last, unit, parent in self._units:
            if first <= line <= last and id(unit) not in self._indexed:
                self._indexed.add(id(unit))
                self.parents[id(unit)] = parent
                stack = [unit]
                while stack:
                    node = stack.pop()
                    if isinstance(node, (ast.Attribute, ast.Name, ast.Import, ast.ImportFrom)):
                        self.starts.setdefault((node.lineno, node.col_offset + 1), []).append(node)
                    for child in ast.iter_child_nodes(node):
                        self.parents[id(child)] = node
                        stack.append(child)

    def _parent(self, node: ast.AST) -> Optional[ast.AST]:
        found = self.parents.get(id(node))
        if found is None and hasattr(node, "lineno") and self.tree is not None:
            self._index(node.lineno)
            found = self.parents.get(id(node))
        return found

    @property
    def loads(self) -> dict[str, list[ast.Name]]:
        """The file's loaded names (read on demand: an import's uses, a helper's callers)."""
        if self._loads is None:
            self._loads = {}
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    self._loads.setdefault(node.id, []).append(node)
        return self._loads

    # ------------------------------------------------------------------ the question
    def reason(self, kind: str, line: int, column: int, name: str = "", unguarded: bool = False) -> Optional[str]:
        """Why the FP8 place at (line, column) is data or metadata, not FP8 compute; None if it
        may compute. `kind` is "Attribute", "Name" or "Import" (the libcst node's kind), `name`
        the dotted name of an Attribute or Name."""
        if self.tree is None:
            return None
        self._index(line)
        if kind == "Import":
            if unguarded:
                return None  # (an unguarded module-level import runs, and may fail, at import time)
            found = next((n for n in self.starts.get((line, column), ()) if isinstance(n, (ast.Import, ast.ImportFrom))),
                         None)
            return self._type_checks_only(found) if found is not None else None
        found = next((n for n in self.starts.get((line, column), ())
                      if isinstance(n, (ast.Attribute, ast.Name)) and astcache.dotted(n) == name), None)
        if found is None:
            return None
        return (self._metadata(found) or self._listing(found) or self._cpu_data(found) or self._cpu_only(found)
                or self._meta_only(found) or self._round17(found))

    def _round17(self, node: ast.AST) -> Optional[str]:
        """A dtype getter, a fresh CPU tensor cast to FP8, a test-support module naming no device
        (fp8cpu16.py, round 17)."""
        from .fp8cpu16 import reason

        return reason(self.relpath, self.text or "", node, self._parent, NOT_COMPUTE)

    def _meta_only(self, node: ast.AST) -> Optional[str]:
        """An FP8 dtype in a meta (shape-only) registration (fp8cpu.meta_reason, round 14)."""
        from .fp8cpu import meta_reason

        return meta_reason(node, self._parent, NOT_COMPUTE)

    def _cpu_only(self, node: ast.AST) -> Optional[str]:
        """A CPU-only module (`*_cpu.py`) or a function asserting `x.device.type == "cpu"` that
        names no other device (fp8cpu.py, round 13)."""
        if self.text is None:
            return None
        from .fp8cpu import cpu_reason

        return cpu_reason(self.relpath, self.text, node, self._parent, f"{NOT_COMPUTE}{CPU_DATA}")

    def cpu_call(self, call: ast.Call) -> bool:
        """Whether a call (kernels.py: a helper named for an FP8 cast, `convert_model_to_fp8(model)`)
        sits in a function whose tensors and modules stay on the CPU (see `_cpu_data`)."""
        return self.tree is not None and (self._cpu_data(call) is not None or self._cpu_only(call) is not None)

    # ------------------------------------------------------------------ metadata
    def _metadata(self, node: ast.AST) -> Optional[str]:
        """`torch.float8_e8m0fnu.itemsize` (the sweep's place is the whole chain, or its dtype)."""
        parent = self._parent(node)
        if isinstance(parent, ast.Attribute) and parent.value is node and parent.attr in _METADATA:
            node = parent
        if isinstance(node, ast.Attribute) and node.attr in _METADATA and "float8_" in (astcache.dotted(node.value) or ""):
            return f"{NOT_COMPUTE}metadata, the dtype's `.{node.attr}`; no tensor is made"
        return None

    # ------------------------------------------------------------------ supported-dtype listings
    def _listing(self, node: ast.AST) -> Optional[str]:
        current, parent = node, self._parent(node)
        while isinstance(parent, (ast.Set, ast.Tuple, ast.List, ast.BinOp, ast.IfExp, ast.Starred)):
            if isinstance(parent, ast.IfExp) and parent.test is current:
                return None
            current, parent = parent, self._parent(parent)
        if current is node or not isinstance(parent, (ast.Assign, ast.AnnAssign)) or parent.value is not current:
            return None
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        names = [t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else "" for t in targets]
        if not names or not all(_DTYPE_LISTING.match(n) for n in names):
            return None
        owner = self._parent(parent)
        why = f"{NOT_COMPUTE}listed in `{names[0]}`, a declaration of supported dtypes"
        if isinstance(owner, ast.ClassDef) and self._cuda_only_class(owner):
            why += f" of `{owner.name}`, whose supported devices are CUDA only"
        return why

    @staticmethod
    def _cuda_only_class(cls: ast.ClassDef) -> bool:
        for stmt in cls.body:
            target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else \
                stmt.target if isinstance(stmt, ast.AnnAssign) else None
            if isinstance(target, ast.Name) and target.id == "SUPPORTED_DEVICES" and stmt.value is not None:
                values = [e.value for e in getattr(stmt.value, "elts", [stmt.value]) if isinstance(e, ast.Constant)]
                return bool(values) and set(values) <= {"cuda"}
        return False

    # ------------------------------------------------------------------ imports for type checks
    def _type_checks_only(self, node: ast.AST) -> Optional[str]:
        bound = [(a.asname or a.name).split(".", 1)[0] for a in node.names]
        if not bound or "*" in bound:
            return None
        for name in bound:
            uses = self.loads.get(name, [])
            if not uses:
                return None
            for use in uses:
                call = self._parent(use)
                holder = call
                if isinstance(call, ast.Tuple):
                    holder = self._parent(call)
                    call_arg = call
                else:
                    call_arg = use
                if not (isinstance(holder, ast.Call) and isinstance(holder.func, ast.Name)
                        and holder.func.id in ("isinstance", "issubclass") and len(holder.args) == 2
                        and holder.args[1] is call_arg):
                    return None
        shown = ", ".join(f"`{n}`" for n in bound)
        return f"{NOT_COMPUTE}imported only for type checks, {shown} used only in `isinstance`/`issubclass`"

    # ------------------------------------------------------------------ data on the CPU
    def _cpu_data(self, node: ast.AST) -> Optional[str]:
        if self.default_device:
            return None
        function, current = None, node
        decorated = None
        while current is not None:
            parent = self._parent(current)
            if isinstance(parent, _FUNCTIONS):
                if current in parent.decorator_list:
                    if not (isinstance(current, ast.Call) and _PARAMETRIZE.search(astcache.dotted(current.func) or "")):
                        return None  # (another decorator: a skip's condition, a registration)
                    decorated = parent
                function = parent  # the outermost function holding the place
            current = parent
        if function is None:
            return None
        if decorated is not None and function is not decorated:
            return None  # (a parametrized function nested in another: judged by its own body)
        if not self.test_file and not self._explicit_cpu(function):
            return None
        if not self._cpu_function(function, 0):
            return None
        where = "its `device=\"cpu\"` tensors" if self._explicit_cpu(function) else "tensors built without a device"
        return (f"{NOT_COMPUTE}{CPU_DATA}: `{function.name}` holds {where} and moves none to a device "
                "(no device string, device variable or CUDA call)")

    def _cpu_function(self, function: ast.AST, depth: int) -> bool:
        """Whether the function keeps its tensors on the CPU: it (with its class's `setUp` and the
        file's functions it calls) names no device but the CPU, builds tensors itself, and takes
        nothing that may bring a device: a test's parameters are parametrized values, plain pytest
        fixtures or device-free fixtures of the file; a helper's callers in the file all keep
        their tensors on the CPU themselves."""
        known = self._cpu.get(id(function))
        if known is not None:
            return known
        if depth > _MAX_DEPTH:
            return False
        self._cpu[id(function)] = False  # (a recursive reference: not proven by itself)
        owner = self._parent(function)
        cls = owner if isinstance(owner, ast.ClassDef) else None
        ok = not (cls is not None and any(isinstance(s, _FUNCTIONS) and s.name in _SETUP
                                          and not self._device_free_fn(s, cls, 0) for s in cls.body))
        ok = ok and self._device_free_fn(function, cls, 0)
        ok = ok and (self._explicit_cpu(function) or self._builds_tensors(function, cls, 0, set()))
        if ok and function.name.startswith("test"):
            ok = self._plain_parameters(function)
        elif ok:
            ok = self._cpu_callers(function, cls, depth)
        self._cpu[id(function)] = ok
        return ok

    def _plain_parameters(self, function: ast.AST) -> bool:
        """A test's parameters bring no device: `self`, parametrized names, plain pytest fixtures
        (`monkeypatch`, `tmp_path`), parameters with a default, or fixtures of this file that
        name no device."""
        decorators = [d for d in function.decorator_list if isinstance(d, ast.Call)]
        if any((astcache.dotted(d.func) or "").endswith(("expand", "parameterized")) for d in decorators):
            return True  # (`@parameterized.expand([...])`: every parameter is a listed value)
        argnames: set[str] = set()
        for decorator in decorators:
            if (astcache.dotted(decorator.func) or "").endswith("parametrize") and decorator.args:
                first = decorator.args[0]
                items = first.elts if isinstance(first, (ast.Tuple, ast.List)) else [first]
                for item in items:
                    if isinstance(item, ast.Constant) and isinstance(item.value, str):
                        argnames.update(n.strip() for n in item.value.split(","))
        arguments = function.args
        defaulted = {a.arg for a in arguments.args[len(arguments.args) - len(arguments.defaults):]} if arguments.defaults else set()
        defaulted |= {a.arg for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None}
        for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
            name = arg.arg
            if name in ("self", "cls") or name in argnames or name in defaulted or name in _PLAIN_FIXTURES:
                continue
            fixture = self.functions.get(name)
            if fixture is not None and _device_free_body(fixture) and not self._callees(fixture, None):
                continue
            return False
        return True

    def _cpu_callers(self, function: ast.AST, cls: Optional[ast.ClassDef], depth: int) -> bool:
        """Every reference to a helper in the file lies in a function that keeps its tensors on
        the CPU (and there is one: a helper called from elsewhere may hand its tensors on)."""
        if function.decorator_list:
            return False  # (a fixture, a registered function: its users are not seen here)
        if cls is None:
            uses = self.loads.get(function.name, [])
        else:
            uses = [n for n in ast.walk(cls) if isinstance(n, ast.Attribute) and n.attr == function.name
                    and isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")]
        if not uses:
            return False
        for use in uses:
            holder, current = None, use
            while current is not None:
                current = self._parent(current)
                if isinstance(current, _FUNCTIONS):
                    holder = current
            if holder is None or holder is function or not self._cpu_function(holder, depth + 1):
                return False
        return True

    def _explicit_cpu(self, function: ast.AST) -> bool:
        """Whether the function builds a tensor with `device="cpu"` (once per function)."""
        known = self._explicit.get(id(function))
        if known is None:
            known = any(isinstance(node, ast.keyword) and node.arg == "device" and _is_cpu(node.value)
                        for node in ast.walk(function))
            self._explicit[id(function)] = known
        return known

    def _callees(self, function: ast.AST, cls: Optional[ast.ClassDef]) -> list[ast.AST]:
        methods = {s.name: s for s in cls.body if isinstance(s, _FUNCTIONS)} if cls is not None else {}
        out = []
        for node in ast.walk(function):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Name) and node.func.id in self.functions:
                out.append(self.functions[node.func.id])
            elif isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id in ("self", "cls") and node.func.attr in methods:
                out.append(methods[node.func.attr])
        return out

    def _device_free_fn(self, function: ast.AST, cls: Optional[ast.ClassDef], depth: int) -> bool:
        known = self._device_free.get(id(function))
        if known is not None:
            return known
        if depth > _MAX_DEPTH:
            return False
        self._device_free[id(function)] = True  # (a recursive call: judged by the rest)
        free = _device_free_body(function) and all(
            self._device_free_fn(callee, cls, depth + 1) for callee in self._callees(function, cls))
        self._device_free[id(function)] = free
        return free

    def _builds_tensors(self, function: ast.AST, cls: Optional[ast.ClassDef], depth: int, seen: set) -> bool:
        """Whether the function (or a function of the file it calls) calls a torch tensor factory."""
        if depth > _MAX_DEPTH or id(function) in seen:
            return False
        seen.add(id(function))
        for node in ast.walk(function):
            if isinstance(node, ast.Call):
                name = astcache.dotted(node.func) or ""
                if name.startswith("torch.") and name.rsplit(".", 1)[-1] in _FACTORIES:
                    return True
                if name.startswith(("torch.nn.", "nn.")) and name.rsplit(".", 1)[-1][:1].isupper():
                    return True  # (`torch.nn.Linear(32, 64)`: a module's parameters, on the CPU)
                if name in ("torch.Generator",):
                    return True
        return any(self._builds_tensors(c, cls, depth + 1, seen) for c in self._callees(function, cls))


def _first(node: ast.AST) -> int:
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])


def _is_cpu(value: ast.AST) -> bool:
    """`"cpu"` or `torch.device("cpu")`."""
    if isinstance(value, ast.Constant):
        return value.value == "cpu"
    return (isinstance(value, ast.Call) and (astcache.dotted(value.func) or "").endswith("device")
            and len(value.args) == 1 and not value.keywords and isinstance(value.args[0], ast.Constant)
            and value.args[0].value == "cpu")


def _device_free_body(function: ast.AST) -> bool:
    """Whether the function's body (its decorators left out) names no device but the CPU."""
    skip: set[int] = set()
    nodes = [*function.body, *getattr(function, "args", ast.arguments()).defaults]
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if id(node) in skip:
            continue
        if isinstance(node, ast.Assign) and _is_cpu(node.value):
            # (`state.device = torch.device("cpu")`: a name set to the CPU, round 32 GB#18; a read
            # of it later is still a device name)
            skip.update(id(t) for t in node.targets if isinstance(t, (ast.Name, ast.Attribute)))
        if isinstance(node, ast.Call):
            name = astcache.dotted(node.func) or ""
            if _PATCH.search(name):
                # `monkeypatch.setattr(torch.cuda, "get_device_capability", ...)`: the target
                # named is replaced, not run (the replacement's body is still read)
                skip.update(id(a) for a in node.args[:2])
            elif _is_cpu(node):
                skip.add(id(node.func))  # (`torch.device("cpu")`)
            elif name.startswith("torch.cuda.") or name.rsplit(".", 1)[-1] in ("cuda", "npu"):
                return False
            elif isinstance(node.func, ast.Attribute) and node.func.attr == "to":
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and arg.value == "cpu":
                        continue
                    if not _DTYPE_ARG.search(astcache.dotted(arg) or ""):
                        return False
        elif isinstance(node, ast.keyword) and node.arg is not None and _DEVICE_NAME.search(node.arg) \
                and not _is_cpu(node.value):
            return False
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _DEVICE_STRING.match(node.value):
            return False
        elif isinstance(node, ast.Name) and _DEVICE_NAME.search(node.id):
            return False
        elif isinstance(node, ast.Attribute) and _DEVICE_NAME.search(node.attr):
            return False
        stack.extend(ast.iter_child_nodes(node))
    return True
