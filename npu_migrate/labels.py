"""Labels, not devices: strings and names the leftover sweep (NPU990) meets that only name something.

The sweep reports every string that spells a CUDA device, backend or variable (`"cuda"`,
`"nccl"`, `"CUDA_HOME"`, `"enable_flash_attention"`) and every attribute named like a CUDA API.
The precision audits of real projects (issue #16) found many of them to be names, not uses:

- a key of a dict that is not the process environment (`metadata["version"]["cuda"]`,
  `env_info["CUDA_HOME"] = ...`, `total_mem["cuda"]`): a label of a table entry;
- the attribute name given to `getattr` / `hasattr` / `setattr` / `delattr` (and to pytest's
  `monkeypatch.setattr`) (`getattr(module, "CUDA_IMPL", True)`), unless `getattr` / `setattr` reach into torch or a
  CUDA-only module (`getattr(torch, "cuda")` gets the CUDA module);
- the value of a member of an Enum or choices class (`NCCL = "nccl"`): an option's value;
- the argument names of `parametrize` / `parameterize` and the arguments of other pytest markers
  (`@parameterize("enable_flash_attention", [True, False])`): the parameter values stay swept;
- the `choices=` of a command-line option (`choices=["cuda", "cpu"]`); its `default=` stays swept;
  a name looked up in a collection that is not the environment (`"CUDA_PROFILER" in activities`);
- the name of an option or flag (`"--nccl-port"`, `"enable_flash_attention"` as a config key);
- CUDA path variables among other variables of a list of optional search-path candidates
  (`_env_paths("CONDA_PREFIX", "CUDA_HOME", "CUDA_PATH")`): unset on an NPU host, skipped;
- a method of an object that is neither torch's nor a CUDA-only module's, named like a CUDA API
  (`_memory_saver.cuda_graph(...)`), and the project's own modules named like one
  (`deepspeed.utils.nvtx.enable_nvtx`): their code is swept where it is defined.

- a field's name in a record (`{"torch": torch.__version__, "cuda": torch.version.cuda}`), a
  mock's method named like a CUDA API (`mock_platform.is_cuda.return_value = False`);
- one of two platform labels chosen by platform (`"rocm" if is_hip else "cuda"`);
- a declared list of supported devices (`_supported_devices = ["cpu", "cuda"]`, `def
  supported_devices(self): return ["cuda"]`), as a class's SUPPORTED_DEVICES already is.

A capability guard (`if not device.startswith("cuda"): raise ValueError(...)`) rejects an NPU
device with an explicit error, and the device of a class's own `cuda()` method is reached only by
`.cuda()` calls (rewritten, or reported as NPU107): their strings are listed as information, with
the reason.

The sweep calls `mark` for each node it enters (Sweep.on_visit); the strings and attributes
found here go into its gates (not reported) or its information reasons (`label_info`).
"""

from __future__ import annotations

import ast
import functools
import re
from typing import Any

import libcst as cst

from . import catalogue
from .families.context import dotted_name, literal_value

Sweep = Any  # sweep.Sweep, which imports this module: its gates, label_info, m (the context), strings


@functools.lru_cache(maxsize=None)
def _table() -> dict:
    return catalogue.read_table("sweep.toml")["labels"].get("names", {})


@functools.lru_cache(maxsize=None)
def _option_name() -> re.Pattern:
    return re.compile(_table()["option_name"])


@functools.lru_cache(maxsize=None)
def _path_variable() -> re.Pattern:
    return re.compile(_table()["path_variable"])


_ENV_VARIABLE = re.compile(r"[A-Z][A-Z0-9_]*")
_WORD = re.compile(r"\w+")
_ATTRIBUTE_CALLS = frozenset({"getattr", "hasattr", "setattr", "delattr"})
_PARAMETRIZE = frozenset({"parametrize", "parameterize"})
_MOCK_ATTRIBUTES = frozenset({"return_value", "side_effect", "call_count", "call_args", "call_args_list",
                              "called", "mock_calls"})
GUARD_REASON = "a capability guard: an NPU device is rejected with an explicit error"
OWN_METHOD_REASON = ("the device of the class's own `cuda()` method, reached only by `.cuda()` calls, which "
                     "the migration rewrites to `.to(...)` or reports (NPU107)")


def _string(node: cst.CSTNode):
    if isinstance(node, cst.SimpleString):
        value = literal_value(node.value)
        return value if isinstance(value, str) else None
    return None


def _strings(node: cst.CSTNode):
    """The string literals in `node` (itself, or the elements of nested tuples, lists, sets)."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.SimpleString):
            yield current
        elif isinstance(current, (cst.Tuple, cst.List, cst.Set)):
            stack.extend(e.value for e in current.elements)
        elif isinstance(current, cst.ConcatenatedString):
            stack.extend((current.left, current.right))


def environment_like(node: cst.CSTNode, sweep: Sweep) -> bool:
    """Whether an expression may be the process environment or a dict built for one: `os.environ`,
    `env`, `self.child_env`, `env_dict`, `os.environ.copy()`, `kwargs["env"]`. Read from its words
    (any word that begins or ends with "env", or holds "environ"; not `env_info`, a report's
    table), so an unknown shape counts as an environment and its keys stay reported."""
    text = sweep.m.source_map.original_text_of(node)
    words = {w.lower() for w in _WORD.findall(text)}
    if not words:
        return True
    return any((w.startswith("env") or w.endswith(("env", "envs")) or "environ" in w)
               and not w.endswith(("info", "infos")) for w in words)  # (`env_info`: a report's table)


def _cuda_module(node: cst.CSTNode, sweep: Sweep) -> bool:
    """`node` names torch, one of its modules, or a CUDA-only module (through the imports)."""
    qual = sweep.m.qualname(node) or ""
    head = qual.split(".", 1)[0]
    return head == "torch" or any(qual == m or qual.startswith(m + ".") for m in sweep.modules)


def mark(sweep: Sweep, node: cst.CSTNode) -> None:
    """Gate (or list as information) the labels under `node`, before the sweep visits them."""
    kind = type(node)
    if kind is cst.SimpleString:
        value = _string(node)
        if value is not None and _option_name().fullmatch(value):
            sweep.gates.add(id(node))  # `"--nccl-port"`, `"enable_flash_attention"`: an option's name
    elif kind is cst.Subscript:
        _subscript(sweep, node)
    elif kind is cst.Call:
        _call(sweep, node)
    elif kind is cst.ClassDef:
        _class(sweep, node)
    elif kind is cst.Decorator:
        _decorator(sweep, node)
    elif kind is cst.If:
        _capability_guard(sweep, node)
    elif kind is cst.Attribute:
        _attribute(sweep, node)
    elif kind in (cst.Tuple, cst.List):
        _path_candidates(sweep, [e.value for e in node.elements])
    elif kind is cst.Dict:
        _record_keys(sweep, node)
    elif kind is cst.IfExp:
        _platform_choice(sweep, node)
    elif kind is cst.Comparison:
        _membership(sweep, node)
    elif kind is cst.Assign:
        _capability_list(sweep, [t.target for t in node.targets], node.value)
    elif kind is cst.FunctionDef:
        _capability_method(sweep, node)


def _subscript(sweep: Sweep, node: cst.Subscript) -> None:
    """`metadata["version"]["cuda"]`, `env_info["CUDA_HOME"]`: a key of a dict that is not the
    environment is a label (`os.environ["CUDA_HOME"]` stays reported, when no rule claimed it)."""
    keys = [e.slice.value for e in node.slice if isinstance(e.slice, cst.Index)]
    keys = [k for k in keys if _string(k) is not None]
    if not keys or environment_like(node.value, sweep):
        return
    if isinstance(node.value, cst.Name) and node.value.value in _module_dicts(sweep):
        return  # a table this file defines: its keys decide (sweep.visit_Subscript, _label_keys)
    sweep.gates.update(id(k) for k in keys)


def _module_dicts(sweep: Sweep) -> frozenset:
    """Names bound at module level to a dict display (`OTHER = {"cpu": 1}`), once per file."""
    names = getattr(sweep, "_labels_module_dicts", None)
    if names is None:
        tree = sweep.m._ast()
        found = set()
        for statement in getattr(tree, "body", ()):
            targets = statement.targets if isinstance(statement, ast.Assign) else (
                [statement.target] if isinstance(statement, ast.AnnAssign) else [])
            if isinstance(getattr(statement, "value", None), ast.Dict):
                found.update(t.id for t in targets if isinstance(t, ast.Name))
        names = sweep._labels_module_dicts = frozenset(found)
    return names


def _record_keys(sweep: Sweep, node: cst.Dict) -> None:
    """`{"torch": torch.__version__, "cuda": torch.version.cuda, "warmup_ms": 10}`: a record of named
    fields, where "cuda" is a field's name. Not a table of per-device or per-platform values (a
    sibling key that is a device type or a platform label: sweep._label_keys decides those)."""
    keys = [e.key for e in node.elements if isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString)]
    values = [_string(k) for k in keys]
    others = {v for v in values if v is not None and v != "cuda"}
    if "cuda" not in values or not others:
        return
    devices = {"cpu", "xpu", "mps", "npu", "hpu", "meta", "xla", "gpu", "auto", "tpu", "hip", "rocm", "musa", "mlu"}
    if others & devices or any(o.startswith("cuda:") for o in others):
        return
    sweep.gates.update(id(k) for k, v in zip(keys, values) if v == "cuda")


def _platform_choice(sweep: Sweep, node: cst.IfExp) -> None:
    """`prefix = "rocm" if is_hip else "cuda"`: one of two platform labels chosen by platform (a
    library's file prefix, a build's name; ROCm's torch device is "cuda" too), not a device."""
    sides = (node.body, node.orelse)
    values = [_string(side) for side in sides]
    if "cuda" in values and any(v in sweep_platform_labels() for v in values if v != "cuda"):
        sweep.gates.update(id(side) for side, value in zip(sides, values) if value == "cuda")


@functools.lru_cache(maxsize=None)
def sweep_platform_labels() -> frozenset:
    return frozenset(catalogue.read_table("sweep.toml")["labels"]["platform_labels"]) & {"hip", "rocm"}


def _membership(sweep: Sweep, node: cst.Comparison) -> None:
    """`"CUDA_PROFILER" in profile_activities`: a name looked up in a collection that is not the
    environment (an option's chosen values); `"CUDA_HOME" in os.environ` stays reported."""
    if len(node.comparisons) != 1 or not isinstance(node.comparisons[0].operator, (cst.In, cst.NotIn)):
        return
    value = _string(node.left)
    if value is not None and _ENV_VARIABLE.fullmatch(value) \
            and not environment_like(node.comparisons[0].comparator, sweep):
        sweep.gates.add(id(node.left))


def _call(sweep: Sweep, node: cst.Call) -> None:
    name = dotted_name(node.func) or ""
    last = name.rsplit(".", 1)[-1]
    if last in _ATTRIBUTE_CALLS and name not in _ATTRIBUTE_CALLS and not name.startswith("monkeypatch."):
        last = ""  # (`obj.setattr(...)` of another API; `monkeypatch.setattr(obj, "cuda", ...)` is a test's)
    positional = [a for a in node.args if a.keyword is None and not a.star]
    if last in _ATTRIBUTE_CALLS and len(positional) >= 2 and _string(positional[1].value) is not None:
        # `getattr(module, "CUDA_IMPL", True)`: an attribute's name; `getattr(torch, "cuda")` gets
        # the CUDA module itself (`hasattr` only asks)
        if last in ("hasattr", "delattr") or not _cuda_module(positional[0].value, sweep):
            sweep.gates.add(id(positional[1].value))
    mapped = any(arg.keyword is not None and arg.keyword.value in ("type", "callback")
                 and (dotted_name(arg.value) or "").rsplit(".", 1)[-1] in _SHIM_DEVICE_ARGS for arg in node.args)
    for arg in node.args:
        if arg.keyword is not None and arg.keyword.value == "choices":
            # `add_argument("--device", choices=["cuda", "cpu"], default="cuda")`: the values an
            # option accepts are labels; its default is what runs (still swept)
            sweep.gates.update(id(s) for s in _strings(arg.value))
        elif mapped and arg.keyword is not None and arg.keyword.value == "default":
            # `add_argument("--device", default="cuda:0", type=npu_compat.device_arg)`: argparse
            # (and click, with the callback) passes a string default through the shim's mapping
            # too, so "cuda" means the accelerator there: what npu-migrate's NPU603 wrote
            sweep.gates.update(id(s) for s in _strings(arg.value))
    _path_candidates(sweep, [a.value for a in positional])


# the shim's option converters (NPU603): a device string they receive is mapped on an NPU host
# (`dist_backend`: a `--backend` default "nccl", mapped to "hccl": devflows24.py)
_SHIM_DEVICE_ARGS = ("device_arg", "click_device_arg", "dist_backend")


def _path_candidates(sweep: Sweep, values: list[cst.CSTNode]) -> None:
    """`_env_paths("CONDA_PREFIX", "CUDA_HOME", "CUDA_PATH")`, `["CUDA_HOME", "ROCM_PATH",
    "CONDA_PREFIX"]`: CUDA path variables among other variables, candidates of a search path that
    an NPU host, where they are unset, skips. Only CUDA itself (`("CUDA_HOME", "CUDA_PATH")`, the
    CUDA toolkit looked for) stays reported."""
    if len(values) < 2 or not all(_string(v) is not None for v in values):
        return
    names = [_string(v) for v in values]
    if not all(_ENV_VARIABLE.fullmatch(n) for n in names):
        return
    cuda = [v for v, n in zip(values, names) if sweep.strings.fullmatch(n)]
    others = [n for n in names if not sweep.strings.fullmatch(n)]
    if cuda and others and all(_path_variable().fullmatch(_string(v)) for v in cuda):
        sweep.gates.update(id(v) for v in cuda)


def _capability_name(name: str) -> bool:
    """`SUPPORTED_DEVICES`, `_supported_devices`, `supported_device_types` (sweep.toml's
    capability_names, in any case, with leading underscores)."""
    return name.lstrip("_").lower() in _capability_names()


@functools.lru_cache(maxsize=None)
def _capability_names() -> frozenset:
    return frozenset(n.lower() for n in catalogue.read_table("sweep.toml")["labels"].get("capability_names", ()))


def _capability_list(sweep: Sweep, targets: list[cst.CSTNode], value: cst.CSTNode) -> None:
    """`_supported_devices = ["cpu", "cuda"]` at any level: the devices a component declares it
    supports (as a class's SUPPORTED_DEVICES, sweep.visit_ClassDef): "npu" added there would claim
    support it does not have; its checks reject an NPU device explicitly."""
    if isinstance(value, (cst.Tuple, cst.List, cst.Set)) and any(
            isinstance(t, (cst.Name, cst.Attribute)) and _capability_name(t.attr.value if isinstance(t, cst.Attribute)
                                                                          else t.value) for t in targets):
        _gate_capabilities(sweep, list(_strings(value)))


def _gate_capabilities(sweep: Sweep, strings: list[cst.SimpleString]) -> None:
    """(a list that names "npu" too is platform-aware: its "cuda" stays listed, as NPU991)"""
    if not any(_string(s) == "npu" for s in strings):
        sweep.gates.update(id(s) for s in strings)


def _capability_method(sweep: Sweep, node: cst.FunctionDef) -> None:
    """`def supported_devices(self): return ["cuda"]`: the same declaration, as a method."""
    if not _capability_name(node.name.value):
        return
    stack = [node.body]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Return) and current.value is not None \
                and isinstance(current.value, (cst.Tuple, cst.List, cst.Set, cst.SimpleString)):
            _gate_capabilities(sweep, list(_strings(current.value)))
        elif not isinstance(current, (cst.FunctionDef, cst.ClassDef)):
            stack.extend(current.children)


def _class(sweep: Sweep, node: cst.ClassDef) -> None:
    _enum_class(sweep, node)
    _own_cuda_method(sweep, node)


def _own_cuda_method(sweep: Sweep, node: cst.ClassDef) -> None:
    """`def cuda(self, device=None): return self.to(device or "cuda")` in a class: the device its own
    `cuda()` method stands for. Only a `.cuda()` call reaches it, and the migration rewrites those
    to `.to(...)` (or reports them, NPU107, in a file that defines the method): information."""
    body = node.body.body if isinstance(node.body, cst.IndentedBlock) else ()
    for method in body:
        if isinstance(method, cst.FunctionDef) and method.name.value == "cuda":
            stack = [method.body]
            while stack:
                current = stack.pop()
                if isinstance(current, cst.SimpleString) and re.fullmatch(r"cuda(:\d+)?", _string(current) or ""):
                    sweep.label_info.setdefault(id(current), OWN_METHOD_REASON)
                stack.extend(current.children)


def _enum_class(sweep: Sweep, node: cst.ClassDef) -> None:
    """`class Backend(str, enum.Enum): NCCL = "nccl"`: a member's value is an option's value (what
    the user may choose), not a backend argument; where it is passed on, that call is swept."""
    bases = {(dotted_name(b.value) or "").rsplit(".", 1)[-1] for b in node.bases}
    if not any(re.search(_table()["enum_base"], b) for b in bases if b):
        return
    body = node.body.body if isinstance(node.body, cst.IndentedBlock) else ()
    for line in body:
        for small in line.body if isinstance(line, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Assign) and all(isinstance(t.target, cst.Name) for t in small.targets) \
                    and _string(small.value) is not None:
                sweep.gates.add(id(small.value))


def _decorator(sweep: Sweep, node: cst.Decorator) -> None:
    """`@parameterize("enable_flash_attention", [True, False])`, `@pytest.mark.parametrize("device",
    ["cuda"])`: the argument names are labels (the values stay swept); the arguments of another
    pytest marker (`@pytest.mark.runs_on(["cuda"])`) label the test."""
    call = node.decorator
    if not isinstance(call, cst.Call):
        return
    name = dotted_name(call.func) or ""
    last = name.rsplit(".", 1)[-1]
    if last in _PARAMETRIZE:
        names = [a for a in call.args if a.keyword is not None and a.keyword.value == "argnames"] \
            or [a for a in call.args[:1] if a.keyword is None]
        for arg in names:
            sweep.gates.update(id(s) for s in _strings(arg.value))
    elif ".mark." in f".{name}" and last not in ("skipif", "xfail"):
        # (skipif/xfail conditions are tests, swept as usual; their `reason=` is prose)
        for arg in call.args:
            sweep.gates.update(id(s) for s in _strings(arg.value))


def _capability_guard(sweep: Sweep, node: cst.If) -> None:
    """`if not device.startswith("cuda"): raise ValueError("... only supports CUDA")`, `if device
    != "cuda": raise ...`: the code declares CUDA the only device it supports, and an NPU host
    gets an explicit error. Listed as information: the feature needs porting by hand, or stays
    unavailable there."""
    first = node.body.body[0] if node.body.body else None
    if isinstance(first, cst.SimpleStatementLine):
        first = first.body[0] if first.body else None
    if not isinstance(first, cst.Raise):
        return
    test = node.test
    strings: list[cst.SimpleString] = []
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = test.expression
        if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) \
                and inner.func.attr.value == "startswith" and inner.args:
            strings = list(_strings(inner.args[0].value))
    elif isinstance(test, cst.Comparison) and len(test.comparisons) == 1 \
            and isinstance(test.comparisons[0].operator, (cst.NotEqual, cst.NotIn)):
        strings = [o for o in (test.left, test.comparisons[0].comparator) if _string(o) is not None]
    for string in strings:
        if _string(string) in ("cuda", "nccl"):
            sweep.label_info.setdefault(id(string), GUARD_REASON)


def _attribute(sweep: Sweep, node: cst.Attribute) -> None:
    """`_memory_saver.cuda_graph(...)`: a method named like a CUDA API of an object that is neither
    torch's nor a CUDA-only module's; `deepspeed.utils.nvtx.enable_nvtx` in DeepSpeed: the
    project's own module. Names, not CUDA APIs (their code is swept where it is defined)."""
    chain = dotted_name(node)
    if chain is None:
        return
    parts = chain.split(".")
    if _cuda_module(node, sweep) and not sweep._own(sweep.m.qualname(node) or ""):
        return
    qual = sweep.m.qualname(node)
    if qual is None and parts[0] in sweep.m.first_party \
            and re.search(rf"(?m)^[ \t]*(import|from)[ \t]+{re.escape(parts[0])}\b", sweep.m.file_text()):
        qual = chain  # `import deepspeed` in DeepSpeed (the rules resolve only torch's names)
    if qual is not None and sweep._own(qual) and not {"cuda", "is_cuda"} & set(parts[1:]) \
            and qual.split(".", 1)[0] not in ("torch",):
        sweep.gates.add(id(node))  # the project's own module (`deepspeed.utils.nvtx`)
        return
    mocked = next((i for i, p in enumerate(parts) if p in _MOCK_ATTRIBUTES or p.startswith("assert_called")), None)
    if mocked is not None and any(p in sweep.attributes for p in parts[1:mocked]):
        sweep.gates.add(id(node))  # `mock_platform.is_cuda.return_value`: a mock's method, by name
        return
    if len(parts) >= 2 and parts[-1] in _table()["object_methods"] \
            and not any(p in sweep.attributes for p in parts[:-1]) and not _cuda_module(node.value, sweep):
        sweep.gates.add(id(node))
