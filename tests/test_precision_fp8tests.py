"""Issue #16, round 7: FP8 findings (NPU913) that are not port work.

- a test under a `pytest.mark.skipif(compute_capability < (9, 0))` mark, where the module's
  `compute_capability` is `(0, 0)` or `torch.cuda.get_device_capability()` ((0, 0) on an NPU
  host): the test is skipped there (xformers' `sm90_or_better_only`); a test under a mark that
  an NPU host does not skip keeps its error;
- a test that requests a fixture of its file whose body starts with `if not HAS_DEVICE_GRAPH:
  pytest.skip(...)` (`HAS_DEVICE_GRAPH = current_platform.is_cuda_alike() or
  current_platform.is_xpu()`, vLLM's `cuda_capture_stream`): skipped there; a test of the same
  file without that fixture keeps its error;
- the pure-torch FP8 reference of a kernel test whose module imports, unguarded, a project module
  that imports the compiled CUDA package `sgl_kernel` (sglang's CUTLASS W4A8 MoE test): the test
  module cannot be imported on an NPU host, a named scope that names the import; a test of a
  module that imports nothing of the kind keeps its error;
- a file that only names FP8 dtypes (a dataclass default, a tolerance table): a named "no port
  work" scope, not a finding; an FP8 cast in library code stays an error.
Each fixture is written here, with a nearby true case that stays reported.
"""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, write_project


def _run(tmp_path: Path, files: dict[str, str]) -> tuple[list[dict], list[dict]]:
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    return [f for f in report["findings"] if not f["fixable"]], report["skipped"]


def _fp8(findings: list[dict], path: str) -> list[dict]:
    return [f for f in findings if f["path"] == path and f["code"] == "NPU913"]


def _scopes(skipped: list[dict], path: str, prefix: str) -> list[dict]:
    return [s for s in skipped if s["path"] == path and "start_line" in s and s["reason"].startswith(prefix)]


def test_fp8_in_a_test_under_a_capability_variable_mark_is_a_scope_a_runnable_test_stays(tmp_path):
    findings, skipped = _run(tmp_path, {
        "tests/test_attention.py": """\
            import pytest
            import torch

            compute_capability = (0, 0)
            if torch.cuda.is_available():
                compute_capability = torch.cuda.get_device_capability("cuda")
            sm90_or_better_only = pytest.mark.skipif(compute_capability < (9, 0), reason="requires sm90+")


            @sm90_or_better_only
            def test_fp8_attention():
                q = torch.randn(4, 8, device="cuda")
                q_fp8 = q.to(torch.float8_e4m3fn)
                assert q_fp8.shape == q.shape
            """,
        "tests/test_runs.py": """\
            import pytest
            import torch

            compute_capability = (0, 0)
            if torch.cuda.is_available():
                compute_capability = torch.cuda.get_device_capability("cuda")
            # skipped only on a GPU at least as new as Hopper: an NPU host runs it
            legacy_only = pytest.mark.skipif(compute_capability >= (9, 0), reason="legacy path")


            @legacy_only
            def test_fp8_cast():
                q = torch.randn(4, 8, device="cuda")
                q_fp8 = q.to(torch.float8_e4m3fn)
                assert q_fp8.shape == q.shape
            """,
    })
    assert not _fp8(findings, "tests/test_attention.py"), findings
    scope = _scopes(skipped, "tests/test_attention.py", "not run on an NPU host (NPU913)")
    assert scope and "compute_capability < (9, 0)" in scope[0]["reason"], skipped
    runs = _fp8(findings, "tests/test_runs.py")
    assert runs and runs[0]["severity"] == "error" and runs[0]["line"] == 14, runs


def test_fp8_in_a_test_requesting_a_skipping_fixture_is_a_scope_other_tests_stay(tmp_path):
    findings, skipped = _run(tmp_path, {
        "tests/test_graph.py": """\
            import pytest
            import torch

            from vllm.platforms import current_platform

            HAS_DEVICE_GRAPH = current_platform.is_cuda_alike() or current_platform.is_xpu()


            @pytest.fixture
            def capture_stream():
                \"\"\"A side stream for graph capture.\"\"\"
                if not HAS_DEVICE_GRAPH:
                    pytest.skip("a device graph is required")
                stream = torch.cuda.Stream()
                with torch.cuda.stream(stream):
                    yield stream


            def test_quantized_replay(capture_stream):
                source = torch.ones((16, 16), device="cuda", dtype=torch.bfloat16)
                data = source.to(torch.float8_e4m3fn)
                assert data.shape == source.shape
            """,
        "tests/test_eager.py": """\
            import pytest
            import torch


            @pytest.fixture
            def source():
                return torch.ones((16, 16), device="cuda", dtype=torch.bfloat16)


            def test_quantized_eager(source):
                data = source.to(torch.float8_e4m3fn)
                assert data.shape == source.shape
            """,
    })
    assert not _fp8(findings, "tests/test_graph.py"), findings
    scope = _scopes(skipped, "tests/test_graph.py", "not run on an NPU host (NPU913)")
    assert scope and "capture_stream" in scope[0]["reason"] and "HAS_DEVICE_GRAPH" in scope[0]["reason"], skipped
    eager = _fp8(findings, "tests/test_eager.py")
    assert eager and eager[0]["severity"] == "error", eager


def test_fp8_reference_in_a_test_module_that_cannot_be_imported_is_a_scope_others_stay(tmp_path):
    findings, skipped = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/moe/__init__.py": "",
        "pkg/moe/w4a8.py": """\
            import torch

            from sgl_kernel import silu_and_mul


            def w4a8_moe(x):
                return silu_and_mul(x)
            """,
        "pkg/moe/plain.py": """\
            import torch


            def plain_moe(x):
                return x * 2
            """,
        "pkg/test/test_w4a8.py": """\
            import torch

            from pkg.moe.w4a8 import w4a8_moe


            def reference(x):
                return x.to(torch.float8_e4m3fn).to(torch.bfloat16)


            def test_w4a8():
                x = torch.randn(4, 4, device="cuda")
                torch.testing.assert_close(w4a8_moe(x), reference(x))
            """,
        "pkg/test/test_plain.py": """\
            import torch

            from pkg.moe.plain import plain_moe


            def reference(x):
                return x.to(torch.float8_e4m3fn).to(torch.bfloat16)


            def test_plain():
                x = torch.randn(4, 4, device="cuda")
                torch.testing.assert_close(plain_moe(x), reference(x))
            """,
    })
    assert not _fp8(findings, "pkg/test/test_w4a8.py"), findings
    scope = _scopes(skipped, "pkg/test/test_w4a8.py", "not run on an NPU host (NPU913)")
    assert scope and "sgl_kernel" in scope[0]["reason"] and "pkg/moe/w4a8.py:3" in scope[0]["reason"], skipped
    plain = _fp8(findings, "pkg/test/test_plain.py")
    assert plain and plain[0]["severity"] == "error", plain


def test_fp8_reference_in_a_test_module_with_a_guarded_kernel_import_stays(tmp_path):
    """An import of the kernel package inside `try` (a fallback) does not make the module fail."""
    findings, _ = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/test/test_guarded.py": """\
            import torch

            try:
                from sgl_kernel import silu_and_mul
            except ImportError:
                silu_and_mul = None


            def test_reference():
                x = torch.randn(4, 4, device="cuda")
                assert x.to(torch.float8_e4m3fn).shape == x.shape
            """,
    })
    guarded = _fp8(findings, "pkg/test/test_guarded.py")
    assert guarded and guarded[0]["severity"] == "error", guarded


def test_fp8_dtype_names_only_are_a_no_work_scope_a_cast_stays_an_error(tmp_path):
    findings, skipped = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/config.py": """\
            from dataclasses import dataclass

            import torch


            @dataclass
            class MoETrainingConfig:
                float8_dtype: torch.dtype = torch.float8_e4m3fnuz
                scale: float = 1.0
            """,
        "pkg/tolerances.py": """\
            import torch

            TOLERANCES = {
                torch.float8_e4m3fn: {"atol": 1e-1, "rtol": 1e-1},
                torch.float8_e5m2: {"atol": 2e-1, "rtol": 2e-1},
            }
            """,
        "pkg/cast.py": """\
            import torch


            def quantize(x, scale):
                return (x / scale).to(torch.float8_e4m3fn)
            """,
    })
    for path in ("pkg/config.py", "pkg/tolerances.py"):
        assert not _fp8(findings, path), findings
        scope = _scopes(skipped, path, "no port work on an NPU host (NPU913): names FP8 dtypes only")
        assert scope, (path, skipped)
    cast = _fp8(findings, "pkg/cast.py")
    assert cast and cast[0]["severity"] == "error", cast


def test_fp8_after_a_capability_skip_in_the_test_body_is_a_scope_before_it_stays(tmp_path):
    """`if compute_capability < (9, 0): pytest.skip(...)` ahead of the FP8 line: the rest of the
    test does not run on an NPU host; an FP8 cast ahead of the skip does run there."""
    findings, skipped = _run(tmp_path, {
        "tests/test_body.py": """\
            import pytest
            import torch

            compute_capability = (0, 0)
            if torch.cuda.is_available():
                compute_capability = torch.cuda.get_device_capability()


            def test_fp8_gemm():
                if compute_capability < (9, 0):
                    pytest.skip("requires sm90+")
                a = torch.randn(8, 8, device="cuda").to(torch.float8_e4m3fn)
                assert a.shape == (8, 8)
            """,
        "tests/test_before.py": """\
            import pytest
            import torch

            compute_capability = (0, 0)
            if torch.cuda.is_available():
                compute_capability = torch.cuda.get_device_capability()


            def test_fp8_cast_first():
                a = torch.randn(8, 8, device="cuda").to(torch.float8_e4m3fn)
                if compute_capability < (9, 0):
                    pytest.skip("the rest requires sm90+")
                assert a.shape == (8, 8)
            """,
    })
    assert not _fp8(findings, "tests/test_body.py"), findings
    assert _scopes(skipped, "tests/test_body.py", "not run on an NPU host (NPU913)"), skipped
    before = _fp8(findings, "tests/test_before.py")
    assert before and before[0]["severity"] == "error" and before[0]["line"] == 10, before
