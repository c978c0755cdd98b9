"""Device checks in front of another module's CUDA-only code are kept, not widened (issue #16
section 1, "a gate in front of CUDA-only code is reported, not widened", across modules; round-22
audit BI#8).

Within one file the engine already keeps a check whose guarded code launches a Triton kernel
(families/platform.py, CudaOnlyGates): `if x.is_cuda: _kernel[grid](...)` stays CUDA and is
reported (NPU110), since widened it would send NPU tensors into the kernel the original kept them
from. The kernel is often in another module:

    if inputs_embeds.is_cuda and ...:
        from .ops.fused_norm import norm_concat   # ops/fused_norm.py: a @triton.jit kernel and
        out = norm_concat(...)                     # the function that launches it
    else:
        out = torch.cat([...])                     # the pure-torch path an NPU host took

The per-file engine cannot see ops/fused_norm.py. This module gives it the fact:

- `module_bindings(data)` (in the worker, kept in the file's cached whole-program facts, so a warm
  run parses nothing for it): the module-level names a file binds to a Triton kernel or to a
  function or class that launches one.
- `plan(results, first_party)` (once per run, from runplan.run_engine, on the facts alone): for each
  file with a device check the engine widened (NPU104, NPU106, `torch.cuda.is_available()`) that
  imports such a module, the (module, name, what) entries of the names it may import from it.
- runplan.run_engine migrates those files again with the entries in `Options.foreign_cuda_only`:
  the engine's CudaOnlyGates binds each imported name to what it is, and decides each check as it
  would for a kernel of the file itself (kept and reported, or widened when it guards no such name).
  Their per-file cache key holds the entries (cache.options_key), so a warm run hits the cache.

Two kinds of code count. Triton kernels and their launchers: a device check keeps NPU tensors
from them. And every name of a module that imports a package an NPU host never has installed
(sweep.toml `never_on_npu`: flashinfer, sgl_kernel, ...) in a top-level statement of its own (not
under `try`/`if`): that module fails at import there, whatever is taken from it (`"*"` in its
facts), so a check in front of a lazy import of it kept the NPU host on the fallback, and widened
it would crash there. An importer that imports such a module in its own top-level statements fails
first, and its checks are widened as before (nothing in it runs on an NPU host). Other CUDA-only
code of another module (a plain function calling a compiled op) is not followed.

Names are bound per file, as the engine binds its own: `from .ops import fused_norm` (the module
by name) and `import pkg.ops.fused_norm as fn` bind the module (`fn.norm_concat(...)` counts for a
launcher, `fn.anything` for a module failing at import). A name another module of the run imports
from the kernel module (`from .fused_norm import norm_concat` in `ops/__init__.py`) is bound there
too, so that an importer of `from .ops import norm_concat` is told (two such steps). A name bound
to CUDA-only code anywhere in a file counts in every check of the file (conservative: such a
check is kept and named, never widened wrongly).
"""

from __future__ import annotations

import functools
import re

from . import astcache, catalogue
from .modpaths import module_names

# a Triton kernel's decorator (`@triton.jit`, `@triton.autotune(...)`, `@triton.heuristics(...)`)
_KERNEL = re.compile(rb"@[ \t]*triton\.(?:jit|autotune|heuristics)\b")
# the rewrites that widen a device check: `x.device.type == "cuda"`, `x.is_cuda`, and
# `torch.cuda.is_available()` (NPU201, told by its source)
_WIDENING = ("NPU104", "NPU106")


def module_bindings(data: bytes) -> list[list[str]]:
    """[name, what] of the module-level names the file binds to a Triton kernel or a launcher of
    one, and ["*", what] when the module imports a package an NPU host never has at its top level
    (families/platform.py module_level_bindings); [] for a file with neither (told from its bytes)."""
    if not _KERNEL.search(data) and not _never_on_npu_import().search(data):
        return []
    from .families import platform

    body = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    tree = astcache.parse(body)
    if tree is None:
        return []
    return sorted([name, what] for name, what in platform.module_level_bindings(tree).items())


@functools.lru_cache(maxsize=None)
def _never_on_npu_import() -> re.Pattern:
    """A line that imports a package an NPU host never has (sweep.toml `never_on_npu`), at any
    indentation (the parse decides whether it is a top-level statement)."""
    names = "|".join(re.escape(n) for n in sorted(catalogue.read_table("sweep.toml")["availability"]["never_on_npu"]))
    return re.compile(rb"^[ \t]*(?:import|from)[ \t]+(?:" + names.encode() + rb")\b", re.M)


def _widens(result) -> bool:
    return any(f.fixable and (f.code in _WIDENING or (f.code == "NPU201" and "is_available" in f.source))
               for f in result.findings)


def _keys(relpath: str, first_party: frozenset) -> list[str]:
    """The names an import of the module gives it in the run's import facts (wholeprogram.py):
    the relpath stem for a relative import, the dotted names of a first-party absolute one."""
    stem = relpath[:-3]
    if stem.endswith("/__init__"):
        stem = stem[: -len("/__init__")]
    return [stem, *(n for n in module_names(relpath) if n.split(".")[0] in first_party)]


def plan(results, first_party: frozenset) -> dict[str, frozenset]:
    """importer relpath -> the (module, name, what) entries of Options.foreign_cuda_only for it:
    the files whose widened device checks may guard another module's Triton kernels."""
    targets: dict[str, tuple[str, list]] = {}
    for result in results:
        bound = (result.facts or {}).get("bound")
        if bound:
            for key in _keys(result.relpath, first_party):
                targets.setdefault(key, (result.relpath, bound))
    if not targets:
        return {}
    _reexports(results, targets, first_party)
    out: dict[str, frozenset] = {}
    for result in results:
        if not result.facts or not _widens(result):
            continue
        entries = set()
        for name, _line, _relative in result.facts.get("imports", ()):
            hit = targets.get(name)
            if hit is None or hit[0] == result.relpath:
                continue
            for bound_name, what in hit[1]:
                entries.add((result.relpath, name, bound_name, what if " in " in what else f"{what} in {hit[0]}"))
        if entries:
            out[result.relpath] = frozenset(entries)
    return out


def _reexports(results, targets: dict, first_party: frozenset) -> None:
    """Adds to `targets` the modules that import a kernel module's bound names (`from .fused_norm
    import norm_concat` in a package `__init__`), with those names, two steps deep."""
    for _step in range(2):
        grew = False
        known = {relpath for relpath, _bound in targets.values()}
        for result in results:
            if not result.facts or result.relpath in known:
                continue
            found: dict[str, str] = {}
            for name, _line, relative in result.facts.get("imports", ()):
                module, sep, last = name.rpartition("/" if relative else ".")
                hit = targets.get(module) if sep else None
                if hit is None or hit[0] == result.relpath:
                    continue
                names = dict(hit[1])
                what = names.get(last) or names.get("*")
                if what:
                    found[last] = what if " in " in what else f"{what} in {hit[0]}"
            if found:
                bound = sorted([n, w] for n, w in found.items())
                for key in _keys(result.relpath, first_party):
                    targets.setdefault(key, (result.relpath, bound))
                grew = True
        if not grew:
            break
