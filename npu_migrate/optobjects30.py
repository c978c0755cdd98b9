"""Code an NPU host reaches only through an object the library builds under a user's choice
(issue #16, policy P1; round-30 audit EB#12, EB#26, EB#29, EB#36, EC#11, EC#12, EC#17, EC#38).
Read by testcallers27.py's walk, beside optconfig29.py.

vLLM builds its speculators, its rejection sampler, its ubatch wrapper and its encoder CUDA graph
manager only under a config field off by default, and the kernels or CUDA graphs their methods reach
run nowhere else:

    # vllm/config/vllm.py
    class VllmConfig:
        speculative_config: SpeculativeConfig | None = None

    # vllm/v1/worker/gpu/model_runner.py
    if self.speculative_config is not None:
        self.speculator = init_speculator(self.vllm_config, self.device)

    # vllm/v1/worker/gpu/model_states/interface.py
    manager = EncoderCudaGraphManager(...) if enable_encoder_cuda_graph else None

    # vllm/v1/worker/gpu_ubatch_wrapper.py
    @dataclass
    class CUDAGraphMetaData:
        cudagraph: torch.cuda.CUDAGraph           # NPU202, merged with the capture below
    class UBatchWrapper:                          # built only under `parallel_config.use_ubatching`
        def _capture(self, ...):
            metadata = CUDAGraphMetaData(cudagraph=torch.cuda.CUDAGraph(), ...)

optconfig29.py now reads `<x>.F is None` / `is not None` (a field whose default is None: an object
the user asks for) and the true branch of `a if test else b`. This module adds the place the walk
could not follow: a field annotation of a class (`cudagraph: torch.cuda.CUDAGraph`, a statement of
the class body that only names a type) belongs to its class, whose references the walk follows
like a method's: the annotation evaluates nothing of CUDA (the name exists on every torch) and the
object it describes exists only where the class is built. A merged finding whose places are the
annotation and the capture (EB#12, EB#26) was kept whole because the annotation's place had no
unit.

What stays (the nearest true cases): a class-level statement with a value (`stream = torch.cuda.Stream()`
runs when the class is defined); a module-level annotation (no class to follow); a class built
where an NPU host runs (the walk keeps it).
"""

from __future__ import annotations

import ast
from typing import Optional

from . import astcache


def field_class(tree: ast.Module, line: int) -> Optional[ast.ClassDef]:
    """The module-level class whose body holds, at `line`, a field annotation that evaluates only a
    type (`name: T` or `name: T = <constant>`); None otherwise."""
    for stmt in tree.body:
        if not (isinstance(stmt, ast.ClassDef) and stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno)):
            continue
        for item in stmt.body:
            if isinstance(item, ast.AnnAssign) and item.lineno <= line <= (item.end_lineno or item.lineno) \
                    and isinstance(item.target, ast.Name) \
                    and (item.value is None or isinstance(item.value, ast.Constant)) \
                    and item.annotation.lineno <= line <= (item.annotation.end_lineno or item.annotation.lineno):
                return stmt
        return None
    return None


def _module_of(run, j: int, stmt: ast.ImportFrom) -> Optional[int]:
    """The run's module a `from M import ...` of module j names (by dotted or relative name)."""
    from .modpaths import resolve_relative

    if stmt.level:
        stem = resolve_relative(run.results[j].relpath, stmt.level, stmt.module or "")
        name = stem.replace("/", ".")
    else:
        name = stmt.module or ""
    return run.by_name.get(name)


module_of = _module_of  # (public: kvchoice31.py reads an aliased import's module)


def another_unit(run, j: int, tree: ast.Module, name: str, i: int) -> bool:
    """Module j binds `name` by `from M import name`, M another module of the run defining its own
    top-level `name` (vLLM's two `RejectionSampler` classes, EB#36), and imports nothing of module
    i: its references by that name are the other unit's. False where unsure (a star import, an
    import of module i or of its package's leaf, a binding not at the top)."""
    other = None
    here = set(_names_of(run.results[i].relpath))
    for stmt in astcache.nodes(tree, (ast.ImportFrom, ast.Import)):  # (a lazy import of module i inside a function counts too)
        if isinstance(stmt, ast.ImportFrom):
            k = _module_of(run, j, stmt)
            for alias in stmt.names:
                if alias.name == "*" or k == i or (stmt.module and f"{stmt.module}.{alias.name}" in here):
                    return False  # (module i itself, or its package's leaf: `from pkg import mod`)
                if (alias.asname or alias.name) == name:
                    other = k if alias.name == name and stmt in tree.body and other in (None, k) else -1
        elif isinstance(stmt, ast.Import) and any(alias.name in here for alias in stmt.names):
            return False
    own = {s.name for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    if other is None or other < 0 or other == i or name in own:
        return False
    theirs = run.tree(other)
    return theirs is not None and any(
        isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and s.name == name for s in theirs.body)


def _names_of(relpath: str) -> list:
    from .modpaths import module_names

    return module_names(relpath)
