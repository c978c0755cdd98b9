"""The words without which a file holds no CUDA-only construct: a test cheap enough to run
before the engine (and libcst) is even imported."""

from __future__ import annotations

import re

# Cheap byte-level test: a file without any of these cannot hold a CUDA-only construct.
# It must match everything the rules and the sweep look for (rules/sweep.toml).
TRIGGERS = (
    r"cuda|CUDA|nccl|NCCL|cudnn|nvtx|flash_attn|flash_attention|apex|xformers|triton|cpp_extension"
    r"|hadamard|cupy|nvidia|transformer_engine|bitsandbytes"
    r"|DataParallel|data_parallel|GradScaler|reduce-overhead|max-autotune|init_process_group|new_group"
    r"|float8|_scaled_mm|_scaled_grouped_mm|vllm|deepspeed|torchao"
    # the sweep's CUDA-ecosystem packages that hold none of the words above (rules/sweep.toml)
    r"|amp_C|flashinfer|liger_kernel|mamba_ssm|causal_conv1d|spas_sage_attn|\bfla\b|\bsgl_kernel\b|\bcutlass\b|\bdeep_gemm\b"
    # names the rule tables act on that hold none of the words above
    r"|new_subgroups|is_backend_available"
)
PREFILTER = re.compile(TRIGGERS.encode())
TRIGGER_WORDS = re.compile(TRIGGERS)
