"""Library code an NPU host reaches only from tests and benchmarks, or only under a CUDA-named option
(issue #16, precision wave 27: the owner's policies P2 and P1; round 19's BF#9, round 26's BU#30).

callgates21.py lowers a function's findings to a named scope when every reference of the run to
it lies in code an NPU host does not run (a gate false there, a skipped test), and kernelgates26.py
does the same for a Triton kernel's decorator; one reference that may run keeps the finding an
error. BF#9: a model's `nvidia/triton_ihc.py` Triton kernels are launched by `triton_ihc_pre()`,
which the library calls only under `if triton_ihc_supported(x):` (False off CUDA), but a kernel
benchmark (`benchmarks/kernels/...`) and a test call it ungated: the kernels stayed an error
although the library never reaches them on an NPU host.

Policy P2: tests and benchmarks do not make library code "reached". `review` (whole run, late:
after the passes that turn findings into scopes) takes each open report-only place of a library
module (not a test, benchmark, example, tool or script) that lies in a module-level function's or
class's body, or on the Triton decorator of a module-level kernel, and walks the run's references
to that unit with callgates21's `Gates` (a few steps deep through the functions holding them),
whose hooks this module fills: a reference in a test or benchmark file (tests/, test_*.py,
*_test.py, conftest.py; benchmarks/, bench*.py) that may run there is collected instead of keeping
the unit reached. A
reference in a test an NPU host skips, or behind a gate false there, counts as dead, as in
callgates21 (a dead caller does not count at all). When at least one test or benchmark reference
was collected and every other reference is dead, the place becomes info "reached on an NPU host
only from tests/benchmarks (path:line, ...)", naming the library's dead references too. The test
or benchmark keeps its own findings where its own code fails (this pass never touches them).

The same walk applies policy P1 to one shape (BU#30): a library reference inside the body of
`if X == "cuda":`, X a name or attribute naming an option (`profiler_type`, not a device or its
type: `device_type`, `x.device.type`), is a user's explicit choice of a CUDA-named option (a
profiler kind a config `Literal` offers); the walk collects it instead of keeping the unit reached,
and the place becomes info "reached on an NPU host only when `profiler_type == 'cuda'` is chosen
(path:line)". Never a scope: the user can still choose it there.

Round 28 (CA#35) adds a second P1 shape, read by optinprops28.py: a library reference in the body
of `if <x>.P:` (or after `if not <x>.P: return`), P a configuration property false by default
(`ParallelConfig.use_ubatching`: `self.enable_dbo or self.ubatch_size > 1`), is collected the same
way ("reached on an NPU host only when `self.parallel_config.use_ubatching` is chosen (...)"); and
a type test (`isinstance(model, UBatchWrapper)`, callees22's reading) counts as dead: it runs none
of the class's code.

Wave 29 (h137, round-28 CA#36) adds a third: a library reference in the body of an `if` that tests
an enum member a command-line option offers (`elif self.fp8_backend == FP8BackendType.AO:` with
`--fp8-backend` choices `ao`, `te`, `msamp`; a one-line predicate `x.is_ngram()` alike), read by
enumchoices29.py, is collected as chosen ("reached on an NPU host only when `self.fp8_backend ==
FP8BackendType.AO` (the choice `FP8BackendType.AO`) is chosen (...)").

What stays: a public unit (no `_` name) that no library code references at all, dead or not: an
entry point the project's users call (a test calling it says nothing of them), unless it is itself a
benchmarking helper (`bench_helper`: a word of its name starts with "bench", xformers'
`do_bench_cudagraph`, round 34 IA#17: its users benchmark with it, policy P2); a unit any library reference (or an example's, a tool's, a script's) may reach on an
NPU host (the nearest true case: also called from library code, ungated); a unit named in a string
or handed on as a value somewhere (unknown: kept); a unit no test or benchmark references (all
dead: callgates21's scope, or kept as a public helper); module-level code (no unit holds it).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional


ONLY_TESTS = "reached on an NPU host only from tests/benchmarks"
CHOSEN = "reached on an NPU host only when"  # (policy P1: "... `X == 'cuda'` is chosen")
_DEVICE_WORDS = re.compile(r"(?i)(^|_)(device|device_type|type_of_device)$|^type$")
_BENCH = re.compile(r"(^|/)(benchmarks?/|bench[^/]*\.py$)")
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def test_side(relpath: str) -> bool:
    """A test or benchmark file: its calls do not make library code reached (policy P2)."""
    from .importgates import is_test

    return is_test(relpath) or bool(_BENCH.search(relpath))


def bench_helper(unit: ast.AST) -> bool:
    """A module-level function that is itself benchmark code (round 34 IA#17, policy P2): a word of its
    name starts with "bench" (xformers' `do_bench_cudagraph`, timing a callable through CUDA graphs).
    Public, but what its users do with it is benchmark, so only tests and benchmarks calling it leave it
    unreached on an NPU host as for a private helper; a class, or a name without the word: kept."""
    return isinstance(unit, _DEFS) and any(w.startswith("bench") for w in unit.name.lower().split("_"))


def _library(relpath: str) -> bool:
    from .callgates21 import NOT_LIBRARY as _NOT_LIBRARY

    parts = relpath.split("/")
    return relpath.endswith(".py") and not test_side(relpath) \
        and not any(p in _NOT_LIBRARY for p in parts[:-1])


def _make_gates(run):
    from .callees22 import TYPE_TEST, type_test
    from .callgates21 import Gates
    from .optconfig29 import OptConfigs, attribute_store
    from .optchoice29 import OptInFields
    from .optinprops28 import OptInProperties
    from .optvalues31 import ChosenValues

    class TestGates(Gates):
        """callgates21's walk over a unit's references, sparing the live test/benchmark references
        and those under an option's "cuda" value (its hooks) instead of keeping the unit reached."""

        keep_public = False  # (this module's own rule for public units: review)
        skip_locals = False
        free_program = True  # (a kernel's helpers and launcher are one device program: kvchoice31.py)

        def test_file(self, relpath: str) -> bool:
            return test_side(relpath)

        def dead(self, j: int, tree: ast.Module, parents: dict, node: ast.AST) -> Optional[str]:
            why = super().dead(j, tree, parents, node)
            # (`isinstance(model, UBatchWrapper)` runs none of the class's code: callees22's reading)
            if why is None and attribute_store(node, parents):
                return "an attribute stored on it: none of its code runs"  # (optconfig29.py)
            if why is None:  # (a platform-dispatched op's `forward_cuda`, the host taking `forward_oot`: dispatchtests34.py)
                from .dispatchtests34 import dispatch_dead
                why = dispatch_dead(tree, parents, node)
            return TYPE_TEST if why is None and type_test(parents, node) else why

        def live_reference(self, j: int, relpath: str, node: ast.AST, parents: dict, test_file: bool) -> Optional[tuple]:
            if test_file:
                return j, f"{relpath}:{node.lineno}", "test"
            option = _cuda_option(node, parents)
            if option is not None:
                return j, f"`{option}` is chosen ({relpath}:{node.lineno})", "chosen"
            choice = self.opt_ins.chosen(node, parents)  # (a configuration property false by default: optinprops28.py)
            if choice is None:
                choice = self.opt_in_fields.chosen(node, parents)  # (a configuration field off by default: optchoice29.py)
            if choice is not None:
                return j, f"{choice} ({relpath}:{node.lineno})", "chosen"
            member = self.enum_choice(node, parents, j)  # (an enum member a command-line option offers: enumchoices29.py)
            if member is not None:
                shown = member if member.endswith(")") and "is chosen (" in member else f"{member} is chosen"
                return j, f"{shown} ({relpath}:{node.lineno})", "chosen"
            choice = self.opt_configs.chosen(node, parents)  # (a config dataclass field at a non-default value: optconfig29.py)
            if choice is not None:
                return j, f"{choice} ({relpath}:{node.lineno})", "chosen"
            choice = self.opt_values.chosen(node, parents)  # (a mode the library never stores, only a user names: optvalues31.py)
            if choice is not None:
                return j, f"{choice} ({relpath}:{node.lineno})", "chosen"
            return None

        def enum_choice(self, node: ast.AST, parents: dict, j: int) -> Optional[str]:
            from .enumchoices29 import chosen_branch, chosen_through_private_method, members, option_choices, predicates

            if getattr(self, "_enums", None) is None:
                run = self.run
                library = [i for i, r in enumerate(run.results) if _library(r.relpath)]

                def trees(word: bytes):
                    return (t for t in (run.tree(i) for i in library if word in (run.text_of(i) or b"")) if t is not None)

                offered = option_choices(trees(b"choices"), explicit=True)
                from .enumconfigs33 import compared_only

                # (and the members only a user's configuration names, the library only comparing them: enumconfigs33.py)
                self._enums = (predicates(trees(b"Enum"), offered), members(trees(b"Enum"), offered) | compared_only(trees))
            known, offered_members = self._enums
            if not known and not offered_members:
                return None
            found = chosen_branch(node, parents, known, offered_members)
            if found:
                return found[len("under "):]
            tree = self.run.tree(j)
            through = chosen_through_private_method(node, parents, tree, known, offered_members) \
                if tree is not None else None
            if through is None:
                return None
            name = through[2]
            if any(k != j for k, _tree in self.naming(name)):
                return None  # (another file names the private method)
            return f"{through[0][len('under '):]} is chosen (`self.{name}()`, line {through[1]})"

        def reach(self, i: int, unit: ast.AST) -> Optional[tuple]:
            """(dead references ["path:line (why)"], live test/benchmark references {"path:line"},
            references under an option's "cuda" value {"`test` at path:line"}) of every reference of
            the run to `unit` of module i; None where one may run elsewhere."""
            found = self.sites(i, unit)
            if found is None:
                return None
            return ([s for _j, s, *kind in found if not kind], {s for _j, s, *kind in found if kind == ["test"]},
                    {s for _j, s, *kind in found if kind == ["chosen"]})

    gates = TestGates(run)
    gates.opt_ins = OptInProperties(run, test_side)
    gates.opt_configs = OptConfigs(run, test_side)
    gates.opt_in_fields = OptInFields(run, test_side)
    gates.opt_values = ChosenValues(run, test_side)
    return gates


def _cuda_option(node: ast.AST, parents: dict) -> Optional[str]:
    """The test of an `if X == "cuda":` holding `node` in its body (within its function), X a name or an
    attribute naming an option (not a device or its type): a value a user chooses; else None."""
    child, current = node, parents.get(id(node))
    while current is not None and not isinstance(current, (*_DEFS, ast.Module)):
        if isinstance(current, ast.If) and any(child is stmt for stmt in current.body):
            test = current.test
            if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq) \
                    and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == "cuda" \
                    and isinstance(test.left, (ast.Name, ast.Attribute)):
                word = test.left.id if isinstance(test.left, ast.Name) else test.left.attr
                if not _DEVICE_WORDS.search(word) and "device" not in word.lower():
                    return " ".join(ast.unparse(test).split())[:80]
        child, current = current, parents.get(id(current))
    return None


def _shown(items: list, limit: int = 3) -> str:
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _joined_later(code: str) -> bool:
    """A code infojoin31.py joins at the end of the run (merged per file or per message)."""
    from . import catalogue

    rule = catalogue.rules().get(code)
    return rule is not None and rule.per_file in ("code", "message")


def review(results: list, paths: dict) -> list:
    """The results, with each open place of a library unit reached on an NPU host only from tests
    and benchmarks lowered to info naming them (this module's docstring)."""
    from .findings import merge_per_file, stands_for_copies
    from .flagcalls19 import Run, lower
    from .kernelgates26 import triton_decorated
    from .modpaths import RunTexts, parsed
    from .moot import is_open as open_finding

    text_of = RunTexts(results, paths)
    gates = None
    out = list(results)
    candidates = [i for i, r in enumerate(results) if _library(r.relpath) and any(open_finding(f) for f in r.findings)]
    for i, tree in parsed(candidates, text_of, b"def "):
        if tree is None:
            continue
        result = results[i]
        if gates is None:
            gates = _make_gates(Run(results, text_of))
        tree = gates.run.trees.setdefault(i, tree)
        kernels = triton_decorated(tree)

        def reason_of(line: int, tree=tree, i=i, kernels=kernels, relpath=result.relpath) -> Optional[str]:
            from .callgates21 import unit_of

            direct = gates.opt_configs.chosen_at(tree, line)  # (a place inside a config option's block: optconfig29.py)
            if direct is not None:
                return f"{CHOSEN} {direct} ({relpath}:{line})"
            direct = gates.opt_in_fields.chosen_at(tree, line)  # (a place behind a field or constructor flag off by default: optchoice29.py)
            if direct is not None:
                return f"{CHOSEN} {direct}"  # (no line: the places a merged finding stands for stay one finding)
            direct = gates.opt_values.chosen_at(tree, line)  # (a place under a mode only a user names: optvalues31.py)
            if direct is not None:
                return f"{CHOSEN} {direct}"
            unit = kernels.get(line) or unit_of(tree, line)
            if unit is None:  # (a class's field annotation follows its class: optobjects30.py)
                from .optobjects30 import field_class

                unit = field_class(tree, line)
            if unit is None:
                return None
            reached = gates.reach(i, unit)
            if reached is None or not (reached[1] or reached[2]):
                return None
            from .dispatchtests34 import named_outside_python
            if named_outside_python(gates.run, unit.name):
                return None  # (a configuration's `_target_: pkg.mod.unit`: a caller the walk does not see)
            dead, tests, chosen = reached
            if not unit.name.startswith("_") and not any(not test_side(d.split(":", 1)[0]) for d in dead) \
                    and not chosen and not bench_helper(unit):
                return None  # (a public unit no library code references: an entry point its users call)
            dead = sorted(set(dead), key=lambda s: (test_side(s.split(":", 1)[0]), s))  # (the library's first)
            told = (f"its other references are code an NPU host does not run: {_shown(dead, 2)}" if dead
                    else "nothing else in the run references it")
            if chosen:
                also = f"; also called from tests/benchmarks ({_shown(sorted(tests))})" if tests else ""
                return f"{CHOSEN} {' or '.join(sorted(chosen)[:2])}: `{unit.name}`{also}; {told}"
            return f"{ONLY_TESTS} ({_shown(sorted(tests))}): `{unit.name}`; {told}"

        findings, changed = [], False
        for finding in result.findings:
            # (not a finding standing for byte-identical copies: their callers are their own)
            pieces = lower(finding, reason_of) if open_finding(finding) and not stands_for_copies(finding) else None
            if pieces is not None:
                mine = [p for p in pieces if p.severity == "info" and (ONLY_TESTS in p.message or CHOSEN in p.message)]
                # (a finding some of whose places stay reached is left whole: never one finding made two)
                pieces = mine if len(mine) == len(pieces) else None
                if pieces is not None and len(pieces) > 1 and len({reason_of(p.line) for p in pieces}) == 1:
                    # (every place lowered for one reason: the finding stays one, in its first place's words;
                    # places lowered for different reasons are joined, each with its reason, at the end of
                    # the run's passes: infojoin31.py)
                    first = min(pieces)
                    pieces = merge_per_file([dataclasses.replace(p, message=first.message) for p in pieces])
                if pieces is not None and len(pieces) > 1 and not _joined_later(finding.code):
                    # (a finding merged by its own family, not per file: every place lowered, it stays one
                    # finding listing each place's reason, as infojoin31.py joins the per-file codes; h152)
                    from .infojoin31 import join

                    pieces = [join(sorted(pieces))]
            changed = changed or pieces is not None
            findings.extend([finding] if pieces is None else pieces)
        if changed:
            out[i] = dataclasses.replace(result, findings=sorted(findings))
    return out
