"""Issue #16, round-14 audits: backends and schemes the project's own argument validation rejects
on an NPU host (npu_migrate/validated.py).

- an attention backend whose name the server arguments reject unless the GPU is Blackwell
  (`if args.attention_backend == "mla_fast": if not is_blackwell_supported(): raise`): the class
  only its registered factory builds, and the FP8 helper only that class calls, are code an NPU
  host never runs: their findings are named skipped scopes quoting the validating line (AK#15).
  The same backend without the raise (a warning) stays reported, and so does a backend
  registered under a name the validation allows on any hardware.
- a quantization scheme declaring `get_min_capability()` -> 100, built only under a capability
  check that compares the device's capability ((0, 0) on an NPU host) with it (AK#22): a named
  skipped scope; the same scheme built also outside the check stays reported.
Each fixture is our own.
"""

from __future__ import annotations

from .precision_helpers import migrate_json, moot_lines, write_project

ARGS = """\
from mypkg.utils import is_blackwell_supported


class ServerArgs:
    def __init__(self, attention_backend="triton"):
        self.attention_backend = attention_backend
        self.check()

    def check(self):
        if self.attention_backend == "mla_fast":
            if not is_blackwell_supported():
                raise ValueError("mla_fast needs a Blackwell GPU")
"""

UTILS = """\
import torch


def is_blackwell_supported():
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 10
"""

REGISTRY = """\
BACKENDS = {}


def register_attention_backend(name):
    def wrap(fn):
        BACKENDS[name] = fn
        return fn
    return wrap


@register_attention_backend("triton")
def create_triton(runner):
    from mypkg.triton_backend import TritonBackend
    return TritonBackend(runner)


@register_attention_backend("mla_fast")
def create_mla_fast(runner):
    from mypkg.mla_fast_backend import MlaFastBackend
    return MlaFastBackend(runner)
"""

MLA_FAST = """\
import torch


def quantize_fp8(q):
    return q.to(torch.float8_e4m3fn)


class MlaFastBackend:
    def __init__(self, runner):
        self.runner = runner

    def forward(self, q):
        return quantize_fp8(q)
"""

TRITON = """\
import torch


class TritonBackend:
    def __init__(self, runner):
        self.runner = runner

    def forward(self, q):
        return q.to(torch.float8_e4m3fn)
"""


def _project(tmp_path, args=ARGS):
    return write_project(tmp_path, {
        "mypkg/__init__.py": "",
        "mypkg/utils.py": UTILS,
        "mypkg/server_args.py": args,
        "mypkg/registry.py": REGISTRY,
        "mypkg/mla_fast_backend.py": MLA_FAST,
        "mypkg/triton_backend.py": TRITON,
    })


def _findings(report, path):
    return [f for f in report["findings"] if f["path"] == path and not f["fixable"]]


def test_backend_rejected_off_blackwell_is_a_named_scope(tmp_path):
    report = migrate_json(_project(tmp_path))
    path = "mypkg/mla_fast_backend.py"
    assert not [f for f in _findings(report, path) if f["code"] == "NPU913"]
    scopes = moot_lines(report["skipped"], "NPU913", path)
    assert 5 in scopes, report["skipped"]
    assert "validation rejects on an NPU host" in scopes[5]
    assert "mypkg/server_args.py:11" in scopes[5] and "is_blackwell_supported()" in scopes[5]
    # a backend the validation allows on any hardware stays reported
    kept = [f for f in _findings(report, "mypkg/triton_backend.py") if f["code"] == "NPU913"]
    assert kept and kept[0]["severity"] == "error"


def test_backend_only_warned_about_stays_reported(tmp_path):
    warned = ARGS.replace('                raise ValueError("mla_fast needs a Blackwell GPU")',
                          '                print("mla_fast is fastest on Blackwell")')
    report = migrate_json(_project(tmp_path, warned))
    kept = [f for f in _findings(report, "mypkg/mla_fast_backend.py") if f["code"] == "NPU913"]
    assert kept and kept[0]["severity"] == "error"


def test_backend_built_elsewhere_stays_reported(tmp_path):
    root = _project(tmp_path)
    (root / "mypkg" / "runner.py").write_text(
        "from mypkg.mla_fast_backend import MlaFastBackend\n\n\ndef make(r):\n    return MlaFastBackend(r)\n")
    report = migrate_json(root)
    kept = [f for f in _findings(report, "mypkg/mla_fast_backend.py") if f["code"] == "NPU913"]
    assert kept and kept[0]["severity"] == "error"


SCHEME = """\
import torch


class W4A4Scheme:
    @classmethod
    def get_min_capability(cls) -> int:
        return 100

    def create_weights(self, n):
        return torch.empty(n, dtype=torch.float8_e4m3fn)
"""

SCHEME_W8 = """\
import torch


class W8A8Scheme:
    @classmethod
    def get_min_capability(cls) -> int:
        return 89

    def create_weights(self, n):
        return torch.empty(n, dtype=torch.float8_e4m3fn)
"""

SELECTOR = """\
import torch
from mypkg.schemes.w4a4 import W4A4Scheme
from mypkg.schemes.w8a8 import W8A8Scheme


class Config:
    def check_supported(self, min_capability, error=True):
        major, minor = torch.cuda.get_device_capability()
        capability = major * 10 + minor
        supported = capability >= min_capability
        if error and not supported:
            raise RuntimeError("not supported")
        return supported

    def get_scheme(self, kind):
        if kind == "w4a4":
            ok = self.check_supported(W4A4Scheme.get_min_capability(), error=False)
            if ok:
                return W4A4Scheme()
            raise NotImplementedError("Current platform does not support w4a4")
        return W8A8Scheme()
"""


def _schemes(tmp_path, selector=SELECTOR):
    return write_project(tmp_path, {
        "mypkg/__init__.py": "",
        "mypkg/schemes/__init__.py": "",
        "mypkg/schemes/w4a4.py": SCHEME,
        "mypkg/schemes/w8a8.py": SCHEME_W8,
        "mypkg/config.py": selector,
    })


def test_scheme_built_only_under_capability_check_is_a_named_scope(tmp_path):
    report = migrate_json(_schemes(tmp_path))
    path = "mypkg/schemes/w4a4.py"
    assert not [f for f in _findings(report, path) if f["code"] == "NPU913"]
    scopes = moot_lines(report["skipped"], "NPU913", path)
    assert 10 in scopes, report["skipped"]
    assert "minimum capability 100" in scopes[10] and "mypkg/config.py:17" in scopes[10]
    # a scheme built without the check stays reported
    kept = [f for f in _findings(report, "mypkg/schemes/w8a8.py") if f["code"] == "NPU913"]
    assert kept and kept[0]["severity"] == "error"


def test_scheme_built_also_outside_the_check_stays_reported(tmp_path):
    unchecked = SELECTOR.replace("        return W8A8Scheme()\n",
                                 "        if kind == \"any\":\n            return W4A4Scheme()\n        return W8A8Scheme()\n")
    report = migrate_json(_schemes(tmp_path, unchecked))
    kept = [f for f in _findings(report, "mypkg/schemes/w4a4.py") if f["code"] == "NPU913"]
    assert kept and kept[0]["severity"] == "error"


SKIPPED_TEST = """\
import unittest

import torch
from mypkg.mla_fast_backend import MlaFastBackend


@unittest.skipIf(torch.version.cuda is None, "Blackwell")
class TestMlaFast(unittest.TestCase):
    def test_forward(self):
        MlaFastBackend(None).forward(torch.ones(2))
"""


def test_backend_built_also_in_a_test_skipped_off_cuda_is_a_named_scope(tmp_path):
    root = _project(tmp_path)
    (root / "tests").mkdir()
    (root / "tests" / "test_mla_fast.py").write_text(SKIPPED_TEST)
    report = migrate_json(root)
    path = "mypkg/mla_fast_backend.py"
    assert not [f for f in _findings(report, path) if f["code"] == "NPU913"]
    assert "server_args.py:11" in moot_lines(report["skipped"], "NPU913", path)[5]


def test_backend_built_in_a_test_that_runs_on_npu_stays_reported(tmp_path):
    root = _project(tmp_path)
    (root / "tests").mkdir()
    (root / "tests" / "test_mla_fast.py").write_text(SKIPPED_TEST.replace(
        '@unittest.skipIf(torch.version.cuda is None, "Blackwell")\n', ""))
    report = migrate_json(root)
    kept = [f for f in _findings(report, "mypkg/mla_fast_backend.py") if f["code"] == "NPU913"]
    assert kept and kept[0]["severity"] == "error"
