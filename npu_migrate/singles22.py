"""Single shapes left from the round-22 audits (issue #16): tests, labels, backend parameters, severity.

Per file (run.migrate_file) and for the whole run (runplan.whole_run_passes), on report-only
findings; each shape decides on the exact construct:

- **A skip made through a module-local helper** (round 22 BI#1, testscopes.py calls
  `helper_skip`): a test whose statement is a bare call of a module-level function of the same
  file (`_skip_unless_rope_quant()`), whose body is imports, assignments and docstrings followed
  by `if <condition>: pytest.skip(...)`, the condition certainly true on an NPU host
  (`not current_platform.is_device_capability_family(100)`). The test is skipped there exactly as
  if the `if` were written in it, so testscopes.py makes the same scope (its reason names the
  helper: "`not ...` in `_skip_unless_rope_quant()`"), from the statement after the call (the
  helper itself runs on an NPU host, to skip), and the helpers only such tests call follow.
  A helper whose skip condition an NPU host may fail (a rewritten `torch.cuda.is_available()`),
  one that returns or branches before the skip, and a call that is not a bare statement keep the
  findings.
- **"nccl" as a registry key** (BI#6, `registry_key`): an NPU990 "nccl" that is the first argument
  of a `register...("nccl", Engine)` call that registers something (a second argument), or the
  left side of `"nccl" in X._registry` (a name or attribute whose last part names a registry). The
  string names an implementation in the project's own table; it reaches no process group, and the
  registered class is reported where it runs NCCL. Lowered with REGISTRY_KEY (a moot.NO_WORK
  phrase: a named scope). A lookup (`Factory.create("nccl")`) selects that implementation and stays.
- **The fallback of `getattr(obj, "device", "cuda")`** (BI#27): the code reads the object's own
  device, which is the NPU on an NPU host; the "cuda" applies only to an object without a `device`
  attribute. Lowered with DEVICE_FALLBACK (moot.AS_WRITTEN: runs as written). A `getattr` of
  another attribute (`getattr(cfg, "place", "cuda")`) stays.
- **"cuda" in the old-torch fallback of a `torch.accelerator` branch** (BI#32): an NPU990 "cuda"
  in the `else:` of an `if` whose test reads `__version__` and whose body calls
  `torch.accelerator` (which answers the NPU on an NPU host). The string is reached only with a
  torch older than `torch.accelerator` (2.6: torch_npu 2.5 and older): true, but only there, so it
  is lowered to information with OLD_TORCH (not a named scope: such a host may exist). An `else:`
  of any other test stays.
- **Severity of certain failures** (BK#17, BK#31): an NPU304 warning whose function's callers in
  the file pass the literal `"nccl"` (redundant.fold_backend_callers' "with `"nccl"` passed by the
  calls of the function in this file") reaches the process group unchanged: an error
  (`review_folded`, after the fold), when its places are the parameter and those literals only (a
  second parameter merged in, fed by something else, keeps the warning). An NPU990 "cuda" key of a
  per-device table (sweep.py's "a key of a table of per-device values") whose dict literal is
  subscripted on the spot
  (`{"cpu": ..., "cuda": ...}[device.type]`) raises KeyError on an NPU host: an error. A table
  read with `.get(...)` (a default) or bound to a name stays a warning.
- **An SDPA switch that keeps only math, under `no_grad`** (BK#36): NPU405's "it only switches CUDA
  fast kernels off and keeps the math backend on ... review it only where the math path was chosen
  for what fused kernels lack, such as double backward" inside a function decorated with
  `torch.no_grad()`/`torch.inference_mode()` or a `with` of them, or in a private function (or one
  of a script with a `__main__` block) that the file calls only from such scopes (the decode loop
  of a `@torch.no_grad()` `generate`): no backward runs there, so the
  one reason to review is ruled out by the code; lowered with NO_GRAD_SWITCH (moot.NO_EFFECT).
  The same switch outside such a scope stays information.
- **An inference capture the project's transfer_to_npu maps to NPUGraph** (BJ#13, whole run after
  patcher19.py, `review_run`): an NPU202 `torch.cuda.CUDAGraph` / `torch.cuda.graph` that
  patcher19 lowered with "torch_npu's transfer_to_npu maps it to the NPU", in a file that names no
  gradient machinery at all (`.backward(`, `autograd`, `requires_grad`, `zero_grad`, an optimizer,
  `enable_grad`, `.grad`, `loss`) or inside a `no_grad`/`inference_mode` scope: the capture is
  inference, NPUGraph's documented use, and the note's one caution (never capture a training step)
  does not apply: lowered with INFERENCE_CAPTURE (moot.AS_WRITTEN). A capture in a file that trains,
  a file with a `with torch.cuda.graph(...)` whose body calls a parameter of its function (`def
  capture(fn): ... fn()`: the caller's step, maybe training), `make_graphed_callables` (which
  captures backward) and any capture without the patcher: kept.
- **A flag-guarded import of an extension whose sources are reported** (BI#29, whole run,
  `review_run`): an NPU911 information "import of compiled extension module `ext`" that
  optionalext.py found "imported only under `if FLAG:`, a flag the import probe in ... sets" (False
  where the extension is missing, as on an NPU host: the import is skipped). The only work it
  implies is porting `ext`, which the run's NPU912 finding on that extension's sources ("... of the
  extension `ext` (...") already asks: the import is folded into that finding, whose message names
  it, the flag and the names to review with the port. An unguarded import (an error), or an
  extension whose sources have no open finding, keeps its finding.
- **A backend parameter every caller of the run resolves** (BI#12, whole run after patcher19.py,
  `review_backend_params`): secondary.py lowers an NPU304 on a parameter passed straight to
  `new_group`/`init_process_group` when the calls in its own file show every value; a constructor
  parameter (`GroupCoordinator(torch_distributed_backend=backend)`) or a function called from other
  modules stayed a warning. Here every reference of the function in the run (by name and `from ...
  import name as alias`; for `__init__`, the class's calls and its subclasses' `super().__init__`)
  must be a plain call, and each value it passes, followed through the callers' own parameters and
  locals a few steps deep, must be None, a string literal (rewritten or reported where written),
  a call the table rules/scopes.toml [singles22] names (`get_torch_distributed_backend_str()`,
  `torch.distributed.get_backend(group)`), or an `or`/`if`-`else` of those. Then the place is lowered
  with secondary.PASSED_THROUGH (a named scope). A reference that is no call (a callback, a
  partial), a value from an attribute (`self._process_group_backend`, BI#28: left, its setter is
  user input), a value only a `*args`/`**kwargs` could hold, a parameter with no call in the run
  and no seen default: kept (with no
  call, a None or literal default counts, as secondary.py reads it).
- **A recipe strategy the same YAML file marks unsupported on the NPU** (BJ#5, for yamlscopes.py:
  `unsupported_strategies`): a mapping of strategies to per-hardware verdicts (`strategy_hardware:
  multi_node_tp_pp: {ascend_910c: unsupported}`, every NPU entry of the strategy "unsupported") and,
  elsewhere in the file, a block keyed by that strategy (`multi_node_tp_pp: extra_env:
  NCCL_CUMEM_ENABLE: "1"`): an NPU deployment never picks it, so its NPU7xx findings become one
  named scope per block, naming the verdict's line. A strategy with an NPU entry "supported" (or
  none at all), and a finding with places outside such blocks: kept.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from typing import Callable, Optional

from . import astcache, catalogue
from .findings import Finding

REGISTRY_KEY = "a registry key naming an implementation, not a backend: "
DEVICE_FALLBACK = "the fallback of a `getattr` of the object's `device`"
OLD_TORCH = "reached only with a torch older than `torch.accelerator`"
FAILS = "a certain failure on an NPU host"
NO_GRAD_SWITCH = "an SDPA switch under `torch.no_grad()`/`inference_mode()`"
INFERENCE_CAPTURE = "an inference capture that transfer_to_npu maps to NPUGraph"
_KEEPS_MATH = "it only switches CUDA fast kernels off and keeps the math backend on"
_PATCHER = "torch_npu's transfer_to_npu maps it to the NPU"
_CAPTURES = frozenset({"torch.cuda.CUDAGraph", "torch.cuda.graph"})
_GRADIENTS = re.compile(r"\.backward\(|\bautograd\b|requires_grad|zero_grad|\boptim(?:izer|iser|\b)|enable_grad|\.grad\b"
                        r"|\bloss\b", re.IGNORECASE)
_NO_GRAD = frozenset({"no_grad", "inference_mode"})
_FOLDED_NCCL = 'with `"nccl"` passed by the calls of the function in this file'
_TABLE_KEY = "a key of a table of per-device values"

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_PLAIN = (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.Expr, ast.Pass)


# ----------------------------------------------------------------------------- skip through a helper
def helper_skip(stmt: ast.stmt, helpers: dict, skipping_if: Callable) -> Optional[tuple[ast.AST, str]]:
    """(the skip condition, the helper's name) when `stmt` is a bare call `helper()` of a
    module-level function (`helpers`: name -> def) that skips on an NPU host (`skipping_if` gives the
    condition of an `if` that certainly skips there) before anything else decides."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name)):
        return None
    helper = helpers.get(stmt.value.func.id)
    if helper is None or not isinstance(helper, _FUNCTIONS):
        return None
    for inner in helper.body:
        condition = skipping_if(inner)
        if condition is not None:
            return condition, helper.name
        if not isinstance(inner, _PLAIN) or (isinstance(inner, ast.Expr) and not isinstance(inner.value, ast.Constant)):
            return None  # (a call, a branch or a return may decide first)
    return None


# ----------------------------------------------------------------------------- per-file review
def _literal(tree: ast.Module, finding: Finding) -> Optional[ast.Constant]:
    return astcache.strings_at(tree).get((finding.line, finding.column))


def _last(node: ast.AST) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def registry_key(node: ast.Constant, parents: dict) -> Optional[str]:
    """The construct when the string is a registry key (module doc), else None."""
    parent = parents.get(id(node))
    if (isinstance(parent, ast.Call) and parent.args and parent.args[0] is node
            and _last(parent.func).lower().startswith("register")
            and (len(parent.args) > 1 or parent.keywords)):
        return f"`{_last(parent.func)}({node.value!r}, ...)`".replace("'", '"')
    if (isinstance(parent, ast.Compare) and parent.left is node and len(parent.ops) == 1
            and isinstance(parent.ops[0], (ast.In, ast.NotIn))
            and isinstance(parent.comparators[0], (ast.Name, ast.Attribute))
            and "registry" in _last(parent.comparators[0]).lower()):
        return f'`"{node.value}" in {astcache.dotted(parent.comparators[0])}`'
    return None


def _getattr_device(node: ast.Constant, parents: dict) -> bool:
    parent = parents.get(id(node))
    return (isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "getattr"
            and len(parent.args) == 3 and parent.args[2] is node and isinstance(parent.args[1], ast.Constant)
            and parent.args[1].value == "device")


def _reads(node: ast.AST, predicate) -> bool:
    return any(predicate(n) for n in ast.walk(node))


def _old_torch_else(node: ast.Constant, parents: dict) -> Optional[int]:
    """The `if` line when the string lies in the `else:` of a torch-version test whose body asks
    `torch.accelerator`."""
    child, parent = node, parents.get(id(node))
    while parent is not None and not isinstance(parent, _FUNCTIONS + (ast.Module,)):
        if isinstance(parent, ast.If) and any(child is s for s in parent.orelse):
            version = _reads(parent.test, lambda n: isinstance(n, ast.Attribute) and n.attr == "__version__")
            accelerator = any(_reads(s, lambda n: isinstance(n, ast.Attribute)
                                     and astcache.dotted(n) == "torch.accelerator") for s in parent.body)
            return parent.lineno if version and accelerator else None
        child, parent = parent, parents.get(id(parent))
    return None


def _looked_up_on_the_spot(node: ast.Constant, parents: dict) -> bool:
    table = parents.get(id(node))
    if not (isinstance(table, ast.Dict) and any(k is node for k in table.keys)):
        return False
    if any(isinstance(k, ast.Constant) and k.value == "npu" for k in table.keys):
        return False
    subscript = parents.get(id(table))
    return isinstance(subscript, ast.Subscript) and subscript.value is table


def _no_grad_call(node: ast.AST) -> bool:
    """`torch.no_grad()`, `torch.inference_mode()`, `@torch.no_grad` (the bare decorator)."""
    target = node.func if isinstance(node, ast.Call) else node
    return _last(target) in _NO_GRAD


def in_no_grad(tree: ast.Module, line: int) -> bool:
    """`line` lies in a function decorated with `no_grad`/`inference_mode` or in the body of a `with`
    of them."""
    for node in astcache.walk(tree):
        if isinstance(node, _FUNCTIONS) and any(_no_grad_call(d) for d in node.decorator_list):
            if node.lineno <= line <= (node.end_lineno or node.lineno):
                return True
        elif isinstance(node, (ast.With, ast.AsyncWith)) and any(_no_grad_call(i.context_expr) for i in node.items):
            if node.body and node.body[0].lineno <= line <= (node.end_lineno or node.lineno):
                return True
    return False


_MAIN_GUARD = re.compile(r"^if\s+__name__\s*==\s*['\"]__main__['\"]", re.MULTILINE)


def _called_under_no_grad(tree: ast.Module, line: int, text: str, depth: int = 0) -> bool:
    """`line` lies in a module-level function of a script (a `__main__` block) or a private one,
    whose every reference in the file is a call under `no_grad`/`inference_mode`, or in another
    such function (a few steps)."""
    function = next((f for f in tree.body if isinstance(f, _FUNCTIONS)
                     and f.lineno <= line <= (f.end_lineno or f.lineno)), None)
    if function is None or depth > 3 or not (function.name.startswith("_") or _MAIN_GUARD.search(text)):
        return False
    parents = astcache.parents(tree)
    references = [n for n in astcache.nodes(tree, ast.Name) if n.id == function.name]
    if not references or any(not isinstance(parents.get(id(n)), ast.Call) or parents[id(n)].func is not n
                             for n in references):
        return False
    return all(in_no_grad(tree, n.lineno) or _called_under_no_grad(tree, n.lineno, text, depth + 1)
               for n in references)


def _switch_under_no_grad(findings: list[Finding], text: str) -> list[Finding]:
    hits = [f for f in findings if f.code == "NPU405" and not f.fixable and f.severity == "info"
            and _KEEPS_MATH in f.message and NO_GRAD_SWITCH not in f.message]
    if not hits or not any(w in text for w in _NO_GRAD):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    return [dataclasses.replace(f, message=(
        f"{f.message} ({NO_GRAD_SWITCH}: no backward runs there, so the math path was not chosen for "
        "it; an NPU host ignores the switch)")) if any(f is h for h in hits) and (
            in_no_grad(tree, f.line) or _called_under_no_grad(tree, f.line, text)) else f
        for f in findings]


def review(findings: list[Finding], text: str) -> list[Finding]:
    """NPU990 "nccl"/"cuda" strings of the shapes of the module doc, before the per-file merge."""
    findings = _switch_under_no_grad(findings, text)
    hits = [f for f in findings if f.code == "NPU990" and not f.fixable and f.cell is None
            and f.severity != "info" and f.source in ('"nccl"', '"cuda"', "'nccl'", "'cuda'")]
    if not hits:
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    parents = astcache.parents(tree)
    out = []
    for finding in findings:
        node = _literal(tree, finding) if any(finding is h for h in hits) else None
        if node is not None and node.value == "nccl":
            construct = registry_key(node, parents)
            if construct is not None:
                finding = dataclasses.replace(finding, severity="info", message=(
                    f"{finding.message} ({REGISTRY_KEY}{construct}: the string names an entry of the project's "
                    "own table and reaches no process group; the registered class is reported where it runs NCCL)"))
        elif node is not None and node.value == "cuda":
            if _getattr_device(node, parents):
                finding = dataclasses.replace(finding, severity="info", message=(
                    f"{finding.message} ({DEVICE_FALLBACK}, used only where the object has none: the code reads the "
                    "object's own device, the NPU on an NPU host)"))
            elif _TABLE_KEY in finding.message and _looked_up_on_the_spot(node, parents):
                finding = dataclasses.replace(finding, severity="error", message=(
                    f"{finding.message} ({FAILS}: the table has no \"npu\" key and is looked up on the spot, "
                    "a KeyError there)"))
            else:
                line = _old_torch_else(node, parents)
                if line is not None:
                    finding = dataclasses.replace(finding, severity="info", message=(
                        f"{finding.message} ({OLD_TORCH} (2.6; torch_npu 2.5 and older): the `else:` of the torch "
                        f"version test at line {line}, whose branch asks `torch.accelerator`, which answers the NPU "
                        "on an NPU host; review it only for such an old torch)"))
        out.append(finding)
    return out


_ALSO = re.compile(r" \(also at [^()]*\)$")  # (findings.merge_per_file's suffix)


def review_folded(findings: list[Finding]) -> list[Finding]:
    """NPU304 warnings whose callers in the file pass a literal "nccl" (module doc): errors."""
    out = []
    for finding in findings:
        others = [p for p in finding.also if p[2] not in ('"nccl"', "'nccl'")]
        if (finding.code == "NPU304" and not finding.fixable and finding.severity == "warning"
                and _FOLDED_NCCL in finding.message and FAILS not in finding.message
                and not others and finding.source not in ('"nccl"', "'nccl'")):
            # (the parameter's own place and the literals its callers pass, nothing else merged in)
            message = _ALSO.sub("", finding.message)
            also = finding.message[len(message):]
            finding = dataclasses.replace(finding, severity="error", message=(
                f"{message} ({FAILS}: the literal reaches the process group unchanged, and torch_npu "
                f"has no NCCL backend){also}"))
        out.append(finding)
    return out


# ----------------------------------------------------------------------------- whole run
def _captures_a_parameter(tree: ast.Module) -> bool:
    """A `with torch.cuda.graph(...)` whose body calls a parameter of its function (`def capture(fn):
    ... fn()`): what it captures is the caller's, a training step as well."""
    parents = astcache.parents(tree)
    for node in astcache.nodes(tree, (ast.With, ast.AsyncWith)):
        if not any(isinstance(i.context_expr, ast.Call) and astcache.dotted(i.context_expr.func) in _CAPTURES
                   for i in node.items):
            continue
        function = parents.get(id(node))
        while function is not None and not isinstance(function, _FUNCTIONS):
            function = parents.get(id(function))
        if function is None:
            continue
        a = function.args
        params = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x))}
        if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in params
               for statement in node.body for n in ast.walk(statement)):
            return True
    return False


def review_run(results: list, paths: dict) -> list:
    """Inference captures transfer_to_npu maps to NPUGraph (module doc): named as running as written."""
    from .modpaths import RunTexts

    def wanted(f: Finding) -> bool:
        return (f.code == "NPU202" and not f.fixable and f.cell is None and f.severity == "info"
                and f.source in _CAPTURES and _PATCHER in f.message and INFERENCE_CAPTURE not in f.message)

    text_of = RunTexts(results, paths)
    out = fold_flag_guarded_extensions(list(results))
    for i, result in enumerate(out):
        if not (result.relpath.endswith(".py") and any(wanted(f) for f in result.findings)):
            continue
        data = text_of(i)
        if data is None:
            continue
        text = data.decode("utf-8", "replace")
        tree = astcache.parse(data)
        if tree is None:
            continue
        handed = None
        if _captures_a_parameter(tree):
            from .kernelreach26 import handed_local_steps  # (BS#18: the callers' own nested steps)

            handed = handed_local_steps(out, tree, text_of, _GRADIENTS, _CAPTURES)
            if handed is None:
                continue
        trains = _GRADIENTS.search(text) is not None
        findings = []
        for f in result.findings:
            if wanted(f) and (not trains or in_no_grad(tree, f.line)):
                why = ("inside a `no_grad`/`inference_mode` scope" if trains
                       else "the file computes no gradients (no backward, optimizer or loss)")
                if handed:
                    why += f"; the callable it captures is its callers' own nested function, which computes none either: {handed}"
                f = dataclasses.replace(f, message=(
                    f"{f.message} ({INFERENCE_CAPTURE}: {why}, which is NPUGraph's documented use: nothing to port)"))
            findings.append(f)
        out[i] = dataclasses.replace(result, findings=findings)
    return out


_FLAGGED_EXTENSION = re.compile(r"^C\+\+/CUDA extension or CUDA-only compiled package: import of compiled extension "
                                r"module `(\w+)[\w.]*` \(imported only under `([^`]+)`, a flag the import probe in (\S+) sets")


def fold_flag_guarded_extensions(results: list) -> list:
    """Flag-guarded extension imports folded into the extension's NPU912 finding (module doc)."""
    from .moot import is_moot

    def open_source(f: Finding, ext: str) -> bool:
        return (f.code == "NPU912" and not f.fixable and f.cell is None and not is_moot(f)
                and f"of the extension `{ext}` (" in f.message)

    out = list(results)
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py"):
            continue
        for finding in result.findings:
            match = _FLAGGED_EXTENSION.match(finding.message)
            if not (finding.code == "NPU911" and not finding.fixable and finding.severity == "info" and match
                    and not finding.also):
                continue
            ext, flag, probe = match.groups()
            target = next(((k, f) for k, r in enumerate(out) if r.relpath.lower().endswith((".cu", ".cuh"))
                           for f in r.findings if open_source(f, ext)), None)
            if target is None:
                continue
            k, source = target
            note = (f"also its import at `{result.relpath}:{finding.line}`, under `{flag}`, which the import probe "
                    f"in {probe} sets False where the extension is missing: skipped on an NPU host; review the code "
                    "that uses its names with the extension's port")
            out[k] = dataclasses.replace(out[k], findings=[
                dataclasses.replace(f, message=f"{f.message} ({note})") if f is source else f for f in out[k].findings])
            out[i] = dataclasses.replace(out[i], findings=[f for f in out[i].findings if f is not finding])
    return out


# ----------------------------------------------------------------------------- YAML strategies
_VERDICTS = frozenset({"supported", "unsupported", "verified", "experimental", "untested"})


def _yaml_scalar(doc, index: int) -> str:
    line = doc.lines[doc.nodes[index].line - 1]
    value = line.split(":", 1)[1] if ":" in line else ""
    return re.sub(r"#.*", "", value).strip().strip("\"'").lower()


def _unsupported_on_npu(doc, npu: re.Pattern) -> dict:
    """{strategy key: (the verdict node index, the table node index)} of the file's strategy ->
    hardware -> verdict tables whose every NPU entry is "unsupported"."""
    found: dict = {}
    for table, node in enumerate(doc.nodes):
        strategies = doc.children.get(table, [])
        if node.item or not node.key or not strategies:
            continue
        if any(doc.nodes[k].item or not doc.nodes[k].key or not doc.children.get(k) for k in strategies):
            continue
        if not all(not doc.nodes[h].item and _yaml_scalar(doc, h) in _VERDICTS and not doc.children.get(h)
                   for k in strategies for h in doc.children[k]):
            continue
        for k in strategies:
            verdicts = [h for h in doc.children[k] if npu.search(doc.nodes[h].key)]
            if verdicts and all(_yaml_scalar(doc, h) == "unsupported" for h in verdicts):
                found.setdefault(doc.nodes[k].key, (verdicts[0], table))
    return found


def unsupported_strategies(doc, findings: list[Finding], scopes: list, npu: re.Pattern) -> list[Finding]:
    """NPU7xx findings in a block of a strategy the file marks unsupported on the NPU (module doc):
    named scopes appended to `scopes`."""
    if not any(f.code.startswith("NPU7") and not f.fixable for f in findings) or "unsupported" not in "\n".join(doc.lines):
        return findings
    strategies = _unsupported_on_npu(doc, npu)
    if not strategies:
        return findings

    def scope_of(line: int):
        index = doc.node_of_line.get(line)
        while index is not None:
            node = doc.nodes[index]
            verdict = strategies.get(node.key)
            if verdict is not None and not node.item:
                table = doc.nodes[verdict[1]]
                if table.line <= node.line <= table.end:
                    return None  # (the verdict table itself)
                hardware = doc.nodes[verdict[0]]
                return (node.line, node.end, f"a deployment strategy the file marks unsupported on the NPU "
                                             f"(`{table.key}: {node.key}: {hardware.key}: unsupported`, line "
                                             f"{hardware.line}) that an NPU deployment never picks")
            index = node.parent
        return None

    out = []
    for finding in findings:
        if not finding.code.startswith("NPU7") or finding.fixable:
            out.append(finding)
            continue
        found = [scope_of(line) for line in [finding.line, *(p[0] for p in finding.also)]]
        if not found or any(s is None for s in found):
            out.append(finding)
            continue
        for scope in found:
            if scope not in scopes:
                scopes.append(scope)
    return out


# ----------------------------------------------------------------------------- backend parameters
_DEPTH = 6


@functools.lru_cache(maxsize=None)
def _resolvers() -> tuple:
    return tuple(catalogue.read_table("scopes.toml").get("singles22", {}).get("backend_resolvers", ()))


def _resolver(call: ast.Call) -> bool:
    name = astcache.dotted(call.func) or ""
    return any(name == r or name.endswith("." + r) for r in _resolvers())


class _Backends:
    """Every value a backend parameter takes in the run (module doc, BI#12): calls followed by name
    across the run's modules, a few steps deep."""

    def __init__(self, results: list, text_of) -> None:
        self.results, self.text_of, self.trees = results, text_of, {}
        self.py = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
        self.steps = 0

    def tree(self, i: int) -> Optional[ast.Module]:
        if i not in self.trees:
            data = self.text_of(i)
            try:
                self.trees[i] = ast.parse(data) if data else None
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                self.trees[i] = None
        return self.trees[i]

    def index(self, i: int) -> tuple[dict, set]:
        """(parents, the ids of nodes in type positions) of file `i`'s tree, computed once."""
        if ("index", i) not in self.trees:
            tree = self.tree(i)
            self.trees[("index", i)] = ({id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)},
                                        _type_positions(tree))
        return self.trees[("index", i)]

    def _files_naming(self, name: str) -> list[int]:
        word = re.compile(rb"\b" + re.escape(name.encode()) + rb"\b")
        return [i for i in self.py if word.search(self.text_of(i) or b"")]

    def _callers(self, i: int, function, owner: Optional[ast.ClassDef]) -> Optional[list]:
        """[(file, the call's function or None, call, bound)] of every reference of the function in
        the run; None where a reference is no plain call (a callback, a partial, `cls(...)`)."""
        constructor = function.name == "__init__"
        if constructor and owner is None:
            return None
        name = owner.name if constructor else function.name
        out = []
        for j in self._files_naming(name):
            tree = self.tree(j)
            if tree is None:
                return None
            names = {name} | {a.asname for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                              for a in n.names if a.name == name and a.asname}
            parents, typing = self.index(j)
            for node in ast.walk(tree):
                if id(node) in typing:
                    continue  # (an annotation, an `isinstance` test: no call)
                if isinstance(node, ast.ClassDef) and constructor and any(_last(b) in names for b in node.bases):
                    for call in ast.walk(node):  # (a subclass's `super().__init__(...)` passes on)
                        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                                and call.func.attr == "__init__" and isinstance(call.func.value, ast.Call)
                                and _last(call.func.value.func) == "super"):
                            out.append((j, _enclosing_function(parents, call), call, True))
                    continue
                if isinstance(node, ast.Name) and node.id in names or (
                        isinstance(node, ast.Attribute) and node.attr in names):
                    if node is function or (owner is not None and node is owner):
                        continue
                    parent = parents.get(id(node))
                    if isinstance(parent, ast.Call) and parent.func is node:
                        bound = constructor or isinstance(node, ast.Attribute)
                        out.append((j, _enclosing_function(parents, parent), parent, bound))
                    elif isinstance(parent, (ast.ImportFrom, ast.alias)) or isinstance(node.ctx, ast.Store):
                        continue
                    elif isinstance(parent, ast.ClassDef) and node in parent.bases:
                        continue
                    else:
                        return None  # (a reference that is no call: its values cannot be seen)
        return out

    def param_seen(self, i: int, function, name: str, depth: int = 0, visiting: frozenset = frozenset()) -> bool:
        """Whether every value of parameter `name` of `function` (in file `i`) is seen."""
        key = (i, function.lineno, name)
        self.steps += 1
        if depth > _DEPTH or key in visiting or self.steps > 400:
            return False
        visiting = visiting | {key}
        parents = self.index(i)[0]
        owner = parents.get(id(function))
        owner = owner if isinstance(owner, ast.ClassDef) else None
        callers = self._callers(i, function, owner)
        if callers is None:
            return False
        a = function.args
        positional = [p.arg for p in (*a.posonlyargs, *a.args)]
        index = positional.index(name) if name in positional else None
        method = bool(positional) and positional[0] in ("self", "cls")
        defaults = dict(zip(positional[len(positional) - len(a.defaults):], a.defaults))
        defaults.update((p.arg, d) for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None)
        if not callers and not (name in defaults and self.value_seen(i, function, defaults[name], depth, visiting)):
            return False  # (no call in the run: its default, as secondary.py reads it, or nothing)
        for j, outer, call, bound in callers:
            value = next((k.value for k in call.keywords if k.arg == name), None)
            if value is None:  # (not by keyword: by position, else in `*args`/`**kwargs`, else the default)
                at = index - (1 if method and bound else 0) if index is not None else None
                starred = [k for k, x in enumerate(call.args) if isinstance(x, ast.Starred)]
                if starred and (at is None or starred[0] <= at) or (
                        any(k.arg is None for k in call.keywords) and (at is None or at >= len(call.args))):
                    return False
                if at is not None and 0 <= at < len(call.args):
                    value = call.args[at]
            if value is None:
                if name not in defaults or not self.value_seen(i, function, defaults[name], depth, visiting):
                    return False
            elif not self.value_seen(j, outer, value, depth, visiting):
                return False
        stores = _stores(function, name)
        return stores is not None and all(self.value_seen(i, function, v, depth, visiting, own=name) for v in stores)

    def value_seen(self, i: int, function, value: ast.AST, depth: int, visiting: frozenset,
                   own: Optional[str] = None) -> bool:
        if isinstance(value, ast.Constant):
            return value.value is None or isinstance(value.value, str)
        if isinstance(value, ast.Call):
            return _resolver(value)
        if isinstance(value, ast.BoolOp):
            return all(self.value_seen(i, function, v, depth, visiting, own) for v in value.values)
        if isinstance(value, ast.IfExp):
            return all(self.value_seen(i, function, v, depth, visiting, own) for v in (value.body, value.orelse))
        if not isinstance(value, ast.Name) or function is None:
            return False
        if value.id == own:
            return True  # (the parameter itself, checked by the caller)
        a = function.args
        if value.id in {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}:
            return self.param_seen(i, function, value.id, depth + 1, visiting)
        stores = _stores(function, value.id)
        return bool(stores) and all(self.value_seen(i, function, v, depth, visiting, own=value.id) for v in stores)


def _type_positions(tree: ast.Module) -> set:
    """ids of the nodes in annotations and in the class argument of `isinstance`/`issubclass`."""
    roots = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            roots.append(node.annotation)
        elif isinstance(node, _FUNCTIONS) and node.returns is not None:
            roots.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2):
            roots.append(node.args[1])
    return {id(n) for root in roots for n in ast.walk(root)}


def _enclosing_function(parents: dict, node: ast.AST):
    current = parents.get(id(node))
    while current is not None and not isinstance(current, _FUNCTIONS):
        current = parents.get(id(current))
    return current


def _stores(function, name: str) -> Optional[list]:
    """The values `function` assigns to `name` (plain `=` and annotated assignments); None where it
    binds the name otherwise (a loop, `with`, `+=`, `global`, `:=`, `del`)."""
    values = []
    for node in ast.walk(function):
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return None
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if len(node.targets) != 1:
                return None
            values.append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            if node.value is not None:
                values.append(node.value)
    # (stores other than these assignments: loop and `with` targets, `+=`, `:=`, `del`)
    plain = {id(t) for n in ast.walk(function) if isinstance(n, ast.Assign) for t in n.targets}
    plain |= {id(n.target) for n in ast.walk(function) if isinstance(n, ast.AnnAssign)}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, (ast.Store, ast.Del)) \
                and id(node) not in plain:
            return None
    return values


def review_backend_params(results: list, paths: dict) -> list:
    """NPU304 warnings on a parameter whose every value in the run is seen (module doc): information
    with secondary.PASSED_THROUGH (a named scope); the other places of a merged finding stay."""
    from .folding import ALSO, places_of, rebuilt
    from .modpaths import RunTexts
    from .moot import is_moot
    from .secondary import FOLDED, PASSED_THROUGH

    def wanted(f: Finding) -> bool:
        return (f.code == "NPU304" and not f.fixable and f.cell is None and f.severity == "warning"
                and FOLDED not in f.message and not is_moot(f))

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(map(wanted, r.findings))]
    if not candidates:
        return results
    backends = _Backends(results, RunTexts(results, paths))
    out = list(results)
    for i in candidates:
        tree = backends.tree(i)
        if tree is None:
            continue
        functions = [n for n in ast.walk(tree) if isinstance(n, _FUNCTIONS)]
        findings = []
        for finding in out[i].findings:
            if not wanted(finding):
                findings.append(finding)
                continue
            kept, lowered = [], []
            for place in places_of(finding):
                name = place[2] or ""
                around = [f for f in functions if f.lineno <= place[0] <= (f.end_lineno or f.lineno)
                          and name in {p.arg for p in (*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs)}]
                function = max(around, key=lambda f: f.lineno) if around and name.isidentifier() else None
                backends.steps = 0
                seen = function is not None and backends.param_seen(i, function, name)
                (lowered if seen else kept).append(place)
            if not lowered:
                findings.append(finding)
                continue
            if kept:
                findings.append(rebuilt(finding, kept))
            for line, column, source in lowered:
                findings.append(dataclasses.replace(finding, line=line, column=column, source=source, also=(),
                                                    severity="info", message=(
                    f"{ALSO.sub('', finding.message)} ({PASSED_THROUGH}: every call in the run, followed through "
                    "the modules that pass it on, gives None (the default backend), a literal rewritten or reported "
                    "where it is written, or the backend the platform resolves for its device "
                    "(`get_torch_distributed_backend_str()`, `get_backend(group)`), HCCL on an NPU host)")))
        out[i] = dataclasses.replace(out[i], findings=sorted(findings))
    return out
