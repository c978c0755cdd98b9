"""Modules every in-project importer reaches only behind a CUDA/ROCm-only gate (issue #16, round 9).

`wholeprogram._never_imported` lowers the findings of a module all of whose import sites lie in an
`if` block whose one-line condition is false on an NPU host. Real projects put one more step
between the condition and the import, which it cannot see:

* **a flag bound to the project's own CUDA predicate.** SGLang writes `_is_cuda = is_cuda()` at
  module level, with `def is_cuda(): return torch.cuda.is_available() and torch.version.cuda` in its
  utils, and imports its JIT kernels under `if _is_cuda:`. A function of the project with no
  parameters whose one `return` is false on an NPU host (testscopes' evaluation: `torch.version.cuda`
  is None there) is false wherever it is called by name, and so is a module-level name bound once to
  such a call; every top-level `def` of that name in the project must say so.
* **an importer that is another platform's module.** vLLM's `chunked_prefill_paged_decode.py` is
  imported only by `v1/attention/backends/rocm_attn.py` (a module named for ROCm, which the run
  leaves alone as ROCm source) and its own tests; a CUDA variant beside the project's NPU one
  (`cuda_fused_moe.py` beside `npu_fused_moe.py`) that no module imports by name (a registry
  loads it for its device) is the same for what it imports.
* **tests.** A test module is no runtime importer: the module's own tests import it unconditionally
  (`tests/kernels/test_prefix_prefill.py`), and are reported on their own. At least one importer
  that is not a test must exist and be gated: a module only tests import stays as it is. A
  benchmark importing it besides (vLLM's `benchmarks/kernels/benchmark_fused_q_cutedsl.py`) is named
  under policy P2: the finding becomes info "reached on an NPU host only from tests/benchmarks",
  not a named scope, and the module is no unreachable importer for what it imports (round-30 EC#31).

* **names used only behind a gate.** vLLM's `fused_act_quant.py` imports `relu_squared_static_fp8_quant`
  from `relu2_fp8_quant.py` at module level, but reads the name only under `if
  current_platform.is_cuda() and current_platform.has_device_capability(90):`. Loading the module
  on an NPU host only defines its functions and kernels; when every report-only finding of it lies
  inside a `def` or `class` and none says the import itself fails, they are about code an NPU host
  never runs ("defined for code an NPU host never runs").

The chain is followed across modules (a module imported only by modules never imported on an NPU
host, with a cycle guard: a fixed point from the gated sites). A module no file of the run imports
stays reported (an entry point, a public module), as does one named in a string (a dynamic import),
and one imported anywhere outside such a gate. The findings of such a module become info with the
reason and the importer's place (`imported only behind a CUDA/ROCm-only gate: pkg/a.py:40 under
`_is_cuda``), which moot.py names as a skipped scope (invariant 2: nothing silently missed).

Called once, from `wholeprogram.review`, after its own pass: `unreachable(...)` answers the modules
that pass did not already find.
"""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from typing import Optional

from . import astcache
from .modpaths import ImportIndex, module_names, resolve_relative  # (the last two re-exported)

PHRASE = "imported only behind a CUDA/ROCm-only gate"  # (moot.PHRASES)
_MAX_ROUNDS = 8
_TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")
# a top-level function with no parameters whose body is one `return` (decorators allowed)
_PREDICATE_DEF = re.compile(rb"^def[ \t]+(\w+)[ \t]*\([ \t]*\)[^:\n]*:[ \t]*\n(?:[ \t]*(?:#[^\n]*|\"\"\"[^\n]*\"\"\")?\n)*"
                            rb"[ \t]+return[ \t]+([^\n]+)$", re.MULTILINE)
# a module-level flag bound to a platform question (`_is_cuda = is_cuda()`, `_on_sm90 = has_sm90()`)
# (or to a CUDA build's custom op, None on an NPU host: `getattr(torch.ops._C, "op", None)`, HC#9)
_FLAG_ASSIGN = re.compile(rb"^(\w+)[ \t]*=[ \t]*(?:[\w.]*(?:is_|has_|use_|_available|cuda|rocm|hip|capability|sm_?\d)"
                          rb"[\w.]*\(|getattr\([ \t]*torch\.ops\._C[ \t]*,)", re.MULTILINE)
_ANY_DEF = re.compile(rb"^def[ \t]+(\w+)[ \t]*\(", re.MULTILINE)
_PLATFORM_NAME = re.compile(r"(^|_)(cuda|hip|rocm|sm\d*|hopper|blackwell)($|_)")


_CLASS_GATE_WORDS = re.compile(rb"\bis_(?:hip|rocm|cuda|cuda_alike|xpu|blackwell|hopper)\(\)|(?:has|is)_device_capability\("
                               rb"|def[ \t]+(?:is_supported|_supports_current_device|can_implement)\b")
_PYTEST_MODULE = re.compile(r"(^|/)(test_[^/]*\.py|[^/]*_test\.py|conftest\.py)$")


def is_test(relpath: str) -> bool:
    """A test module (tests/, test_*.py, *_test.py, conftest.py): no runtime importer."""
    return bool(_TEST_FILE.search(relpath))


def false_predicates(python: list[int], texts) -> frozenset:
    """Names of the project's top-level functions without parameters whose every definition is one
    `return` false on an NPU host (`def is_cuda(): return torch.cuda.is_available() and
    torch.version.cuda`)."""
    from .testscopes import false_on_npu

    verdicts: dict[str, bool] = {}
    for i in python:
        data = texts.get(i) or b""
        if b"return" not in data or b"def " not in data:
            continue
        names = [m.group(1).decode() for m in _ANY_DEF.finditer(data)]
        names = [n for n in names if _PLATFORM_NAME.search(n)]  # (only predicates named for a platform)
        if not names:
            continue
        single = {}
        for match in _PREDICATE_DEF.finditer(data):
            single[match.group(1).decode()] = match.group(2).decode("utf-8", "replace").split("#")[0].strip()
        for name in names:
            body = single.get(name)
            verdict = body is not None and false_on_npu(body)
            verdicts[name] = verdicts.get(name, True) and verdict
    return frozenset(n for n, v in verdicts.items() if v)


class _Resolve(ast.NodeTransformer):
    """A condition with the importer's module-level flags replaced by their bound value, and the
    calls of the project's false predicates by False."""

    def __init__(self, bound: dict, predicates: frozenset):
        self.bound, self.predicates, self.depth = bound, predicates, 0

    def visit_Name(self, node: ast.Name):
        value = self.bound.get(node.id)
        if value is not None and self.depth < 3:
            self.depth += 1
            try:
                return self.visit(_copy(value))
            finally:
                self.depth -= 1
        return node

    def visit_Call(self, node: ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id in self.predicates and not node.args and not node.keywords:
            return ast.copy_location(ast.Constant(False), node)
        self.generic_visit(node)
        return node


def _copy(node: ast.AST) -> ast.AST:
    import copy

    return copy.deepcopy(node)


def module_bindings(tree: ast.Module) -> dict[str, ast.AST]:
    """Names bound exactly once at module level, outside any block, to an expression."""
    counts: dict[str, int] = defaultdict(int)
    values: dict[str, ast.AST] = {}
    for stmt in astcache.walk(tree):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
            stmt, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    counts[name.id] += 1
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            values[stmt.targets[0].id] = stmt.value
    return {n: v for n, v in values.items() if counts[n] == 1}


def gate_spans(tree: ast.Module, bound: dict, predicates: frozenset) -> list[tuple[int, int, str]]:
    """(first, last, condition) of the `if` bodies false on an NPU host once the flags are resolved."""
    from .testscopes import false_on_npu

    lines_of = []
    resolver = _Resolve(bound, predicates)
    for node in astcache.walk(tree):
        if not isinstance(node, ast.If) or not node.body:
            continue
        names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
        calls = {n.func.id for n in ast.walk(node.test) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        if not (names & bound.keys()) and not (calls & predicates):
            continue  # (wholeprogram decided the rest already)
        test = resolver.visit(_copy(node.test))
        if false_on_npu(ast.unparse(test)):
            first = node.body[0].lineno
            last = max(getattr(s, "end_lineno", s.lineno) or s.lineno for s in node.body)
            lines_of.append((first, last, ast.unparse(node.test)))
    return lines_of


def _platform_module(result, existing: set) -> Optional[str]:
    """Why a module is another platform's (never imported on an NPU host), or None: ROCm source the
    run leaves alone (named for ROCm, in a rocm folder), or a CUDA variant beside the project's NPU
    one (`cuda_fused_moe.py` beside `npu_fused_moe.py`)."""
    if result.skipped and result.skipped.startswith("ROCm/HIP source"):
        return f"a ROCm module ({result.skipped.split('(', 1)[-1].rstrip(')')})"
    sibling = _npu_sibling(result.relpath, existing)
    if sibling:
        return f"{_VARIANT} `{sibling}`"
    return None


@functools.lru_cache(maxsize=None)
def _variant_table() -> dict:
    from . import catalogue

    return catalogue.read_table("scopes.toml")["platforms"]


_VARIANT = "the CUDA variant beside"


def _npu_sibling(path: str, existing: set) -> Optional[str]:
    """`path` with a cuda/gpu/nvidia part of its file name replaced by npu/ascend, when that module is
    in the run (rules/scopes.toml [platforms] variant_words, npu_variants)."""
    table = _variant_table()
    parent, _, name = path.rpartition("/")
    parts = re.split(r"([-_.])", name)
    for k, part in enumerate(parts):
        if part.lower() in table["variant_words"]:
            for npu in table["npu_variants"]:
                replaced = npu.upper() if part.isupper() else npu.capitalize() if part[:1].isupper() else npu
                sibling = "".join([*parts[:k], replaced, *parts[k + 1:]])
                sibling = f"{parent}/{sibling}" if parent else sibling
                if sibling in existing:
                    return sibling
    return None


# (the import graph's names, as wholeprogram.py reads them: it calls this module, so this module
# does not import it)
_TYPING = "`TYPE_CHECKING`"
_UNGUARDED = "imported unguarded at module level"
_BY_NAME = (b"import_module(", b"__import__(", b"load_source(", b"spec_from_")
_LITERAL = re.compile(rb"[\"']([\w./:-]{1,200})[\"']")


def _last_name(relpath: str) -> str:
    stem = relpath[:-3].rsplit("/", 1)[-1]
    if stem == "__init__":
        stem = (relpath.rsplit("/", 2)[-2] if relpath.count("/") else "") or stem
    return stem


def unreachable(results, python: list[int], targets: list[int], texts, facts_of,
                extra: Optional[dict] = None, known: Optional[dict] = None) -> dict[int, str]:
    """{target file: reason} for the modules an NPU host never imports by the rules above, beyond
    `known` (wholeprogram's own answers, which count as unreachable importers too)."""
    extra, known = extra or {}, known or {}
    if not targets:
        return {}
    index = ImportIndex(results, python)
    sites: dict[int, list[tuple[int, int]]] = defaultdict(list)  # imported -> [(importer, line)]
    imports: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i in python:
        for j, line in index.files(facts_of(i)["imports"], i):
            sites[j].append((i, line))
            imports[i].append((j, line))
    existing = {results[i].relpath for i in python}
    platform: dict[int, Optional[str]] = {}

    def platform_of(i: int) -> Optional[str]:
        if i not in platform:
            why = _platform_module(results[i], existing)
            if why and why.startswith(_VARIANT) and any(
                    not is_test(results[k].relpath) for k, _line in sites.get(i, ())):
                # (a CUDA variant the project imports by name may be imported beside the NPU one
                # and chosen at run time: only one no module imports, which a device-matching
                # registry loads, or one imported only where an NPU host does not go, counts)
                why = None
            platform[i] = why
        return platform[i]

    predicates: Optional[frozenset] = None
    spans_of: dict[int, list] = {}
    classes_of: dict[int, list] = {}

    def resolved_spans(i: int) -> list:
        nonlocal predicates
        if i not in spans_of:
            from . import astcache

            spans_of[i] = []
            data = texts.get(i) or b""
            if predicates is None:
                predicates = false_predicates(python, texts)
            flags = {m.group(1) for m in _FLAG_ASSIGN.finditer(data)} | {p.encode() for p in predicates}
            if not flags or not re.search(rb"^[ \t]*(?:el)?if\b[^\n]*\b(?:" + b"|".join(
                    re.escape(f) for f in sorted(flags)) + rb")\b", data, re.MULTILINE):
                return spans_of[i]
            tree = astcache.parse(data)
            if tree is not None:
                spans_of[i] = gate_spans(tree, module_bindings(tree), predicates)
        return spans_of[i]

    def class_spans(i: int) -> list:
        """The methods of the importer's classes an NPU host never builds (capability.py: an
        `__init__` that raises there, a selection check that answers False there)."""
        if i not in classes_of:
            classes_of[i] = []
            data = texts.get(i) or b""
            # (a cheap test first: capability.gated_methods costs about 0.1 s a file, and a lazy
            # import sits in hundreds of files of a large tree; a class an NPU host never builds
            # names a platform or capability test or a support check)
            if b"class " in data and (b"raise " in data or b"return " in data) and _CLASS_GATE_WORDS.search(data):
                from . import astcache

                tree = astcache.parse(data)
                if tree is not None:
                    classes_of[i] = gated_class_spans(tree, data)
        return classes_of[i]

    lines_of: dict[int, list] = {}

    def gated(importer: int, line: int, deep: bool) -> Optional[str]:
        for first, last, condition in facts_of(importer)["blocks"]:
            if first <= line <= last:
                return _TYPING if condition == "TYPE_CHECKING" else f"`{' '.join(condition.split())[:70]}`"
        for first, last, why in extra.get(importer, ()):
            if first <= line <= last:
                return why
        if deep:
            if importer not in lines_of:
                lines_of[importer] = (texts.get(importer) or b"").splitlines()
            lines = lines_of[importer]
            if 0 < line <= len(lines) and lines[line - 1][:1] in (b" ", b"\t"):
                for first, last, condition in resolved_spans(importer):
                    if first <= line <= last:
                        return f"`{' '.join(condition.split())[:70]}`"
                for first, last, why in class_spans(importer):
                    if first <= line <= last:
                        return why
        return None

    found: dict[int, str] = dict(known)
    benchmarked: dict[int, str] = {}  # (imported by a benchmark besides gated library sites: policy P2)
    strings: dict[int, bool] = {}

    def named_in_a_string(i: int) -> bool:
        if i not in strings:
            word = _last_name(results[i].relpath).encode()
            # (a whole string that is a dotted name or a path ending in the module, not an option
            # `"--enable-fused-qk-norm-rope"` that only holds the word)
            quoted = re.compile(rb"[\"'](?:[\w-]+[./])*" + re.escape(word) + rb"(?:\.py)?(?:[.:]\w+)*[\"']")
            strings[i] = any(j != i and (literal != word or by_name(j)) and quoted.fullmatch(b'"' + literal + b'"')
                             for literal, j in string_index().get(word, ()))
        return strings[i]

    index: dict[bytes, list] = {}
    loads_by_name: dict[int, bool] = {}

    def string_index() -> dict[bytes, list]:
        """{word: [(string literal, file)]} of the run's short string literals, by their parts split
        on . / : (built once: one regex pass over every file, not one per module)."""
        if not index:
            for j, data in texts.items():
                for literal in set(_LITERAL.findall(data or b"")):
                    for part in set(re.split(rb"[./:]", literal)):
                        part = part[:-3] if part.endswith(b".py") else part
                        index.setdefault(part, []).append((literal, j))
            index.setdefault(b"", [])
        return index

    def by_name(j: int) -> bool:
        if j not in loads_by_name:
            loads_by_name[j] = any(call in (texts.get(j) or b"") for call in _BY_NAME)
        return loads_by_name[j]

    def verdict(i: int) -> Optional[str]:
        where = sites.get(i)
        if not where or _PYTEST_MODULE.search(results[i].relpath):
            return None  # (no importer: an entry point or a public module; pytest collects a test module itself)
        reasons, runtime, benches = [], 0, []
        for importer, line in where:
            if is_test(results[importer].relpath) and not is_test(results[i].relpath):
                continue  # (a test is no runtime importer)
            if _bench_only(results[importer].relpath, results[i].relpath):
                benches.append(f"{results[importer].relpath}:{line}")  # (policy P2: named, round-30 EC#31)
                continue
            why = platform_of(importer)
            if why is None and importer in found:
                why = "a module an NPU host never imports"
            if why is None:
                why = gated(importer, line, True)
                if why == _TYPING:
                    continue
            if why is None:
                return None
            runtime += 1
            reasons.append(f"{results[importer].relpath}:{line} ({why})" if platform_of(importer) or importer in found
                           else f"{results[importer].relpath}:{line} under {why}")
        if not runtime or named_in_a_string(i):
            return None
        shown = "; ".join(reasons[:2]) + (f"; and {len(reasons) - 2} more" if len(reasons) > 2 else "")
        if benches:
            named = ", ".join(benches[:3]) + (f" and {len(benches) - 3} more" if len(benches) > 3 else "")
            return f"{BENCH_ONLY} ({named}): its library imports lie where an NPU host does not go: {shown}"
        return f"{PHRASE}: {shown}"

    # candidates: what a gated site, a platform module or an unreachable module imports
    candidates: set[int] = set()
    for i in python:
        if platform_of(i) or i in found:
            candidates.update(j for j, _line in imports.get(i, ()))
    for j, where in sites.items():
        if any(gated(importer, line, False) not in (None, _TYPING) for importer, line in where):
            candidates.add(j)
    for j, where in sites.items():  # (indented import sites under a flag the project binds)
        if j in candidates or j in found:
            continue
        for importer, line in where:
            if gated(importer, line, True) not in (None, _TYPING):
                candidates.add(j)
                break
    for _round in range(_MAX_ROUNDS):
        grew = False
        for i in sorted(candidates - set(found)):
            why = verdict(i)
            if why is None:
                continue
            if not why.startswith(PHRASE):
                benchmarked[i] = why  # (a benchmark imports it: info, and it stays an importer of its own)
                continue
            found[i] = why
            grew = True
            candidates.update(j for j, _line in imports.get(i, ()))
        if not grew:
            break
    wanted = set(targets)
    out = {i: why for i, why in (*found.items(), *benchmarked.items()) if i in wanted and i not in known}
    # modules imported at module level whose imported names the importer uses only behind a gate
    for i in wanted - set(found):
        if results[i].relpath.endswith("__init__.py") or _PYTEST_MODULE.search(results[i].relpath):
            continue  # (a package's __init__ runs for every import of its modules)
        reasons = []
        for importer, line in sites.get(i, ()):
            if is_test(results[importer].relpath):
                continue
            why = platform_of(importer) or ("a module an NPU host never imports" if importer in found else None)
            if why is None:
                gate = gated(importer, line, True)
                if gate == _TYPING:
                    continue
                if gate is None:
                    # (cheap first: an importer without any gate an NPU host never enters cannot
                    # use the names only behind one; _used_only_in parses the importer)
                    if not (facts_of(importer)["blocks"] or extra.get(importer) or resolved_spans(importer)
                            or class_spans(importer)):
                        reasons = []
                        break
                    gate = _used_only_in(texts.get(importer) or b"", line, lambda n, importer=importer: gated(importer, n, True),
                                         results[importer].relpath, results[i].relpath)
                    if gate is None:
                        reasons = []
                        break
                    reasons.append(f"{results[importer].relpath}:{line} (its names used only under {gate})")
                    continue
                why = f"under {gate}"
            reasons.append(f"{results[importer].relpath}:{line} ({why})")
        if reasons and any(USED in r or "its names used" in r for r in reasons) and not named_in_a_string(i) \
                and _defined_only(results[i], texts.get(i)):
            shown = "; ".join(reasons[:2]) + (f"; and {len(reasons) - 2} more" if len(reasons) > 2 else "")
            out[i] = f"{USED}: {shown}"
    return out


USED = "defined for code an NPU host never runs"  # (moot.PHRASES)
# (testcallers27.ONLY_TESTS and its _BENCH, the same words: that module imports this one, so they are
# restated here; tests/test_h141.py holds them equal)
BENCH_ONLY = "reached on an NPU host only from tests/benchmarks"
BENCH_FILE = re.compile(r"(^|/)(benchmarks?/|bench[^/]*\.py$)")


def _bench_only(importer: str, module: str) -> bool:
    """A benchmark (not a test: those are no importer above) importing a library module: policy P2
    names it, it does not make the module reached (round-30 EC#31: vLLM's
    benchmark_fused_q_cutedsl.py beside the library's one import under `current_platform.is_cuda()`)."""
    return not is_test(importer) and BENCH_FILE.search(importer) is not None \
        and not is_test(module) and BENCH_FILE.search(module) is None


def _defined_only(result, data: Optional[bytes]) -> bool:
    """Every report-only finding of the module is inside a function or class (its decorators too)
    and none says the module fails to import: loading the module on an NPU host only defines it."""
    from . import astcache

    lowerable = [f for f in result.findings if not f.fixable and f.cell is None]  # (info too: all are lowered)
    if not any(f.severity != "info" for f in lowerable) or not data or any(_UNGUARDED in f.message for f in lowerable):
        return False
    tree = astcache.parse(data)
    if tree is None:
        return False
    spans = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([stmt.lineno, *(d.lineno for d in stmt.decorator_list)])
            spans.append((first, stmt.end_lineno or stmt.lineno))
    return all(any(a <= n <= b for a, b in spans)
               for f in lowerable for n in [f.line, *(line for line, _c, _s in f.also)])


def _used_only_in(data: bytes, line: int, gate, importer: str, module: str) -> Optional[str]:
    """The gate all uses of the names a module-level `from M import a, b` at `line` binds lie under
    (`gate(line)` answers the condition of a line, or None), or None: a use outside, a star import,
    a plain `import M`, a name exported (`__all__`) or used nowhere."""
    from . import astcache

    if _used_outside_gates(data, line, gate):
        return None  # (seen in the text: no parse)
    tree = astcache.parse(data)
    if tree is None:
        return None
    statement = next((s for s in tree.body if isinstance(s, ast.ImportFrom) and s.lineno <= line <= (s.end_lineno or s.lineno)), None)
    if statement is None or any(a.name == "*" for a in statement.names):
        return None
    named = (resolve_relative(importer, statement.level, statement.module or "") == module[:-3] if statement.level
             else statement.module in module_names(module))
    if not named:
        return None  # (`from pkg import mod`, or the module's package: not its names)
    names = {a.asname or a.name for a in statement.names}
    strings, uses = _name_uses(data)
    if names & strings:
        return None  # (named in a string: `__all__`, getattr)
    conditions = set()
    for name in names:
        for lineno, load in uses.get(name, ()):
            if not load:
                return None
            condition = gate(lineno)
            if condition is None or condition.startswith("`TYPE_CHECKING"):
                return None
            conditions.add(condition)
    return sorted(conditions)[0] if conditions else None


_FROM_IMPORT = re.compile(rb"[ \t]*from[ \t]+\.*[\w.]*[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]*)")


def _used_outside_gates(data: bytes, line: int, gate) -> bool:
    """A cheap test before `_used_only_in` parses the importer: a name the `from M import ...` at
    `line` binds appears, as code, on a line no gate covers (not after a `#` or inside quotes on
    its line, not after a dot). True means some use is outside: the answer is None. A name seen
    only in a docstring makes it True too, and the module's findings then stay (the safe side)."""
    lines = data.split(b"\n")
    if not 0 < line <= len(lines):
        return False
    start = sum(len(text) + 1 for text in lines[:line - 1])
    match = _FROM_IMPORT.match(data, start)
    if match is None:
        return False
    names = [part.strip().split()[-1] for part in match.group(1).strip(b"()\\ \t\n").split(b",") if part.strip()]
    if not names or not all(re.fullmatch(rb"\w+", n) for n in names):
        return False
    last = line + data.count(b"\n", start, match.end())
    word = re.compile(rb"(?<![\w.])(?:" + b"|".join(re.escape(n) for n in names) + rb")\b")
    for number, text in enumerate(lines, 1):
        if line <= number <= last:
            continue
        for found in word.finditer(text):
            before = text[:found.start()]
            if b"#" in before or before.count(b'"') % 2 or before.count(b"'") % 2:
                continue
            condition = gate(number)
            if condition is None or condition.startswith("`TYPE_CHECKING"):
                return True
            break
    return False


@functools.lru_cache(maxsize=4)
def _name_uses(data: bytes) -> tuple[frozenset, dict[str, list[tuple[int, bool]]]]:
    """(the file's string constants, {name: [(line, loaded)]} of every Name node), from one walk
    of its tree: an importer is asked about each of its imports in turn."""
    from . import astcache

    tree = astcache.parse(data)
    strings, uses = set(), defaultdict(list)
    for node in astcache.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Name):
            uses[node.id].append((node.lineno, isinstance(node.ctx, ast.Load)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.add(node.value)
    return frozenset(strings), dict(uses)


# ----------------------------------------------------------------------------- classes an NPU host never builds
def gated_class_spans(tree: ast.Module, data: bytes) -> list[tuple[int, int, str]]:
    """(first line, last line, reason) of the methods of the file's classes an NPU host never
    builds (capability.gated_methods): for `unreachable`, whose "names used only behind a gate"
    then covers a helper module whose names only such a class uses (SGLang's `int4fp8_utils.py`,
    used only by `QuarkInt4Fp8MoEMethod`, whose `__init__` raises unless on ROCm)."""
    from . import capability, testscopes

    lines = data.decode("utf-8", "replace").splitlines(keepends=True)
    try:
        return [(first, last, why) for first, last, why, _typing in
                capability.gated_methods(tree, lines, testscopes.npu_truth, testscopes.source_segment)]
    except RecursionError:
        return []
