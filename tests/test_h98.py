"""Triton guards read one step further (issue #16, round-23 audit BN#5, BN#13, BN#30):
npu_migrate/tritonguards23.py and its call from tritonflags21.py. Each false case beside the
nearest true one that must stay reported."""

from __future__ import annotations

from tests.precision_helpers import findings_at, migrate_json, moot_lines, write_project
from tests.test_h87 import _PROBE_MODULE as PROBE_MODULE

# ------------------------------------------------------------------ BN#5: settings after an early return

_FLAGS = """\
try:
    import triton  # noqa: F401

    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False
"""

_MONITOR = """\
import os

from pkg.flags import HAS_TRITON


def setup_print():
    \"\"\"Turn Triton's autotuning print on.\"\"\"
    if not HAS_TRITON:
        return
    from triton import knobs

    knobs.autotuning.print = os.environ.get("PRINT", "1") == "1"


def setup_hook():
    if not HAS_TRITON:
        return
    from triton import knobs
    from triton.runtime import jit as triton_jit

    knobs.runtime.jit_post_compile_hook = triton_jit.JITFunction
"""


def _monitor(tmp_path, monitor: str = _MONITOR):
    files = {"pkg/__init__.py": "", "pkg/flags.py": _FLAGS, "pkg/monitor.py": monitor}
    return migrate_json(write_project(tmp_path, files))


def test_triton_settings_after_an_early_availability_return_are_info(tmp_path):
    """`if not HAS_TRITON: return` then `from triton import knobs`: no kernel, and an NPU host
    without Triton returns first: info naming the guard and the names to check on Triton-Ascend."""
    found = findings_at(_monitor(tmp_path), "pkg/monitor.py", "NPU910")
    assert found and all(f["severity"] == "info" for f in found.values()), found
    message = next(iter(found.values()))["message"]
    assert "no kernel here: imports Triton's runtime names (`triton.knobs`" in message
    assert "after `if not HAS_TRITON: return`" in message
    assert "check that it provides these names" in message


def test_a_settings_import_without_the_early_return_keeps_the_error(tmp_path):
    """The same import with no availability return before it fails on an NPU host without Triton."""
    unguarded = _MONITOR.replace("    if not HAS_TRITON:\n        return\n    from triton import knobs\n\n    knobs.autotuning",
                                 "    from triton import knobs\n\n    knobs.autotuning")
    found = findings_at(_monitor(tmp_path, unguarded), "pkg/monitor.py", "NPU910")
    assert any(f["severity"] == "error" for f in found.values()), found


def test_a_file_that_launches_a_kernel_after_the_return_keeps_the_error(tmp_path):
    """A launch after the same guard is a kernel an NPU host with Triton-Ascend runs: not settings."""
    kernel = _MONITOR + """

def launch(x):
    if not HAS_TRITON:
        return
    from pkg.kernels import add_kernel

    add_kernel[(1,)](x)
"""
    found = findings_at(_monitor(tmp_path, kernel), "pkg/monitor.py", "NPU910")
    assert not found or any(f["severity"] != "info" or "no kernel here" not in f["message"]
                            for f in found.values()), found


# ------------------------------------------------------------------ BN#13: the launcher raises first

_UTILS = """\
import torch


def is_sm_at_least_100():
    return torch.cuda.is_available() and torch.version.cuda is not None \\
        and torch.cuda.get_device_capability() >= (10, 0)
"""

_QUANT = """\
import torch
from torch.utils._triton import has_triton

from pkg.utils import is_sm_at_least_100

if has_triton():
    import triton
    import triton.language as tl

    @triton.jit
    def _scale_block(values):
        return values * 2

    @triton.jit
    def quant_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, _scale_block(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)

    def quantize(x):
        if not is_sm_at_least_100():
            raise NotImplementedError("quantize requires SM100+")
        if x.ndim != 2:
            raise ValueError("2-D only")
        out = torch.empty_like(x)
        quant_kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
        return out

else:

    def quantize(x):
        raise NotImplementedError("quantize requires triton")
"""


def _quant(tmp_path, quant: str = _QUANT, extra: dict | None = None):
    files = {"pkg/__init__.py": "", "pkg/utils.py": _UTILS, "pkg/quant.py": quant, **(extra or {})}
    return migrate_json(write_project(tmp_path, files))


_QUANT_TEST = '''\
import torch

from pkg.quant import quantize


def test_quantize():
    """Mirrors the scaling of `_scale_block`."""
    assert quantize(torch.ones(128, 128)).shape == (128, 128)
'''


def test_kernels_whose_launcher_raises_first_on_an_npu_host_are_a_named_scope(tmp_path):
    """Every launch follows `if not is_sm_at_least_100(): raise`, true on an NPU host: no "verify
    them there" finding, a named scope naming the raise. The kernel's device function (called only
    inside it) and a test's docstring naming it change nothing."""
    report = _quant(tmp_path, extra={"tests/test_quant.py": _QUANT_TEST})
    assert not findings_at(report, "pkg/quant.py", "NPU910"), findings_at(report, "pkg/quant.py", "NPU910")
    scopes = moot_lines(report["skipped"], "NPU910", "pkg/quant.py")
    assert scopes, report["skipped"]
    reason = next(iter(scopes.values()))
    assert "this module's Triton kernels (`_scale_block`, `quant_kernel`) run only from launches after" in reason
    assert "`if not is_sm_at_least_100()` raises in `quantize`" in reason
    assert "verify them there" not in reason


def test_a_launch_before_the_raise_or_without_it_keeps_the_verify_note(tmp_path):
    """Without the capability raise the kernels run where the Triton test holds: the info stays."""
    plain = _QUANT.replace('        if not is_sm_at_least_100():\n            raise NotImplementedError("quantize requires SM100+")\n', "")
    found = findings_at(_quant(tmp_path, plain), "pkg/quant.py", "NPU910")
    assert found and "verify them there" in next(iter(found.values()))["message"], found


def test_a_raise_that_never_fires_on_an_npu_host_keeps_the_verify_note(tmp_path):
    """`if is_sm_at_least_100(): raise` is false on an NPU host: the launch after it is reached."""
    inverted = _QUANT.replace("if not is_sm_at_least_100():", "if is_sm_at_least_100():")
    found = findings_at(_quant(tmp_path, inverted), "pkg/quant.py", "NPU910")
    assert found and "verify them there" in next(iter(found.values()))["message"], found


def test_a_kernel_another_module_names_keeps_the_verify_note(tmp_path):
    importer = {"pkg/direct.py": "from pkg.quant import quant_kernel\n\n\ndef go(x, y):\n"
                                 "    quant_kernel[(1,)](x, y, 1, BLOCK=128)\n"}
    found = findings_at(_quant(tmp_path, extra=importer), "pkg/quant.py", "NPU910")
    assert found and "verify them there" in next(iter(found.values()))["message"], found


# ------------------------------------------------------------------ BN#30: readers called only under a flag predicate

# (the probing sibling of test_h87's round-21 shape: one fixture, not two copies)
_PROBE = PROBE_MODULE

_KERNELS = """\
import torch

from pkg.ops._triton import _TRITON_AVAILABLE, tl, triton

if _TRITON_AVAILABLE:

    @triton.jit
    def _gather_kernel(x_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        tl.store(x_ptr + pid, n)


def gather(x):
    _gather_kernel[(triton.cdiv(x.numel(), 128),)](x, 2, BLOCK=128)
    return x


def permute(x):
    return gather(x)


def permute_supported(x) -> bool:
    \"\"\"Whether `permute` can take `x`: on CUDA, with Triton.\"\"\"
    return _TRITON_AVAILABLE and x.device.type == "cuda"
"""

_LAYER_GATED = """\
from pkg.moe.kernels import permute, permute_supported


def forward(x):
    \"\"\"See :func:`pkg.moe.kernels.permute`.\"\"\"
    if permute_supported(x):
        return permute(x)
    return x[:]
"""


def _ep(tmp_path, layer: str):
    files = {"pkg/__init__.py": "", "pkg/ops/__init__.py": "", "pkg/ops/_triton.py": _PROBE,
             "pkg/moe/__init__.py": "", "pkg/moe/kernels.py": _KERNELS, "pkg/moe/layer.py": layer}
    return findings_at(migrate_json(write_project(tmp_path, files)), "pkg/moe/kernels.py", "NPU910")


def test_readers_other_modules_call_only_under_a_flag_predicate_are_info(tmp_path):
    """`permute` launches the kernel outside the block, but the only other module calls it under
    `if permute_supported(x):`, which returns `_TRITON_AVAILABLE and ...`: info naming that."""
    found = _ep(tmp_path, _LAYER_GATED)
    assert found and all(f["severity"] == "info" for f in found.values()), found
    message = next(iter(found.values()))["message"]
    assert "only under `permute_supported(...)`, which requires `_TRITON_AVAILABLE`" in message


def test_a_reader_called_outside_the_predicate_keeps_the_error(tmp_path):
    """The same call with no predicate before it is reached without Triton: NameError there."""
    found = _ep(tmp_path, _LAYER_GATED.replace("    if permute_supported(x):\n        return permute(x)\n",
                                               "    if permute_supported(x):\n        pass\n    return permute(x)\n"))
    assert any(f["severity"] == "error" for f in found.values()), found


# ------------------------------------------------------------------ BL#2: a module of device functions only

_TRITON_UTILS = """\
try:
    import triton
    import triton.language as tl
except ImportError:
    from pkg.placeholder import TritonPlaceholder, TritonLanguagePlaceholder

    triton = TritonPlaceholder()
    tl = TritonLanguagePlaceholder()
"""

_HELPERS = """\
from pkg.triton_utils import tl, triton


@triton.jit
def mm_block(a_ptr, b_ptr, K: tl.constexpr):
    return tl.load(a_ptr + tl.arange(0, K)) * tl.load(b_ptr + tl.arange(0, K))


@triton.jit
def do_expand(a_ptr, b_ptr, out_ptr, K: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, K), mm_block(a_ptr, b_ptr, K))
"""

_EXPAND = """\
import torch

from pkg.ops.kernel_utils import do_expand
from pkg.triton_utils import tl, triton


@triton.jit
def _expand_kernel(a_ptr, b_ptr, out_ptr, K: tl.constexpr):
    do_expand(a_ptr, b_ptr, out_ptr, K)


def expand(a, b):
    out = torch.empty_like(a)
    _expand_kernel[(1,)](a, b, out, K=a.numel())
    return out
"""


def _lora(tmp_path, helpers: str = _HELPERS, expand: str = _EXPAND):
    files = {"pkg/__init__.py": "", "pkg/placeholder.py": "class TritonPlaceholder:\n    pass\n\n\n"
             "class TritonLanguagePlaceholder:\n    pass\n", "pkg/triton_utils.py": _TRITON_UTILS,
             "pkg/ops/__init__.py": "", "pkg/ops/kernel_utils.py": helpers, "pkg/ops/expand.py": expand}
    return migrate_json(write_project(tmp_path, files))


def test_a_module_of_device_functions_only_its_flagged_kernels_call_is_folded(tmp_path):
    """`do_expand` is called only inside `_expand_kernel`, whose module reports its own NPU910
    error: the helper module's finding is folded into it, which names the module and functions."""
    report = _lora(tmp_path)
    assert not findings_at(report, "pkg/ops/kernel_utils.py", "NPU910"), report["findings"]
    found = findings_at(report, "pkg/ops/expand.py", "NPU910")
    assert found and any("also the Triton device functions of pkg/ops/kernel_utils.py" in f["message"]
                         and "`do_expand`" in f["message"] for f in found.values()), found


def test_a_device_function_called_from_host_code_keeps_its_finding(tmp_path):
    """An importer that reads the helper outside its kernels (here: hands it on) keeps the helper's
    own finding: it is not only a piece of these kernels."""
    handed = _EXPAND + "\n\nHELPERS = [do_expand]\n"
    report = _lora(tmp_path, expand=handed)
    assert any(f["severity"] == "error" for f in findings_at(report, "pkg/ops/kernel_utils.py", "NPU910").values())


def test_a_helper_module_that_launches_its_own_kernel_keeps_its_finding(tmp_path):
    launching = _HELPERS + "\n\n@triton.jit\ndef _own_kernel(x_ptr):\n    pass\n\n\ndef run(x):\n    _own_kernel[(1,)](x)\n"
    report = _lora(tmp_path, helpers=launching)
    assert any(f["severity"] == "error" for f in findings_at(report, "pkg/ops/kernel_utils.py", "NPU910").values())


# ------------------------------------------------------------------ BN#20: a Triton module used only under an opt-in

_INTMM_TRITON = """\
import torch
import triton
import triton.language as tl


@triton.jit
def _int_mm_kernel(a_ptr, b_ptr, c_ptr, K: tl.constexpr):
    tl.store(c_ptr + tl.arange(0, K), tl.load(a_ptr + tl.arange(0, K)) * tl.load(b_ptr + tl.arange(0, K)))


def int_matmul(a, b):
    c = torch.empty_like(a)
    _int_mm_kernel[(1,)](a, b, c, K=a.numel())
    return c
"""

_INTMM = """\
import os

import torch

try:
    from pkg.kernel import intmm_triton
except ImportError:
    intmm_triton = None

AUTOTUNER_ENABLE = bool(int(os.getenv("PKG_AUTOTUNER_ENABLE", 0)))


def int_mm(a, b):
    if intmm_triton is not None and AUTOTUNER_ENABLE:
        return intmm_triton.int_matmul(a, b)
    return torch._int_mm(a, b)
"""


def _intmm(tmp_path, importer: str = _INTMM):
    files = {"pkg/__init__.py": "", "pkg/kernel/__init__.py": "", "pkg/kernel/intmm_triton.py": _INTMM_TRITON,
             "pkg/kernel/intmm.py": importer}
    return findings_at(migrate_json(write_project(tmp_path, files)), "pkg/kernel/intmm_triton.py", "NPU910")


def test_a_try_imported_triton_module_used_only_under_an_env_opt_in_says_opt_in(tmp_path):
    found = _intmm(tmp_path)
    assert found and all(f["severity"] == "info" for f in found.values()), found
    message = next(iter(found.values()))["message"]
    assert "opt-in: pkg/kernel/intmm.py uses `intmm_triton` only under `AUTOTUNER_ENABLE` (line 10)" in message
    assert "`PKG_AUTOTUNER_ENABLE`, off by default" in message


def test_a_module_whose_ops_are_called_under_the_opt_in_says_opt_in(tmp_path):
    """The importer only tests the name in its gate and calls the ops the module registers."""
    ops = _INTMM.replace("return intmm_triton.int_matmul(a, b)", "return torch.ops.pkg.int_matmul(a, b)")
    found = _intmm(tmp_path, ops)
    assert found and "opt-in: pkg/kernel/intmm.py uses `intmm_triton` only under `AUTOTUNER_ENABLE`" in \
        next(iter(found.values()))["message"], found


def test_an_opt_out_or_an_ungated_use_is_no_opt_in(tmp_path):
    """A default that is on (`os.getenv(..., 1)`) or a use outside the gate: no "opt-in" words."""
    on = _INTMM.replace('os.getenv("PKG_AUTOTUNER_ENABLE", 0)', 'os.getenv("PKG_AUTOTUNER_ENABLE", 1)')
    assert all("opt-in" not in f["message"] for f in _intmm(tmp_path / "on", on).values())
    ungated = _INTMM + "\n\ndef direct(a, b):\n    return intmm_triton.int_matmul(a, b)\n"
    assert all("opt-in" not in f["message"] for f in _intmm(tmp_path / "ungated", ungated).values())


# ------------------------------------------------------------------ BN#37: guarded kernels that only feed an FP8 error

_SCALES = """\
import torch
from torch.utils._triton import has_triton

if has_triton():
    import triton
    import triton.language as tl

    @triton.jit
    def _per_group_scales_kernel(x_ptr, s_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(s_ptr + offs, tl.abs(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)

    def per_group_scales(x):
        s = torch.empty_like(x, dtype=torch.float32)
        _per_group_scales_kernel[(triton.cdiv(x.numel(), 128),)](x, s, x.numel(), BLOCK=128)
        return s

else:

    def per_group_scales(x):
        raise NotImplementedError("per_group_scales requires triton")
"""

_GROUPED = """\
import torch

from pkg.kernels import per_group_scales


class GroupedMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, offs):
        ctx.save_for_backward(a, b, offs)
        return a @ b

    @staticmethod
    def backward(ctx, grad):
        a, b, offs = ctx.saved_tensors
        scales = per_group_scales(grad)
        grad_fp8 = (grad / scales).to(torch.float8_e4m3fn)
        return torch._scaled_grouped_mm(grad_fp8, b, scales, scales, offs=offs, out_dtype=torch.bfloat16), None, None
"""


def _grouped(tmp_path, extra: dict | None = None):
    files = {"pkg/__init__.py": "", "pkg/kernels/__init__.py": "from pkg.kernels.scales import (\n"
             "    per_group_scales as per_group_scales,\n)\n", "pkg/kernels/scales.py": _SCALES,
             "pkg/grouped_mm.py": _GROUPED, **(extra or {})}
    return migrate_json(write_project(tmp_path, files))


def test_guarded_kernels_only_an_fp8_error_function_calls_fold_into_it(tmp_path):
    report = _grouped(tmp_path, {"test/test_scales.py": "from pkg.kernels import per_group_scales\n\n\n"
                                 "def test_it():\n    per_group_scales(None)\n"})
    assert not findings_at(report, "pkg/kernels/scales.py", "NPU910"), findings_at(report, "pkg/kernels/scales.py", "NPU910")
    fp8 = findings_at(report, "pkg/grouped_mm.py", "NPU913")
    assert any("also the Triton kernels of pkg/kernels/scales.py (its NPU910 at line" in f["message"]
               and "`per_group_scales`, called only here, in `backward`" in f["message"] for f in fp8.values()), fp8


def test_guarded_kernels_another_library_function_calls_keep_their_note(tmp_path):
    """A caller without an FP8 error (a plain path that runs on an NPU host with Triton-Ascend)."""
    report = _grouped(tmp_path, {"pkg/stats.py": "from pkg.kernels import per_group_scales\n\n\n"
                                 "def stats(x):\n    return per_group_scales(x).mean()\n"})
    found = findings_at(report, "pkg/kernels/scales.py", "NPU910")
    assert found and "verify them there" in next(iter(found.values()))["message"], found


def test_settings_naming_nvidia_toolchain_classes_keep_the_error(tmp_path):
    """`from triton.runtime.errors import PTXASError` after the same guard: Triton-Ascend need not
    have PTX's error class, so the import may fail there: the error stands (test_h91's patcher)."""
    ptx = _MONITOR.replace("from triton.runtime import jit as triton_jit", "from triton.runtime.errors import PTXASError as triton_jit")
    found = findings_at(_monitor(tmp_path, ptx), "pkg/monitor.py", "NPU910")
    assert any(f["severity"] == "error" for f in found.values()), found
