"""The life of one file, and of one run.

    discover -> prefilter -> parse -> rules (one traversal) + leftover sweep -> render -> write
    atomically -> inject the shim once per run.

`migrate_source` is pure (bytes in, new bytes and findings out) so that tests, the CLI and worker
processes share it.
"""

from __future__ import annotations

import gc
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional

import libcst as cst

from . import catalogue, hotslice, suppress
from .findings import Finding
from .sourcemap import SourceMap
from .sweep import Sweep, rule_reads
from .transform import EXTRA_HOT, ImportPruner, Migrator

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
HOT_STATEMENT = re.compile(_TRIGGERS + r"|\bimport\b[^\n]*\btorch\b|\btorch\b[^\n]*\bimport\b")
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


@dataclass
class FileResult:
    relpath: str
    findings: list[Finding] = field(default_factory=list)
    original: Optional[bytes] = None
    new: Optional[bytes] = None  # None: no change
    encoding: str = "utf-8"
    skipped: Optional[str] = None  # why the file was not parsed (no trigger words, NPU-aware)
    suppressed: int = 0  # constructs left alone because a comment said so

    @property
    def changed(self) -> bool:
        return self.new is not None and self.new != self.original


def _tool_finding(code: str, relpath: str, detail: str, line: int = 1, column: int = 1) -> Finding:
    rule = catalogue.rule(code)
    return Finding(relpath, line, column, code, f"{rule.message}: {detail}", False, "")


def _already_imports_shim(module: cst.Module, shim: str) -> bool:
    for statement in module.body:
        bodies = [statement]
        if isinstance(statement, cst.Try):
            bodies = list(statement.body.body)
        for stmt in bodies:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.Import) and any(
                        isinstance(a.name, cst.Name) and a.name.value == shim for a in small.names
                    ):
                        return True
    return False


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


def _shim_import(shim: str, script_depth: int) -> list[cst.BaseStatement]:
    if script_depth <= 0:
        return [cst.parse_statement(f"import {shim}\n")]
    ups = ", ".join(['".."'] * script_depth)
    code = (
        f"try:\n"
        f"    import {shim}\n"
        f"except ModuleNotFoundError:  # run as a script: make the repository root importable (npu-migrate)\n"
        f"    import os, sys\n"
        f"    sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), {ups}))\n"
        f"    import {shim}\n"
    )
    return [cst.parse_statement(code)]


def add_shim_import(module: cst.Module, shim: str, script_depth: int) -> cst.Module:
    if _already_imports_shim(module, shim):
        return module
    index = _insertion_index(module)
    body = list(module.body)
    body[index:index] = _shim_import(shim, script_depth)
    return module.with_changes(body=body)


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
        if not hotslice.quick_search(PREFILTER, source):
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
            slices = hotslice.reduce(source, (HOT_STATEMENT, EXTRA_HOT), TRIGGER_WORDS, rule_reads())
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


def _migrate_parsed(source, slices, relpath, options, suppressions, result) -> Optional[FileResult]:
    """Parse (the hot slices of) a file and run the rules; None when the slices did not work out."""
    try:
        module = cst.parse_module(slices.reduced if slices is not None else source)
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
        defines_cuda_method=hotslice.quick_search(DEFINES_CUDA_METHOD, source),
        hot_statement=HOT_STATEMENT,
        suppressed=suppressions.suppresses,
    )
    new_module = module.visit(migrator)
    removable = migrator.removable_cuda_imports()
    if removable:
        new_module = new_module.visit(ImportPruner(removable, migrator.plain_torch_import))
    module.visit(Sweep(migrator))
    if migrator.uses_shim:
        # A file in a subfolder runs as a script when it has a main guard or is not in a package:
        # `python sub/script.py` puts sub/, not the root, on sys.path, so it needs the bootstrap.
        parent = os.path.dirname(relpath)
        is_script = MAIN_GUARD.search(source) or parent not in options.package_dirs
        depth = relpath.count("/") if is_script else 0
        new_module = add_shim_import(new_module, options.shim_name, depth)
    findings = migrator.findings
    if new_module is module:
        # Nothing was replaced (the Migrator hands back untouched nodes themselves): the code
        # is the source map's, generated from this very module, so it is not generated again.
        new = source_map.text.encode(module.encoding)
    else:
        new = source_map.code(new_module).encode(new_module.encoding)  # = new_module.bytes
    if slices is not None:
        # (findings need nothing: their source text is read with the slices put back)
        new = hotslice.restore(new, slices)
        if new is None:
            return None
    result.findings = sorted(findings)
    result.suppressed = migrator.suppressed_count
    if new != source:
        result.new = new
    return result


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


def imports_shim(result: FileResult, shim: str) -> bool:
    """Whether the file imports the shim once the run is over (rewritten now or by an earlier run):
    then the shim must exist. Notebooks are looked at cell by cell; other text files never do."""
    data = result.new if result.changed else (result.original or b"")
    kind = file_kind(result.relpath)
    if kind == "notebook":
        import json

        try:
            cells = json.loads(data.decode("utf-8")).get("cells", [])
            data = "\n".join(
                "".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code"
            ).encode("utf-8")
        except (ValueError, AttributeError, TypeError):
            return False
    elif kind != "python":
        return False
    pattern = rb"^[ \t]*(import|from)[ \t]+" + re.escape(shim.encode()) + rb"\b"
    return re.search(pattern, data, re.M) is not None


def migrate_path(args: tuple[str, str, Options]) -> FileResult:
    """Worker entry point: read a file and migrate it (the caller writes)."""
    path, relpath, options = args
    try:
        source = Path(path).read_bytes()
    except OSError as exc:
        return FileResult(relpath=relpath, findings=[_tool_finding("NPU002", relpath, exc.strerror or str(exc))])
    return migrate_file(source, relpath, options)


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
    if jobs > 1 and len(tasks) >= 16:
        import multiprocessing

        context = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            chunk = max(1, min(4, len(tasks) // (jobs * 8) or 1))  # small: the big files come first
            for result in pool.map(migrate_path, tasks, chunksize=chunk):
                results.append(result)
                if progress:
                    progress(result)
    else:
        for task in tasks:
            result = migrate_path(task)
            results.append(result)
            if progress:
                progress(result)
    if cache is not None:
        from .cache import digest, options_key

        for result in results[done:]:
            if result.original is not None:
                cache.store(result.relpath, digest(result.original), options_key(options, result.relpath), result)
    results.sort(key=lambda r: r.relpath)
    return results


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
            data = Path(path).read_bytes()
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
