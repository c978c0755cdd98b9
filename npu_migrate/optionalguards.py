"""Optional CUDA-only packages that the code already loads only where they are installed (issue #16).

tritonguards.review_importers does this for Triton (NPU910); this module does it for the other
optional packages the sweep reports on import: bitsandbytes (NPU914), compiled extensions (NPU911),
xformers (NPU915) and flash-attn helpers without a drop-in mapping (NPU502).

* **Modules only guarded importers load** (`review_importers`, whole program). A module that
  imports such a package unguarded at module level is reported as failing to import where the
  package is missing ("imported unguarded at module level, ..."). When every importer of the run
  imports that module behind an availability test of the package (`if is_bnb_available():`,
  `if name == "Linear4bit" and is_bnb_4bit_available():`, `if XFORMERS_AVAILABLE:`) or inside
  `try`/`except ImportError`, the module is not loaded where the package is missing: the clause
  goes and the finding is info naming the importers. Not a named scope: a plain NPU host may
  well have the package installed (bitsandbytes supports "npu" among its devices; xformers and
  flash-attn wheels install anywhere), so the availability test is not provably false there.
  A module imported unguarded by any importer (shared code), `__init__.py` itself, or a module
  named in a string of another file (a dynamic import) keeps its error.
* **What bitsandbytes does on an NPU host** (`review_bitsandbytes`, per file). bitsandbytes
  (0.45+, multi-backend) registers pure-torch kernels for every device (`register_kernel(...,
  "default")`, torch's CompositeExplicitAutograd): LLM.int8() (`int8_linear_matmul`,
  `int8_mm_dequant`), 4-bit NF4/FP4 quantisation, dequantisation and matmul (`quantize_4bit`,
  `dequantize_4bit`, `gemv_4bit`, `gemm_4bit`), blockwise (de)quantisation and the 32-bit optimizer
  update; Ascend kernels come as a plugin backend (`bitsandbytes.backends` entry point). The 8-bit
  blockwise optimizer update has no default kernel (CUDA, CPU and XPU/Triton only), and paged
  optimizers allocate CUDA managed memory: those fail on an NPU host. So a file that uses an 8-bit
  or paged optimizer keeps the error naming it; a file whose bitsandbytes import is not reported
  as failing to import and uses no such optimizer runs on the default kernels: a warning (slower,
  review), with that reason.

* **Guarded imports only dead code uses** (`review_unused_users`, whole program). A per-file
  finding (NPU911, NPU914, NPU915, NPU502) whose every place is an import inside `try`/`except
  ImportError` where either the `except` is a fallback (fallbacks.classify: a flag, a slower
  path) or the names it binds are read only inside module-level classes (or private functions)
  that nothing in the run names (not the file outside their own body, not any other file): the
  CUDA-only code never runs in the project (colossalai's `FusedLayerNormAffineFunction1D`
  beside `fused_weight_gradient_mlp_cuda`'s matmul fallback). Info naming those units, which
  moot.py names as a skipped scope ("runs as written", AS_WRITTEN): the import itself falls back
  on an NPU host, and nothing in the project runs what reads it (round 10: reviewers read the info
  finding as false; the scope still names the units, for a library user who calls them).

Nothing is dropped: each shape ends as info or a warning with its reason.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache
from .findings import Finding
from .tritonguards import UNGUARDED, catches_import_errors, run_imports, named_in_a_string, operands, parents, source_text

CODES = ("NPU914", "NPU911", "NPU915", "NPU502")

# a name that tests whether the package is there: `is_bnb_available()`, `is_bnb_4bit_available()`,
# `is_bitsandbytes_available()`, `XFORMERS_AVAILABLE`, `_has_xformers`, `is_flash_attn_2_available()`
_PACKAGES = {
    "NPU914": r"bnb|bitsandbytes",
    "NPU915": r"xformers",
    "NPU502": r"flash_?attn",
    "NPU911": None,  # a compiled extension: only `try`/`except ImportError` importers count
}

IMPORTERS_GUARDED = "imported only behind an availability test of the package, so not loaded where it is missing"
_TRY_IMPORTERS = "imported only inside `try`/`except ImportError`, whose fallback runs where the package is missing"

# bitsandbytes on an NPU host (see the module's doc)
BNB_DEFAULT = "no 8-bit or paged optimizer in this file: runs on those kernels, slower than on CUDA; review"
BNB_TEST = "information: in a test file, whose bitsandbytes calls run on those kernels on an NPU host"
_TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$)")
BNB_OPTIMIZER = "uses an 8-bit or paged optimizer, which has no NPU kernel"
# 8-bit and paged optimizers: `AdamW8bit`, `PagedAdamW`, `PagedLion8bit`, `bnb.functional.get_paged`
_FAILING = re.compile(
    r"\b(?:(?:Paged)?(?:Adam|AdamW|Lion|SGD|RMSprop|LAMB|LARS|Adagrad|AdEMAMix|Momentum)\d*8bit\w*"
    r"|Paged(?:Adam|AdamW|Lion|SGD|RMSprop|LAMB|LARS|Adagrad|AdEMAMix|Momentum)\w*"
    r"|get_paged|optimizer_update_8bit\w*)\b")


def _availability(pattern: str):
    return re.compile(rf"(?i)(^|_)(has|is|use|can_use|enable)_?({pattern})|({pattern})_?\w*?(is_)?"
                      r"(available|supported|enabled|installed)$")


def _names_package(node: ast.AST, regex) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else ""
    return bool(regex.search(name))


def _tests_package(test: ast.AST, regex) -> bool:
    """Each disjunct of `test` (but `TYPE_CHECKING`) has a conjunct, not negated, that tests the
    package's availability."""
    disjuncts = [d for d in operands(test, ast.Or)
                 if (astcache.dotted(d) or "").rsplit(".", 1)[-1] != "TYPE_CHECKING"]
    return bool(disjuncts) and all(any(_names_package(c, regex) for c in operands(d, ast.And)) for d in disjuncts)


def _guard_of(node: ast.AST, parent: dict[int, ast.AST], regex) -> Optional[tuple[str, str]]:
    """("try", "") inside the body of a `try` that catches ImportError; ("test", source) inside
    the body of an `if` on the package's availability; None otherwise."""
    child, current = node, parent.get(id(node))
    while current is not None and not isinstance(current, ast.Module):
        if isinstance(current, ast.Try) and child in current.body and catches_import_errors(current):
            return ("try", "")
        if (regex is not None and isinstance(current, (ast.If, ast.IfExp)) and child is not current.test
                and child in (current.body if isinstance(current.body, list) else [current.body])
                and _tests_package(current.test, regex)):
            return ("test", " ".join(source_text(current.test).split()))
        child, current = current, parent.get(id(current))
    return None


def _import_guard(tree: ast.Module, line: int, regex) -> Optional[tuple[str, str]]:
    statements = [n for n in astcache.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno == line]
    if not statements:
        return None
    parent = parents(tree)
    guards = [_guard_of(n, parent, regex) for n in statements]
    if any(g is None for g in guards):
        return None
    return guards[0]


def _target(finding: Finding) -> bool:
    return (finding.code in CODES and not finding.fixable and finding.cell is None
            and finding.severity != "info" and UNGUARDED in finding.message)


# ------------------------------------------------------------------ whole program
def review_importers(results: list, paths: Optional[dict[str, str]] = None) -> list:
    """NPU914/NPU911/NPU915/NPU502 "imported unguarded at module level" on a module that every
    importer of the run imports behind an availability test of the package or inside
    `try`/`except ImportError`: the clause goes, info with the importers named (module doc)."""
    from .modpaths import module_names

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(map(_target, r.findings))]
    if not candidates:
        return results
    paths = paths or {}
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    imports, text_of = run_imports(results, python, paths)
    trees: dict[int, Optional[ast.Module]] = {}
    out = list(results)
    for i in candidates:
        relpath = results[i].relpath
        if relpath.endswith("__init__.py"):
            continue
        names = set(module_names(relpath))
        stem = relpath[:-3]
        sites = sorted({(j, line) for j in python if j != i for name, line, relative in imports[j]
                        if (relative and name == stem) or (not relative and name in names)})
        if not sites or named_in_a_string(results, i, text_of, python):
            continue
        codes = {f.code for f in results[i].findings if _target(f)}
        lowered = {}
        for code in codes:
            regex = _availability(_PACKAGES[code]) if _PACKAGES[code] else None
            guards = []
            for j, line in sites:
                if j not in trees:
                    data = text_of(j)
                    trees[j] = astcache.parse(data) if data is not None else None
                tree = trees[j]
                guard = _import_guard(tree, line, regex) if tree is not None else None
                if guard is None:
                    break
                guards.append((results[j].relpath, line, guard))
            else:
                lowered[code] = guards
        if lowered:
            out[i] = _lower_importers(out[i], lowered)
    return out


def _lower_importers(result, lowered: dict[str, list]):
    findings = []
    for finding in result.findings:
        guards = lowered.get(finding.code)
        if guards and _target(finding):
            shown = [f"{path}:{line}" + (f" under `{guard[1][:70]}`" if guard[0] == "test" else " in `try`")
                     for path, line, guard in guards]
            listed = "; ".join(shown[:2]) + (f"; and {len(shown) - 2} more" if len(shown) > 2 else "")
            why = IMPORTERS_GUARDED if all(g[0] == "test" for _p, _l, g in guards) else _TRY_IMPORTERS
            finding = dataclasses.replace(
                finding, severity="info", message=f"{finding.message.replace(UNGUARDED, '')} ({why}: {listed})")
        findings.append(finding)
    return dataclasses.replace(result, findings=findings)


# ------------------------------------------------------------------ bitsandbytes on an NPU host
def _failing_optimizer(data: bytes) -> Optional[tuple[str, int]]:
    """The first 8-bit or paged optimizer the code names (a name, an attribute, an imported name;
    not a docstring or a comment), with its line; None when there is none or the file does not parse."""
    if not _FAILING.search(data.decode("utf-8", "replace")):
        return None
    tree = astcache.parse(data)
    if tree is None:
        return None
    found = []
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name):
            name, line = node.id, node.lineno
        elif isinstance(node, ast.Attribute):
            name, line = node.attr, node.end_lineno or node.lineno
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if _FAILING.fullmatch(alias.name.rsplit(".", 1)[-1]):
                    found.append((node.lineno, alias.name.rsplit(".", 1)[-1]))
            continue
        else:
            continue
        if _FAILING.fullmatch(name):
            found.append((line, name))
    if not found:
        return None
    line, name = min(found)
    return name, line


def review_bitsandbytes(results: list, paths: Optional[dict[str, str]] = None) -> list:
    """NPU914 errors: kept where the file uses an 8-bit or paged optimizer (named in the message)
    or its import is reported as failing; a warning with BNB_DEFAULT otherwise (module doc)."""
    from .modpaths import result_bytes

    out = list(results)
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py") or not any(f.code == "NPU914" and not f.fixable and f.cell is None and f.severity == "error"
                   for f in result.findings):
            continue
        data = result_bytes(result, paths or {})
        if data is None or astcache.parse(data) is None:
            continue  # (not read: left as reported)
        failing = _failing_optimizer(data)
        findings = []
        for finding in result.findings:
            if finding.code == "NPU914" and not finding.fixable and finding.cell is None and finding.severity == "error":
                if failing is not None:
                    finding = dataclasses.replace(
                        finding, message=f"{finding.message} ({BNB_OPTIMIZER}: `{failing[0]}` at line {failing[1]})")
                elif UNGUARDED not in finding.message and _TEST_FILE.search(result.relpath):
                    # a test's quantize/dequantize round trips and 4-/8-bit layers run on those
                    # kernels: nothing to port (issue #16 round 9, peft's test helpers)
                    finding = dataclasses.replace(finding, severity="info",
                                                  message=f"{finding.message} ({BNB_DEFAULT}; {BNB_TEST})")
                elif UNGUARDED not in finding.message:
                    finding = dataclasses.replace(finding, severity="warning",
                                                  message=f"{finding.message} ({BNB_DEFAULT})")
            findings.append(finding)
        out[i] = dataclasses.replace(result, findings=findings)
    return out


# ------------------------------------------------------------------ guarded imports dead code uses
UNUSED_USERS = "guarded import read only by code nothing in the project uses"
_MAX_DEAD = 8  # (units found dead together: a reader, the class that alone builds it, ...)


def _units(tree: ast.Module) -> list[ast.AST]:
    """Module-level classes and functions (also under a module-level `if`/`try`)."""
    out, stack = [], list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append(node)
        elif isinstance(node, (ast.If, ast.Try)):
            stack.extend(node.body + node.orelse + getattr(node, "finalbody", []))
            stack.extend(s for h in getattr(node, "handlers", []) for s in h.body)
    return out


def _dead_users(tree: ast.Module, line: int, others: list[bytes]) -> Optional[list[str]]:
    """The names of the units that alone read what the guarded import at `line` binds, when
    nothing names them outside their own body (in this file or any other); None otherwise."""
    from .probes import bound_names, catches_import_error

    parent = parents(tree)
    statements = [n for n in astcache.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno == line]
    if len(statements) != 1:
        return None
    statement = statements[0]
    holder = parent.get(id(statement))
    # a module-level `try` whose `except ImportError` does not raise (a function's own import is
    # no guard of the module, and a handler that raises fails as the import would)
    if not (isinstance(holder, ast.Try) and statement in holder.body and isinstance(parent.get(id(holder)), ast.Module)
            and any(map(catches_import_error, holder.handlers))):
        return None
    if any(isinstance(n, ast.Raise) for h in holder.handlers for n in ast.walk(h)):
        return None
    names = bound_names(statement)
    inside = range(holder.lineno, (holder.end_lineno or holder.lineno) + 1)
    units = _units(tree)

    def unit_of(node: ast.AST) -> Optional[ast.AST]:
        for unit in units:
            if unit.lineno <= node.lineno <= (unit.end_lineno or unit.lineno):
                return unit
        return None

    users = {}
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load) \
                and node.lineno not in inside:
            unit = unit_of(node)
            # (a public module-level function is an entry point a caller outside the run, a hook or
            # a lookup by name may reach, `forward`, `run`: only classes and private functions)
            if unit is None or (not isinstance(unit, ast.ClassDef) and not unit.name.startswith("_")):
                return None
            users[unit.name] = unit
    if not users:
        return None
    pending = list(users)
    while pending:
        name = pending.pop()
        unit = users[name]
        first, last = min([unit.lineno, *(d.lineno for d in unit.decorator_list)]), unit.end_lineno or unit.lineno
        for node in astcache.walk(tree):
            if ((isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name)
                    or (isinstance(node, ast.Constant) and isinstance(node.value, str) and name in node.value)) \
                    and not first <= getattr(node, "lineno", first) <= last:
                # (a class named only inside another class that nothing names either: dead too,
                # round 32 GB#3: a quant method only its config class builds, the config
                # registered nowhere; a function's callers are left as they were, test_h72)
                holder = unit_of(node)
                if holder is None or not isinstance(unit, ast.ClassDef) or not isinstance(holder, ast.ClassDef):
                    return None
                if holder.name not in users:
                    if len(users) >= _MAX_DEAD:
                        return None
                    users[holder.name] = holder
                    pending.append(holder.name)
    for name in users:
        # (another file's own definition of a unit of the same name is no use of this one)
        word = re.compile(rb"(?<!class )(?<!def )\b" + re.escape(name.encode()) + rb"\b")
        if any(name.encode() in data and word.search(data) and not _class_name_label(data, name) for data in others):
            return None
    return sorted(users)


def _class_name_label(data: bytes, name: str) -> bool:
    """Whether another file names the class only as a quoted class name that it compares with
    `x.__class__.__name__` (sglang's `WEIGHT_LOADER_V2_SUPPORTED = ["MarlinLinearMethod", ...]`,
    round 32 GB#3): a label of a class, which builds nothing."""
    if b"__class__.__name__" not in data:
        return False
    word = re.compile(rb"\b" + re.escape(name.encode()) + rb"\b")
    quoted = re.compile(rb"[\"']" + re.escape(name.encode()) + rb"[\"']")
    return len(word.findall(data)) == len(quoted.findall(data))


def review_unused_users(results: list, paths: Optional[dict[str, str]] = None) -> list:
    """Per-file NPU911/NPU914/NPU915/NPU502 whose places are guarded imports with a fallback or
    read only by code nothing uses: info naming that code (module doc)."""
    from .fallbacks import FALLBACK, classify
    from .modpaths import result_bytes

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(
        f.code in CODES and not f.fixable and f.cell is None and f.severity != "info" and UNGUARDED not in f.message
        for f in r.findings)]
    if not candidates:
        return results
    paths = paths or {}
    others: Optional[list[tuple[int, bytes]]] = None
    out = list(results)
    for i in candidates:
        data = result_bytes(results[i], paths)
        tree = astcache.parse(data) if data is not None else None
        if tree is None:
            continue
        fallback_lines: Optional[set[int]] = None
        findings = []
        for finding in results[i].findings:
            if (finding.code in CODES and not finding.fixable and finding.cell is None
                    and finding.severity != "info" and UNGUARDED not in finding.message):
                if others is None:
                    others = [(j, result_bytes(r, paths) or b"") for j, r in enumerate(results) if r.relpath.endswith(".py")]
                rest = [text for j, text in others if j != i]
                dead: list[str] = []
                for line in (finding.line, *(a[0] for a in finding.also)):
                    users = _dead_users(tree, line, rest)
                    if users is not None:
                        dead.extend(users)
                        continue
                    if fallback_lines is None:
                        fallback_lines = {n for reason, lines, _r in classify(tree) if reason == FALLBACK for n in lines}
                    if line not in fallback_lines:
                        break
                else:
                    if dead:
                        shown = ", ".join(f"`{name}`" for name in dict.fromkeys(dead))
                        rest_fall_back = fallback_lines is not None and any(
                            line in fallback_lines for line in (finding.line, *(a[0] for a in finding.also)))
                        tail = "; the other places are guarded imports with a fallback" if rest_fall_back else ""
                        finding = dataclasses.replace(
                            finding, severity="info", message=f"{finding.message} ({UNUSED_USERS}: {shown}{tail})")
            findings.append(finding)
        out[i] = dataclasses.replace(results[i], findings=findings)
    return out


def review(results: list, paths: Optional[dict[str, str]] = None) -> list:
    """The passes, in order (runplan.py, after tritonguards.review_importers)."""
    return review_bitsandbytes(review_unused_users(review_importers(results, paths), paths), paths)
