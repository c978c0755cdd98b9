"""Issue #16, round 7: guarded imports and version probes with a fallback, FP8 dtypes only named.

- `if not _is_cuda: try: from vllm import _custom_ops ... except ImportError: flag = False` (a
  guarded import nested in an `if`, sglang's fused MoE) and a bare `except:` binding the module to
  None beside an `except ImportError:` setting a flag (colossalai's shardformer): the fallback runs
  on an NPU host, a named scope, not an error; an unguarded import used without fallback stays;
- `try: major = torch.version.cuda.split(".")[0] except: version = None`: `torch.version.cuda` is
  None on an NPU host, the fallback runs: a named scope, not a warning; a handler that raises
  keeps the finding;
- a dataclass config's default `float8_dtype = (torch.float8_e4m3fnuz if is_mi300() else
  torch.float8_e4m3fn)` in a file that computes nothing in FP8: a named "no port work" scope
  (names FP8 dtypes only), not an error; a `.to(torch.float8_e4m3fn)` cast stays an error.
Each fixture is written here, with a nearby true case that stays reported.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_migrate.versionprobes import VERSION_FALLBACK

from .precision_helpers import migrate_json, with_as_written, write_project


def _run(tmp_path: Path, files: dict[str, str]) -> tuple[list[dict], list[dict]]:
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    return with_as_written(report), report["skipped"]


def _at(findings: list[dict], path: str, line: int, code: str) -> list[dict]:
    return [f for f in findings if f["path"] == path and f["line"] == line and f["code"] == code]


def test_guarded_import_nested_in_if_is_a_scope_and_unguarded_import_stays_error(tmp_path):
    findings, _ = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/moe.py": """\
            import torch

            _is_cuda = torch.cuda.is_available()

            _has_ops = False
            if not _is_cuda:
                try:
                    from vllm import _custom_ops as ops

                    _has_ops = True
                except ImportError:
                    # native PyTorch fallback
                    _has_ops = False


            def act(out, x):
                if _has_ops:
                    ops.silu_and_mul(out, x)
                else:
                    out.copy_(torch.nn.functional.silu(x))
            """,
        "pkg/plain.py": """\
            from vllm import _custom_ops as ops


            def act(out, x):
                ops.silu_and_mul(out, x)
            """,
    })
    guarded = _at(findings, "pkg/moe.py", 8, "NPU911")
    assert guarded and all(f.get("scope") and f["severity"] == "info" for f in guarded), guarded
    plain = _at(findings, "pkg/plain.py", 1, "NPU911")
    assert plain and plain[0]["severity"] == "error" and not plain[0].get("scope"), plain


def test_bare_except_binding_none_and_flag_fallback_are_scopes_raising_handler_stays(tmp_path):
    findings, _ = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/ops.py": """\
            import torch

            try:
                import fused_mix_prec_layer_norm_cuda
            except:
                fused_mix_prec_layer_norm_cuda = None

            try:
                import fused_weight_gradient_mlp_cuda

                _fusion = True
            except ImportError:
                _fusion = False


            def wgrad(x, g, grad):
                if _fusion:
                    fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp32(x, g, grad)
                else:
                    grad += g.t().matmul(x)
            """,
        "pkg/strict.py": """\
            try:
                import fused_dense_cuda
            except ImportError:
                raise RuntimeError("build the fused_dense_cuda extension")


            def dense(x, w):
                return fused_dense_cuda.linear(x, w)
            """,
    })
    ops = [f for f in findings if f["path"] == "pkg/ops.py" and f["code"] == "NPU911"]
    assert ops and all(f.get("scope") and f["severity"] == "info" for f in ops), ops
    strict = [f for f in findings if f["path"] == "pkg/strict.py" and f["code"] == "NPU911"]
    assert strict and strict[0]["severity"] == "error" and not strict[0].get("scope"), strict


def test_cuda_version_read_in_try_with_fallback_is_a_scope_raising_handler_stays(tmp_path):
    findings, skipped = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/check.py": """\
            import torch


            def versions():
                try:
                    major = torch.version.cuda.split(".")[0]
                    minor = torch.version.cuda.split(".")[1]
                    cuda_version = f"{major}.{minor}"
                except:
                    cuda_version = None
                return cuda_version


            def strict():
                try:
                    major = torch.version.cuda.split(".")[0]
                except AttributeError:
                    raise RuntimeError("a CUDA build of torch is required")
                return major
            """,
    })
    probe = [f for f in findings if f["path"] == "pkg/check.py" and f["line"] in (6, 7)]
    assert probe and all(f.get("scope") and VERSION_FALLBACK in f["message"] for f in probe), probe
    assert any(s.get("start_line") == 6 and VERSION_FALLBACK in s["reason"] for s in skipped), skipped
    kept = _at(findings, "pkg/check.py", 16, "NPU990")
    assert kept and kept[0]["severity"] != "info" and not kept[0].get("scope"), kept


def test_cuda_version_bare_read_in_try_stays_reported(tmp_path):
    """`v = torch.version.cuda` raises nothing where it is None: the `except` does not run and
    the None goes on; not a fallback."""
    findings, _ = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/read.py": """\
            import torch


            def version():
                try:
                    v = torch.version.cuda
                except Exception:
                    v = "unknown"
                return v.split(".")
            """,
    })
    assert not any(f.get("scope") and VERSION_FALLBACK in f["message"] for f in findings), findings


def test_fp8_conditional_dataclass_default_is_info_and_cast_stays_error(tmp_path):
    findings, skipped = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/config.py": """\
            from dataclasses import dataclass

            import torch


            def is_mi300():
                return False


            class BaseConfig:
                pass


            @dataclass
            class TrainingOpConfig(BaseConfig):
                float8_dtype: torch.dtype = (
                    torch.float8_e4m3fnuz if is_mi300() else torch.float8_e4m3fn
                )
                scale: float = 1.0

                def __eq__(self, other):
                    return self.float8_dtype == other.float8_dtype
            """,
        "pkg/cast.py": """\
            import torch


            def cast(x):
                return x.to(torch.float8_e4m3fn)
            """,
    })
    # names FP8 dtypes only: a named "no port work" scope (moot.NO_WORK), not a finding
    config = [f for f in findings if f["path"] == "pkg/config.py" and f["code"] == "NPU913"]
    assert not config, config
    assert any(e["path"] == "pkg/config.py" and e.get("reason", "").startswith(
        "no port work on an NPU host (NPU913): names FP8 dtypes only") for e in skipped), skipped
    cast = [f for f in findings if f["path"] == "pkg/cast.py" and f["code"] == "NPU913"]
    assert cast and cast[0]["severity"] == "error", cast


def test_fp8_conditional_default_cast_in_the_file_stays_error(tmp_path):
    """The same conditional default of a parameter the function casts to (`x.to(dtype)`): FP8
    compute by default, an error."""
    findings, _ = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/quant.py": """\
            import torch


            def is_mi300():
                return False


            def quantize(x, dtype=torch.float8_e4m3fnuz if is_mi300() else torch.float8_e4m3fn):
                return x.to(dtype)
            """,
    })
    quant = [f for f in findings if f["path"] == "pkg/quant.py" and f["code"] == "NPU913"]
    assert quant and any(f["severity"] == "error" for f in quant), quant


def test_import_under_if_inside_try_with_fallback_is_a_scope_raising_handler_stays(tmp_path):
    """`try: if fp4_enabled(): from flashinfer import f else: from sgl_kernel import f except
    ImportError: f = None`: the import under the `if` fails on an NPU host, the fallback runs."""
    findings, _ = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/disp.py": """\
            import torch


            def fp4_enabled():  # (a check whose answer the tool cannot know: not a literal False)
                return torch.__version__.endswith("+fp4")


            try:
                if fp4_enabled():
                    from flashinfer import fp4_quantize
                else:
                    from sgl_kernel import scaled_fp4_quant as fp4_quantize
            except ImportError:
                fp4_quantize = None


            def quant(x):
                if fp4_quantize is None:
                    return x.half()
                return fp4_quantize(x)


            def sync():
                torch.cuda.synchronize()
            """,
        "pkg/strict.py": """\
            import torch


            def fp4_enabled():  # (a check whose answer the tool cannot know: not a literal False)
                return torch.__version__.endswith("+fp4")


            try:
                if fp4_enabled():
                    from flashinfer import fp4_quantize
            except ImportError:
                raise RuntimeError("install flashinfer")


            def quant(x):
                torch.cuda.synchronize()
                return fp4_quantize(x)
            """,
    })
    guarded = _at(findings, "pkg/disp.py", 10, "NPU911")
    assert guarded and all(f.get("scope") and f["severity"] == "info" for f in guarded), guarded
    strict = _at(findings, "pkg/strict.py", 10, "NPU911")
    assert strict and strict[0]["severity"] == "error" and not strict[0].get("scope"), strict


def test_alias_bound_before_try_with_pass_handler_is_a_scope_direct_use_stays(tmp_path):
    """`Fast_LN = None; try: from apex... import FastLayerNorm; Fast_LN = FastLayerNorm except
    ImportError: pass`: the file reads `Fast_LN`, None on an NPU host. The same shape whose file
    also reads the imported name itself (a NameError there) stays an error."""
    source = """\
        import torch

        Fast_LN = None
        try:
            from apex.contrib.layer_norm.layer_norm import FastLayerNorm

            Fast_LN = FastLayerNorm
        except ImportError:
            pass


        def norm(n):
            torch.cuda.synchronize()
            if Fast_LN is not None:
                return Fast_LN(n)
            return torch.nn.LayerNorm(n)
        """
    findings, _ = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/alias.py": source,
        "pkg/direct.py": textwrap.dedent(source) + "\n\ndef fast(n):\n    return FastLayerNorm(n)\n",
    })
    alias = [f for f in findings if f["path"] == "pkg/alias.py" and f["line"] == 5]
    assert alias and all(f.get("scope") and f["severity"] == "info" for f in alias), alias
    direct = [f for f in findings if f["path"] == "pkg/direct.py" and f["line"] == 5]
    assert direct and any(f["severity"] == "error" and not f.get("scope") for f in direct), direct
