"""Attention (NPU5xx): flash-attn's functions through the shim's NPU fused attention."""

from __future__ import annotations

import re

import libcst as cst

from .base import Example, Family
from .context import dotted_name

FLASH_MODULES = frozenset({"flash_attn", "flash_attn.flash_attn_interface"})
FLASH_FUNCTIONS = frozenset({
    "flash_attn_func", "flash_attn_varlen_func", "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func", "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache",
})
# parameter -> literal values that are harmless (the default); anything else has no NPU path
FLASH_UNSUPPORTED = {
    "softcap": {"0", "0.0"},
    "alibi_slopes": {"None"},
    "deterministic": {"False"},
    "return_attn_probs": {"False"},
    "rotary_cos": {"None"},
    "rotary_sin": {"None"},
    "cache_leftpad": {"None"},
}


def _local_name(alias: cst.ImportAlias, default: str) -> str:
    asname = alias.asname
    return asname.name.value if asname is not None and isinstance(asname.name, cst.Name) else default


class Attention(Family):
    """flash-attn's public functions, run by the shim on the accelerator in use.

    `from flash_attn import flash_attn_func` (and the varlen, packed and KV-cache variants) becomes
    `from npu_compat.flash_attn import flash_attn_func` (NPU501): on CUDA the shim calls flash-attn
    itself; on Ascend it calls `torch_npu.npu_fusion_attention` with the layout, scale, causal mask
    and dropout translated (docs/attention.md). `import flash_attn` becomes
    `from npu_compat import flash_attn` when every use in the file is one of those functions. An
    import that also takes names the shim does not map is left for the leftover sweep (NPU502). A
    call that passes a feature with no NPU path (`softcap`, `alibi_slopes`, deterministic
    backward, `return_attn_probs`, rotary embedding inside the kernel) is reported (NPU503);
    passing their defaults is fine.
    """

    NAME = "attention"
    TITLE = "Attention"
    CODES = ("NPU501", "NPU503")
    EXAMPLES = (
        Example(
            note="flash-attn's public functions: only the import changes",
            before="""\
from flash_attn import flash_attn_func


def attend(q, k, v):
    return flash_attn_func(q, k, v, dropout_p=0.0, causal=True)
""",
            after="""\
from npu_compat.flash_attn import flash_attn_func


def attend(q, k, v):
    return flash_attn_func(q, k, v, dropout_p=0.0, causal=True)
""",
            codes=('NPU501',),
        ),
        Example(
            note='the module import, and varlen functions',
            before="""\
import flash_attn


def attend(q, k, v, cu_seqlens, max_len):
    return flash_attn.flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_len, max_len)
""",
            after="""\
from npu_compat import flash_attn


def attend(q, k, v, cu_seqlens, max_len):
    return flash_attn.flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_len, max_len)
""",
            codes=('NPU501',),
        ),
        Example(
            note='a guarded import keeps its fallback',
            before="""\
try:
    from flash_attn import flash_attn_func
    HAS_FLASH_ATTN = True
except ImportError:
    HAS_FLASH_ATTN = False
""",
            after="""\
try:
    from npu_compat.flash_attn import flash_attn_func
    HAS_FLASH_ATTN = True
except ImportError:
    HAS_FLASH_ATTN = False
""",
            codes=('NPU501',),
        ),
        Example(
            note='a parameter without an NPU path: reported, the call raises on NPU',
            before="""\
from flash_attn import flash_attn_func


def attend(q, k, v):
    return flash_attn_func(q, k, v, causal=True, softcap=30.0)
""",
            after="""\
from npu_compat.flash_attn import flash_attn_func


def attend(q, k, v):
    return flash_attn_func(q, k, v, causal=True, softcap=30.0)
""",
            codes=('NPU501', 'NPU503'),
        ),
        Example(
            note='flash-attn helpers without a drop-in mapping (NPU502, from the leftover sweep)',
            before="""\
from flash_attn.bert_padding import pad_input, unpad_input
""",
            codes=('NPU502',),
        ),
        Example(
            note="PyTorch's own SDPA",
            before="""\
import torch.nn.functional as F


def attend(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
""",
        ),
        Example(
            note='a project module that happens to be called flash_attn',
            before="""\
from my_models.flash_attn import flash_attn_func

out = flash_attn_func(q, k, v)
""",
        ),
    )

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.flash_functions: dict[str, str] = {}  # local name -> public function name
        self.flash_modules: set[str] = set()  # local names of the flash_attn module

    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom):
        """from flash_attn[.flash_attn_interface] import f, g as h -> from npu_compat.flash_attn import ..."""
        module = dotted_name(original.module) if original.module else None
        if module not in FLASH_MODULES or original.relative:
            return None
        if isinstance(original.names, cst.ImportStar):
            return updated  # the sweep reports it
        pairs = []
        for alias in original.names:
            name = dotted_name(alias.name) or ""
            pairs.append((name, _local_name(alias, name)))
        if not all(name in FLASH_FUNCTIONS for name, _ in pairs):
            return updated  # partly unmapped: the sweep reports the import (NPU502)
        new = updated.with_changes(module=cst.parse_expression(f"{self.ctx.shim_module}.flash_attn"), relative=())
        result = self.ctx.rewrite("NPU501", original, new, needs_import=False)
        if result is not None:
            self.flash_functions.update({local: name for name, local in pairs})
        return result or updated

    def leave_Import(self, original: cst.Import, updated: cst.Import):
        """import flash_attn [as fa] -> from npu_compat import flash_attn [as fa], when every use is mapped."""
        if [dotted_name(a.name) or "" for a in original.names] != ["flash_attn"]:
            return None
        alias = original.names[0]
        local = _local_name(alias, "flash_attn")
        code = "\n".join(  # attribute uses only: module paths in import lines are not uses
            line for line in self.ctx.source_map.original_text().splitlines()
            if not re.match(r"\s*(from|import)\s", line)
        )
        used = set(re.findall(rf"\b{re.escape(local)}\.(\w+)", code))
        if not used or not used <= FLASH_FUNCTIONS:
            return updated
        names = [cst.ImportAlias(name=cst.Name("flash_attn"), asname=alias.asname)]
        new = cst.ImportFrom(module=cst.parse_expression(self.ctx.shim_module), names=names)
        result = self.ctx.rewrite("NPU501", original, new, needs_import=False)
        if result is not None:
            self.flash_modules.add(local)
        return result or updated

    def leave_Call(self, original: cst.Call, updated: cst.Call):
        """NPU503: a mapped flash-attn function called with a feature that has no NPU path."""
        if not (self.flash_functions or self.flash_modules):
            return None
        func = original.func
        name = None
        if isinstance(func, cst.Name):
            name = self.flash_functions.get(func.value)
        elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value in self.flash_modules:
            name = func.attr.value if func.attr.value in FLASH_FUNCTIONS else None
        if name is None:
            return None
        for arg in original.args:
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword not in FLASH_UNSUPPORTED:
                continue
            harmless = FLASH_UNSUPPORTED[keyword]
            value = arg.value
            literal = value.value if isinstance(value, cst.Name) else None
            if isinstance(value, (cst.Integer, cst.Float)):
                literal = value.value
            if literal is not None and literal in harmless:
                continue
            self.ctx.report("NPU503", arg, name=keyword)
        return None
