"""A benchmark script's function that nothing calls (issue #16, round-33 audit GA#14, in part). Whole
run, from runplan.whole_run_passes (after npugates.review_unused_helpers, whose rule it widens).

vLLM's `benchmarks/kernels/benchmark_cutlass_moe_nvfp4.py`:

    def to_fp8(tensor: torch.Tensor):                      # named nowhere else in the run
        finfo = torch.finfo(torch.float8_e4m3fn)           # NPU913 (the finding's first place)
        ...

    def bench_run(...):
        ...
        w1_fp8q = torch.empty(..., dtype=torch.float8_e4m3fn)   # the same finding's other places

npugates.review_unused_helpers lowers a lazy CUDA-only import in a test file's helper (or a private
function) that nothing references, when every place of the finding lies in it. A benchmark script
is as a test file is (a file under a `benchmarks/` or `benchmark/` folder with a top-level `if
__name__ == "__main__":`): its functions are no API a user imports, and one its file names nowhere
but its `def` (no call, no attribute, no string: `getattr`, `__all__`), and that no other file of
the run names beside the module's stem, never runs. Each report-only place (any code, not info)
inside such a module-level function (undecorated, not `main`) becomes info with
npugates.UNUSED_HELPER (a named scope, moot.py), split from the finding's other places
(envskips29.lower_places): they keep their severity.

Kept (the nearest true cases): the same function called once in its file (`to_fp8(w)` in
`bench_run`), or named by another file that names the module; a benchmark module without the
`__main__` block (a harness may find its functions by name: asv's `time_*`); a library module's
function (`sglang/srt/utils/bench_utils.py`: an API, policy P3's business); a test file (npugates'
own rule).

The rest of GA#14 (the FP8 allocations of `bench_run`, after `ops.scaled_fp8_quant(a)`, a vLLM
`torch.ops._C` op that fails first on an NPU host) is not decided here: the run reports no finding
for that call (vLLM's own `_custom_ops` module) to fold them into, so they stay the file's report
that the benchmark fails there.
"""

from __future__ import annotations

import ast
import dataclasses

from . import astcache

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCRIPTS = frozenset({"benchmarks", "benchmark"})  # (a library's `utils/bench_utils.py` is an API: kept)


def _functions(tree: ast.Module) -> list:
    return [s for s in tree.body if isinstance(s, _FUNCTIONS) and not s.decorator_list and s.name != "main"]


def _script(tree: ast.Module) -> bool:
    """The module runs as a script: a top-level `if __name__ == "__main__":` (a harness that finds a
    module's functions by name, asv's `time_*`, pytest-benchmark's, has none)."""
    return any(isinstance(s, ast.If) and isinstance(s.test, ast.Compare) and isinstance(s.test.left, ast.Name)
               and s.test.left.id == "__name__" and len(s.test.comparators) == 1
               and isinstance(s.test.comparators[0], ast.Constant) and s.test.comparators[0].value == "__main__"
               for s in tree.body)


def review(results: list, paths: dict) -> list:
    """The results, with each open place of the docstring's shape lowered to info."""
    from .envskips29 import lower_places
    from .importgates import is_test
    from .modpaths import RunTexts
    from .npugates import UNUSED_HELPER, named_in_file

    def wanted(finding) -> bool:
        return not finding.fixable and finding.severity != "info" and finding.cell is None

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and not is_test(r.relpath)
                  and _SCRIPTS.intersection(r.relpath.split("/")[:-1]) and any(wanted(f) for f in r.findings)]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    python = None
    out = list(results)
    for i in candidates:
        result = results[i]
        data = text_of(i)
        if not data or b"\ndef " not in data or b"__main__" not in data:
            continue
        tree = astcache.parse(data)
        if tree is None or not _script(tree):
            continue
        spans = []
        for function in _functions(tree):
            if named_in_file(tree, function):
                continue
            if python is None:
                python = [j for j, r in enumerate(results) if r.relpath.endswith(".py")]
            word, stem = function.name.encode(), result.relpath.rsplit("/", 1)[-1][:-3].encode()
            if any(j != i and word in (data_j := text_of(j) or b"") and stem in data_j for j in python):
                continue
            spans.append((function.lineno, function.end_lineno or function.lineno, function.name))
        if not spans:
            continue

        def reason_of(line: int) -> str | None:
            for first, last, name in spans:
                if first < line <= last:
                    return (f"{UNUSED_HELPER}: `{name}` of a benchmark script is neither called in its file nor "
                            f"named in another file of the run that names its module")
            return None

        findings, changed = [], False
        for finding in result.findings:
            pieces = lower_places(finding, reason_of) if wanted(finding) else None
            changed = changed or pieces is not None
            findings.extend([finding] if pieces is None else pieces)
        if changed:
            out[i] = dataclasses.replace(result, findings=sorted(findings))
    return out
