"""Probes that fall back and test modules that cannot be collected on an NPU host (issue #16,
round-13 audits AI#10 and AJ#27).

* **A CUDA architecture list read only for its emptiness** (`review_arch_list`, per file, from
  run.migrate_file). `torch.cuda.get_arch_list()` returns `[]` where CUDA is not available, as on an
  NPU host (torch_npu leaves `torch.cuda` as torch's CPU build has it). A call whose result is only
  iterated (`for arch in torch.cuda.get_arch_list():`, a comprehension's `for ... in`), or only
  tested for truth (`if torch.cuda.get_arch_list():`, `not ...`), runs there as written: the loop
  does nothing, the test is false. A comprehension's list bound to a name counts when every read
  of the name is such a test or iteration, or sits in the body of `if name:` (optimum-quanto's
  `supported_sm = [... for arch in torch.cuda.get_arch_list() ...]` then `if supported_sm:`). Its
  NPU202 finding is info with the reason `ARCH_LIST_EMPTY` (moot.AS_WRITTEN: a scope that runs as
  written). An indexed (`get_arch_list()[0]`), compared (`"sm_90" in get_arch_list()`) or passed-on
  list keeps its finding.
* **A test module that loads a CUDA-only extension at import** (`review_loader_tests`, whole run,
  from runplan.whole_run_passes). A test file whose module-level code runs `X().load()` (colossalai's
  `inference_ops = InferenceOpsLoader().load()`), where `X` is a class of the project imported from
  a module in which its `REGISTRY` lists only CUDA extension classes (names with `Cuda`/`CUDA`, none
  with `Npu`/`Cpu`) and a `load` method of that module asserts or raises when none is usable: the
  module's import fails on an NPU host, so pytest never collects its tests. Its report-only
  findings are info with fp8tests.FAILS_TO_IMPORT and the place (moot.PHRASES: a named skipped
  scope), as testscopes does for a module-level skip. A loader whose registry has an NPU or CPU
  extension, a `load()` inside a function or a `try`, a non-test module, keep their findings.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache
from .findings import Finding

ARCH_LIST_EMPTY = ("a CUDA architecture probe whose empty answer the code handles: `torch.cuda.get_arch_list()` "
                   "returns [] where CUDA is not available, as on an NPU host, and the code only iterates or "
                   "tests the list")
_ARCH = re.compile(r"(?:^|\.)get_arch_list$")


def _arch_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and not node.args and not node.keywords \
        and bool(_ARCH.search(astcache.dotted(node.func)))


def _truth_test(node: ast.AST, parents: dict) -> bool:
    """`node` is read only for its truth: the test of an `if`/`while`/`assert`/conditional
    expression, the operand of `not`, or an operand of `and`/`or` that is itself such a test."""
    parent = parents.get(id(node))
    if isinstance(parent, (ast.If, ast.While, ast.IfExp, ast.Assert)) and parent.test is node:
        return True
    if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
        return True
    if isinstance(parent, ast.BoolOp):
        return _truth_test(parent, parents)
    return False


def _iterated(node: ast.AST, parents: dict) -> bool:
    """`node` is the iterable of a `for` statement or of a comprehension's `for`."""
    parent = parents.get(id(node))
    return isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)) and parent.iter is node


def _under_truth_test(node: ast.AST, name: str, parents: dict) -> bool:
    """`node` sits in the body of an `if name:` (or `if name and ...:`)."""
    child, parent = node, parents.get(id(node))
    while parent is not None:
        if isinstance(parent, ast.If) and any(child is s for s in parent.body):
            tests = parent.test.values if isinstance(parent.test, ast.BoolOp) and isinstance(
                parent.test.op, ast.And) else [parent.test]
            if any(isinstance(t, ast.Name) and t.id == name for t in tests):
                return True
        child, parent = parent, parents.get(id(parent))
    return False


def _empty_handled(call: ast.Call, tree: ast.Module, parents: dict) -> bool:
    """The call's list is only iterated or tested for truth (see the module's doc)."""
    if _truth_test(call, parents) or (_iterated(call, parents) and not isinstance(parents.get(id(call)),
                                                                                   ast.comprehension)):
        return True
    if not _iterated(call, parents):
        return False
    comp = parents.get(id(parents.get(id(call))))
    if not isinstance(comp, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
        return False
    holder = parents.get(id(comp))
    if _truth_test(comp, parents) or (_iterated(comp, parents) and not isinstance(holder, ast.comprehension)):
        return True
    if not (isinstance(holder, ast.Assign) and len(holder.targets) == 1 and isinstance(holder.targets[0], ast.Name)):
        return False
    name = holder.targets[0].id
    scope = parents.get(id(holder))
    while scope is not None and not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        scope = parents.get(id(scope))
    if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False  # (a module-level name may be read from other modules)
    reads = 0
    for node in ast.walk(scope):
        if isinstance(node, ast.Name) and node.id == name:
            if isinstance(node.ctx, ast.Store) and node is not holder.targets[0]:
                return False  # (bound again: not only this list)
            if isinstance(node.ctx, ast.Load):
                reads += 1
                if not (_truth_test(node, parents) or _under_truth_test(node, name, parents)):
                    return False
    return reads > 0


def review_arch_list(findings: list[Finding], text: str) -> list[Finding]:
    """The NPU202 findings on `torch.cuda.get_arch_list()` whose empty answer the code handles,
    lowered to info with ARCH_LIST_EMPTY (see the module's doc); each place of a merged finding is
    judged on its own (findings.lower_pieces)."""
    from .findings import lower_pieces

    candidates = [f for f in findings if f.code == "NPU202" and not f.fixable and f.cell is None
                  and f.severity != "info" and "`torch.cuda.get_arch_list`" in f.message]
    if not candidates or "get_arch_list" not in text:
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    calls: dict[int, list] = {}
    for node in ast.walk(tree):
        if _arch_call(node):
            calls.setdefault(node.func.lineno, []).append(node)

    def reason_of(line: int) -> Optional[str]:
        here = calls.get(line)
        return ARCH_LIST_EMPTY if here and all(_empty_handled(c, tree, parents) for c in here) else None

    chosen = {id(f) for f in candidates}
    out: list[Finding] = []
    for finding in findings:
        pieces = lower_pieces(finding, reason_of) if id(finding) in chosen else None
        out.extend([finding] if pieces is None else pieces)
    return sorted(out)


# ----------------------------------------------------------------------------- loaders at import
_LOAD_AT_IMPORT = re.compile(rb"^(?:\w+\s*=\s*)?(\w+)\(\)\.load\(", re.MULTILINE)
_CUDA_NAME = re.compile(r"Cuda|CUDA")
_OTHER_NAME = re.compile(r"Npu|NPU|Cpu|CPU|Ascend")


def _loaded_class(stmt: ast.stmt) -> Optional[str]:
    """`X` of a module-level `X().load(...)` or `name = X().load(...)`."""
    value = stmt.value if isinstance(stmt, (ast.Assign, ast.Expr, ast.AnnAssign)) else None
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "load":
        inner = value.func.value
        if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and not inner.args and not inner.keywords:
            return inner.func.id
    return None


def _cuda_only_registry(tree: ast.Module, name: str) -> Optional[list[str]]:
    """The CUDA extension classes of class `name`'s `REGISTRY` in `tree` when it lists only such
    classes and a `load` method of the module asserts or raises; None otherwise."""
    registry = None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "REGISTRY"
                                                        for t in stmt.targets):
                    registry = stmt.value
    if not isinstance(registry, (ast.List, ast.Tuple)) or not registry.elts:
        return None
    names = [astcache.dotted(e) for e in registry.elts]
    if not all(n and _CUDA_NAME.search(n) and not _OTHER_NAME.search(n) for n in names):
        return None
    loads = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "load"]
    if not any(isinstance(s, (ast.Assert, ast.Raise)) for f in loads for s in ast.walk(f)):
        return None
    return names


def review_loader_tests(results: list, paths: dict) -> list:
    """The report-only findings of test modules that load a CUDA-only extension at import, lowered
    to info with the reason (see the module's doc); `results` is not changed."""
    from .fp8tests import FAILS_TO_IMPORT, TEST_FILE
    from .modpaths import RunTexts, module_names, resolve_relative
    from .moot import is_moot

    def candidate(finding) -> bool:
        return not finding.fixable and finding.cell is None and not is_moot(finding)

    text_of = RunTexts(results, paths)
    targets = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and TEST_FILE.search(r.relpath)
               and any(candidate(f) for f in r.findings)]
    targets = [i for i in targets if _LOAD_AT_IMPORT.search(text_of(i) or b"")]
    if not targets:
        return results
    by_dotted: dict[str, int] = {}
    by_stem: dict[str, int] = {}
    for i, result in enumerate(results):
        if result.relpath.endswith(".py"):
            by_stem[result.relpath[:-3]] = i
            for dotted in module_names(result.relpath):
                by_dotted.setdefault(dotted, i)
    verdicts: dict[tuple, Optional[list]] = {}
    out = list(results)
    for i in targets:
        tree = astcache.parse(text_of(i))
        if tree is None:
            continue
        imported: dict[str, tuple] = {}
        for stmt in tree.body:
            if isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    imported[alias.asname or alias.name] = (stmt.module or "", stmt.level, alias.name)
        why = None
        for stmt in tree.body:
            local = _loaded_class(stmt)
            if local is None or local not in imported:
                continue
            module, level, name = imported[local]
            if level:
                stem = resolve_relative(results[i].relpath, level, module)
                j = by_stem.get(stem, by_stem.get(f"{stem}/__init__"))
            else:
                j = by_dotted.get(module)
            if j is None:
                continue
            key = (j, name)
            if key not in verdicts:
                data = text_of(j) or b""
                verdicts[key] = None
                if b"REGISTRY" in data and f"class {name}".encode() in data:
                    module_tree = astcache.parse(data)
                    verdicts[key] = None if module_tree is None else _cuda_only_registry(module_tree, name)
            if verdicts[key]:
                why = (f"line {stmt.lineno} runs `{local}().load()` at import, and `{name}` "
                       f"({results[j].relpath}) registers only CUDA extensions "
                       f"({', '.join(f'`{n}`' for n in verdicts[key])}), so loading fails where none is usable")
                break
        if why is None:
            continue
        findings = [dataclasses.replace(f, severity="info", message=f"{f.message} ({FAILS_TO_IMPORT}: {why})")
                    if candidate(f) else f for f in results[i].findings]
        out[i] = dataclasses.replace(results[i], findings=findings)
    return out
