"""A predicate method of a ROCm-only ops object is False on an NPU host (issue #16, round 34 ID#31).
For testscopes' evaluation (and so flagcalls19's, callgates21's walk).

testscopes reads a call whose own name is a GPU architecture or ROCm word (rules/scopes.toml
[platform] `arch_name`: `is_sm90()`, `on_gfx950()`) as False there; vLLM asks its ROCm AITER
wrapper through the object instead:

    self.is_aiter_triton_fp8_bmm_enabled = rocm_aiter_ops.is_fp8bmm_enabled()
    ...
    elif self.is_aiter_triton_fp8_bmm_enabled:
        W_K, W_K_scale = dynamic_per_batched_tensor_quant(W_K, dtype=current_platform.fp8_dtype())

`rocm_aiter_ops`'s methods are wrapped by `if_aiter_supported`, which answers None unless the ROCm
AITER library is found on a ROCm host (vllm/_aiter_ops.py), so the FP8 branch is never taken on an
NPU host. Here a zero-argument-or-more call of a predicate (`is_*`, `has_*`, `use_*`, `should_*`)
on an object whose own name (the last part of its dotted name) is a ROCm word ([platform]
`rocm_name` pattern's words `rocm`/`hip`, or `aiter`) is False. Kept: a method that is not a
predicate (`rocm_aiter_ops.fused_moe(...)`), an object named for CUDA or anything else, a
`torch.` receiver (`torch.version.hip` is testscopes' own reading).
"""

from __future__ import annotations

import ast
import re

from . import astcache

_PREDICATE = re.compile(r"^(is|has|use|should)_")
_ROCM_OBJECT = re.compile(r"(^|_)(rocm|hip|aiter)(_|$)", re.IGNORECASE)


def rocm_predicate(node: ast.AST) -> bool:
    """`rocm_aiter_ops.is_fp8bmm_enabled()`: a predicate of a ROCm-only ops object (False there)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and _PREDICATE.match(node.func.attr)):
        return False
    receiver = astcache.dotted(node.func.value) or ""
    if not receiver or receiver.startswith("torch"):
        return False
    return bool(_ROCM_OBJECT.search(receiver.rpartition(".")[2]))

