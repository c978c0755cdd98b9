"""Tests, benchmarks and tools whose subject is CUDA-only (issue #16, precision wave 21, round-21
audits BH#2, BH#6, BG#6, BG#26, BF#12). Porting what is reported there achieves nothing on an NPU host:
the test never runs there, the benchmark fails at its subject first, the value never reaches a
device, the script is NVIDIA build tooling. Each shape is decided on the exact construct; the
nearest true case stays reported (tests/test_h90.py).

* **A capability's major number compared** (`known_value`, for testscopes' truth of a condition):
  `torch.cuda.get_device_capability()[0] < 9` is true on an NPU host, `>= 9` false: the migration
  rewrites the query to the shim's, which answers (0, 0) there (rules/scopes.toml [npugates]
  `zero_capability_calls`, the same table npugates.py reads for `major, _ = ...`). So an autouse
  module fixture `if torch.cuda.get_device_capability()[0] < 9: pytest.skip(...)` skips every test of
  the module there (reach.py's skipping fixture), and the CUDA graphs it captures never run. A
  platform object's query (`current_platform.get_device_capability()`, None there) is not one: its
  `[0]` raises, which is no skip; a minor number (`[1]`) and a bound of 0 decide nothing.
* **A benchmark whose timed callables all call a CUDA-only compiled op** (`review_op_benchmarks`,
  whole run, from runplan after optests.lower_in_op_tests; NPU202 `torch.cuda.CUDAGraph`, NPU910
  `do_bench_cudagraph`, ...): in a benchmark file (`benchmarks/`, `bench/`, `benchmark_*.py`) of a
  project whose CUDA sources are reported (NPU912), a timing helper `def time_graph(fn): fn() ...;
  torch.cuda.CUDAGraph()` whose every call in the file (directly or through `timer = time_graph if
  g else time_eager`) hands it a callable that always calls such an op (`lambda c=case: c.fused()`,
  `case.unfused`, through the file's methods and functions, not under an `if`, loop or `try`):
  `torch.ops._C.x`, or the project's `_custom_ops` wrapper of one (optests.py's reading). The warm-up
  call fails at the op on an NPU host, so what follows it in the helper is never reached there: a
  named "not run" scope (WARMUP_FAILS) naming an op and the warm-up line. A helper also handed
  portable code (`lambda: torch.mm(a, b)`), a helper stored or passed on, a callable not resolved,
  a finding before the warm-up, a project with no reported CUDA source: kept.
* **A test of the project's own CUDA JIT kernel** (`review_jit_kernel_tests`, whole run, after
  `review_op_benchmarks`): a JIT kernel module is a module of the run, outside tests and
  benchmarks, that hands a literal list of CUDA sources to a JIT loader (`load_jit("rmsnorm",
  cuda_files=["elementwise/rmsnorm.cuh"])`, `load_inline(..., cuda_sources=[src])`) and names no
  NPU. In a test file, a test function that calls a function imported from one (directly or through
  a helper of the file) checks that kernel; a report-only finding in it, in a helper every reference
  of which lies in such tests (the CUDA reference it compares with: `from flashinfer.norm import
  rmsnorm`), is info with JIT_TEST (the test fails at the kernel on an NPU host whatever replaces
  the reference). A module-level finding (an unguarded import that fails the module's collection,
  which the folder's fold of such imports reads) stays as it is. Not a scope: the test runs
  there. A test of portable code with the same reference, a kernel module with an NPU path: kept.
* **A "cuda" mode label in a shell script** (`review_shell_labels`, per file from textfiles.py;
  NPU706): `KV_BUFFER_DEVICE="cuda"` whose every read is the test `if [[ "$KV_BUFFER_DEVICE" ==
  "cuda" ]]` (or `!=`), an `echo`/`printf`, or the branch of that test where it holds another
  value, which is where the script passes it on: the string "cuda" never reaches a device (the
  script leaves the setting out, and the program picks its own default). A named no-work scope
  (MODE_LABEL). An exported variable, a read anywhere else (`--device "$X"`), an `elif` chain: kept.
* **NVIDIA build tooling** (`review`, per file from run.py after wording20; NPU990): a standalone
  script (`if __name__ == "__main__":`) in a tooling folder (`tools/`, `scripts/`, CI folders:
  rules/scopes.toml [cudaonly21]) that runs a CUDA toolkit program (`os.path.join(CUDA_HOME, "bin",
  "nvcc")`, `cuobjdump`) and names no NPU: it builds or inspects CUDA code for an NVIDIA image. Its
  CUDA references (`CUDA_HOME`) are a named no-work scope (NVIDIA_TOOLING). A setup script
  (`setup*.py`), a module of the package, a script that names the NPU/Ascend/CANN, a script with
  no `__main__`: kept.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from . import astcache, catalogue
from .findings import Finding

_dotted = astcache.dotted


def _zero_capability_calls() -> frozenset:
    return frozenset(catalogue.read_table("scopes.toml").get("npugates", {}).get("zero_capability_calls", ()))


def _major_of_query(node: ast.AST) -> bool:
    """`torch.cuda.get_device_capability(...)[0]`: the shim's major number, 0 on an NPU host."""
    return (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
            and node.slice.value == 0 and not isinstance(node.slice.value, bool)
            and isinstance(node.value, ast.Call)
            and _dotted(node.value.func) in _zero_capability_calls())


def known_value(node: ast.AST):
    """True or False where `node` compares the shim's major capability number (0 on an NPU host)
    with a positive integer literal (`[0] < 9` true, `[0] >= 9` false), else None."""
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
        return None
    left, op, right = node.left, node.ops[0], node.comparators[0]
    if _major_of_query(right) and not _major_of_query(left):  # (`9 > cap()[0]`)
        flipped = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE}
        left, right = right, left
        op = flipped.get(type(op), type(op))()
    if not _major_of_query(left):
        return None
    if not (isinstance(right, ast.Constant) and isinstance(right.value, int)
            and not isinstance(right.value, bool) and right.value > 0):
        return None
    if isinstance(op, (ast.Lt, ast.LtE, ast.NotEq)):
        return True
    if isinstance(op, (ast.Gt, ast.GtE, ast.Eq)):
        return False
    return None


# ------------------------------------------------------------------------------------------------
# A shell variable whose value "cuda" is only a mode label (round-21 BG#6)

MODE_LABEL = ("a mode label the script only compares with \"cuda\": `{name}` is passed on only where "
              "it holds another value (line {line}), so \"cuda\" never reaches a device")
_TEST = r'\[\[?\s*"?\$\{{?{name}\}}?"?\s*(==|=|!=)\s*["\']?cuda["\']?\s*\]\]?'


def _if_branches(lines: list[str], start: int) -> tuple[int, int] | None:
    """(the `else` line or None, the `fi` line) of the `if` that opens at line index `start`
    (0-based), or None when it has an `elif` or no `fi`."""
    depth, other = 0, None
    for i in range(start + 1, len(lines)):
        words = re.findall(r"(?:^|[;\s])(if|fi|else|elif)(?=$|[;\s])", lines[i])
        for word in words:
            if word == "if":
                depth += 1
            elif word == "fi":
                if depth == 0:
                    return other, i
                depth -= 1
            elif depth == 0:
                if word == "elif":
                    return None
                other = i
    return None


def review_shell_labels(findings: list[Finding], code: str) -> list[Finding]:
    """NPU706 on `NAME="cuda"` in a shell script (comments blanked in `code`) whose every read of
    `$NAME` is in an `if [[ "$NAME" == "cuda" ]]` test (or `!=`), in an `echo`/`printf`, or in the
    branch of such a test where the value is not "cuda": info with MODE_LABEL (a named scope).
    An exported variable, a read anywhere else (`--device $NAME`), a test with `elif`: kept."""
    lines = code.split("\n")
    out = []
    for finding in findings:
        if finding.code != "NPU706" or finding.fixable or finding.severity == "info" \
                or not 0 < finding.line <= len(lines):
            out.append(finding)
            continue
        match = re.match(r"\s*(?:local\s+|readonly\s+)?([A-Za-z_]\w*)=[\"']?cuda[\"']?\s*(?:$|;)",
                         lines[finding.line - 1])
        line = _label_only(lines, match.group(1), finding.line - 1) if match else None
        if line is None:
            out.append(finding)
            continue
        reason = MODE_LABEL.format(name=match.group(1), line=line)
        out.append(dataclasses.replace(finding, severity="info", message=f"{finding.message} ({reason})"))
    return out


def _label_only(lines: list[str], name: str, assigned: int) -> int | None:
    """The line (1-based) where `name` is passed on with a value other than "cuda", when every read
    of it is a test against "cuda", a message or inside such a branch; None otherwise."""
    if re.search(rf"\b(export|declare\s+-x)\s+(?:\w+=\S*\s+)*{name}\b", "\n".join(lines)):
        return None
    read = re.compile(rf"\$(?:{name}\b|\{{{name}[}}:])")
    test = re.compile(r"^\s*(?:if|elif)\s+" + _TEST.format(name=re.escape(name)) + r"\s*;?\s*(?:then)?\s*$")
    allowed: set[int] = set()
    passed = None
    for i, text in enumerate(lines):
        found = test.match(text)
        if not found:
            continue
        branches = _if_branches(lines, i)
        if branches is None or not text.lstrip().startswith("if"):
            return None
        other, end = branches
        allowed.add(i)
        # `==`: the else branch holds another value; `!=`: the then branch does
        if found.group(1) != "!=":
            first, last = (other + 1, end) if other is not None else (end, end)
        else:
            first, last = i + 1, other if other is not None else end
        allowed.update(range(first, last))
        if passed is None and any(read.search(lines[j]) for j in range(first, last)):
            passed = next(j for j in range(first, last) if read.search(lines[j])) + 1
    if passed is None:
        return None
    for i, text in enumerate(lines):
        if i == assigned or not read.search(text) or i in allowed:
            continue
        if re.match(r"\s*(echo|printf)\b", text):
            continue
        return None
    return passed


# ------------------------------------------------------------------------------------------------
# NVIDIA build tooling (round-21 BF#12)

NVIDIA_TOOLING = ("in NVIDIA build tooling: a standalone script under `{folder}/` that runs the CUDA "
                  "toolkit's `{program}` (line {line}); it builds or inspects CUDA code for an NVIDIA "
                  "image, and an NPU host has no use for it")


def _tooling_table() -> dict:
    return catalogue.read_table("scopes.toml").get("cudaonly21", {})


def _toolkit_run(tree: ast.Module, programs: frozenset) -> tuple[str, int] | None:
    """(program, line) of the first string naming a CUDA toolkit program (`"nvcc"`, `"/bin/nvcc"`,
    an f-string's `/bin/nvcc` part), or None."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value.rstrip().rsplit("/", 1)[-1]
            if name in programs and (node.value == name or "/" in node.value):
                return name, node.lineno
    return None


def _standalone(tree: ast.Module) -> bool:
    return any(isinstance(s, ast.If) and isinstance(s.test, ast.Compare)
               and _dotted(s.test.left) == "__name__"
               and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in s.test.comparators)
               for s in tree.body)


def review(findings: list[Finding], text: str, relpath: str) -> list[Finding]:
    """NPU990 in a standalone script of a tooling folder (rules/scopes.toml [cudaonly21]) that runs
    a CUDA toolkit program and names no NPU: info with NVIDIA_TOOLING (a named no-work scope).
    A setup script (`setup*.py`), a module of the package, a script that also serves the NPU: kept."""
    candidates = [f for f in findings if f.code == "NPU990" and not f.fixable and f.severity != "info"]
    if not candidates:
        return findings
    table = _tooling_table()
    parts = relpath.replace("\\", "/").split("/")
    if len(parts) < 2 or parts[0] not in table.get("tooling_folders", ()) or parts[-1].startswith("setup"):
        return findings
    if re.search(table.get("npu_words", r"(?!)"), text):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogateescape"))
    if tree is None or not _standalone(tree):
        return findings
    run = _toolkit_run(tree, frozenset(table.get("toolkit_programs", ())))
    if run is None:
        return findings
    reason = NVIDIA_TOOLING.format(folder=parts[0], program=run[0], line=run[1])
    return [dataclasses.replace(f, severity="info", message=f"{f.message} ({reason})") if f in candidates else f
            for f in findings]


# ------------------------------------------------------------------------------------------------
# Benchmarks whose timed callables all call a CUDA-only compiled op (round-21 BH#6)

BENCH_FILE = re.compile(r"(^|/)(benchmarks?|bench)/[^/]*|(^|/)(bench|benchmark)_[^/]*\.py$")
WARMUP_FAILS = ("never reached on an NPU host: every callable the benchmark hands to `{helper}` calls a "
                "CUDA-only compiled op built from the project's CUDA sources (NPU912; `{op}`, that is "
                "`torch.ops.{target}`, among them), and the warm-up call at line {warmup} fails there "
                "first; the ops' port comes before this")
_TIMING_APIS = ("do_bench_cudagraph",)  # (a timing API that calls its callable before it captures a graph)
_MAX_DEPTH = 4


class _OpCalls:
    """Which callables of one benchmark file call a CUDA-only compiled op unconditionally."""

    def __init__(self, tree: ast.Module, aliases: dict[str, dict]):
        from .optests import compiled_op

        self.compiled_op = compiled_op
        self.aliases = aliases
        self.functions: dict[str, list] = {}
        self.methods: dict[str, list] = {}
        for node in tree.body:
            if isinstance(node, _DEFS):
                self.functions.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.ClassDef):
                for inner in node.body:
                    if isinstance(inner, _DEFS):
                        self.methods.setdefault(inner.name, []).append(inner)
        self.parents = astcache.parents(tree)
        self._memo: dict[int, tuple | None] = {}

    def op_of(self, func: ast.AST) -> tuple[str, str] | None:
        """(the op as written, its `torch.ops._C` name) for `torch.ops._C.x` or a wrapper's `ops.x`."""
        name = _dotted(func, strict=True) or ""
        if self.compiled_op(name):
            return name, self.compiled_op(name)
        head, _, attr = name.partition(".")
        target = self.aliases.get(head, {}).get(attr) if attr and "." not in attr else None
        return (name, target) if target else None

    def _callee_defs(self, func: ast.AST) -> list:
        if isinstance(func, ast.Name):
            return self.functions.get(func.id, [])
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            return self.methods.get(func.attr, [])
        return []

    def _in_nodes(self, nodes, depth: int) -> tuple | None:
        for node in nodes:
            if isinstance(node, ast.Call):
                op = self.op_of(node.func)
                if op is not None:
                    return op
                defs = self._callee_defs(node.func)
                if len(defs) == 1 and depth < _MAX_DEPTH:
                    op = self.of_def(defs[0], depth + 1)
                    if op is not None:
                        return op
        return None

    def of_def(self, function: ast.AST, depth: int = 0) -> tuple | None:
        """The first op a function calls in its unconditional statements (also through a function
        or method of the file it calls there), or None."""
        if id(function) in self._memo:
            return self._memo[id(function)]
        self._memo[id(function)] = None  # (recursion)
        found = self._in_nodes(_unconditional_nodes(function.body), depth)
        self._memo[id(function)] = found
        return found

    def of_callable(self, expr: ast.AST, scope: ast.AST | None, depth: int = 0) -> tuple | None:
        """The op a callable handed to a timing helper calls, or None when any value it may have
        does not call one."""
        if depth > _MAX_DEPTH:
            return None
        if isinstance(expr, ast.Lambda):
            return self._in_nodes(_own_walk(expr.body), depth)
        if isinstance(expr, ast.IfExp):
            first = self.of_callable(expr.body, scope, depth + 1)
            return first if first and self.of_callable(expr.orelse, scope, depth + 1) else None
        if isinstance(expr, ast.Call) and _dotted(expr.func) in ("functools.partial", "partial") and expr.args:
            return self.of_callable(expr.args[0], scope, depth + 1)
        op = self.op_of(expr)
        if op is not None:
            return op
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            defs = self.methods.get(expr.attr, [])
            return self.of_def(defs[0], depth) if len(defs) == 1 else None
        if isinstance(expr, ast.Name):
            values = _assigned(scope, expr.id) if scope is not None else []
            if values:
                ops = [self.of_callable(v, scope, depth + 1) for v in values]
                return ops[0] if all(ops) else None
            defs = self.functions.get(expr.id, [])
            return self.of_def(defs[0], depth) if len(defs) == 1 else None
        return None

    def scope_of(self, node: ast.AST) -> ast.AST | None:
        parent = self.parents.get(id(node))
        while parent is not None and not isinstance(parent, _DEFS):
            parent = self.parents.get(id(parent))
        return parent


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _own_walk(node: ast.AST):
    """The nodes under `node`, without those of nested functions, classes and lambdas."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        for child in ast.iter_child_nodes(current):
            if not isinstance(child, (*_DEFS, ast.ClassDef, ast.Lambda)):
                stack.append(child)


def _unconditional_nodes(body: list):
    """The nodes of the statements a function always runs (its top level, `with` bodies), in order;
    not those under `if`, loops, `try`, `match`, nor after a `return`/`raise`."""
    for stmt in body:
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                yield from _own_walk(item.context_expr)
            yield from _unconditional_nodes(stmt.body)
            continue
        if isinstance(stmt, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, *_DEFS, ast.ClassDef)) \
                or type(stmt).__name__ in ("Match", "TryStar"):
            continue
        yield from _own_walk(stmt)
        if isinstance(stmt, (ast.Return, ast.Raise)):
            return


def _assigned(scope: ast.AST, name: str) -> list:
    """The values a plain `name = value` in the function `scope` binds (empty when none)."""
    values = []
    for node in _own_walk(scope):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if len(node.targets) != 1:
                return [ast.Constant(None)]
            values.append(node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) and isinstance(
                getattr(node, "target", None), ast.Name) and node.target.id == name:
            return [ast.Constant(None)]
    return values


def _warmup_line(function: ast.AST) -> tuple[str, int] | None:
    """(the callable parameter, the line of its first call) of a timing helper: a function whose
    first positional parameter it calls (`fn()`) or hands to `do_bench_cudagraph`."""
    params = function.args.posonlyargs + function.args.args
    if not params:
        return None
    name = params[0].arg
    lines = []
    for node in _own_walk(function):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id == name:
                lines.append(node.lineno)
            elif (_dotted(node.func) or "").rpartition(".")[2] in _TIMING_APIS and node.args \
                    and isinstance(node.args[0], ast.Name) and node.args[0].id == name:
                lines.append(node.lineno)
    return (name, min(lines)) if lines else None


def _choice(value: ast.AST) -> set:
    """The names a value picks from: `f` or `f if c else g` (nested), else nothing."""
    if isinstance(value, ast.Name):
        return {value.id}
    if isinstance(value, ast.IfExp):
        body, orelse = _choice(value.body), _choice(value.orelse)
        return body | orelse if body and orelse else set()
    return set()


def _helper_calls(tree: ast.Module, helper: str) -> list | None:
    """The calls of the module function `helper`, directly or through a name bound only to it or
    to an `if`-choice of such helpers (`timer = time_graph if g else time_eager`); None when the
    helper's name is used any other way (stored, passed on)."""
    parents = astcache.parents(tree)
    names, calls = {helper}, []
    changed = True
    while changed:  # (aliases of aliases)
        changed = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and node.targets[0].id not in names and _choice(node.value) & names:
                names.add(node.targets[0].id)
                changed = True
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load)):
            continue
        parent = parents.get(id(node))
        if isinstance(parent, ast.Call) and parent.func is node:
            calls.append(parent)
            continue
        while isinstance(parent, ast.IfExp):
            parent = parents.get(id(parent))
        if isinstance(parent, ast.Assign) and isinstance(parent.targets[0], ast.Name) and parent.targets[0].id in names:
            continue
        return None
    return calls


def review_op_benchmarks(results: list, paths: dict | None = None) -> list:
    """Report-only findings after the warm-up call of a benchmark's timing helper (`def
    time_graph(fn): fn(); g = torch.cuda.CUDAGraph(); ...`), where every call of the helper in the
    file hands it a callable that always calls a CUDA-only compiled op (`lambda: ops.fused_x(...)`,
    `case.method` whose body calls `torch.ops._C.x` or the project's `_custom_ops` wrapper of one),
    in a project whose CUDA sources are reported (NPU912): info with WARMUP_FAILS (a named scope:
    the warm-up fails at the op first). A helper also handed a callable of portable code, a helper
    passed on or stored, a finding before the warm-up call: kept. Whole run, after optests."""
    from . import optests
    from .modpaths import result_bytes
    from .moot import is_moot

    def candidate(finding) -> bool:
        return not finding.fixable and finding.severity != "info" and finding.cell is None and not is_moot(finding)

    targets = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and BENCH_FILE.search(r.relpath)
               and any(candidate(f) for f in r.findings)]
    if not targets or not any(f.code == "NPU912" for r in results for f in r.findings):
        return results
    paths = paths or {}
    wrapped = optests.wrapper_lookup(results, paths)
    out = list(results)
    for i in targets:
        data = result_bytes(results[i], paths)
        if not data or (optests.OPS.encode() not in data and optests.WRAPPER.encode() not in data):
            continue
        tree = astcache.parse(data[3:] if data.startswith(b"\xef\xbb\xbf") else data)
        if tree is None:
            continue
        ops = _OpCalls(tree, {alias: wrapped(module) for alias, module in optests.wrapper_aliases(tree).items()})
        spans = []  # (first line, last line, helper, warm-up line, op, target)
        for helper in tree.body:
            if not isinstance(helper, _DEFS) or len(ops.functions.get(helper.name, [])) != 1:
                continue
            warmup = _warmup_line(helper)
            calls = _helper_calls(tree, helper.name) if warmup else None
            if not calls:
                continue
            found = []
            for call in calls:
                arg = call.args[0] if call.args else next(
                    (k.value for k in call.keywords if k.arg == warmup[0]), None)
                op = ops.of_callable(arg, ops.scope_of(call)) if arg is not None else None
                if op is None:
                    break
                found.append(op)
            else:
                spans.append((warmup[1], helper.end_lineno or helper.lineno, helper.name, warmup[1], *found[0]))
        if not spans:
            continue

        def lowered(finding):
            for start, end, helper, warmup, op, target in spans:
                lines = (finding.line, *(also[0] for also in finding.also))
                if candidate(finding) and all(start < line <= end for line in lines):
                    reason = WARMUP_FAILS.format(helper=helper, op=op, target=target, warmup=warmup)
                    return dataclasses.replace(finding, severity="info", message=f"{finding.message} ({reason})")
            return finding

        out[i] = dataclasses.replace(results[i], findings=[lowered(f) for f in results[i].findings])
    return out


# ------------------------------------------------------------------------------------------------
# Tests of the project's own CUDA JIT kernels (round-21 BG#26)

JIT_TEST = ("in a test of the project's CUDA JIT kernel `{name}` (`{module}`, compiled from CUDA sources "
            "by `{loader}(..., {keyword}=[...])` at {path}:{line}): on an NPU host the test fails at that "
            "kernel whatever replaces this, so the kernel's port comes first")
_JIT_KEYWORDS = ("cuda_files", "cuda_sources")


def _jit_loader(tree: ast.Module) -> tuple[str, str, int] | None:
    """(loader, keyword, line) of the first call that hands a literal list of CUDA sources to a JIT
    loader (`load_jit("rmsnorm", cuda_files=["elementwise/rmsnorm.cuh"])`, `load_inline(...,
    cuda_sources=[src])`), or None."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg in _JIT_KEYWORDS and isinstance(keyword.value, (ast.List, ast.Tuple)) \
                        and keyword.value.elts:
                    return (_dotted(node.func) or "load").rpartition(".")[2], keyword.arg, node.lineno
    return None


def _reaching(tree: ast.Module, kernels: dict) -> dict:
    """Module-level functions of a test file that call a name imported from a JIT kernel module
    (at module level or in the function itself), directly or through another such function of
    the file: name -> the kernel's (name, module)."""
    top: dict[str, tuple] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module in kernels and not node.level:
            for alias in node.names:
                top[alias.asname or alias.name] = (alias.name, node.module)
    functions = {n.name: n for n in tree.body if isinstance(n, _DEFS)}
    reached: dict[str, tuple] = {}
    changed = True
    while changed:
        changed = False
        for name, function in functions.items():
            if name in reached:
                continue
            local = dict(top)
            for node in _own_walk(function):
                if isinstance(node, ast.ImportFrom) and node.module in kernels and not node.level:
                    for alias in node.names:
                        local[alias.asname or alias.name] = (alias.name, node.module)
            for node in _own_walk(function):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    hit = local.get(node.func.id) or reached.get(node.func.id)
                    if hit is not None and node.func.id != name:
                        reached[name] = hit
                        changed = True
                        break
    return reached


def review_jit_kernel_tests(results: list, paths: dict | None = None) -> list:
    """Report-only findings of a test file in a function whose tests all check a project-local CUDA
    JIT kernel (a function imported from a module of the run, outside tests, that hands a literal
    list of CUDA sources to a JIT loader and names no NPU): the test function itself when it calls
    the kernel (or a helper of the file that does), a helper (the CUDA reference it compares with:
    `from flashinfer.norm import rmsnorm`) every reference of which lies in such tests. Info with
    JIT_TEST, not a scope (the test runs there and fails). A test of portable code beside it, a
    kernel module with an NPU path, a module-level finding: kept. Whole run, after optests."""
    from .fp8tests import TEST_FILE
    from .modpaths import module_names, result_bytes
    from .moot import is_moot

    def candidate(finding) -> bool:
        return not finding.fixable and finding.severity != "info" and finding.cell is None and not is_moot(finding)

    targets = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and TEST_FILE.search(r.relpath)
               and any(candidate(f) for f in r.findings)]
    if not targets:
        return results
    paths = paths or {}
    npu = re.compile(_tooling_table().get("npu_words", r"(?!)"))
    kernels: dict[str, tuple] = {}  # dotted module -> (relpath, loader, keyword, line)
    for result in results:
        if not result.relpath.endswith(".py") or TEST_FILE.search(result.relpath) or BENCH_FILE.search(result.relpath):
            continue
        data = result_bytes(result, paths)
        if not data or not any(k.encode() in data for k in _JIT_KEYWORDS):
            continue
        text = data.decode("utf-8", "replace")
        if npu.search(text):
            continue
        tree = astcache.parse(data)
        loader = _jit_loader(tree) if tree is not None else None
        if loader is not None:
            for name in module_names(result.relpath):
                kernels.setdefault(name, (result.relpath, *loader))
    if not kernels:
        return results
    out = list(results)
    for i in targets:
        data = result_bytes(results[i], paths)
        if not data or not any(m.rpartition(".")[2].encode() in data for m in kernels):
            continue
        tree = astcache.parse(data[3:] if data.startswith(b"\xef\xbb\xbf") else data)
        if tree is None:
            continue
        reached = _reaching(tree, kernels)
        if not reached:
            continue
        tests = {n.name: n for n in tree.body if isinstance(n, _DEFS) and n.name.startswith("test")}
        span = {name: (min([n.lineno, *(d.lineno for d in n.decorator_list)]), n.end_lineno or n.lineno)
                for name, n in tests.items()}
        checking = {name for name in tests if name in reached}

        def subject(line: int) -> tuple | None:
            """The kernel the code at `line` is there to test, or None."""
            holder = next((n for n in tree.body if isinstance(n, (*_DEFS, ast.ClassDef))
                           and min([n.lineno, *(d.lineno for d in n.decorator_list)]) <= line
                           <= (n.end_lineno or n.lineno)), None)
            if holder is None or not isinstance(holder, _DEFS):
                # (module level: an unguarded import fails the whole module at collection, and the
                # folder's fold of such imports reads it; it stays as it is)
                return None
            if holder.name in tests:
                return reached.get(holder.name) if holder.name in checking else None
            uses = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == holder.name]
            users = [next((t for t, (a, b) in span.items() if a <= use <= b), None) for use in uses]
            if users and all(u in checking for u in users):
                return reached[users[0]]
            return None

        def lowered(finding):
            if not candidate(finding):
                return finding
            kernel = subject(finding.line)
            if kernel is None or any(subject(also[0]) is None for also in finding.also):
                return finding
            path, loader, keyword, line = kernels[kernel[1]]
            reason = JIT_TEST.format(name=kernel[0], module=kernel[1], loader=loader, keyword=keyword,
                                     path=path, line=line)
            return dataclasses.replace(finding, severity="info", message=f"{finding.message} ({reason})")

        out[i] = dataclasses.replace(results[i], findings=[lowered(f) for f in results[i].findings])
    return out
tooling_table = _tooling_table  # (testlabels27.py)
