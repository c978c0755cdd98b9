"""What `from flash_attn import flash_attn_func` becomes: `from npu_compat.flash_attn import ...`.

Importing this module fails exactly where importing flash_attn would have failed: it raises
ModuleNotFoundError(name="flash_attn") when there is no NPU, no flash_attn and no SDPA opt-in
(NPU_COMPAT_ATTENTION_FALLBACK=sdpa). So `try: from flash_attn import ... except ImportError:`
keeps taking its fallback, and an unguarded import still fails at import time (DESIGN.md
invariant 1). Otherwise it re-exports the functions of `.attention`, with flash-attn's signatures.
"""

from . import attention as _attention

_attention.require()  # raises ModuleNotFoundError(name="flash_attn") when no backend is usable

from .attention import (  # noqa: E402, F401  (re-exported, see __all__)
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)

__all__ = [name for name in _attention.__all__ if name.startswith("flash_attn")]
