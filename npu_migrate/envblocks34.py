"""Code inside a function's `if envs.X:` block, X an environment switch off by default (issue #16,
policy P1; round-34 audit IB#20). Whole run, from runplan.whole_run_passes, right after
envchains32.py, whose switch table (`switches`) and chain reading (`SwitchGates`) it extends from
module-level gates to the gates inside functions.

vLLM's `model_executor/determinism/batch_invariant.py`:

    def enable_batch_invariant_mode():
        ...
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = ...   # NPU404, line 1381

    def init_batch_invariance():
        if envs.VLLM_BATCH_INVARIANT:                                              # line 1435
            ...
            enable_batch_invariant_mode()                                          # its only call
            torch.backends.cuda.matmul.fp32_precision = "ieee"                     # NPU404, line 1441

and `vllm/envs.py`: `"VLLM_BATCH_INVARIANT": lambda: bool(int(os.getenv("VLLM_BATCH_INVARIANT",
"0")))`. By default the test is false, on an NPU host as anywhere: the batch-invariant mode runs
only when the user sets the variable, an explicit choice. Under policy P1 the report-only errors
and warnings inside the body of such an `if` in a function, and those of a function (module-level,
or a method of a module-level class) every reference of which in its file lies in such a body (or
in a function so reached, envchains32's four steps), become info: "reached on an NPU host only
when the environment variable `VLLM_BATCH_INVARIANT` is set (...): the code runs only under `if
envs.VLLM_BATCH_INVARIANT:` (line 1435)". Never dropped, never a scope (the user may set it there).

The switch is envchains32's: `envs.X` of the project's `envs.py` table off by default, set by no
library file; a module-level name bound once to such a read; `A or B` of two off, `A and B` with
one off.

Kept (the nearest true cases): the same code under a switch on by default (`os.getenv("X", "1")`)
or one the library sets, under `if not envs.X:` or in the `else:`, code after the `if`, a function
also called outside the block or named by another library file (envchains32's reading), and a
module-level block's own statements outside any function (envchains32 keeps them too).
"""

from __future__ import annotations

import ast
from typing import Optional

from . import astcache
from .envchains32 import SET, SwitchGates, switches

BLOCK = ("reached on an NPU host only when the environment variable {names} is set ({how}): the code runs "
         "only under `if {test}:` (line {line}) in `{unit}`: an opt-in, to port if it is used there")
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


class _Blocks(SwitchGates):
    """envchains32's gates, read inside functions and classes too."""

    def _gates(self, body: list, inside: bool = False) -> None:
        for stmt in body:
            if isinstance(stmt, ast.If):
                names = self.off(stmt.test)
                if names and stmt.body:
                    self.gates.append(((stmt.body[0].lineno, stmt.body[-1].end_lineno or stmt.body[-1].lineno),
                                       names, stmt))
                    self.inner = [*getattr(self, "inner", []), stmt] if inside else getattr(self, "inner", [])
                else:
                    self._gates(stmt.body, inside)
                self._gates(stmt.orelse, inside)
            elif isinstance(stmt, (*_DEFS, ast.ClassDef)):
                self._gates(stmt.body, inside or isinstance(stmt, _DEFS))
            elif isinstance(stmt, (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)):
                self._gates(stmt.body, inside)
                self._gates(getattr(stmt, "orelse", []), inside)
            elif isinstance(stmt, ast.Try):
                for part in (stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody):
                    self._gates(part, inside)

    def gate_at(self, line: int) -> Optional[tuple]:
        """The innermost gate inside a function whose body holds `line`, or None."""
        inner = getattr(self, "inner", [])
        found = [g for g in self.gates if g[2] in inner and g[0][0] <= line <= g[0][1]]
        return max(found, key=lambda g: g[0][0]) if found else None

    def reached(self, unit: ast.AST, others, depth: int = 0, seen: frozenset = frozenset()) -> Optional[tuple]:
        """envchains32's reading, where a reference inside any gate (a function's too) is gated."""
        name = unit.name
        refs = self.refs.get(name, [])
        if depth > 4 or name in seen or not refs or len(self.units.get(name, ())) != 1 or others(name):
            return None
        parents = astcache.parents(self.tree)
        names: list = []
        path = None
        for ref in refs:
            holder = self._holder(ref, parents)
            if holder is unit:
                continue  # (its own recursion)
            gate = next((g for g in self.gates if g[0][0] <= ref.lineno <= g[0][1]), None)
            if gate is not None:
                names.extend(gate[1])
                shown = " ".join(ast.unparse(gate[2].test).split())[:80]
                path = path or f"from line {ref.lineno}, under `if {shown}:` (line {gate[2].lineno})"
                continue
            if holder is None:
                return None
            inner = self.reached(holder, others, depth + 1, seen | {name})
            if inner is None:
                return None
            names.extend(inner[0])
            path = path or f"from `{holder.name}` (line {ref.lineno}), {inner[1]}"
        if path is None:
            return None
        return tuple(dict.fromkeys(names)), path


def review(results: list, paths: Optional[dict] = None) -> list:
    """The results, with the open places only a function's default-off switch block reaches lowered
    to info (P1; this module's docstring)."""
    from .envskips29 import lower_result
    from .importgates import is_test
    from .modpaths import RunModules, RunTexts
    from .moot import is_open

    def wanted(f) -> bool:
        return is_open(f) and not f.fixable and f.cell is None and f.severity in ("error", "warning")

    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    library = [i for i in python if not is_test(results[i].relpath)]
    candidates = [i for i in library if any(map(wanted, results[i].findings))]
    if not candidates:
        return results
    text_of = RunTexts(results, paths or {})
    candidates = [i for i in candidates if b"envs." in (text_of(i) or b"") and b" if " in (text_of(i) or b"")]
    if not candidates:
        return results
    modules = RunModules(results, text_of)
    table = switches(results, library, text_of, modules)
    if not table:
        return results
    out = list(results)
    for i in candidates:
        tree = modules.tree(i)
        if tree is None:
            continue
        file = _Blocks(tree, table)
        if not getattr(file, "inner", None):
            continue

        def others(name: str, i=i) -> bool:  # (another library file mentions it: it may call it; tests, P2, do not)
            word = name.encode()
            return any(j != i and word in (text_of(j) or b"") for j in library)

        memo: dict = {}

        def shown_names(variables) -> tuple[str, str]:
            shown = " or ".join(f"`{v}`" for v in dict.fromkeys(n for e in variables for n in table[e][0]))
            return shown, "; ".join(table[e][1] for e in variables[:2])

        def reason_of(line: int, file=file, others=others, memo=memo) -> Optional[str]:
            unit = file.unit_at(line)
            if unit is None:
                return None
            gate = file.gate_at(line)
            if gate is not None:
                names, how = shown_names(gate[1])
                test = " ".join(ast.unparse(gate[2].test).split())[:80]
                return BLOCK.format(names=names, how=how, test=test, line=gate[2].lineno, unit=unit.name)
            if id(unit) not in memo:
                memo[id(unit)] = file.reached(unit, others)
            found = memo[id(unit)]
            if found is None:
                return None
            names, how = shown_names(found[0])
            return SET.format(names=names, how=how, unit=unit.name, path=found[1])

        out[i] = lower_result(results[i], reason_of, wanted)
    return out
