"""Issue #16, round-16 audits (AR#7, AR#10, AR#27, AS#2, AS#27, AS#29): "cuda" strings that are
labels, names that only look like Triton, dead helpers and self-exiting shell probes
(npu_migrate/labels8.py, families/context.py `default_wrapper_of_device`). Each test checks that
the false finding is gone (or a named scope) and that a nearby true one stays."""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, write_project


def _open(report: dict, path: str, code: str | None = None) -> list[dict]:
    return [f for f in report["findings"] if not f["fixable"] and f["path"] == path
            and (code is None or f["code"] == code)]


def _scopes(report: dict, path: str) -> list[dict]:
    return [s for s in report["skipped"] if s["path"] == path and "start_line" in s]


def _rewrites(report: dict, path: str, code: str) -> list[int]:
    return [f["line"] for f in report["findings"] if f["fixable"] and f["path"] == path and f["code"] == code]


OPTION_LABEL = """\
import argparse

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", choices=["autotune", "cuda"], default="autotune")
    parser.add_argument("--reference", choices=["eager", "cuda"], default="eager")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    x = torch.ones(4)
    if args.baseline == "cuda":
        x = x * 2
    print({"baseline": args.baseline})
    if args.reference == "cuda":
        x = x + 1
    y = torch.zeros(4, device=args.reference)
    if args.device == "cuda":
        x = x.to(args.device)
    return x, y
"""


def test_cuda_compared_with_an_option_naming_choices_is_a_label(tmp_path: Path) -> None:
    """AR#7: `args.baseline == "cuda"` where `--baseline` chooses among {autotune, cuda} and the
    value is only compared and recorded: a named scope. An option whose value reaches `device=`
    keeps its warning, a device option's comparison is still rewritten."""
    report = migrate_json(write_project(tmp_path, {"tools/bench.py": OPTION_LABEL}))
    scopes = [s for s in _scopes(report, "tools/bench.py") if "a command-line option's label" in s["reason"]]
    assert [(s["start_line"], s["end_line"]) for s in scopes] == [(13, 13)], report["skipped"]
    assert "`baseline` (line 8)" in scopes[0]["reason"]
    kept = _open(report, "tools/bench.py", "NPU990")
    assert [f["line"] for f in kept] == [16] and kept[0]["severity"] == "warning"
    assert 19 in _rewrites(report, "tools/bench.py", "NPU104")  # (`args.device == "cuda"`)


PLACEHOLDER_TEST = """\
from mypkg.triton_utils import TritonPlaceholder


def test_placeholder_decorators():
    triton = TritonPlaceholder()

    @triton.jit
    def foo(x):
        return x

    @triton.autotune(configs=[], key="x")
    def bar(x):
        return x

    assert foo(1) == 1 and bar(2) == 2
"""

PLACEHOLDER = """\
import types


class TritonPlaceholder(types.ModuleType):
    def __init__(self):
        super().__init__("triton")
        self.jit = self.autotune = self._dummy

    def _dummy(self, *args, **kwargs):
        return args[0] if args and callable(args[0]) else (lambda f: f)
"""

REAL_KERNEL = """\
import triton
import triton.language as tl


def test_kernel():
    @triton.jit
    def add(x_ptr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)

    assert add is not None
"""

ALIASED_KERNEL = """\
import triton as _triton_mod


def make():
    triton = _triton_mod

    @triton.jit
    def add(x_ptr):
        pass

    return add
"""


def test_a_local_triton_placeholder_is_not_triton(tmp_path: Path) -> None:
    """AS#2: `triton = TritonPlaceholder()` in the test, then `@triton.jit`: a local object, no
    Triton kernel (no NPU910). A kernel decorated with the imported `triton`, or with a local
    alias of the imported module, stays NPU910."""
    report = migrate_json(write_project(tmp_path, {
        "mypkg/__init__.py": "", "mypkg/triton_utils.py": PLACEHOLDER,
        "tests/test_placeholder.py": PLACEHOLDER_TEST, "tests/test_kernel.py": REAL_KERNEL,
        "mypkg/aliased.py": ALIASED_KERNEL}))
    assert _open(report, "tests/test_placeholder.py") == []
    assert not [s for s in _scopes(report, "tests/test_placeholder.py") if "NPU910" in s["reason"]]
    kernel = _open(report, "tests/test_kernel.py", "NPU910")
    assert kernel and kernel[0]["severity"] == "error"
    # (a local name bound to the imported package itself is still Triton)
    aliased = _open(report, "mypkg/aliased.py", "NPU910")
    assert len(aliased) == 1 and "also at line 7" in aliased[0]["message"]  # (line 7: `@triton.jit`)


SWITCHES = """\
import contextlib

import torch
import torch.nn.functional as F

ALLOW_ALL = False


def sdp_kernel_context(dropout_p):
    if ALLOW_ALL:
        return contextlib.nullcontext()
    return torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=dropout_p > 0.0)


def used_kernel_context(dropout_p):
    return torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=dropout_p > 0.0)


class Attention(torch.nn.Module):
    def forward(self, q, k, v):
        # with sdp_kernel_context(0.0):
        #     return F.scaled_dot_product_attention(q, k, v)
        with used_kernel_context(0.0):
            return F.scaled_dot_product_attention(q, k, v)
"""

OTHER_CALLER = """\
from mypkg.attn2 import shared_context


def run(q):
    with shared_context(0.0):
        return q
"""

SHARED = """\
import torch


def shared_context(dropout_p):
    return torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=dropout_p > 0.0)
"""


def test_an_sdpa_switch_in_a_helper_nothing_references(tmp_path: Path) -> None:
    """AS#29: `sdp_kernel_context` named only in comments and its `def`, in a private package
    (torchao's `_models/`): a named scope. A helper called in the file, or from another file of the
    run, keeps its NPU405 warning, and so does an uncalled public function of a public module (a
    library's API: its users call it from outside the run)."""
    public = SWITCHES.replace("sdp_kernel_context", "public_kernel_context").replace(
        "used_kernel_context", "other_kernel_context")
    report = migrate_json(write_project(tmp_path, {
        "mypkg/__init__.py": "", "mypkg/_models/__init__.py": "", "mypkg/_models/attn.py": SWITCHES,
        "mypkg/attn2.py": SHARED, "mypkg/user.py": OTHER_CALLER, "mypkg/api.py": public}))
    scopes = [s for s in _scopes(report, "mypkg/_models/attn.py") if "in a helper nothing references" in s["reason"]]
    assert [(s["start_line"], s["end_line"]) for s in scopes] == [(12, 12)]
    assert "`sdp_kernel_context`" in scopes[0]["reason"]
    assert [(f["line"], f["severity"]) for f in _open(report, "mypkg/_models/attn.py", "NPU405")] == [(16, "warning")]
    assert [f["severity"] for f in _open(report, "mypkg/attn2.py", "NPU405")] == ["warning"]
    assert [(f["line"], f["severity"]) for f in _open(report, "mypkg/api.py", "NPU405")] == [(12, "warning"), (16, "warning")]


EXIT_PROBE = """\
#!/usr/bin/env bash
set -euo pipefail

# Only on CUDA images.
if [ -z "${CUDA_VERSION:-}" ]; then
    exit 0
fi

pip install "kv-offload-cu${CUDA_VERSION%%.*}"
"""

NO_PROBE = """\
#!/usr/bin/env bash
set -euo pipefail

pip install "kv-offload-cu${CUDA_VERSION%%.*}"
"""

FAILING_PROBE = """\
#!/usr/bin/env bash
if [ -z "${CUDA_VERSION:-}" ]; then
    echo "CUDA_VERSION is required"
    exit 1
fi
pip install "kv-offload-cu${CUDA_VERSION%%.*}"
"""

SHORT_PROBE = """\
#!/usr/bin/env bash
[ -z "$CUDA_HOME" ] && exit 0
export PATH="$CUDA_HOME/bin:$PATH"
"""


def test_a_shell_script_that_exits_where_cuda_is_unset(tmp_path: Path) -> None:
    """AR#10: `if [ -z "${CUDA_VERSION:-}" ]; then exit 0; fi` at the top of a script: the probe and
    the lines after it are a named scope (an NPU host leaves the script there). A script that
    reads the variable without the probe, or whose probe fails (`exit 1`), keeps its finding."""
    report = migrate_json(write_project(tmp_path, {
        "scripts/install.sh": EXIT_PROBE, "scripts/plain.sh": NO_PROBE, "scripts/strict.sh": FAILING_PROBE,
        "scripts/short.sh": SHORT_PROBE}))
    assert _open(report, "scripts/install.sh") == []
    scopes = [s for s in _scopes(report, "scripts/install.sh") if "exits cleanly where the CUDA variable" in s["reason"]]
    assert [(s["start_line"], s["end_line"]) for s in scopes] == [(5, 9)]
    assert "lines 5-7 exit 0 where `CUDA_VERSION` is unset" in scopes[0]["reason"]
    assert _open(report, "scripts/short.sh") == []
    assert [f["code"] for f in _open(report, "scripts/plain.sh")] == ["NPU703"]
    assert [f["code"] for f in _open(report, "scripts/strict.sh")] == ["NPU703"]


FORM_API = """\
from typing import Optional

from fastapi import Form
from pydantic import BaseModel, Field


class Request(BaseModel):
    generator_device: Optional[str] = "cuda"
    device: str = Field(default="cuda", description="where")
    name: str = Field("cuda")


async def edit(prompt: str = Form(...), generator_device: Optional[str] = Form("cuda"),
               backend: Optional[str] = Form("cuda")):
    return prompt, generator_device, backend
"""


def test_a_device_default_inside_form_is_rewritten_as_the_bare_default(tmp_path: Path) -> None:
    """AR#27: `generator_device: str = Form("cuda")` was a NPU990 warning while the same default
    of a model field was rewritten (NPU102): both are rewritten now, `Field(default="cuda")` of a
    device field too. A `Form("cuda")`/`Field("cuda")` of a name not about devices stays reported."""
    report = migrate_json(write_project(tmp_path, {"api/edit.py": FORM_API}))
    assert sorted(_rewrites(report, "api/edit.py", "NPU102")) == [8, 9, 13]
    kept = _open(report, "api/edit.py", "NPU990")
    assert [f["line"] for f in kept] == [10] and "also at line 14" in kept[0]["message"]
    # written for real into a copy: the defaults become the shim's expression (the CUDA device
    # where CUDA is), and migrating the copy again changes nothing
    from click.testing import CliRunner

    from npu_migrate.cli import main

    out = tmp_path / "out"
    run = CliRunner().invoke(main, ["migrate", str(tmp_path / "project"), "--output-dir", str(out),
                                    "--no-cache", "--isolated", "--allow-dirty", "-j", "1"])
    assert run.exit_code in (0, 1), run.output
    text = (out / "api" / "edit.py").read_text()
    assert 'Form("cuda")' not in text.split("backend")[0] and 'backend: Optional[str] = Form("cuda")' in text
    again = migrate_json(out)
    assert not [f for f in again["findings"] if f["fixable"] and f["path"] == "api/edit.py"], again["findings"]


DEVICE_UTILS = """\
import torch


def get_available_devices():
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices.append("cuda")
    return devices


def get_all_devices():
    return ["cpu", "cuda"]
"""

DEVICE_TEST = """\
import pytest
import torch
from torch.testing._internal.common_utils import parametrize

from mylib.utils import get_all_devices, get_available_devices

_DEVICES = get_available_devices()
_ALL = get_all_devices()


@parametrize("device", _DEVICES)
def test_fp8_slice(device):
    if device == "cuda" and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 CUDA requires compute capability >= 8.9")
    x = torch.zeros(4, device=device)


@parametrize("device", _ALL)
def test_fp8_all(device):
    if device == "cuda" and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 CUDA requires compute capability >= 8.9")
    x = torch.zeros(4, device=device)
"""


def test_a_test_device_never_cuda_on_an_npu_host(tmp_path: Path) -> None:
    """AS#27: `device == "cuda"` over `_DEVICES = get_available_devices()`, whose "cuda" the
    project adds only behind `torch.cuda.is_available()` kept as written: a named scope (runs as
    written). The same comparison over a list that always holds "cuda" keeps its NPU108."""
    report = migrate_json(write_project(tmp_path, {
        "mylib/__init__.py": "", "mylib/utils.py": DEVICE_UTILS, "test/test_optim.py": DEVICE_TEST}))
    scopes = [s for s in _scopes(report, "test/test_optim.py") if 'never "cuda" on an NPU host' in s["reason"]]
    assert [(s["start_line"], s["end_line"]) for s in scopes] == [(13, 13)]
    assert "mylib/utils.py:4" in scopes[0]["reason"]
    assert [f["line"] for f in _open(report, "test/test_optim.py", "NPU108")] == [20]
