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


LOADER = """\
_fwd = None


def _load_flash_attn():
    global _fwd
    if _fwd is None:
        try:
            from flash_attn.flash_attn_interface import _flash_attn_varlen_forward as _fwd
        except ImportError as e:
            raise RuntimeError("install flash-attn") from e


class Ring:
    @staticmethod
    def attention(q, k, v):
        _load_flash_attn()
        return Ring.forward(q, k, v)

    @staticmethod
    def forward(q, k, v):
        import flash_attn

        return flash_attn.__version__, _fwd(q, k, v)


class Other:
    def forward(self, q):
        import flash_attn

        return flash_attn.__version__
"""


def test_import_again_in_a_class_calling_the_loader_is_folded(tmp_path: Path) -> None:
    """AI#36: `import flash_attn` in a method of a class whose other method calls the module's
    loader of flash-attn (reported) restates that finding: folded into it. A class that calls no
    loader keeps its own finding."""
    report = migrate_json(write_project(tmp_path, {"ring.py": LOADER}))
    found = [f for f in _open(report, "ring.py") if f["code"] == "NPU502"]
    lines = {f["line"] for f in found}
    assert 8 in lines and 21 not in lines, found
    loader = next(f for f in found if f["line"] == 8)
    assert loader["severity"] == "error" and "21" in loader["message"], loader
    assert "class whose methods call the loader" in loader["message"], loader
    other = [f for f in found if f["line"] == 28]
    assert other and other[0]["severity"] == "error", found


WRAPPER = """\
try:
    import apex.amp as apex_amp
except ImportError:
    pass


class AmpOptimizer:
    def __init__(self, optim):
        self.optim = optim

    def backward(self, loss):
        with apex_amp.scale_loss(loss, self.optim) as scaled:
            scaled.backward()
"""

BUILDER = """\
from .wrap import AmpOptimizer
from .loose import LooseOptimizer


def convert(model, optimizer, config):
    import apex.amp as apex_amp

    model, optimizer = apex_amp.initialize(model, optimizer, **config)
    return model, AmpOptimizer(optimizer)


def convert_loose(optimizer):
    return LooseOptimizer(optimizer)
"""


def test_guarded_import_only_a_class_built_after_the_import_reads(tmp_path: Path) -> None:
    """AI#13: `try: import apex.amp except ImportError: pass` read only by a class that the run
    builds only after its own (reported) import of apex.amp: info naming where the use is
    reported. The same shape whose class a function builds without importing apex stays an error."""
    root = write_project(tmp_path, {"pkg/__init__.py": BUILDER, "pkg/wrap.py": WRAPPER,
                                    "pkg/loose.py": WRAPPER.replace("AmpOptimizer", "LooseOptimizer")})
    report = migrate_json(root)
    # (round 14, redundant14.py / moot.AS_WRITTEN: the guarded import is a named scope, not a finding)
    assert not [f for f in _open(report, "pkg/wrap.py") if f["code"] == "NPU902"]
    wrap = [f for f in with_as_written(report) if f["path"] == "pkg/wrap.py" and f["code"] == "NPU902"]
    assert wrap and all(f["severity"] == "info" and f.get("scope") for f in wrap), wrap
    assert "pkg/__init__.py:6" in wrap[0]["message"], wrap
    builder = [f for f in _open(report, "pkg/__init__.py") if f["code"] == "NPU902"]
    assert builder and builder[0]["severity"] == "error", builder
    loose = [f for f in _open(report, "pkg/loose.py") if f["code"] == "NPU902"]
    assert loose and loose[0]["severity"] == "error", loose


MISC = '''\
import warnings

import torch

DEVICE = "cuda"


def connected_components(mask):
    """Labels of the mask's components."""
    from sam_ext import _C

    return _C.get_connected_components(mask.to(torch.uint8))


def fill_holes(mask):
    try:
        labels = connected_components(mask <= 0)
        mask = torch.where(labels > 0, 0.1, mask)
    except Exception as e:
        warnings.warn(f"{e}: skipping the hole filling")
    return mask
'''

STRICT = '''\
import torch

DEVICE = "cuda"


def strict_components(mask):
    from sam_ext import _C

    return _C.get_connected_components(mask)


def strict_fill(mask):
    try:
        return strict_components(mask)
    except Exception as e:
        raise RuntimeError("hole filling needs the extension") from e
'''

TRANSFORMS = '''\
import warnings


def postprocess(masks):
    from pkg.misc import connected_components

    try:
        masks = connected_components(masks)
    except Exception as e:
        warnings.warn(str(e))
        masks = masks.float()
    return masks
'''


def test_extension_every_caller_catches_is_a_warning(tmp_path: Path) -> None:
    """AI#24: `from ext import _C` in a function whose every caller (in its file and another)
    calls it in `try`/`except Exception` that warns and goes on: a warning with the reason, not an
    error and not a scope (round 14, AK#26: the skipped step makes the results differ). The same
    import in a function whose caller re-raises stays an error."""
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/misc.py": MISC, "pkg/transforms.py": TRANSFORMS,
                                    "pkg/strict.py": STRICT})
    report = migrate_json(root)
    found = {f["line"]: f for f in _open(report, "pkg/misc.py") if f["code"] == "NPU911"}
    assert found[10]["severity"] == "warning" and "every caller of `connected_components`" in found[10]["message"], found
    strict = [f for f in _open(report, "pkg/strict.py") if f["code"] == "NPU911"]
    assert strict and strict[0]["severity"] == "error", found
