"""Tests kept off the NPU by a flag another module computes, values only skipped tests read, and an
allocator setter's dead fallback (issue #16, precision wave 26, round-26 audits BU#11, BV#14, BV#39;
BV#2 and BU#27 are testscopes.py and rules/scopes.toml entries).

- **`@pytest.mark.skipif(not FLAG)` with FLAG imported from a library module** (BU#11,
  `review_flag_skips`, whole run, right after flagcalls19.py): testscopes.py decides a skip
  condition from the test file alone, so `HAS_X = _has_x()` bound in a library module, where
  `_has_x()` returns True only under `current_platform.is_cuda()`/`is_rocm()`, is unknown to it.
  flagcalls19.Run reads such a flag across modules (every `return` of the function is False on an
  NPU host); here it decides the decorators of a pytest module's tests and classes
  (`@pytest.mark.skipif(cond)` true there, `skipUnless` false there, as written or through a marker
  bound to a module-level name, `requires_x = pytest.mark.skipif(...)`), only where what decides
  reads another module (a condition the file decides alone is testscopes'). The report-only places
  inside such a test, and in the module's helpers only such tests call (testscopes.helper_scopes),
  become info "in a test that does not run on an NPU host" naming the flag and where it is bound
  (moot.PHRASES: a named scope). A flag unknown there (`has_tilelang()` alone: a package probe),
  one another file overrides, or a test without the marker keeps its findings.
- **A module-level literal read only by skipped tests** (BV#14, `_skipped_constants`, per file, after
  smallshapes25.py): a pytest module's `NAME = [...]` (a literal: strings, numbers, tuples, lists;
  no call, so nothing runs at import) every read of which lies in a test or helper testscopes
  scopes out (a `parametrize` argument of the skipped test included; round-27 BX#21: also a list of
  device ids built from a device count, `[f"cuda:{i}" for i in range(n)]`): its "cuda:0" (NPU990) is
  the skipped test's device, lowered with "in a helper constant read only by tests that do not run
  on an NPU host" (moot.PHRASES "in a helper "). A name read by a test that runs there, at module
  level, or in a string (`__all__`) keeps the finding.
- **A CUDA allocator call after an accelerator-generic setter that returns first** (BV#39,
  `_accelerator_first`, per file): in a function whose body binds `x = getattr(torch._C,
  "_accelerator_<...>", None)`, then `if x is not None: x(...); return`, the statements after that
  `if` (`torch.cuda.memory._set_allocator_settings(conf)`) run only on a torch without that
  accelerator-generic binding; an NPU host on such a torch (torch_npu ships for the current
  releases) takes the setter: lowered with "in a branch an NPU host does not take" naming the
  binding. The same call with no such setter before it, or one whose `if` does not leave the
  function, keeps the finding.
- **"cuda"/"nccl" as a path component or a package-name pattern** (BV#32, BU#21, `_labels`, per
  file): the NPU990 string that is an operand of `/` (`tmp_path / "cuda" / "bin" / "nvcc"`: pathlib
  joins a folder name; a str cannot be divided otherwise), and the one that is an element of a
  module-level set, list or tuple of strings bound to a name ending in `PATTERNS`/`PACKAGES` that
  also names "torch" or "numpy" (the package-name substrings an environment report greps `pip
  list` for): lowered with resolved.LABEL (moot.NO_WORK, a named scope). A "cuda" handed to a call
  (`torch.device("cuda")`), or an element of a list bound to another name, keeps the finding.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from typing import Optional

from . import astcache
from .findings import Finding, lower_pieces

SKIPPED_TEST = "in a test that does not run on an NPU host"  # (moot.PHRASES; testscopes' phrase)
SKIPPED_CONSTANT = "in a helper constant read only by tests that do not run on an NPU host"  # (moot: "in a helper ")
DEAD_BRANCH = "in a branch an NPU host does not take"  # (moot.PHRASES)
LABEL = "a label the code resolves, not a device: "  # (moot.NO_WORK; resolved.LABEL's phrase)
_LABEL_WORDS = frozenset(('"cuda"', '"nccl"'))
_PATTERN_SET = re.compile(r"(PATTERNS|PACKAGES)$")
_PACKAGE_WORDS = frozenset(("torch", "numpy"))

_TEST_MODULE = re.compile(r"(^|/)(test_[^/]*|[^/]*_test)\.py$")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SKIP_NAMES = frozenset(("skipif", "skipunless"))


def _open(finding: Finding) -> bool:
    return not finding.fixable and finding.cell is None and finding.severity != "info"


def _shown(text: str, node: ast.AST) -> str:
    segment = " ".join((ast.get_source_segment(text, node) or ast.unparse(node)).split())
    return segment if len(segment) <= 70 else segment[:67] + "..."


# ----------------------------------------------------------------------------- BU#11: imported flags
def _marks(tree: ast.Module) -> dict[str, ast.AST]:
    """Module-level `name = <expr>` bound once (a marker stored in a variable)."""
    counts: dict[str, int] = {}
    values: dict[str, ast.AST] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name = stmt.targets[0].id
            counts[name] = counts.get(name, 0) + 1
            values[name] = stmt.value
    return {name: value for name, value in values.items() if counts[name] == 1}


def _skip_call(decorator: ast.AST, marks: dict[str, ast.AST]) -> Optional[tuple[str, ast.AST]]:
    """("skipif"/"skipunless", condition) of a skip decorator, as written or through a marker name."""
    if isinstance(decorator, ast.Name) and isinstance(marks.get(decorator.id), ast.Call):
        decorator = marks[decorator.id]
    if not (isinstance(decorator, ast.Call) and decorator.args):
        return None
    name = (astcache.dotted(decorator.func) or "").rpartition(".")[2].lower()
    return (name, decorator.args[0]) if name in _SKIP_NAMES else None


def flag_skip_scopes(run, i: int, tree: ast.Module, text: str) -> list[tuple[int, int, str]]:
    """(first, last, reason) of the tests and classes of module i that a skip decorator deciding on
    another module's flag keeps off an NPU host, and of the helpers only they call."""
    from .testscopes import helper_scopes

    marks = _marks(tree)
    scopes: list[tuple[int, int, str]] = []

    def visit(body: list) -> None:
        for stmt in body:
            if not isinstance(stmt, (*_FUNCTIONS, ast.ClassDef)):
                continue
            for decorator in stmt.decorator_list:
                found = _skip_call(decorator, marks)
                if found is None:
                    continue
                used: list = []
                truth = run.truth(i, found[1], {}, frozenset(), 0, used)
                if truth is not (found[0] == "skipif") or not any(m != i for m, _n in used):
                    continue
                first = min([stmt.lineno, *(d.lineno for d in stmt.decorator_list)])
                scopes.append((first, stmt.end_lineno or stmt.lineno, f"{_shown(text, found[1])}`{_where(run, used)}"))
                break
            else:
                if isinstance(stmt, ast.ClassDef):
                    visit(stmt.body)

    visit(tree.body)
    if scopes:
        scopes += helper_scopes(tree, scopes, classes=True)
    return scopes


def _condition_names(tree: ast.Module) -> set[str]:
    """The names the module's skip conditions read (markers stored in variables included)."""
    marks = _marks(tree)
    names: set[str] = set()
    for node in astcache.walk(tree):
        for decorator in getattr(node, "decorator_list", ()):
            found = _skip_call(decorator, marks)
            if found is not None:
                names |= {n.id for n in ast.walk(found[1]) if isinstance(n, ast.Name)}
    return names


def _settle_false_patches(run, names: set[str], results: list, text_of) -> None:
    """A flag the run's files patch only to False (`monkeypatch.setattr(mod, "FLAG", False)` in a
    test body, `FLAG = False`) is not overridden for a skip decorator: those set it off, never on,
    and a decorator is read when pytest imports the module, before any test body runs.
    flagcalls19.Run counts any `setattr`/`patch` naming the flag; here its memo is set first."""
    for name in names - set(run.overridden):
        assign = re.compile(rb"\.\s*" + re.escape(name.encode()) + rb"\s*=(?!=)[ \t]*([^\n#]*)")
        named = re.compile(rb"(?:patch|setattr)\b[^\n]*[\"'](?:[\w.]*\.)?" + re.escape(name.encode()) + rb"[\"']([^\n]*)")
        hit = found = False
        for j, result in enumerate(results):
            if not result.relpath.endswith(".py"):
                continue
            data = text_of(j)
            if not data or name.encode() not in data:
                continue
            for match in assign.finditer(data):
                found = True
                hit = hit or match.group(1).strip() != b"False"
            for match in named.finditer(data):
                found = True
                hit = hit or re.match(rb"\s*,\s*False\s*\)", match.group(1)) is None
            if hit:
                break
        if found and not hit:
            run.overridden[name] = False


def _where(run, used: list) -> str:
    """` (`FLAG` is False there, bound at path:line `FLAG = f()`)` for the other modules' flags read."""
    parts = []
    for key in dict.fromkeys(used):
        if key in run.origin:
            parts.append(f"`{key[1]}` is {run.values.get(key, False)!r} there, bound at {run.origin[key]}")
    return f" ({'; '.join(parts[:2])})" if parts else ""


def review_flag_skips(results: list, paths: dict) -> list:
    """The results, with the report-only places in a pytest module's tests that a skip marker on
    another module's flag keeps off an NPU host lowered to info (a named scope)."""
    from .flagcalls19 import Run
    from .modpaths import RunTexts
    from .testscopes import HELPER_NOTE

    text_of = RunTexts(results, paths)
    run = None
    out = list(results)
    for i, result in enumerate(results):
        if not _TEST_MODULE.search(result.relpath) or not any(_open(f) for f in result.findings):
            continue
        data = text_of(i)
        if not data or b"skip" not in data or b"import" not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        if run is None:
            run = Run(results, text_of)
        tree = run.trees.setdefault(i, tree)
        _settle_false_patches(run, _condition_names(tree), results, text_of)
        text = data.decode("utf-8", "replace")
        scopes = flag_skip_scopes(run, i, tree, text)
        if not scopes:
            continue

        def reason_of(line: int, scopes=scopes) -> Optional[str]:
            scope = next((s for s in scopes if s[0] <= line <= s[1]), None)
            if scope is None:
                return None
            if scope[2].startswith(HELPER_NOTE):
                note, why = scope[2].split(": ", 1)
                return f"in a helper {note}: `{why}"
            return f"{SKIPPED_TEST}: `{scope[2]}"

        findings: list[Finding] = []
        changed = False
        for finding in result.findings:
            lowered = lower_pieces(finding, reason_of) if _open(finding) else None
            changed = changed or lowered is not None
            findings.extend(lowered if lowered is not None else [finding])
        if changed:
            out[i] = replace(result, findings=sorted(findings))
    return out


# ----------------------------------------------------------------------------- per file
def review(findings: list[Finding], text: str, relpath: str = "") -> list[Finding]:
    """The findings of the per-file shapes of the module doc lowered to named scopes."""
    constants = bool(_TEST_MODULE.search(relpath)) and "skip" in text and any(
        _open(f) and f.code == "NPU990" for f in findings)
    allocator = "_accelerator_" in text and "getattr" in text and any(
        _open(f) and f.code == "NPU202" for f in findings)
    labels = ("/" in text or "PATTERNS" in text or "PACKAGES" in text) and any(
        _open(f) and f.code == "NPU990" and f.source in _LABEL_WORDS for f in findings)
    if not (constants or allocator or labels):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    reasons: dict[int, str] = {}
    if allocator:
        reasons.update(_accelerator_first(tree))
    constant_reasons = _skipped_constants(tree, text, findings) if constants else {}
    label_reasons = _labels(tree) if labels else {}
    if not (reasons or constant_reasons or label_reasons):
        return findings
    out: list[Finding] = []
    for finding in findings:
        table = dict(reasons)
        if finding.code == "NPU990":
            table.update(constant_reasons)
        if finding.code == "NPU990" and finding.source in _LABEL_WORDS:
            table.update(label_reasons)
        lowered = lower_pieces(finding, table.get) if _open(finding) and table else None
        out.extend(lowered if lowered is not None else [finding])
    return sorted(out) if len(out) != len(findings) or any(a is not b for a, b in zip(out, findings)) else out


# ----------------------------------------------------------------------------- BV#14: skipped constants
def _literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_literal(e) for e in node.elts)
    if isinstance(node, ast.ListComp):  # (round-27 BX#21: `[f"cuda:{i}" for i in range(n_devices)]`)
        return _device_ids(node)
    return False


def _device_ids(node: ast.ListComp) -> bool:
    """A list of device ids built from a device count: a string or f-string of the loop name over
    `range(...)` whose only calls are `range` and a `*.device_count()` (which runs on any host)."""
    if len(node.generators) != 1 or node.generators[0].ifs or not isinstance(node.elt, (ast.Constant, ast.JoinedStr)):
        return False
    source = node.generators[0].iter
    if not (isinstance(source, ast.Call) and astcache.dotted(source.func) == "range"):
        return False
    for inner in ast.walk(source):
        if isinstance(inner, ast.Call) and inner is not source and not (
                (astcache.dotted(inner.func) or "").rsplit(".", 1)[-1] == "device_count" and not inner.args):
            return False
    return True


def _skipped_constants(tree: ast.Module, text: str, findings: list[Finding]) -> dict[int, str]:
    from .testscopes import HELPER_NOTE, cuda_only_test_scopes

    kept = frozenset(f.line for f in findings if f.code == "NPU110" and f.source.endswith("is_available"))
    scopes = cuda_only_test_scopes(text, kept, classes=True)
    if not scopes:
        return {}
    constants: dict[str, ast.Assign] = {}
    counts: dict[str, int] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            counts[stmt.targets[0].id] = counts.get(stmt.targets[0].id, 0) + 1
            if _literal(stmt.value):
                constants[stmt.targets[0].id] = stmt
    constants = {n: s for n, s in constants.items() if counts[n] == 1 and n != "__all__"}
    if not constants:
        return {}
    reads: dict[str, list[int]] = {name: [] for name in constants}
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name) and node.id in reads and not isinstance(node.ctx, ast.Store):
            reads[node.id].append(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in reads:
            reads[node.value].append(0)  # (named in a string: `__all__`, getattr)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                if name in reads:
                    reads[name].append(0)
    out: dict[int, str] = {}
    for name, lines in reads.items():
        if not lines or 0 in lines:
            continue
        held = [next((s for s in scopes if s[0] <= line <= s[1]), None) for line in lines]
        if any(s is None for s in held):
            continue
        why = held[0][2].split(": ", 1)[1] if held[0][2].startswith(HELPER_NOTE) else held[0][2]
        stmt = constants[name]
        for line in range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1):
            out[line] = f"{SKIPPED_CONSTANT}: `{name}`, read only at line{'s' if len(set(lines)) > 1 else ''} " \
                        f"{', '.join(map(str, sorted(set(lines))))}: `{why}`"
    return out


# ----------------------------------------------------------------------------- BV#39: accelerator setter first
def _accelerator_binding(stmt: ast.stmt) -> Optional[tuple[str, str]]:
    """(local name, attribute) of `x = getattr(torch._C, "_accelerator_...", None)`."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    call = stmt.value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "getattr"
            and len(call.args) == 3 and astcache.dotted(call.args[0]) == "torch._C"
            and isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str)
            and call.args[1].value.startswith("_accelerator_")):
        return None
    return stmt.targets[0].id, call.args[1].value


def _present_test(test: ast.AST, name: str) -> bool:
    """`name is not None` or `name`."""
    if isinstance(test, ast.Name):
        return test.id == name
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == name
            and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot)
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None)


def _accelerator_first(tree: ast.Module) -> dict[int, str]:
    out: dict[int, str] = {}
    for function in astcache.nodes(tree, _FUNCTIONS):
        body = function.body
        for k, stmt in enumerate(body):
            bound = _accelerator_binding(stmt)
            if bound is None:
                continue
            following = body[k + 1] if k + 1 < len(body) else None
            if not (isinstance(following, ast.If) and not following.orelse and _present_test(following.test, bound[0])
                    and following.body and isinstance(following.body[-1], ast.Return)):
                break
            if any(isinstance(n, ast.Name) and n.id == bound[0] and isinstance(n.ctx, ast.Store)
                   for s in body[k + 2:] for n in ast.walk(s)):
                break
            rest = body[k + 2:]
            if not rest:
                break
            why = (f"{DEAD_BRANCH}: after `if {ast.unparse(following.test)}: ... return`, the fallback for a "
                   f"torch without `torch._C.{bound[1]}`, the accelerator-generic binding a current torch "
                   f"defines for every accelerator, torch_npu's included")
            for line in range(rest[0].lineno, (rest[-1].end_lineno or rest[-1].lineno) + 1):
                out[line] = why
            break
    return out


# ----------------------------------------------------------------------------- BV#32, BU#21: labels
def _labels(tree: ast.Module) -> dict[int, str]:
    """{line: reason} of the "cuda"/"nccl" strings that are path components or package patterns.
    A line with any other "cuda"/"nccl" string is left out (the finding's place is per line)."""
    labelled: dict[int, str] = {}
    other: set[int] = set()
    patterns: set[int] = set()
    for stmt in tree.body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and _PATTERN_SET.search(stmt.targets[0].id) and isinstance(stmt.value, (ast.Set, ast.List, ast.Tuple))
                and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in stmt.value.elts)
                and _PACKAGE_WORDS & {e.value for e in stmt.value.elts}):
            name = stmt.targets[0].id
            for element in stmt.value.elts:
                if element.value in ("cuda", "nccl"):
                    patterns.add(id(element))
                    labelled[element.lineno] = (f"{LABEL}a package-name pattern of `{name}`, which an "
                                                f"environment report matches against installed packages")
    parents = astcache.parents(tree)
    for node in astcache.walk(tree):
        if not (isinstance(node, ast.Constant) and node.value in ("cuda", "nccl")) or id(node) in patterns:
            continue
        parent = parents.get(id(node))
        if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Div):
            labelled.setdefault(node.lineno, f'{LABEL}a path component (`... / "{node.value}"`), a folder name')
        else:
            other.add(node.lineno)
    return {line: why for line, why in labelled.items() if line not in other}
