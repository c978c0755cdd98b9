"""Round 28's kernels reached only through another module's capability-gated calls (audit CB#34;
helper h136, issue #16): each false shape paired with the nearest true case that must stay
reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

_PLATFORMS = """\
class _Platform:
    def is_cuda(self):
        return True

    def is_rocm(self):
        return False


current_platform = _Platform()
"""

# (CB#34's shape: a kernel launched only by a method of a plain dataclass, the one function that
# builds and uses it called only under a support check false off CUDA)
_DECODE = '''\
from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl

from pkg.platforms import current_platform


@triton.jit
def _update_kernel(ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(ptr + offs, offs, mask=offs < n)


@dataclass
class PlanCache:
    plans: dict = field(init=False, default_factory=dict)
{post_init}
    def prepare(self, table):
        n = table.numel()
        _update_kernel[(1,)](table, n, BLOCK=128)
        return table


def supports_sparse_decode(backend):
    return backend == "cutlass" and current_platform.is_cuda() and table_ok()


def table_ok():
    return True


def prepare_decode_metadata(table, plan_cache=None):
    cache = plan_cache or PlanCache()
    return cache.prepare(table)
'''

_BUILDER = '''\
import torch

from pkg.decode import PlanCache, prepare_decode_metadata, supports_sparse_decode


class Builder:
    def __init__(self, backend):
        self.backend = backend
        self.plan_cache = PlanCache()

    def build(self, table):
        if supports_sparse_decode(self.backend):
            return prepare_decode_metadata(table, plan_cache=self.plan_cache)
        return table
{more}
'''

_LIVE_READ = '''
    def warm(self, table):
        return self.plan_cache.prepare(table)
'''

_TEST = '''\
import pytest
import torch

from pkg import builder as builder_module
from pkg.platforms import current_platform

pytestmark = pytest.mark.skipif(not current_platform.is_cuda(), reason="CUDA only")


def test_builder_prepares(monkeypatch):
    monkeypatch.setattr(builder_module, "prepare_decode_metadata", lambda *a, **k: None)
    assert builder_module.Builder("cutlass").build(torch.zeros(4)) is None
'''


def _project(tmp_path, post_init: str = "", more: str = "", test: str = _TEST, extra: dict | None = None):
    files = {
        "pkg/__init__.py": "",
        "pkg/platforms.py": _PLATFORMS,
        "pkg/decode.py": _DECODE.replace("{post_init}", post_init),
        "pkg/builder.py": _BUILDER.replace("{more}", more),
        "tests/test_builder.py": test,
        **(extra or {}),
    }
    return migrate_json(write_project(tmp_path, files))


def _kernel(report: dict) -> tuple[list, list]:
    """(the open NPU910 findings with a place on the kernel's decorator (line 10; merged with the
    module's unguarded Triton import where both stay), the named scopes of it) in pkg/decode.py."""
    findings = [f for f in report["findings"] if f["path"] == "pkg/decode.py" and f["code"] == "NPU910"
                and not f["fixable"] and f["severity"] != "info"
                and 10 in (f["line"], *(line for line, _c, _s in f.get("also") or ()))]
    scopes = [s for s in report["skipped"] if s.get("path") == "pkg/decode.py" and s.get("start_line") == 10
              and "(NPU910)" in s["reason"]]
    return findings, scopes


def test_cb34_a_plan_cache_built_into_self_and_read_only_under_a_false_support_check(tmp_path):
    """CB#34: the kernel's one launch is in `PlanCache.prepare`; the library builds a PlanCache on
    every host (`self.plan_cache = PlanCache()`, a dataclass whose construction runs none of its
    code) but reads `self.plan_cache` only under `if supports_sparse_decode(...)`, false off CUDA,
    and a CUDA-only test patches the metadata function by name: a named scope naming the gate."""
    findings, scopes = _kernel(_project(tmp_path))
    assert not findings
    assert len(scopes) == 1
    reason = scopes[0]["reason"]
    assert "not run on an NPU host" in reason
    assert "built into `self.plan_cache`" in reason and "supports_sparse_decode" in reason


def test_cb34_pair_the_instance_read_where_an_npu_host_goes_stays_an_error(tmp_path):
    """Nearest true case: the same builder also calls `self.plan_cache.prepare(table)` in an ungated
    method: the kernel runs on an NPU host, so its NPU910 stays an error."""
    findings, scopes = _kernel(_project(tmp_path, more=_LIVE_READ))
    assert len(findings) == 1 and not scopes


def test_cb34_pair_a_class_whose_construction_runs_its_code_stays_an_error(tmp_path):
    """Nearest true case: the dataclass's `__post_init__` calls `prepare`: building it (on every
    host) launches the kernel, so the construction is a live reference and the error stays."""
    post_init = '''
    def __post_init__(self):
        self.prepare(torch.zeros(4))
'''
    findings, scopes = _kernel(_project(tmp_path, post_init=post_init))
    assert len(findings) == 1 and not scopes


def test_cb34_pair_a_string_naming_the_function_where_an_npu_host_goes_stays_an_error(tmp_path):
    """Nearest true case: a library module looks the metadata function up by name on every host
    (`getattr(builder_module, "prepare_decode_metadata")`): a string that may run there keeps the
    kernel reached, as before; only strings inside code an NPU host skips are no reference."""
    lookup = '''\
from pkg import builder as builder_module

PREPARE = getattr(builder_module, "prepare_decode_metadata")
'''
    findings, scopes = _kernel(_project(tmp_path, extra={"pkg/lookup.py": lookup}))
    assert len(findings) == 1 and not scopes


# ----------------------------------------------------------------------------- CC#12: a composed check
_MOE_PLATFORMS = '''\
class Platform:
    _enum = "cuda"

    def is_cuda_alike(self):
        return self._enum in ("cuda", "rocm")


current_platform = Platform()
'''

_DEEP = '''\
import torch

from proj.platforms import current_platform


def is_deep_supported():
    return current_platform.is_cuda_alike()


class ExpertsBase:
    @classmethod
    def is_supported_config(cls, config):
        if not cls._supports_current_device():
            return False, "device"
        return True, None


class DeepExperts(ExpertsBase):
    @staticmethod
    def _supports_current_device() -> bool:
        return is_deep_supported()

    def apply(self, x):
        return x.to(torch.float8_e4m3fn)


class PlainExperts(ExpertsBase):
    @staticmethod
    def _supports_current_device() -> bool:
        return True

    def apply(self, x):
        return x


class FallbackExperts(ExpertsBase):
    def __init__(self, experts, fallback):
        self.experts, self.fallback = experts, fallback

    @classmethod
    def _supports_current_device(cls) -> bool:
        experts_cls, fallback_cls = cls.get_clses()
        return experts_cls._supports_current_device() OP fallback_cls._supports_current_device()

    def apply(self, x):
        return (self.experts if x.numel() > 4 else self.fallback).apply(x)
'''

_WRAPPER = '''\
from proj.deep import DeepExperts, FallbackExperts, PlainExperts


class PlainOrDeepExperts(FallbackExperts):
    def __init__(self):
        super().__init__(DeepExperts(), PlainExperts())

    @staticmethod
    def get_clses():
        return (DeepExperts, PlainExperts)
'''

_MOE_ORACLE = '''\
def backend_to_kernel_cls(backend):
    if backend == "deep":
        from proj.wrapper import PlainOrDeepExperts

        return [PlainOrDeepExperts]
    from proj.deep import PlainExperts

    return [PlainExperts]


def select(backend, config):
    for cls in backend_to_kernel_cls(backend):
        ok, why = cls.is_supported_config(config)
        if ok:
            return cls()
    raise ValueError(why)
'''


def _moe(tmp_path, op: str = "and"):
    files = {
        "proj/__init__.py": "",
        "proj/platforms.py": _MOE_PLATFORMS,
        "proj/deep.py": _DEEP.replace(" OP ", f" {op} "),
        "proj/wrapper.py": _WRAPPER,
        "proj/oracle.py": _MOE_ORACLE,
    }
    report = migrate_json(write_project(tmp_path, files))
    line = _DEEP.splitlines().index("        return x.to(torch.float8_e4m3fn)") + 1
    findings = [f for f in report["findings"] if f["path"] == "proj/deep.py" and f["code"] == "NPU913"
                and not f["fixable"] and f["severity"] != "info" and f["line"] == line]
    scopes = [s["reason"] for s in report["skipped"] if s.get("path") == "proj/deep.py"
              and s.get("start_line") == line and "(NPU913)" in s["reason"]]
    return findings, scopes


def test_cc12_experts_built_only_by_a_wrapper_whose_composed_check_answers_no(tmp_path):
    """CC#12: `DeepExperts` (its check false off CUDA) is built by name only inside the wrapper
    `PlainOrDeepExperts`, whose check, inherited from `FallbackExperts`, is `a._supports_current_device()
    and b._supports_current_device()` over its `get_clses()` candidates: false there, so the
    selector never builds the wrapper, nor the DeepGEMM-like class, and its FP8 cast is a named scope."""
    findings, scopes = _moe(tmp_path)
    assert not findings
    assert len(scopes) == 1
    assert "inherited from `FallbackExperts`" in scopes[0] and "`DeepExperts`" in scopes[0]


def test_cc12_pair_a_composed_check_either_candidate_satisfies_stays_an_error(tmp_path):
    """Nearest true case: the composed check is an `or` (either candidate suffices): the wrapper may
    be selected on an NPU host, builds `DeepExperts` there, and the FP8 cast stays an error."""
    findings, scopes = _moe(tmp_path, op="or")
    assert len(findings) == 1 and not scopes


# ----------------------------------------------------------------------------- CC#20: a method called by name
_SWA_OPS = '''\
import triton
import triton.language as tl


@triton.jit
def _gate(x, GATED: tl.constexpr):
    return x


@triton.jit
def _swa_split(ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(ptr + offs, _gate(offs, True), mask=offs < n)


def swa_decode_gated(out):
    _swa_split[(1,)](out, out.numel(), BLOCK=128)
    return out
'''

_SWA_IMPL = '''\
import torch


class SplitKVImpl:
    def __init__(self, head_size):
        self.head_size = head_size

    def forward(self, query, output):
        output.copy_(query)
        return output

    def forward_with_headwise_gate(self, query, output, gate):
        if self.head_size != 192:
            return self.forward(query, output)
        from pkg.swa_ops import swa_decode_gated

        return swa_decode_gated(output)
'''

_SWA_MODEL = '''\
import torch

from pkg.platforms import current_platform
from pkg.swa_impl import SplitKVImpl


def swa_attention_with_output(layer, query, output, gate):
    layer.impl.forward_with_headwise_gate(query, output, gate)


class Attention(torch.nn.Module):
    def __init__(self, head_size, gated):
        super().__init__()
        self.impl = SplitKVImpl(head_size)
        self.fuse_swa_gate = gated and current_platform.is_cuda()

    def forward(self, query, output, gate):
        if self.fuse_swa_gate:
            swa_attention_with_output(self, query, output, gate)
            return output
        return self.impl.forward(query, output)
{more}
'''

_SWA_LIVE = '''

def warm_up(layer, query, output, gate):
    return layer.impl.forward_with_headwise_gate(query, output, gate)
'''


def _swa(tmp_path, more: str = ""):
    files = {
        "pkg/__init__.py": "",
        "pkg/platforms.py": _PLATFORMS,
        "pkg/swa_ops.py": _SWA_OPS,
        "pkg/swa_impl.py": _SWA_IMPL,
        "pkg/model.py": _SWA_MODEL.replace("{more}", more),
    }
    report = migrate_json(write_project(tmp_path, files))
    open_lines = {ln for f in report["findings"] if f["path"] == "pkg/swa_ops.py" and f["code"] == "NPU910"
                  and not f["fixable"] and f["severity"] != "info"
                  for ln in (f["line"], *(a for a, _c, _s in f.get("also") or ()))}
    scopes = {s["start_line"]: s["reason"] for s in report["skipped"] if s.get("path") == "pkg/swa_ops.py"
              and "start_line" in s and "(NPU910)" in s["reason"]}
    return open_lines, scopes


def test_cc20_kernels_launched_only_by_a_method_called_under_a_false_flag(tmp_path):
    """CC#20: the SWA kernels' only launcher is imported in `forward_with_headwise_gate`, a method
    of an impl every layer builds; the method's one call is in a function the layer calls only
    under `self.fuse_swa_gate`, false off CUDA. The kernel (line 10) is a named scope naming the
    gate, and the device function `_gate` (line 5), called only inside it and so folded into it
    before, is one too."""
    open_lines, scopes = _swa(tmp_path)
    assert 10 not in open_lines and 5 not in open_lines
    assert "fuse_swa_gate" in scopes[10]
    assert "`_gate`" in scopes[5]


def test_cc20_pair_the_method_also_called_where_an_npu_host_goes_stays_an_error(tmp_path):
    """Nearest true case: a warm-up function with no gate also calls
    `layer.impl.forward_with_headwise_gate(...)`: the kernels run on an NPU host and stay reported."""
    open_lines, scopes = _swa(tmp_path, more=_SWA_LIVE)
    assert 10 in open_lines and 10 not in scopes
