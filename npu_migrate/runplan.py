"""What `npu-migrate` (migrate) and `npu-migrate check` share: the command-line options of a
run (`MigrateRun`, `CheckRun`), its files, its root, its configuration and the engine options
built from them, so that both commands (and the pre-commit hooks, which run `check`) give the
same result on the same files.

    paths -> collect (discover) -> root (`[tool.npu-migrate]`'s folder, else the project root)
          -> options (rule selection, per-file ignores, where the shim goes) -> run.run_files
"""

from __future__ import annotations

import keyword
import os
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from . import catalogue, placement
from .config import Config, check_codes
from .discover import DiscoveryError, discover, excluded
from .model import FileResult, Options
# (run.py, the engine, is imported by the functions that run it: `--help` and the option
# parsing of a command need none of it)


@dataclass(frozen=True)
class RunOptions:
    """What both commands take from the command line: which files, which rules, which
    configuration, the shim, the workers, the output and the result cache."""

    paths: tuple
    select: tuple = ()
    extend_select: tuple = ()
    ignore: tuple = ()
    exclude: tuple = ()
    per_file_ignores: tuple = ()
    config_file: str | None = None
    isolated: bool = False
    shim_name: str | None = None
    no_shim: bool = False
    jobs: int | None = None
    output_format: str = "text"
    no_color: bool = False
    cache_dir: str | None = None
    no_cache: bool = False
    show_skipped: bool = False  # name every file and platform-aware scope left as written


@dataclass(frozen=True)
class MigrateRun(RunOptions):
    """The options of one `npu-migrate PATHS` run, as the command line gave them."""

    dry_run: bool = False
    show_diff: bool = False
    quiet: bool = False
    allow_dirty: bool = False
    output_dir: str | None = None
    rewrite_scripts: bool = False
    report_file: str | None = None
    report_csv: str | None = None
    emit_requirements: bool = False


@dataclass(frozen=True)
class CheckRun(RunOptions):
    """The options of one `npu-migrate check [PATHS]` run, as the command line gave them."""

    paths: tuple = (".",)
    baseline: str | None = None
    write_baseline: str | None = None
    fail_on_stale: bool = False
    diff_base: str | None = None
    output_file: str | None = None
    statistics: bool = False
    exit_zero: bool = False
    fix: bool = False


IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A shim may not take the name of a module the migrated code needs.
RESERVED_SHIM_NAMES = frozenset({"torch", "torch_npu", "torchvision", "numpy", "npu_migrate", "triton"})


def shim_name_problem(name: str) -> str | None:
    if not IDENTIFIER.match(name):
        return "is not a Python identifier"
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        return "is a Python keyword"
    if name in RESERVED_SHIM_NAMES or name in getattr(sys, "stdlib_module_names", ()):
        return "would shadow a module the code needs"
    return None


def common_folder(paths: tuple[str, ...]) -> Path:
    """The common folder of the named paths (a file counts as its folder)."""
    resolved = [Path(p).absolute() for p in paths]
    for p in resolved:
        if not p.exists():
            if os.path.lexists(p):
                raise DiscoveryError(f"{p}: a broken symbolic link or a symbolic link loop")
            raise DiscoveryError(f"{p}: no such file or directory")
    bases = [p if p.is_dir() else p.parent for p in resolved]
    return Path(os.path.commonpath([str(b) for b in bases]))


def collect(paths: tuple[str, ...], exclude: tuple[str, ...], shim_name: str,
            notes: list[str] | None = None, root: Path | None = None,
            warnings: list[str] | None = None):
    """The run's root and its (path, relpath) items. Root: `root` when given (an ancestor of
    every path), else the common folder of the paths.

    A named file that is not a regular file (a FIFO, a device, a socket) is always skipped:
    reading it could block for ever or never end. So is a named file of a kind no run reads
    (`is_read_file`: both commands treat it alike). Each is named in `notes`, else in
    `warnings`. With `notes` (the migrate command), unreadable folders are named too.
    """
    resolved = [Path(p).absolute() for p in paths]
    common = common_folder(paths)
    root = root or common
    items: dict[str, str] = {}
    skipped_links: list[str] = []
    for p in resolved:
        if p.is_dir():
            for path, rel in discover(p, exclude, shim_name, notes):
                full_rel = Path(path).relative_to(root).as_posix()
                items[path] = full_rel
        elif Path(paths[resolved.index(p)]).is_symlink():
            skipped_links.append(str(p))  # never written through: migrate the link's target instead
        elif not p.is_file():
            told = notes if notes is not None else warnings
            if told is not None:
                told.append(f"{p}: not a regular file; skipped")
        elif not is_read_file(p):
            told = notes if notes is not None else warnings
            if told is not None:
                told.append(f"{p}: {NOT_READ}; skipped")
        else:
            items[str(p)] = p.relative_to(root).as_posix()
    return root, sorted(items.items(), key=lambda kv: kv[1]), skipped_links


# A file named on the command line is migrated when it has one of these suffixes or a python #!
# line; anything else is skipped with a warning (a README named by mistake is not parsed as code).
NAMED_FILE_SUFFIXES = (".py", ".pyw", ".ipynb")


NOT_READ = ("not a Python file, notebook, shell script, YAML/TOML config, Dockerfile, .env file or "
            "CUDA source (the files npu-migrate reads)")


def is_read_file(path: Path) -> bool:
    """Whether a file named on the command line is read, by `migrate` and `check` alike: what
    discovery reads in a folder (discover.is_target: Python, notebooks, scripts, configs,
    Dockerfiles, .env files, CUDA sources), .pyw files, and files with a python #! line."""
    from .discover import is_target

    return is_target(path.name) or is_python_file(path)


def is_python_file(path: Path) -> bool:
    if path.suffix in NAMED_FILE_SUFFIXES:
        return True
    try:
        with open(path, "rb") as handle:
            first = handle.readline(256)
    except OSError:
        return True  # let the run report why it cannot be read
    return first.startswith(b"#!") and b"python" in first




def split_codes(values) -> tuple[str, ...]:
    """Repeatable, comma-separated option values, flattened."""
    return tuple(v.strip() for value in values for v in value.split(",") if v.strip())


def selection(cfg: Config, select, ignore, extend_select) -> frozenset[str]:
    """Command-line options replace the config keys of the same name; ignore wins over select."""
    select = split_codes(select) or cfg.select
    extend = split_codes(extend_select) or cfg.extend_select
    ignored = split_codes(ignore) or cfg.ignore
    for values in (select or (), extend, ignored):
        check_codes(tuple(values), "command line")
    chosen = catalogue.expand_selection(select) if select else set(catalogue.rules())
    chosen |= catalogue.expand_selection(extend)
    return frozenset(chosen - catalogue.expand_selection(ignored))


def resolve_root(common: Path, config_root: Optional[Path], paths: tuple = ()) -> Path:
    """The run's root, where relative paths start and the shim goes: the folder of the
    pyproject.toml holding `[tool.npu-migrate]`, else the project that holds the paths
    (`placement.project_root`: out of import packages, up to the packaging files). When only
    files are named (`npu-migrate pkg/util.py`, the pre-commit hooks), a project without
    packaging is rooted at the top of its git work tree: the files belong to the project, and
    their importers expect the shim where a run over the whole tree would put it."""
    if config_root is not None:
        return config_root
    root = placement.project_root(common)
    files_only = bool(paths) and not any(Path(p).is_dir() for p in paths)
    if files_only and not placement.has_packaging(root):
        from . import gitdiff

        top = gitdiff.toplevel(common)
        if top is not None:
            return top
    return root


def first_party_names(root: Path, shim: str, layout=None) -> frozenset:
    """Top-level names of the project's own modules and packages, for isort's first-party
    section: what lies at the root and in its import roots (src/), and the shim."""
    names = {shim}
    folders = {root, root / "src"}
    if layout is not None:
        folders |= {root / r for r in layout.import_roots}
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith((".", "_")):
                continue
            if entry.name.endswith(".py"):
                names.add(entry.name[:-3])
            elif entry.is_dir(follow_symlinks=False) and entry.name.isidentifier():
                names.add(entry.name)
    return frozenset(names)


def make_options(root: Path, items: list[tuple[str, str]], enabled: frozenset, shim: str,
                 rewrite_scripts: bool = False) -> Options:
    """The engine options of a run over `items` (path, relpath under root)."""
    from .layout import read_layout
    from .run import package_dirs, platform_classes

    layout = read_layout(root)
    relpaths = [rel for _path, rel in items]
    return Options(
        enabled=enabled,
        shim_name=shim,
        package_dirs=package_dirs(root, items),
        rewrite_scripts=rewrite_scripts,
        shim_specs=placement.plan(root, relpaths, shim, layout),
        first_party=first_party_names(root, shim, layout),
        platform_classes=platform_classes(items),
        python_modules=frozenset(rel.replace(os.sep, "/") for _path, rel in items if rel.endswith(".py")),
    )


def run_engine(items: list[tuple[str, str]], options: Options, per_file_ignores=(), jobs: int = 1,
               cache=None, progress: Optional[Callable[[FileResult], None]] = None) -> list[FileResult]:
    """Run the engine over `items`; files that per-file ignores match run with their own rule
    selection, exactly as `--ignore` would run them (so an ignored rule's constructs stay
    claimed, not swept)."""
    import dataclasses

    from .run import run_files

    groups: dict[frozenset, list[tuple[str, str]]] = defaultdict(list)
    for path, rel in items:
        ignored: set[str] = set()
        for glob, codes in per_file_ignores:
            if excluded(rel, (glob,)):
                ignored |= catalogue.expand_selection(codes)
        groups[frozenset(options.enabled - ignored)].append((path, rel))
    results: list[FileResult] = []
    options_of: dict[str, Options] = {}
    for enabled, group in groups.items():
        group_options = options if enabled == options.enabled else dataclasses.replace(options, enabled=enabled)
        results.extend(run_files(group, group_options, jobs=jobs, progress=progress, cache=cache))
        options_of.update((rel, group_options) for _path, rel in group)
    results.sort(key=lambda r: r.relpath)
    from .reviewcache import reviewed

    paths = {rel: path for path, rel in items}
    # (device checks the engine widened in front of another module's Triton kernels: the files
    # migrated again, knowing those kernels, keep them: crossgates22.py)
    from .crossgates22 import plan

    again = plan(results, options.first_party)
    if again:
        redo: dict[int, tuple[Options, list]] = {}
        for rel, entries in again.items():
            base = options_of[rel]
            slot = redo.setdefault(id(base), (base, []))
            slot[1].append((paths[rel], rel, entries))
        fresh: dict[str, FileResult] = {}
        for base, rows in redo.values():
            known = dataclasses.replace(base, foreign_cuda_only=frozenset().union(*(e for _p, _r, e in rows)))
            for result in run_files([(p, r) for p, r, _e in rows], known, jobs=jobs, cache=cache):
                fresh[result.relpath] = result
        results = [fresh.get(r.relpath, r) for r in results]
    # (the whole-run passes parse many files again: a warm run over the same results reuses theirs)
    return reviewed(results, paths, cache, lambda results: shared_passes(results, paths))


def shared_passes(results: list[FileResult], paths: dict[str, str]) -> list[FileResult]:
    """whole_run_passes, parsing a text once for all of them (astcache.shared: the trees kept
    for the passes, none shared by two files, forgotten after them)."""
    from . import astcache
    from .modpaths import result_bytes

    texts = (t for r in results if r.relpath.endswith(".py") for t in (result_bytes(r, paths), r.new) if t)
    with astcache.shared(texts):  # (a generator: each text is read, digested and let go)
        return whole_run_passes(results, paths)


def whole_run_passes(results: list[FileResult], paths: dict[str, str]) -> list[FileResult]:
    """What the passes that read across files make of a run's per-file results (sorted by
    relpath); `paths`: relpath -> the file's path. A function of these and of the few files
    they read through reviewcache.read_outside: reviewcache.py caches it."""
    from .textfiles import group_cuda_headers

    results = group_cuda_headers(results)  # NPU912 once per folder of .cuh headers and per identical .cu
    from .wholeprogram import review

    from .moot import to_scopes
    from .platforms import review as review_platforms

    # modules imported only on other platforms, methods an NPU subclass overrides, other vendors'
    # platform code and CUDA variant folders: info; then every finding about code an NPU host
    # never runs becomes a named skipped scope
    from .builders import review as review_cuda_builders
    from .disabled import review_builders
    from .fp8tests import fold_into_failing_imports
    from .optests import lower_in_op_tests
    from .optionalext import review as review_optional_extensions
    from .optionalguards import review as review_optional
    from .tritonguards import review_importers

    results = review(results, paths)
    # modules only guarded importers load: Triton (tritonguards.py), then bitsandbytes, compiled
    # extensions, xformers and flash-attn helpers, with what bitsandbytes does on an NPU host
    # (optionalguards.py)
    results = review_optional(review_importers(results, paths), paths)
    from .importers19 import review as review_gated_importers
    results = review_gated_importers(results, paths)  # (importers behind a probe of the package, in forward_cuda: importers19.py)
    from .importguards20 import review as review_triton_only_names
    results = review_triton_only_names(results, paths)  # (unguarded imports of names bound only under HAS_TRITON)
    results = review_optional_extensions(results, paths)  # (guards read across files: optionalext.py)
    results = fold_into_failing_imports(results, paths)  # (FP8 in test modules an NPU host cannot import)
    from .probes14 import review_loader_tests
    results = review_loader_tests(results, paths)  # (test modules that load a CUDA-only extension at import)
    from .labels6 import review_unread_settings
    results = review_unread_settings(results, paths)  # ("cuda" defaults of settings read nowhere: labels6.py)
    results = review_builders(results, paths)  # (a CUDA op builder beside the project's NPU one: disabled.py)
    # (CUDA builders and extensions the project's own NPU route never selects, kernel-less .cu: builders.py)
    results = review_cuda_builders(results, paths)
    results = lower_in_op_tests(results, paths)  # (warnings in tests of a CUDA-only compiled op: optests.py)
    from .cudaonly21 import review_jit_kernel_tests, review_op_benchmarks
    results = review_op_benchmarks(results, paths)  # (benchmarks timing only CUDA-only ops: cudaonly21.py)
    results = review_jit_kernel_tests(results, paths)  # (tests of the project's CUDA JIT kernels: cudaonly21.py)
    from .cudasources import review as review_cuda_sources
    results = review_cuda_sources(results, paths)  # (ROCm-only and host-only .cu, CUDA toolchain helpers)
    from .resolved import review as review_resolved
    results = review_resolved(results, paths)  # (labels, backends and notes the code resolves: resolved.py)
    from .passedbackends26 import review as review_passed_backends
    results = review_passed_backends(results, paths)  # (a backend parameter every caller picks for the device)
    from .npugates import review_unused_helpers
    results = review_unused_helpers(results, paths)  # (a lazy CUDA-only import in a helper nothing calls)
    from .benchhelpers33 import review as review_bench_helpers
    results = review_bench_helpers(results, paths)  # (a benchmark script's function nothing calls: benchhelpers33.py)
    from .labels8 import review_unreferenced_switches
    results = review_unreferenced_switches(results, paths)  # (an SDPA switch in a helper nothing references)
    from .labels8 import review_never_cuda_devices
    results = review_never_cuda_devices(results, paths)  # (`device == "cuda"` over a device list never "cuda" there)
    from .callersonly import review as review_callers_only
    results = review_callers_only(results, paths)  # (a lazy CUDA-only import in a helper only CUDA-only code calls)
    from .gates15 import review_accelerator_gated
    results = review_accelerator_gated(results, paths)  # (Triton kernels run only under an accelerator method False on NPU)
    from .tritonflags21 import review as review_imported_triton_flags
    results = review_imported_triton_flags(results, paths)  # (kernels under a Triton flag a sibling's `try` clears)
    from .tritonguards23 import review_opt_in_importers, review_run as review_raising_launchers
    results = review_raising_launchers(results, paths)  # (kernels launched only after a capability raise: tritonguards23.py)
    results = review_opt_in_importers(results, paths)  # (a Triton module its `try` importer uses only under an opt-in)
    from .builders15 import review as review_builder_flags
    results = review_builder_flags(results, paths)  # (op-builder branches and reads an NPU host never reaches: builders15.py)
    from .optional13 import review_guarded_class_imports, review_guarded_extension_callers
    results = review_guarded_class_imports(results, paths)  # (a guarded import only a class built after it reads)
    results = review_guarded_extension_callers(results, paths)  # (an extension every caller catches)
    from .optional13 import review_guarded_constructors
    results = review_guarded_constructors(results, paths)  # (an import in `__init__` every construction catches)
    from .fp8cpu import review_gated
    results = review_gated(results, paths)  # (FP8 in a function that always calls a CUDA-gated import: fp8cpu.py)
    from .fp8cpu16 import review_imported_markers
    results = review_imported_markers(results, paths)  # (tests behind a skip marker another file binds: fp8cpu16.py)
    from .backend16 import review as review_backend_branches
    results = review_backend_branches(results, paths)  # (FP8 in a CUDA backend's branch, a false imported flag)
    from .capskips import review as review_capability_skips
    results = review_capability_skips(results, paths)  # (a module skip through a helper requiring SM90+: capskips.py)
    from .optpkgtests28 import review as review_optional_package_tests
    results = review_optional_package_tests(results, paths)  # (tests skipped unless a probe finds an optional package: P1)
    from .optpkgexit29 import review as review_optional_package_exits
    results = review_optional_package_exits(results, paths)  # (a script that exits unless a probed optional package imports: P1)
    from .optpkgraise34 import review as review_optional_package_raises
    results = review_optional_package_raises(results, paths)  # (a module raising ImportError unless an optional package imports: P1)
    from .optionalcu import review as review_optional_cuda
    results = review_optional_cuda(results, paths)  # (.cu of an extension built or imported in a `try` that falls back)
    from .probedext25 import review as review_probed_extensions
    results = review_probed_extensions(results, paths)  # (.cu of an extension only its import probe selects: probedext25.py)
    from .buildgated import review as review_build_gated
    results = review_build_gated(results, paths)  # (.cu a CUDA-gated setup.py/CMake builds; kernel-less headers: buildgated.py)
    from .jitgated20 import review as review_jit_gated
    results = review_jit_gated(results, paths)  # (.cu/.cuh a JIT loader compiles, imported only behind `if _is_cuda:`)
    from .jitreach23 import review as review_jit_unreached
    results = review_jit_unreached(results, paths)  # (.cu/.cuh whose JIT loader's every library use is gated: jitreach23.py)
    from .extreach23 import review as review_unreached_extensions
    results = review_unreached_extensions(results, paths)  # (.cu of an extension only unused autograd Functions load)
    from .loaders20 import review as review_cuda_loaders
    results = review_cuda_loaders(results, paths)  # (methods of a class whose __init__ loads CUDA-only extensions)
    from .srcfolds17 import review as review_source_folds
    results = review_source_folds(results, paths)  # (a helper .cu a reported .cu calls; setup.py CUDAExtension lines: srcfolds17.py)
    from .folds19 import fold_gated_sources
    results = fold_gated_sources(results, paths)  # (a leaf folder's / a kernel's arch variants' gated .cu: folds19.py)
    from .extfolds19 import fold_method_sources, fold_together_imported
    results = fold_method_sources(fold_together_imported(results, paths), paths)  # (one extension, one finding: extfolds19.py)
    from .cmakefolds25 import fold_cmake_targets
    results = fold_cmake_targets(results, paths)  # (the gated .cu of one CMake target, one note: cmakefolds25.py)
    from .cudaincludes27 import fold as fold_cuda_includes
    results = fold_cuda_includes(results, paths)  # (a header folder only one target's sources include: cudaincludes27.py)
    from .singles21 import review as review_singles21
    results = review_singles21(results, paths)  # (a host-only .cu, a lazy extension import its .cu finding names)
    from .loaderfolds25 import fold_importing_loaders
    results = fold_importing_loaders(results, paths)  # (a module-level loader an imported module runs first)
    from .redundant14 import review_triton_helpers
    results = review_triton_helpers(results, paths)  # (a kernel-less Triton helper its importers report: redundant14.py)
    from .validated import review as review_validated
    results = review_validated(results, paths)  # (backends and schemes the project's validation rejects: validated.py)
    from .capnone25 import review as review_none_capability
    results = review_none_capability(results, paths)  # (a capability check failing on the project's None capability: capnone25.py)
    from .tests15 import review as review_untaken15
    results = review_untaken15(results, paths)  # (another platform's enum member, a constant-false flag: tests15.py)
    from .gates16 import review as review_gates16
    # (imports behind an accelerator's `is_triton_supported()` False on NPU, bitsandbytes functions the
    # NPU backend has, build arguments of a command already reported: gates16.py)
    results = review_gates16(results, paths)
    from .dockerargs29 import review as review_docker_args
    results = review_docker_args(results, paths)  # (a CI image argument its Dockerfile's own ARG reports: dockerargs29.py)
    from .buildargs34 import review as review_build_args
    results = review_build_args(results, paths)  # (a CI build argument's CUDA variable its Dockerfile's ARG reports: buildargs34.py)
    from .singlepins34 import review as review_single_pins
    results = review_single_pins(results, paths)  # (CUDA_VISIBLE_DEVICES=0 before single-device Python runs: singlepins34.py)
    from .helmvalues32 import review as review_helm_values
    results = review_helm_values(results, paths)  # (a Helm values key its chart's templates read and report: helmvalues32.py)
    from .flags16 import review as review_platform_flags
    results = review_platform_flags(results, paths)  # (blocks behind a flag bound to the project's false predicate: flags16.py)
    from .fp8consts19 import review as review_fp8_constants
    results = review_fp8_constants(results, paths)  # (module-level FP8 dtype constants, branches ending in a gated call)
    from .patcher19 import review as review_patcher
    results = review_patcher(results, paths)  # (torch.cuda names a project's own transfer_to_npu load remaps: patcher19.py)
    from .singles22 import review_backend_params, review_run as review_singles22
    results = review_singles22(results, paths)  # (inference captures the patcher maps to NPUGraph: singles22.py)
    results = review_backend_params(results, paths)  # (a backend parameter every call of the run resolves)
    from .raisefirst23 import review as review_raise_first
    results = review_raise_first(results, paths)  # (a test's lines after a call that always raises on NPU: raisefirst23.py)
    from .optparams20 import review as review_opt_in_params
    results = review_opt_in_params(results, paths)  # (code under a False-default flag only skipped tests set: optparams20.py)
    from .probedplugins20 import review as review_probed_plugins
    results = review_probed_plugins(results, paths)  # (a plugin's load() repeating its is_available() probe: probedplugins20.py)
    from .probes19 import review_backend_comparisons
    results = review_backend_comparisons(results, paths)  # (`if backend == "nccl"` over a rewritten default: probes19.py)
    from .flagcalls19 import review as review_flag_calls
    results = review_flag_calls(results, paths)  # (blocks behind another module's flag a project function computes False: flagcalls19.py)
    from .testgates26 import review_flag_skips
    results = review_flag_skips(results, paths)  # (tests a skip on another module's flag keeps off the NPU: testgates26.py)
    from .callgates21 import review as review_call_gates
    results = review_call_gates(results, paths)  # (functions another module calls only under a gate false there)
    from .publichelpers27 import review as review_public_helpers
    results = review_public_helpers(results, paths)  # (public functions only tests not run there call: info, P3: publichelpers27.py)
    from .kernelgates26 import review as review_kernel_gates
    results = review_kernel_gates(results, paths)  # (Triton kernels whose every launch is behind such a gate: kernelgates26.py)
    from .devicefns27 import review_device_functions
    results = review_device_functions(results, paths)  # (device functions called only inside those kernels: devicefns27.py)
    from .gatedusers24 import review as review_gated_users
    results = review_gated_users(results, paths)  # (helpers serving only a package imported under a false gate)
    from .fp8folds19 import review as review_fp8_folds
    results = review_fp8_folds(results, paths)  # (FP8 feeding a Triton kernel, FP8 helper calls, bnb beside a raise: fp8folds19.py)
    from .fp8storage26 import review as review_fp8_storage
    results = review_fp8_storage(results, paths)  # (FP8 storage reaching Triton kernels through attributes, helpers: fp8storage26.py)
    from .fp8optin27 import review as review_fp8_opt_in
    results = review_fp8_opt_in(results, paths)  # (an FP8 dtype an opt-in setting picks, read by imported kernels: fp8optin27.py)
    from .fp8shapes21 import review_run as review_fp8_shapes
    results = review_fp8_shapes(results, paths)  # (FP8 defaults of a function left at once, selectors given on: fp8shapes21.py)
    from .tritonmods20 import fold_device_helpers, review_imported_selectors
    results = review_imported_selectors(results, paths)  # (Triton launched behind a selector a sibling module defines)
    from .platformlayer23 import review_platform_code, review_startup
    from .folds24 import fold_file_notes, fold_kernel_tests, fold_vllm_notes
    results = fold_kernel_tests(fold_vllm_notes(results), paths)  # (the vLLM note once, kernel tests: folds24.py)
    results = fold_file_notes(results)  # (an opt-in vLLM note beside its file's NCCL warning, one per file: folds24.py)
    from .fp64tests34 import fold_test_fp64
    results = fold_test_fp64(results, paths)  # (a test's float64 reported once, its other places listed: fp64tests34.py)
    from .labelfallback34 import review as review_label_fallbacks
    results = review_label_fallbacks(results, paths)  # (a label the file falls back from where it is missing: labelfallback34.py)
    from .choicelabels26 import review as review_choice_labels
    results = review_choice_labels(results, paths)  # (a Literal option's "nccl" only compared and passed on: choicelabels26.py)
    from .targetlabels31 import review as review_target_labels
    results = review_target_labels(results, paths)  # (a test's patched-in "cuda" of a setting only compared with labels: targetlabels31.py)
    from .ifexpfallbacks30 import review as review_ifexp_fallbacks
    results = review_ifexp_fallbacks(results, paths)  # (Triton kernels only `f_triton if HAS_TRITON else f_torch` picks, P1: ifexpfallbacks30.py)
    from .siblingnames30 import review as review_sibling_names
    results = review_sibling_names(results, paths)  # (a sibling module's `..._cuda` helper read as an extension: siblingnames30.py)
    results = to_scopes(review_platforms(results, paths))
    from .resolvers24 import review_config_devices, review_graph_gates
    results = review_graph_gates(review_config_devices(results, paths), paths)  # (the project's device resolver, its accelerator's graphs: resolvers24.py)
    results = fold_device_helpers(results, paths)  # (Triton device functions only a reported kernel module calls)
    from .tritonguards23 import fold_into_fp8_errors, fold_kernel_helpers
    results = fold_kernel_helpers(results, paths)  # (the same, the helper's error its kernels': tritonguards23.py)
    from .tritonhelpers34 import fold_mixed_helpers
    results = fold_mixed_helpers(results, paths)  # (the same, beside host functions naming none of them: tritonhelpers34.py)
    results = fold_into_fp8_errors(results, paths)  # (guarded Triton kernels only an FP8 error's function calls)
    from .asmfp826 import fold as fold_asm_fp8
    results = fold_asm_fp8(results, paths)  # (FP8 only in functions launching Triton kernels with inline assembly)
    from .extfolds19 import fold_repeated_lazy_imports, fold_sibling_scripts
    # (sibling scripts failing on one unguarded import, a lazy import another file reports: extfolds19.py)
    results = fold_sibling_scripts(fold_repeated_lazy_imports(results, paths), paths)
    from .importfolders import fold as fold_import_folders
    results = fold_import_folders(results, paths)  # (a folder of modules that only fail on one package's import: once)
    from .folds19 import fold_package_submodules
    results = fold_package_submodules(results, paths)  # (submodules a failing package __init__ loads: folds19.py)
    # (code only a CUDA/ROCm platform class reaches: platforms20.py; named scopes, with the classes
    # only that code names: platformlayer23.py)
    results = review_platform_code(results, paths)
    from .lazyimports21 import review as review_lazy_importers
    results = review_lazy_importers(results, paths)  # (modules only guarded or name-selected imports load: lazyimports21.py)
    from .probed22 import review as review_probed_loaders
    results = review_probed_loaders(results, paths)  # (kernel modules only probing modules' functions load: probed22.py)
    from .probedsites26 import review as review_probed_sites
    results = review_probed_sites(results, paths)  # (lazy imports in a probing module's own functions: probedsites26.py)
    from .callees22 import review as review_callees
    results = review_callees(results, paths)  # (callees only unselected backends, schemes, CUDA methods reach: callees22.py)
    from .supportgates27 import review as review_support_gates
    results = review_support_gates(results, paths)  # (code only kernel classes their own support check rejects reach)
    from .supportexits31 import review as review_support_exits
    results = review_support_exits(results, paths)  # (code after a test's or script's exit on such a check: supportexits31.py)
    from .proberaise34 import review as review_probe_raises
    results = review_probe_raises(results, paths)  # (code after `if not <probe of a CUDA-only package>: raise`: proberaise34.py)
    from .devicefns27 import review_late as review_device_functions_late
    results = review_device_functions_late(results, paths)  # (device functions called only inside kernels these passes scoped: devicefns27.py, round 32 GB#15)
    from .customops26 import review as review_custom_ops
    results = review_custom_ops(results, paths)  # (functions registered as torch ops only such code calls: customops26.py)
    from .backendpreds25 import review as review_backend_predicates
    results = review_backend_predicates(results, paths)  # (callees only a CUDA-only backend's predicate reaches: backendpreds25.py)
    from .registrykeys26 import review as review_registry_keys
    results = review_registry_keys(results, paths)  # (callees only a CUDA-only backend's registered function reaches)
    from .firstfail22 import review as review_first_failing
    results = review_first_failing(results, paths)  # (helpers only modules failing first on their package load: firstfail22.py)
    from .tritonfirst34 import fold_covered_triton_modules
    results = fold_covered_triton_modules(results, paths)  # (a Triton module loaded only after its importer's own `import triton`: tritonfirst34.py)
    from .jitfolds23 import review as review_jit_folds
    results = review_jit_folds(results, paths)  # (tests' findings that only feed a project CUDA JIT kernel: jitfolds23.py)
    from .importfolds25 import fold_repeated_imports
    results = fold_repeated_imports(results, paths)  # (an info import the same file reports again as an error)
    from .unsetcallers26 import review as review_unset_callers
    results = review_unset_callers(results, paths)  # (a private helper only an opt-in branch no call sets reaches)
    from .readerfolds26 import fold as fold_reader_notes
    results = fold_reader_notes(results, paths)  # (a gated import's readers only another such note's readers reach)
    from .disabledcallers27 import review as review_disabled_callers
    results = review_disabled_callers(results, paths)  # (a switched-off CUDA library's methods only flag-testing callers call)
    from .fp8choice27 import review as review_fp8_choices
    results = review_fp8_choices(results, paths)  # (an FP8 dtype a user picks by name for a function the run never calls)
    from .testcallers27 import review as review_test_callers
    results = review_test_callers(results, paths)  # (library code only tests/benchmarks reach, policy P2: testcallers27.py)
    from .testlabels27 import fold_pinning_tests
    results = fold_pinning_tests(results, paths)  # (a test's NCCL note a library note names: testlabels27.py)
    results = review_startup(results)  # (the project's NPU start-up loads the patcher; no-effect flags no call sets)
    from .optinraise27 import review as review_optin_raise
    results = review_optin_raise(results, paths)  # (modules only a config an NPU host never gets reaches: optinraise27.py)
    from .registryoptin28 import review as review_registry_opt_in
    results = review_registry_opt_in(results, paths)  # (modules only a registration selected by name loads, P1: registryoptin28.py)
    from .namedbackends34 import review as review_named_backends
    results = review_named_backends(results, paths)  # (a backend module its package imports only by a chosen name, P1: namedbackends34.py)
    from .envskips29 import review as review_env_skips
    results = review_env_skips(results, paths)  # (tests skipped unless a default-off switch of envs.py is set, P1: envskips29.py)
    from .envchains32 import review as review_env_chains
    results = review_env_chains(results, paths)  # (functions only a default-off switch's module-level `if` calls, P1: envchains32.py)
    from .envblocks34 import review as review_env_blocks
    results = review_env_blocks(results, paths)  # (a function's default-off `if envs.X:` block and what only it calls, P1: envblocks34.py)
    from .optparams34 import review as review_unset_flag_params
    results = review_unset_flag_params(results, paths)  # (a False-default flag parameter no file of the run names, P1: optparams34.py)
    from .profileflags34 import review as review_profile_flags
    results = review_profile_flags(results, paths)  # (a profiler an uncalled helper builds only when its flag is passed, P1: profileflags34.py)
    from .benchflags31 import review as review_bench_flags
    results = review_bench_flags(results, paths)  # (benchmark code only a default-off flag or a chosen option runs, P1: benchflags31.py)
    from .ascendfacts30 import review as review_ascend_facts
    results = review_ascend_facts(results, paths)  # (vLLM code vllm-ascend rejects or rebinds: info, ascendfacts30.py)
    from .ascendmodels32 import review as review_ascend_models
    results = review_ascend_models(results, paths)  # (vLLM models vllm-ascend registers its own class for: info, ascendmodels32.py)
    from .ascendmethods34 import review as review_ascend_methods
    results = review_ascend_methods(results, paths)  # (vLLM methods vllm-ascend replaces on the class: info, ascendmethods34.py)
    from .firstfail33 import review as review_failing_first
    results = review_failing_first(results, paths)  # (code after a warm-up call that fails first, modules importing a missing own module: firstfail33.py)
    from .stubcalls34 import review as review_stub_calls
    results = review_stub_calls(results, paths)  # (a call of a stub that raises there reported, the findings past it folded in: stubcalls34.py)
    from .finfo30 import review as review_finfo_leftovers
    results = review_finfo_leftovers(results, paths)  # (an FP8 error left with `torch.finfo` reads only: finfo30.py)
    from .importcallers34 import review as review_import_callers  # (after the passes that make opt-in probes info: test_h107)
    results = review_import_callers(results, paths)  # (CUDA-only modules imported only in units such gates keep off: importcallers34.py)
    from .unreached25 import review as review_proven_unreached
    results = review_proven_unreached(results, paths)  # (info notes whose closing test is proven false on NPU: unreached25.py)
    from .infojoin31 import review as join_info_notes
    return join_info_notes(results)  # (one info note per file per ecosystem, however its places were lowered: infojoin31.py)


# ------------------------------------------------------------------ what both commands print

NOTHING_READ = "Python files, notebooks, shell scripts, YAML/TOML configs, Dockerfiles, .env files, CUDA sources"


def empty_folder_warnings(paths, items, shown=None) -> list[str]:
    """A named folder with no file a run reads in it (empty, all excluded or ignored by git):
    one warning each, for migrate and check alike, so that a mistyped path is not a silent pass.
    `shown`: the paths as the user wrote them (default: `paths`)."""
    lines = []
    for p, name in zip(paths, shown or paths):
        folder = Path(p).absolute()
        if not folder.is_dir():
            continue
        if not any(Path(path) == folder or Path(path).is_relative_to(folder) for path, _rel in items):
            lines.append(f"{name}: no file to read in this folder ({NOTHING_READ}; after excludes "
                         "and .gitignore)")
    return lines


def shown_path(root: Path, relpath: str, cwd: Path) -> str:
    """A finding's path as both commands print it: relative to the working directory when the
    file is under it, else absolute; forward slashes."""
    full = (Path(root) / relpath).absolute()
    try:
        return full.relative_to(cwd.absolute()).as_posix()
    except ValueError:
        return full.as_posix()


def notebook_file_line(original: bytes | None, finding) -> int | None:
    """The line of the .ipynb JSON text that holds a notebook finding (None if it cannot be told)."""
    from .notebook import NotebookError, file_line

    try:
        return file_line((original or b"").decode("utf-8"), finding.cell, finding.line)
    except (NotebookError, UnicodeDecodeError, ValueError):
        return None
