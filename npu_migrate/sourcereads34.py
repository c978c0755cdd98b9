"""References that only read a unit's source text (issue #16, round 34 audit IA#22; helper h203).

vLLM's `compilation/passes/fusion/rms_quant_fusion.py` builds `FusedAddRMSNormNvfp4QuantPattern`
only under `if _FLASHINFER_NVFP4_RMS_QUANT_OP is not None and current_platform.has_device_capability(100):`
(a FlashInfer NVFP4 op and SM100, both absent on an NPU host), but its pass's `uuid()` names the
class too:

    def uuid(self) -> str:
        return self.hash_source(self, RMSNormQuantPattern, ..., FusedAddRMSNormNvfp4QuantPattern)

That reference hashes the class's source (`inspect.getsource`) and runs none of its code, yet the
reachability walk (callgates21.Gates, and testcallers27.py's P1 reading of it) took it for a use:
the FP8 of the pattern's `replacement` became an info note "reached on an NPU host only when
`fuse_norm_quant` is chosen", a route that does not exist. `source_read(parents, node)`: `node` is
a positional argument of a call whose callee is named `hash_source`, `getsource`, `getsourcelines`
or `getsourcefile` (a name or an attribute: `self.hash_source`, `inspect.getsource`). callgates21's
`Gates.dead` counts such a reference as dead ("its source read by `hash_source(...)`, which runs
none of its code"), as callees22 does for a type test; and since the walk no longer follows the
reader (the pass's `uuid()`, which the pass manager calls from other modules), callgates21.review
takes such a reference for one beyond the unit's own file: every reference dead, the unit's
findings become named scopes ("reached only from code an NPU host does not run"). Kept (the nearest true cases): the same
class built or called anywhere an NPU host may reach (`Pattern(eps).register(...)` ungated), and an
argument of any other call (`register(Pattern)`, `functools.partial(Pattern, ...)`).
"""

from __future__ import annotations

import ast
from typing import Optional

SOURCE_READ = "which runs none of its code"  # (the phrase of every reason given here)
_SOURCE_READERS = frozenset({"hash_source", "getsource", "getsourcelines", "getsourcefile"})


def source_read(parents: dict, node: ast.AST) -> Optional[str]:
    """Why the reference `node` runs none of its unit's code (module doc), or None."""
    holder = parents.get(id(node))
    if not isinstance(holder, ast.Call) or not any(a is node for a in holder.args):
        return None
    func = holder.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if name not in _SOURCE_READERS:
        return None
    return f"its source read by `{name}(...)`, {SOURCE_READ}"
