"""Issue #16, round-13 audits (AH#27, AI#36, AI#13, AI#24): optional imports whose failure the code
already handles, and repeats of an import the file already reports (NPU502, NPU902, NPU911). Each
test checks that the false or redundant finding is gone (a named scope, folded, or lowered with its
reason) and that a nearby true one stays."""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, with_as_written, write_project


def _open(report: dict, path: str) -> list[dict]:
    return [f for f in report["findings"] if not f["fixable"] and f["path"] == path]


PROVIDER = """\
BENCHMARKS = {}
try:
    import flash_attn

    class FlashProvider:
        def fw(self, q, k, v):
            return flash_attn.flash_attn_func(q, k, v)

    BENCHMARKS[f"fa@{flash_attn.__version__}"] = FlashProvider
except ImportError:
    pass
"""

PROVIDER_LEAKS = """\
try:
    import flash_attn

    class FlashProvider:
        def fw(self, q, k, v):
            return flash_attn.flash_attn_func(q, k, v)

    VERSION = flash_attn.__version__
except ImportError:
    pass


def run(q, k, v):
    return FlashProvider().fw(q, k, v)
"""


def test_optional_provider_block_is_a_named_scope(tmp_path: Path) -> None:
    """AH#27: `try: import flash_attn; class P: ...; BENCHMARKS[..] = P except ImportError: pass`
    only adds an optional provider: skipped cleanly where flash-attn is missing. A provider class
    read outside the `try` (it fails there without flash-attn) keeps its error."""
    root = write_project(tmp_path, {"bench.py": PROVIDER, "leaks.py": PROVIDER_LEAKS})
    report = migrate_json(root)
    assert not [f for f in _open(report, "bench.py") if f["code"] == "NPU502"], _open(report, "bench.py")
    scoped = [f for f in with_as_written(report) if f["path"] == "bench.py" and f.get("scope")]
    assert any("guarded optional block skipped cleanly" in f["message"] for f in scoped), report["skipped"]
    kept = [f for f in _open(report, "leaks.py") if f["code"] == "NPU502"]
    assert kept and kept[0]["severity"] == "error", _open(report, "leaks.py")
