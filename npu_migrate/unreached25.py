"""Info notes the run itself proves unreached on an NPU host become named scopes (issue #16, round 25:
BR#23, BR#28, BS#15; the owner's policy for "the note says an NPU host does not get there").

Several passes lower a report-only finding to info with a clause that says why an NPU host does
not reach the construct. Where that clause rests on a test the tool PROVES false on an NPU host,
and the code already handles the closed path, the note asks for no work: the round-25 reviewers
read it as false. Where the test is something a user can change on an NPU host (a CLI or config
flag, an environment variable, a package one may install: `triton` is Triton-Ascend there, and
the CuTe-DSL wheels install without a GPU, as probed22.py says), the note stays info, as it is.

This module decides it once, per finding, reading the clause the earlier pass wrote and checking
the closing test again on the code (never the file or the package as a whole):

* probed22.PROBED: a CUDA-only kernel module loaded only inside functions that the importing
  module calls only under a flag: every site shown in the note (no "and N more") is
  "`f`, which the module calls only under `FLAG`", and FLAG is bound once at the importer's module
  level to a test with a conjunct proven false on an NPU host: a compute-capability / SM /
  capability-family test (capgates.capability_test, testscopes.npu_truth: the shim and torch_npu
  answer (0, 0) or None) or a `torch.version.cuda` test, directly or as the single `return` of a
  function of that module called without arguments (`_is_sm_10x()`, a few levels deep). The
  package probe that is also a conjunct (`_cutedsl_runtime_available()`) is not needed: the
  capability test closes the way whatever is installed. probed22 proved the callers skip the
  call (their other path or a clear error) where the flag is False. A flag that is only a
  package probe keeps its note.
* optparams20's opt-in NVIDIA profiler path and flagargs21.UNSET: code under `if <param>:` of a
  function parameter that defaults to False and that no call in the run sets (every call passes
  False or leaves the default); the False path is the function's own. The reason names the
  `if` (file:line).

Not decided here, on purpose: `torch.utils._triton.has_triton()`. torch's own source (torch 2.13,
torch/utils/_triton.py `has_triton`) answers False on an NPU host unless a cuda (capability major
>= 7), xpu, mtia device or a Triton "cpu" backend is there, none of which an NPU host has; but
torch_npu's inductor patch (`torch_npu/_inductor/utils.py` `patch_has_triton`) replaces it with
one that also counts an available "npu" device, so with Triton-Ascend installed it may hold: a
user-installable package decides it, and those notes stay info, naming Triton-Ascend.

The earlier pass's clause is opened with "(proven unreached on an NPU host: <the closing test,
file:line>: ...)" (a moot.PHRASES reason that keeps that clause's evidence), and moot.to_scopes
makes the finding a named skipped scope. Whole run, from runplan.whole_run_passes, last (after
platformlayer23.review_startup, whose no-effect scopes come first: every pass that writes these
clauses has run).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache

UNREACHED = "proven unreached on an NPU host: "

_SITE = re.compile(r"([\w./-]+\.py):(\d+) in `(\w+)`, which the module calls only under `(\w+)`")
_OPTIN = re.compile(r"\(an opt-in NVIDIA profiler path: .*? where `(\w+)` defaults to False and no call in the run sets it")
_UNSET = re.compile(r"\(under a parameter no call of the run sets: `(\w+)`")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DEPTH = 3


def _text(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except (ValueError, RecursionError):  # pragma: no cover (a tree ast.parse made)
        return "?"
    return text if len(text) <= 80 else text[:77] + "..."


def _single_return(function: ast.AST) -> Optional[ast.AST]:
    """The expression of a function whose body (docstring aside) is one `return <expr>`."""
    body = [s for s in function.body
            if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str))]
    if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
        return body[0].value
    return None


def _module_functions(tree: ast.Module) -> dict:
    """Module-level functions defined once (a name bound twice is not read)."""
    seen: dict = {}
    for node in tree.body:
        if isinstance(node, _FUNCTIONS):
            seen[node.name] = node if node.name not in seen else None
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.ClassDef)):
            for target in getattr(node, "targets", [getattr(node, "target", None)]):
                if isinstance(target, ast.Name) and target.id in seen:
                    seen[target.id] = None
    return {k: v for k, v in seen.items() if v is not None}


def _closed(node: ast.AST, functions: dict, depth: int = 0) -> Optional[str]:
    """Why one test is proven false on an NPU host (a capability or CUDA-version test), or None."""
    from .capgates import capability_test
    from .testscopes import npu_truth

    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        for value in node.values:
            why = _closed(value, functions, depth)
            if why:
                return why
        return None
    if (depth < _DEPTH and isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and not node.args and not node.keywords and node.func.id in functions):
        function = functions[node.func.id]
        value = _single_return(function)
        if value is not None:
            inner = _closed(value, functions, depth + 1)
            return f"`{node.func.id}()` (line {function.lineno}: {inner})" if inner else None
    dotted = {astcache.dotted(n) for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    cuda_version = "torch.version.cuda" in dotted
    if (capability_test(node) or cuda_version) and npu_truth(node) is False:
        kind = "a CUDA version test" if cuda_version and not capability_test(node) else "a compute-capability test"
        return f"`{_text(node)}`, {kind} false there (the shim and torch_npu answer (0, 0) or None)"
    return None


def _flag_binding(tree: ast.Module, flag: str) -> Optional[ast.Assign]:
    """The one module-level `FLAG = <test>` of the module (None where bound otherwise or again)."""
    found = []
    for node in astcache.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(n, ast.Name) and n.id == flag for t in targets for n in ast.walk(t)):
                found.append(node)
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and flag in node.names:
            return None
    if len(found) == 1 and isinstance(found[0], ast.Assign) and found[0] in tree.body \
            and len(found[0].targets) == 1 and isinstance(found[0].targets[0], ast.Name):
        return found[0]
    return None


class _Trees:
    def __init__(self, results: list, paths: dict) -> None:
        from .modpaths import RunTexts

        self.by_path = {r.relpath: i for i, r in enumerate(results)}
        self.texts = RunTexts(results, paths or {})
        self.cache: dict = {}

    def __call__(self, relpath: str) -> Optional[ast.Module]:
        if relpath not in self.cache:
            i = self.by_path.get(relpath)
            data = self.texts(i) if i is not None else None
            self.cache[relpath] = astcache.parse(data) if data is not None else None
        return self.cache[relpath]


def _probed_reason(finding, trees: _Trees) -> Optional[tuple[int, str]]:
    """(where probed22's clause opens, why every way in is closed), or None."""
    from .probed22 import PROBED

    head = PROBED.split("(")[0]
    at = finding.message.find("(" + head)
    if at < 0:
        return None
    note = finding.message[at:]
    start = note.find(": ", len(head))
    body = note[start + 2:] if start >= 0 else ""
    if re.search(r"\band \d+ more\b", body):
        return None
    sites = _SITE.findall(body)
    # every shown way in must be a call under a module flag (no offered probe, no guarded or
    # name-selected import: those keep the note)
    if not sites or len(re.findall(r"\.py:\d+", body)) != len(sites):
        return None
    parts = []
    for relpath, _line, _function, flag in dict.fromkeys(sites):
        tree = trees(relpath)
        if tree is None:
            return None
        binding = _flag_binding(tree, flag)
        if binding is None:
            return None
        why = _closed(binding.value, _module_functions(tree))
        if why is None:
            return None
        parts.append(f"`{flag}` ({relpath}:{binding.lineno}) holds {why}")
    return at, ("every function that loads it is called only under a module flag false on an NPU host: "
                + "; ".join(parts))


def _param_if(tree: ast.Module, lines: list[int], flag: str) -> Optional[ast.If]:
    """The `if` testing the parameter `flag` (a plain conjunct) that holds the finding's lines,
    in the function that has that parameter, or (optparams20's class used only under it) the
    first such `if` of that function."""
    holders = [n for n in astcache.walk(tree) if isinstance(n, _FUNCTIONS)
               and n.lineno <= min(lines) and max(lines) <= (n.end_lineno or n.lineno)
               and flag in {a.arg for a in (*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs)}]
    if not holders:
        return None
    function = max(holders, key=lambda n: n.lineno)

    def tests_flag(test: ast.AST) -> bool:
        if isinstance(test, ast.Name):
            return test.id == flag
        return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and any(
            isinstance(v, ast.Name) and v.id == flag for v in test.values)

    ifs = [n for n in ast.walk(function) if isinstance(n, ast.If) and tests_flag(n.test)]
    holding = [n for n in ifs if n.body[0].lineno <= min(lines) and max(lines) <= (n.body[-1].end_lineno or 0)]
    if holding:
        return max(holding, key=lambda n: n.lineno)
    return min(ifs, key=lambda n: n.lineno) if ifs else None


def _param_reason(finding, trees: _Trees) -> Optional[tuple[int, str]]:
    """(where the earlier pass's clause opens, the `if` that closes the way), or None."""
    match = _OPTIN.search(finding.message) or _UNSET.search(finding.message)
    if match is None:
        return None
    tree = trees(finding.path)
    if tree is None:
        return None
    flag = match.group(1)
    lines = [finding.line, *(line for line, _c, _s in finding.also)]
    gate = _param_if(tree, lines, flag)
    if gate is None:
        return None
    return match.start(), (f"under `if {_text(gate.test)}:` ({finding.path}:{gate.lineno}), a parameter that "
                           "defaults to False and that no call in the run sets")


def review(results: list, paths: Optional[dict] = None) -> list:
    """The info notes above become named scopes (see the module's doc)."""
    from .moot import is_moot, named, to_scopes

    def candidate(f) -> bool:
        return (f.severity == "info" and not f.fixable and f.cell is None and not is_moot(f) and not named(f)
                and ("which the module calls only under `" in f.message or _OPTIN.search(f.message) is not None
                     or _UNSET.search(f.message) is not None))

    indices = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(candidate(f) for f in r.findings)]
    if not indices:
        return results
    trees = _Trees(results, paths or {})
    out = list(results)
    changed = []
    for i in indices:
        findings = list(results[i].findings)
        for index, f in enumerate(findings):
            if not candidate(f):
                continue
            found = _probed_reason(f, trees) or _param_reason(f, trees)
            if found is None:
                continue
            # (the earlier pass's clause goes inside ours: the scope's reason keeps its evidence)
            at, reason = found
            message = f"{f.message[:at]}({UNREACHED}{reason}: {f.message[at + 1:]}"
            findings[index] = dataclasses.replace(f, message=message)
        if findings != results[i].findings:
            out[i] = dataclasses.replace(results[i], findings=findings)
            changed.append(i)
    for i, result in zip(changed, to_scopes([out[i] for i in changed])):
        out[i] = result
    return out
