"""The life of one file, and of one run.

    discover -> prefilter -> parse -> rules (one traversal) + leftover sweep -> render -> write
    atomically -> inject the shim once per run.

`migrate_source` is pure (bytes in, new bytes and findings out) so that tests, the CLI and worker
processes share it.
"""

from __future__ import annotations

import functools
import gc
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional

import libcst as cst

from . import catalogue, hotslice, imports, placement, suppress
from .findings import Finding
from .source import read_regular
from .sourcemap import SourceMap
from .sweep import Sweep, rule_reads
from .transform import EXTRA_HOT, ImportPruner, Migrator, dotted_name

# Cheap byte-level test: a file without any of these cannot hold a CUDA-only construct.
# It must match everything the rules and the sweep look for (rules/sweep.toml).
_TRIGGERS = (
    r"cuda|CUDA|nccl|NCCL|cudnn|nvtx|flash_attn|flash_attention|apex|xformers|triton|cpp_extension"
    r"|hadamard|cupy|nvidia|transformer_engine|bitsandbytes"
    r"|DataParallel|data_parallel|GradScaler|reduce-overhead|max-autotune|init_process_group|new_group"
    r"|float8|_scaled_mm|_scaled_grouped_mm|vllm|deepspeed|torchao"
    # names the rule tables act on that hold none of the words above
    r"|new_subgroups|is_backend_available"
)
PREFILTER = re.compile(_TRIGGERS.encode())
TRIGGER_WORDS = re.compile(_TRIGGERS)
# The same test on the text of one statement; imports of torch are always visited.
# An earlier run's output is read too: `backend = npu_compat.dist_backend() if ...` assigns a known
# backend variable, not an unseen backend (NPU304); `.to(npu_compat.device()).double()` still puts
# float64 on the accelerator (NPU930). (The default shim name only: a file with no trigger word
# left is not parsed at all.)
HOT_STATEMENT = re.compile(_TRIGGERS + r"|\bimport\b[^\n]*\btorch\b|\btorch\b[^\n]*\bimport\b|\.dist_backend\("
                           r"|\bnpu_compat\.device")
# A file that already speaks NPU is left byte-identical (patterns.md E26).
NPU_AWARE = re.compile(rb"^\s*(import|from)\s+torch_npu\b|\btorch\.npu\b|\bis_npu_available\b", re.M)
MAIN_GUARD = re.compile(rb"""__name__\s*==\s*['"]__main__['"]""")
DEFINES_CUDA_METHOD = re.compile(rb"^\s+def\s+cuda\s*\(\s*self\b", re.M)


@dataclass(frozen=True)
class Options:
    enabled: frozenset
    shim_name: str = "npu_compat"
    npu_aware_dirs: frozenset = frozenset()  # relative dirs holding torch_npu-aware code
    package_dirs: frozenset = frozenset()  # relative dirs with an __init__.py
    hot_slices: bool = True  # parse only statements a rule can act on (hotslice.py)
    rewrite_scripts: bool = False  # opt-in: rewrite launch scripts (shell), not only report them
    # folder -> placement.ShimImport, for a packaged project (placement.plan); () for the root shim
    shim_specs: tuple = ()
    # top-level names of the project's own modules and packages (isort's first party)
    first_party: frozenset = frozenset()

    @functools.cached_property
    def shim_spec_map(self) -> dict:
        return dict(self.shim_specs)


@dataclass
class FileResult:
    relpath: str
    findings: list[Finding] = field(default_factory=list)
    original: Optional[bytes] = None
    new: Optional[bytes] = None  # None: no change
    encoding: str = "utf-8"
    skipped: Optional[str] = None  # why the file was not parsed (no trigger words, NPU-aware)
    suppressed: int = 0  # constructs left alone because a comment said so
    # not for the cache: the file ran out of time or killed the process migrating it (the
    # machine's load, the time budget or a fixed libcst may give another answer next time)
    uncached: bool = False

    @property
    def changed(self) -> bool:
        return self.new is not None and self.new != self.original


def _tool_finding(code: str, relpath: str, detail: str, line: int = 1, column: int = 1) -> Finding:
    rule = catalogue.rule(code)
    return Finding(relpath, line, column, code, f"{rule.message}: {detail}", False, "")


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


def _already_imports_shim(module: cst.Module, shim: str) -> bool:
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
        if index > 0 and imports._is_import_line(body[index - 1]):
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
        parent = os.path.dirname(relpath)
        if hotslice.quick_search(NPU_AWARE, source) or parent in options.npu_aware_dirs:
            result.skipped = "already NPU-aware (torch_npu used here or beside it)"
            return result
        suppressions = suppress.parse(source)
        if suppressions.skips_file:
            result.skipped = "npu-migrate: skip-file comment"
            return result
        slices = None
        if options.hot_slices:
            # what makes a statement hot for the Migrator (Migrator.on_visit), what else rules read
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
            finding = _tool_finding("NPU001", relpath, "nested too deeply for the code generator; left unchanged")
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
    if heavy and _RUN.isolate_heavy:
        raise _Isolate()  # (run_files migrates the file again, in a process it can kill)
    if refused is not None:
        # (the slices are a part of the file: the whole file is no better)
        finding = _tool_finding("NPU001", relpath, refused[0], refused[1])
        if not suppressions.suppresses(finding.code, finding.line):
            result.findings.append(finding)
        return result
    try:
        module = cst.parse_module(text)
    except UnicodeDecodeError as exc:
        finding = _tool_finding("NPU002", relpath, str(exc))
    except cst.ParserSyntaxError as exc:
        finding = _tool_finding("NPU001", relpath, exc.message, exc.raw_line or 1, exc.raw_column + 1)
    except (SyntaxError, ValueError, LookupError, RecursionError) as exc:
        finding = _tool_finding("NPU001", relpath, f"{type(exc).__name__}: {exc}")
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
    migrator = Migrator(
        module,
        source_map,
        relpath,
        options.enabled,
        shim=options.shim_name,
        shim_module=placement.spec_for(options, relpath).module,
        defines_cuda_method=hotslice.quick_search(DEFINES_CUDA_METHOD, source),
        hot_statement=HOT_STATEMENT,
        suppressed=suppressions.suppresses,
    )
    new_module = module.visit(migrator)
    removable = migrator.removable_cuda_imports()
    if removable:
        new_module = new_module.visit(ImportPruner(removable, migrator.plain_torch_import))
    module.visit(Sweep(migrator))
    spec = placement.spec_for(options, relpath)
    rehome = _foreign_shim_imports(module, spec) if spec.package else []
    if rehome and "NPU004" in options.enabled:
        # written by an earlier run for a root shim: the package's own shim now (NPU004)
        rehome = [stmt for stmt in rehome if not migrator._suppressed("NPU004", stmt)]
        for stmt in rehome:
            migrator._add("NPU004", stmt, True)
    else:
        rehome = []
    binds = {id(module.body[i]) for i, bound in shim_import_statements(module, spec.name) if bound != spec.module}
    if migrator.uses_shim or any(id(stmt) in binds for stmt in rehome):
        # A file runs as a script when it has a main guard or is not in a package: `python
        # sub/script.py` puts sub/, not the root, on sys.path, so it needs the bootstrap.
        bootstrap = spec.bootstrap(bool(MAIN_GUARD.search(source)))
        if bootstrap and spec.package and _leading_block_imports(module, spec.package.split(".")[0]):
            bootstrap = ""  # the file's own imports of the package must work first: so will ours
        new_module = add_shim_import(new_module, spec, bootstrap, options.first_party, bool(rehome))
    if rehome:
        new_module = _rehome_submodule_imports(new_module, spec)
    findings = migrator.findings
    if new_module is module:
        # Nothing was replaced (the Migrator hands back untouched nodes themselves): the code
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
        # show the uses in hot statements; the whole new text settles the cold ones.
        unused = imports.newly_unused(module, new_module) - {options.shim_name}
        if unused:
            drop = unused - imports.names_used_in_text(new.decode(new_module.encoding, "replace"), unused)
            if drop:
                new_module = imports.remove_import_bindings(new_module, drop)
                new = _generate(source_map, new_module, slices)
                if new is None:
                    return None
    result.findings = sorted(findings)
    result.suppressed = migrator.suppressed_count
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


def file_kind(relpath: str) -> str:
    """How a discovered file is read: "python", "notebook", or a text format of textfiles.py
    (shell, yaml, toml, dockerfile, env, cuda-source). Anything else named on the command line
    is read as Python (a script without a suffix, found by its #! line)."""
    from .textfiles import target_kind  # lazy: textfiles imports this module for FileResult

    lower = relpath.lower()
    if lower.endswith((".py", ".pyw")):
        return "python"
    if lower.endswith(".ipynb"):
        return "notebook"
    return target_kind(relpath) or "python"


def migrate_file(source: bytes, relpath: str, options: Options) -> FileResult:
    """Migrate (or scan) one file's bytes with the engine its kind needs."""
    kind = file_kind(relpath)
    if kind == "notebook":
        from .notebook import migrate_notebook

        return migrate_notebook(source, relpath, options)
    if kind != "python":
        from .textfiles import scan_text_file

        return scan_text_file(source, relpath, options)
    return migrate_source(source, relpath, options)


def _final_python_text(result: FileResult) -> Optional[bytes]:
    """The Python code of a file once the run is over (a notebook's code cells joined); None for
    other text files."""
    data = result.new if result.changed else (result.original or b"")
    kind = file_kind(result.relpath)
    if kind == "notebook":
        import json

        try:
            cells = json.loads(data.decode("utf-8")).get("cells", [])
            return "\n".join(
                "".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code"
            ).encode("utf-8")
        except (ValueError, AttributeError, TypeError):
            return None
    return data if kind == "python" else None


def shim_modules(result: FileResult, shim: str) -> set[str]:
    """The shim modules the file imports once the run is over (rewritten now or by an earlier
    run): `npu_compat` for the root shim, `mypkg.npu_compat` for a package's."""
    data = _final_python_text(result)
    if not data:
        return set()
    name = re.escape(shim.encode())
    found = set()
    for m in re.finditer(rb"^[ \t]*(?:import|from)[ \t]+((?:\w+\.)*?)" + name + rb"\b", data, re.M):
        found.add(m.group(1).decode("ascii", "replace") + shim)
    for m in re.finditer(rb"^[ \t]*from[ \t]+([\w.]+)[ \t]+import[ \t]+\(?[^)\n]*?(?<![\w.])" + name + rb"\b(?![ \t]+as\b)",
                         data, re.M):
        found.add(m.group(1).decode("ascii", "replace") + "." + shim)
    return found


def imports_shim(result: FileResult, shim: str) -> bool:
    """Whether the file imports a shim once the run is over: then that shim must exist.
    Notebooks are looked at cell by cell; other text files never do."""
    return bool(shim_modules(result, shim))


def needed_shims(results: Iterable[FileResult], options: Options) -> dict[str, list[str]]:
    """Shim folder (relative to the root) -> the files that import it, after the run."""
    by_module = {spec.module: spec.folder for _folder, spec in options.shim_specs}
    needed: dict[str, list[str]] = {}
    for result in results:
        for module in sorted(shim_modules(result, options.shim_name)):
            spec = placement.spec_for(options, result.relpath)
            folder = spec.folder if module == spec.module else by_module.get(module)
            if folder is None and module == options.shim_name:
                folder = options.shim_name  # the root shim
            if folder is not None:
                needed.setdefault(folder, []).append(result.relpath)
    return needed


# ------------------------------------------------------------------ the time budget of one file
#
# Within run_files, the process that migrates a file (a worker, a process of its own, or the
# main process on its main thread) arms SIGALRM for the file's budget; its handler raises
# _FileTimeout wherever Python code runs, and the file is NPU001 "took longer than N s". Python
# cannot interrupt libcst's native parser, whose exception only comes when it returns: so where
# the parse alone may run past the budget, the parent kills the process (a worker, or the process
# of its own a heavy file gets in an in-process run) at _hard_limit, and reports the same.
FILE_TIMEOUT_ENV = "NPU_MIGRATE_FILE_TIMEOUT"
DEFAULT_FILE_TIMEOUT = 60.0  # seconds; torch's slowest file takes about 3


def file_timeout() -> float:
    """The time budget of one file in seconds, from $NPU_MIGRATE_FILE_TIMEOUT (0: none)."""
    raw = os.environ.get(FILE_TIMEOUT_ENV, "").strip()
    try:
        seconds = float(raw) if raw else DEFAULT_FILE_TIMEOUT
    except ValueError:
        seconds = DEFAULT_FILE_TIMEOUT
    return seconds if 0 < seconds < float("inf") else 0.0


def _hard_limit(seconds: float) -> float:
    """When the parent kills a process still on one file: after its own alarm had its chance."""
    return seconds * 1.5 + 2


class _FileTimeout(BaseException):
    """Raised by the SIGALRM handler (not an Exception: no `except Exception` swallows it)."""


class _Isolate(BaseException):
    """A heavy file met in an in-process run: run_files migrates it in a process of its own."""


class _RunState:
    alarm_armed = False  # the handler raises only while a file's budget runs
    isolate_heavy = False  # in-process runs of run_files: heavy files go to a process of their own
    board = None  # workers: the parent's table of what each worker is doing (see _run_pool)
    slot = -1


_RUN = _RunState()


def _on_alarm(signum, frame) -> None:
    if _RUN.alarm_armed:
        _RUN.alarm_armed = False
        raise _FileTimeout()


def _install_alarm() -> Optional[tuple]:
    """Make SIGALRM ours in this process; (the previous handler,) to put back, or None when
    this process cannot take it (no SIGALRM on Windows; signals go to the main thread only)."""
    import signal
    import threading

    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return None
    return (signal.signal(signal.SIGALRM, _on_alarm),)


def _restore_alarm(saved: Optional[tuple]) -> None:
    if saved is not None:
        import signal

        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, saved[0])


def _timed_out(relpath: str, original: Optional[bytes], seconds: float) -> FileResult:
    finding = _tool_finding("NPU001", relpath, f"took longer than {seconds:g} s to migrate ({FILE_TIMEOUT_ENV})")
    return FileResult(relpath=relpath, findings=[finding], original=original, uncached=True)


def _crashed(relpath: str, original: Optional[bytes], exitcode: Optional[int]) -> FileResult:
    import signal

    if exitcode is not None and exitcode < 0:
        try:
            how = signal.Signals(-exitcode).name
        except ValueError:
            how = f"signal {-exitcode}"
    else:
        how = f"exit status {exitcode}"
    detail = f"the parser crashed on this file (the process migrating it died: {how})"
    finding = _tool_finding("NPU001", relpath, detail)
    return FileResult(relpath=relpath, findings=[finding], original=original, uncached=True)


def _read_original(path: str) -> Optional[bytes]:
    try:
        return read_regular(path)
    except OSError:
        return None


def migrate_path(args: tuple[str, str, Options]) -> FileResult:
    """Worker entry point: read a file and migrate it (the caller writes). Within run_files, in
    a process whose SIGALRM is ours, the file has its time budget."""
    path, relpath, options = args
    try:
        # never a FIFO or a device (it would block or never end), never a file over the limit
        source = read_regular(path)
    except OSError as exc:
        return FileResult(relpath=relpath, findings=[_tool_finding("NPU002", relpath, exc.strerror or str(exc))])
    import signal

    seconds = file_timeout()
    if not seconds or not hasattr(signal, "setitimer") or signal.getsignal(signal.SIGALRM) is not _on_alarm:
        return migrate_file(source, relpath, options)
    try:
        _RUN.alarm_armed = True
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return migrate_file(source, relpath, options)
        finally:
            _RUN.alarm_armed = False  # first: an alarm from here on does nothing
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _FileTimeout:
        _RUN.alarm_armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        return _timed_out(relpath, source, seconds)


def run_files(
    items: list[tuple[str, str]],
    options: Options,
    jobs: int = 1,
    progress: Optional[Callable[[FileResult], None]] = None,
    cache=None,
) -> list[FileResult]:
    """Migrate (path, relpath) pairs, in worker processes when there are enough of them.

    Results come back sorted by relative path whatever `jobs` is, so output is deterministic.
    With a `cache.Cache`, files whose content and options match an entry are not migrated again.
    """
    results: list[FileResult] = []
    if cache is not None:
        items, results = _cached(items, options, cache, progress)
    # Largest files first: with workers, a big file taken last would leave the other core idle
    # while it runs. (Results are sorted by path below, so the order never shows.)
    tasks = sorted(((path, rel, options) for path, rel in items), key=_size, reverse=True)
    done = len(results)
    seconds = file_timeout()

    def deliver(result: FileResult) -> None:
        results.append(result)
        if progress:
            progress(result)

    if jobs > 1 and len(tasks) >= 16:
        _run_pool(tasks, jobs, seconds, deliver)
    else:
        saved = _install_alarm()
        _RUN.isolate_heavy = True
        try:
            for task in tasks:
                try:
                    result = migrate_path(task)
                except _Isolate:  # a parse that may outlast the budget: where it can be killed
                    result = _run_isolated([task], 1, seconds)[0]
                deliver(result)
        finally:
            _RUN.isolate_heavy = False
            _restore_alarm(saved)
    if cache is not None:
        from .cache import digest, options_key

        for result in results[done:]:
            if result.original is not None and not result.uncached:
                cache.store(result.relpath, digest(result.original), options_key(options, result.relpath), result)
    results.sort(key=lambda r: r.relpath)
    return results


# ------------------------------------------------------------------ workers that die
#
# A worker process that dies (libcst's parser crashing, os._exit, the kernel's OOM killer, or the
# parent killing it at the hard time limit) breaks the whole pool: every file not yet returned
# fails with BrokenProcessPool. So each worker writes on a shared board which task it is on and
# since when; after a break, the tasks that were in flight are migrated again each in a process
# of its own (only the file that crashes one is NPU001), the tasks never started go to a new pool.


def _worker_start(board, slots) -> None:
    """Pool initializer: take a row of the board; SIGALRM is this worker's."""
    with slots.get_lock():
        slot = slots.value
        slots.value += 1
    _RUN.isolate_heavy = False  # (a worker can be killed: no process of its own needed)
    if 3 * slot + 2 < len(board):
        _RUN.board, _RUN.slot = board, slot
        board[3 * slot] = os.getpid()
        board[3 * slot + 1] = -1
    _install_alarm()


def _worker_chunk(chunk: list) -> list:
    """Migrate (number, task) pairs in a worker; [(number, result)]."""
    import time

    board, row = _RUN.board, 3 * _RUN.slot
    out = []
    for number, task in chunk:
        if board is not None:
            board[row + 2] = time.monotonic()  # (before the number: the parent reads the number first)
            board[row + 1] = number
        try:
            out.append((number, migrate_path(task)))
        finally:
            if board is not None:
                board[row + 1] = -1
    return out


def _run_pool(tasks: list, jobs: int, seconds: float, deliver: Callable[[FileResult], None], round_: int = 0) -> None:
    import multiprocessing
    import signal
    import time
    from concurrent.futures import FIRST_COMPLETED, wait
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
    board = context.Array("d", 3 * jobs, lock=False)  # per worker: pid, task number (-1: none), since
    for slot in range(jobs):
        board[3 * slot + 1] = -1
    slots = context.Value("i", 0)
    numbered = list(enumerate(tasks))
    size = max(1, min(4, len(tasks) // (jobs * 8) or 1))  # small: the big files come first
    chunks = [numbered[i:i + size] for i in range(0, len(numbered), size)]
    hard = _hard_limit(seconds) if seconds else None
    left: list = []  # (number, task) of the chunks that never came back
    delivered: set[int] = set()
    killed: set[int] = set()  # task numbers whose worker the parent killed for their time
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_worker_start,
                             initargs=(board, slots)) as pool:
        pending = {}
        for index, chunk in enumerate(chunks):
            try:
                pending[pool.submit(_worker_chunk, chunk)] = chunk
            except BrokenProcessPool:
                left.extend(pair for rest in chunks[index:] for pair in rest)
                break
        while pending:
            finished, _ = wait(pending, timeout=0.25 if hard else None, return_when=FIRST_COMPLETED)
            for future in finished:
                chunk = pending.pop(future)
                try:
                    returned = future.result()
                except BrokenProcessPool:
                    left.extend(chunk)
                    continue
                for number, result in returned:
                    delivered.add(number)
                    deliver(result)
            if hard and pending:
                now = time.monotonic()
                for slot in range(jobs):
                    number = int(board[3 * slot + 1])
                    if number >= 0 and number not in killed and now - board[3 * slot + 2] > hard:
                        killed.add(number)  # the parse outlasts the alarm (native code): kill it
                        try:
                            os.kill(int(board[3 * slot]), getattr(signal, "SIGKILL", signal.SIGTERM))
                        except OSError:
                            pass
    if not left:
        return
    in_flight = {int(board[3 * slot + 1]) for slot in range(jobs)}
    left = [(number, task) for number, task in left if number not in delivered]
    suspects = [task for number, task in left if number in in_flight and number not in killed]
    rest = [task for number, task in left if number not in in_flight and number not in killed]
    for number, task in left:
        if number in killed:
            deliver(_timed_out(task[1], _read_original(task[0]), seconds))
    for result in _run_isolated(suspects, jobs, seconds):
        deliver(result)
    if not rest:
        return
    # A new pool for the files never started, while rounds make progress (a worker that died
    # between files, nothing in flight, gets one more): else one process each, which always ends.
    if len(rest) > 2 * jobs and round_ < 8 and (delivered or suspects or killed or round_ == 0):
        _run_pool(rest, jobs, seconds, deliver, round_ + 1)
    else:
        for result in _run_isolated(rest, jobs, seconds):
            deliver(result)


def _isolated_child(writer, task) -> None:
    _RUN.isolate_heavy = False
    _install_alarm()
    try:
        result = migrate_path(task)
    except BaseException as exc:  # nothing above would report it
        detail = f"internal error, left unchanged: {type(exc).__name__}: {exc}"
        result = FileResult(relpath=task[1], findings=[_tool_finding("NPU001", task[1], detail)], uncached=True)
    writer.send(result)
    writer.close()


def _run_isolated(tasks: list, jobs: int, seconds: float) -> list[FileResult]:
    """Migrate each task in a process of its own, `jobs` at a time: a process that dies costs
    only its file (NPU001), and one still running at the hard time limit is killed."""
    import multiprocessing
    import time
    from multiprocessing.connection import wait

    context = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
    hard = _hard_limit(seconds) if seconds else None
    queue = list(tasks)
    running: dict = {}  # reader -> (task, process, start)
    out: list[FileResult] = []
    while queue or running:
        while queue and len(running) < max(1, jobs):
            task = queue.pop(0)
            reader, writer = context.Pipe(duplex=False)
            process = context.Process(target=_isolated_child, args=(writer, task), daemon=True)
            process.start()
            writer.close()
            running[reader] = (task, process, time.monotonic())
        for reader in wait(list(running), timeout=0.25 if hard else None):
            task, process, _start = running.pop(reader)
            try:
                result = reader.recv()
            except Exception:  # EOFError: it died before it could answer
                result = None
            reader.close()
            process.join()
            if not isinstance(result, FileResult):
                result = _crashed(task[1], _read_original(task[0]), process.exitcode)
            out.append(result)
        if hard:
            now = time.monotonic()
            for reader, (task, process, start) in list(running.items()):
                if now - start > hard:
                    process.kill()
                    process.join()
                    reader.close()
                    del running[reader]
                    out.append(_timed_out(task[1], _read_original(task[0]), seconds))
    return out


def _size(task: tuple) -> int:
    try:
        return os.path.getsize(task[0])
    except OSError:
        return 0


def _cached(items, options: Options, cache, progress):
    """Split items into those still to migrate and the results the cache already holds."""
    from .cache import digest, options_key

    todo, hits = [], []
    for path, rel in items:
        try:
            data = read_regular(path)  # never a FIFO (it would block), never past the limit
        except OSError:
            todo.append((path, rel))  # the worker reports why it cannot be read
            continue
        result = cache.lookup(rel, digest(data), options_key(options, rel), data)
        if result is None:
            todo.append((path, rel))
        else:
            hits.append(result)
            if progress:
                progress(result)
    return todo, hits


def package_dirs(root: Path, items: Iterable[tuple[str, str]]) -> frozenset:
    """Relative folders (of the given files) that are packages: they hold an __init__.py."""
    folders = {os.path.dirname(rel) for _, rel in items}
    return frozenset(f for f in folders if f and (root / f / "__init__.py").is_file())


def _may_be_npu_aware(data: bytes) -> bool:
    """A byte test that every NPU_AWARE match passes (each of its branches holds one of these);
    the regex, anchored at line starts, costs far more on the many files that fail it."""
    return b"torch_npu" in data or b"torch.npu" in data or b"is_npu_available" in data


def npu_aware_dirs(items: Iterable[tuple[str, str]]) -> frozenset:
    """Directories that already hold torch_npu-aware code: their siblings stay untouched (E26)."""
    dirs = set()
    for path, rel in items:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        if _may_be_npu_aware(data) and NPU_AWARE.search(data):
            dirs.add(os.path.dirname(rel))
    return frozenset(dirs)
