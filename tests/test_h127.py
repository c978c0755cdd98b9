"""Round-27 audit BX: same-file guards and pairs (npu_migrate/sameguards27.py)."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

TRITON_UTILS = """\
import importlib.util

HAS_TRITON = importlib.util.find_spec("triton") is not None
if HAS_TRITON:
    import triton
    import triton.language as tl
else:
    triton = None
    tl = None
"""

NO_ELSE_GUARDED = """\
import torch
from pkg.triton_utils import HAS_TRITON, tl, triton

if HAS_TRITON:

    @triton.jit
    def _interp_kernel(x_ptr, out_ptr, n: tl.constexpr):
        i = tl.program_id(0)
        tl.store(out_ptr + i, tl.load(x_ptr + i) * 2)

    def triton_interp(x):
        out = torch.empty_like(x)
        _interp_kernel[(x.numel(),)](x, out, x.numel())
        return out


def interp_native(x):
    return x * 2


class Embed(torch.nn.Module):
    def forward(self, x):
        fn = triton_interp if HAS_TRITON else interp_native
        return fn(x)
"""

# the nearest true case: the same block, but a plain call outside it reaches the kernel
NO_ELSE_UNGUARDED = NO_ELSE_GUARDED + """

def always(x):
    return triton_interp(x)
"""


def _ours(report, path):
    return [f for f in report["findings"] if not f["fixable"] and f["path"] == path]


def test_no_else_triton_guard_with_conditional_use_is_info(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/triton_utils.py": TRITON_UTILS,
                                    "pkg/gated.py": NO_ELSE_GUARDED, "pkg/plain.py": NO_ELSE_UNGUARDED})
    report = migrate_json(root)
    gated = [f for f in _ours(report, "pkg/gated.py") if f["code"] == "NPU910"]
    assert gated and all(f["severity"] == "info" for f in gated), gated
    assert "which has no `else:`" in gated[0]["message"]
    assert "verify them there" in gated[0]["message"]
    plain = [f for f in _ours(report, "pkg/plain.py") if f["code"] == "NPU910"]
    assert plain and any(f["severity"] == "error" for f in plain), plain


def test_no_else_triton_guard_without_any_use_keeps_error(tmp_path):
    text = NO_ELSE_GUARDED.split("\n\ndef interp_native")[0] + "\n"
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/triton_utils.py": TRITON_UTILS,
                                    "pkg/lonely.py": text})
    report = migrate_json(root)
    found = [f for f in _ours(report, "pkg/lonely.py") if f["code"] == "NPU910"]
    assert found and any(f["severity"] == "error" for f in found), found


PAIR_ONE_FUNCTION = """\
import torch


def test_bracket():
    x = torch.ones(4, device="cuda")
    old = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        y = x * 2
    finally:
        torch.cuda.set_sync_debug_mode(old)
    assert y.sum() == 8
"""

# the nearest true case: the set in another function than the get: two places to port
PAIR_TWO_FUNCTIONS = """\
import torch


def read_mode():
    return torch.cuda.get_sync_debug_mode()


def strict():
    torch.cuda.set_sync_debug_mode("error")
"""


def test_get_set_pair_in_one_function_folds(tmp_path):
    root = write_project(tmp_path, {"one.py": PAIR_ONE_FUNCTION, "two.py": PAIR_TWO_FUNCTIONS})
    report = migrate_json(root)
    one = [f for f in _ours(report, "one.py") if "sync_debug_mode" in f["message"]]
    assert len(one) == 1, one
    assert one[0]["source"] == "torch.cuda.get_sync_debug_mode"
    assert "with `torch.cuda.set_sync_debug_mode` in the same function" in one[0]["message"]
    assert "also at lines 7, 11" in one[0]["message"]
    assert one[0]["severity"] == "error"
    two = [f for f in _ours(report, "two.py") if "sync_debug_mode" in f["message"]]
    assert sorted(f["source"] for f in two) == ["torch.cuda.get_sync_debug_mode", "torch.cuda.set_sync_debug_mode"]


CAPABILITY_TWICE = """\
import pytest
import torch

from pkg.platforms import current_platform

DEVICES = [f"cuda:{i}" for i in range(1 if torch.accelerator.device_count() == 1 else 2)]

capability = current_platform.get_device_capability()
IS_SUPPORTED = capability is not None and capability[0] >= 9

IS_SUPPORTED = current_platform.has_device_capability(90)


@pytest.mark.skipif(not IS_SUPPORTED, reason="needs SM90")
@pytest.mark.parametrize("device", DEVICES)
def test_kernel_devices(device):
    graph = torch.cuda.CUDAGraph()
    assert graph is not None
"""

# the nearest true case: the second binding is not false on an NPU host (a user setting)
CAPABILITY_TWICE_OPEN = CAPABILITY_TWICE.replace(
    "IS_SUPPORTED = current_platform.has_device_capability(90)", "IS_SUPPORTED = bool(int(os.environ['RUN']))"
).replace("import pytest\n", "import os\n\nimport pytest\n")


def test_skip_name_bound_twice_false_both_times(tmp_path):
    root = write_project(tmp_path, {"tests/test_twice.py": CAPABILITY_TWICE,
                                    "tests/test_open.py": CAPABILITY_TWICE_OPEN})
    report = migrate_json(root)
    twice = [f for f in _ours(report, "tests/test_twice.py") if f["severity"] != "info"]
    assert not twice, twice
    reasons = [s["reason"] for s in report["skipped"] if s.get("path") == "tests/test_twice.py"]
    assert any("`DEVICES`" in r and "not IS_SUPPORTED" in r for r in reasons), reasons
    opened = [f for f in _ours(report, "tests/test_open.py") if f["severity"] != "info"]
    assert {f["code"] for f in opened} >= {"NPU202", "NPU990"}, opened


SMI_SCRIPT = """\
#!/bin/bash
set -euo pipefail
SMI_BIN=$(which nvidia-smi || which rocm-smi || echo "")

count_gpus() {
  if [[ "$SMI_BIN" == *"nvidia"* ]]; then
    $SMI_BIN --query-gpu=name --format=csv,noheader | wc -l
  else
    echo "2"
  fi
}

echo "starting"
"""


def test_smi_run_only_in_an_uncalled_shell_function_is_a_note(tmp_path):
    # the nearest true case: the same script calling the function keeps the warning
    called = SMI_SCRIPT + 'N=$(count_gpus)\necho "$N"\n'
    root = write_project(tmp_path, {"uncalled.sh": SMI_SCRIPT, "called.sh": called})
    report = migrate_json(root)
    uncalled = [f for f in _ours(report, "uncalled.sh") if f["code"] == "NPU704"]
    kept = [f for f in _ours(report, "called.sh") if f["code"] == "NPU704"]
    assert uncalled and uncalled[0]["severity"] == "info", uncalled
    assert "only in the shell function `count_gpus` (line 5), which the script never calls" in uncalled[0]["message"]
    assert kept and kept[0]["severity"] == "warning", kept


PROFILED_BENCH = """\
import argparse
import time

import torch


def main(n: int, do_profile: bool = False) -> None:
    x = torch.randn(n, device="cuda")

    def run(iters: int, profile: bool = False) -> float:
        if profile:
            torch.cuda.cudart().cudaProfilerStart()
        start = time.perf_counter()
        for _ in range(iters):
            x.mul_(1.0)
        return time.perf_counter() - start

    run_benchmark = run
    run_benchmark(5, profile=False)
    if do_profile:
        run_benchmark(1, profile=True)
    else:
        run_benchmark(100)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    main(args.n, do_profile=args.profile)
"""

# the nearest true case: the same benchmark always profiles its first run
ALWAYS_PROFILED = PROFILED_BENCH.replace("run_benchmark(5, profile=False)", "run_benchmark(5, profile=True)")


def test_code_under_a_store_true_option_is_opt_in_info(tmp_path):
    root = write_project(tmp_path, {"benchmarks/bench_opt.py": PROFILED_BENCH,
                                    "benchmarks/bench_always.py": ALWAYS_PROFILED})
    report = migrate_json(root)
    opt = [f for f in _ours(report, "benchmarks/bench_opt.py") if f["code"] == "NPU202"]
    assert opt and opt[0]["severity"] == "info", opt
    assert "reached on an NPU host only when `--profile` is chosen" in opt[0]["message"]
    always = [f for f in _ours(report, "benchmarks/bench_always.py") if f["code"] == "NPU202"]
    assert always and always[0]["severity"] == "error", always
