"""Kernel classes a selector rejects on an NPU host by their own support check (issue #16, rounds
22-26: BB#3, BU#15, BE#6 and the other "a kernel class's `is_supported()` in another module" rows).
Whole run, from runplan.whole_run_passes, right after callees22.py.

A project that picks kernels through a selector ("oracle") keeps tables of candidate classes and
asks each one first whether it can run here; the class's code runs only where it answers yes:

    # kernels/triton_mm.py
    from ..ops.triton_mm import triton_mm       # `@triton.jit` kernels: NPU910
    class TritonMMKernel(MMKernel):
        @classmethod
        def is_supported(cls):
            if current_platform.is_cuda_alike() or current_platform.is_xpu():
                return True, None
            return False, "requires ROCm, CUDA or XPU."
        def apply(self, x, w):
            return triton_mm(x, w)                # the kernel's only launch

    # kernels/__init__.py (another module: the selector)
    _CANDIDATES = {PlatformEnum.CUDA: [CutlassMMKernel, TritonMMKernel]}
    def choose(config):
        for kernel in _CANDIDATES[current_platform._enum]:
            ok, why = kernel.is_supported()
            if ok:
                return kernel

callgates21.py walks every reference of the run to the unit holding a report-only finding (a few
callers deep); a reference inside `TritonMMKernel` went on to the class's own references, the
candidate table, which runs on every host, so the kernel stayed an error. Here (callees22's
reading, plus one verdict) a reference counts as never run on an NPU host where it lies in a
module-level class that the run **rejects there**:

* the class defines a support check (`is_supported`, `can_implement`, or a name of
  rules/scopes.toml [supportgates27] `checks`: a staticmethod or classmethod of the class itself)
  whose answer on an NPU host is "no": its statements read in order, each `if` decided by
  flagcalls19's interpreter (callgates21's `truth`: the project's platform predicates, testscopes'
  answers), down to a `return False`, `return False, why`, a `return <expression false there>`
  (`return is_cuda_alike() or is_xpu()`) or a `raise`; a check that returns True or a value the
  interpreter does not know there, or an `if` it cannot decide first, is no verdict;
* every reference of the run to the class is one a selector only asks about: an element of a
  list, tuple, set or dict display (a candidate table, `return [Cls]`), the receiver of one of the
  check methods (`Cls.is_supported()`, rules' `checks`), a type test, code callees22 already finds
  never run, or the class's own body; a construction by name (`Cls(cfg)`), a value handed on
  (`use(Cls)`, `return Cls`), a base of another class, a string naming it: no verdict;
* somewhere in the run a check method of that name is called on another receiver (the selector
  asking its candidates: `kernel.is_supported()`, `cls._supports_current_device()`).

One more class an NPU host never runs (audit BP#3: a kernel-input staging module whose only
launcher is a method of a MegaMoE experts module that refuses to exist off SM100): a class whose
`__init__` calls, as a statement of its own body before any `return`, a module-level function of
its module whose first statement is `if <true there>: raise ...` (`if not
is_device_capability_family(100): raise NotImplementedError(...)`): no instance exists there, so
no instance method (`__init__` and static/class methods aside) runs, whoever builds it (a model
under an opt-in backend name: the user who names it gets that error). A check raising only on a
shape or a value the run does not know, or a call after a `return`, is no verdict.

The finding becomes a named scope (flags16.BRANCH) naming the unit, its callers and the rejecting
check; a Triton kernel's decorator place is read the same way (kernelgates26's review with these
gates). What stays reported: a class whose check is true or undecidable on an NPU host (a check
on `compute_capability` only, `is_cuda_alike() or is_npu()`), a class built by name anywhere,
a class whose check no selector calls, and code also reachable past the class (callgates21's
rules: one ungated caller keeps it).

Tests and benchmarks (policy P2, round 30 EB#23: vLLM's Humming experts, whose
`_supports_current_device()` is `has_humming() and platform.is_cuda() and ...`): a test's own
reference does not keep a unit reached, as a test's construction by name already did not: a call
on an instance the test builds (`experts.get_buffer_metas(...)`, callgates21's `live_reference`
hook) and a `module.Cls.helper(...)` read through the module; and (EB#20, vLLM's CUTLASS FP8
experts) a test tool's own `Cls = None` sentinel where its backend is missing. The finding then
becomes policy P2's info naming the rejecting check (a named scope where no test reaches it); a
library reference still keeps it.
"""

from __future__ import annotations

import ast
from typing import Optional

from .callees22 import Callees

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DISPLAYS = (ast.List, ast.Tuple, ast.Set)
_REJECTS = "answers no on an NPU host"
_NO_INSTANCE = "no instance exists there"
# (policy P2: a class the library never picks there, built by name only in tests or benchmarks)
TESTS_ONLY = "built by name only in tests/benchmarks"


def _test_side(relpath: str) -> bool:
    """A test, a benchmark or a file the package does not ship: its references do not make a class
    reached (policy P2)."""
    from .importgates import is_test
    from .shipped26 import unshipped

    return is_test(relpath) or unshipped(relpath) or relpath.rpartition("/")[2].startswith("bench")


def _called_inside(cls: ast.ClassDef, check: ast.AST) -> bool:
    """The class's other methods ask the check themselves (`if self.is_supported():`): a run-time
    test of a class built anyway, not a selector's question (capability.py's reading)."""
    return any(isinstance(n, ast.Attribute) and n.attr == check.name
               for method in cls.body if method is not check and isinstance(method, _DEFS)
               for n in ast.walk(method))


def _static(function) -> bool:
    """A staticmethod or classmethod: it runs without an instance."""
    from . import astcache

    return bool({astcache.dotted(d) for d in function.decorator_list} & {"classmethod", "staticmethod"})


def checks() -> tuple:
    """The support-check method names: capability.py's selection checks (rules/scopes.toml
    [capability] gate_methods: `is_supported`, `can_implement`, ...) and [supportgates27] `asks`,
    the methods a selector calls on a candidate that run those checks inside."""
    from . import catalogue
    from .capability import gate_methods

    more = catalogue.read_table("scopes.toml").get("supportgates27", {}).get("asks", ())
    return tuple(dict.fromkeys((*sorted(gate_methods()), *more)))


class _Support(Callees):
    """callees22's reading of references, plus classes their own support check rejects there."""

    def __init__(self, run, spans: dict, modules: dict) -> None:
        super().__init__(run, spans, modules)
        self.checks = checks()
        self.verdicts: dict = {}  # ((module, class name) -> the rejecting check's words, or None)
        self.asked: dict = {}  # (check name -> a selector calls it in the run)
        self.defined: Optional[dict] = None  # (class name -> [(module, ClassDef)] module-level)
        self.by_tests: dict = {}  # (class name -> ["path:line"] of tests/benchmarks building it by name)

    # ------------------------------------------------------------------ tests and benchmarks (P2)
    def test_file(self, relpath: str) -> bool:
        return _test_side(relpath)

    def live_reference(self, j: int, relpath: str, node: ast.AST, parents: dict, test_file: bool) -> Optional[tuple]:
        """A test's or benchmark's own call of a unit (`experts.get_buffer_metas(...)` on an instance
        a test builds): no library use (policy P2, round 30 EB#23); `_reason` then says info."""
        return (j, f"{relpath}:{node.lineno} ({TESTS_ONLY})") if test_file else None

    # ------------------------------------------------------------------ the verdict
    def dead(self, j: int, tree: ast.Module, parents: dict, node: ast.AST) -> Optional[str]:
        why = super().dead(j, tree, parents, node)
        if why is not None:
            return why
        child, current = node, parents.get(id(node))
        while current is not None and not isinstance(current, ast.Module):
            if isinstance(current, ast.ClassDef) and isinstance(parents.get(id(current)), ast.Module):
                rejected = self.rejected(j, tree, current)
                if rejected is not None:
                    return f"in `{current.name}`, {rejected}{self._tests_note(current.name)}"
                if isinstance(child, _DEFS) and child.name != "__init__" and not _static(child):
                    raising = self.raising_init(j, tree, current)
                    if raising is not None:
                        return f"in a method of `{current.name}`, {raising}"
                break
            child, current = current, parents.get(id(current))
        name = node.id if isinstance(node, ast.Name) else None
        if name is not None and self._asked_only(parents, node):
            homes = self._homes().get(name, [])
            if len(homes) == 1:
                k, cls = homes[0]
                rejected = self.rejected(k, self.run.tree(k), cls)
                if rejected is not None:
                    return f"a candidate `{name}` a selector asks first, {rejected}{self._tests_note(name)}"
        return None

    def rejected(self, j: int, tree: Optional[ast.Module], cls: ast.ClassDef) -> Optional[str]:
        """Why a selector never picks `cls` (module j) on an NPU host, or None (this module's
        docstring: a check false there, every reference a selector's question, a selector)."""
        key = (j, cls.name)
        if key in self.verdicts:
            return self.verdicts[key]
        self.verdicts[key] = None  # (a reference inside the class asking about itself: undecided)
        if tree is None:
            return None
        check = self._first_check(j, cls)  # (its own check, or the one it inherits: round 28, CB#15)
        if check is None:
            return None
        if not self._only_asked(j, cls):
            return None
        self.verdicts[key] = check
        return check

    def raising_init(self, j: int, tree: Optional[ast.Module], cls: ast.ClassDef) -> Optional[str]:
        """Why no instance of `cls` exists on an NPU host: its `__init__` calls, as a statement of
        its own body before any `return`, a module-level function of the same module whose first
        statements (its docstring aside) are `if <true there>: raise ...`; or None."""
        key = ("init", j, cls.name)
        if key in self.verdicts:
            return self.verdicts[key]
        self.verdicts[key] = None
        init = next((s for s in cls.body if isinstance(s, _DEFS) and s.name == "__init__"), None)
        if init is None or tree is None:
            return None
        from . import astcache
        from .capability import docless_body
        from .capchains30 import inline_refusal  # (`if <true there>: raise` in `__init__` itself: capchains30.py)

        functions = {s.name: s for s in tree.body if isinstance(s, _DEFS)}
        parents = astcache.parents(tree)
        for stmt in init.body:
            if any(isinstance(n, ast.Return) for n in ast.walk(stmt)):
                return None
            oracle = self._raising_oracle(j, stmt) or inline_refusal(self, j, tree, parents, stmt)
            if oracle is not None:
                self.verdicts[key] = why = f"whose `__init__` {oracle}: {_NO_INSTANCE}"
                return why
            call = stmt.value if isinstance(stmt, ast.Expr) else None
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in functions):
                continue
            check = functions[call.func.id]
            first = docless_body(check)[:1]
            if not (first and isinstance(first[0], ast.If) and not first[0].orelse
                    and len(first[0].body) == 1 and isinstance(first[0].body[0], ast.Raise)):
                continue
            if self.truth(j, tree, parents, first[0].test, first[0], []) is True:
                test = " ".join(ast.unparse(first[0].test).split())[:80]
                self.verdicts[key] = why = (f"whose `__init__` calls `{check.name}()` (line {stmt.lineno}), which "
                                            f"raises on an NPU host (`{test}` is True there): {_NO_INSTANCE}")
                return why
        return None

    def _raising_oracle(self, j: int, stmt: ast.stmt) -> Optional[str]:
        """A statement of `__init__` that calls (its value bound or not) a backend selector of the
        run that raises on an NPU host, every candidate it may pick rejected there
        (oracles28.py): the words, else None."""
        from .oracles28 import raises

        call = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign)) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            return None
        found = self.run.lookup(j, call.func.id)
        if not found or found[0] != "def":
            return None
        _kind, function, k = found
        names = raises(self, k, self.run.tree(k), function)
        if not names:
            return None
        shown = ", ".join(f"`{n}`" for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        return (f"calls `{function.name}()` (line {stmt.lineno}; {self.run.results[k].relpath}), a backend "
                f"selector that raises on an NPU host: every candidate it may pick ({shown}) {_REJECTS}")

    def candidate_rejected(self, name: str) -> Optional[str]:
        """Why a selector that asks the class `name` (defined once in the run) never gets a yes
        from it on an NPU host (`_first_check`), or None. Whether the class is also built by name
        elsewhere does not matter here: the selector's own question is what oracles28.py reads."""
        homes = self._homes().get(name, [])
        return self._first_check(*homes[0]) if len(homes) == 1 else None

    def _first_check(self, j: int, cls: ast.ClassDef) -> Optional[str]:
        """The answer "no" of the support check of the first class of `cls`'s bases that defines
        one (the class itself first, then its bases the run defines once, depth first, left to
        right: the OAI Triton experts inherit `BaseOAITritonExperts._supports_current_device`), as
        `_check` reads it; None where that check answers yes or unknown, or none is found."""
        from . import astcache
        from .capability import gate_methods

        order, stack, seen = [], [(j, cls)], set()
        while stack and len(order) < 12:
            k, current = stack.pop()
            if (k, current.name) in seen:
                continue
            seen.add((k, current.name))
            order.append((k, current))
            bases = []
            for base in current.bases:
                found = self._homes().get((astcache.dotted(base) or "").rpartition(".")[2], [])
                if len(found) == 1:
                    bases.append(found[0])
            stack.extend(reversed(bases))
        for k, current in order:
            if any(isinstance(s, _DEFS) and s.name in gate_methods() for s in current.body):
                tree = self.run.tree(k)
                told = self._check(k, tree, current) if tree is not None else None
                if told is None and current is not cls:  # (a base's check asking the class's candidates: composedchecks29.py)
                    from .composedchecks29 import composed_answer
                    told = composed_answer(self, j, cls, current)
                return told
        return None

    def subclassed(self, name: str) -> bool:
        """A module-level class of the run names `name` as a base (its instances run the methods
        it inherits, whatever its own `__init__` does)."""
        from . import astcache

        return any((astcache.dotted(base) or "").rpartition(".")[2] == name
                   for homes in self._homes().values() for _k, cls in homes for base in cls.bases)

    def _tests_note(self, name: str) -> str:
        shown = self.by_tests.get(name, [])
        if not shown:
            return ""
        more = f" and {len(shown) - 2} more" if len(shown) > 2 else ""
        return f"; {TESTS_ONLY} ({', '.join(shown[:2])}{more})"

    def _check(self, j: int, tree: ast.Module, cls: ast.ClassDef) -> Optional[str]:
        from . import astcache
        from .capability import gate_methods

        parents = astcache.parents(tree)
        for stmt in cls.body:
            if isinstance(stmt, _DEFS) and stmt.name in gate_methods() and self._is_asked(stmt.name):
                decorators = {astcache.dotted(d) for d in stmt.decorator_list}
                if not decorators & {"classmethod", "staticmethod"} or _called_inside(cls, stmt):
                    continue  # (an instance method, or a run-time test the class asks itself)
                told = self._answer(j, tree, parents, stmt.body, stmt)
                if told is not None:
                    return f"whose `{cls.name}.{stmt.name}()` {_REJECTS} ({told})"
        return None

    def _answer(self, j: int, tree: ast.Module, parents: dict, body: list, method) -> Optional[str]:
        """What makes the statements answer "no" there (str), or None: yes, unknown or falls off."""
        from .flagtruth import UNKNOWN as _U

        passed: list = []  # (tests of `if`s an NPU host passes over)
        for stmt in body:
            if isinstance(stmt, (ast.Pass, ast.Import, ast.ImportFrom, ast.Delete)) or (  # (`del compute_capability`: round 31 FC#21)
                    isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
                continue
            if isinstance(stmt, ast.Raise):
                return f"line {stmt.lineno} raises"
            if isinstance(stmt, ast.Return):
                value = stmt.value
                if isinstance(value, ast.Tuple) and value.elts:
                    value = value.elts[0]
                if isinstance(value, ast.Constant) and value.value is False:
                    after = f"`{passed[-1]}` is False there, so " if passed else ""
                    return f"{after}line {stmt.lineno} returns False"
                if value is None or isinstance(value, ast.Constant):
                    return None
                if self.truth(j, tree, parents, value, stmt, []) is False:
                    shown = " ".join(ast.unparse(value).split())[:80]
                    return f"`{shown}` is False there"
                return None
            if isinstance(stmt, ast.If):
                truth = self.truth(j, tree, parents, stmt.test, stmt, [])
                if truth is _U or truth not in (True, False):
                    return None
                branch = stmt.body if truth else stmt.orelse
                if any(isinstance(n, (ast.Return, ast.Raise)) for s in branch for n in ast.walk(s)):
                    told = self._answer(j, tree, parents, branch, method)
                    if told is None:
                        return None
                    test = " ".join(ast.unparse(stmt.test).split())[:80]
                    return f"`{test}` is {truth} there, then {told}"
                passed.append(" ".join(ast.unparse(stmt.test).split())[:80])
                continue
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and not any(
                    isinstance(n, ast.Call) for n in ast.walk(stmt)):
                continue
            return None
        return None

    # ------------------------------------------------------------------ who asks, who names it
    def _is_asked(self, check: str, seen: frozenset = frozenset()) -> bool:
        """A call `x.check(...)` in the run whose receiver is a variable (a selector asking its
        candidates: `kernel.is_supported()`, a loop's `cls`), not a class name or `self`; a
        classmethod's own `cls.check()` counts where a selector asks that classmethod."""
        if check in self.asked:
            return self.asked[check]
        from . import astcache

        classes = self._classes()
        word = ("." + check).encode()
        found = False
        for k, result in enumerate(self.run.results):
            data = (self.run.text_of(k) or b"") if result.relpath.endswith(".py") else b""
            if word not in data:
                continue
            tree = self.run.tree(k)
            if tree is None:
                continue
            parents = astcache.parents(tree)
            for node in astcache.walk(tree):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == check and isinstance(node.func.value, ast.Name)):
                    continue
                receiver = node.func.value.id
                if receiver in classes or receiver == "self":
                    continue
                method = self._function(parents, node)
                if receiver == "cls" and isinstance(method, _DEFS) and method.args.args[:1] \
                        and method.args.args[0].arg == "cls":
                    if method.name in seen or method.name == check or not self._is_asked(method.name, seen | {check}):
                        continue
                found = True
                break
            if found:
                break
        if not seen:
            self.asked[check] = found
        return found

    def _homes(self) -> dict:
        """{class name: [(module, ClassDef)]} of the run's module-level classes (parsed files
        naming `class`)."""
        if self.defined is None:
            self.defined = {}
            for k, result in enumerate(self.run.results):
                data = (self.run.text_of(k) or b"") if result.relpath.endswith(".py") else b""
                if b"class " not in data:
                    continue
                tree = self.run.tree(k)
                for stmt in getattr(tree, "body", ()):
                    if isinstance(stmt, ast.ClassDef):
                        self.defined.setdefault(stmt.name, []).append((k, stmt))
        return self.defined

    def _asked_only(self, parents: dict, node: ast.AST) -> bool:
        """The reference only puts the class before a selector or asks it: a display's element, a
        dict's key or value, the receiver of a check method."""
        holder = parents.get(id(node))
        if isinstance(holder, _DISPLAYS) and node in holder.elts:
            return not isinstance(getattr(holder, "ctx", ast.Load()), ast.Store)
        if isinstance(holder, ast.Dict):
            return True
        return isinstance(holder, ast.Attribute) and holder.value is node and holder.attr in self.checks

    def _only_asked(self, i: int, cls: ast.ClassDef) -> bool:
        """Every reference of the run to the class (module i) is a selector's question, a type
        test, code callees22 finds never run, or inside the class; at least one outside module i."""
        from .composedchecks29 import inside_rejected

        name = cls.name
        outside = False
        tests: list = []
        if len(self._homes().get(name, ())) != 1:
            return False
        for j, tree in self.naming(name):
            if tree is None:
                return False
            result = self.run.results[j]
            parents, refs, strings = self._index(j, tree)
            if name in strings:
                return False
            for node in refs.get(name, ()):
                if isinstance(node, ast.Attribute):
                    continue  # (`module.Cls` / `obj.Cls`: read as below only for a plain name)
                if not isinstance(node.ctx, ast.Load):
                    if _test_side(result.relpath):
                        continue  # (a test's own name: `Cls = None` where its backend is missing, round 30 EB#20)
                    return False
                if j == i and cls.lineno <= node.lineno <= (cls.end_lineno or cls.lineno):
                    continue
                if self._asked_only(parents, node) or super().dead(j, tree, parents, node) is not None \
                        or inside_rejected(self, j, tree, parents, node, cls):  # (built only by a rejected class: composedchecks29.py)
                    outside = outside or j != i
                    continue
                if _test_side(result.relpath):
                    tests.append(f"{result.relpath}:{node.lineno}")  # (policy P2: tests do not make it reached)
                    continue
                return False
            for node in refs.get(name, ()):
                if isinstance(node, ast.Attribute):
                    holder = parents.get(id(node))
                    if not (isinstance(holder, ast.Attribute) and holder.attr in self.checks):
                        if _test_side(result.relpath):  # (`module.Cls.helper(...)` in a test: P2, round 30 EB#23)
                            tests.append(f"{result.relpath}:{node.lineno}")
                            continue
                        return False
        if outside and tests:
            self.by_tests[name] = tests
        return outside


Support = _Support  # (public: supportexits31.py reads the same checks)
is_test_side = _test_side


def review(results: list, paths: dict) -> list:
    """The results, with the report-only places of this module's docstring lowered to named
    scopes (findings in units only rejected classes reach, and Triton decorator places of kernels
    only they launch), or to info where tests or benchmarks also build such a class by name."""
    from .callees22 import never_imported
    from .callgates21 import lower_units
    from .constreads29 import lower_constants
    from .dispatch import gates as dispatch_gates
    from .flagcalls19 import Run
    from .modpaths import RunTexts, open_python
    from .moot import is_open as open_finding, to_scopes

    candidates = open_python(results, open_finding)
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    state: list = []

    def start():
        if not state:
            run = Run(results, text_of)
            python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
            state.append((run, _Support(run, dispatch_gates(results, python, text_of), never_imported(results))))
        return state[0]

    out = lower_units(results, text_of, candidates, open_finding, start,
                      lambda gates, i, unit: _reason(gates, i, unit, ""))
    out = _lower_kernels(out, text_of, open_finding, start)
    out = _lower_methods(out, text_of, open_finding, start)  # (a method of a class no instance of exists: CC#22)
    out = lower_constants(out, text_of, open_finding, start,  # (module constants only such units read: constreads29.py)
                          lambda gates, i, unit: _reason(gates, i, unit, ""))
    changed = [i for i in range(len(out)) if out[i] is not results[i]]
    for i, result in zip(changed, to_scopes([out[i] for i in changed])):
        out[i] = result
    return out


def _reason(gates, i: int, unit, what: str) -> Optional[str]:
    """The lowered finding's words: flags16.BRANCH (a named scope) where every reference lies in
    code an NPU host does not run, one at least in a class a selector rejects there; policy P2's
    info where such a class is also built by name in tests or benchmarks."""
    from .flags16 import BRANCH
    from .importgates import is_test

    found = gates.sites(i, unit)
    # (no other module need hold a site: the rejected class's own questions lie in another module)
    if not found or not any(_REJECTS in s or _NO_INSTANCE in s for _j, s in found):
        return None
    found = sorted(found, key=lambda item: (_REJECTS not in item[1] and _NO_INSTANCE not in item[1],
                                            is_test(item[1].split(":", 1)[0])))
    shown = "; ".join(s for _j, s in found[:2]) + (f"; and {len(found) - 2} more" if len(found) > 2 else "")
    if any(TESTS_ONLY in s for _j, s in found):
        return (f"reached on an NPU host only from tests/benchmarks: {what}`{unit.name}` is otherwise "
                f"reached only from kernel classes an NPU host never selects or builds: {shown}")
    return f"{BRANCH}: {what}`{unit.name}` is reached only from kernel classes an NPU host never selects or builds: {shown}"


def _lower_methods(results: list, text_of, open_finding, start) -> list:
    """An open finding in an instance method (`__init__`, static and class methods aside) of a
    module-level class of which no instance exists on an NPU host (`raising_init`: its `__init__`
    calls a check that raises there, or a backend selector every candidate of which answers no,
    oracles28.py), and which no class of the run names as a base: a named scope (round 28, CC#22:
    `create_weights` of a compressed-tensors NVFP4 MoE method whose `__init__` selects the backend
    first). callgates21's walk reads the class's references, which build it anywhere."""
    from .flagcalls19 import lower_result
    from .flags16 import BRANCH
    from .modpaths import open_python, parsed

    out = list(results)
    for i, tree in parsed(open_python(results, open_finding), text_of, b"def __init__"):
        if tree is None:
            continue
        run, support = start()
        tree = run.trees.setdefault(i, tree)

        def reason_of(line: int, tree=tree, i=i, support=support) -> Optional[str]:
            for stmt in tree.body:
                if not (isinstance(stmt, ast.ClassDef) and stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno)):
                    continue
                method = next((m for m in stmt.body if isinstance(m, _DEFS)
                               and m.body[0].lineno <= line <= (m.end_lineno or m.lineno)), None)
                if method is None or method.name == "__init__" or _static(method) or support.subclassed(stmt.name):
                    return None
                why = support.raising_init(i, tree, stmt)
                return None if why is None else f"{BRANCH}: in `{stmt.name}.{method.name}`, a method of `{stmt.name}`, {why}"
            return None

        out[i] = lower_result(out[i], open_finding, reason_of)
    return out


def _lower_kernels(results: list, text_of, open_finding, start) -> list:
    """kernelgates26's reading with these gates: an open NPU910 place on the Triton decorator of a
    module-level kernel whose every reference lies in such code."""
    from .kernelgates26 import lower_kernels

    return lower_kernels(results, text_of, lambda f: open_finding(f) and f.code == "NPU910", start,
                         lambda gates, i, unit: _reason(gates, i, unit, "the Triton kernel "))
