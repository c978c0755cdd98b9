"""A finding: one CUDA-only construct, rewritten (fixable) or only reported."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True, order=True)
class Finding:
    path: str  # relative to the run's root, with forward slashes
    line: int  # 1-based
    column: int  # 1-based
    code: str
    message: str
    fixable: bool  # True: npu-migrate rewrites it; False: it is only reported
    source: str = ""  # the construct's source text, whitespace-normalised (for baselines)

    def as_dict(self) -> dict:
        return asdict(self)
