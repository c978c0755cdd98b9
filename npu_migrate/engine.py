"""The Python engine: the life of one Python file, top to bottom.

    prefilter (trigger words, NPU-aware code, a skip-file comment) -> pathological-input limits
    -> parse (the hot slices, else the whole file) -> rules (every family of families/, one traversal) +
    leftover sweep -> shim import -> generate (the cold statements put back) -> new bytes and
    findings

`migrate_source` is pure (bytes in, new bytes and findings out) so that tests, the notebook
engine (a notebook's code cells, as one module) and worker processes share it. Running many files
(workers, the time budget, the cache) is run.py's; writing and injecting the shim are the
commands'.
"""

from __future__ import annotations

import gc
import re
from typing import Optional

import libcst as cst

from . import hotslice, imports, placement, suppress
from .families.context import EXTRA_HOT, dotted_name
from .families.dispatch import Dispatcher
from .model import (  # noqa: F401
    FileResult,
    HeavyFile,
    Options,
    heavy_isolated,
    isolate_heavy,
    tool_finding,
)
from .sourcemap import SourceMap
from .sweep import Sweep, rule_reads
from .triggers import PREFILTER, TRIGGER_WORDS, TRIGGERS  # noqa: F401  (re-exported)

# The same test on the text of one statement; imports of torch are always visited.
# An earlier run's output is read too: `backend = npu_compat.dist_backend() if ...` assigns a known
# backend variable, not an unseen backend (NPU304); `.to(npu_compat.device()).double()` still puts
# float64 on the accelerator (NPU930). (The default shim name only: a file with no trigger word
# left is not parsed at all.)
HOT_STATEMENT = re.compile(TRIGGERS + r"|\bimport\b[^\n]*\btorch\b|\btorch\b[^\n]*\bimport\b|\.dist_backend\("
                           r"|\bnpu_compat\.device")
# A file that already speaks NPU is left byte-identical (patterns.md E26). Finer than a file, code
# that chooses between CUDA and the NPU is left alone scope by scope (families/platform.py).
NPU_AWARE = re.compile(rb"^\s*(import|from)\s+torch_npu\b|\btorch\.npu\b|\bis_npu_available\b", re.M)
NPU_AWARE_REASON = "already NPU-aware (uses torch_npu, torch.npu or is_npu_available)"
MAIN_GUARD = re.compile(rb"""__name__\s*==\s*['"]__main__['"]""")
DEFINES_CUDA_METHOD = re.compile(rb"^\s+def\s+cuda\s*\(\s*self\b", re.M)


# ------------------------------------------------------------------ hostile input, before libcst
#
# libcst's native parser recurses once per level of nesting and has no guard: 2,000 nested
# brackets, a chain of ~8,000 operators or ~9,000 `elif` branches overflow its stack and kill the
# process (SIGSEGV), and its time grows with the square of an expression's depth (a 4,000-term
# `a + a + ...` takes 5.6 s, 2,000 chained subscripts 7.7 s). Its code generation already gives
# up (RecursionError, NPU001) on anything nested deeper than about 330. So the text libcst is
# about to parse is measured first, by a scan of its bytes, and a file beyond these limits is
# NPU001 and left unchanged; the limits sit far below every crash measured.
MAX_BRACKET_DEPTH = 200  # CPython's own tokenizer refuses a 201st nested bracket
# operators, calls, subscripts, attribute accesses and terms chained in one expression (the
# scan's estimate of its depth); the slowest shape at the limit (chained subscripts) parses in 0.4 s
MAX_EXPRESSION_DEPTH = 500
MAX_ELIF = 2000  # `elif` branches in one file (libcst nests each in the one before)
# Within the limits, a file may still keep libcst's native parser busy for long: many deep
# expressions (each at the limit takes up to 0.4 s), or many MiB (about 5 s a MiB). Python cannot
# interrupt the native parser, so such a file is migrated in a process of its own that can be
# killed at the time budget, when the run is in-process (workers can be killed anyway).
_HEAVY_DEPTH = 100  # no expression of torch's own tree goes deeper than about 40
_HEAVY_OPERATORS = 2000  # operators read deeper than _HEAVY_DEPTH in one file
_HEAVY_BYTES = 4 * 1024 * 1024

# HeavyFile and the switch that raises it live in model.py, so that run.py can set the switch
# without importing the engine (libcst).

# Comments, line continuations and strings, which the scan sets aside (an f-string's fields stay).
_STRIPPED = re.compile(
    rb"#[^\n]*"
    rb"|\\\n"
    rb"|'''[^'\\]*(?:(?:\\[\s\S]|'(?!''))[^'\\]*)*(?:'''|\Z)"
    rb'|"""[^"\\]*(?:(?:\\[\s\S]|"(?!""))[^"\\]*)*(?:"""|\Z)'
    rb"|'[^'\\\n]*(?:\\[\s\S][^'\\\n]*)*'?"
    rb'|"[^"\\\n]*(?:\\[\s\S][^"\\\n]*)*"?'
)
_STRING_PREFIX = re.compile(rb"(?<![\w])[rRbBuUfF]{1,2}\Z")
_FIELD_BRACE = re.compile(rb"\{\{|\}\}|[{}]")
# -> "~", an operator (`else` is not counted: `a if b else c` is one level)
_OPERATOR_WORDS = re.compile(rb"\b(?:and|or|not|if|lambda|await)\b")
_SKELETON = b"()[]{},;\n'~+-*/%@&|^<>."  # what the scan reads; "'" is a string, "\0" a line break in one
_NOT_SKELETON = bytes(sorted(set(range(256)) - set(_SKELETON)))
_NOT_SKELETON_OR_MARK = bytes(sorted(set(range(256)) - set(_SKELETON) - {0}))
_BRACKET_STEP = {ord("("): 1, ord("["): 1, ord("{"): 1, ord(")"): -1, ord("]"): -1, ord("}"): -1}
# A string counts only when another follows it (implicit concatenation nests in libcst): the last
# of each run is dropped. (An f-string is "'(" and its fields: a "(" may follow one.)
_LAST_STRING = re.compile(rb"'(?![\n\0]*['(])")
# Each byte of the skeleton: an operator's precedence (1 the loosest), or what else it is.
_CLOSE, _RESTART, _LINE_END, _NOTHING = -1, -2, -3, 0
_TRAILER = 8  # a call, subscript, display or parenthesis binds as tight as a dot
_OPENING = frozenset(b"([{")
_PRECEDENCE = [_NOTHING] * 256
for _chars, _level in (("~", 1), ("<>", 2), ("|^&", 3), ("+-", 5), ("*/%@", 6), (".([{", _TRAILER), ("'", 9),
                       (")]}", _CLOSE), (",", _RESTART), ("\n;", _LINE_END)):
    for _char in _chars:
        _PRECEDENCE[ord(_char)] = _level


def _fstring_fields(text: bytes) -> bytes:
    """The replacement fields of an f-string (`{{` and `}}` are literal braces), as one bracket
    each: they nest inside the string as far as libcst's parser is concerned."""
    fields, depth, start = [], 0, 0
    for match in _FIELD_BRACE.finditer(text):
        brace = match.group()
        if len(brace) == 2 and depth == 0:
            continue
        if brace[0] == 123:  # "{" (or "{{" inside a field: two)
            if depth == 0:
                start = match.end()
            depth += len(brace)
        elif depth:
            used = min(depth, len(brace))  # "}}" may close a format spec's field and then this one
            depth -= used
            if depth == 0:
                fields.append(b"(" + text[start:match.start() + used - 1] + b")")
    if depth:
        fields.append(b"(" + text[start:])
    return b"".join(fields)


def _set_aside(match: re.Match) -> bytes:
    text = match.group()
    if text[0] == 35:  # a comment
        return b""
    marks = b"\0" * text.count(b"\n")  # line breaks that do not end a logical line
    if text[0] == 92:  # a line continuation
        return marks
    start = match.start()
    prefix = _STRING_PREFIX.search(match.string, max(0, start - 3), start)
    if prefix is not None and b"f" in prefix.group().lower():
        fields = _fstring_fields(text)
        if fields:  # (its line breaks are all in `marks`)
            return b"'" + _strip_for_scan(fields).translate(None, b"\n\0") + marks
    return b"'" + marks


def _strip_for_scan(source: bytes) -> bytes:
    return _OPERATOR_WORDS.sub(b"~", _STRIPPED.sub(_set_aside, source))


def _scan_depths(skeleton: bytes) -> tuple[Optional[int], int]:
    """Where in the skeleton an expression first goes deeper than the limits (None if nowhere),
    and how many operators it read deeper than _HEAVY_DEPTH.

    An estimate of the depth of libcst's tree, by operator precedence: each operator (operator
    word, dot, bracket, string run on from another) adds one to the chain of its precedence,
    and ends the chains of the operators that bind tighter (`a*b + c*d + ...` is as deep as its
    `+` chain, plus one product). A bracket's contents start afresh, on top of the depth where it
    opens; a comma starts afresh. A line break (or `;`) outside brackets ends a logical line;
    "\\0" (a line break inside a string) is not read here.
    """
    frames: list[tuple[list, int]] = []  # (chains, depth) of the enclosing brackets
    heavy = 0  # operators read deeper than _HEAVY_DEPTH
    chains: list[list[int]] = []  # [precedence, length], the loosest first
    depth = outer = 0  # this bracket's depth (the sum of the lengths), the enclosing ones'
    precedence, opening = _PRECEDENCE, _OPENING
    limit = MAX_EXPRESSION_DEPTH
    for index, byte in enumerate(skeleton):
        level = precedence[byte]
        if level > 0:  # an operator
            while chains and chains[-1][0] > level:
                depth -= chains.pop()[1]
            if chains and chains[-1][0] == level:
                chains[-1][1] += 1
            else:
                chains.append([level, 1])
            depth += 1
            if outer + depth > _HEAVY_DEPTH:
                heavy += 1
                if outer + depth > limit:
                    return index, heavy
            if level == _TRAILER and byte in opening:
                if len(frames) >= MAX_BRACKET_DEPTH:
                    return index, heavy
                frames.append((chains, depth))
                outer += depth
                chains, depth = [], 0
        elif level == _CLOSE:
            if frames:
                chains, depth = frames.pop()
                outer -= depth
            else:
                chains, depth = [], 0  # an unbalanced closing bracket: the parser will say so
        elif level == _RESTART or (level == _LINE_END and not frames):
            chains, depth = [], 0
    return None, heavy


def _skeleton(stripped: bytes, drop: bytes) -> bytes:
    skeleton = _LAST_STRING.sub(b"", stripped.translate(None, drop))
    for double in (b"**", b"//", b"<<", b">>"):  # one operator each
        skeleton = skeleton.replace(double, double[:1])
    return skeleton


def pathological(source: bytes) -> Optional[tuple[str, int]]:
    """(why, line) when libcst must not be given this text: it holds a NUL byte (CPython will
    not compile it), or it is nested beyond the limits above; None for any ordinary file.

    The scan is a few regular-expression passes in C and one loop over the bytes that matter
    (brackets, operators, commas, line breaks: a twelfth of a typical file)."""
    return _measure(source)[0]


def _measure(source: bytes) -> tuple[Optional[tuple[str, int]], bool]:
    """(pathological's answer, whether parsing may take long: deep expressions, or many MiB)."""
    nul = source.find(b"\0")
    if nul >= 0:
        return ("contains a NUL byte, which CPython refuses in source code", source.count(b"\n", 0, nul) + 1), False
    heavy = len(source) > _HEAVY_BYTES
    if not source.isascii():
        import io
        import tokenize

        try:
            encoding = tokenize.detect_encoding(io.BytesIO(source).readline)[0]
            if encoding not in ("utf-8", "utf-8-sig"):
                # (a multi-byte encoding may hold quote or backslash bytes inside characters)
                source = source.decode(encoding).encode("utf-8")
        except (SyntaxError, LookupError, UnicodeDecodeError):
            return None, heavy  # the parser reports the encoding
    if b"\r" in source:
        source = source.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    stripped = _strip_for_scan(source)
    if stripped.count(b"elif") > MAX_ELIF:
        branches = list(re.finditer(rb"\belif\b", stripped))
        if len(branches) > MAX_ELIF:
            at = branches[MAX_ELIF].start()
            return (f"{len(branches)} `elif` branches (limit {MAX_ELIF} in one file: libcst nests each "
                    f"branch in the one before, and its parser crashes on a chain of about 9,000)",
                    stripped.count(b"\n", 0, at) + stripped.count(b"\0", 0, at) + 1), heavy
    at, deep = _scan_depths(_skeleton(stripped, _NOT_SKELETON))
    if at is None:
        return None, heavy or deep > _HEAVY_OPERATORS
    # Beyond a limit (rare): where, from the skeleton with its "\0" marks, for the line number.
    from itertools import accumulate

    marked = _skeleton(stripped, _NOT_SKELETON_OR_MARK)
    steps = (_BRACKET_STEP.get(byte, 0) for byte in marked)
    depths = list(accumulate(steps, lambda depth, step: max(0, depth + step)))  # (a stray ")" is no -1)
    deepest = max(depths, default=0)
    if deepest > MAX_BRACKET_DEPTH:
        at = next(i for i, depth in enumerate(depths) if depth > MAX_BRACKET_DEPTH)
        why = f"brackets nested {deepest} deep (limit {MAX_BRACKET_DEPTH}: CPython's own parser refuses more)"
    else:
        at = _scan_depths(marked)[0] or 0
        why = (f"an expression nested too deeply: more than {MAX_EXPRESSION_DEPTH} operators, calls, "
               f"subscripts or terms chained in one expression (libcst's parse time grows with the "
               f"square of that number, and its parser crashes on about 8,000)")
    return (why, marked.count(b"\n", 0, at) + marked.count(b"\0", 0, at) + 1), heavy


def _binds_shim(stmt: cst.CSTNode, shim: str) -> Optional[str]:
    """The module a simple statement imports the shim from: "npu_compat" for `import npu_compat`,
    "mypkg.npu_compat" for `from mypkg import npu_compat`; None when it binds no shim."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return None
    for small in stmt.body:
        if isinstance(small, cst.Import):
            for alias in small.names:
                if alias.asname is None and isinstance(alias.name, cst.Name) and alias.name.value == shim:
                    return shim
        elif isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None:
            if isinstance(small.names, cst.ImportStar):
                continue
            for alias in small.names:
                if alias.asname is None and isinstance(alias.name, cst.Name) and alias.name.value == shim:
                    return f"{dotted_name(small.module)}.{shim}"
    return None


def shim_import_statements(module: cst.Module, shim: str) -> list[tuple[int, str]]:
    """(index in module.body, module imported) of each module-level statement that binds the
    shim: a plain import, or a bootstrap `try` whose first statement does."""
    found = []
    for index, statement in enumerate(module.body):
        first = statement
        if isinstance(statement, cst.Try) and statement.body.body:
            first = statement.body.body[0]
        bound = _binds_shim(first, shim)
        if bound is not None:
            found.append((index, bound))
    return found


def already_imports_shim(module: cst.Module, shim: str) -> bool:
    return bool(shim_import_statements(module, shim))


def _insertion_index(module: cst.Module) -> int:
    """After the docstring, `from __future__` and the leading block of imports."""
    index = 0
    body = module.body
    if body and isinstance(body[0], cst.SimpleStatementLine) and isinstance(body[0].body[0], cst.Expr):
        if isinstance(body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString)):
            index = 1
    while index < len(body):
        stmt = body[index]
        if isinstance(stmt, cst.SimpleStatementLine) and all(
            isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
        ):
            index += 1
            continue
        break
    return index


def import_line(spec: placement.ShimImport) -> str:
    if spec.package:
        return f"from {spec.package} import {spec.name}"
    return f"import {spec.name}"


def bootstrap_code(spec: placement.ShimImport, path: str, base: str) -> str:
    """The guarded import of a file that may run where the shim's package is not importable:
    it appends `path` (from `base`, an expression for the file's folder) to sys.path."""
    parts = ", ".join(f'"{part}"' for part in path.split("/"))
    line = import_line(spec)
    # `import npu_compat` fails with ModuleNotFoundError; `from pkg import npu_compat` with
    # ImportError when an installed `pkg` predates the shim
    error = "ImportError" if spec.package else "ModuleNotFoundError"
    what = "the package" if spec.package else "the repository root"
    return (  # lint-clean: one import a line, sorted
        f"try:\n"
        f"    {line}\n"
        f"except {error}:  # run as a script: make {what} importable (npu-migrate)\n"
        f"    import os\n"
        f"    import sys\n"
        f"\n"
        f"    sys.path.append(os.path.join({base}, {parts}))\n"
        f"    {line}\n"
    )


def _foreign_shim_imports(module: cst.Module, spec: placement.ShimImport) -> list[cst.CSTNode]:
    """Module-level statements that import the shim, or a module of it, from elsewhere than
    `spec` says: an earlier run's top-level `import npu_compat` in a project now packaged."""
    found = [module.body[i] for i, bound in shim_import_statements(module, spec.name) if bound != spec.module]
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None:
                    name = dotted_name(small.module) or ""
                    if (name == spec.name or name.startswith(spec.name + ".")) and stmt not in found:
                        found.append(stmt)
    return found


def _rehome_submodule_imports(module: cst.Module, spec: placement.ShimImport) -> cst.Module:
    """`from npu_compat.flash_attn import f` / `from npu_compat import flash_attn` written by an
    earlier run for a root shim: from the shim of the file's package now."""
    if not spec.package:
        return module
    body = list(module.body)
    changed = False
    for index, stmt in enumerate(body):
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        smalls = list(stmt.body)
        for i, small in enumerate(smalls):
            if isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None:
                name = dotted_name(small.module)
                if name == spec.name or name.startswith(spec.name + "."):
                    smalls[i] = small.with_changes(module=cst.parse_expression(f"{spec.package}.{name}"))
        if smalls != list(stmt.body):
            body[index] = stmt.with_changes(body=smalls)
            changed = True
    return module.with_changes(body=body) if changed else module


def _leading_block_imports(module: cst.Module, package: str) -> bool:
    """The file's leading import block imports `package` (or a module of it) absolutely."""
    start, end = imports.leading_block(module)
    for stmt in module.body[start:end]:
        for small in getattr(stmt, "body", ()):
            if isinstance(small, cst.Import):
                names = [dotted_name(a.name) or "" for a in small.names]
            elif isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None:
                names = [dotted_name(small.module) or ""]
            else:
                continue
            if any(n == package or n.startswith(package + ".") for n in names):
                return True
    return False


SCRIPT_BASE = "os.path.dirname(os.path.abspath(__file__))"


def add_shim_import(module: cst.Module, spec: placement.ShimImport, bootstrap: str,
                    first_party: frozenset = frozenset(), rehome: bool = True) -> cst.Module:
    """Import the shim as `spec` says: where isort would put it, or, for a file that may run as a
    script (`bootstrap` is the path to put on sys.path), a guarded import after the leading
    imports. A file that imports the shim from elsewhere (an earlier run's placement, before the
    project was packaged) has that import replaced when `rehome` (NPU004) says so."""
    existing = shim_import_statements(module, spec.name)
    wanted_bootstrap = bool(bootstrap)
    body = list(module.body)
    if any(bound == spec.module for _index, bound in existing) or (existing and not rehome):
        return module  # already there (or from elsewhere, and NPU004 is not selected)
    for index, _bound in reversed(existing):
        del body[index]
    module = module.with_changes(body=body)
    if wanted_bootstrap:
        index = _insertion_index(module)
        body = list(module.body)
        guarded = cst.parse_statement(bootstrap_code(spec, bootstrap, SCRIPT_BASE))
        if index > 0 and imports.is_import_line(body[index - 1]):
            guarded = guarded.with_changes(leading_lines=[cst.EmptyLine()])  # after the import block
        body[index:index] = [guarded]
        return module.with_changes(body=body)
    return imports.add_import(module, name=spec.name, from_module=spec.package or None,
                              first_party=first_party | {spec.module.split(".")[0]})


def migrate_source(source: bytes, relpath: str, options: Options) -> FileResult:
    """Migrate one file's bytes. Never raises for bad input: problems become findings."""
    # A parsed module is millions of short-lived objects without reference cycles: reference
    # counting frees them, and the cycle collector, run again and again as they are allocated,
    # only walks them (a sixth of the time on torch's tree). It is off while one file is migrated.
    collecting = gc.isenabled()
    gc.disable()
    try:
        result = FileResult(relpath=relpath, original=source)
        # (quick_search: the regex answer, by `in` for plain words and before scanning for a word)
        if not hotslice.quick_search(PREFILTER, source) and not _imports_root_shim(source, relpath, options):
            result.skipped = "no CUDA trigger words"
            return result
        if hotslice.quick_search(NPU_AWARE, source):
            result.skipped = NPU_AWARE_REASON
            return result
        suppressions = suppress.parse(source)
        if suppressions.skips_file:
            result.skipped = "npu-migrate: skip-file comment"
            return result
        slices = None
        if options.hot_slices:
            # what makes a statement hot for the rules (Dispatcher.on_visit), what else rules read
            try:
                slices = hotslice.reduce(source, (HOT_STATEMENT, EXTRA_HOT), TRIGGER_WORDS, rule_reads())
            except RecursionError:
                slices = None  # statements nested too deep for its walk (an `elif` chain): the whole file
        try:
            if slices is not None:
                sliced = _migrate_parsed(source, slices, relpath, options, suppressions, result)
                if sliced is not None:
                    return sliced
                result = FileResult(relpath=relpath, original=source)  # fall back to the whole file
            return _migrate_parsed(source, None, relpath, options, suppressions, result)
        except RecursionError:
            # Python's own recursion limit in libcst's code generation or traversal (an expression
            # nested thousands deep, such as a generated table): say so, change nothing.
            result = FileResult(relpath=relpath, original=source)
            finding = tool_finding("NPU001", relpath, "nested too deeply for the code generator; left unchanged")
            if not suppressions.suppresses(finding.code, finding.line):
                result.findings.append(finding)
            return result
    finally:
        if collecting:
            gc.enable()


def _imports_root_shim(source: bytes, relpath: str, options: Options) -> bool:
    """A file an earlier run gave `import npu_compat` (the root shim) in a project whose shim now
    lives in its package: it is parsed to move the import, though it has no trigger word left."""
    if not options.shim_specs:
        return False
    spec = placement.spec_for(options, relpath)
    if not spec.package:
        return False
    name = re.escape(options.shim_name.encode())
    return re.search(rb"^[ \t]*(import[ \t]+" + name + rb"\b|from[ \t]+" + name + rb"[. \t])", source, re.M) is not None


def _migrate_parsed(source, slices, relpath, options, suppressions, result) -> Optional[FileResult]:
    """Parse (the hot slices of) a file and run the rules; None when the slices did not work out."""
    text = slices.reduced if slices is not None else source
    refused, heavy = _measure(text)  # never hand libcst what crashes it or takes it minutes
    if heavy and heavy_isolated():
        raise HeavyFile()  # (run_files migrates the file again, in a process it can kill)
    if refused is not None:
        # (the slices are a part of the file: the whole file is no better)
        finding = tool_finding("NPU001", relpath, refused[0], refused[1])
        if not suppressions.suppresses(finding.code, finding.line):
            result.findings.append(finding)
        return result
    try:
        module = cst.parse_module(text)
    except UnicodeDecodeError as exc:
        finding = tool_finding("NPU002", relpath, str(exc))
    except cst.ParserSyntaxError as exc:
        finding = tool_finding("NPU001", relpath, exc.message, exc.raw_line or 1, exc.raw_column + 1)
    except (SyntaxError, ValueError, LookupError, RecursionError) as exc:
        finding = tool_finding("NPU001", relpath, f"{type(exc).__name__}: {exc}")
    else:
        finding = None
    if finding is not None:
        if slices is not None:
            return None  # let the whole-file parse give the exact error
        if not suppressions.suppresses(finding.code, finding.line):
            result.findings.append(finding)
        return result
    result.encoding = module.encoding

    restore = (lambda text: hotslice.restore_text(text, slices)) if slices is not None else None
    source_map = SourceMap(module, restore)
    if slices is not None and source_map.text.encode(module.encoding) != slices.reduced:
        # libcst does not give the reduced text back as it was (several indented comments left
        # at the end of the module by a placeholder lose all but one): parse the whole file
        return None
    rules = Dispatcher(
        module,
        source_map,
        relpath,
        options.enabled,
        shim=options.shim_name,
        shim_module=placement.spec_for(options, relpath).module,
        defines_cuda_method=hotslice.quick_search(DEFINES_CUDA_METHOD, source),
        hot_statement=HOT_STATEMENT,
        suppressed=suppressions.suppresses,
        first_party=options.first_party,
        sibling_classes=options.sibling_classes(relpath),
        foreign_bound=options.foreign_bound(relpath),
    )
    new_module = rules.finish(module.visit(rules))  # every family in one traversal, then NPU206
    ctx = rules.ctx
    module.visit(Sweep(ctx))
    spec = placement.spec_for(options, relpath)
    rehome = _foreign_shim_imports(module, spec) if spec.package else []
    if rehome and "NPU004" in options.enabled:
        # written by an earlier run for a root shim: the package's own shim now (NPU004)
        rehome = [stmt for stmt in rehome if not ctx.is_suppressed("NPU004", stmt)]
        for stmt in rehome:
            ctx.add("NPU004", stmt, True)
    else:
        rehome = []
    binds = {id(module.body[i]) for i, bound in shim_import_statements(module, spec.name) if bound != spec.module}
    if ctx.uses_shim or any(id(stmt) in binds for stmt in rehome):
        # A file runs as a script when it has a main guard or is not in a package: `python
        # sub/script.py` puts sub/, not the root, on sys.path, so it needs the bootstrap.
        bootstrap = spec.bootstrap(bool(MAIN_GUARD.search(source)))
        if bootstrap and spec.package and _leading_block_imports(module, spec.package.split(".")[0]):
            bootstrap = ""  # the file's own imports of the package must work first: so will ours
        new_module = add_shim_import(new_module, spec, bootstrap, options.first_party, bool(rehome))
    if rehome:
        new_module = _rehome_submodule_imports(new_module, spec)
    findings = ctx.findings
    if new_module is module:
        # Nothing was replaced (the dispatcher hands back untouched nodes themselves): the code
        # is the source map's, generated from this very module, so it is not generated again.
        new = source_map.text.encode(module.encoding)
        if slices is not None:
            new = hotslice.restore(new, slices)
            if new is None:
                return None
    else:
        new = _generate(source_map, new_module, slices)
        if new is None:
            return None
        # Imports the rewrite left unused (`import torch` whose only use was torch.cuda.X): gone,
        # as a linter would ask. Only those: an import unused before stays. The sliced modules
        # show the uses in the statements the rewrite changed; the whole new text settles the
        # others (cold and unchanged ones: `names_used_in_text` finds what libcst would, and more).
        unused = imports.lost_in_changed(module, new_module) - {options.shim_name}
        if unused:
            drop = unused - imports.names_used_in_text(new.decode(new_module.encoding, "replace"), unused)
            if drop:
                new_module = imports.remove_import_bindings(new_module, drop)
                new = _generate(source_map, new_module, slices)
                if new is None:
                    return None
    result.findings = sorted(findings)
    result.suppressed = ctx.suppressed_count
    result.skipped_scopes = ctx.skipped_scopes()
    if new != source:
        result.new = new
    return result


def _generate(source_map: SourceMap, new_module: cst.Module, slices) -> Optional[bytes]:
    """The new module's code, with the cold statements put back; None if a placeholder was lost."""
    new = source_map.code(new_module).encode(new_module.encoding)  # = new_module.bytes
    if slices is not None:
        # (findings need nothing: their source text is read with the slices put back)
        return hotslice.restore(new, slices)
    return new
