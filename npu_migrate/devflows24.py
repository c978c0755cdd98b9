"""Rewrites instead of NPU990 warnings where a "cuda" value provably reaches a device (issue #16).

Round-24 audit BO#14, BO#17 and BO#21: true failures reported as the vague NPU990 "string
\"cuda\"" warning although the value provably reaches a device position, so the rewriter could
handle them (invariant 4: only provable device expressions change). Decided per construct, while
the device and cli_env families traverse a file:

- **A `device_map` keyword of `from_pretrained(...)`, `pipeline(...)` or `dict(...)`** (BO#21,
  families/context.py `string_role` calls `device_map_position`): transformers' and diffusers'
  `from_pretrained(..., device_map="cuda:0")` and transformers' `pipeline(...)` read a device
  string as the one device of the whole model (torch_npu's "npu:0" too), and
  `dict(device_map="cuda:0", dtype=...)` is the keyword mapping handed on to them, as the dict
  literal key `"device_map": "cuda"` (already a device position: a key named like a device) is.
  The literal gets the NPU102 rewrite (`npu_compat.device_str(0)`, `npu_compat.device_type()`:
  "cuda:0" and "cuda" on a CUDA or CPU host, the NPU on an NPU host). The calls and the keyword
  are a table (rules/device.toml [device_map]); a map (`{"": "cuda"}`), "auto" and "balanced"
  are not "cuda" literals and stay as written, and the keyword of any other call (accelerate's
  `dispatch_model` takes a map or a strategy, never a device) keeps the NPU990 warning.
- **An argparse `--device` default whose value reaches a device through the file's functions**
  (BO#14, BO#17; families/cli_env.py calls `option_flows` for the NPU603 rewrite
  `type=npu_compat.device_arg` that singles23.py introduced for the direct flow): the parsed
  value `<ns>.<dest>` (`<ns>` bound to `parse_args(...)`) is followed through the file:
  passed positionally or by keyword to a function defined in the file (`run_evaluation(...,
  args.device, ...)`, `main(args.device)`), bound to a plain name (`device = args.device`), or the
  whole namespace passed to such a function under any parameter name (`main(cfg)` reading
  `cfg.device`). The value flows when some use reaches a device position (a device keyword,
  `torch.device(x)`, `.to(x)`, a `device_map` position above) and no use in the file, nor in
  the file's functions it is handed to, treats it as a label: a comparison (`args.device ==
  "cuda"`, `device in ("cuda", ...)`; `device is None` is no label), a subscript or dict key
  (`{"cuda": 1e-3}[device]`), a string method or slice (`.startswith("cuda")`, `device[:4]`),
  an f-string that is no message.
  There the code chooses by the name "cuda", and the rewrite would change the choice: the option
  keeps its NPU990 warning, for singles23's direct flow too (`singles23.device_option_flows`
  found one device read; this also asks that no read contradicts it). A message (`print(f"on
  {device}")`, a log call) names the device the value now is; a hand-on to a call outside the
  file, the namespace handed outside, a store to `args.device` neither prove nor refute (as the
  direct flow always read them): where such a hand-on is the only way the value goes, no device
  position is reached, the flow is not proven, and the NPU990 stays.
- **An argparse `--backend` default "nccl" whose value reaches `init_process_group`**
  (families/cli_env.py calls `option_flows(..., kind="backend")`): the same proof with the
  process-group positions as the device positions (the `backend=` keyword or the first argument
  of `init_process_group(...)`, `new_group(backend=...)`). The option gets `type=npu_compat.
  dist_backend` (NPU603): argparse applies it to the default too, so on an NPU host "nccl"
  becomes "hccl" (and a user's `--backend nccl` as well), elsewhere the value is unchanged. The
  NPU304 "backend comes from a value npu-migrate cannot see" on `init_process_group(backend=
  args.backend)` then reads a value the shim converts: `review` lowers it to info naming the
  option's line. A `--backend` read anywhere else (compared, printed into a key) keeps both
  findings.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from typing import Optional

from . import astcache, catalogue
from .findings import Finding

DEVICE = "device"
BACKEND = "backend"
# process-group calls whose `backend=` keyword or first positional argument is a backend
_GROUP_CALLS = frozenset({"init_process_group", "new_group"})
_BACKEND_KEYWORDS = frozenset({"backend"})


@functools.lru_cache(maxsize=None)
def _device_map_table() -> tuple[frozenset, frozenset]:
    t = catalogue.device_table().get("device_map", {})
    return frozenset(t.get("keywords", ())), frozenset(t.get("calls", ()))


def device_map_position(keyword: Optional[str], call_name: Optional[str]) -> bool:
    """`keyword=` of a call whose last identifier is `call_name` takes a device string (module doc)."""
    keywords, calls = _device_map_table()
    return keyword in keywords and call_name in calls


@functools.lru_cache(maxsize=None)
def _prose_calls() -> frozenset:
    return frozenset(catalogue.read_table("sweep.toml")["commands"]["prose_calls"])


def _last(node: ast.AST) -> Optional[str]:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


class _Flow:
    """One file's uses of one option's parsed value (module doc)."""

    def __init__(self, tree: ast.Module, dest: str, keywords: frozenset, kind: str) -> None:
        self.tree = tree
        self.dest = dest
        self.keywords = keywords
        self.kind = kind
        self.parents: dict[int, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node
        self.functions = {f.name: f for f in tree.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.reached = False
        self.seen: set = set()

    # ------------------------------------------------------------------ where a value goes
    def _position(self, call: ast.Call, node: ast.AST) -> bool:
        """`node` (an argument of `call`) sits in a device (or process-group) position."""
        name = astcache.dotted(call.func) or ""
        last = _last(call.func)
        keyword = next((k.arg for k in call.keywords if k.value is node), None)
        if self.kind == BACKEND:
            if last not in _GROUP_CALLS:
                return False
            return keyword in _BACKEND_KEYWORDS or (keyword is None and bool(call.args) and call.args[0] is node)
        if keyword is not None:
            return keyword in self.keywords or device_map_position(keyword, last)
        if not call.args or call.args[0] is not node:
            return False
        return name == "torch.device" or (isinstance(call.func, ast.Attribute) and call.func.attr == "to"
                                          and len(call.args) == 1)

    def parent(self, node: ast.AST) -> Optional[ast.AST]:
        """The parent of `node`, the call itself for the value of a keyword argument."""
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.keyword):
            parent = self.parents.get(id(parent))
        return parent

    def _enclosing(self, node: ast.AST) -> ast.AST:
        parent = self.parents.get(id(node))
        while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            parent = self.parents.get(id(parent))
        return parent if parent is not None else self.tree

    def _parameter(self, call: ast.Call, node: ast.AST) -> Optional[tuple[ast.AST, str]]:
        """The parameter of a function defined in the file that `node`, an argument of `call`, binds."""
        if not isinstance(call.func, ast.Name) or call.func.id not in self.functions:
            return None
        function = self.functions[call.func.id]
        params = [a.arg for a in function.args.posonlyargs + function.args.args]
        if node in call.args:
            index = call.args.index(node)
            if any(isinstance(a, ast.Starred) for a in call.args[:index + 1]) or index >= len(params):
                return None
            return function, params[index]
        keyword = next((k.arg for k in call.keywords if k.value is node), None)
        names = params + [a.arg for a in function.args.kwonlyargs]
        return (function, keyword) if keyword in names else None

    def _in_message(self, node: ast.AST) -> bool:
        """`node` is only formatted into a message: print/log argument, or an f-string one is."""
        parent = self.parent(node)
        if isinstance(parent, ast.FormattedValue):
            joined = self.parent(parent)
            node, parent = joined, self.parent(joined)
        return (isinstance(parent, ast.Call) and node is not parent.func and _last(parent.func) in _prose_calls())

    def value(self, node: ast.AST) -> bool:
        """No use of the value `node` treats it as a label (module doc); records a device position
        it reaches. False: a comparison, a subscript or key, a string method, an f-string that is
        no message, here or where a function of the file or a plain name takes it on."""
        parent = self.parent(node)
        if isinstance(parent, ast.Call) and node is not parent.func:
            if self._position(parent, node):
                self.reached = True
                return True
            target = self._parameter(parent, node)
            return target is None or self.name_uses(*target)  # (another call: no proof either way)
        if isinstance(parent, ast.FormattedValue):
            return self._in_message(node)
        if isinstance(parent, ast.Compare):  # (`device is None` asks whether one was given)
            return all(isinstance(op, (ast.Is, ast.IsNot)) for op in parent.ops) and all(
                isinstance(c, ast.Constant) and c.value is None for c in [parent.left, *parent.comparators] if c is not node)
        if isinstance(parent, ast.Subscript) or (isinstance(parent, ast.Attribute) and parent.value is node):
            return False  # (`table[device]`, `device[:4]`, `device.startswith("cuda")`)
        if isinstance(parent, ast.Dict) and any(k is node for k in parent.keys):
            return False
        if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            return all(self.name_uses(self._enclosing(parent), n) for n in names)
        return True

    def name_uses(self, scope: ast.AST, name: str) -> bool:
        """No load of `name` in `scope` treats the value as a label."""
        if (id(scope), name) in self.seen:
            return True
        self.seen.add((id(scope), name))
        return all(self.value(n) for n in loads(scope, name))

    def namespace(self, scope: ast.AST, name: str) -> bool:
        """No read of this option from the namespace `name` in `scope` (or in the functions of
        the file it is handed to, under any parameter name) treats the value as a label."""
        key = ("ns", id(scope), name)
        if key in self.seen:
            return True
        self.seen.add(key)
        for node in loads(scope, name):
            parent = self.parent(node)
            if isinstance(parent, ast.Attribute) and parent.value is node:
                if parent.attr == self.dest and isinstance(parent.ctx, ast.Load) and not self.value(parent):
                    return False
                continue  # (another option; a store replaces the value, it does not read it)
            if isinstance(parent, ast.Call) and node is not parent.func:
                if _last(parent.func) == "getattr" and len(parent.args) >= 2 and parent.args[0] is node:
                    read = parent.args[1]
                    if isinstance(read, ast.Constant) and read.value == self.dest and not self.value(parent):
                        return False
                    continue
                target = self._parameter(parent, node)
                if target is not None and not self.namespace(*target):
                    return False
        return True


def _binds(function: ast.AST, name: str) -> bool:
    """The function (or lambda) has its own variable `name`: a parameter or an assignment."""
    args = function.args
    params = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
    if any(a.arg == name for a in params):
        return True
    return isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(function))


def loads(scope: ast.AST, name: str):
    """The loads of `name` in `scope`, not in nested functions that have their own `name`."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and _binds(node, name):
            continue
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _parsed(tree: ast.Module) -> list[tuple[ast.AST, str]]:
    out = []
    for node in astcache.nodes(tree, (ast.Assign,)):
        if isinstance(node.value, ast.Call) and (astcache.dotted(node.value.func) or "").endswith("parse_args"):
            out.extend((node, t.id) for t in node.targets if isinstance(t, ast.Name))
    return out


@functools.lru_cache(maxsize=128)
def option_flows(text: str, dest: str, keywords: frozenset, kind: str = DEVICE) -> bool:
    """The parsed value of the option `dest` reaches a device (`kind` "backend": process-group
    backend) position through the file and no use contradicts it (module doc)."""
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return False
    parsed = _parsed(tree)
    if not parsed:
        return False
    flow = _Flow(tree, dest, keywords, kind)
    for assign, name in parsed:
        if not flow.namespace(flow._enclosing(assign), name):
            return False
    return flow.reached


# ----------------------------------------------------------------------------- NPU304 on a converted option
_CANNOT_SEE = "Process-group backend comes from a value npu-migrate cannot see"
BACKEND_OPTION = "Command-line process-group backend option"


def _option_dest(call: ast.Call) -> Optional[str]:
    for keyword in call.keywords:
        if keyword.arg == "dest" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
            return keyword.value.value
    for arg in call.args:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
            return arg.value[2:].replace("-", "_")
    return None


def review(findings: list[Finding], text: str) -> list[Finding]:
    """NPU304 warnings on `init_process_group(backend=<ns>.<dest>)` where `--<dest>` is an option
    this file's NPU603 converted with `npu_compat.dist_backend`: lowered to info (module doc)."""
    converted = {f.line for f in findings if f.code == "NPU603" and f.message.startswith(BACKEND_OPTION)}
    if not (converted or "dist_backend" in text) or not any(f.code == "NPU304" and f.severity == "warning" and f.message.startswith(_CANNOT_SEE)
                                for f in findings):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    options = {}
    for call in astcache.nodes(tree, (ast.Call,)):
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
            continue
        dest = _option_dest(call)
        if dest is None:
            continue
        if any(call.lineno <= line <= (call.end_lineno or call.lineno) for line in converted):
            options[dest] = call.lineno
        elif any(k.arg == "type" and _last(k.value) == "dist_backend" for k in call.keywords) \
                and option_flows(text, dest, frozenset(), BACKEND):
            options[dest] = call.lineno  # (converted already: `check` of a migrated tree)
    out = []
    for finding in findings:
        source = finding.source or ""
        attr = source.rpartition(".")[2]
        if (finding.code == "NPU304" and finding.severity == "warning" and finding.message.startswith(_CANNOT_SEE)
                and "." in source and attr in options):
            finding = dataclasses.replace(finding, severity="info", message=(
                f"{finding.message} (information: it is the option `--{attr.replace('_', '-')}` (line "
                f"{options[attr]}), converted with `npu_compat.dist_backend` (NPU603), so on an NPU host its "
                "\"nccl\" default, and a user's \"nccl\", reach the process group as \"hccl\"; a backend named "
                "otherwise reaches it as given)"))
        out.append(finding)
    return out
