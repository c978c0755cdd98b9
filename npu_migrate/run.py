"""The life of one run, top to bottom.

    discover (discover.py, runplan.collect) -> the run's options (runplan.make_options: rule
    selection, NPU-aware and package folders, where each shim goes) -> run_files: the cache's
    hits, then every other file by its kind (file_kind, migrate_file), in worker processes when
    there are enough of them, each file within its time budget -> results sorted by path -> the
    shims they need (needed_shims) -> the commands write: the shim once per run (inject.py), then
    each changed file atomically (cli.py, check.py --fix).

A file's kind picks its engine: Python (engine.py: prefilter, parse, rules, render), notebooks
(notebook.py), scripts, configs, Dockerfiles and CUDA sources (textfiles.py). No file takes the
run down: one that cannot be read, outlasts its time budget or kills the process migrating it is
a finding of its own (NPU001, NPU002), and the others go on.
"""

from __future__ import annotations

import functools
import os
import re
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Optional

from . import catalogue, kernels, placement, tritonguards
from .cache import digest, options_key

# The Python engine (libcst and the rule families, about 0.3 s to import) is imported by the
# functions that run it: a one-file `check` of a file with no CUDA word, a cached run, the text-file
# engine and `--help` never need it.
from .fallbacks import review_fallbacks
from .keptgates import lower_fallback_gates
from .versionprobes import review_toolkit_path, review_version_fallbacks
from . import disabled, fp8cpu16, guards15, labels9, ncclonly, notcompute, probes14, probes15, probes16, samefile, testprobes, typerefs
from . import ncclbranch21, probes19, tritonmods20
from . import capraise19
from . import wording20
from . import wording21
from . import buildprobes29, mainroute29, mocked29, unlaunched29
from . import dockerimage34, fallbacklead34
from . import closures32, scriptfolds30
from . import rocmimports32
from . import labels20
from . import fp8shapes21
from . import dominators22
from . import cudaonly21
from . import devflows24, singles22, singles23
from . import tritonguards23
from . import libgates23
from . import rocmhooks24
from . import labels24, optin27, optin28, sameguards27, smallshapes25, testgates26
from . import optinprobes27, probegates27, testlabels27
from .findings import merge_per_file
from .redundant import fold_adjacent_lines, fold_into_base_image, fold_redundant, fold_same_line
from .model import FileResult, HeavyFile, Options, isolate_heavy, tool_finding
from .probes import (
    drop_python_extensions,
    fold_gates_into_imports,
    fold_repeated_imports,
    review_guarded_probes,
    review_type_check_imports,
)
from .source import read_regular
from .testscopes import (
    drop_untaken_gates,
    in_annotation,
    lower_in_cuda_only_tests,
    lower_triton_harness,
    lower_uncalled_compile,
    raise_module_level_cuda_version,
    review_untaken_branches,
)
from .textfiles import ROCM_FOLDERS, scan_text_file, target_kind
from .triggers import PREFILTER


def file_kind(relpath: str) -> str:
    """How a discovered file is read: "python", "notebook", or a text format of textfiles.py
    (shell, yaml, toml, dockerfile, env, cuda-source). Anything else named on the command line
    is read as Python (a script without a suffix, found by its #! line)."""
    lower = relpath.lower()
    if lower.endswith((".py", ".pyw")):
        return "python"
    if lower.endswith(".ipynb"):
        return "notebook"
    return target_kind(relpath) or "python"


@functools.lru_cache(maxsize=None)
def _files_table():
    """rules/scopes.toml [files]: (vendor folders, vendored extras, tooling folders, ROCm folder
    pattern, ROCm name pattern)."""
    t = catalogue.read_table("scopes.toml")["files"]
    return (frozenset(t["vendor_folders"]), frozenset(t["vendored_extras"]), frozenset(t["tooling_folders"]),
            re.compile(t["rocm_folder"], re.IGNORECASE), re.compile(t["rocm_name"], re.IGNORECASE))


def rocm_reason(relpath: str) -> Optional[str]:
    """Why a file that only runs on AMD GPUs is left alone, or None: a file under a folder named
    rocm, hip or amd (or `docker-rocm`, `rocm_kernels`), or a module or Dockerfile named for ROCm
    (`platforms/rocm.py`, `rocm_aiter_ops.py`, `Dockerfile.rocm`). Its `torch.cuda` calls are HIP
    calls that never run on an NPU host; rewriting or reporting them is noise."""
    parts = relpath.replace("\\", "/").split("/")
    folders, name = parts[:-1], parts[-1]
    rocm_folder, rocm_name = _files_table()[3:]
    if any(p.lower() in ROCM_FOLDERS or rocm_folder.search(p) for p in folders):
        return "ROCm/HIP source (in a rocm, hip or amd folder)"
    stem = name.rsplit(".", 1)[0] if name.lower().endswith((".py", ".sh", ".yaml", ".yml", ".txt")) else name
    if rocm_name.search(stem):
        return "ROCm/HIP source (named for ROCm)"
    return None


def tooling_reason(relpath: str) -> Optional[str]:
    parts = relpath.replace("\\", "/").split("/")[:-1]
    folder = next((p for p in parts if p.lower() in _files_table()[2]), None)
    return f"a coding assistant's or editor's folder ({folder})" if folder else None


def vendored_reason(relpath: str, kind: str) -> Optional[str]:
    """Why a file inside a vendored folder is left alone, or None.

    The CUDA C++ sources of a vendored library (CUTLASS, a kernel collection) are its authors'
    kernels, not this project's: one finding per `.cu` file of a submodule says nothing a user can
    act on. The examples, tests and docs of a vendored project never run as part of this one.
    Python modules a project vendors and imports (`pkg/third_party/fla/ops.py`) do run: they are
    migrated and reported like the project's own."""
    parts = relpath.replace("\\", "/").split("/")[:-1]
    lowered = [p.lower() for p in parts]
    vendor_folders, extras = _files_table()[:2]
    for index, part in enumerate(lowered):
        if part not in vendor_folders:
            continue
        if kind == "cuda-source":
            return f"vendored CUDA source (in a {parts[index]} folder)"
        if any(inner in extras for inner in lowered[index + 2:]):
            return f"a vendored project's examples, tests or docs (in {'/'.join(parts[:index + 2])})"
    return None


def migrate_file(source: bytes, relpath: str, options: Options) -> FileResult:
    """Migrate (or scan) one file's bytes with the engine its kind needs; the ecosystem findings
    come once per file (findings.merge_per_file), whichever engine found them."""
    kind = file_kind(relpath)
    why = vendored_reason(relpath, kind) or rocm_reason(relpath) or tooling_reason(relpath)
    if why:
        return _with_facts(FileResult(relpath=relpath, original=source, skipped=why), kind)
    if kind == "notebook":
        # (loaded by the runs, and workers, that meet one)
        from .notebook import migrate_notebook

        result = migrate_notebook(source, relpath, options)
    elif kind != "python":
        result = scan_text_file(source, relpath, options)
    elif not options.shim_specs and not PREFILTER.search(source):
        # what migrate_source answers first, without importing it (libcst: 0.2 s): a one-file
        # `check` of a file with no CUDA word starts fast (with shim specs a file may need its
        # shim import moved, which the engine decides)
        return _with_facts(FileResult(relpath=relpath, original=source, skipped="no CUDA trigger words"), kind)
    else:
        from .engine import migrate_source

        result = migrate_source(source, relpath, options)
        result.findings = wording21.cuda_only_ops(result.findings, source, relpath)  # (ops registered for CUDA only)
        if result.findings:
            text = source.decode("utf-8", "replace")
            findings = lower_triton_harness(lower_in_cuda_only_tests(result.findings, text, relpath), text)
            findings = kernels.review(findings, text, result)  # NPU910/NPU913 by what the file does with them
            findings = raise_module_level_cuda_version(lower_uncalled_compile(findings, text, relpath), text)
            findings, typing_only = review_untaken_branches(findings, text, relpath)
            findings = capraise19.review(findings, text, relpath)  # (a capability raise the rewritten is_available() makes fire)
            findings = drop_untaken_gates(findings, text)
            findings = drop_python_extensions(findings, text, relpath, options.python_modules,
                                              options.first_party)
            result.findings = review_type_check_imports(review_guarded_probes(findings, text), text)
            result.findings = review_fallbacks(result.findings, text)  # (fallbacks.py)
            # (probes15.py: an availability check, importorskip or None check an NPU host fails)
            lowered = probes15.review(result.findings, text)
            if lowered != result.findings:  # (an import it lowered absorbs a fallback's import no more)
                lowered = review_fallbacks(lowered, text)
            result.findings = lowered
            # (probes16.py: a guarded import whose `except` binds a fallback, its names read only behind a check)
            result.findings = probes16.review(result.findings, text)
            # (probes19.py: ... read only in private helpers behind the probe's test; availability functions)
            result.findings = probes19.review(result.findings, text)
            # (versionprobes.py: CUDA version reads with a fallback, a CUDA_HOME tested for None)
            result.findings = review_toolkit_path(review_version_fallbacks(result.findings, text), text)
            result.findings = lower_fallback_gates(result.findings, text)  # (keptgates.py)
            # (disabled.py: CUDA code behind the code's own switch-off where the library is missing)
            result.findings = disabled.review(result.findings, text)
            result.findings = labels20.review(result.findings, text, relpath)  # (labels, fakes, test shapes: labels20.py)
            # (notcompute.py: annotations never evaluated, test tolerances, a DataParallel never called)
            result.findings = notcompute.review(result.findings, text, relpath)
            # (fp8cpu16.py: findings after a module-level assert an NPU host fails at import)
            result.findings = fp8cpu16.review(result.findings, text)
            # (ncclonly.py: NCCL-only settings written into an environment, HCCL has no counterpart)
            result.findings = ncclonly.review(result.findings, text)
            result.findings = ncclbranch21.review(result.findings, text)  # (set only for an NCCL communicator by name)
            # (labels9.py: NCCL names listed as labels; HCCL counterparts named in the message)
            result.findings = labels9.review_targets(labels9.review(result.findings, text), text)
            # (wording20.py: a CUDA-only custom op, a "cuda" device default, a skipped API torch_npu has)
            result.findings = wording20.review(result.findings, text)
            result.findings = wording21.review(result.findings, text)  # (wording21.py: round-21 wording)
            result.findings = cudaonly21.review(result.findings, text, relpath)  # (NVIDIA build tooling: cudaonly21.py)
            result.findings = singles22.review(result.findings, text)  # (registry keys, getattr defaults: singles22.py)
            result.findings = singles23.review(result.findings, text, relpath)  # (cuDNN flags, NCCL checks: singles23.py)
            result.findings = devflows24.review(result.findings, text)  # (a backend option the shim converts)
            if typing_only:
                result.skipped_scopes = sorted([*result.skipped_scopes, *typing_only])
            # (a merged finding stands on a use, not an annotation nor a fallback `try`'s import: fallbacklead34.py)
            secondary = fallbacklead34.secondary(text, in_annotation(text)) if _has_merged_group(result.findings) else None
            # (after the merge: a reference folded into an import joins the places merged into it)
            result.findings = fold_gates_into_imports(
                fold_repeated_imports(probes16.merge(result.findings, secondary), text))
            # (typerefs.py: torch.cuda classes named only as types, an import restating its reported
            # use, torch.cuda.OutOfMemoryError, CUDA_HOME only passed on)
            result.findings = typerefs.review(result.findings, text)
            # (one construct, one finding: uses of a reported object, a reported check's branch, one statement)
            result.findings = labels20.fold_profiler_branch(fold_redundant(result.findings, text), text)
            from .moveddefaults34 import review_moved_defaults
            result.findings = review_moved_defaults(result.findings, text, relpath)  # (an FP8 default moved to calls in an untaken branch: moveddefaults34.py)
            result.findings = singles22.review_folded(result.findings)  # ("nccl" its callers pass: an error)
            # (Triton the code keeps off an NPU host: kernels behind a kept CUDA test, a guarded harness)
            result.findings = tritonguards.review(result.findings, text)
            # (Triton behind a module-level availability `if` with an `else:`, names that are no device: guards15.py)
            result.findings = guards15.review(result.findings, text)
            # (FP8 in a Triton-availability block, kernels behind a builder's availability guard: fp8shapes21.py)
            result.findings = fp8shapes21.review(result.findings, text)
            result.findings = dominators22.review(result.findings, text)  # (guards that dominate later code: dominators22.py)
            result.findings = tritonguards23.review(result.findings, text)  # (Triton settings after `if not HAS_TRITON: return`)
            result.findings = libgates23.review(result.findings, text)  # (FP8 past a kernel library's ImportError gate)
            result.findings = rocmhooks24.review(result.findings, text)  # (a backend its class selects only on ROCm)
            # (CuTe-DSL code under a module-level `if` on a same-file probe of its package: tritonmods20.py)
            result.findings = tritonmods20.review_probed_modules(result.findings, text)
            # (CUDA-only code beside a clean fallback the NPU host takes, in the same file: samefile.py)
            result.findings = samefile.review(result.findings, text)
            # (test-only device probes, skipped "cuda" test cases, a CUDA version only recorded: testprobes.py)
            result.findings = testprobes.review(result.findings, text, relpath)
            # (a CUDA architecture list only iterated or tested for emptiness: probes14.py)
            result.findings = probes14.review_arch_list(result.findings, text)
            # (labels9.py: Liger in a class that already lists the NPU among its devices, AV#40)
            result.findings = labels9.review_declared(result.findings, source)
            result.findings = labels24.review(result.findings, text, relpath)  # (platform tables, simulated platforms: labels24.py)
            result.findings = smallshapes25.review(result.findings, text, relpath)  # (same-file guards: smallshapes25.py)
            result.findings = testgates26.review(result.findings, text, relpath)  # (skipped constants, allocator fallbacks: testgates26.py)
            result.findings = testlabels27.review(result.findings, text, relpath)  # (sentinels, OS branches, uv scripts: testlabels27.py)
            result.findings = sameguards27.review(result.findings, text, relpath)  # (no-else Triton guards, get/set pairs: sameguards27.py)
            result.findings = optin27.review(result.findings, text)  # (code only a store_true option reaches: optin27.py)
            result.findings = optinprobes27.review(result.findings, text, relpath)  # (probed lazy imports, FP8 option converters: optinprobes27.py)
            result.findings = probegates27.review(result.findings, text, relpath)  # (FP8 built past a never-on-NPU probe)
            result.findings = optin28.review(result.findings, text)  # (code only a False-default config option reaches: optin28.py)
            result.findings = buildprobes29.review(result.findings, text)  # (torch.cuda._is_compiled(): False off CUDA)
            result.findings = unlaunched29.review(result.findings, text, relpath)  # (a test's kernel never launched)
            result.findings = mocked29.review(result.findings, text, relpath)  # (a value a test's mock returns)
            result.findings = mainroute29.review(result.findings, text, relpath)  # (helpers only skipped tests and `__main__` reach)
            result.findings = rocmimports32.review(result.findings, text, relpath)  # (code after a lazy import of ROCm-only `aiter`)
            result.findings = wording20.fold_op_bodies(result.findings, text)  # (FP8 in a CUDA-only custom op's body: wording20.py)
            result.findings = closures32.review(result.findings, text)  # (an import in a closure only a `try` calls: closures32.py)
            return _with_facts(result, kind)
    secondary = None
    if kind == "python" and _has_merged_group(result.findings):
        secondary = fallbacklead34.secondary(source.decode("utf-8", "replace"),
                                             in_annotation(source.decode("utf-8", "replace")))
    result.findings = merge_per_file(result.findings, secondary)
    if kind == "dockerfile":
        result.findings = fold_into_base_image(result.findings)
        # (the CUDA image's own `ARG x="cuda"` build switch: part of that image's port, dockerimage34.py)
        result.findings = dockerimage34.fold_build_args(result.findings, source.decode("utf-8", "replace"))
    if kind != "python" and result.findings:  # (one line, one block of a script: one finding for its variables)
        lines = source.decode("utf-8", "replace").splitlines()
        result.findings = fold_adjacent_lines(fold_same_line(result.findings), lines)
        result.findings = scriptfolds30.fold_repeated_reads(result.findings)  # (a caller's visible devices read again)
        result.findings = testlabels27.review_ci_scripts(result.findings, source, relpath, kind)  # (CUDA build scripts of CI folders)
    return _with_facts(result, kind)


def _with_facts(result: FileResult, kind: str) -> FileResult:
    """A .py file's result with the facts the whole-program pass needs (read here, in the
    worker, once per content: they go into the cache entry with the result)."""
    if kind == "python" and result.original is not None and result.relpath.endswith(".py"):
        from .wholeprogram import file_facts

        result.facts = file_facts(result.relpath, result.original)
    return result


def _has_merged_group(findings) -> bool:
    """Whether two report-only findings share a code: only then does merging pick an anchor."""
    seen = set()
    for finding in findings:
        if not finding.fixable:
            if finding.code in seen:
                return True
            seen.add(finding.code)
    return False


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
    if not data or shim.encode() not in data:  # a substring test first: most files name no shim
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


class _RunState:
    alarm_armed = False  # the handler raises only while a file's budget runs
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
    finding = tool_finding("NPU001", relpath, f"took longer than {seconds:g} s to migrate ({FILE_TIMEOUT_ENV})")
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
    finding = tool_finding("NPU001", relpath, detail)
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
        return FileResult(relpath=relpath, findings=[tool_finding("NPU002", relpath, exc.strerror or str(exc))])
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


_WARM_SOURCE = b"import torch\ntorch.cuda.synchronize()\nx = torch.zeros(1).cuda()\n"


def _warm_up(options: Options) -> None:
    """Load what the rules import lazily before any file's budget runs: the first file migrated
    in a process would otherwise pay for it (about 0.1 s, more on a loaded machine), and with a
    small budget a two-line file timed out. Forked workers inherit what the parent loaded (where
    there is no fork there is no SIGALRM either, so no budget to protect)."""
    try:
        migrate_file(_WARM_SOURCE, "__npu_migrate_warm_up__.py", options)
    except Exception:  # pragma: no cover - the real files report their own errors
        pass


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
    if tasks and seconds:
        _warm_up(options)

    def deliver(result: FileResult) -> None:
        results.append(result)
        if progress:
            progress(result)

    if jobs > 1 and len(tasks) >= 16:
        _run_pool(tasks, jobs, seconds, deliver)
    else:
        saved = _install_alarm()
        isolate_heavy(True)  # (in-process: a heavy file goes to a process of its own)
        try:
            for task in tasks:
                try:
                    result = migrate_path(task)
                except HeavyFile:  # a parse that may outlast the budget: where it can be killed
                    result = _run_isolated([task], 1, seconds)[0]
                deliver(result)
        finally:
            isolate_heavy(False)
            _restore_alarm(saved)
    if cache is not None:
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
    isolate_heavy(False)  # (a worker can be killed: no process of its own needed)
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
    isolate_heavy(False)
    _install_alarm()
    try:
        result = migrate_path(task)
    except BaseException as exc:  # nothing above would report it
        detail = f"internal error, left unchanged: {type(exc).__name__}: {exc}"
        result = FileResult(relpath=task[1], findings=[tool_finding("NPU001", task[1], detail)], uncached=True)
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


# An NPU value as code holds it (families/platform.py _NPU_CODE), as a cheap byte test
def _names_the_npu(filename: str) -> bool:
    """A module named for the NPU: npu_accelerator.py, npu.py, NpuPlatform.py, ascend_backend.py
    (a word of the name that starts or ends with "npu", or holds "ascend" or "hccl")."""
    words = re.split(r"[^a-z0-9]+", filename.lower().rsplit(".", 1)[0])
    return any(w.startswith("npu") or w.endswith("npu") or "ascend" in w or "hccl" in w for w in words)


def platform_classes(items: Iterable[tuple[str, str]]) -> frozenset:
    """(relpath, class name, reason) of the classes in a per-device class family spread over the
    modules of one folder (families/platform.py, sibling_class_families). Such families name
    their modules by device (DeepSpeed's and ColossalAI's npu_accelerator.py beside
    cuda_accelerator.py), so only a folder with a module named for the NPU is read: no file is
    read on a project without one, as every run pays for this step, warm ones included."""
    by_folder: dict[str, list[tuple[str, str]]] = {}
    for path, rel in items:
        if rel.endswith(".py"):
            by_folder.setdefault(os.path.dirname(rel), []).append((path, rel))
    folders: dict[str, dict[str, str]] = {}
    for folder, files in by_folder.items():
        if len(files) < 2 or not any(_names_the_npu(os.path.basename(rel)) for _path, rel in files):
            continue
        texts: dict[str, str] = {}
        for path, rel in files:
            try:
                data = read_regular(path)
            except OSError:
                continue
            if b"class " not in data:
                continue
            texts[rel] = data.decode("utf-8", errors="replace")
        if len(texts) > 1:
            folders[folder] = texts
    if not folders:
        return frozenset()
    from .families import platform

    return platform.sibling_class_families(folders)

