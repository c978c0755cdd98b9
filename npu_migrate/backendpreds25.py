"""Helpers called only under a CUDA-only backend's predicate in the caller (issue #16, round-25
audit BS#26). Whole run, from runplan.whole_run_passes, right after callees22.py.

A project names its implementation backends in an enum and asks the chosen one through predicate
methods (SGLang's `MoeRunnerBackend`):

    # moe/utils.py
    class MoeRunnerBackend(Enum):
        TRITON = "triton"
        FLASHINFER_TRTLLM = "flashinfer_trtllm"
        def is_flashinfer_trtllm(self):
            return self == MoeRunnerBackend.FLASHINFER_TRTLLM

    # moe/runner/trtllm.py
    def align_weights_for_trtllm(layer):
        from flashinfer import shuffle_matrix_a        # NPU911: info now
        ...

    # quantization/fp8.py (another module)
    if get_moe_runner_backend().is_flashinfer_trtllm():
        from ..moe.runner.trtllm import align_weights_for_trtllm
        align_weights_for_trtllm(layer)

callgates21.py leaves such a test undecided (the backend is a value a user option chooses), so
the helper's error stood as if every NPU run reached it. Here a predicate counts when it is a
method of an `Enum` subclass whose whole body is `return self == Cls.MEMBER` (or `is`), the
member's string value naming a CUDA-only backend (a `never_on_npu` package of rules/sweep.toml
[availability], or a word of rules/scopes.toml [backendpreds25] `cuda_backend_words`, as a
`_`-separated part of the value: "flashinfer_trtllm"), and no other function of the run has the
method's name. A reference lying in the body of an `if`/`elif` whose test is such a call (or an
`and` holding one; never under `not`) is code that runs only when that backend is chosen; so is
one callgates21's gates find never run. Where every reference of the run to the module-level
function or class holding a report-only finding is such (callgates21's walk, a few callers deep,
at least one reference in another module) and at least one of them is a backend predicate:

* the field the enum is named for (`MoeRunnerBackend` -> `moe_runner_backend`) forced by the
  project's NPU defaults (npudefaults24.defaults_function: an unconditional `args.<field> =
  "<value>"` at the top of a function of a module whose path names the NPU) to another value: a
  named scope (flags16.BRANCH), naming the predicate and the defaults;
* otherwise (a user may still pick the backend by name on an NPU host): info naming the
  predicate, the enum member and its value (the option to leave unset on an NPU host).

A reference outside such code (a call an NPU host may run, a module-level use, a string naming the
unit), an `else:` of the test, a negated test, a predicate whose member names no CUDA-only backend
(`is_triton()`), a method name the run defines elsewhere too: kept.
"""

from __future__ import annotations

import ast
import functools
import re
from typing import Optional

from . import astcache, catalogue
from .callgates21 import Gates

# (a site reason of this module, beside callgates21's: a backend the user may choose)
_SELECTED = "only when the backend is chosen: "
# (the reason of an info this module lowers; its lowered pieces of one finding are merged on it)
CHOSEN = "runs only when the CUDA-only backend"
_ENUM_DEF = re.compile(rb"\bdef (is_\w+)\(\s*self\s*\)")
_ANY_DEF = re.compile(rb"\bdef (is_\w+)\(")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@functools.lru_cache(maxsize=None)
def _cuda_words() -> frozenset:
    words = set(catalogue.read_table("sweep.toml").get("availability", {}).get("never_on_npu", ()))
    words |= set(catalogue.read_table("scopes.toml").get("backendpreds25", {}).get("cuda_backend_words", ()))
    return frozenset(w.lower() for w in words)


def _cuda_backend(value: str) -> Optional[str]:
    """The CUDA-only word `value` names as one or more `_`-separated parts ("flashinfer_trtllm" ->
    "flashinfer"), or None."""
    low = value.lower()
    found = [(m.start(), word) for word in _cuda_words()
             for m in [re.search(r"(?:^|_)" + re.escape(word) + r"(?:_|$)", low)] if m]
    return min(found)[1] if found else None  # (the first named: "flashinfer_cutlass" is FlashInfer's)


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _predicates(results, python: list[int], text_of) -> dict[str, list[tuple[str, str, str, str, str]]]:
    """{method: [(enum, member, value, CUDA word, "path:line")]} of the run's CUDA-backend predicates
    (the module docstring): one entry per enum defining the method (SGLang's MoE and GEMM runner
    backends each have `is_flashinfer_trtllm`)."""
    counts: dict[str, int] = {}  # (every `def is_x(` of the run: a name defined twice is not one predicate)
    candidates: dict[int, set[str]] = {}
    for i in python:
        data = text_of(i) or b""
        if b"def is_" not in data:
            continue
        for match in _ANY_DEF.finditer(data):
            counts[match.group(1).decode()] = counts.get(match.group(1).decode(), 0) + 1
        if b"Enum" in data:
            names = {m.group(1).decode() for m in _ENUM_DEF.finditer(data)}
            if names:
                candidates[i] = names
    found: dict[str, list] = {}
    for i, names in candidates.items():
        tree = astcache.parse(text_of(i) or b"")
        if tree is None:
            continue
        for cls in astcache.walk(tree):
            if not (isinstance(cls, ast.ClassDef) and any(
                    (astcache.dotted(b) or "").rpartition(".")[2].endswith("Enum") for b in cls.bases)):
                continue
            members = {t.id: s.value.value for s in cls.body if isinstance(s, ast.Assign)
                       and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)
                       for t in s.targets if isinstance(t, ast.Name)}
            for method in cls.body:
                if not (isinstance(method, _FUNCTIONS) and method.name in names and len(method.body) == 1):
                    continue
                ret = method.body[0]
                if not (isinstance(ret, ast.Return) and isinstance(ret.value, ast.Compare)
                        and len(ret.value.ops) == 1 and isinstance(ret.value.ops[0], (ast.Eq, ast.Is))
                        and isinstance(ret.value.left, ast.Name) and ret.value.left.id == "self"
                        and isinstance(ret.value.comparators[0], ast.Attribute)
                        and ret.value.comparators[0].attr in members):
                    continue
                member = ret.value.comparators[0].attr
                word = _cuda_backend(members[member])
                if word is not None:
                    found.setdefault(method.name, []).append(
                        (cls.name, member, members[member], word, f"{results[i].relpath}:{method.lineno}"))
    return {name: entries for name, entries in found.items() if counts.get(name, 0) == len(entries)}


def _selected_by(test: ast.AST, predicates: dict) -> Optional[str]:
    """The predicate method a test calls (alone or as an operand of `and`), or None."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    for part in parts:
        if isinstance(part, ast.Call) and not part.args and not part.keywords \
                and isinstance(part.func, ast.Attribute) and part.func.attr in predicates:
            return part.func.attr
    return None


class _BackendGates(Gates):
    """callgates21's reading of references, with a CUDA-only backend's predicate a gate too."""

    def __init__(self, run, predicates: dict) -> None:
        super().__init__(run)
        self.predicates = predicates

    def dead(self, j: int, tree: ast.Module, parents: dict, node: ast.AST) -> Optional[str]:
        child, current = node, parents.get(id(node))
        while current is not None and not isinstance(current, ast.Module):
            if isinstance(current, ast.If) and any(child is s for s in current.body):
                method = _selected_by(current.test, self.predicates)
                if method is not None:
                    test = " ".join(ast.unparse(current.test).split())[:80]
                    return f"{_SELECTED}`{test}`"
            child, current = current, parents.get(id(current))
        return super().dead(j, tree, parents, node)


def _forced(results, python: list[int], text_of, fields: set[str]) -> dict[str, tuple[str, str]]:
    """{field: (value, "path:line")} of the project's NPU defaults among `fields`."""
    from .npudefaults24 import defaults_function

    npu = re.compile(r"(^|_)(npu|ascend)($|_)", re.IGNORECASE)
    out: dict[str, tuple[str, str]] = {}
    for i in python:
        relpath = results[i].relpath
        data = text_of(i) or b""
        if not any(npu.search(part) for part in relpath[:-3].split("/")) \
                or not any(f".{field}".encode() in data for field in fields):
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        for node in astcache.walk(tree):
            if isinstance(node, _FUNCTIONS):
                found = defaults_function(tree, node.body[0].lineno)
                if found is None or found[0] != node.name:
                    continue
                for field, (value, line) in found[1].items():
                    if field in fields:
                        out.setdefault(field, (value, f"{relpath}:{line}"))
    return out


def review(results: list, paths: dict) -> list:
    """The results, with the report-only findings of this module's docstring lowered."""
    from .callgates21 import lower_units
    from .flags16 import BRANCH
    from .importgates import is_test
    from .modpaths import RunTexts, open_python
    from .moot import is_open as open_finding, to_scopes

    candidates = open_python(results, open_finding)
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    predicates = _predicates(results, python, text_of)
    if not predicates:
        return results
    forced_memo: dict = {}

    def forced() -> dict:
        if "fields" not in forced_memo:
            fields = {_snake(e[0]) for entries in predicates.values() for e in entries}
            forced_memo["fields"] = _forced(results, python, text_of, fields)
        return forced_memo["fields"]

    def reason(gates, i: int, unit) -> Optional[str]:
        found = gates.sites(i, unit)
        if not found or not any(j != i for j, _s in found):
            return None
        chosen = [s for _j, s in found if _SELECTED in s]
        if not chosen:
            return None  # (callgates21's and callees22's own verdicts: decided before)
        methods = sorted({m for s in chosen for m in predicates if f".{m}()" in s})
        found = sorted(found, key=lambda item: (_SELECTED not in item[1], is_test(item[1].split(":", 1)[0])))
        shown = "; ".join(s for _j, s in found[:2]) + (f"; and {len(found) - 2} more" if len(found) > 2 else "")
        entries = [e for m in methods for e in predicates[m]]
        defaults = forced()
        closed = [(e, defaults[_snake(e[0])]) for e in entries
                  if _snake(e[0]) in defaults and defaults[_snake(e[0])][0] != e[2]]
        if entries and len(closed) == len(entries):
            told = "; ".join(f'`{e[0]}.{e[1]}` ("{e[2]}"), while the NPU defaults set `{_snake(e[0])}` to '
                             f'"{v}" ({where})' for e, (v, where) in closed)
            return (f"{BRANCH}: `{unit.name}` is reached only when a CUDA-only backend is chosen: {told}; "
                    f"{shown}")
        first = entries[0]
        others = len({e[0] for e in entries}) - 1
        alike = f"; {others} other enum{'s' if others > 1 else ''} define{'' if others > 1 else 's'} it alike" \
            if others else ""
        return (f'{CHOSEN} "{first[2]}" is chosen: `{unit.name}` is reached only from {shown}, '
                f"`{first[0]}.{first[1]}` a {first[3]} backend ({first[4]}{alike}); an NPU host reaches it "
                f'only where the user selects "{first[2]}" by name: leave it unselected there, or port the '
                f"backend")

    def start():
        from .flagcalls19 import Run

        run = Run(results, text_of)
        return run, _BackendGates(run, predicates)

    out = lower_units(results, text_of, candidates, open_finding, start, reason)
    changed = [i for i in range(len(out)) if out[i] is not results[i]]
    for i in changed:
        out[i] = _merge_lowered(out[i])
    for i, result in zip(changed, to_scopes([out[i] for i in changed])):
        out[i] = result
    return out


def _merge_lowered(result):
    """The places of one finding lowered for one reason (a helper's import and the FP8 merged into
    it) merged again on the first, as findings.merge_per_file merges a file's places."""
    import dataclasses

    from .findings import merge_per_file

    groups: dict[str, list] = {}
    rest = []
    for finding in result.findings:
        at = finding.message.find(f"({CHOSEN} ")
        if finding.severity == "info" and at > 0:
            groups.setdefault(f"{finding.code}\0{finding.message[at:]}", []).append(finding)
        else:
            rest.append(finding)
    if all(len(group) == 1 for group in groups.values()):
        return result
    merged = [m for group in groups.values() for m in merge_per_file(group)]
    return dataclasses.replace(result, findings=sorted(rest + merged))
