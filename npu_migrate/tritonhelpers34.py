"""A Triton device helper that shares its module with host functions, called only inside kernels
its importers report already (issue #16, round-33 audit HA#35: REDUNDANT). Whole run, from
runplan.whole_run_passes right after tritonguards23.fold_kernel_helpers.

vLLM's `model_executor/layers/mamba/ops/triton_helpers.py`:

    def launch_autotuned(kernel, grid, **kwargs):     # host code: launches the kernel it is handed
        ...
        kernel[grid](**kwargs)

    @triton.jit
    def fast_exp(x):                                  # NPU910 "`@triton.jit` kernel"
        return tl.math.exp2(LOG2E * x)

and `mamba_ssm.py`, `ssd_chunk_scan.py`, `ssd_state_passing.py`, `ssd_chunk_state.py` each say
`from ...triton_helpers import fast_exp[, launch_autotuned]`, call `fast_exp` only inside their own
`@triton.jit` kernels and report their own NPU910 error; `ssd_bmm.py` imports `launch_autotuned` only.
A device helper runs only inside the kernels calling it, and a user porting those kernels ports it
with them. tritonguards23.fold_kernel_helpers (round 23 BL#2) folds such a helper only when its
module holds nothing but Triton functions; here the module also holds host functions. Those may
stay when they never name the module's own Triton functions (a host function launching its
module's kernel, `fast_exp[grid](...)`, would be a launch no importer covers): then the module's
NPU910 error is folded into each importer's own error (tritonmods20.fold_device_helpers, checking
only the Triton functions' names at each import site; a site importing only host functions is no
site), whose message names the module, its line and the functions.

Kept (the nearest true cases): a host function of the module that names one of its Triton functions
(launches it, hands it on), an importer reading a Triton function outside its kernels, an importer
without its own error, a test or string importer (fold_device_helpers' conditions), and a module no
importer calls a Triton function of.
"""

from __future__ import annotations

import ast

from . import astcache

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _kernels(tree: ast.Module) -> frozenset[str]:
    from .tritonguards23 import kernel_decorated

    return frozenset(s.name for s in tree.body if isinstance(s, _DEFS) and kernel_decorated(s))


def kernels_of(data: bytes) -> frozenset[str]:
    """The names of the module's top-level Triton functions (`@triton.jit` ...)."""
    tree = astcache.parse(data)
    return _kernels(tree) if tree is not None else frozenset()


def host_apart(data: bytes) -> bool:
    """Whether the module defines Triton functions and host functions (or classes), and no host code
    (a host function, a class, a module-level statement other than a definition) names a Triton
    function of the module."""
    tree = astcache.parse(data)
    if tree is None:
        return False
    own = _kernels(tree)
    host = [s for s in tree.body if not (isinstance(s, _DEFS) and s.name in own)]
    if not own or not any(isinstance(s, (*_DEFS, ast.ClassDef)) for s in host):
        return False  # (a module of Triton functions only: tritonguards23.fold_kernel_helpers)
    return not any(isinstance(n, ast.Name) and n.id in own for s in host for n in ast.walk(s)) and not any(
        isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in own
        for s in host for n in ast.walk(s))


def fold_mixed_helpers(results: list, paths: dict) -> list:
    """tritonguards23.fold_kernel_helpers for helper modules that also hold host functions naming
    none of their Triton functions (see the module's doc)."""
    from .tritonguards23 import kernel_error
    from .tritonmods20 import fold_device_helpers

    return fold_device_helpers(results, paths, is_open=kernel_error, helper_ok=host_apart, kernels_of=kernels_of)
