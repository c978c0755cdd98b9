"""Labels, moot custom ops, CPU-only FP8 tests and a profiler around a reported library (issue #16,
precision wave 24, round-24 audits BP#9, BP#10, BP#37, BO#2, BQ#3).

Per file (run.migrate_file, after the merge of one construct's places), on report-only findings;
each shape decides on the exact construct, and every place of a merged finding must fit it:

- **The "cuda" entry of a platform-keyed table that a platform hook extends** (BP#9, `review`):
  the NPU990 warning on a `"cuda"` string that is a key of a module-level dict literal
  (`SUPPORTED = {"cuda": ("cuda", "cpu"), "xpu": ...}`) or lies in that key's value, where the same
  module later calls `SUPPORTED.update(<call>)` with a call of a name holding "platform"
  (`current_platform.get_supported_devices()`): the table is keyed by platform, and an out-of-tree
  platform (vllm-ascend's) adds its own entry through that hook. The "cuda" entry is a label of
  the CUDA platform's row; lowered with resolved.LABEL (moot.NO_WORK, a named scope). A table
  with no such hook (looked up by a device type on the spot, a KeyError on an NPU host) keeps the
  finding.
- **`parametrize` platform names fed to a monkeypatched platform predicate** (BP#10, `review`):
  "cuda" in a case of `@pytest.mark.parametrize("..., platform, ...", [...])` whose parameter
  the test reads only inside `monkeypatch.setattr(...)` / `mock.patch(...)` calls and only in
  comparisons (`monkeypatch.setattr(current_platform, "is_cuda", lambda: platform == "cuda")`):
  the test simulates the platform, whatever host runs it, so the string is a label (and so is a
  "cuda" compared inside that patch). A parameter the test also reads elsewhere (a device it
  allocates on, a branch of its own) keeps the finding.
- **A custom op registered only where a CUDA-only package loads** (BP#37, `review`): the NPU990
  `device_types=["cuda"]` of `torch.library.custom_op(...)` inside a module-level `if X is not
  None:` where X is bound to None at module level and otherwise only inside a block that imports
  a package no NPU host has (sweep.toml `never_on_npu`: `flash_attn_3`), or in a `try` importing
  one, and the op's body reads X (`X.fwd(...)`). On an NPU host X stays None, the op is never
  registered and its body could not run there: a named scope (CUSTOM_OP_UNREGISTERED, moot
  PHRASES). An op whose body is plain torch, or one registered unconditionally, keeps the advice.
- **FP8 in a CPU-marked test module that names no device** (BO#2, `review`): the NPU913 places of
  a test module (`test_*.py`, `*_test.py`) with `pytestmark = pytest.mark.<...cpu...>` whose text
  names no CUDA, GPU, NPU, accelerator or device at all: its tensors are CPU tensors, and FP8
  casts on CPU run on an NPU host as on any other; lowered with notcompute.CPU_TEST
  (moot.AS_WRITTEN). A module without that marker, or one that names a device, keeps them.
- **A profiler's CUDA activity around a CUDA-only library already reported** (BQ#3, `review`): the
  NPU935 places in a benchmark (a path with a `bench` part) whose `with profile(...)` bodies call
  only functions or methods named after a package of the file's own NPU911 error
  (`attn._forward_flashinfer(...)` beside `from flashinfer.testing import ...`; a name of four
  letters or more, so that a short one such as `fla` matches no unrelated word), apart from
  copies, syncs and profiler steps: the profiled work cannot run on an NPU host at all, so asking
  the profiler for CUDA activity changes nothing there. Folded into that NPU911 error, whose
  message names it. A profiled body calling anything else keeps the NPU935.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from typing import Optional

from . import astcache, catalogue
from .findings import Finding

LABEL = "a label the code resolves, not a device: "  # (moot.NO_WORK, resolved.py's phrase)
CUSTOM_OP_UNREGISTERED = "a custom op registered only where a CUDA-only package loads"  # (moot.PHRASES)
CPU_TEST = "FP8 on CPU tensors in a CPU test"  # (moot.AS_WRITTEN; notcompute.CPU_TEST's phrase)
PROFILED_LIBRARY = "profiling only calls of this CUDA-only package, which an NPU host cannot run"

_TEST_MODULE = re.compile(r"(^|/)(test_[^/]*|[^/]*_test)\.py$")
_NAMES_DEVICE = re.compile(r"(?i)cuda|gpu|npu|accelerator|device|xpu|mps|set_default_device")
_BENCH = re.compile(r"(^|/)[^/]*bench[^/]*(/|$)")
_PATCHERS = re.compile(r"(^|\.)(setattr|patch|patch\.object)$")
_INCIDENTAL = frozenset({"clone", "contiguous", "synchronize", "step", "record_function", "detach", "range",
                         "print", "len", "item", "cpu"})
_CUSTOM_OP = re.compile(r"custom_op")


def _places(finding: Finding) -> list[int]:
    return [finding.line, *(line for line, _c, _s in finding.also)]


def _ours(finding: Finding) -> bool:
    return not finding.fixable and finding.cell is None and finding.severity != "info"


def _cuda_strings(tree: ast.Module) -> dict[int, list[ast.Constant]]:
    out: dict[int, list[ast.Constant]] = {}
    for node in astcache.walk(tree):
        if isinstance(node, ast.Constant) and node.value == "cuda":
            out.setdefault(node.lineno, []).append(node)
    return out


def _inside(node: ast.AST, outer: ast.AST) -> bool:
    return (outer.lineno, outer.col_offset) <= (node.lineno, node.col_offset) and \
        (node.end_lineno or node.lineno, node.end_col_offset or 0) <= (outer.end_lineno or outer.lineno,
                                                                          outer.end_col_offset or 0)


# ----------------------------------------------------------------------------- BP#9: platform tables
def _hooked_tables(tree: ast.Module) -> dict[str, tuple[ast.Dict, int, str]]:
    """Module-level dict literals `NAME = {...}` that a later `NAME.update(<platform call>)` extends:
    name -> (the dict, the hook's line, the hook's callee)."""
    tables: dict[str, ast.Dict] = {}
    hooks: dict[str, tuple[int, str]] = {}
    for stmt in tree.body:
        target = value = None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign):
            target, value = stmt.target, stmt.value
        if isinstance(target, ast.Name) and isinstance(value, ast.Dict):
            tables[target.id] = value
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "update"
                and isinstance(call.func.value, ast.Name) and len(call.args) == 1
                and isinstance(call.args[0], ast.Call)):
            callee = astcache.dotted(call.args[0].func) or ""
            if any("platform" in part.lower() for part in callee.split(".")[:-1]):
                hooks[call.func.value.id] = (stmt.lineno, callee)
    return {name: (table, *hooks[name]) for name, table in tables.items()
            if name in hooks and hooks[name][0] > table.lineno}


def _table_label(tables: dict, string: ast.Constant) -> Optional[str]:
    for name, (table, line, callee) in tables.items():
        for key, value in zip(table.keys, table.values):
            if not (isinstance(key, ast.Constant) and key.value == "cuda"):
                continue
            if string is key or _inside(string, value):
                return (f'{LABEL}the "cuda" entry of the platform-keyed table `{name}`, which line {line} '
                        f"extends through the platform hook `{callee}()`, where an out-of-tree platform "
                        "adds its own entry")
    return None


# ----------------------------------------------------------------------------- BP#10: simulated platforms
def _parametrized_labels(tree: ast.Module) -> dict[int, str]:
    """{id of a "cuda" string: reason} for the parametrize cases of a parameter the test only
    simulates a platform with, and the "cuda" compared with it inside the patch (one pass per file)."""
    out: dict[int, str] = {}
    for function in astcache.nodes(tree, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if not function.decorator_list or "parametrize" not in "".join(
                astcache.dotted(d.func) or "" for d in function.decorator_list if isinstance(d, ast.Call)):
            continue
        simulated = _simulated_params(function)
        if not simulated:
            continue
        for decorator in function.decorator_list:
            if not (isinstance(decorator, ast.Call) and (astcache.dotted(decorator.func) or "").endswith("parametrize")
                    and len(decorator.args) >= 2 and isinstance(decorator.args[0], ast.Constant)
                    and isinstance(decorator.args[0].value, str)):
                continue
            names = [n.strip() for n in decorator.args[0].value.split(",")]
            for string in ast.walk(decorator.args[1]):
                if isinstance(string, ast.Constant) and string.value == "cuda":
                    param = _param_of(decorator.args[1], string, names)
                    if param in simulated:
                        out[id(string)] = (f"{LABEL}a platform name of the parametrized case `{param}`, which the "
                                           "test reads only in comparisons inside a patch of the platform (it "
                                           "simulates the platform on any host)")
        for patch in _patch_calls(function):
            for compare in ast.walk(patch):
                if not isinstance(compare, ast.Compare):
                    continue
                name = next((n.id for n in ast.walk(compare) if isinstance(n, ast.Name) and n.id in simulated), None)
                if name is None:
                    continue
                for string in ast.walk(compare):
                    if isinstance(string, ast.Constant) and string.value == "cuda":
                        out.setdefault(id(string), f"{LABEL}compared with the parametrized platform name `{name}` "
                                                   "inside a patch of the platform (the test simulates the "
                                                   "platform on any host)")
    return out


def _param_of(cases: ast.AST, string: ast.Constant, names: list[str]) -> Optional[str]:
    if not isinstance(cases, (ast.List, ast.Tuple)):
        return None
    for case in cases.elts:
        if isinstance(case, ast.Call) and (astcache.dotted(case.func) or "").endswith("param"):
            elements = case.args if len(names) > 1 else case.args[:1]
        elif isinstance(case, (ast.Tuple, ast.List)) and len(names) > 1:
            elements = case.elts
        else:
            elements = [case]
        for index, element in enumerate(elements):
            if element is string and index < len(names):
                return names[index]
    return None


def _patch_calls(function: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(function) if isinstance(n, ast.Call)
            and _PATCHERS.search(astcache.dotted(n.func) or "")]


def _only_simulated(function: ast.AST, param: str) -> bool:
    """Every read of `param` in the body is a comparison inside a patch call (at least one)."""
    patches = _patch_calls(function)
    compares = [c for c in ast.walk(function) if isinstance(c, ast.Compare)]
    reads = [n for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == param and isinstance(n.ctx, ast.Load)]
    if not reads or not patches:
        return False
    return all(any(_inside(r, p) for p in patches) and any(_inside(r, c) for c in compares) for r in reads)


def _simulated_params(function: ast.AST) -> list[str]:
    out = []
    for decorator in getattr(function, "decorator_list", []):
        if isinstance(decorator, ast.Call) and (astcache.dotted(decorator.func) or "").endswith("parametrize") \
                and decorator.args and isinstance(decorator.args[0], ast.Constant) \
                and isinstance(decorator.args[0].value, str):
            out += [n.strip() for n in decorator.args[0].value.split(",") if _only_simulated(function, n.strip())]
    return out


# ----------------------------------------------------------------------------- BP#37: unregistered custom ops
@functools.lru_cache(maxsize=None)
def _never_on_npu() -> frozenset:
    return frozenset(catalogue.read_table("sweep.toml")["availability"]["never_on_npu"])


def _imports_absent(block: ast.AST) -> Optional[str]:
    """A package no NPU host has, imported or probed (`find_spec("pkg")`) in `block`."""
    for node in ast.walk(block):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        elif isinstance(node, ast.Call) and (astcache.dotted(node.func) or "").endswith("find_spec") and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            names = [node.args[0].value]
        for name in names:
            if name.split(".")[0] in _never_on_npu():
                return name.split(".")[0]
    return None


def _none_unless_absent(tree: ast.Module, name: str) -> Optional[str]:
    """`name` is None at module level unless a package no NPU host has loads: the package, else None."""
    none_bound, package = False, None
    for stmt in tree.body:
        binds = [n for n in ast.walk(stmt) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)]
        if not binds:
            continue
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and stmt.value.value is None:
            none_bound = True
            continue
        if isinstance(stmt, ast.If) and not any(n.id == name for s in stmt.orelse for n in ast.walk(s)
                                                 if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)):
            found = _imports_absent(stmt.test) or _imports_absent(ast.Module(body=stmt.body, type_ignores=[]))
        elif isinstance(stmt, ast.Try):
            found = _imports_absent(ast.Module(body=stmt.body, type_ignores=[]))
            none_bound = none_bound or any(
                isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant) and s.value.value is None
                for h in stmt.handlers for s in h.body)
        else:
            return None
        if found is None:
            return None
        package = package or found
    return package if none_bound and package else None


def _unregistered_op(tree: ast.Module, line: int) -> Optional[str]:
    for stmt in tree.body:
        if not (isinstance(stmt, ast.If) and stmt.lineno < line <= (stmt.end_lineno or stmt.lineno)):
            continue
        test = stmt.test
        if not (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and len(test.ops) == 1
                and isinstance(test.ops[0], ast.IsNot) and isinstance(test.comparators[0], ast.Constant)
                and test.comparators[0].value is None):
            return None
        guard = test.left.id
        package = _none_unless_absent(tree, guard)
        if package is None:
            return None
        for function in ast.walk(stmt):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            decorators = [d for d in function.decorator_list if isinstance(d, ast.Call)
                          and _CUSTOM_OP.search(astcache.dotted(d.func) or "")
                          and d.lineno <= line <= (d.end_lineno or d.lineno)]
            if decorators and any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                                  and n.value.id == guard for s in function.body for n in ast.walk(s)):
                return (f"{CUSTOM_OP_UNREGISTERED}: `{function.name}` is defined only under `{guard} is not None` "
                        f"(line {stmt.lineno}), and `{guard}` is bound only where `{package}` loads, which no NPU "
                        f"host has; its body calls `{guard}`, so the op is never registered there and needs no "
                        "NPU kernel")
        return None
    return None


# ----------------------------------------------------------------------------- BO#2: CPU-marked test modules
def _cpu_marked(tree: ast.Module) -> Optional[str]:
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets):
            marks = stmt.value.elts if isinstance(stmt.value, (ast.List, ast.Tuple)) else [stmt.value]
            for mark in marks:
                name = astcache.dotted(mark.func if isinstance(mark, ast.Call) else mark) or ""
                if ".mark." in name and "cpu" in name.rsplit(".", 1)[-1].lower():
                    return name
    return None


# ----------------------------------------------------------------------------- BQ#3: profiled libraries
def _profiled_only(tree: ast.Module, line: int, packages: set[str]) -> Optional[str]:
    """The package the `with profile(...)` holding `line` only calls into, else None."""
    for node in astcache.nodes(tree, (ast.With,)):
        for item in node.items:
            call = item.context_expr
            if not (isinstance(call, ast.Call) and call.lineno <= line <= (call.end_lineno or call.lineno)
                    and (astcache.dotted(call.func) or "").rpartition(".")[2] == "profile"):
                continue
            called = set()
            for stmt in node.body:
                for n in ast.walk(stmt):
                    if isinstance(n, ast.Call):
                        name = (astcache.dotted(n.func) or getattr(n.func, "attr", "") or "").rpartition(".")[2]
                        if name and name not in _INCIDENTAL:
                            called.add(name)
            hits = {p for p in packages for name in called if len(p) >= 4 and p in name.lower()}
            if called and len(hits) == 1 and all(any(p in name.lower() for p in hits) for name in called):
                return hits.pop()
            return None
    return None


def _library_error(findings: list[Finding]) -> dict[str, Finding]:
    out = {}
    for finding in findings:
        if finding.code == "NPU911" and finding.severity == "error" and not finding.fixable and finding.cell is None:
            match = re.search(r"import (?:from )?`([\w.]+)`", finding.message)
            if match:
                out.setdefault(match.group(1).split(".")[0].lower(), finding)
    return out


# ----------------------------------------------------------------------------- the review
def review(findings: list[Finding], text: str, relpath: str = "") -> list[Finding]:
    """The findings of the shapes of the module doc, lowered to named scopes or folded."""
    strings = [f for f in findings if _ours(f) and f.code == "NPU990" and f.source == '"cuda"']
    fp8 = [f for f in findings if _ours(f) and f.code == "NPU913"] if (
        "pytestmark" in text and _TEST_MODULE.search(relpath) and not _NAMES_DEVICE.search(text)) else []
    profiles = [f for f in findings if _ours(f) and f.code == "NPU935"] if _BENCH.search(relpath) else []
    if not strings and not fp8 and not profiles:
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    out = []
    cuda_at = _cuda_strings(tree) if strings else {}
    tables = _hooked_tables(tree) if strings else {}
    parametrized = _parametrized_labels(tree) if strings and "parametrize" in text else {}
    marker = _cpu_marked(tree) if fp8 else None
    libraries = _library_error(findings) if profiles else {}
    folds: dict[int, list[tuple[Finding, str]]] = {}
    for finding in findings:
        reason = None
        if any(finding is f for f in strings):
            out += _split_strings(tree, tables, cuda_at, finding, parametrized)
            continue
        if marker and any(finding is f for f in fp8):
            reason = (f"{CPU_TEST}: the module is marked `{marker}` and names no device, so its tensors are CPU "
                      "tensors; FP8 casts on CPU run on an NPU host as written")
        elif libraries and any(finding is f for f in profiles):
            from .folding import places_of, rebuilt

            places = places_of(finding)
            packages = [_profiled_only(tree, line, set(libraries)) for line, _c, _s in places]
            rest = [p for p, package in zip(places, packages) if package is None]
            for package in dict.fromkeys(p for p in packages if p is not None):
                piece = rebuilt(finding, [p for p, q in zip(places, packages) if q == package])
                folds.setdefault(id(libraries[package]), []).append((piece, named_profile(piece)))
            if len(rest) < len(places):
                if rest:
                    out.append(rebuilt(finding, rest))
                continue
        if reason is not None:
            finding = dataclasses.replace(finding, severity="info", message=f"{finding.message} ({reason})")
        out.append(finding)
    if folds:
        out = [_absorbed(f, folds[id(f)]) if id(f) in folds else f for f in out]
    return out


def named_profile(finding: Finding) -> str:
    lines = ", ".join(str(line) for line in _places(finding))
    noun = "line" if len(_places(finding)) == 1 else "lines"
    return f"`{finding.source}` (NPU935, {noun} {lines})"


def _absorbed(target: Finding, folded: list[tuple[Finding, str]]) -> Finding:
    shown = ", ".join(what for _f, what in folded)
    return dataclasses.replace(target, message=(
        f"{target.message} (also the profiler's CUDA activity {shown}: {PROFILED_LIBRARY}; ported with it)"))


def _place_reason(tree: ast.Module, tables: dict, cuda_at: dict, finding: Finding, line: int,
                  parametrized: dict) -> Optional[str]:
    """The reason every "cuda" string of `line` is a label (or a moot op's key), else None."""
    nodes = cuda_at.get(line, [])
    reasons = []
    for node in nodes:
        why = (_table_label(tables, node) if tables else None) or parametrized.get(id(node)) \
            or _op_reason(tree, finding, line)
        if why is None:
            return None
        reasons.append(why)
    return reasons[0] if reasons else None


def _split_strings(tree: ast.Module, tables: dict, cuda_at: dict, finding: Finding,
                   parametrized: dict) -> list[Finding]:
    """`finding` lowered where each of its places is one of the shapes; a merged finding whose
    places are only partly so is split: the rest stays at its severity (folding.rebuilt)."""
    from .folding import places_of, rebuilt

    places = places_of(finding)
    reasons = [_place_reason(tree, tables, cuda_at, finding, line, parametrized) for line, _c, _s in places]
    if not any(reasons):
        return [finding]
    lowered = [p for p, r in zip(places, reasons) if r]
    rest = [p for p, r in zip(places, reasons) if not r]
    first = next(r for r in reasons if r)
    out = [rebuilt(finding, rest)] if rest else []
    piece = rebuilt(finding, lowered)
    out.append(dataclasses.replace(piece, severity="info", message=f"{piece.message} ({first})"))
    return sorted(out)


def _op_reason(tree: ast.Module, finding: Finding, line: int) -> Optional[str]:
    if "custom op" not in finding.message:
        return None
    return _unregistered_op(tree, line)
