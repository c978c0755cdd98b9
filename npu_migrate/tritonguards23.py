"""Triton guards read one step further (issue #16, round-23 audits BN#5, BN#13, BN#20, BN#30, BN#37, BL#2).

Per file (`review`, run.py after dominators22.py):

* **Triton's configuration after an early availability return** (BN#5). A function that says, at
  its top level, `if not HAS_TRITON: return` (any availability name, tritonguards.availability),
  then imports from Triton locally (`from triton import knobs`, `from triton.runtime import jit`,
  an autotuner patch's `from triton.runtime.errors import OutOfResources`), in a file that defines
  no Triton kernel and launches none: an NPU host without Triton returns before the import, and
  the import brings in Triton's runtime settings and classes, not a kernel. Its NPU910
  error ("CUDA Triton kernels do not run") becomes info naming the guard; with Triton-Ascend
  installed the import runs there, so the message asks to check that it provides those names
  (Triton-Ascend follows an older Triton, which may lack `triton.knobs`). Kept: a place before the
  guard or outside such a function, a module-level import, a file with a kernel or a launch, and
  a name of NVIDIA's toolchain (`from triton.runtime.errors import PTXASError`: Triton-Ascend need
  not have it, so the import may fail there even with Triton-Ascend installed).

Whole run (`review_run`, runplan.whole_run_passes after tritonflags21.py):

* **Kernels every launch of which follows a capability raise** (BN#13). A Triton-availability
  block (`if has_triton(): ... else: <stubs>`, guards15's "verify them there" info) whose kernels
  (`@triton.jit` / `autotune` / `heuristics` functions of the block) are launched (`kernel[grid](...)`)
  only in functions that first say, at their top level, `if not is_sm_at_least_100(): raise ...`
  (capgates.capability_test; testscopes.npu_truth: true on an NPU host, where `torch.version.cuda`
  is None): the launcher raises there before any kernel runs, with or without Triton-Ascend. The
  NPU910 takes the reason "in a branch an NPU host does not take" (moot.py names it a skipped
  scope) instead of "verify them there". Kept: a kernel launched anywhere else in the file (or
  read otherwise: handed on, stored), a kernel another module of the run names, a launch before
  the raise, a raise whose test is not true on an NPU host (`is_sm_at_least_100()` alone: false
  there, the raise never fires).

* **A Triton module its `try` importer uses only under an opt-in** (BN#20, `review_opt_in_importers`,
  after the above). tritonguards.review_importers makes the NPU910 of a module imported only as
  `try: from pkg.kernel import intmm_triton / except ImportError: intmm_triton = None` info; where
  that one importer reads the name only inside `if intmm_triton is not None and FLAG:` blocks, FLAG
  a module-level environment opt-in off by default (`bool(int(os.getenv("X", 0)))`, `os.environ.get("X",
  "0") == "1"`), the message says "opt-in" and names the flag and the variable. Kept as it was: a
  default that is on, `bool(os.getenv("X"))` (any value turns it on), a read outside such a gate,
  several importers.
* **A module made only of Triton device functions** (BL#2, `fold_kernel_helpers`, after
  tritonmods20.fold_device_helpers). That fold takes a helper reported as an unguarded Triton
  import; here the helper imports Triton through the project's re-export (`from pkg.triton_utils
  import tl, triton`), so its NPU910 is the `@triton.jit` error itself. A module whose top level
  holds only Triton-decorated functions and launches none of them, whose every library importer
  reports its own NPU910 error and calls the functions only inside its own kernels, is folded the
  same way (tritonmods20's DEVICE_HELPERS note on each importer's finding). Kept: a helper with host
  code or a launch, an importer that reads a helper outside its kernels (hands it on), an importer
  without its own error.

* **Guarded kernels that only feed an FP8 error** (BN#37, `fold_into_fp8_errors`, after
  `fold_kernel_helpers`). A module whose NPU910 is guards15's "verify them there" info (`if
  has_triton(): ... else: <stubs>`), whose public host functions of the block every non-test module
  of the run reads only inside functions holding a place of that module's own NPU913 error (the
  backward of an FP8 grouped GEMM calling `torch._scaled_grouped_mm`; a package `__init__` that
  only re-exports them aside): the kernels compute that FP8 path's scales, and the FP8 op has no
  NPU counterpart. The NPU910 is folded into each such NPU913, whose message names the module, its
  line, the functions and their callers. Kept: a reader anywhere else (a plain path an NPU host
  with Triton-Ascend runs), a module without its NPU913 error there.

Also from tritonflags21.py (`flag_predicate_callers`, BN#30): the readers of a kernel block that
other modules call only under `if <predicate>(x):`, where the predicate is a function of the kernel
module whose every return requires the availability flag (`return _TRITON_AVAILABLE and
x.device.type == "cuda"`): the launch is not reached without Triton, so tritonflags21's info stands.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache
from .findings import Finding

CONFIG_AFTER_RETURN = (
    "no kernel here: imports Triton's runtime names ({names}) inside {functions}, after "
    "`{guard}` ({lines}): an NPU host without Triton returns there first; with Triton-Ascend "
    "installed the import runs there: check that it provides these names")
RAISE_FIRST = (
    "in a branch an NPU host does not take: this module's Triton kernels ({kernels}) run only from "
    "launches after `{test}` raises in `{function}` (line {line}), which is true on an NPU host, so the "
    "launcher raises there first, with or without Triton-Ascend")
PREDICATE_GATED = ("other modules call {names} only under `{predicate}(...)`, which requires `{flag}`: "
                   "without Triton they take their other path")


def _open(finding: Finding) -> bool:
    return finding.code == "NPU910" and not finding.fixable and finding.cell is None


def _places(finding: Finding) -> list[int]:
    return [finding.line, *(line for line, _c, _s in finding.also)]


def _segment(text: str, node: ast.AST) -> str:
    return " ".join((ast.get_source_segment(text, node) or ast.unparse(node)).split())


def _is_triton(module: str) -> bool:
    return module == "triton" or module.startswith("triton.")


def _kernel_decorated(node: ast.AST) -> bool:
    from .tritonguards import KERNEL_DECORATOR

    for decorator in getattr(node, "decorator_list", ()):
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = astcache.dotted(target) or ""
        if KERNEL_DECORATOR.search(name) and ("triton" in name or "." not in name):
            return True
    return False


# ------------------------------------------------------------------ BN#5: runtime names after an early return

# (a name of NVIDIA's toolchain, `PTXASError`: Triton-Ascend need not have it; the error stands, test_h91)
_NVIDIA_NAME = re.compile(r"(?i)ptx|cuda|nvidia|cubin|nvvm")


def _early_exit(function: ast.AST) -> Optional[tuple[ast.If, int]]:
    """(the `if not FLAG: return` statement, the index after it) at the top level of a function."""
    from .tritonguards import availability

    for k, stmt in enumerate(function.body):
        if isinstance(stmt, ast.If) and not stmt.orelse and isinstance(stmt.test, ast.UnaryOp) \
                and isinstance(stmt.test.op, ast.Not) and availability(stmt.test.operand) \
                and stmt.body and isinstance(stmt.body[-1], ast.Return):
            return stmt, k + 1
    return None


def _launches(tree: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript) and isinstance(n.func.value, ast.Name)
               and "kernel" in n.func.value.id.lower() for n in astcache.walk(tree))


def review(findings: list[Finding], text: str) -> list[Finding]:
    """The file's NPU910 errors about a Triton configuration import after an early availability
    return, as info (see the module's doc)."""
    if "triton" not in text or "return" not in text:
        return findings
    targets = [f for f in findings if _open(f) and f.severity != "info"]
    if not targets:
        return findings
    tree = astcache.parse(text.encode("utf-8"))
    if tree is None:
        return findings
    if any(_kernel_decorated(n) for n in astcache.walk(tree)
           if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))) or _launches(tree):
        return findings
    # every Triton import: function-local, after its function's early return
    guarded: dict[int, tuple[ast.AST, ast.If, list[str]]] = {}
    for node in astcache.walk(tree):
        if isinstance(node, ast.Import) and any(_is_triton(a.name) for a in node.names) \
                or isinstance(node, ast.ImportFrom) and not node.level and _is_triton(node.module or ""):
            guarded[node.lineno] = None  # (unless found below)
    if not guarded:
        return findings
    for node in astcache.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        exit_ = _early_exit(node)
        if exit_ is None:
            continue
        stmt, after = exit_
        for later in node.body[after:]:
            for inner in ast.walk(later):
                if inner.__class__ in (ast.Import, ast.ImportFrom) and getattr(inner, "lineno", 0) in guarded:
                    if isinstance(inner, ast.ImportFrom):
                        names = [f"`{inner.module}.{a.name}`" for a in inner.names]
                    else:
                        names = [f"`{a.name}`" for a in inner.names]
                    guarded[inner.lineno] = (node, stmt, names)
    out = []
    for finding in findings:
        if finding in targets:
            places = _places(finding)
            found = [guarded.get(p) for p in places]
            if found and all(found) and not any(_NVIDIA_NAME.search(n) for g in found for n in g[2]):
                names = list(dict.fromkeys(n for g in found for n in g[2]))
                functions = list(dict.fromkeys(f"`{g[0].name}`" for g in found))
                lines = sorted({g[1].lineno for g in found})
                why = CONFIG_AFTER_RETURN.format(
                    names=", ".join(names[:4]), functions=" and ".join(functions[:3]),
                    guard=f"if {_segment(text, found[0][1].test)}: return",
                    lines=f"line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}")
                finding = dataclasses.replace(finding, severity="info", message=f"{finding.message} ({why})")
        out.append(finding)
    return out


# ------------------------------------------------------------------ BN#13: kernels whose launcher raises first

def _raise_first(function: ast.AST, launch_line: int):
    """The top-level `if <true on an NPU host>: raise` of `function` before the statement holding
    `launch_line`, or None."""
    from .capgates import capability_test
    from .testscopes import npu_truth

    for stmt in function.body:
        if stmt.lineno <= launch_line <= (stmt.end_lineno or stmt.lineno):
            return None
        if isinstance(stmt, ast.If) and not stmt.orelse and stmt.body and isinstance(stmt.body[-1], ast.Raise) \
                and stmt.body[-1].exc is not None and capability_test(stmt.test) and npu_truth(stmt.test) is True:
            return stmt
    return None


def _raised_kernels(tree: ast.Module, text: str, places: list[int]) -> Optional[tuple[list[str], str]]:
    """(the kernels, the reason) where every place of a finding lies in a module-level Triton block
    whose kernels are launched only after a capability raise true on an NPU host."""
    from .tritonguards import tests_triton

    blocks = [s for s in tree.body if isinstance(s, ast.If) and tests_triton(s.test) and s.body]
    spans = [(s.body[0].lineno, s.body[-1].end_lineno or s.body[-1].lineno) for s in blocks]
    if not spans or not all(any(a <= p <= b for a, b in spans) for p in places):
        return None
    kernels = {n.name for s in blocks for n in s.body
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and _kernel_decorated(n)}
    if not kernels:
        return None
    functions = [n for n in astcache.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    launch_values: set[int] = set()
    raises = []
    for node in astcache.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in kernels:
            holder = [f for f in functions if f.lineno <= node.lineno <= (f.end_lineno or f.lineno)
                      and f.name not in kernels]
            if not holder:
                return None
            function = max(holder, key=lambda f: f.lineno)  # (the innermost)
            stmt = _raise_first(function, node.lineno)
            if stmt is None:
                return None
            raises.append((function, stmt))
            launch_values.add(id(node.func.value))
    if not raises:
        return None
    bodies = [(n.lineno, n.end_lineno or n.lineno) for n in functions if n.name in kernels]
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name) and node.id in kernels and isinstance(node.ctx, ast.Load) \
                and id(node) not in launch_values and not any(a <= node.lineno <= b for a, b in bodies):
            return None  # (handed on, stored, launched another way: not followed here; a device
            # function called inside a kernel runs only where that kernel does)
    function, stmt = raises[0]
    shown = ", ".join(f"`{k}`" for k in sorted(kernels)[:4])
    return sorted(kernels), RAISE_FIRST.format(kernels=shown, test=f"if {_segment(text, stmt.test)}",
                                               function=function.name, line=stmt.lineno)


def _without_verify_note(message: str) -> str:
    """The message without guards15's "verify them there" note (it is no longer true)."""
    at = message.find(" (guarded by the module-level Triton-availability test ")
    end = message.find("verify them there)", at)
    if at < 0 or end < 0:
        return message
    return message[:at] + message[end + len("verify them there)"):]


def review_run(results: list, paths: dict) -> list:
    """The results, with the NPU910 of kernels whose every launch follows a capability raise true
    on an NPU host lowered to info with moot's "in a branch an NPU host does not take"."""
    from .modpaths import RunTexts

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py")
                  and any(_open(f) for f in r.findings)]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    out = list(results)
    for i in candidates:
        data = text_of(i) or b""
        if b"raise" not in data or b"[" not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        text = data.decode("utf-8", "replace")
        findings, changed = [], False
        for finding in out[i].findings:
            if _open(finding):
                found = _raised_kernels(tree, text, _places(finding))
                if found is not None and not _named_elsewhere(results, text_of, i, found[0]):
                    finding = dataclasses.replace(finding, severity="info",
                                                  message=f"{_without_verify_note(finding.message)} ({found[1]})")
                    changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(out[i], findings=findings)
    return out


def _named_elsewhere(results: list, text_of, i: int, names: list[str]) -> bool:
    """Whether another module of the run refers to one of `names` in code (a name, an attribute,
    an import's name; a docstring that mentions one does not count); a file naming one that does
    not parse counts."""
    wanted = set(names)
    pattern = re.compile(rb"\b(" + b"|".join(re.escape(n.encode()) for n in names) + rb")\b")
    for j, result in enumerate(results):
        if j == i or not result.relpath.endswith(".py"):
            continue
        data = text_of(j) or b""
        if not pattern.search(data):
            continue
        tree = astcache.parse(data)
        if tree is None:
            return True
        for node in astcache.walk(tree):
            if isinstance(node, ast.Name) and node.id in wanted or isinstance(node, ast.Attribute) and node.attr in wanted \
                    or isinstance(node, (ast.Import, ast.ImportFrom)) and any(a.name.rpartition(".")[2] in wanted
                                                                              for a in node.names):
                return True
    return False


# ------------------------------------------------------------------ BN#30: readers called only under a flag predicate

def _predicates(tree: ast.Module, flag: str) -> set[str]:
    """The module's top-level functions whose every return requires `flag`: a single `return FLAG
    and ...` (after a docstring), or `if not FLAG: return False` first."""
    out = set()
    for stmt in tree.body:
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = [s for s in stmt.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if not body:
            continue
        first = body[0]
        if len(body) == 1 and isinstance(first, ast.Return) and isinstance(first.value, ast.BoolOp) \
                and isinstance(first.value.op, ast.And) and any(isinstance(v, ast.Name) and v.id == flag
                                                                for v in first.value.values):
            out.add(stmt.name)
        elif isinstance(first, ast.If) and not first.orelse and isinstance(first.test, ast.UnaryOp) \
                and isinstance(first.test.op, ast.Not) and isinstance(first.test.operand, ast.Name) \
                and first.test.operand.id == flag and len(first.body) == 1 and isinstance(first.body[0], ast.Return) \
                and isinstance(first.body[0].value, ast.Constant) and first.body[0].value.value is False:
            out.add(stmt.name)
    return out


def flag_predicate_callers(run, i: int, tree: ast.Module, flag: str, reaching: set) -> Optional[str]:
    """For tritonflags21: where every reference another module of the run makes to a name in
    `reaching` (module i's functions and classes that read its kernels outside their block) lies in
    the body of an `if` whose test calls a predicate of module i requiring `flag`, the words to say
    so (PREDICATE_GATED); None otherwise (a reference elsewhere, in a string that is no import, in a
    file that does not parse)."""
    predicates = _predicates(tree, flag) - set(reaching)
    if not predicates or not reaching:
        return None
    pattern = re.compile(rb"\b(" + b"|".join(re.escape(n.encode()) for n in sorted(reaching)) + rb")\b")
    used: set[str] = set()
    for j, result in enumerate(run.results):
        if j == i or not result.relpath.endswith(".py"):
            continue
        data = run.text_of(j) or b""
        if not pattern.search(data):
            continue
        other = run.tree(j)
        if other is None:
            return None
        gated: list[tuple[int, int]] = []
        for node in astcache.walk(other):
            if isinstance(node, ast.If) and node.body and any(
                    isinstance(c, ast.Call) and (c.func.id if isinstance(c.func, ast.Name) else
                                                 c.func.attr if isinstance(c.func, ast.Attribute) else "") in predicates
                    for c in ast.walk(node.test)):
                gated.append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno))
                used.update(c.func.id if isinstance(c.func, ast.Name) else c.func.attr
                            for c in ast.walk(node.test) if isinstance(c, ast.Call)
                            and isinstance(c.func, (ast.Name, ast.Attribute))
                            and (c.func.id if isinstance(c.func, ast.Name) else c.func.attr) in predicates)
        for node in astcache.walk(other):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if name in reaching and not any(a <= node.lineno <= b for a, b in gated):
                return None
        # (a mention that is no reference: an import's alias, a docstring; imports bind, they call nothing)
    if not used:
        return None
    names = ", ".join(f"`{n}`" for n in sorted(reaching)[:4])
    return PREDICATE_GATED.format(names=names, predicate=sorted(used)[0], flag=flag)


# ------------------------------------------------------------------ BL#2: a module of device functions only

def _kernel_error(finding: Finding) -> bool:
    return _open(finding) and finding.severity == "error"


def _launches_nothing(data: bytes) -> bool:
    """Whether a module launches none of its own functions (`f[grid](...)`) and defines only
    Triton-decorated functions at its top level (no host code that could launch them later)."""
    tree = astcache.parse(data)
    if tree is None:
        return False
    functions = [s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    if not functions or not all(_kernel_decorated(s) for s in functions):
        return False
    own = {s.name for s in functions}
    return not any(isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript) and isinstance(n.func.value, ast.Name)
                   and n.func.value.id in own for n in astcache.walk(tree))


def fold_kernel_helpers(results: list, paths: dict) -> list:
    """tritonmods20.fold_device_helpers for modules made only of `@triton.jit` device functions whose
    NPU910 is the kernel error itself (Triton imported through a project's re-export, `from
    pkg.triton_utils import tl, triton`, not reported as an unguarded import), folded into their
    importers' own NPU910 errors; the same conditions on the importers (round-23 audit BL#2)."""
    from .tritonmods20 import fold_device_helpers

    return fold_device_helpers(results, paths, is_open=_kernel_error, helper_ok=_launches_nothing)


# ------------------------------------------------------------------ BN#20: a guarded Triton module used only under an opt-in

OPT_IN_IMPORTER = ("opt-in: {importer} uses `{name}` only under `{flag}` (line {line}), read from the environment "
                   "variable `{variable}`, off by default: an NPU host runs these kernels only where a user "
                   "enables it; verify them on Triton-Ascend if it is enabled")
_TRY_SITE = re.compile(r"imported only inside `try`/`except ImportError`, whose fallback runs where Triton is missing: "
                       r"([\w./\-]+\.py):(\d+) in `try`\)$")
_ENV_READS = frozenset(("os.getenv", "os.environ.get", "getenv", "environ.get"))
_TRUTHY = frozenset(("1", "true", "True", "TRUE", "yes", "on"))


def _env_opt_in(value: ast.AST) -> Optional[str]:
    """The variable of a module-level value that is True only where an environment variable is set
    to a true value: `bool(int(os.getenv("X", 0)))`, `os.environ.get("X", "0") == "1"`, `os.getenv("X",
    "").lower() in ("1", "true")`; None otherwise (a default that is on, a negation)."""
    while isinstance(value, ast.Call) and (astcache.dotted(value.func) or "") in ("bool", "int", "str") \
            and len(value.args) == 1 and not value.keywords:
        value = value.args[0]
    compared = None
    if isinstance(value, ast.Compare) and len(value.ops) == 1 and isinstance(value.ops[0], (ast.Eq, ast.In)):
        right = value.comparators[0]
        items = right.elts if isinstance(right, (ast.Tuple, ast.List, ast.Set)) else [right]
        if not items or not all(isinstance(e, ast.Constant) and str(e.value) in _TRUTHY for e in items):
            return None
        compared, value = True, value.left
        # (`.strip().lower()` chained too: vLLM's VLLM_TRITON_FORCE_FIRST_CONFIG, round-28 audit CA#25, h164)
        while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
                and value.func.attr in ("lower", "strip") and not value.args:
            value = value.func.value
    if not (isinstance(value, ast.Call) and (astcache.dotted(value.func) or "") in _ENV_READS and value.args
            and isinstance(value.args[0], ast.Constant) and isinstance(value.args[0].value, str)):
        return None
    default = value.args[1] if len(value.args) > 1 else None
    if default is not None and not (isinstance(default, ast.Constant) and default.value in (0, "0", "", None, False)):
        return None
    if default is None and not compared:
        return None  # (`bool(os.getenv("X"))`: any value, "0" too, turns it on; not read here)
    return value.args[0].value


env_opt_in = _env_opt_in  # (public: registryoptin28.py reads a project's envs.py table with it)


def _opt_in_uses(tree: ast.Module, name: str) -> Optional[tuple[str, int, str]]:
    """(flag, its line, variable) where every read of `name` in the module lies in the body of an
    `if` whose test is a conjunction with a module-level environment opt-in flag; else None."""
    flags: dict[str, tuple[int, str]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            variable = _env_opt_in(stmt.value)
            if variable is not None:
                flags[stmt.targets[0].id] = (stmt.lineno, variable)
    if not flags:
        return None
    gated: list[tuple[int, int, str]] = []
    in_tests: dict[int, str] = {}  # (reads in a gate's own test: `if name is not None and FLAG:`)
    for node in astcache.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.And):
            used = [v.id for v in node.test.values if isinstance(v, ast.Name) and v.id in flags]
            if used and node.body:
                gated.append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno, used[0]))
                in_tests.update({id(n): used[0] for v in node.test.values if isinstance(v, ast.Compare)
                                 for n in ast.walk(v)})
    found = None
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load) and id(node) in in_tests:
            found = found or in_tests[id(node)]  # (the module's ops registered at import, called under the gate)
        elif isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
            inside = [g for g in gated if g[0] <= node.lineno <= g[1]]
            if not inside:
                return None
            found = found or inside[0][2]
    if found is None:
        return None
    return found, flags[found][0], flags[found][1]


def review_opt_in_importers(results: list, paths: dict) -> list:
    """The NPU910 info of a Triton module imported only in a `try` (tritonguards.review_importers)
    whose importer uses it only under an environment opt-in: the message says "opt-in" and names
    the flag (round-23 audit BN#20). One importer, shown in the message; severity unchanged."""
    from .modpaths import RunTexts

    by_path = {r.relpath: i for i, r in enumerate(results)}
    out = list(results)
    text_of = None
    for i, result in enumerate(results):
        findings, changed = list(result.findings), False
        for k, finding in enumerate(findings):
            if not (_open(finding) and finding.severity == "info"):
                continue
            match = _TRY_SITE.search(finding.message)
            if match is None or match.group(1) not in by_path:
                continue
            j, line = by_path[match.group(1)], int(match.group(2))
            text_of = text_of or RunTexts(results, paths)
            tree = astcache.parse(text_of(j) or b"")
            if tree is None:
                continue
            statement = next((s for s in astcache.walk(tree) if isinstance(s, ast.ImportFrom) and s.lineno == line), None)
            if statement is None or len(statement.names) != 1:
                continue
            name = statement.names[0].asname or statement.names[0].name
            found = _opt_in_uses(tree, name)
            if found is None:
                continue
            note = OPT_IN_IMPORTER.format(importer=match.group(1), name=name, flag=found[0], line=found[1],
                                          variable=found[2])
            findings[k] = dataclasses.replace(finding, message=f"{finding.message[:-1]}; {note})")
            changed = True
        if changed:
            out[i] = dataclasses.replace(result, findings=findings)
    return out


# ------------------------------------------------------------------ BN#37: guarded kernels that only feed an FP8 error

FEEDS_FP8 = ("also the Triton kernels of {path} (its NPU910 at line {line}, guarded by `{test}`): {names}, called "
             "only here, in {functions}, where they compute this FP8 path's scales and casts; the FP8 op this "
             "reports has no NPU counterpart, so they are part of the same port")
_GATED_NOTE = " (guarded by the module-level Triton-availability test "


def _fp8_error(finding: Finding) -> bool:
    return finding.code == "NPU913" and not finding.fixable and finding.cell is None and finding.severity == "error"


def _public_block_functions(tree: ast.Module) -> tuple[set, str]:
    """The public host functions of the module-level Triton-availability blocks that have an
    `else:` (the names exist either way), and the first block's test."""
    from .tritonguards import tests_triton

    names, test = set(), ""
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and stmt.orelse and tests_triton(stmt.test):
            test = test or ast.unparse(stmt.test)
            names |= {n.name for n in stmt.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                      and not n.name.startswith("_") and not _kernel_decorated(n)}
    return names, test


def fold_into_fp8_errors(results: list, paths: dict) -> list:
    """A guarded Triton module's NPU910 info ("verify them there") folded into the NPU913 errors of
    the library functions that alone call its public functions (round-23 audit BN#37): where every
    reference a non-test module of the run makes to those names (a package `__init__` re-exporting
    them aside) lies inside a function holding a place of that module's own NPU913 error (a scaled
    grouped matmul), the kernels only feed an FP8 path reported as failing on an NPU host. Kept: a
    reference anywhere else (a test aside), a module with no NPU913 error there, a module read by
    name in a string."""
    from .importgates import is_test
    from .modpaths import RunTexts

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and not is_test(r.relpath)
                  and any(_open(f) and f.severity == "info" and _GATED_NOTE in f.message and "verify them there" in f.message
                          for f in r.findings)]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    out = list(results)
    for i in candidates:
        tree = astcache.parse(text_of(i) or b"")
        if tree is None:
            continue
        names, test = _public_block_functions(tree)
        if not names:
            continue
        pattern = re.compile(rb"\b(" + b"|".join(re.escape(n.encode()) for n in sorted(names)) + rb")\b")
        plan: list[tuple[int, int, list[str], list[str]]] = []
        for j, result in enumerate(results):
            if j == i or not result.relpath.endswith(".py") or is_test(result.relpath):
                continue
            data = text_of(j) or b""
            if not pattern.search(data):
                continue
            other = astcache.parse(data)
            if other is None:
                plan = []
                break
            reads = [n for n in astcache.walk(other) if (isinstance(n, ast.Name) and n.id in names)
                     or (isinstance(n, ast.Attribute) and n.attr in names)]
            if not reads:
                continue  # (imports only: a package `__init__` re-exporting them)
            errors = [k for k, f in enumerate(out[j].findings) if _fp8_error(f)]
            functions = [n for n in astcache.walk(other) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            holders = []
            for read in reads:
                around = [f for f in functions if f.lineno <= read.lineno <= (f.end_lineno or f.lineno)
                          and any(f.lineno <= p <= (f.end_lineno or f.lineno) for k in errors for p in _places(out[j].findings[k]))]
                if not around:
                    plan = []
                    break
                holders.append(min(around, key=lambda f: (f.end_lineno or f.lineno) - f.lineno))
            else:
                used = sorted({n.id if isinstance(n, ast.Name) else n.attr for n in reads})
                shown = sorted({f"`{h.name}`" for h in holders})
                plan.append((j, errors[0], used, shown))
                continue
            break
        if not plan:
            continue
        mine = [f for f in out[i].findings if _open(f) and f.severity == "info" and _GATED_NOTE in f.message]
        for j, k, used, shown in plan:
            note = FEEDS_FP8.format(path=results[i].relpath, line=mine[0].line, test=" ".join(test.split()),
                                    names=", ".join(f"`{n}`" for n in used[:4]), functions=" and ".join(shown[:3]))
            findings = list(out[j].findings)
            findings[k] = dataclasses.replace(findings[k], message=f"{findings[k].message} ({note})")
            out[j] = dataclasses.replace(out[j], findings=findings)
        out[i] = dataclasses.replace(out[i], findings=[f for f in out[i].findings if not any(f is m for m in mine)])
    return out


kernel_decorated = _kernel_decorated  # (public: tritonhelpers34.py)
kernel_error = _kernel_error
