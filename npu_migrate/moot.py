"""Findings in code an NPU host never runs become named skipped scopes, not findings.

The run lowers to info what it can show an NPU host never executes: a test skipped off CUDA (and
the helpers only such tests call), a branch whose condition is false there, a compiled object a
test never calls, a skip decorator left as written, a module only other platforms' branches
import, a method an NPU subclass overrides, a `.cu` file the NPU build does without, a
documentation example in a YAML block, another vendor's platform code (`hpu/`,
`mps_accelerator.py`), a CUDA variant folder beside the project's NPU one (`docker-cuda/` beside
`docker-npu/`). Each is true of the code and moot for the port: the reviewers of the precision
audits (issue #16) read them as noise, one after another.

So, as the last step of a run, such a finding leaves the findings and is named as a skipped scope
instead: its file, line range (the finding's lines and the places merged into it) and a reason
that keeps the code and the why (`not run on an NPU host (NPU913): in a branch an NPU host does
not take: `_is_hip``). Nothing is silent: the JSON `skipped` list and `--show-skipped` name every
one, and the text summary counts them. A CUDA runtime switch (`CUDA_DEVICE_MAX_CONNECTIONS`) is
named the same way, as `no effect on an NPU host (NPU990): ...`: the host runs it and ignores it, and
it asks for no work (NO_EFFECT), and so is a guarded import whose `except` branch an NPU host
runs (`runs as written on an NPU host (NPU910): guarded import ...`, AS_WRITTEN): the uses of the
package elsewhere stay findings. A file that only names FP8 dtypes (a config default, a dtype
table) is named `no port work on an NPU host (NPU913): names FP8 dtypes only; ...` (NO_WORK): the
dtypes exist there, and the FP8 compute sites elsewhere stay findings. What an NPU host may run
stays a finding at its severity.

NPU991 (a CUDA reference left as written inside a platform-aware scope) asks for no work: its scope
already handles the NPU, and the scope is named as skipped already. Every reviewer of the audits
read it as noise. So its lines join that scope's entry, at information level
(`...; CUDA references left as written: lines 34, 67 (2)`), instead of standing as a finding of
their own; a reference in no named scope gets a scope entry of its own.
"""

from __future__ import annotations

import dataclasses

from .findings import Finding
from .model import FileResult

# The reasons the lowering steps append to a message (testscopes.py, wholeprogram.py,
# yamlscopes.py): a finding carrying one is about code an NPU host never runs.
PHRASES = (
    "in a test that does not run on an NPU host",
    "in a helper ",
    # labels8.EXIT_PROBE: a shell script that exits 0 where its CUDA variable is unset (round 16, AR#10)
    "in a script that exits cleanly where the CUDA variable is unset",
    # cudabuilds31.BUILD_SCRIPT: a CUDA-only package's build script that stops where CUDA is absent (round 31, FA#17)
    "in a script that builds a CUDA-only package and stops where the CUDA variable is unset",
    # srcfolds17.NVCC_PHRASE: a CUDA build variable of a Dockerfile whose steps run nvcc (round 17, AT#10)
    "in a Dockerfile that runs `nvcc`",
    "in a branch an NPU host does not take",
    "in a test that never calls the compiled object",
    "a test skip: the test keeps being skipped on an NPU host",
    "imported only where an NPU host does not go",
    "imported only behind a CUDA/ROCm-only gate",  # importgates.py
    "defined for code an NPU host never runs",  # importgates.py: its importer uses it only behind such a gate
    "overridden for NPU by",
    "the project builds `",
    "documentation example in the Markdown",
    "another platform's code",  # platforms.py: another vendor's platform code (XPU, HPU, MPS, ROCm)
    "the CUDA variant beside",  # platforms.py: docker/docker-cuda beside docker/docker-npu
    "code only another accelerator's platform class runs",  # platformlayer23.PLATFORM_ONLY (round 23, BM#8)
    # guarded optional imports (probes.py, fallbacks.py): the import fails on an NPU host
    "optional import used for type checks",
    "guarded import read only by type checks and registrations",
    "in a test skipped where the package is missing",
    # fp8cpu.CANNOT_RUN: FP8 in a function that always calls a name imported only behind a CUDA gate
    "in a function an NPU host cannot run",
    # fp8cpu16.STOPPED: a module-level `assert current_platform.is_cuda()` stops the import first
    "after a module-level check an NPU host fails at import",
    # backend16.CANNOT_RUN: FP8 in a branch that first calls a name imported only behind a CUDA gate
    "in a branch an NPU host cannot run",
    # probes16.BACKEND_CODE: a lazy import in a CUDA package's backend class, in a module that imports
    # the package only under that backend's selection test (round 20, BC#17)
    "in a CUDA package's backend code an NPU host runs only if that backend is selected",
    # cudaonly21.WARMUP_FAILS: a benchmark's timing helper whose every timed callable calls a CUDA-only op (BH#6)
    "never reached on an NPU host: every callable the benchmark hands to ",
    "in a test module whose import fails on an NPU host",  # fp8tests.py: FP8 in a kernel test's reference
    "in a class whose constructor requires a CUDA-only package",  # foldbackend.ASSERTED
    "in a CUDA op builder the project does not build for NPU",  # disabled.review_builders, builders.py
    "built only by CUDA op builders the project's NPU accelerator does not use",  # builders.py (sources)
    "in a CUDA extension class an NPU host does not select",  # builders.py (extension families)
    "built only by a CUDA extension an NPU host never loads",  # optionalext.py: reported once, at its first .cu
    # optionalext.GATED_EXTENSION: the extension is imported only under a CUDA test (round-19 AZ#21)
    "built and loaded only by ",
    "selected only by a dispatch table that maps the NPU to another function",  # samefile.py
    "a type annotation, never evaluated",  # notcompute.py: `from __future__ import annotations`
    # tritonguards.RESTATED: a helper imported only where its importer's own Triton import fails
    # first (reported there): this import is never reached on an NPU host (round-10 audit: redundant)
    "imported only where its importer's own unguarded Triton import fails first",
    "imported only behind `is_triton_supported()`, which the project's NPU accelerator answers False",  # predicates.py
    'a "cuda" test case an NPU host skips',  # testprobes.SKIPPED_CASE: its skip stays CUDA-only once migrated
    # cudasources.py: a .cu whose code is all under `#if defined(USE_ROCM)` (round 12, AF#2, AG#9), and a
    # toolchain helper only CUDA extension classes reach (AE#29)
    "ROCm-only source, never built for CUDA",
    "a CUDA toolchain helper called only by CUDA extension classes",
    "a CI job on NVIDIA runners",  # yamlscopes.CI_JOB: a GitHub Actions job pinned to GPU runners (round 13)
    # probes15.GATED: an import behind `is_te_available()` (or after `if not ...: raise`) of a package
    # with no NPU build (round 14, AK#30, AM#32)
    "behind an availability check an NPU host fails",
    "in tests an NPU host skips",  # labels7.CUDA_GATED_TESTS: a Triton test gate that needs CUDA (round 14, AK#18)
    "a module nothing imports",  # optionalext.NOTHING_IMPORTS: a guarded Triton module no module imports (round 14)
    "called only from code an NPU host does not run",  # callersonly.CALLERS_ONLY: a helper only CUDA-only code calls
    "launched only under an accelerator method the NPU accelerator answers False",  # gates15.ACCELERATOR_FALSE (AH#29)
    # gates16.CUDA_GATED_TRITON: Triton kernels imported only behind `_should_use_triton()` /
    # `pkg._is_triton_available()`, which return False where `torch.cuda.is_available()` is (round 14, AL#38)
    "imported only behind a Triton gate that needs `torch.cuda.is_available()`",
    # validated.VALIDATED: a backend or scheme the project's own argument validation rejects off NVIDIA
    # hardware (round 14, AK#15, AK#22)
    "in a backend the project's own validation rejects on an NPU host",
    "a CUDA_HOME read that raises a handled exception",  # builders15.HANDLED: the project raises and catches it
    # guards15.ROCM_TRITON: Triton kernels with AMD inline assembly, selected only on ROCm (round 15, AN#8)
    "ROCm-only Triton kernels",
    # guards15.PROBED_FALSE: a custom op's "cuda" dispatch key, the op called only after `assert
    # _has_cusparseLt()`, which is False where torch has no cuSPARSELt (round 15, AN#27)
    "the dispatch key of a custom op called only after a probe false on an NPU host",
    # jitgated20.JIT_GATED: CUDA headers a JIT loader compiles, the loader imported only under
    # `if _is_cuda:` (round 20, BC#26)
    "compiled only by JIT loaders an NPU host never imports",
    # jitreach23.JIT_UNREACHED: the loader imported unguarded, each use under `_is_cuda and ...` or a
    # gate false there, or a loader no library module imports (round 23, BM#16)
    "compiled only by JIT loaders whose every library use an NPU host never runs",
    # labels24.CUSTOM_OP_UNREGISTERED: `device_types=["cuda"]` of a custom op defined only under
    # `if X is not None:`, X bound only where a package no NPU host has loads (round 24, BP#37)
    "a custom op registered only where a CUDA-only package loads",
    "proven unreached on an NPU host: ",  # unreached25.UNREACHED: a closing test proven false there (round 25)
    # firstfail33.py (round 32, GC#24, GC#40, GC#26): after a warm-up call that always fails there, and in a
    # module whose import of its own package's missing module fails on every host
    "after a call that fails first on an NPU host",
    "in a module that cannot be imported on any host",
)

# Reasons of findings about code an NPU host runs without effect: a setting it ignores, which asks
# for no work (a CUDA host still reads it). Named scopes too, with their own prefix.
NO_EFFECT = (
    "a CUDA runtime switch with no effect on an NPU host",
    # NPU405: `sdp_kernel(enable_flash=True, ...)` only enables what is on by default (round 12, AE#30)
    "it only enables backends, all enabled by default",
    "an SDPA switch under `torch.no_grad()`/`inference_mode()`",  # singles22.NO_GRAD_SWITCH (round 22, BK#36)
    "a cuDNN flag in a test that runs no cuDNN op",  # singles23.NO_CUDNN_OP (round 23, BN#24)
    "a profile that only counts FLOPs",  # singles23.FLOPS_ONLY (round 23, BN#17)
    "a setting without effect on NPU, in a block no call of the run enters",  # platformlayer23 (round 23, BL#32)
    "a pin to device 0 of single-device runs, the device an NPU host uses by default",  # singlepins34 (round 33, HC#18)
)

# Reasons of findings about a guarded import whose fallback an NPU host runs (probes.GUARDED,
# fallbacks.FALLBACK): the `except` branch is the code's own answer to a missing package, and the
# uses of the package elsewhere stay findings. The audits read these info findings as noise.
AS_WRITTEN = (
    "guarded import: the fallback runs on NPU",
    "guarded import with a fallback",
    "guarded optional block skipped cleanly",  # fallbacks.OPTIONAL_BLOCK (round-13 audit AH#27)
    "an implementation label the file falls back from where the implementation is missing",  # labelfallback34 (round 33, HB#28)
    'a test device that is never "cuda" on an NPU host',  # labels8.NEVER_CUDA (round 16, AS#27)
    # labels9.PATCH_TARGET: `monkeypatch.setattr(torch.cuda.memory, "name", fake)` (round 17, AU#6)
    "a torch.cuda module a test only patches (a patch target, not a call)",
    "a device a test's CPU fake of torch compares",  # cpufakes26.REASON (round 26, BU#9)
    "a CUDA architecture probe whose empty answer the code handles",  # probes14.ARCH_LIST_EMPTY (AI#10)
    "a CUDA version read in a `try` whose `except` binds a fallback",  # versionprobes.py
    "a CUDA toolkit path whose absence the file handles",  # versionprobes.review_toolkit_path
    # platforms.triton_on_npu: the project's own NPU backend runs Triton (Triton-Ascend), so its
    # portable kernels run there as the project ships them; inline PTX, TMA and libdevice stay errors
    "the project runs Triton on its own NPU backend",
    # tritonguards.py: Triton that the code keeps off an NPU host itself
    "Triton kernels launched only on CUDA tensors",
    "guarded import of Triton's benchmark harness",
    "a device check kept meaning CUDA whose fallback an NPU host runs",  # keptgates.py (NPU110)
    "a config device the project's resolver maps to the detected device",  # resolvers24.REMAPPED (BQ#30)
    "an opt-in backend: selecting it on an NPU host raises the project's error",  # optin.py
    "CUDA kernels behind the project's own device check",  # optin.py (NPU910)
    # disabled.py: a CUDA library the code switches off where it fails to load; a CUDA test inside
    # a condition false on an NPU host whatever it reads
    "a CUDA library loaded in a `try` whose `except` disables the feature",
    "a CUDA test inside a condition false on an NPU host",
    "a CUDA test after a part true on an NPU host in an `or`",  # disabled.TRUE_TEST (round 28, CB#5)
    # samefile.py: CUDA-only code beside a clean fallback the NPU host takes, in the same file
    "a fast-path selector kept meaning CUDA",
    "a kernel module's input check kept meaning CUDA",
    "a Triton availability probe without kernels",
    "Triton kernels behind a CUDA input check whose error the file catches",
    "a method of a class disabled where its CUDA library is missing",
    # optionalguards.review_unused_users: the `try` binds a fallback where the package is missing,
    # and what reads the names is code nothing in the project uses (round 10, Z34)
    "guarded import read only by code nothing in the project uses",
    # labelflow.DISPLAY_REASON: a version printed or logged shows None on an NPU build, nothing fails
    # (round-9 audits: "only picks a string to print")
    "`torch.version.cuda` read only for display",
    "FP8 on CPU tensors in a CPU test",  # notcompute.py: a CPU kernel test's FP8 casts
    # notcompute.DP_UNCALLED: a test wraps and unwraps a model in DataParallel, no forward runs
    # (round-10 audit: "nothing to port")
    "information: a DataParallel built in a test and never called",
    # secondary.py: a backend parameter every caller in the file leaves at None or a literal
    "a backend parameter whose every value is seen",
    # shellprobes.py: a presence probe of nvidia-smi whose script goes on without it, and an NVIDIA
    # container variable read with a default (round-11 audits AC#5, AD#12)
    "a probe: the script goes on without it",
    # cudasources.SETUP_FALLBACK: setup.py builds its CppExtension where CUDA_HOME is missing, as on an
    # NPU host, and the run reports its CUDA sources (round 12, AG#30: nothing to do in setup.py)
    "setup.py builds its `CppExtension` on an NPU host",
    "read with a fallback, not a container setting",
    "a device name the script tests, not a container setting",
    # testprobes.py: a test's device list that gets "cuda" only behind a check kept meaning CUDA
    # (the NPU host runs the other devices), and a CUDA version stored only as a report's value
    'a test device list that gets "cuda" only behind a CUDA check kept as written',
    "`torch.version.cuda` stored only as a value of a record",
    "an operator name in a table read only through `hasattr`",  # testprobes.OP_NAME
    # optional13.BUILT_AFTER: `try: import apex.amp except ImportError: pass` whose names only a class
    # reads that the run builds only after importing the package itself, reported there (round 13, AI#13)
    "guarded import whose names only `",
    # redundant14.HELPER_OF_REPORTED: an autotuner helper that runs only where its importers' own Triton
    # kernels run, reported there (round 13, AH#5)
    "a Triton helper without kernels, imported only after its importers' own Triton imports",
    # probes15.SELECTOR: `if should_use_flashinfer_...(): from flashinfer import ...` (round 14, AL#40)
    "behind a selector of the package's own backend",
    # probes15.VERSION_CHECKED: `v = torch.version.cuda; return v is not None and ...` (round 14, AK#6)
    "`torch.version.cuda` read where the code checks it for None",
    # gates16.BNB_NPU_FUNCTIONS: a lazy bitsandbytes import used only for functions its NPU backend has
    # (round 15, AN#12: peft's `dequantize_bnb_weight`)
    "bitsandbytes functions its NPU backend provides, called as written",
    "the fallback of a `getattr` of the object's `device`",  # singles22.DEVICE_FALLBACK (round 22, BI#27)
    "an inference capture that transfer_to_npu maps to NPUGraph",  # singles22.INFERENCE_CAPTURE (round 22, BJ#13)
    "a CUDA check that turns the NPU away from NCCL-only code",  # singles23.NCCL_CHECK (round 23, BL#22)
    "a CUDA name the project's own NPU start-up remaps",  # platformlayer23.STARTUP (round 23, BL#40)
    "a CUDA build probe every torch build answers",  # buildprobes29.BUILD_PROBE (round 29, DA#12)
    "a Triton import read only after a call that fails first on an NPU host",  # firstfail33.TRITON_IMPORT (GC#24)
)

# Reasons of findings that ask for no port work at all: a file that only names FP8 dtypes (a
# config default, a dtype table, a byte view; kernels.py / sweep.py `_NAMES_ONLY`) computes
# nothing in FP8, and torch's FP8 dtypes exist on an NPU host. The audits read these info findings
# as noise; the FP8 compute sites elsewhere stay findings.
NO_WORK = (
    "a Triton kernel a test defines and never launches",  # unlaunched29.NEVER_LAUNCHED (round 29, DA#24)
    "a value a test's mock returns in place of the real query",  # mocked29.MOCK_VALUE (round 29, DA#6)
    "a Python name of the importer's sibling module",  # siblingnames30.SIBLING_NAME (round 30, EC#19)
    "not FP8 compute: ",  # fp8data.NOT_COMPUTE: the FP8 dtype is data or metadata (before the generic phrase)
    # a `.cu` with nothing that runs on the GPU (builders.NO_KERNEL: compiler macros or host code only;
    # cudasources.HOST_ONLY: CPU implementations): nothing to port, two round-18 reviewers (AX#26, AY#26)
    "no kernel in the file",
    "host code compiled only in the CUDA build",
    "names FP8 dtypes only",
    "the default of a setting nothing reads",  # labels6.review_unread_settings
    "a command-line option's label, not a device: ",  # labels8.OPTION_LABEL: `args.baseline == "cuda"` (AR#7)
    "only named in a message the script prints",  # shellprobes.py: `echo "nvidia-smi not found"`
    # typerefs.py: a torch.cuda class every torch build has, named only as a type; a CUDA name
    # beside `torch.OutOfMemoryError` in one handler; CUDA_HOME/CUDAExtension only returned
    "a torch.cuda class named only as a type",
    "`torch.OutOfMemoryError` is caught beside it",
    "imported from torch.utils.cpp_extension only to be passed on",
    "a torch.cuda class imported for code an NPU host never runs",
    "an import of bitsandbytes whose name nothing reads",  # testprobes.UNREAD_IMPORT: only loads it
    # resolved.py (round 12): what the code around a finding settles: a "cuda" label its consumer
    # only compares or indexes, a backend picked for the device, bitsandbytes loaded only for the
    # caller's optimizer, the generic bitsandbytes note given once per package
    "a label the code resolves, not a device: ",
    "a backend the code resolves to HCCL on an NPU host: ",
    "bitsandbytes loaded only for an optimizer the caller already chose: ",
    "the bitsandbytes note given once for the package at ",
    "a method name an FX tracer records, not a device",  # sweep.FX_METHOD (round 13, AJ#18)
    # round 14 (labels7.py): the device of a class's own `cuda()` method (labels.OWN_METHOD_REASON,
    # AK#16) and a handler of `Tensor.cuda` itself (AM#7) are reached only through `.cuda()` calls,
    # which the migration rewrites or reports where they are; a registration names a class, builds none
    "the device of the class's own `cuda()` method",
    # device.py (NPU107): a class's own `cuda()` override delegating to its members is the only `.cuda()`
    # of the file, so no call was left unchanged because of it (round 15, AN#15, AP#26)
    "the class's own `cuda()` delegating to its members",
    "a handler of `Tensor.cuda` itself",
    "a registration, not a use",
    # ncclonly.NCCL_ONLY: `os.environ["NCCL_CUMEM_ENABLE"] = ...`, a setting HCCL has no counterpart for (AN#1)
    "an NCCL-only setting HCCL never reads",
    "an NCCL tuning variable set only when an NCCL communicator is chosen by name",  # ncclbranch21.py (BG#10)
    # labels9.py (round 17): an NCCL name in a list of backends / names to leave out (AT#7, AV#8),
    # "cuda" among Tensor method names beside "to" (AT#22)
    "an NCCL name listed as a label, not a setting: ",
    "a Tensor method name among others (`to`, ...), not a device",
    "in a class that already lists the NPU among its devices: ",  # labels9.NPU_DECLARED (AV#40)
    # labels20.py (round 20): a setting's choice value in a test (BC#9), a fake implementation's FP8
    # (BC#3), an import under a fake `sys.modules` entry (BD#4), a torch name in a type alias (BC#36)
    "a setting's value among its other choices, not a device: ",
    "in a fake (meta-tensor) implementation: ",
    "imported inside a fake module set-up, ",
    "a torch name in a type alias or annotation, never called: ",
    # cudaonly21.py (round 21): a shell "cuda" mode label only compared (BG#6), NVIDIA build tooling (BF#12)
    "a mode label the script only compares with ",
    "in NVIDIA build tooling: ",
    "a registry key naming an implementation, not a backend: ",  # singles22.REGISTRY_KEY (round 22, BI#6)
    "the vLLM note given once for the run at ",  # folds24.FOLDED: NPU916's generic note (round 24, BP#39)
    # labels34.py (round 34): a CUDA word of a display-spelling table (IB#7), compared in an if/elif
    # chain whose every branch only shows a message (ID#28)
    "a word in a table of display spellings, not a device or backend: ",
    "a choice that only picks the message shown, not a device: ",
    "the source of a dtype conversion only",  # labels7.CONVERSION_SOURCE: float64 made only to be cast (AM#3)  # diagnostics.py: `REGISTRY.register_module(module=DataParallel)` (AM#29)
)


def _reason(message: str, phrases: tuple = (*PHRASES, *NO_EFFECT, *AS_WRITTEN, *NO_WORK)) -> str | None:
    """The parenthesised reason of a moot finding's message, without the parentheses, or None."""
    for phrase in phrases:
        at = message.find(phrase)
        if at <= 0 or message[at - 1] != "(":
            continue
        depth, end = 0, len(message)
        for i in range(at - 1, len(message)):
            if message[i] == "(":
                depth += 1
            elif message[i] == ")":
                depth -= 1
                if depth == 0:
                    end = i
                    break
        return message[at:end]
    return None


def is_moot(finding: Finding) -> bool:
    """About code an NPU host never runs, or runs without effect or as written: the lowering steps
    leave it alone. A finding that only asks for no work (NO_WORK: FP8 dtype names) is not one to
    them: a skipped test or another platform's module still names it with that more telling reason."""
    return not finding.fixable and finding.severity == "info" and _reason(
        finding.message, (*PHRASES, *NO_EFFECT, *AS_WRITTEN)) is not None


def is_open(finding: Finding) -> bool:
    """An open report-only finding, what the whole-run passes may lower: not fixable, not a notebook
    cell's, not moot already, not info."""
    return not finding.fixable and finding.cell is None and not is_moot(finding) and finding.severity != "info"


def _named(finding: Finding) -> bool:
    """A finding that becomes a named scope: moot, or asking for no work (NO_WORK)."""
    return not finding.fixable and finding.severity == "info" and _reason(finding.message) is not None


LEFT_AS_WRITTEN = "CUDA references left as written: lines "


def _fold_platform_aware(scopes: list[tuple[int, int, str]], leftovers: list[Finding]
                         ) -> list[tuple[int, int, str]]:
    """The skipped scopes with the NPU991 findings' lines named in the scope holding them."""
    lines_in: dict[int, list[int]] = {}
    extra: list[tuple[int, int, str]] = []
    for finding in leftovers:
        lines = [finding.line, *(line for line, _column, _source in finding.also)]
        holder = next((i for i, (first, last, _why) in enumerate(scopes)
                       if first <= finding.line <= last), None)
        if holder is None:  # a scope the file names no other way (YAML, a comment's exclusion)
            marker = ": "
            at = finding.message.find(marker)
            why = finding.message[at + len(marker):] if at > 0 else finding.message
            extra.append((min(lines), max(lines), f"platform-aware: {why}"))
            holder = len(scopes) + len(extra) - 1
        lines_in.setdefault(holder, []).extend(lines)
    merged = [*scopes, *extra]
    for index, lines in lines_in.items():
        first, last, why = merged[index]
        unique = sorted(set(lines))
        shown = ", ".join(str(n) for n in unique[:12]) + (
            f" and {len(unique) - 12} more" if len(unique) > 12 else "")
        merged[index] = (first, last, f"{why}; {LEFT_AS_WRITTEN}{shown} ({len(unique)})")
    return merged


def to_scopes(results: list[FileResult]) -> list[FileResult]:
    """Move the findings about code an NPU host never runs into their files' skipped scopes, and
    name the NPU991 leftovers in the platform-aware scope that holds them."""
    out = []
    for result in results:
        kept, scopes, leftovers = [], [], []
        rewritten = {f.line for f in result.findings if f.fixable and f.cell is None}
        for finding in result.findings:
            if finding.code == "NPU991" and not finding.fixable and finding.cell is None:
                leftovers.append(finding)
                continue
            reason = _reason(finding.message) if _named(finding) and finding.cell is None else None
            if reason is None:
                kept.append(finding)
                continue
            lines = [finding.line, *(line for line, _column, _source in finding.also)]
            what = ("no effect on an NPU host" if reason.startswith(NO_EFFECT) else
                    "runs as written on an NPU host" if reason.startswith(AS_WRITTEN) else
                    "no port work on an NPU host" if reason.startswith(NO_WORK) else "not run on an NPU host")
            text = f"{what} ({finding.code}): {reason}"
            first, last = min(lines), max(lines)
            spans = [(first, last, text)]
            if any(first < line < last for line in rewritten):
                # (a merged finding's lines around a rewrite: one scope per run of its lines with no
                # rewrite between them, not a range that would name the rewritten line as left alone)
                spans = []
                for line in sorted(set(lines)):
                    if spans and not any(spans[-1][1] < r < line for r in rewritten):
                        spans[-1] = (spans[-1][0], line, text)
                    else:
                        spans.append((line, line, text))
            scopes.extend(span for span in spans if span not in scopes)
        if scopes or leftovers:
            named = _fold_platform_aware(list(result.skipped_scopes), leftovers)
            result = dataclasses.replace(result, findings=kept, skipped_scopes=sorted([*named, *scopes]))
        out.append(result)
    return out


# (public for folds19.py: a finding that becomes a named scope is not open port work)
named = _named
