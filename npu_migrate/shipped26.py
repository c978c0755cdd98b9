"""Files a package's build never ships are no sites that keep platform-only code reached (issue #16, round 26).

platforms20.py finds the code only a CUDA/ROCm/XPU platform class reaches: a module is reached
only through that class when every library site that imports it or names it by string lies in
that code (tests aside). Round 19's AZ#1 (still reported in round 26) is a Triton-kernel module
of a LoRA op package that only the CUDA/ROCm platform's `get_punica_wrapper()` reaches, through a
dotted class path to the GPU punica wrapper, which imports the op package. The pass kept the
module reached all the same, because two scripts of the repository's top-level `benchmarks/`
folder import the op package to time its kernels. Such a folder (like `examples/`, `scripts/`
and `tools/`: setuptools' flat-layout exclusions) is never part of the installed package: an NPU
host running the project never loads it, and a benchmark of a CUDA kernel is the project's own
measuring tool, not the library's way to the kernel. Its sites are set aside like a test's, so
the module is reached only through the platform class: its findings are lowered to info by
platforms20.py and named as a scope by platformlayer23.py, with the platform class, the registry
line and the site of the library that reaches the module.

What stays: a module that any shipped library module imports or names from code an NPU host runs
(the site outside the platform class's closure keeps it reached, whatever the benchmarks do); a
module that only benchmarks import and no platform class reaches (no seed: untouched); the
benchmark's own findings (this changes only which sites count, never a finding of the benchmark).
Only the top-level folder counts (`pkg/tools/` inside the package ships).
"""

from __future__ import annotations

# top-level folders a package's build never ships (setuptools' flat-layout exclusions)
UNSHIPPED_FOLDERS = frozenset({"example", "examples", "benchmark", "benchmarks", "scripts", "tools"})


def unshipped(relpath: str) -> bool:
    """Whether `relpath` (relative to the run's root) lies under a top-level folder a package's
    build never ships, so that an NPU host running the installed project never loads it."""
    first, sep, _rest = relpath.partition("/")
    return bool(sep) and first in UNSHIPPED_FOLDERS
