"""Ecosystem imports read with the whole file: availability probes, imports of the project's own
Python modules named like extensions, and references that only repeat a reported import.

Run after the engine (run.migrate_file), on the file's `ast` (astcache), like testscopes.py:

* a guarded probe (`try: import triton; HAS_TRITON = True except ImportError: HAS_TRITON =
  False`, `try: import flash_attn; return flash_attn.__version__ >= "2.7" except Exception:
  return False`): on an NPU host the package is missing and the code takes its fallback, so the
  import's finding is info, with that reason (`review_guarded_probes`). The code that uses the
  package (a call into it, a `@triton.jit` kernel) keeps its own finding and severity; where the
  same file reports one under the same code, the probe is left to be merged into it.
* `from .inference_ops_cuda import X`, `from .._cpp_lib import _built_with_cuda`: named like a
  compiled extension, but a `.py` module or a package of the run, so Python: no NPU911
  (`drop_python_extensions`).
* `flash_attn.flash_attn_interface.flash_attn_gpu` after `import flash_attn` reported in the same
  file, or a second import of the same package under the same code in the same block: one
  construct, folded into the import's finding (its `also` places and "also at" lines;
  `fold_repeated_imports`).
* `if not x.is_cuda: raise ...` in front of a Triton kernel in a file that reports Triton (NPU910):
  the check (NPU110) is folded into that finding (`fold_gates_into_imports`).
* `if is_bnb_available(): import bitsandbytes as bnb` read only as `isinstance(layer,
  bnb.nn.Linear8bitLt)`: the import runs only where the package is installed and type checks
  work anywhere, so its finding is info (`review_type_check_imports`).
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import replace

from . import astcache, catalogue
from .findings import MAX_LISTED, Finding, split_merged
from .keptgates import FALLBACK


_dotted = astcache.dotted  # (`a.b.c` of an attribute chain)


def _parse(text: str) -> ast.Module | None:
    """The file's tree, from the parse the other passes share (astcache)."""
    body = text.encode("utf-8", "surrogatepass")
    return astcache.parse(body[3:] if body.startswith(b"\xef\xbb\xbf") else body)


_CAUGHT = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})

# Calls a probe may make besides importing: asking (hasattr, a version parse), saying (a log
# line, a warning) and registering classes it names (FX meta tracing, a registry).
_QUIET_CALLS = frozenset({
    "hasattr", "getattr", "isinstance", "issubclass", "callable", "len", "str", "int", "float",
    "bool", "tuple", "parse", "Version", "LooseVersion", "parse_version", "version", "find_spec",
    "print", "warn", "warning", "info", "debug", "register", "add", "append", "super",
    # (`HAS_ROUTER = "router_input" in inspect.signature(run).parameters`: introspection, round 31 FB#15)
    "signature",
})

# and calls named as questions: `super().check_deps()`, `is_torch_version(...)`, `has_fp8()`
_QUESTION = re.compile(r"(is|has|check|supports?)_|\w*_available$|check_deps$")

GUARDED = "guarded import: the fallback runs on NPU; review that the fallback exists"

_SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(_dotted(k).rpartition(".")[2] in _CAUGHT for k in kinds)


def _quiet(node: ast.AST | None) -> bool:
    """An expression that only reads, compares or makes one of the quiet calls."""
    if node is None:
        return True
    for inner in ast.walk(node):
        if isinstance(inner, (ast.Lambda, ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr)):
            return False
        if isinstance(inner, ast.Call) and not isinstance(inner.func, ast.Call):
            name = _dotted(inner.func).rpartition(".")[2]
            if name not in _QUIET_CALLS and not _QUESTION.match(name):
                return False
    return True


def _probe_statement(stmt: ast.stmt) -> bool:
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Pass, ast.Global, ast.Nonlocal)):
        return True
    if isinstance(stmt, ast.Assign):
        return _quiet(stmt.value)
    if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        return _quiet(stmt.value)
    if isinstance(stmt, (ast.Return, ast.Expr)):
        return _quiet(stmt.value)
    if isinstance(stmt, ast.Raise):
        return _quiet(stmt.exc)
    if isinstance(stmt, ast.If):
        return _quiet(stmt.test) and all(map(_probe_statement, stmt.body + stmt.orelse))
    if isinstance(stmt, ast.Try):  # a nested probe (`try: v = Version(bnb.__version__) except ...`)
        blocks = [stmt.body, stmt.orelse, stmt.finalbody, *(h.body for h in stmt.handlers)]
        return all(_probe_statement(s) for block in blocks for s in block)
    return False


def probe_tries(tree: ast.Module) -> list[tuple[ast.Try, list]]:
    """Every guarded probe, with its import statements: a `try` that catches ImportError (or
    ModuleNotFoundError, Exception, a bare `except`) whose body only imports, sets flags, returns
    what it read, logs or registers."""
    found = []
    for stmt in astcache.walk_statements(tree):
        if not isinstance(stmt, ast.Try) or not any(map(_catches_import_error, stmt.handlers)):
            continue
        if all(map(_probe_statement, stmt.body + stmt.orelse)):  # (`else:` runs when it imported)
            imports = [s for s in stmt.body if isinstance(s, (ast.Import, ast.ImportFrom))]
            if imports:
                found.append((stmt, imports))
    return found


def _bound(stmt: ast.AST) -> set[str]:
    if isinstance(stmt, ast.Import):
        return {alias.asname or alias.name.split(".")[0] for alias in stmt.names}
    return {alias.asname or alias.name for alias in stmt.names if alias.name != "*"}


def probe_import_lines(tree: ast.Module, reported: set[int] = frozenset()) -> set[int]:
    """Lines of the import statements of the guarded probes whose names the file uses nowhere
    else but on `reported` lines: a name the probe binds that code outside it reads (`apex_amp.
    scale_loss(...)` after `try: import apex.amp as apex_amp except ImportError: pass`) makes it
    no probe, unless that use is reported itself."""
    tries = probe_tries(tree)
    if not tries:
        return set()
    uses: dict[str, list[int]] = {}
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            uses.setdefault(node.id, []).append(node.lineno)
    lines: set[int] = set()
    for stmt, imports in tries:
        first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
        names = set().union(*map(_bound, imports))
        if any(not first <= line <= last and line not in reported for name in names for line in uses.get(name, ())):
            continue
        lines.update(s.lineno for s in imports)
    return lines


def _per_file(code: str) -> bool:
    rule = catalogue.rules().get(code)
    return bool(rule is not None and rule.per_file == "code")


def review_guarded_probes(findings: list[Finding], text: str) -> list[Finding]:
    """Report-only findings on the imports of guarded probes lowered to info, with the reason;
    one that the file's finding of the same code at its own severity will absorb (per-file codes
    merge, findings.merge_per_file) is left to be merged."""
    if "try" not in text or not any(not f.fixable and f.severity != "info" and f.cell is None for f in findings):
        return findings
    tree = _parse(text)
    if tree is None:
        return findings
    probes = probe_import_lines(tree, {f.line for f in findings if not f.fixable and f.cell is None})
    if not probes:
        return findings
    real = {(f.code, f.severity) for f in findings
            if not f.fixable and f.cell is None and f.line not in probes and f.severity != "info"}
    out = []
    for finding in findings:
        if (not finding.fixable and finding.cell is None and finding.line in probes
                and finding.severity != "info"
                and not (_per_file(finding.code) and (finding.code, finding.severity) in real)):
            finding = replace(finding, severity="info", message=f"{finding.message} ({GUARDED})")
        out.append(finding)
    return out


# ----------------------------------------------------------------------------- the project's own Python modules
_EXTENSION = re.compile(r"^_C$|^_CUDA$|_cuda$")


def _resolves(path: str, modules: frozenset) -> bool:
    """`pkg/mod` is a module (`pkg/mod.py`) or a package (`pkg/mod/__init__.py`) of the run."""
    return f"{path}.py" in modules or f"{path}/__init__.py" in modules


def _absolute(module: str, modules: frozenset, first_party: frozenset) -> str | None:
    """Where an absolute import of the project's own (its top-level name is first party) lives
    (`pkg/mod`), with or without a `src/` (or other) folder above the package; None when no
    module of the run is it."""
    if module.split(".")[0] not in first_party:
        return None  # another project's (`flashinfer`), even where a module of this one shares its name
    path = module.replace(".", "/")
    for rel in modules:
        for suffix in (f"{path}.py", f"{path}/__init__.py"):
            if rel == suffix:
                return path
            if rel.endswith("/" + suffix):
                return rel[: -len(suffix)] + path
    return None


def _python_import(stmt: ast.AST, relpath: str, modules: frozenset, first_party: frozenset) -> bool:
    """Whether `stmt` names an extension-like module (`_C`, `*_cuda`) of the project's own, and
    every one it names is a Python module or package of the run."""
    if isinstance(stmt, ast.ImportFrom):
        if stmt.level:
            folder = posixpath.dirname(relpath)
            for _ in range(stmt.level - 1):
                folder = posixpath.dirname(folder)
            base = posixpath.join(folder, *stmt.module.split(".")) if stmt.module else folder
        else:
            base = _absolute(stmt.module or "", modules, first_party)
            if base is None:
                return False
        if stmt.module and f"{base}.py" in modules:
            return True  # every name is an attribute of a Python module
        # from a package (`from colossalai._C import fused_optim`): a name that is no module of the
        # run may be a compiled one built into the package, so every name must be a module
        extension_like = any(_EXTENSION.search(alias.name) for alias in stmt.names) or bool(
            stmt.module and any(_EXTENSION.search(part) for part in stmt.module.split(".")))
        return extension_like and (not stmt.module or _resolves(base, modules)) and all(
            alias.name != "*" and _resolves(posixpath.join(base, alias.name), modules) for alias in stmt.names)
    if isinstance(stmt, ast.Import):
        named = [alias.name for alias in stmt.names if any(_EXTENSION.search(p) for p in alias.name.split("."))]
        return bool(named) and all(f"{_absolute(name, modules, first_party)}.py" in modules for name in named)
    return False


def drop_python_extensions(findings: list[Finding], text: str, relpath: str, modules: frozenset,
                           first_party: frozenset) -> list[Finding]:
    """NPU911 on an import of the project's own Python module named like an extension, gone:
    the module is a `.py` file or a package of the run, not a compiled library."""
    if not modules or not any(f.code == "NPU911" and not f.fixable and f.cell is None for f in findings):
        return findings
    tree = _parse(text)
    if tree is None:
        return findings
    imports = {}
    for stmt in astcache.walk_statements(tree):
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            imports.setdefault(stmt.lineno, stmt)
    out = []
    for finding in findings:
        ours = finding.code == "NPU911" and not finding.fixable and finding.cell is None and "import" in finding.message
        stmt = imports.get(finding.line) if ours else None
        if stmt is not None and _python_import(stmt, relpath.replace("\\", "/"), modules, first_party):
            continue
        out.append(finding)
    return out


# ----------------------------------------------------------------------------- references that repeat an import
_IMPORT_MESSAGE = re.compile(r"\bimport (of|from) `")
_ALSO = re.compile(r" \(also at [^()]*\)")


def _bindings(stmt: ast.AST) -> dict[str, str]:
    """Local name -> top-level package of the names an import statement binds."""
    out = {}
    if isinstance(stmt, ast.Import):
        for alias in stmt.names:
            out[alias.asname or alias.name.split(".")[0]] = alias.name.split(".")[0]
    elif isinstance(stmt, ast.ImportFrom) and not stmt.level and stmt.module:
        for alias in stmt.names:
            if alias.name != "*":
                out[alias.asname or alias.name] = stmt.module.split(".")[0]
    return out


def _absorb(finding: Finding, others: list[Finding]) -> Finding:
    """`finding` standing for `others` too: their places in its `also`, their lines in its message."""
    also = (*finding.also, *((p.line, p.column, p.source) for o in others for p in split_merged(o)))
    places = list(dict.fromkeys(str(line) for line, _c, _s in also if line != finding.line))
    message = _ALSO.sub("", finding.message)
    if places:
        more = f" and {len(places) - MAX_LISTED} more" if len(places) > MAX_LISTED else ""
        noun = "line " if len(places) == 1 else "lines "
        message = f"{message} (also at {noun}{', '.join(places[:MAX_LISTED])}{more})"
    return replace(finding, message=message, also=also)


def fold_repeated_imports(findings: list[Finding], text: str) -> list[Finding]:
    """NPU990 on an attribute of a package whose import the file reports (`flash_attn.
    flash_attn_interface.flash_attn_gpu` after `import flash_attn`), and a second import of that
    package under the same code in the same block, folded into the first import's finding: one construct, one
    finding. Only into one at the same severity or a higher one (a use that fails is not hidden
    under a probe's info)."""
    imports = [f for f in findings if not f.fixable and f.cell is None and _IMPORT_MESSAGE.search(f.message)]
    if not imports:
        return findings
    tree = _parse(text)
    if tree is None:
        return findings
    statements = {}
    blocks: dict[int, int] = {}
    for stmt in astcache.walk_statements(tree, blocks):
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            statements.setdefault(stmt.lineno, stmt)
    names: dict[str, Finding] = {}  # local name -> the import finding that binds it
    owner: dict[tuple, Finding] = {}  # (code, package, block) -> the first import finding of it
    folded: dict[int, list[Finding]] = {}
    gone: set[int] = set()
    for finding in imports:
        stmt = statements.get(finding.line)
        if stmt is None:
            continue
        bound = _bindings(stmt)
        packages = {(p, blocks.get(id(stmt))) for p in bound.values()}  # in one block: one construct
        first = next((owner[(finding.code, p)] for p in packages if (finding.code, p) in owner), None)
        if first is not None and _SEVERITY_RANK[finding.severity] <= _SEVERITY_RANK[first.severity] \
                and len(packages) == 1:
            folded.setdefault(id(first), []).append(finding)
            gone.add(id(finding))
            target = first
        else:
            target = finding
            for p in packages:
                owner.setdefault((finding.code, p), finding)
        for name in bound:
            names.setdefault(name, target)
    for finding in findings:
        if finding.code != "NPU990" or finding.fixable or finding.cell is not None or id(finding) in gone:
            continue
        head = re.match(r"[A-Za-z_]\w*", finding.source or "")
        target = names.get(head.group(0)) if head else None
        if target is None or target is finding or id(target) in gone:
            continue
        if _SEVERITY_RANK[finding.severity] > _SEVERITY_RANK[target.severity]:
            continue
        folded.setdefault(id(target), []).append(finding)
        gone.add(id(finding))
    if not gone:
        return findings
    return [_absorb(f, folded[id(f)]) if id(f) in folded else f for f in findings if id(f) not in gone]



# ----------------------------------------------------------------------------- checks in front of a reported package
_GATE_USES = re.compile(r"\((?:uses `[^`]+` \(`([\w.]+)`\)|imports `([\w.]+)`|uses `[^`]+` \((a Triton kernel)\))")
_IMPORTED = re.compile(r"\bimport (?:of|from) `([\w.]+)`")


# NPU110 shapes of rewrite_gates.py: a check that fails unless CUDA in a kernel module, and a check
# that adds the label "cuda" to a test's device list
_KERNEL_MODULE_GATE = "it fails unless the device is CUDA, in a module that runs CUDA kernels"
_LABEL_GATE = 'it guards adding the label "cuda"'
_KERNEL_CODES = ("NPU910", "NPU911", "NPU912", "NPU913", "NPU902", "NPU915")


def _label_gate(gate: Finding) -> Finding:
    """A check that adds "cuda" to a list of devices to test, kept as written: on an NPU host the
    tests run on the other entries (the CPU), as they do on a machine without CUDA. Nothing
    fails: information, a place to add an "npu" entry."""
    if _LABEL_GATE not in gate.message or gate.severity == "info":
        return gate
    return replace(gate, severity="info", message=gate.message + (
        " (information: on an NPU host the list keeps its other devices, as on any machine "
        "without CUDA; add an NPU entry to test there)"))


def fold_gates_into_imports(findings: list[Finding]) -> list[Finding]:
    """NPU110 on a device check whose guarded code is Triton (`if not x.is_cuda: raise ...` in
    front of a Triton kernel) in a file that reports Triton already (NPU910: `import triton`, a
    `@triton.jit` kernel): the check only says that the kernel does not run on an NPU, so it is
    folded into that finding (its `also` places), when that one is at the same severity or a
    higher one. The check's line stays listed. Checks in front of other packages' calls stay."""
    gates = [f for f in findings if f.code == "NPU110" and not f.fixable and f.cell is None]
    if not gates:
        return findings
    findings = [_label_gate(f) if f in gates else f for f in findings]
    # (a check whose fallback an NPU host runs is a named scope of its own: keptgates.py)
    gates = [f for f in findings if f.code == "NPU110" and not f.fixable and f.cell is None
             and FALLBACK not in f.message]
    kernel_errors = [f for f in findings if f.code in _KERNEL_CODES and f.severity == "error"
                     and not f.fixable and f.cell is None]
    imports: dict[str, Finding] = {}
    for finding in findings:
        if finding.fixable or finding.cell is not None or finding.code == "NPU110":
            continue
        match = _IMPORTED.search(finding.message)
        if match:
            imports.setdefault(match.group(1).split(".")[0], finding)
        if finding.code == "NPU910":
            imports.setdefault("a Triton kernel", finding)
    folded: dict[int, list[Finding]] = {}
    gone: set[int] = set()
    for gate in gates:
        if _KERNEL_MODULE_GATE in gate.message and kernel_errors:
            # `assert x.is_cuda, "must be CUDA"` in front of the file's Triton/CuTe kernels: the
            # kernel finding already says they do not run on an NPU
            folded.setdefault(id(kernel_errors[0]), []).append(gate)
            gone.add(id(gate))
            continue
        match = _GATE_USES.search(gate.message)
        if not match:
            continue
        key = match.group(3) or (match.group(1) or match.group(2)).split(".")[0]
        if key not in ("triton", "a Triton kernel"):
            continue  # (a check in front of a package's calls stays: tests/test_precision_gates.py)
        target = imports.get(key) or imports.get("a Triton kernel")
        if target is None or _SEVERITY_RANK[gate.severity] > _SEVERITY_RANK[target.severity]:
            continue
        folded.setdefault(id(target), []).append(gate)
        gone.add(id(gate))
    if not gone:
        return findings
    return [_absorb(f, folded[id(f)]) if id(f) in folded else f for f in findings if id(f) not in gone]


# ----------------------------------------------------------------------------- optional imports for type checks
TYPE_CHECKS = ("optional import used for type checks: it runs only where the package is installed, "
               "and `isinstance` checks work on any host")


def _availability_test(test: ast.AST) -> bool:
    """A test that asks whether a package is there (`is_bnb_available()`, `has_x()`)."""
    return any(isinstance(n, ast.Call) and _QUESTION.match(_dotted(n.func).rpartition(".")[2])
               for n in ast.walk(test))


def type_check_import_lines(tree: ast.Module) -> set[int]:
    """Lines of the imports under an availability test (`if is_bnb_available(): import
    bitsandbytes as bnb`) whose names the enclosing function (or, at module level, the file)
    reads only as the classes of `isinstance`/`issubclass` checks (`isinstance(layer,
    bnb.nn.Linear8bitLt)`): nothing of the package is called or constructed."""
    guarded: list[tuple[ast.stmt, ast.AST]] = []  # (import, scope)
    scopes: list[tuple[ast.AST, list]] = [(tree, tree.body)]
    for node in astcache.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            scopes.append((node, node.body))
    for scope, body in scopes:
        stack = list(body)
        while stack:
            stmt = stack.pop()
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue  # (a scope of its own)
            if isinstance(stmt, ast.If) and _availability_test(stmt.test):
                guarded.extend((s, scope) for s in stmt.body if isinstance(s, (ast.Import, ast.ImportFrom)))
            for field in ("body", "orelse", "finalbody", "handlers"):
                block = getattr(stmt, field, None)
                if isinstance(block, list):
                    stack.extend(s for s in block if isinstance(s, ast.stmt))
                    stack.extend(s for h in block if isinstance(h, ast.ExceptHandler) for s in h.body)
    if not guarded:
        return set()
    lines: set[int] = set()
    checked: dict[int, tuple[dict, set]] = {}
    for stmt, scope in guarded:
        if id(scope) not in checked:
            uses: dict[str, list[int]] = {}
            classes: set[int] = set()
            for node in ast.walk(scope):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    uses.setdefault(node.id, []).append(id(node))
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2
                      and node.func.id in ("isinstance", "issubclass")):
                    classes.update(id(n) for n in ast.walk(node.args[1]))
            checked[id(scope)] = (uses, classes)
        uses, classes = checked[id(scope)]
        names = _bound(stmt)
        if names and all(use in classes for name in names for use in uses.get(name, ())):
            lines.add(stmt.lineno)
    return lines


def review_type_check_imports(findings: list[Finding], text: str) -> list[Finding]:
    """Report-only findings on optional imports used only for type checks lowered to info, with
    the reason (type_check_import_lines)."""
    if "isinstance" not in text and "issubclass" not in text:
        return findings
    if not any(not f.fixable and f.severity != "info" and f.cell is None and _IMPORT_MESSAGE.search(f.message)
               for f in findings):
        return findings
    tree = _parse(text)
    if tree is None:
        return findings
    lines = type_check_import_lines(tree)
    if not lines:
        return findings
    return [replace(f, severity="info", message=f"{f.message} ({TYPE_CHECKS})")
            if (not f.fixable and f.cell is None and f.line in lines and f.severity != "info"
                and _IMPORT_MESSAGE.search(f.message)) else f
            for f in findings]


# ----------------------------------------------------------------------------- shared with fallbacks.py
# (the guarded imports with a fallback read the same shapes: public names for the helpers above)
parse_text = _parse
catches_import_error = _catches_import_error
probe_statement = _probe_statement
bound_names = _bound
per_file_code = _per_file
