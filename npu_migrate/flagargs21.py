"""A function's own flag parameter that every call in the run passes a value false on an NPU host
(issue #16, round-21 audit BF#35, BH#28: "a lazy import of a CUDA-only package inside `if flag:`,
where the flag is a parameter whose callers pass a module constant computed in another module from
an SM check and an import probe"). Called from flagcalls19.blocks for the parameters an `if` test,
an `assert` or an early exit reads.

    # fp8_kernel.py
    def quant_raw(x, group_size, scale_ue8m0: bool = False):
        ...
        if scale_ue8m0:
            from deep_gemm import transform_sf   # never runs on an NPU host
    def quant(x, group_size, scale_ue8m0: bool = False):
        return quant_raw(x, group_size, scale_ue8m0=scale_ue8m0)     # handed on

    # moe_runner.py (another module)
    quant(x, 128, scale_ue8m0=deep_gemm_wrapper.DEEPGEMM_SCALE_UE8M0)  # False there (flagcalls19)

flagcalls19 reads the module flags; a parameter of the function that holds the test was unknown.
Here it is False on an NPU host when ALL of these hold, and the test is then decided as flagcalls19
decides a flag (a named scope naming the parameter, a call and the flag it passes):

* the function is defined at module level (a method's callers are not resolved), does not assign
  the parameter again, and no file of the run names it other than by calling it (handed on as a
  value, `partial(f, ...)`, named in a string: its callers are not seen);
* the run calls it at least once (files that define a top-level function of the same name aside),
  and at every call the value of the parameter (keyword, positional at its index, else its default)
  is false there: a constant, a flag flagcalls19 reads as False (`wrapper.FLAG`, an imported name),
  or a parameter of the calling module-level function that is itself so proven (a few steps deep;
  a cycle adds nothing);
* some value read on the way is computed in another module, or some call lies in another module
  (a flag of this module alone at this module's own calls is the file's reading: flags16/reach.py).

A module-level alias bound once (`quant_fp8 = _quant_raw`) counts as the function: its calls are
its calls. A function the run never calls hands nothing on (only its callers' values count; the
function holding the test must have one). Where no flag is read on the way (every call passes a
literal False or leaves the default), at least one call lying in another module, the block is not a
named scope but info "under a parameter no call of the run sets" (a caller outside the project, a
library's user, may set it: optparams20's policy for an unset opt-in).

Kept: a call with `*args`/`**kwargs` that may set it, a value the run cannot decide (a user option,
`self.x`, a local), a flag another file assigns or a patch names (flagcalls19's strictness), a
parameter no call passes (a library's user may set it).
"""

from __future__ import annotations

import ast

from . import astcache

_DEPTH = 4
# (a parameter no call sets: not a named scope, info; a library's user may set it, as optparams20 says)
UNSET = "under a parameter no call of the run sets"
UNSET_KEY = "(no call sets it)"


def head(used: list, branch: str) -> str:
    """The reason's first words: flagcalls19's BRANCH (a named scope), or UNSET (info) where the
    decision read only parameters no call of the run sets."""
    names = [n for _m, n in used if n]
    return UNSET if names and all(n.endswith(UNSET_KEY) for n in names) else branch


class Params:
    """The proofs of one run, memoised; `run` is flagcalls19's interpreter (its `_Run`)."""

    def __init__(self, run) -> None:
        self.run = run
        self.memo: dict = {}
        self.index: dict = {}
        self.handed: dict = {}  # (id of a handed-on parameter -> the call its proof names)

    # ------------------------------------------------------------------ the run's calls of a name
    def _calls(self, j: int, name: str):
        """([calls of `name` in module j], named otherwise) from one walk of its tree."""
        key = (j, name)
        if key not in self.index:
            tree = self.run.tree(j)
            calls, other = [], tree is None
            funcs = set()
            for node in astcache.walk(tree) if tree is not None else ():
                if isinstance(node, ast.Call):
                    func = node.func
                    if (func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute)
                            else None) == name:
                        calls.append(node)
                        funcs.add(id(func))
            others = []
            for node in astcache.walk(tree) if tree is not None else ():
                if id(node) in funcs:
                    continue
                if (isinstance(node, ast.Name) and node.id == name) or \
                        (isinstance(node, ast.Attribute) and node.attr == name) or \
                        (isinstance(node, ast.Constant) and node.value == name):
                    others.append(node)
            self.index[key] = (calls, others or other)
        return self.index[key]

    # ------------------------------------------------------------------ proofs
    def prove(self, i: int, function: ast.AST, param: str, depth: int = 0, seen: frozenset = frozenset()):
        """[(module, description, used)] of the calls of module-level `function` of module i, each
        passing `param` a value false on an NPU host; None where one may not."""
        key = (i, function.name, param)
        if key in seen:
            return []  # (a cycle hands on only what its other callers pass)
        if key in self.memo:
            return self.memo[key]
        result = None if depth > _DEPTH else self._prove(i, function, param, depth, seen | {key})
        if depth == 0:
            self.memo[key] = result  # (deeper answers may have leaned on a cycle: not kept)
        return result

    def _prove(self, i: int, function: ast.AST, param: str, depth: int, seen: frozenset):
        run = self.run
        tree = run.tree(i)
        if tree is None:
            return None
        # (the run's own tree of the module: its nodes are the ones compared by identity)
        function = next((s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
                         and s.name == function.name and s.lineno == function.lineno), None)
        if function is None:
            return None
        args = function.args
        positional = [*args.posonlyargs, *args.args]
        names = [a.arg for a in positional]
        default = None
        if param in names:
            index = names.index(param)
            offset = index - (len(positional) - len(args.defaults))
            default = args.defaults[offset] if offset >= 0 else None
        elif param in [a.arg for a in args.kwonlyargs]:
            index = -1
            default = args.kw_defaults[[a.arg for a in args.kwonlyargs].index(param)]
        else:
            return None
        if _assigned(function, param):
            return None
        # (`per_token_group_quant_fp8 = _per_token_group_quant_8bit_raw`: an alias bound once at the
        # module's top, its calls the function's)
        aliases = {id(stmt.value): stmt.targets[0].id for stmt in tree.body if isinstance(stmt, ast.Assign)
                   and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                   and isinstance(stmt.value, ast.Name) and stmt.value.id == function.name
                   and run._stores(i).get(stmt.targets[0].id) == 1}
        bound = {id(stmt.targets[0]) for stmt in tree.body if isinstance(stmt, ast.Assign) and id(stmt.value) in aliases}
        found: list = []
        for name in (function.name, *aliases.values()):
            if self._each_call(i, name, param, index, default, function, set(aliases) | bound, depth, seen,
                               found) is None:
                return None
        # (a function the run never calls hands nothing on: only its callers' values count, and the
        # first function must have one)
        return found if found or depth else None

    def _each_call(self, i, name, param, index, default, function, aliases, depth, seen, found):
        """Adds the proof of each call of `name` to `found`; None where one may pass a true value."""
        run = self.run
        word = name.encode()
        for j, result in enumerate(run.results):
            if not result.relpath.endswith(".py") or word not in (run.text_of(j) or b""):
                continue
            other_tree = run.tree(j)
            if other_tree is None:
                return None
            if j != i and any(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == name
                              for s in other_tree.body):
                continue  # (a function of its own by that name)
            calls, other = self._calls(j, name)
            if other is True or (other and any(j != i or id(n) not in aliases for n in other)):
                return None
            for call in calls:
                value = _passed(call, param, index)
                if value is False:
                    return None
                if value is None:
                    if default is None:
                        return None
                    value, where = default, i
                else:
                    where = j
                proof = self._false(where, value, call if where == j else function, depth, seen)
                if proof is None:
                    return None
                shown = " ".join((ast.get_source_segment((run.text_of(where) or b"").decode("utf-8", "replace"),
                                                         value) or ast.unparse(value)).split())
                said = self.handed.pop(id(value), None)
                verb = "passes" if where == j else "leaves the default"
                found.append((said[0], said[1], proof) if said else
                             (j, f"{run.results[j].relpath}:{call.lineno} {verb} `{shown[:70]}`", proof))
        return found

    def _false(self, j: int, value: ast.AST, at: ast.AST, depth: int, seen: frozenset):
        """The (module, name) reads proving `value` (in module j, at node `at`) false on an NPU
        host; None where it may be true there."""
        from .flagtruth import UNKNOWN as _U
        from .flagtruth import local_names as _locals

        run = self.run
        tree = run.tree(j)
        parents = astcache.parents(tree)
        enclosing = []
        node = parents.get(id(at))
        while node is not None:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                enclosing.append(node)
            node = parents.get(id(node))
        if isinstance(value, ast.Name) and enclosing and value.id in _parameters(enclosing[0]):
            outer = enclosing[-1]
            if len(enclosing) != 1 or not isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return None
            callers = self.prove(j, outer, value.id, depth + 1, seen)
            if callers is None:
                return None
            self.handed[id(value)] = _first(callers, j)
            return [read for _j, _d, reads in callers for read in reads]
        local: frozenset = frozenset()
        for function in enclosing:
            local |= _locals(function)
        used: list = []
        truth = run.truth(j, value, {}, local, 0, used)
        return used if truth is False and truth is not _U else None


def _first(proof: list, i: int) -> tuple | None:
    """(module, description) of the first call of a proof whose value reads another module than i."""
    return next(((j, d) for j, d, reads in proof if any(m != i for m, _n in reads)), (proof[0][0], proof[0][1])
                if proof else None)


def _parameters(function: ast.AST) -> set:
    return {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}


def _assigned(function: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load) for n in ast.walk(function)) \
        or any(isinstance(n, ast.Global) and name in n.names for n in ast.walk(function))


def _passed(call: ast.Call, param: str, index: int):
    """The expression a call passes for `param`, None where absent, False where unknown (`**kw`)."""
    for keyword in call.keywords:
        if keyword.arg == param:
            return keyword.value
    if any(k.arg is None for k in call.keywords):
        return False
    if any(isinstance(a, ast.Starred) for a in call.args):
        return False
    if 0 <= index < len(call.args):
        return call.args[index]
    return None


def false_parameters(params: Params, i: int, tree: ast.Module, test: ast.AST, where: ast.AST) -> tuple[dict, list]:
    """({parameter: False}, used) for the parameters of the module-level function holding `where`
    that `test` reads and every call of the run passes a false value; `used` holds flagcalls19's
    (module, name) reads, the first one this module's description of the proof."""
    parents = astcache.parents(tree)
    node = parents.get(id(where))
    while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        node = parents.get(id(node))
    if node is None or not any(stmt is node for stmt in tree.body):
        return {}, []
    wanted = {n.id for n in ast.walk(test) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} & _parameters(node)
    env: dict = {}
    used: list = []
    for param in sorted(wanted):
        proof = params.prove(i, node, param)
        if not proof:
            continue
        reads = [read for _j, _d, rs in proof for read in rs]
        elsewhere = sorted({j for j, _d, _rs in proof if j != i})
        if not elsewhere and not any(m != i for m, _n in reads):
            continue  # (the file's own calls: reach.py's reading)
        env[param] = False
        count = f"{len(proof)} call{'s' if len(proof) > 1 else ''}"
        if reads:
            key = f"{param} (a parameter)"
            first = _first(proof, i)[1]
            text = f"`{param}` of `{node.name}` is False there at every call of the run ({count}, e.g. {first})"
        else:
            key = f"{param} {UNSET_KEY}"
            first = next((d for j, d, _rs in proof if j != i and " passes " in d), None) or \
                next(d for j, d, _rs in proof if j != i)
            text = (f"`{param}` of `{node.name}` is passed False or left at its default by every call of the run "
                    f"({count}, e.g. {first}): the block runs only where a caller outside the project sets it")
        params.run.origin[(i, key)] = text
        used.append((i, key))
        used.extend(reads)
        used.extend((j, "") for j in elsewhere)
    return env, used
