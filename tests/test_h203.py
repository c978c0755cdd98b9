"""Round-34 audit rows IA#10 .. ID#24 (issue #16, helper h203): same-file guards, probes and skips.
Each false case beside the nearest true case (same shape, reached on an NPU host) that stays
reported."""

from __future__ import annotations

from .precision_helpers import findings_at, migrate_json, scopes_at, write_project

# ----------------------------------------------------------------------------- IC#33 (supportexits31.py)
_PLATFORMS = """\
class _Platform:
    def is_cuda(self):
        return True

    def is_device_capability_family(self, family):
        return True


current_platform = _Platform()
"""

_FLASHMLA = """\
from kit.platforms import current_platform


def is_dense_supported():
    if not current_platform.is_device_capability_family(90):
        return False, "FlashMLA Dense is only supported on Hopper devices."
    return True, None


def is_open_supported():
    return True, None
"""

_FLASHMLA_TEST = """\
import pytest
import torch


def test_dense_fp8_decode():
    import kit.ops.flashmla as fm

    ok, reason = fm.{check}()
    if not ok:
        pytest.skip(reason)
    cache = torch.randn(4, 8, device="cuda").to(torch.float8_e4m3fn)
    assert cache.numel() == 32
"""


def _flashmla(tmp_path, check: str) -> dict:
    files = {"kit/__init__.py": "", "kit/platforms.py": _PLATFORMS, "kit/ops/__init__.py": "",
             "kit/ops/flashmla.py": _FLASHMLA, "tests/test_flashmla.py": _FLASHMLA_TEST.format(check=check)}
    return migrate_json(write_project(tmp_path, files))


def test_skip_on_a_module_attribute_support_check_is_a_named_scope(tmp_path):
    """IC#33: `import kit.ops.flashmla as fm` in the test, then `ok, reason =
    fm.is_dense_supported(); if not ok: pytest.skip(reason)`; the check answers no on an NPU host
    (a Hopper family test): the FP8 after the skip is a named scope naming the check."""
    report = _flashmla(tmp_path, "is_dense_supported")
    assert not findings_at(report, "tests/test_flashmla.py", "NPU913")
    reasons = scopes_at(report, "tests/test_flashmla.py", "NPU913")
    assert list(reasons) == [11]
    assert "not run on an NPU host" in reasons[11] and "is_dense_supported()" in reasons[11]


def test_skip_on_a_module_attribute_check_that_answers_yes_stays(tmp_path):
    """Nearest true case: the same skip on a check of the same module that answers yes on an NPU
    host: the FP8 after it stays reported."""
    report = _flashmla(tmp_path, "is_open_supported")
    assert list(findings_at(report, "tests/test_flashmla.py", "NPU913")) == [11]


# ----------------------------------------------------------------------------- IA#10 (proberaise34.py)
_IMPORT_UTILS = """\
import importlib.util


def _has_module(name):
    return importlib.util.find_spec(name) is not None


def has_cutedsl():
    return _has_module("cutlass")


def has_einops():
    return _has_module("einops")
"""

_INDEXER = """\
import torch

from kit.import_utils import {probe}


def _assert_merge_supported(logits):
    if not {probe}():
        raise RuntimeError("DCP merge requires the package; install it or disable DCP.")
    if logits.device.type != "cuda":
        raise RuntimeError("DCP merge requires CUDA tensors.")
    return logits
"""


def _indexer(tmp_path, probe: str) -> dict:
    files = {"kit/__init__.py": "", "kit/import_utils.py": _IMPORT_UTILS,
             "kit/indexer.py": _INDEXER.format(probe=probe)}
    return migrate_json(write_project(tmp_path, files))


def test_check_after_a_raising_probe_of_a_cuda_only_package_is_a_named_scope(tmp_path):
    """IA#10: `if not has_cutedsl(): raise` (a probe of `cutlass`, CUDA-only) raises first on an
    NPU host: the kept "cuda" check after it is a named scope, not advice to widen it."""
    report = _indexer(tmp_path, "has_cutedsl")
    assert not findings_at(report, "kit/indexer.py", "NPU108")
    reasons = scopes_at(report, "kit/indexer.py", "NPU108")
    assert list(reasons) == [9]
    assert "not run on an NPU host" in reasons[9] and "`if not has_cutedsl(): raise` (line 7)" in reasons[9]


def test_check_after_a_raising_probe_of_a_package_an_npu_host_has_stays(tmp_path):
    """Nearest true case: the same raise on a probe of `einops` (an NPU host may have it): the
    check after it stays reported."""
    report = _indexer(tmp_path, "has_einops")
    assert list(findings_at(report, "kit/indexer.py", "NPU108")) == [9]


# ----------------------------------------------------------------------------- IC#5 (removedmembers34.py)
_MLA_TEST = """\
import enum

import pytest
import torch


class Backend(enum.Enum):
    FLASH = 1
    TOKENSPEED = 2
    AITER = 3


BACKENDS_TO_TEST = [Backend.FLASH, Backend.TOKENSPEED]
if torch.version.hip:
    BACKENDS_TO_TEST.append(Backend.AITER)

if Backend.TOKENSPEED in BACKENDS_TO_TEST:
    try:
        import {package}  # noqa: F401
    except ImportError:
        BACKENDS_TO_TEST.remove(Backend.TOKENSPEED)
{extra}

@pytest.mark.skipif(Backend.TOKENSPEED not in BACKENDS_TO_TEST, reason="needs tokenspeed")
def test_tokenspeed_fp8_decode():
    q = torch.randn(4, 8, device="cuda").to(torch.float8_e4m3fn)
    assert q.numel() == 32
"""


def _mla(tmp_path, package: str, extra: str = "") -> dict:
    text = _MLA_TEST.format(package=package, extra=extra)
    return migrate_json(write_project(tmp_path, {"tests/test_mla.py": text})), text


def _line_of(text: str, piece: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if piece in line)


def test_skip_on_a_member_removed_inside_its_own_membership_test_is_a_named_scope(tmp_path):
    """IC#5: the backend is removed when `tokenspeed_mla` (CUDA-only) fails to import, the `try`
    inside `if X in BACKENDS_TO_TEST:`, the list otherwise only appended another member: the test
    skipped unless X is in the list is skipped on an NPU host, its FP8 a named scope."""
    report, text = _mla(tmp_path, "tokenspeed_mla")
    line = _line_of(text, "float8_e4m3fn")
    assert not findings_at(report, "tests/test_mla.py", "NPU913")
    reasons = scopes_at(report, "tests/test_mla.py", "NPU913")
    assert line in reasons and "Backend.TOKENSPEED not in BACKENDS_TO_TEST" in reasons[line]


def test_skip_on_a_member_an_npu_host_keeps_stays(tmp_path):
    """Nearest true cases: the package is one an NPU host may have (`einops`), or the file appends
    the same member again later: the skip may not fire there, the FP8 stays reported."""
    report, text = _mla(tmp_path, "einops")
    assert list(findings_at(report, "tests/test_mla.py", "NPU913")) == [_line_of(text, "float8_e4m3fn")]
    report, text = _mla(tmp_path / "again", "tokenspeed_mla", "BACKENDS_TO_TEST.append(Backend.TOKENSPEED)\n")
    assert list(findings_at(report, "tests/test_mla.py", "NPU913")) == [_line_of(text, "float8_e4m3fn")]


# ----------------------------------------------------------------------------- IA#22 (sourcereads34.py)
_FUSION = """\
import inspect

import torch

from kit.platforms import current_platform


class Nvfp4Pattern:
    def __init__(self, eps):
        self.eps = eps

    def register(self, patterns):
        def replacement(x):
            scale = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
            return x, scale

        patterns.append(replacement)


class StaticPattern:
    def register(self, patterns):
        patterns.append(lambda x: x)


class FusionPass:
    def __init__(self):
        self.patterns = []
{build}
        StaticPattern().register(self.patterns)

    def hash_source(self, *sources):
        return str(hash("".join(inspect.getsource(type(s) if not isinstance(s, type) else s) for s in sources)))

    def uuid(self):
        return self.hash_source(self, StaticPattern, Nvfp4Pattern)
"""

_GATED_BUILD = """\
        if current_platform.has_device_capability(100):
            Nvfp4Pattern(1e-5).register(self.patterns)"""

_PLAIN_BUILD = """\
        Nvfp4Pattern(1e-5).register(self.patterns)"""

_MANAGER = """\
from kit.fusion import FusionPass


def build_passes(config):
    passes = []
    if config.fuse_norm_quant:
        passes.append(FusionPass())
    return passes
"""


def _fusion(tmp_path, build: str) -> dict:
    files = {"kit/__init__.py": "", "kit/platforms.py": _PLATFORMS, "kit/manager.py": _MANAGER,
             "kit/fusion.py": _FUSION.format(build=build)}
    return migrate_json(write_project(tmp_path, files))


def test_pattern_built_only_behind_a_false_gate_and_hashed_elsewhere_is_a_named_scope(tmp_path):
    """IA#22: the pattern is built only under `has_device_capability(100)` (False on an NPU host);
    the pass's `uuid()` names it only to hash its source: no opt-in route reaches its FP8, a named
    scope naming both references."""
    report = _fusion(tmp_path, _GATED_BUILD)
    assert not findings_at(report, "kit/fusion.py", "NPU913")
    reasons = scopes_at(report, "kit/fusion.py", "NPU913")
    assert list(reasons) == [14]
    assert "`Nvfp4Pattern` is reached only from code an NPU host does not run" in reasons[14]
    assert "its source read by `hash_source(...)`" in reasons[14]


def test_pattern_built_ungated_beside_the_same_source_read_stays(tmp_path):
    """Nearest true case: the same pass builds the pattern ungated (the source read beside it does
    not matter): the FP8 stays reported."""
    report = _fusion(tmp_path, _PLAIN_BUILD)
    found = findings_at(report, "kit/fusion.py", "NPU913")
    assert list(found) == [14] and found[14]["severity"] in ("error", "info")
    assert "source read" not in found[14]["message"]
