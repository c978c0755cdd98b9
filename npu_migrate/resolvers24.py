"""The project's own device resolver and accelerator abstraction, read for what they do on an NPU
host (issue #16, round-24 audit BQ#30 and BQ#28). Whole run, from runplan.whole_run_passes, after
platforms.py folded the config devices and its scopes were named.

* **A config device a resolver remaps** (`review_config_devices`, BQ#30). platforms.py folds the
  NPU706 findings of the configs setting `device: cuda` into one, at info when the project reads
  the key through a device resolver of its own that knows "npu" (`get_device(device=cfg.device)`).
  That resolver may do more than know the NPU: torchtune's `get_device` hands the device to a
  helper that, where no index is given, rebuilds it from the detected device type:

      def _setup_device(device):
          ...
          if device.index is None:
              device = torch.device(type=device_type, index=local_rank)   # device_type: "npu" there

  so an index-less `cuda` becomes the NPU device there. Read here: the resolver (or a function of
  its file it calls) rebinds its device under `if <device>.index is None:` to `torch.device(...)`
  whose type is not a literal and not the device's own type. When it does and the value names no
  index, every read of the key in the run's Python code decides:

  - read only as the resolver's argument (directly, or through a local bound to the value) or
    compared with a string (`cfg.device == "cpu"`): the value runs as written there, and the
    finding becomes a named scope ("runs as written on an NPU host (NPU706): a config device the
    project's resolver maps to the detected device: ...");
  - read also without the resolver (`device_type = cfg.device` handed to
    `get_distributed_backend(device_type)`, which picks NCCL for "cuda"; `torch.device(cfg.device)`,
    `.to(cfg.device)`): the finding stays, at warning, and says so: the resolver maps the value,
    that read does not (each such read named, the first few by file and line).

  A resolver that only keeps the device as given (`torch.device(device.type, 0)`), an indexed value
  (`cuda:1`), a call the module cannot parse: the finding stays as platforms.py wrote it.

* **A "CUDA graph" check in front of the accelerator's graph capture** (`review_graph_gates`,
  BQ#28). NPU108 keeps `if device.type != "cuda": raise ValueError("... CUDA graph ...")` meaning
  CUDA because its text names CUDA graphs. Where the code that check guards (the rest of the
  function after such an exit, or the body of an `==` check; with the methods of its class and the
  functions of its file it calls, a few steps) captures only through the project's accelerator
  abstraction (`get_accelerator().create_graph()`, `capture_to_graph()`, `replay_graph()`, or a
  local bound to `get_accelerator()`), touches no `torch.cuda` graph API itself, and a class of the
  run in a module named for the NPU defines every such method it calls (DeepSpeed's
  `NPU_Accelerator.create_graph` returning `torch.npu.NPUGraph()`), the feature is not CUDA-only:
  the message says so, names the methods and the NPU class, and asks for the check to be widened
  (a warning: the check keeps the NPU from a path it supports). A check whose text names another
  CUDA-only feature (FP8, Triton, FlashAttention 3), guarded code calling `torch.cuda`, a graph
  method the NPU class does not define (or defines only to raise): kept as it was.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache
from .moot import to_scopes
from .modpaths import result_bytes

# moot.AS_WRITTEN phrase: the scope moot.to_scopes names for a config value the resolver maps
REMAPPED = "a config device the project's resolver maps to the detected device"
MAX_SHOWN = 3

_RESOLVER = re.compile(r"through its device resolver `(\w+)` \(([^():]+):(\d+)\)")
_VALUE = re.compile(r"Device `([^`]*)`")
_CONFIG_NAME = re.compile(r"_?(?:cfg|config|conf|args|opts?|hparams|params|settings)\w*", re.IGNORECASE)


# ------------------------------------------------------------------ helpers


def _functions(tree: ast.AST) -> dict[str, ast.AST]:
    """Module-level functions and methods of module-level classes, by name (the first of a name)."""
    out: dict[str, ast.AST] = {}
    for node in getattr(tree, "body", []):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.setdefault(node.name, node)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out.setdefault(item.name, item)
    return out


def _called_names(node: ast.AST) -> set[str]:
    """Names a function calls directly: `f(...)`, `self.f(...)`, `cls.f(...)`, `Class.f(...)`."""
    out = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            func = call.func
            if isinstance(func, ast.Name):
                out.add(func.id)
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                out.add(func.attr)
    return out


def _is_torch_device(call: ast.AST) -> bool:
    return isinstance(call, ast.Call) and astcache.dotted(call.func) in ("torch.device", "device")


# ------------------------------------------------------------------ BQ#30: the resolver remaps


def _remaps(func: ast.AST) -> Optional[int]:
    """The line where `func` rebinds an index-less device to `torch.device(<detected type>, ...)`
    (the type a name or call, not a literal, not the device's own `.type`), or None."""
    for node in ast.walk(func):
        if not isinstance(node, ast.If):
            continue
        test = node.test
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is)
                and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None
                and isinstance(test.left, ast.Attribute) and test.left.attr == "index"
                and isinstance(test.left.value, ast.Name)):
            continue
        device = test.left.value.id
        for stmt in node.body:
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == device
                    and _is_torch_device(stmt.value)):
                continue
            call = stmt.value
            kind = next((k.value for k in call.keywords if k.arg == "type"), None)
            if kind is None and call.args:
                kind = call.args[0]
            if kind is None or isinstance(kind, (ast.Constant, ast.JoinedStr)):
                continue
            if isinstance(kind, ast.Attribute) and kind.attr == "type" and isinstance(kind.value, ast.Name) \
                    and kind.value.id == device:
                continue  # `torch.device(device.type, 0)`: the type as given
            if isinstance(kind, ast.Name) and kind.id == device:
                continue
            return stmt.lineno
    return None


def resolver_remap(tree: ast.Module, name: str, depth: int = 3) -> Optional[tuple[str, int]]:
    """(function, line) where resolver `name` of module `tree`, or a function of that module it
    calls (a few steps), rebuilds an index-less device from the detected device type; None."""
    functions = _functions(tree)
    seen, todo = set(), [(name, 0)]
    while todo:
        current, level = todo.pop(0)
        func = functions.get(current)
        if func is None or current in seen:
            continue
        seen.add(current)
        line = _remaps(func)
        if line is not None:
            return current, line
        if level < depth:
            todo.extend((callee, level + 1) for callee in sorted(_called_names(func)) if callee in functions)
    return None


def _config_read(node: ast.AST, key: str) -> bool:
    """`cfg.device`, `self._cfg.device`, `cfg.get("device")`, `cfg["device"]` with a config-like
    receiver."""
    receiver = None
    if isinstance(node, ast.Attribute) and node.attr == key:
        receiver = node.value
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == key:
        receiver = node.value
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
          and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == key):
        receiver = node.func.value
    if receiver is None:
        return False
    last = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", None)
    return bool(last and _CONFIG_NAME.fullmatch(last))


def _resolver_call(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id == name)
        or (isinstance(node.func, ast.Attribute) and node.func.attr == name))


def _use_is_harmless(node: ast.AST, parents: dict, name: str) -> bool:
    """A read of the value that leaves it to the resolver or only compares it with a string."""
    parent = parents.get(id(node))
    if isinstance(parent, ast.keyword):
        parent = parents.get(id(parent))
        return _resolver_call(parent, name)
    if isinstance(parent, ast.Call):
        return node is not parent.func and _resolver_call(parent, name)
    if isinstance(parent, ast.Compare):
        return all(isinstance(side, ast.Constant) and isinstance(side.value, str)
                   for side in [parent.left, *parent.comparators] if side is not node)
    return False


def raw_reads(tree: ast.Module, key: str, name: str) -> list[int]:
    """Lines where module `tree` reads config key `key` other than through resolver `name`: the
    value handed to anything but the resolver, directly or through a local bound to it once in its
    function (a comparison with a string aside)."""
    index: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            index[id(child)] = node
    lines = []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            continue
        body_nodes = [n for stmt in func.body for n in ast.walk(stmt)]
        bound: dict[str, int] = {}
        for node in body_nodes:
            if not _config_read(node, key):
                continue
            if isinstance(func, ast.Module) and _inside_function(node, index):
                continue  # (the function's own walk reads it)
            parent = index.get(id(node))
            if (isinstance(parent, ast.Assign) and parent.value is node and len(parent.targets) == 1
                    and isinstance(parent.targets[0], ast.Name)):
                bound[parent.targets[0].id] = parent.lineno
                continue
            if not _use_is_harmless(node, index, name):
                lines.append(node.lineno)
        for local in bound:
            stores = [n for n in body_nodes if isinstance(n, ast.Name) and n.id == local
                      and isinstance(n.ctx, ast.Store)]
            uses = [n for n in body_nodes if isinstance(n, ast.Name) and n.id == local and isinstance(n.ctx, ast.Load)]
            if len(stores) != 1:
                lines.extend(n.lineno for n in uses)  # (rebound: what it holds later is not known)
                continue
            lines.extend(n.lineno for n in uses if not _use_is_harmless(n, index, name))
    return sorted(set(lines))


def _inside_function(node: ast.AST, parents: dict) -> bool:
    parent = parents.get(id(node))
    while parent is not None:
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return True
        parent = parents.get(id(parent))
    return False


def _key_of(finding) -> str:
    match = re.match(r"[\"']?([\w.-]+)", finding.source or "")
    return match.group(1).rsplit(".", 1)[-1] if match else ""


def _config_message(finding, texts: dict, trees: dict) -> Optional[tuple[str, str]]:
    """(message, severity) for a folded NPU706 finding whose resolver remaps; None to keep it."""
    found = _RESOLVER.search(finding.message)
    value = _VALUE.match(finding.message)
    key = _key_of(finding)
    if found is None or value is None or not key or ":" in value.group(1):
        return None
    name, where, line = found.group(1), found.group(2), int(found.group(3))
    tree = trees.get(where)
    remap = resolver_remap(tree, name) if tree is not None else None
    if remap is None:
        return None
    helper, at = remap
    how = (f"`{name}` ({where}:{line}) rebuilds a device given without an index from the detected device "
           f"type" + (f" (`{helper}`, line {at})" if helper != name else f" (line {at})"))
    raw = []
    for rel in sorted(trees):
        text = texts[rel]
        if key.encode() not in text:
            continue
        raw.extend(f"{rel}:{n}" for n in raw_reads(trees[rel], key, name))
    head, _sep, _rest = finding.message.partition(" (")
    rest = finding.message[len(head) + 2:-1] if finding.message.endswith(")") else ""
    rest = rest.split("the project reads `")[0].rstrip("; ")
    if not raw:
        extra = f"; {rest}" if rest else ""
        return (f"{head} ({REMAPPED}: {how}, and the project reads `{key}` only through it{extra})", "info")
    shown = ", ".join(raw[:MAX_SHOWN]) + (f" and {len(raw) - MAX_SHOWN} more" if len(raw) > MAX_SHOWN else "")
    extra = f"{rest}; " if rest else ""
    return (f"{head} ({extra}{how}, but the project also reads `{key}` without it, in {shown}: there "
            f"\"cuda\" stays CUDA (a distributed backend, a device), so set `npu` where that code runs)", "warning")


def review_config_devices(results: list, paths: dict) -> list:
    """The folded NPU706 findings of platforms.py whose resolver remaps the value (module doc)."""
    targets = [(i, f) for i, r in enumerate(results) for f in r.findings
               if f.code == "NPU706" and not f.fixable and f.cell is None and f.severity == "info"
               and _RESOLVER.search(f.message)]
    if not targets:
        return results
    texts, trees = {}, {}
    for result in results:
        if result.relpath.endswith(".py"):
            text = result_bytes(result, paths)
            if text and b"device" in text:
                tree = astcache.parse(text)
                if tree is not None:
                    texts[result.relpath], trees[result.relpath] = text, tree
    out, changed = list(results), set()
    for i, finding in targets:
        answer = _config_message(finding, texts, trees)
        if answer is None:
            continue
        message, severity = answer
        new = dataclasses.replace(finding, message=message, severity=severity)
        out[i] = dataclasses.replace(out[i], findings=[new if f is finding else f for f in out[i].findings])
        changed.add(i)
    for i in sorted(changed):
        out[i] = to_scopes([out[i]])[0]
    return out


# ------------------------------------------------------------------ BQ#28: the accelerator's graphs

GRAPH_FIX = ("widen the check to the NPU (`npu_compat.is_accelerator_type(...)`) and check the captured "
             "code under NPU graphs")
# what a check's text may name and still be about graphs only (rules/device.toml's
# cuda_only_feature_pattern matches these words of the check)
_GRAPH_WORDS = re.compile(r"(?i)cuda[ _-]?graphs?|cudagraphs?|requires?\s+(a\s+)?cuda|needs?\s+(a\s+)?cuda|"
                          r"cuda[- ]only|only\s+(on|with|for)\s+cuda")
_MAX_STEPS = 4


def _feature_words() -> re.Pattern:
    from . import catalogue

    return re.compile(catalogue.read_table("device.toml")["cuda_only_feature_pattern"], re.IGNORECASE)


def _layer_call(node: ast.AST) -> bool:
    """`get_accelerator()` (rules/scopes.toml's platform layer)."""
    from . import catalogue

    layer = re.compile(catalogue.read_table("scopes.toml")["platform"]["layer"])
    return isinstance(node, ast.Call) and not node.args and bool(layer.search((astcache.dotted(node.func) or "")
                                                                             + "()"))


def _cuda_compare(test: ast.AST) -> Optional[bool]:
    """True for `x != "cuda"` (an exit test), False for `x == "cuda"`, None for anything else."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    sides = [test.left, test.comparators[0]]
    if not any(isinstance(s, ast.Constant) and s.value == "cuda" for s in sides):
        return None
    if isinstance(test.ops[0], ast.NotEq):
        return True
    return False if isinstance(test.ops[0], ast.Eq) else None


def _exits(body: list) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Raise, ast.Return))


def _guarded(tree: ast.Module, line: int) -> Optional[tuple[ast.If, ast.AST, list]]:
    """(the check's `if`, its function, the statements it guards) for the check at `line`: an exit
    `if x != "cuda": raise ...` at the top of a function body (the rest of the body), or an
    `if x == "cuda":` there (its body); None for anything else."""
    for func in astcache.nodes(tree, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for at, stmt in enumerate(func.body):
            if not (isinstance(stmt, ast.If) and stmt.test.lineno == line):
                continue
            kind = _cuda_compare(stmt.test)
            if kind is True and _exits(stmt.body) and not stmt.orelse:
                return stmt, func, func.body[at + 1:]
            if kind is False:
                return stmt, func, stmt.body
    return None


def _graph_calls(tree: ast.Module, func: ast.AST, statements: list) -> Optional[dict[str, int]]:
    """{accelerator method: first line} of the graph methods the guarded code (and the functions of
    the file it calls, a few steps) calls through the platform layer; None where that code reads
    `torch.cuda` itself."""
    functions = _functions(tree)
    calls: dict[str, int] = {}
    seen = {getattr(func, "name", "")}
    todo = [(statements, 0)]
    while todo:
        body, level = todo.pop(0)
        accelerators = {t.id for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Assign)
                        and _layer_call(n.value) for t in n.targets if isinstance(t, ast.Name)}
        for stmt in body:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Attribute) and (astcache.dotted(node) or "").startswith("torch.cuda"):
                    return None
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                        name = node.func.id
                        if name in functions and name not in seen and level < _MAX_STEPS:
                            seen.add(name)
                            todo.append((functions[name].body, level + 1))
                    continue
                receiver, method = node.func.value, node.func.attr
                if _layer_call(receiver) or (isinstance(receiver, ast.Name) and receiver.id in accelerators):
                    if "graph" in method.lower():
                        calls.setdefault(method, node.lineno)
                elif isinstance(receiver, ast.Name) and method in functions and method not in seen \
                        and level < _MAX_STEPS:
                    seen.add(method)
                    todo.append((functions[method].body, level + 1))
    return calls


def _npu_part(relpath: str) -> bool:
    return any("npu" in part.lower() or "ascend" in part.lower() for part in relpath.split("/"))


def _npu_classes(trees: dict) -> list[tuple[str, str, dict]]:
    """(file, class, {method: line}) of the classes of modules named for the NPU: methods whose
    body does more than raise."""
    out = []
    for rel, tree in sorted(trees.items()):
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            methods = {}
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    body = [s for s in item.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                    if body and not all(isinstance(s, (ast.Raise, ast.Pass)) for s in body):
                        methods[item.name] = item.lineno
            out.append((rel, node.name, methods))
    return out


def _graph_message(finding, text: bytes, tree: ast.Module, classes: list, words: re.Pattern) -> Optional[str]:
    guarded = _guarded(tree, finding.line)
    if guarded is None:
        return None
    check, func, statements = guarded
    said = [m.group(0) for m in words.finditer(ast.get_source_segment(text.decode("utf-8", "replace"), check) or "")]
    if not said or not all(_GRAPH_WORDS.fullmatch(w) for w in said) or not any("graph" in w.lower() for w in said):
        return None  # (another CUDA-only feature named, or no graph at all)
    calls = _graph_calls(tree, func, statements)
    if not calls:
        return None
    for rel, name, methods in classes:
        if all(m in methods for m in calls):
            used = ", ".join(f"`{m}()` (line {n})" for m, n in sorted(calls.items(), key=lambda c: c[1]))
            first = min(methods[m] for m in calls)
            return (f"Comparison with \"cuda\" keeps the NPU from graph capture it supports: the code it guards "
                    f"captures through the project's accelerator, {used}, which its NPU accelerator `{name}` "
                    f"({rel}:{first}) implements; {GRAPH_FIX}")
    return None


def review_graph_gates(results: list, paths: dict) -> list:
    """NPU108 checks named for CUDA graphs in front of the accelerator's graph capture (module doc)."""
    targets: dict[int, list] = {}
    texts: dict[int, bytes] = {}
    for i, result in enumerate(results):
        checks = [f for f in result.findings if f.code == "NPU108" and not f.fixable and f.cell is None]
        if not checks or not result.relpath.endswith(".py"):
            continue
        text = result_bytes(result, paths)
        if text and b"graph" in text.lower():
            targets[i], texts[i] = checks, text
    if not targets:
        return results
    npu_trees = {}
    for result in results:
        if result.relpath.endswith(".py") and _npu_part(result.relpath):
            text = result_bytes(result, paths)
            if text and b"graph" in text:
                tree = astcache.parse(text)
                if tree is not None:
                    npu_trees[result.relpath] = tree
    classes = _npu_classes(npu_trees)
    if not classes:
        return results
    words = _feature_words()
    out = list(results)
    for i, checks in targets.items():
        tree = astcache.parse(texts[i])
        if tree is None:
            continue
        new = {}
        for finding in checks:
            message = _graph_message(finding, texts[i], tree, classes, words)
            if message is not None:
                new[id(finding)] = dataclasses.replace(finding, message=message, severity="warning")
        if new:
            out[i] = dataclasses.replace(out[i], findings=[new.get(id(f), f) for f in out[i].findings])
    return out
