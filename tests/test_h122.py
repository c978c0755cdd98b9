"""Wave-27 precision, helper h122: subsystems built only from an opt-in config an NPU host never
gets (optinraise27.py; vLLM's `specialized_decode` folders, AZ#2, BU#20, BU#33, BE#8, BJ#10, BV#12,
BV#17). Each false shape is paired with the nearest true one, which stays reported."""

from __future__ import annotations

import ast

from npu_migrate.optinraise27 import miss_check, none_or_raise
from tests.precision_helpers import migrate_json, moot_lines, write_project

_PLATFORMS = """\
class _Platform:
    def is_device_capability_family(self, family):
        return False

    def is_device_capability(self, capability):
        return False


current_platform = _Platform()
"""

# AZ#2's enabler: None unless opted in, then a raise when `unsupported()` reports a reason; its
# first check is a capability family an NPU host never has.
_CHECKS = """\
def unsupported(cfg):
    from pkg.platforms import current_platform

    checks = (
        ({first}, "this GPU"),
        (cfg.tp not in (8, 16), "TP other than 8/16"),
    )
    return next((reason for failed, reason in checks if failed), None)
"""

_ENABLER = """\
def fast_config(cfg):
    extra = cfg.extra
    backend = extra.get("decode_backend", "auto") if isinstance(extra, dict) else "auto"
    if backend == "auto":
        return None
    if backend != "fast":
        raise ValueError("decode_backend is auto or fast")
    reason = unsupported(cfg)
    if reason is not None:
        raise ValueError(f"fast decode does not support {reason}")
    return dict(depth=cfg.depth)


"""

# BE#8's enabler: the misses as a list of needs, agreed over ranks with a MIN all-reduce
_COLLECTIVE = """\
import torch
import torch.distributed as dist


def unsupported(cfg):
    from pkg.platforms import current_platform

    needs = {
        "an SM103 GPU": current_platform.is_device_capability(103),
        "TP 4": cfg.tp == 4,
    }
    return [need for need, ok in needs.items() if not ok]


def fast_config(cfg):
    if cfg.extra.get("decode_backend", "auto") == "auto":
        return None
    missing = unsupported(cfg)
    supported = torch.tensor([0 if missing else 1], dtype=torch.int32)
    dist.all_reduce(supported, op=dist.ReduceOp.{op})
    if not supported.item():
        raise ValueError("fast decode needs " + "; ".join(missing))
    return dict(depth=cfg.depth)
"""

_KERNEL = """\
import cutlass
import cutlass.cute as cute


def run_kernel(x):
    return cute.compile(x)
"""

_MODEL = """\
from .fast.runtime import fast_config


class Model:
    def __init__(self, cfg):
        self.fast_config = fast_config(cfg)
        self.fast = None

    def build_fast(self):
        from .fast.runtime.decode import FastDecode

        self.fast = FastDecode(self.fast_config)

    def state_cls(self):
        if self.fast_config is not None:
            from .fast.runtime.state import FastState

            return FastState
        return None
"""

_STATE = """\
class State:
    def __init__(self, model):
        if model.fast_config is not None:
            model.build_fast()
"""


def _project(tmp_path, first="not current_platform.is_device_capability_family(100)", enabler=None,
             extra: dict | None = None, state=_STATE):
    files = {
        "pkg/__init__.py": "",
        "pkg/platforms.py": _PLATFORMS,
        "pkg/fast/__init__.py": "",
        "pkg/fast/runtime/__init__.py": enabler or (_ENABLER + _CHECKS.format(first=first)),
        "pkg/fast/runtime/decode.py": "from pkg.fast.kern.kernel import run_kernel\n\n\n"
                                      "class FastDecode:\n    def __init__(self, config):\n"
                                      "        self.run = run_kernel\n",
        "pkg/fast/runtime/state.py": "from pkg.fast.kern.graphs import capture\n\n\nclass FastState:\n"
                                     "    pass\n",
        "pkg/fast/kern/__init__.py": "",
        "pkg/fast/kern/kernel.py": _KERNEL,
        "pkg/fast/kern/graphs.py": "import torch\n\n\ndef capture():\n    return torch.cuda.CUDAGraph()\n",
        "pkg/model.py": _MODEL,
        "pkg/state.py": state,
    }
    files.update(extra or {})
    return migrate_json(write_project(tmp_path, files))


def _reported(report: dict, path: str) -> list:
    return [f for f in report["findings"] if f["path"] == path and not f["fixable"]]


def test_miss_checks_read_both_requirement_shapes():
    tree = ast.parse(_CHECKS.format(first="not current_platform.is_device_capability_family(100)"))
    assert miss_check(tree.body[0]) is not None
    tree = ast.parse(_CHECKS.format(first="cfg.fast"))  # (nothing an NPU host is known to fail)
    assert miss_check(tree.body[0]) is None
    tree = ast.parse(_COLLECTIVE.replace("{op}", "MIN"))
    g = tree.body[2]
    assert miss_check(g) is not None

    def checker(name):
        return ("unsupported", 1, *miss_check(g)) if name == "unsupported" else None

    assert none_or_raise(tree.body[3], checker) is not None
    # a SUM of the ranks' flags may be non-zero where this rank misses: not proven
    tree = ast.parse(_COLLECTIVE.replace("{op}", "SUM"))
    assert none_or_raise(tree.body[3], checker) is None


def test_modules_only_an_enabler_raising_on_npu_reaches_are_named_scopes(tmp_path):
    # AZ#2 / BU#33: a kernel module loaded only by a method called under `if m.fast_config is not
    # None:`; BJ#10: a module loaded only under `if self.fast_config is not None:` of the class
    report = _project(tmp_path)
    assert not _reported(report, "pkg/fast/kern/kernel.py")
    reason = moot_lines(report["skipped"], "NPU911", "pkg/fast/kern/kernel.py")[1]
    assert "`build_fast()`, called only under `if <obj>.fast_config is not None:` (pkg/state.py:3)" in reason
    assert "`unsupported()` reports `not current_platform.is_device_capability_family(100)`" in reason
    assert "pkg/fast/runtime/__init__.py:10" in reason  # (the raise)
    assert not _reported(report, "pkg/fast/kern/graphs.py")
    reason = moot_lines(report["skipped"], "NPU202", "pkg/fast/kern/graphs.py")[5]
    assert "under `if self.fast_config is not None:` (pkg/model.py:15)" in reason


def test_an_enabler_an_npu_host_may_pass_keeps_the_findings(tmp_path):
    # the nearest true case: the checks name nothing an NPU host fails, so the opt-in may work
    report = _project(tmp_path, first="cfg.fast_off")
    assert [f["severity"] for f in _reported(report, "pkg/fast/kern/kernel.py")] == ["error"]
    assert _reported(report, "pkg/fast/kern/graphs.py")


def test_the_collective_enabler(tmp_path):
    # BE#8 / BV#17: the misses agreed with a MIN all-reduce, then `if not supported.item(): raise`
    report = _project(tmp_path, enabler=_COLLECTIVE.replace("{op}", "MIN"))
    assert not _reported(report, "pkg/fast/kern/kernel.py")
    report = _project(tmp_path / "sum", enabler=_COLLECTIVE.replace("{op}", "SUM"))
    assert [f["severity"] for f in _reported(report, "pkg/fast/kern/kernel.py")] == ["error"]


def test_a_live_importer_or_an_ungated_call_keeps_the_module(tmp_path):
    # a module another runtime module imports at module level stays reached
    report = _project(tmp_path, extra={"pkg/other.py": "from pkg.fast.kern import kernel\n"})
    assert [f["severity"] for f in _reported(report, "pkg/fast/kern/kernel.py")] == ["error"]
    # a call of the method outside the gate may reach it
    ungated = "class State:\n    def __init__(self, model):\n        model.build_fast()\n"
    report = _project(tmp_path / "ungated", state=ungated)
    assert [f["severity"] for f in _reported(report, "pkg/fast/kern/kernel.py")] == ["error"]
    # (the module only the gated `if self.fast_config is not None:` imports stays dead)
    assert not _reported(report, "pkg/fast/kern/graphs.py")


def test_a_module_a_test_imports_is_info(tmp_path):
    # policy P2 (BV#12): a test importing the kernel module reaches it, the library does not
    report = _project(tmp_path, extra={"tests/test_kernel.py": "from pkg.fast.kern.kernel import run_kernel\n\n\n"
                                                               "def test_it():\n    run_kernel(1)\n"})
    found = _reported(report, "pkg/fast/kern/kernel.py")
    assert [f["severity"] for f in found] == ["info"]
    assert "reached on an NPU host only from tests/benchmarks (tests/test_kernel.py:1)" in found[0]["message"]


# BU#29 / BO#1: a kernel module imported only under `if pred(x):` whose one `return` has a
# capability conjunct false on an NPU host, directly or through a value bound just before
_OPS = """\
from pkg.platforms import current_platform


def can_fuse(layer):
    \"\"\"Whether the layer fits the fused kernel.\"\"\"
    scheme = getattr(layer, "scheme", None)
    return {predicate}


def supports_overlap(cfg):
    return current_platform.is_device_capability_family(100) and cfg.hidden % 64 == 0


def init_fused_all_reduce(cfg):
    from pkg.kern.all_reduce import AllReduce

    return AllReduce(cfg)


def o_proj(layer, x):
    if x.shape[0] <= 32 and can_fuse(layer):
        from pkg.fused.kernel import FUSED

        return FUSED(x)
    return x
"""

_LAYER = """\
import torch

from pkg.ops import init_fused_all_reduce, supports_overlap


class Layer:
    def __init__(self, cfg):
        stream = torch.cuda.Stream() if supports_overlap(cfg) else None
        self.fuse_all_reduce = stream is not None and cfg.tp == 4
        if self.fuse_all_reduce:
            init_fused_all_reduce(cfg)
"""


def _ops_project(tmp_path, predicate="current_platform.is_device_capability_family(100) and scheme is not None",
                 extra: dict | None = None):
    files = {
        "pkg/__init__.py": "",
        "pkg/platforms.py": _PLATFORMS,
        "pkg/ops.py": _OPS.format(predicate=predicate),
        "pkg/layer.py": _LAYER,
        "pkg/kern/__init__.py": "",
        "pkg/fused/__init__.py": "",
        "pkg/fused/kernel.py": "import cutlass\n\n\ndef FUSED(x):\n    return cutlass.run(x)\n",
        "pkg/kern/all_reduce.py": _KERNEL + "\n\nclass AllReduce:\n    pass\n",
    }
    files.update(extra or {})
    return migrate_json(write_project(tmp_path, files))


def test_imports_under_a_predicate_false_on_npu_are_named_scopes(tmp_path):
    report = _ops_project(tmp_path)
    assert not _reported(report, "pkg/fused/kernel.py")
    reason = moot_lines(report["skipped"], "NPU911", "pkg/fused/kernel.py")[1]
    assert "`if x.shape[0] <= 32 and can_fuse(layer):` (pkg/ops.py:21)" in reason
    assert "`can_fuse()` is false there (pkg/ops.py:7)" in reason
    # BO#1: `init_fused_all_reduce` is called only under `if self.fuse_all_reduce:`, bound to
    # `stream is not None and ...` where `stream` is None unless `supports_overlap(cfg)`
    assert not _reported(report, "pkg/kern/all_reduce.py")
    reason = moot_lines(report["skipped"], "NPU911", "pkg/kern/all_reduce.py")[1]
    assert "imported only in `init_fused_all_reduce()`, called only under `if self.fuse_all_reduce:`" in reason
    assert "`stream` is None there: `supports_overlap()` is false there (pkg/ops.py:11)" in reason


def test_a_predicate_an_npu_host_may_pass_or_an_ungated_call_keeps_the_module(tmp_path):
    # the nearest true cases: a predicate with no conjunct known false there (an optional package
    # a user may install) and an initializer another module calls outside the gate
    report = _ops_project(tmp_path, predicate="scheme is not None and layer.fused_ok")
    assert [f["severity"] for f in _reported(report, "pkg/fused/kernel.py")] == ["error"]
    report = _ops_project(tmp_path / "ungated", extra={
        "pkg/warm.py": "from pkg.ops import init_fused_all_reduce\n\n\ndef warm(cfg):\n"
                       "    return init_fused_all_reduce(cfg)\n"})
    assert [f["severity"] for f in _reported(report, "pkg/kern/all_reduce.py")] == ["error"]
    assert not _reported(report, "pkg/fused/kernel.py")
