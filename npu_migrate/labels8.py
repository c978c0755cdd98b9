"""Labels, look-alike names, dead helpers and self-exiting shell probes (issue #16, round-16 audits).

- a "cuda" literal compared with a command-line option's value (`args.baseline == "cuda"`) where
  the file's `add_argument("--baseline", choices=["autotune", "cuda"])` lists it among options
  that are neither devices nor backends, the option is not named like a device, and no read of
  the option in the file hands it on (comparisons with strings, records: a dict value, an
  f-string, `print`): the name of a choice (a baseline, a mode), not a device (AR#7). Information with the reason (OPTION_LABEL, moot.NO_WORK). A device
  option (`--device`, `choices=["cpu", "cuda"]`) keeps its rewrite or finding.
- a Triton decorator whose head name the enclosing function binds to the result of a call that
  imports nothing (`triton = TritonPlaceholder()` then `@triton.jit`): a local object, not the triton package
  (AS#2); `local_binding` tells the sweep (Sweep._triton_decorator), and the function is swept
  as plain code. A module-level `import triton` kernel stays NPU910.
- an SDPA backend switch (NPU405) inside a module-level function that no code of the run
  references: named nowhere in its file but its `def` (comments do not count) and in no other
  Python file of the run (AS#29: `sdp_kernel_context()` called only in commented-out code).
  Information (npugates.UNUSED_HELPER, "in a helper ...": a named scope). A called helper keeps
  its warning. Called once from runplan.whole_run_passes; a byte pre-test before any parse.
- a shell script that exits 0 at its top level when a CUDA variable is unset (`if [ -z
  "${CUDA_VERSION:-}" ]; then exit 0; fi`, `[ -z "$CUDA_HOME" ] && exit 0`): an NPU host, where
  the variable is unset, leaves the script there; the probe's own CUDA references and everything
  after it are information (EXIT_PROBE, moot.PHRASES: a named scope), AR#10. A script that uses
  CUDA without such a probe keeps its findings. Called from textfiles.scan_text_file for shell
  files.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Any, Optional

from . import astcache

Sweep = Any  # sweep.Sweep

# (moot.NO_WORK) a choice's name compared with a command-line option, not a device
OPTION_LABEL = "a command-line option's label, not a device: "
# (moot.PHRASES) the script exits cleanly before the lines that use CUDA on an NPU host
EXIT_PROBE = "in a script that exits cleanly where the CUDA variable is unset"

# options that make a choice list a device or backend choice after all
_DEVICE_OPTIONS = frozenset({"cpu", "cuda", "npu", "xpu", "mps", "hpu", "meta", "xla", "gpu", "auto", "tpu",
                             "hip", "rocm", "musa", "mlu", "gloo", "mpi", "hccl", "nccl", "ucc", "xccl"})
_DEVICE_WORD = re.compile(r"(?i)dev|accel|dist|process_group|placement|backend")


# ------------------------------------------------------------------ "cuda" choices of an option (AR#7)
def mark(sweep: Sweep, node) -> None:
    """Called by the sweep for each node it enters: a "cuda" literal compared with a labelling
    option becomes information (sweep.label_info)."""
    if type(node).__name__ != "SimpleString":
        return
    found = _found(sweep)
    if found:
        reason = found.get(tuple(sweep.m.position(node)))
        if reason:
            sweep.label_info.setdefault(id(node), reason)


def _found(sweep: Sweep) -> dict:
    found = getattr(sweep, "_labels8_found", None)
    if found is not None:
        return found
    found = {}
    text = sweep.m.file_text()
    if "choices" in text and "add_argument" in text:
        tree = sweep.m._ast()
        if tree is not None:
            found = option_labels(tree)
    sweep._labels8_found = found
    return found


def _option_dest(call: ast.Call) -> Optional[str]:
    for kw in call.keywords:
        if kw.arg == "dest" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
            return kw.value.value
    longs = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
             and a.value.startswith("--")]
    return longs[0][2:].replace("-", "_") if longs else None


def _label_options(tree: ast.AST) -> dict[str, tuple[int, list[str]]]:
    """{dest: (line, choices)} of the options whose `choices` list "cuda" among non-device names."""
    options = {}
    for node in astcache.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        choices = next((kw.value for kw in node.keywords if kw.arg == "choices"), None)
        if not isinstance(choices, (ast.List, ast.Tuple, ast.Set)):
            continue
        values = [e.value for e in choices.elts if isinstance(e, ast.Constant)]
        if len(values) != len(choices.elts) or not all(isinstance(v, str) for v in values) or "cuda" not in values:
            continue
        others = [v for v in values if v != "cuda"]
        dest = _option_dest(node)
        if not others or any(v.lower().split(":")[0] in _DEVICE_OPTIONS for v in others) or not dest \
                or _DEVICE_WORD.search(dest):
            continue
        options[dest] = (node.lineno, values)
    return options


def option_labels(tree: ast.AST) -> dict:
    """{(line, column): reason} of the "cuda" literals compared with a labelling option's value."""
    options = _label_options(tree)
    if not options:
        return {}
    defaults = _option_defaults(tree, options)
    parents = astcache.parents(tree)
    compared: dict[str, list[ast.Constant]] = {}
    other_use: set[str] = set()
    functions = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))} \
        if isinstance(tree, ast.Module) else {}
    for node in astcache.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr in options and isinstance(node.ctx, ast.Load)):
            continue
        parent = parents.get(id(node))
        if not isinstance(parent, ast.Compare):
            handed = _handed_to_label(node, parents, functions)
            if handed is not None:
                compared.setdefault(node.attr, []).extend(handed)
            elif _device_use(node, parents):
                other_use.add(node.attr)
            else:
                compared.setdefault(node.attr, [])
            continue
        operands = [parent.left, *parent.comparators]
        if not all(isinstance(o, ast.Constant) and isinstance(o.value, str) for o in operands if o is not node) \
                or not all(isinstance(op, (ast.Eq, ast.NotEq)) for op in parent.ops):
            other_use.add(node.attr)
            continue
        compared.setdefault(node.attr, []).extend(
            o for o in operands if isinstance(o, ast.Constant) and o.value == "cuda")
    found = {}
    for dest, literals in compared.items():
        if dest in other_use:
            continue
        line, values = options[dest]
        # (the option's own `default="cuda"`: the same label, h155 FB#32)
        literals = [*literals, *defaults.get(dest, ())]
        for literal in literals:
            found[(literal.lineno, literal.col_offset + 1)] = (
                f"{OPTION_LABEL}the option `{dest}` (line {line}) chooses among {values}, and the file "
                "compares its value with names and never hands it on as a device")
    return found


_DISPLAY = frozenset({"print", "debug", "info", "warning", "warn", "error", "log", "echo", "str", "format",
                      "write", "dumps", "dump", "append"})


def _option_defaults(tree: ast.AST, options: dict) -> dict:
    """{dest: ["cuda" default constants]} of the labelling options' `add_argument` calls."""
    out: dict = {}
    for node in astcache.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument" \
                and (node.lineno, _option_dest(node)) in {(line, dest) for dest, (line, _v) in options.items()}:
            out[_option_dest(node)] = [kw.value for kw in node.keywords if kw.arg == "default"
                                       and isinstance(kw.value, ast.Constant) and kw.value.value == "cuda"]
    return out


def _handed_to_label(node: ast.Attribute, parents: dict, functions: dict) -> Optional[list]:
    """The "cuda" constants the parameter compares with, where the option's value is handed on as
    the keyword of its own name (`run(implementation=args.implementation)`) to a module-level
    function of the file whose parameter of that name is only compared with strings or shown
    (an f-string, `print`); None otherwise."""
    keyword = parents.get(id(node))
    call = parents.get(id(keyword)) if isinstance(keyword, ast.keyword) else None
    if not (isinstance(call, ast.Call) and keyword.arg == node.attr and isinstance(call.func, ast.Name)):
        return None
    function = functions.get(call.func.id)
    if function is None or node.attr not in {a.arg for a in (*function.args.args, *function.args.kwonlyargs)}:
        return None
    literals: list = []
    for read in ast.walk(function):
        if not (isinstance(read, ast.Name) and read.id == node.attr):
            continue
        if not isinstance(read.ctx, ast.Load):
            return None  # (the parameter bound again)
        parent = parents.get(id(read))
        if isinstance(parent, ast.Compare):
            operands = [o for o in (parent.left, *parent.comparators) if o is not read]
            if not all(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in parent.ops) or not all(
                    _strings(o) for o in operands):
                return None
            literals.extend(c for o in operands for c in ast.walk(o) if isinstance(c, ast.Constant) and c.value == "cuda")
        elif _device_use(read, parents):
            return None
    return literals


def _strings(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and all(_strings(e) for e in node.elts)


def _device_use(node: ast.AST, parents: dict) -> bool:
    """Whether a read of the option's value may reach a device: handed to a call other than a
    display or record (`print`, `json.dumps`), as a keyword named like a device, or bound to a
    name; kept in a dict, a conditional expression or an f-string it is a record (one level up
    through an IfExp or a dict value)."""
    child, parent = node, parents.get(id(node))
    while isinstance(parent, (ast.IfExp, ast.FormattedValue, ast.JoinedStr)) or (
            isinstance(parent, ast.Dict) and child in parent.values):
        if isinstance(parent, ast.IfExp) and parent.test is child:
            return False  # (a condition on the label)
        child, parent = parent, parents.get(id(parent))
    if isinstance(child, (ast.Dict, ast.JoinedStr)):
        return False
    if isinstance(parent, ast.keyword):
        call = parents.get(id(parent))
        return bool(_DEVICE_WORD.search(parent.arg or "")) or not _display(call)
    if isinstance(parent, ast.Call):
        return child is parent.func or not _display(parent)
    if isinstance(parent, ast.Attribute) and parent.value is child:
        return True  # (`args.baseline.split(...)`: read further)
    return isinstance(parent, (ast.Assign, ast.AnnAssign, ast.NamedExpr, ast.Return, ast.Subscript, ast.Starred,
                               ast.List, ast.Tuple, ast.Set, ast.BinOp, ast.Lambda, ast.Yield, ast.Await))


def _display(call: Optional[ast.AST]) -> bool:
    if not isinstance(call, ast.Call):
        return False
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in _DISPLAY


# ------------------------------------------------------------------ a local object named `triton` (AS#2)
def local_binding(functions: list, head: str) -> bool:
    """Whether one of the enclosing functions (libcst FunctionDefs, innermost last) binds `head` by
    a plain assignment in its own body (`triton = TritonPlaceholder()`): a local object, not a module."""
    for function in reversed(functions):
        body = getattr(function.body, "body", ())
        for statement in body:
            for small in getattr(statement, "body", ()) if type(statement).__name__ == "SimpleStatementLine" else ():
                if type(small).__name__ != "Assign":
                    continue
                value = small.value
                if type(value).__name__ != "Call" or "import" in _callee(value.func):
                    continue  # (`triton = importlib.import_module("triton")`, `triton = _triton`: the package)
                if any(type(t.target).__name__ == "Name" and t.target.value == head for t in small.targets):
                    return True
    return False


def _callee(func) -> str:
    parts = []
    while type(func).__name__ == "Attribute":
        parts.append(func.attr.value)
        func = func.value
    if type(func).__name__ == "Name":
        parts.append(func.value)
    return ".".join(reversed(parts))


# ------------------------------------------------------------------ an SDPA switch in a helper nothing references (AS#29)
_SWITCH_CODES = frozenset({"NPU405"})


def _function_at(tree: ast.Module, lines: list[int]) -> Optional[ast.AST]:
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and all(
                stmt.lineno < line <= (stmt.end_lineno or stmt.lineno) for line in lines):
            return None if stmt.decorator_list else stmt
    return None


_TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")


def _not_api(relpath: str, name: str) -> bool:
    """A function no user of the project calls from outside: a private one (`_helper`), one in a
    test file, or one in a private package or module (`torchao/_models/...`). A public function of
    a library is its API even where the run never calls it (npugates.review_unused_helpers' rule)."""
    parts = relpath.split("/")
    return name.startswith("_") or bool(_TEST_FILE.search(relpath)) or any(
        p.startswith("_") and p != "__init__.py" for p in parts)


def review_unreferenced_switches(results: list, paths: dict) -> list:
    """NPU405 warnings inside a module-level function no code of the run references, and no user
    either (`_not_api`: private, in a test file or a private package): information
    with npugates.UNUSED_HELPER's reason (a named scope)."""
    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(
        f.code in _SWITCH_CODES and not f.fixable and f.cell is None and f.severity != "info" for f in r.findings)]
    if not candidates:
        return results
    from .modpaths import RunTexts
    from .npugates import UNUSED_HELPER, named_in_file

    text_of = RunTexts(results, paths)
    python = None
    out = list(results)
    for i in candidates:
        result = results[i]
        data = text_of(i)
        if not data or b"\ndef " not in data:
            continue
        source = data.split(b"\n")
        # (cheap before the parse: a switch inside a function is indented)
        if not any(f.code in _SWITCH_CODES and 0 < f.line <= len(source) and source[f.line - 1][:1] in (b" ", b"\t")
                   for f in result.findings):
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        changed, findings = False, []
        for finding in result.findings:
            if finding.code in _SWITCH_CODES and not finding.fixable and finding.cell is None \
                    and finding.severity != "info":
                function = _function_at(tree, [finding.line, *(p[0] for p in finding.also)])
                if function is not None and _not_api(result.relpath, function.name) \
                        and not named_in_file(tree, function):
                    if python is None:
                        python = [j for j, r in enumerate(results) if r.relpath.endswith(".py")]
                    word = function.name.encode()
                    if not any(j != i and word in (text_of(j) or b"") for j in python):
                        finding = dataclasses.replace(
                            finding, severity="info",
                            message=f"{finding.message} ({UNUSED_HELPER}: `{function.name}` is called nowhere "
                                    "in the run: its file names it only in its `def` and comments, no other "
                                    "file names it)")
                        changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(result, findings=findings)
    return out


# ------------------------------------------------------------------ a shell script's own CUDA exit probe (AR#10)
_CUDA_VAR = r"(?:NV_)?CUDA_(?:VERSION|HOME|PATH|ROOT|MAJOR|MINOR|MAJOR_VERSION)|NVIDIA_REQUIRE_CUDA"
_TEST = (r"(?:\[\[?|test)[ \t]+-z[ \t]+\"?\$\{?(?P<var>" + _CUDA_VAR + r")(?::?-[^}\"\s]*)?\}?\"?[ \t]*\]?\]?")
_QUIET = r"(?:[ \t]*(?:echo|printf)\b[^\n;]*(?:;|\n))*"
_EXIT_PROBES = (
    re.compile(r"^if[ \t]+" + _TEST + r"[ \t]*(?:;[ \t]*|\n[ \t]*)then[ \t]*(?:\n|;)?" + _QUIET
               + r"[ \t]*exit(?:[ \t]+0)?[ \t]*(?:;|\n)[ \t\n]*fi\b", re.M),
    re.compile(r"^" + _TEST + r"[ \t]*&&[ \t]*exit(?:[ \t]+0)?(?![\w-])", re.M),
)
_FUNCTION = re.compile(r"^[ \t]*(?:function[ \t]+\w+|\w+[ \t]*\(\))", re.M)
# (public: cudabuilds31.py reads the same test of an unset CUDA variable and shares top_level_stop and lower_from)
CUDA_UNSET_TEST, SAY_LINES = _TEST, _QUIET


def review_exit_probe(findings: list, code: str) -> list:
    """A shell file's findings on the lines of a top-level `exit 0` probe of an unset CUDA variable
    and after it: information (EXIT_PROBE). `code`: the text with comments blanked."""
    if not findings or "exit" not in code or "-z" not in code:
        return findings
    stop = top_level_stop(code, _EXIT_PROBES)
    if stop is None:
        return findings
    match, start, end = stop
    return lower_from(findings, start, f"{EXIT_PROBE}: lines {start}-{end} exit 0 where "
                                       f"`{match.group('var')}` is unset, as on an NPU host")


def top_level_stop(code: str, patterns) -> tuple | None:
    """The earliest match of `patterns` in a shell text with its first and last line, when no shell
    function starts before it (a stop inside a function stops only that function); else None."""
    matches = [m for m in (p.search(code) for p in patterns) if m is not None]
    match = min(matches, key=lambda m: m.start()) if matches else None
    if match is None or _FUNCTION.search(code, 0, match.start()):
        return None
    return match, code.count("\n", 0, match.start()) + 1, code.count("\n", 0, match.end()) + 1


def lower_from(findings: list, start: int, why: str, also=lambda finding: True) -> list:
    """`findings` whose every place is at or after line `start` (not rewritable, not already moot,
    and `also(finding)`): information with `why` added to the message in parentheses."""
    out = []
    for finding in findings:
        lines = [finding.line, *(p[0] for p in finding.also)]
        if not finding.fixable and all(line >= start for line in lines) and also(finding) \
                and _not_moot(finding):
            finding = dataclasses.replace(finding, severity="info", message=f"{finding.message} ({why})")
        out.append(finding)
    return out


def _not_moot(finding) -> bool:
    from .moot import is_moot

    return not is_moot(finding)


# ------------------------------------------------------------------ a test device never "cuda" on an NPU host (AS#27)
# (moot.AS_WRITTEN) `device == "cuda"` in a test parametrized over a project device list whose
# "cuda" entry is added only behind a CUDA check the run keeps as written
NEVER_CUDA = 'a test device that is never "cuda" on an NPU host'
_KEPT_LABEL = 'it guards adding the label "cuda"'
_TEST_PATH = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")


def review_never_cuda_devices(results: list, paths: dict) -> list:
    """NPU108 (a "cuda" comparison left unchanged) on `device == "cuda"` in a test whose `device`
    comes from `@parametrize("device", DEVICES)`, `DEVICES = get_devices()` imported from a module
    of the run, whose only "cuda" is added behind a check that module keeps meaning CUDA (its NPU110
    "it guards adding the label"): the comparison is False on an NPU host, as on any machine
    without CUDA, and correct as written (NEVER_CUDA, a named scope)."""
    candidates = [i for i, r in enumerate(results) if _TEST_PATH.search(r.relpath) and r.relpath.endswith(".py")
                  and any(_open108(f) for f in r.findings)]
    if not candidates:
        return results
    from .findings import lower_pieces
    from .modpaths import RunTexts

    text_of = RunTexts(results, paths)
    by_path = {r.relpath: j for j, r in enumerate(results)}
    out = list(results)
    for i in candidates:
        data = text_of(i)
        if not data or b"parametrize" not in data or b"import" not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        changed, findings = False, []
        for finding in results[i].findings:
            if _open108(finding):
                pieces = lower_pieces(finding, lambda line: _never_cuda(tree, line, results, by_path, text_of))
                if pieces is not None:
                    findings.extend(pieces)
                    changed = True
                    continue
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(results[i], findings=findings)
    return out


def _open108(finding) -> bool:
    if finding.code != "NPU108" or finding.fixable or finding.cell is not None:
        return False
    from .moot import is_moot

    return not is_moot(finding)


def _never_cuda(tree: ast.Module, line: int, results: list, by_path: dict, text_of) -> Optional[str]:
    """Why the place is a `param == "cuda"` whose parameter's list never holds "cuda" on an NPU host."""
    function = next((f for f in astcache.nodes(tree, (ast.FunctionDef, ast.AsyncFunctionDef))
                     if f.lineno <= line <= (f.end_lineno or f.lineno) and f.name.startswith("test")), None)
    if function is None:
        return None
    names = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Compare) and node.lineno <= line <= (node.end_lineno or node.lineno) \
                and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq) and isinstance(node.left, ast.Name) \
                and isinstance(node.comparators[0], ast.Constant) and node.comparators[0].value == "cuda":
            names.add(node.left.id)
    if len(names) != 1:
        return None
    source = _parametrized_from(tree, function, names.pop())
    why = source and _list_without_cuda(tree, source, results, by_path, text_of)
    return f"{NEVER_CUDA}: {why}" if why else None


def _parametrized_from(tree: ast.Module, function: ast.AST, name: str) -> Optional[str]:
    """The module-level name whose list `@parametrize("name", LIST)` gives the test's parameter."""
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call) and (astcache.dotted(decorator.func) or "").endswith("parametrize") \
                and len(decorator.args) >= 2 and isinstance(decorator.args[0], ast.Constant) \
                and decorator.args[0].value == name and isinstance(decorator.args[1], ast.Name):
            return decorator.args[1].id
    return None


def _list_without_cuda(tree: ast.Module, list_name: str, results: list, by_path: dict, text_of) -> Optional[str]:
    assigns = [s for s in tree.body if isinstance(s, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == list_name for t in s.targets)]
    if len(assigns) != 1 or not isinstance(assigns[0].value, ast.Call) or assigns[0].value.args \
            or not isinstance(assigns[0].value.func, ast.Name):
        return None
    getter = assigns[0].value.func.id
    module = next((s.module for s in tree.body if isinstance(s, ast.ImportFrom) and s.module and not s.level
                   and any(a.name == getter and (a.asname or a.name) == getter for a in s.names)), None)
    if module is None:
        return None
    stem = module.replace(".", "/")
    j = next((by_path[p] for p in by_path if p.endswith((stem + ".py", stem + "/__init__.py"))
              and (p in (stem + ".py", stem + "/__init__.py") or p.endswith(("/" + stem + ".py", "/" + stem + "/__init__.py")))),
             None)
    if j is None:
        return None
    data = text_of(j) or b""
    if f"def {getter}(".encode() not in data:
        return None
    other = astcache.parse(data)
    if other is None:
        return None
    defs = [s for s in other.body if isinstance(s, ast.FunctionDef) and s.name == getter]
    if len(defs) != 1:
        return None
    start, end = defs[0].lineno, defs[0].end_lineno or defs[0].lineno
    kept = [f for f in results[j].findings if f.code == "NPU110" and not f.fixable and _KEPT_LABEL in f.message
            and start <= f.line <= end]
    covered = {line for f in kept for line in (f.line, *(p[0] for p in f.also))}
    cuda = [n.lineno for n in ast.walk(defs[0]) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and n.value.split(":")[0] == "cuda"]
    if not kept or not cuda or not all(line in covered for line in cuda):
        return None
    return (f"`{list_name} = {getter}()` ({results[j].relpath}:{start}) adds \"cuda\" only behind the check kept "
            f"meaning CUDA at line {kept[0].line}, so the comparison is False there, as on any machine without CUDA")
