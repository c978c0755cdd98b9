"""Benchmark code run only under a command-line flag or choice a user passes (issue #16, policy P1,
audit round 31 FA#2 and FA#26). A whole-run pass (runplan.whole_run_passes, after envskips29.py).

A benchmark script turns its CUDA-only extras on with options that are off by default:

    # benchmarks/attention_benchmarks/benchmark.py
    parser.add_argument("--ncu-profile", action="store_true", default=False)
    # benchmarks/attention_benchmarks/common.py
    @dataclass
    class BenchmarkConfig:
        ncu_profile: bool = False

    def run_ncu_profile(benchmark_fn):
        torch.cuda.cudart().cudaProfilerStart()          # NPU202 (FA#2)

    # benchmarks/attention_benchmarks/runner.py
    if config.ncu_profile:
        run_ncu_profile(benchmark_fn)

or a kernel the user picks from an option's choices (`--act-type` offers `float8_e4m3fn`, FA#26:
`if types.act_type == torch.float8_e4m3fn: ... cutlass_w4a8_create_bench_fn(bt)`). An NPU host runs
that code only when its user asks for it: policy P1, info naming the choice and where its default is
set, never an error, never dropped. testcallers27.py and optchoice29.py read such choices for library
code only (a benchmark's own `*Config` is no library class); optin27.py reads one file's flags.

The options, read once per run from the benchmark files (`benchmarks/`, `bench*.py`: testcallers27's
`test_side` less the tests):
* `add_argument("--x-y", action="store_true")` (no default, or a falsy constant): a switch `x_y` off
  by default (`dest=` honoured);
* `add_argument("--x", choices=[...])` with constant choices and a constant default (or none): a
  choice `x` with that default (None when required);
* a class-body field `x_y: bool = False` (or `= None`) of a benchmark file's class: a switch.
A name defined twice with different defaults, or set by benchmark code to a computed value (`x.F = v`,
a keyword `F=v`, a dict entry `"F": v`, `set_defaults(F=True)`), is no opt-in; passing the user's
setting on is no setting (`F=args.F`, `F=F`, `cfg["F"]`, `cfg.get("F")`, a falsy constant, a
conversion of one of them: `getattr(torch, args.F)`).

A test reads an option as `<x>.F`, `<x>.get("F")` or `<x>["F"]`; it is off at the default when one
operand of an `and` is: the switch itself (`if config.ncu_profile:`), `F is not None` of a None
default, `F == V`/`F in (V, ...)` of a choice whose values V (a string, or the last name of a dotted
one: `torch.float8_e4m3fn`) the option offers and the default is not. An early exit taken at the
default (`if not args.F: return`, `if args.F is None: return`) gates what follows (gatewalk30.py).

A finding is lowered when its own place is so gated, or when it lies in a function or class of a
benchmark file every reference of which in the run (a name or attribute naming it, its own body
aside) is so gated, at least one: info "reached on an NPU host only when `--ncu-profile` is chosen
(`config.ncu_profile` defaults to `False`, path:line)", naming the references.

Kept (the nearest true cases, tests/test_h152.py): a switch on by default (`default=True`,
`store_false`, `set_defaults(F=True)`), a switch the benchmark computes, a value the default equals,
an `or` test, an `else:` branch, one ungated reference, a library file (testcallers27's business), a
local name or parameter (not read here).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache

CHOSEN = "reached on an NPU host only when"
_BENCH = re.compile(r"(^|/)(benchmarks?/|bench[^/]*\.py$)")
_CONFLICT = object()
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def bench_file(relpath: str) -> bool:
    """A benchmark's Python file (not a test): its own options are what this pass reads."""
    from .importgates import is_test

    return relpath.endswith(".py") and bool(_BENCH.search(relpath)) and not is_test(relpath)


@dataclasses.dataclass(frozen=True)
class Option:
    name: str           # the attribute it is read as (`ncu_profile`)
    shown: str          # what the user passes (`--ncu-profile`, `BenchmarkConfig.ncu_profile`)
    default: object     # False / None / a string
    choices: tuple      # () for a switch
    where: str          # path:line of its definition


def _const(node: Optional[ast.AST]):
    return node.value if isinstance(node, ast.Constant) else _CONFLICT


def _off(option: Option):
    """The default as a test reads it: a switch's False and None alike."""
    return bool(option.default) if not option.choices else option.default


def _argparse_option(call: ast.Call, relpath: str) -> Optional[Option]:
    flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    long = [f for f in flags if f.startswith("--")]
    if not long or len(flags) != len(call.args):
        return None
    words = {k.arg: k.value for k in call.keywords if k.arg is not None}
    dest = _const(words["dest"]) if "dest" in words else long[0][2:].replace("-", "_")
    if not isinstance(dest, str) or any(k.arg is None for k in call.keywords):
        return None
    default = _const(words["default"]) if "default" in words else None
    where = f"{relpath}:{call.lineno}"
    action = _const(words.get("action")) if "action" in words else None
    if action == "store_true":
        return Option(dest, long[0], False, (), where) if default in (False, None) else None
    if "choices" in words and isinstance(words["choices"], (ast.List, ast.Tuple)):
        values = tuple(_const(e) for e in words["choices"].elts)
        if values and all(isinstance(v, str) for v in values) and (default is None or isinstance(default, str)):
            required = "required" in words and _const(words["required"]) is True
            return Option(dest, long[0], default, values, f"required, {where}" if required else where)
    return None


def _user_value(value: ast.AST, name: str) -> bool:
    """A value that passes the user's setting on (or keeps the default's answer)."""
    if isinstance(value, ast.Constant):
        return not value.value
    if isinstance(value, ast.Attribute):
        return value.attr == name
    if isinstance(value, ast.Name):
        return value.id == name
    if isinstance(value, ast.Call) and not value.keywords and any(
            not isinstance(a, (ast.Constant, ast.Name)) for a in value.args):
        # (a conversion of the user's setting: `getattr(torch, args.F)`, `to_dtype(args.F)`)
        return all(isinstance(a, (ast.Constant, ast.Name)) or _user_value(a, name) and not isinstance(a, ast.Constant)
                   for a in value.args)
    return _read_key(value) == name


def _read_key(node: ast.AST) -> Optional[str]:
    """F of `<x>["F"]` or `<x>.get("F"[, falsy])`."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) \
            and (len(node.args) == 1 or len(node.args) == 2 and _const(node.args[1]) in (False, None)):
        return node.args[0].value
    return None


def options(trees: list) -> dict:
    """{name: Option} of the benchmark files' opt-in options (this module's docstring); `trees`:
    [(relpath, tree)]."""
    found: dict = {}
    computed: set = set()

    def add(option: Option) -> None:
        before = found.get(option.name)
        if before is None:
            found[option.name] = option
        elif before is not _CONFLICT and (_off(before) != _off(option) or
                                          (before.choices and option.choices and before.choices != option.choices)):
            found[option.name] = _CONFLICT
        elif before is not _CONFLICT and option.choices and not before.choices:
            found[option.name] = option  # (the command line's choices over a field's plain default)
        elif before is not _CONFLICT and option.shown.startswith("--") and not before.shown.startswith("--") \
                and not before.choices:
            found[option.name] = option  # (name the flag the user passes)

    for relpath, tree in trees:
        for node in astcache.nodes(tree, (ast.Call, ast.ClassDef, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Dict)):
            if isinstance(node, ast.Call):
                func = node.func.attr if isinstance(node.func, ast.Attribute) else None
                if func == "add_argument":
                    option = _argparse_option(node, relpath)
                    if option is not None:
                        add(option)
                    else:  # (an option of that name with another shape: not read)
                        words = {k.arg: k.value for k in node.keywords if k.arg}
                        long = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                                and a.value.startswith("--")]
                        dest = _const(words["dest"]) if "dest" in words else long[0][2:].replace("-", "_") if long else None
                        if isinstance(dest, str):
                            computed.add(dest)
                    continue
                for keyword in node.keywords:
                    if keyword.arg is not None and not _user_value(keyword.value, keyword.arg):
                        computed.add(keyword.arg)
            elif isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                            and isinstance(stmt.value, ast.Constant) and (stmt.value.value is False or stmt.value.value is None):
                        name = stmt.target.id
                        add(Option(name, f"{node.name}.{name}", stmt.value.value, (), f"{relpath}:{stmt.lineno}"))
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values):
                    if isinstance(key, ast.Constant) and isinstance(key.value, str) and not _user_value(value, key.value):
                        computed.add(key.value)
            elif node.value is not None:
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    if isinstance(target, ast.Attribute) and (isinstance(node, ast.AugAssign)
                                                              or not _user_value(node.value, target.attr)):
                        computed.add(target.attr)
    return {name: o for name, o in found.items() if o is not _CONFLICT and name not in computed}


class Reader:
    """Reads a test of the benchmark options `table` ({name: Option})."""

    def __init__(self, table: dict) -> None:
        self.table = table

    def _subject(self, node: ast.AST) -> Optional[Option]:
        if isinstance(node, ast.Attribute) and not (isinstance(node.value, ast.Name) and node.value.id == "self"):
            return self.table.get(node.attr)
        key = _read_key(node)
        return self.table.get(key) if key is not None else None

    @staticmethod
    def _value_name(node: ast.AST) -> Optional[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        dotted = astcache.dotted(node, strict=True) if isinstance(node, ast.Attribute) else None
        return dotted.rsplit(".", 1)[-1] if dotted else None

    def _at_default(self, part: ast.AST):
        """(the operand's value at its option's default (True/False, None: unknown), the option, the
        choice it asks for)."""
        negate = False
        while isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.Not):
            part, negate = part.operand, not negate
        option = self._subject(part)
        if option is not None and not option.choices:
            return (not option.default) if negate else bool(option.default), option, None
        if not (isinstance(part, ast.Compare) and len(part.ops) == 1):
            return None, None, None
        option = self._subject(part.left)
        if option is None:
            return None, None, None
        op, right = part.ops[0], part.comparators[0]
        value = None
        if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) and right.value is None:
            value, choice = (option.default is None) == isinstance(op, ast.Is), None
        elif option.choices and isinstance(op, (ast.Eq, ast.In)):
            names = [self._value_name(e) for e in right.elts] if isinstance(op, ast.In) and isinstance(
                right, (ast.Tuple, ast.List, ast.Set)) else [self._value_name(right)] if isinstance(op, ast.Eq) else []
            if not names or not all(n is not None and n in option.choices for n in names):
                return None, None, None
            value, choice = option.default in names, " or ".join(names)
        else:
            return None, None, None
        return ((not value) if negate else value), option, choice

    def _say(self, option: Option, choice: Optional[str], operand: ast.AST) -> str:
        asked = f"`{option.shown} {choice}`" if choice and option.shown.startswith("--") else f"`{option.shown}`"
        read = " ".join(ast.unparse(operand).split())[:80]
        if option.where.startswith("required, "):  # (no default: the user names one of its choices)
            return f"{asked} is chosen (`{read}`; `{option.shown}` has no default: {option.where})"
        return f"{asked} is chosen (`{read}`; `{option.shown}` defaults to `{option.default!r}`, {option.where})"

    def off(self, test: ast.AST) -> Optional[str]:
        parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        for part in parts:
            value, option, choice = self._at_default(part)
            if option is not None and value is False:
                return self._say(option, choice, part)
        return None

    def taken(self, test: ast.AST) -> Optional[str]:
        parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]
        for part in parts:
            value, option, choice = self._at_default(part)
            if option is not None and value is True and not choice:
                return self._say(option, choice, part)
        return None

    def gate(self, node: ast.AST, parents: dict) -> Optional[str]:
        from .gatewalk30 import gate_of

        return gate_of(node, parents, self.off, self.taken, if_exp=True)


def _starts(tree: ast.Module) -> dict:
    starts: dict = {}
    for node in astcache.walk(tree):
        if isinstance(node, (ast.stmt, ast.expr)):
            starts.setdefault(node.lineno, node)
    return starts


def review(results: list, paths: dict) -> list:
    """The results, with each open place of a benchmark file reached only under an opt-in option
    lowered to info naming it (this module's docstring)."""
    from .callgates21 import unit_of
    from .findings import lower_pieces, merge_per_file
    from .modpaths import RunTexts
    from .moot import is_open

    bench = [i for i, r in enumerate(results) if bench_file(r.relpath)]
    candidates = [i for i in bench if any(is_open(f) for f in results[i].findings)]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    trees = {}
    for i in bench:
        data = text_of(i)
        if data and (b"add_argument" in data or b"class " in data):
            tree = astcache.parse(data)
            if tree is not None:
                trees[i] = tree
    table = options([(results[i].relpath, t) for i, t in trees.items()])
    if not table:
        return results
    reader = Reader(table)
    python = [j for j, r in enumerate(results) if r.relpath.endswith(".py")]
    memo: dict = {}

    def tree_of(j: int) -> Optional[ast.Module]:
        if j not in trees:
            data = text_of(j)
            trees[j] = astcache.parse(data) if data else None
        return trees[j]

    def references(i: int, unit: ast.AST) -> Optional[str]:
        """What every reference of the run to `unit` (of file i) lies behind, or None."""
        key = (i, unit.name)
        if key in memo:
            return memo[key]
        word, said, sites = unit.name.encode(), None, []
        for j in python:
            data = text_of(j)
            if not data or word not in data:
                continue
            tree = tree_of(j)
            if tree is None:
                memo[key] = None
                return None
            parents = astcache.parents(tree)
            for node in astcache.nodes(tree, (ast.Name, ast.Attribute)):
                name = node.id if isinstance(node, ast.Name) else node.attr
                if name != unit.name or (j == i and unit.lineno <= node.lineno <= (unit.end_lineno or unit.lineno)):
                    continue
                if isinstance(getattr(node, "ctx", None), ast.Store):
                    continue
                why = reader.gate(node, parents)
                if why is None:
                    memo[key] = None
                    return None
                said = said or why
                sites.append(f"{results[j].relpath}:{node.lineno}")
        memo[key] = None if said is None else (
            f"{CHOSEN} {said}: `{unit.name}` is called only under it ({', '.join(sorted(set(sites))[:3])}"
            f"{' and more' if len(set(sites)) > 3 else ''})")
        return memo[key]

    out = list(results)
    for i in candidates:
        tree = tree_of(i)
        if tree is None:
            continue
        parents, starts = astcache.parents(tree), _starts(tree)

        def reason_of(line: int, i=i, tree=tree, parents=parents, starts=starts) -> Optional[str]:
            node = starts.get(line)
            direct = reader.gate(node, parents) if node is not None else None
            if direct is not None:
                return f"{CHOSEN} {direct}"
            unit = unit_of(tree, line)
            return None if unit is None else references(i, unit)

        changed, findings = False, []
        for finding in results[i].findings:
            try:
                pieces = lower_pieces(finding, reason_of) if is_open(finding) else None
            except RecursionError:
                pieces = None
            if pieces is None:
                findings.append(finding)
                continue
            lowered = [p for p in pieces if p.severity == "info" and CHOSEN in p.message]
            kept = [p for p in pieces if p not in lowered]
            findings.extend(merge_per_file(lowered) + kept)
            changed = True
        if changed:
            out[i] = dataclasses.replace(results[i], findings=sorted(findings))
    return out
