"""torch.cuda build probes that every torch build answers (issue #16, round-29 audit DA#12). Per file,
from run.migrate_file (after sameguards27.py).

vLLM's `platform_utils.py`:

    def cuda_is_initialized() -> bool:
        if not torch.cuda._is_compiled():
            return False
        return torch.cuda.is_initialized()

`torch.cuda._is_compiled` is in no torch_npu support list, so the family reports it (NPU202, "left
unchanged"). But it is a plain torch function, defined in every build (CPU builds included), and
on a build without CUDA, as an NPU host's torch is, it answers False: the code takes the path of any
CUDA-less machine, exactly as it does there today (invariant 1: faithful). Nothing fails. Such a
finding, every place of which is one of rules/cuda_api.toml [build_probes] (`_is_compiled`,
`_is_in_bad_fork`, both False off CUDA), called with no arguments, becomes info with the reason
`BUILD_PROBE` (a moot.AS_WRITTEN phrase: a named scope "runs as written on an NPU host").

Kept (the nearest true cases): any other private torch.cuda name (`torch.cuda._lazy_init()`,
`torch.cuda._sleep(...)`: they need the CUDA runtime), a probe merged with such a name in one
finding, and a probe read as a value rather than called (`f = torch.cuda._is_compiled`).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import replace

from . import astcache, catalogue

BUILD_PROBE = ("a CUDA build probe every torch build answers: False on an NPU host, as on any torch build "
               "without CUDA, so the code takes its CUDA-less path there")


@functools.lru_cache(maxsize=None)
def probes() -> frozenset:
    """`torch.cuda.<name>` for each name of rules/cuda_api.toml [build_probes]."""
    names = catalogue.read_table("cuda_api.toml").get("build_probes", {}).get("names", ())
    return frozenset(f"torch.cuda.{name}" for name in names)


def review(findings: list, text: str) -> list:
    """`findings`, with each NPU202 finding made only of called build probes lowered to info."""
    wanted = probes()
    hits = [f for f in findings if f.code == "NPU202" and not f.fixable and f.severity != "info"
            and f.source in wanted and all(source in wanted for _l, _c, source in f.also)]
    if not hits:
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    called = {(node.func.lineno, node.func.col_offset + 1) for node in astcache.walk(tree)
              if isinstance(node, ast.Call) and not node.args and not node.keywords
              and astcache.dotted(node.func) in wanted}
    lowered = {}
    for finding in hits:
        places = [(finding.line, finding.column), *((line, column) for line, column, _s in finding.also)]
        if all(place in called for place in places):
            lowered[id(finding)] = replace(finding, severity="info", message=f"{finding.message} ({BUILD_PROBE})")
    return [lowered.get(id(f), f) for f in findings] if lowered else findings
