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

    @property
    def changed(self) -> bool:
        return self.new is not None and self.new != self.original


def _tool_finding(code: str, relpath: str, detail: str, line: int = 1, column: int = 1) -> Finding:
    rule = catalogue.rule(code)
    return Finding(relpath, line, column, code, f"{rule.message}: {detail}", False, "")


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
