"""`current_platform.is_out_of_tree()` is True on an NPU host (issue #16, round 34: IB#23, IC#17,
the MoE backends "the out-of-tree platform never selects"). For npugates.known_value, so testscopes
and flagcalls19 (callgates21's walk) read it.

vLLM runs on Ascend through the vllm-ascend plugin, whose `NPUPlatform` is an out-of-tree platform
(`_enum = PlatformEnum.OOT`); dispatchops.py already reads a `CustomOp`'s dispatch that way
(`elif current_platform.is_out_of_tree(): return self.forward_oot`). vLLM's unquantized MoE oracle
asks it before any CUDA backend:

    def select_unquantized_moe_backend(moe_config):
        if current_platform.is_tpu():
            return UnquantizedMoeBackend.TPU, None
        if current_platform.is_out_of_tree():
            return UnquantizedMoeBackend.OOT, None            # an NPU host stops here
        if moe_config.is_lora_enabled and _trtllm_bf16_lora_supported(moe_config):
            return UnquantizedMoeBackend.FLASHINFER_TRTLLM, TrtLlmBf16LoRAExperts

so the code after it (the FlashInfer/TRT-LLM experts it returns, the helpers only it calls) is not
run there: callgates21's "after `if X: return`, true there", testscopes' untaken `else` branches.
Only a zero-argument call on the project's platform object (rules/scopes.toml [platform] `layer`);
a `torch.` receiver, another object's `is_out_of_tree(x)`: unknown, as before.
"""

from __future__ import annotations

import ast
import re

from . import astcache


def out_of_tree(node: ast.AST, layer: re.Pattern) -> bool:
    """`<platform>.is_out_of_tree()` on the project's platform layer (True on an NPU host)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "is_out_of_tree" and not node.args and not node.keywords):
        return False
    receiver = astcache.dotted(node.func.value) or ""
    if isinstance(node.func.value, ast.Call):
        receiver = (astcache.dotted(node.func.value.func) or "") + "()"
    return bool(receiver) and not receiver.startswith("torch") and bool(layer.search(receiver))
