"""Issue #16: guarded optional imports, and info findings that ask for no work.

- `try: from X import f except ImportError: f = None` (a fallback: the slow path runs where the
  package is missing, as on an NPU host) was an error: info, with that reason;
- a guarded import the file reads only in `isinstance` checks, annotations and registrations
  (`register_leaf_module(apex.normalization.FusedLayerNorm)`): nothing of the package runs on an
  NPU host, so a named skipped scope, not a finding;
- `try: import flash_attn except ImportError: pytest.skip(...)`: the test does not run on an NPU
  host, so its findings become a named skipped scope;
- a flash-attn call inside `try: ... except Exception: <torch fallback>`: info;
- a CUDA runtime switch (`CUDA_DEVICE_MAX_CONNECTIONS`) has no effect on an NPU host and asks for
  no work: a named skipped scope with that reason.
Each fixture is written here, with a nearby true case that stays reported.
"""

from __future__ import annotations

from pathlib import Path

from npu_migrate.fallbacks import FALLBACK, SKIPPED_TEST, TYPE_ONLY

from .precision_helpers import migrate_json, with_as_written, write_project


def _run(tmp_path: Path, files: dict[str, str]) -> tuple[list[dict], list[dict]]:
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    return with_as_written(report), report["skipped"]  # (fallbacks: named scopes, read back)


def _at(findings: list[dict], path: str, line: int) -> list[dict]:
    return [f for f in findings if f["path"] == path and f["line"] == line]


def _scopes(skipped: list[dict], path: str) -> list[dict]:
    return [s for s in skipped if "start_line" in s and s["path"] == path]


def test_fallback_binding_is_info_and_raising_handler_stays_error(tmp_path):
    findings, _ = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/norm.py": """\
            import torch

            try:
                from apex.normalization import FusedLayerNorm
            except ImportError:
                FusedLayerNorm = None


            def make(n):
                if FusedLayerNorm is not None:
                    return FusedLayerNorm(n)
                return torch.nn.LayerNorm(n)
            """,
        "pkg/attn.py": """\
            def attention(q, k, v):
                try:
                    from flash_attn.bert_padding import pad_input
                except ImportError:
                    raise RuntimeError("flash-attn is required")
                return pad_input(q, k, v, 1)
            """,
    })
    fallback = _at(findings, "pkg/norm.py", 4)
    assert fallback and fallback[0]["severity"] == "info" and FALLBACK in fallback[0]["message"], fallback
    # not a finding of the run: a scope named "runs as written on an NPU host (NPU902): ..."
    assert fallback[0].get("scope") and fallback[0]["message"].startswith("runs as written on an NPU host (NPU902)")
    required = _at(findings, "pkg/attn.py", 3)
    assert not required[0].get("scope")
    assert required and required[0]["severity"] == "error" and FALLBACK not in required[0]["message"], required


def test_assigned_fallback_in_function_is_info_and_pass_handler_with_use_stays(tmp_path):
    findings, _ = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/layers.py": """\
            import torch


            def build(n):
                try:
                    from apex.normalization import FusedLayerNorm

                    norm = FusedLayerNorm(n)
                except ImportError:
                    norm = torch.nn.LayerNorm(n)
                return norm
            """,
        "pkg/amp.py": """\
            try:
                import apex.amp as apex_amp
            except ImportError:
                pass


            def backward(loss, optimizer):
                with apex_amp.scale_loss(loss, optimizer) as scaled:
                    scaled.backward()
            """,
    })
    fallback = _at(findings, "pkg/layers.py", 6)
    assert fallback and fallback[0]["severity"] == "info" and FALLBACK in fallback[0]["message"], fallback
    used = _at(findings, "pkg/amp.py", 2)
    assert used and used[0]["severity"] == "error", used


def test_exception_fallback_around_flash_attn_call_is_info(tmp_path):
    findings, _ = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/backend.py": """\
            import torch


            def attend(q, k, v):
                try:
                    from flash_attn.cute import flash_attn_func

                    return flash_attn_func(q, k, v)
                except Exception:
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v)
            """,
        "pkg/plain.py": """\
            import flash_attn.cute


            def attend(q, k, v):
                return flash_attn.cute.flash_attn_func(q, k, v)
            """,
    })
    guarded = [f for f in findings if f["path"] == "pkg/backend.py"]
    assert guarded and all(f["severity"] == "info" for f in guarded), guarded
    assert any(FALLBACK in f["message"] for f in guarded), guarded
    plain = [f for f in findings if f["path"] == "pkg/plain.py"]
    assert plain and any(f["severity"] == "error" for f in plain), plain


def test_registration_only_import_is_a_skipped_scope(tmp_path):
    findings, skipped = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/leaves.py": """\
            from .tracer import register_leaf_module

            try:
                import apex

                register_leaf_module(apex.normalization.FusedLayerNorm)
                register_leaf_module(apex.normalization.FusedRMSNorm)
            except (ImportError, AttributeError):
                pass
            """,
        "pkg/tracer.py": """\
            LEAVES = []


            def register_leaf_module(cls):
                LEAVES.append(cls)
            """,
        "pkg/fused.py": """\
            try:
                import apex
            except ImportError:
                pass


            def norm(n):
                return apex.normalization.FusedLayerNorm(n)
            """,
    })
    assert not [f for f in findings if f["path"] == "pkg/leaves.py"], findings
    scopes = _scopes(skipped, "pkg/leaves.py")
    assert scopes and any(TYPE_ONLY in s["reason"] for s in scopes), skipped
    used = _at(findings, "pkg/fused.py", 2)
    assert used and used[0]["severity"] == "error", used


def test_none_check_beside_isinstance_is_a_fallback_not_a_type_check(tmp_path):
    findings, skipped = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/check.py": """\
            try:
                import bitsandbytes as bnb
            except ImportError:
                bnb = None


            def is_quantized(layer) -> bool:
                return bnb is not None and isinstance(layer, bnb.nn.Linear8bitLt)
            """,
        "pkg/quant.py": """\
            import bitsandbytes as bnb


            def quantize(layer):
                return bnb.nn.Linear8bitLt(layer.in_features, layer.out_features)
            """,
    })
    # (`bnb is not None` reads the name too: a fallback, info; not a type check only)
    check = _at(findings, "pkg/check.py", 2)
    assert check and check[0]["severity"] == "info" and FALLBACK in check[0]["message"], check
    quant = _at(findings, "pkg/quant.py", 1)
    assert quant and quant[0]["severity"] == "error", quant


def test_isinstance_and_annotation_only_is_a_skipped_scope(tmp_path):
    findings, skipped = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/check.py": """\
            try:
                from bitsandbytes.nn import Linear8bitLt
            except ImportError:
                Linear8bitLt = ()


            def is_quantized(layer: "Linear8bitLt") -> bool:
                return isinstance(layer, Linear8bitLt)
            """,
    })
    assert not [f for f in findings if f["path"] == "pkg/check.py"], findings
    assert any(TYPE_ONLY in s["reason"] for s in _scopes(skipped, "pkg/check.py")), skipped


def test_import_skip_in_a_test_is_a_skipped_scope(tmp_path):
    findings, skipped = _run(tmp_path, {
        "tests/__init__.py": "",
        "tests/test_fa.py": """\
            import pytest

            try:
                from flash_attn.bert_padding import pad_input
            except ImportError:
                pytest.skip("flash-attn is not installed", allow_module_level=True)


            def test_pad(x):
                assert pad_input(x, x, 1, 1) is not None
            """,
        "tests/test_xf.py": """\
            import unittest


            class XTest(unittest.TestCase):
                def test_attention(self):
                    try:
                        import xformers.ops as xops
                    except ImportError:
                        raise unittest.SkipTest("xformers is not installed")
                    self.assertIsNotNone(xops.memory_efficient_attention(1, 2, 3))
            """,
        # a package an NPU host has: the skip is not taken there
        "tests/test_tp.py": """\
            import pytest
            import torch

            try:
                from torch.distributed.tensor.parallel import parallelize_module
            except ImportError:
                pytest.skip("needs a newer torch", allow_module_level=True)

            MESH = ("cuda", parallelize_module)
            """,
        # true cases: the same import unguarded, and one the tool rewrites (flash_attn_func has a
        # drop-in): the migrated import works on an NPU host, so the test runs there
        "tests/test_plain.py": """\
            from flash_attn.bert_padding import pad_input


            def test_pad(x):
                assert pad_input(x, x, 1, 1) is not None
            """,
        "tests/test_rewritten.py": """\
            import pytest

            try:
                from flash_attn import flash_attn_func
            except ImportError:
                pytest.skip("flash-attn is not installed", allow_module_level=True)
            from flash_attn.bert_padding import pad_input


            def test_fa(q, k, v):
                assert pad_input(flash_attn_func(q, k, v), q, 1, 1) is not None
            """,
    })
    for path in ("tests/test_fa.py", "tests/test_xf.py"):
        assert not [f for f in findings if f["path"] == path], findings
        assert any(SKIPPED_TEST in s["reason"] for s in _scopes(skipped, path)), skipped
    plain = _at(findings, "tests/test_plain.py", 1)
    assert plain and plain[0]["severity"] == "error", plain
    kept = _at(findings, "tests/test_tp.py", 9)
    assert kept and kept[0]["severity"] != "info", findings
    rewritten = _at(findings, "tests/test_rewritten.py", 7)
    assert rewritten and rewritten[0]["severity"] == "error", findings


def test_cuda_runtime_switch_is_a_no_effect_scope_and_device_env_stays(tmp_path):
    findings, skipped = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/env.py": """\
            import os

            os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
            os.environ["CUDA_MODULE_LOADING"] = "LAZY"
            MODE = "nccl"
            """,
    })
    env = [f for f in findings if f["path"] == "pkg/env.py"]
    assert not [f for f in env if f["line"] == 3], env
    scopes = _scopes(skipped, "pkg/env.py")
    assert any(s["reason"].startswith("no effect on an NPU host (NPU990): ") and s["start_line"] == 3
               for s in scopes), scopes
    assert any(s["start_line"] == 3 and s["end_line"] == 4 for s in scopes), scopes  # (both switches)
    backend = _at(env, "pkg/env.py", 5)
    assert backend and backend[0]["code"] == "NPU990" and backend[0]["severity"] == "warning", env


def test_handler_that_may_stop_is_no_fallback(tmp_path):
    findings, _ = _run(tmp_path, {
        "pkg/__init__.py": "",
        # on an NPU host neither branch binds the name: the later use fails
        "pkg/maybe.py": """\
            import sys

            try:
                import xformers.ops as xops
            except ImportError:
                if sys.platform == "win32":
                    raise SystemExit("xformers is required")


            def attend(q, k, v):
                return xops.memory_efficient_attention(q, k, v)
            """,
        # the same with a branch that binds a fallback
        "pkg/either.py": """\
            import sys

            try:
                import xformers.ops as xops
            except ImportError:
                if sys.platform == "win32":
                    xops = None
                else:
                    xops = None


            def attend(q, k, v):
                return q if xops is None else xops.memory_efficient_attention(q, k, v)
            """,
    })
    stays = _at(findings, "pkg/maybe.py", 4)
    assert stays and stays[0]["severity"] == "error", findings
    fallback = _at(findings, "pkg/either.py", 4)
    assert fallback and fallback[0]["severity"] == "info" and FALLBACK in fallback[0]["message"], findings


def test_torch_import_behind_try_is_no_fallback(tmp_path):
    findings, _ = _run(tmp_path, {
        "tools/presets.py": """\
            import os

            try:
                from torch.utils.cpp_extension import CUDA_HOME
            except ImportError:
                CUDA_HOME = os.environ.get("CUDA_HOME")

            NVCC = os.path.join(CUDA_HOME, "bin", "nvcc")
            """,
        "tools/optional.py": """\
            try:
                from apex.normalization import FusedRMSNorm
            except ImportError:
                FusedRMSNorm = None


            def norm(n):
                return FusedRMSNorm(n) if FusedRMSNorm is not None else None
            """,
    })
    # torch imports on an NPU host: CUDA_HOME is None there, the `except` branch does not run
    kept = [f for f in findings if f["path"] == "tools/presets.py" and f["line"] == 4]
    assert all(FALLBACK not in f["message"] for f in kept), kept
    optional = _at(findings, "tools/optional.py", 2)
    assert optional and optional[0]["severity"] == "info" and FALLBACK in optional[0]["message"], findings


def test_compiled_extension_with_fallback_is_info(tmp_path):
    findings, _ = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/optim.py": """\
            try:
                import fused_adam_cuda
            except ImportError:
                fused_adam_cuda = None


            def step(params):
                if fused_adam_cuda is None:
                    return [p * 0.9 for p in params]
                return fused_adam_cuda.step(params)
            """,
        "pkg/plain.py": """\
            import fused_adam_cuda


            def step(params):
                return fused_adam_cuda.step(params)
            """,
    })
    fallback = _at(findings, "pkg/optim.py", 2)
    assert fallback and fallback[0]["code"] == "NPU911" and fallback[0]["severity"] == "info", findings
    assert FALLBACK in fallback[0]["message"], fallback
    plain = _at(findings, "pkg/plain.py", 1)
    assert plain and plain[0]["severity"] == "error", findings


def test_skip_in_one_branch_covers_that_branch_only(tmp_path):
    findings, skipped = _run(tmp_path, {
        "tests/__init__.py": "",
        "tests/test_backends.py": """\
            import pytest
            import torch


            @pytest.mark.parametrize("backend", ["flashinfer", "sdpa"])
            def test_backend(backend):
                if backend == "flashinfer":
                    try:
                        import flashinfer
                    except ImportError:
                        pytest.skip("flashinfer is not installed")
                    assert flashinfer.decode is not None
                graph = torch.cuda.CUDAGraph()
                assert graph is not None
            """,
    })
    assert not [f for f in findings if f["path"] == "tests/test_backends.py" and f["line"] == 9], findings
    assert any(SKIPPED_TEST in s["reason"] and s["end_line"] <= 12 for s in _scopes(skipped, "tests/test_backends.py"))
    # the sdpa case runs on an NPU host: the CUDA graph after the branch stays a finding
    graph = _at(findings, "tests/test_backends.py", 13)
    assert graph and graph[0]["severity"] == "error", findings


def test_fallback_beside_a_rewritten_import_is_info(tmp_path):
    findings, _ = _run(tmp_path, {
        "pkg/__init__.py": "",
        # the first import is rewritten (a drop-in exists), the second has none: on an NPU host
        # it fails, and the stubs of the `except` branch are used
        "pkg/moba.py": """\
            try:
                from flash_attn import flash_attn_varlen_func
                from flash_attn.flash_attn_interface import _flash_attn_varlen_forward
            except ImportError:

                def _flash_attn_varlen_forward(*args, **kwargs):
                    raise ImportError("flash-attn is required")


            def forward(q, k, v):
                return _flash_attn_varlen_forward(q, k, v), flash_attn_varlen_func
            """,
        "pkg/plain.py": """\
            from flash_attn.flash_attn_interface import _flash_attn_varlen_forward


            def forward(q, k, v):
                return _flash_attn_varlen_forward(q, k, v)
            """,
    })
    fallback = _at(findings, "pkg/moba.py", 3)
    assert fallback and fallback[0]["severity"] == "info" and FALLBACK in fallback[0]["message"], findings
    plain = _at(findings, "pkg/plain.py", 1)
    assert plain and plain[0]["severity"] == "error", findings


def test_a_none_fallback_called_without_a_check_stays_an_error(tmp_path):
    """sglang's Nunchaku layer: `except ImportError: svdq_gemm_w4a4_cuda = None`, then `svdq_gemm_w4a4_cuda(...)`
    called with no None check: on an NPU host the call fails, so the import stays a finding.
    The same None fallback tested before the call is a fallback (a named scope)."""
    findings, _ = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/unchecked.py": """\
            try:
                from nunchaku.ops.gemm import svdq_gemm_w4a4_cuda
            except ImportError:
                svdq_gemm_w4a4_cuda = None


            def forward(x):
                return svdq_gemm_w4a4_cuda(x)
            """,
        "pkg/checked.py": """\
            try:
                from nunchaku.ops.gemm import svdq_gemm_w4a4_cuda
            except ImportError:
                svdq_gemm_w4a4_cuda = None


            def forward(x):
                if svdq_gemm_w4a4_cuda is None:
                    return x
                return svdq_gemm_w4a4_cuda(x)
            """,
    })
    unchecked = _at(findings, "pkg/unchecked.py", 2)
    assert unchecked and unchecked[0]["severity"] == "error" and not unchecked[0].get("scope"), unchecked
    checked = _at(findings, "pkg/checked.py", 2)
    assert checked and checked[0].get("scope") and FALLBACK in checked[0]["message"], checked
