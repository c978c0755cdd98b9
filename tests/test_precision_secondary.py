"""Precision (issue #16, round 10): secondary findings that restate what the file shows (a backend
parameter passed through, a Triton helper whose importer fails first, a DataParallel only wrapped
and unwrapped) and wrong messages on true findings (a MAGMA linear-algebra choice raises on an NPU
host; a dequantizing helper casts from FP8). Each test: the false finding is gone or lowered with
its reason, and a nearby true case is still reported."""

from __future__ import annotations

from tests.precision_helpers import migrate_json, write_project


def _run(tmp_path, files):
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    findings = [f for f in report["findings"] if not f["fixable"]]
    return findings, report["skipped"], report


def _at(findings, path, code):
    return [f for f in findings if f["path"] == path and f["code"] == code]


def _as_written(skipped, path, code):
    return {line: s["reason"] for s in skipped if s.get("path") == path
            and s.get("reason", "").startswith(f"runs as written on an NPU host ({code}): ")
            for line in range(s["start_line"], s["end_line"] + 1)}


def test_backend_parameter_passed_through_with_none_defaults(tmp_path):
    findings, skipped, _ = _run(tmp_path, {
        "pkg/mesh.py": """\
            from typing import Optional

            import torch.distributed as dist


            class Mesh:
                def _get_group(self, ranks, backend: Optional[str] = None):
                    return dist.new_group(ranks, backend=backend)

                def create_group(self, axis, backend: Optional[str] = None):
                    return self._get_group([axis], backend=backend)

                def get_group(self, axis, backend: Optional[str] = None):
                    return self.create_group(axis, backend=backend)


            def init_from(cfg, backend):
                dist.init_process_group(backend=backend)


            def main(cfg):
                init_from(cfg, cfg.backend)
            """,
    })
    # every value of `backend` along the chain is None (the default backend, HCCL on an NPU host)
    assert 8 in _as_written(skipped, "pkg/mesh.py", "NPU304")
    assert "a backend parameter whose every value is seen" in _as_written(skipped, "pkg/mesh.py", "NPU304")[8]
    # a caller passes a configuration value: still a warning
    kept = _at(findings, "pkg/mesh.py", "NPU304")
    assert [(f["line"], f["severity"]) for f in kept] == [(18, "warning")]


def test_backend_parameter_from_a_rewritten_default_through_a_process(tmp_path):
    findings, skipped, report = _run(tmp_path, {
        "pkg/testing.py": """\
            import torch
            import torch.distributed as dist
            import torch.multiprocessing as mp


            def run_distributed_test(func, world_size=2, backend="nccl"):
                ctx = mp.get_context("spawn")
                for rank in range(world_size):
                    ctx.Process(target=_worker, args=(rank, world_size, backend, func)).start()


            def _worker(rank, world_size, backend, func):
                dist.init_process_group(backend=backend, world_size=world_size, rank=rank)
                func(rank)


            def _other_worker(rank, backend, func):
                dist.init_process_group(backend=backend, rank=rank)


            def launch_other(func, opts):
                mp.Process(target=_other_worker, args=(0, opts.backend, func)).start()
            """,
    })
    assert 13 in _as_written(skipped, "pkg/testing.py", "NPU304")
    # the literal default itself is rewritten where it is written
    assert any(f["path"] == "pkg/testing.py" and f["line"] == 6 for f in report["findings"] if f["fixable"])
    # a worker started with a backend from options keeps its warning
    assert [(f["line"], f["severity"]) for f in _at(findings, "pkg/testing.py", "NPU304")] == [(18, "warning")]


def test_backend_parameter_assigned_anew_or_given_reported_literals_stays(tmp_path):
    findings, skipped, _ = _run(tmp_path, {
        "pkg/launch.py": """\
            import torch.distributed as dist


            def launch(accelerator, backend: str = "nccl"):
                backend = accelerator.communication_backend
                dist.init_process_group(backend=backend)
            """,
        "pkg/groups.py": """\
            import torch.distributed as dist


            class Groups:
                def get(self, ranks, backend: str = "nccl"):
                    return dist.new_group(ranks=ranks, backend=backend)


            GROUPS = Groups()


            def tp_group(ranks):
                return GROUPS.get(ranks, "nccl")
            """,
    })
    # the parameter is assigned anew before the call: not the value the callers pass
    assert [(f["line"], f["severity"]) for f in _at(findings, "pkg/launch.py", "NPU304")] == [(6, "warning")]
    assert not _as_written(skipped, "pkg/launch.py", "NPU304")
    # a literal passed by a call and reported there stays named by the parameter's finding (an error
    # since round 22, BK#17: "nccl" reaches the process group unchanged, singles22.review_folded)
    groups = _at(findings, "pkg/groups.py", "NPU304")
    assert groups and groups[0]["severity"] == "error" and groups[0]["line"] == 6
    assert not _as_written(skipped, "pkg/groups.py", "NPU304")


def test_triton_helper_whose_importer_fails_first_is_a_named_scope(tmp_path):
    findings, skipped, _ = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/vararg.py": """\
            import ast

            import triton


            def unroll(fn):
                return ast.parse(fn)
            """,
        "pkg/splitk.py": """\
            import triton
            import triton.language as tl

            from pkg.vararg import unroll


            @triton.jit
            def kernel(x_ptr):
                tl.store(x_ptr, tl.load(x_ptr))
            """,
    })
    assert not _at(findings, "pkg/vararg.py", "NPU910")
    assert any(s["path"] == "pkg/vararg.py" and "importer's own unguarded Triton import fails first" in s["reason"]
               for s in skipped)
    # the importer's kernels stay an error
    assert [f["severity"] for f in _at(findings, "pkg/splitk.py", "NPU910")] == ["error"]


def test_magma_linalg_choice_raises_and_cublas_is_ignored(tmp_path):
    findings, _skipped, _ = _run(tmp_path, {
        "pkg/magma.py": """\
            import torch


            def solve(a, b):
                torch.backends.cuda.preferred_linalg_library(backend="magma")
                return torch.linalg.solve(a, b)
            """,
        "pkg/blas.py": """\
            import torch


            def setup():
                torch.backends.cuda.preferred_blas_library("cublas")
            """,
    })
    magma = _at(findings, "pkg/magma.py", "NPU405")
    assert len(magma) == 1 and magma[0]["severity"] == "error"
    assert "raises on an NPU host" in magma[0]["message"] and "ignores it" not in magma[0]["message"]
    blas = _at(findings, "pkg/blas.py", "NPU405")
    assert len(blas) == 1 and blas[0]["severity"] == "warning" and "ignores it" in blas[0]["message"]


def test_dequantize_helper_is_a_cast_from_fp8(tmp_path):
    findings, _skipped, _ = _run(tmp_path, {
        "pkg/deq.py": """\
            import torch

            from pkg.prims import _dequantize_affine_float8


            class Config:
                float8_dtype: torch.dtype = torch.float8_e4m3fn


            def dequantize(qdata, scale, output_dtype):
                return _dequantize_affine_float8(qdata, scale, output_dtype)
            """,
        "pkg/q.py": """\
            import torch

            from pkg.prims import _quantize_affine_float8


            class Config:
                float8_dtype: torch.dtype = torch.float8_e4m3fn


            def quantize(x, scale):
                return _quantize_affine_float8(x, scale, Config.float8_dtype)
            """,
    })
    deq = [f for f in _at(findings, "pkg/deq.py", "NPU913") if f["severity"] == "error"]
    assert deq and "a cast from FP8" in deq[0]["message"] and "a cast to FP8" not in deq[0]["message"]
    q = [f for f in _at(findings, "pkg/q.py", "NPU913") if f["severity"] == "error"]
    assert q and "a cast to FP8" in q[0]["message"]


def test_worker_of_a_test_with_a_custom_package_feature_skip_marker(tmp_path):
    findings, skipped, _ = _run(tmp_path, {
        "tests/test_alltoall.py": """\
            import pytest
            import torch

            from mylib.utils import has_flashinfer_nvlink_one_sided, has_fast_links

            requires_one_sided = pytest.mark.skipif(
                not has_flashinfer_nvlink_one_sided(), reason="FlashInfer NVLink one-sided not available"
            )
            requires_links = pytest.mark.skipif(not has_fast_links(), reason="no fast links")


            def _worker(rank):
                graph = torch.cuda.CUDAGraph()
                return graph


            def _other_worker(rank):
                graph = torch.cuda.CUDAGraph()
                return graph


            @requires_one_sided
            def test_one_sided():
                _worker(0)


            @requires_links
            def test_links():
                _other_worker(0)
            """,
    })
    # the marker skips the test where flashinfer is missing (an NPU host): its worker is a named scope
    assert not [f for f in _at(findings, "tests/test_alltoall.py", "NPU202") if f["line"] == 13]
    assert any(s["path"] == "tests/test_alltoall.py" and s["start_line"] <= 13 <= s["end_line"]
               and s["reason"].startswith("not run on an NPU host (NPU202)") for s in skipped)
    # a marker from the project's own probe (not a missing package's) keeps the worker's finding
    assert [f["severity"] for f in _at(findings, "tests/test_alltoall.py", "NPU202") if f["line"] == 18] == ["error"]


def test_finding_after_a_call_whose_cuda_build_fails_first(tmp_path):
    findings, _skipped, _ = _run(tmp_path, {
        "pkg/pool.py": """\
            import torch
            import torch.utils.cpp_extension

            _pool = None
            SOURCE = "int f() { return 0; }"


            def get_pool():
                global _pool
                if _pool is None:
                    torch.utils.cpp_extension.load_inline(
                        name="alloc", cpp_sources=SOURCE, with_cuda=True, extra_ldflags=["-lnccl"])
                    _pool = object()
                return _pool


            class Context:
                def __init__(self):
                    self.capturing_before = torch.cuda.is_current_stream_capturing()
                    self.pool = get_pool()
                    self.capturing = torch.cuda.is_current_stream_capturing()
            """,
    })
    build = _at(findings, "pkg/pool.py", "NPU911")
    assert len(build) == 1 and build[0]["line"] == 11
    assert [p[0] for p in build[0]["also"]] == [21]
    assert "reached only after a call of a function whose CUDA build" in build[0]["message"]
    # the same check before the call is reached on an NPU host: still its own error
    assert [(f["line"], f["severity"]) for f in _at(findings, "pkg/pool.py", "NPU202")] == [(19, "error")]


def test_fp8_scale_dtype_in_a_class_computing_with_a_reported_cuda_package(tmp_path):
    findings, _skipped, _ = _run(tmp_path, {
        "pkg/quant.py": """\
            import torch

            try:
                from nunchaku.ops.gemm import svdq_gemm_w4a4_cuda
            except ImportError:
                svdq_gemm_w4a4_cuda = None


            class SVDQMethod:
                def create_weights(self, n, precision):
                    scale_dtype = torch.float8_e4m3fn if precision == "nvfp4" else torch.bfloat16
                    return torch.empty(n, dtype=scale_dtype)

                def apply(self, x, w):
                    return svdq_gemm_w4a4_cuda(x, w)


            class PlainFP8Method:
                def apply(self, x, scale):
                    return (x / scale).to(torch.float8_e4m3fn)


            class Runner:
                def setup(self, fp8):
                    self.kv_cache_dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16

                def tune(self):
                    from flashinfer.autotuner import autotune
                    autotune()
            """,
    })
    package = _at(findings, "pkg/quant.py", "NPU911")
    assert len(package) == 1 and 11 in [p[0] for p in package[0].get("also", [])]
    assert "in a class that computes with this CUDA-only package's ops" in package[0]["message"]
    # FP8 compute in a class of its own stays an FP8 error
    fp8 = _at(findings, "pkg/quant.py", "NPU913")
    assert fp8[0]["line"] == 20 and fp8[0]["severity"] == "error"
    # a class that imports a CUDA package lazily in one method computes with more than it: its FP8 stays
    assert 25 in [p[0] for p in fp8[0].get("also", [])] or any(f["line"] == 25 for f in fp8)


def test_backend_parameter_whose_callers_are_in_another_file(tmp_path):
    findings, skipped, _ = _run(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/context.py": """\
            import torch.distributed as dist


            class Context:
                def init_global_dist(self, rank, world_size, backend, host, port):
                    dist.init_process_group(rank=rank, world_size=world_size, backend=backend)

                def init_sub_groups(self, ranks, sub_backend):
                    return dist.new_group(ranks, backend=sub_backend)


            gpc = Context()
            """,
        "pkg/initialize.py": """\
            from pkg.context import gpc


            def launch(config, rank, world_size, host, port, backend="nccl"):
                gpc.init_global_dist(rank, world_size, backend, host, port)


            def launch_from_torch(config, backend="nccl"):
                launch(config, 0, 1, "localhost", 29500, backend=backend)


            def groups(cfg):
                return gpc.init_sub_groups([0, 1], cfg.sub_backend)
            """,
    })
    lowered = _as_written(skipped, "pkg/context.py", "NPU304")
    assert 6 in lowered and "pkg/initialize.py" in lowered[6]
    # a caller elsewhere that passes a configuration value keeps the warning
    assert [(f["line"], f["severity"]) for f in _at(findings, "pkg/context.py", "NPU304")] == [(9, "warning")]


def test_fp8_parameter_default_every_call_overrides_is_reported_at_the_calls(tmp_path):
    findings, _skipped, _ = _run(tmp_path, {
        "pkg/mla.py": """\
            import torch

            from pkg.platform import fp8_dtype


            def per_batched_quant(x, dtype: torch.dtype = torch.float8_e4m3fn):
                scale = torch.finfo(dtype).max / x.abs().max()
                return (x * scale).to(dtype), scale


            def process(w_k, w_v):
                k, ks = per_batched_quant(w_k, dtype=fp8_dtype())
                v, vs = per_batched_quant(w_v, fp8_dtype())
                return k, ks, v, vs
            """,
        "pkg/other.py": """\
            import torch


            def quant(x, dtype=torch.float8_e4m3fn):
                return x.to(dtype)


            def run(x):
                return quant(x)
            """,
        "pkg/mixed.py": """\
            import torch


            def cast(x, scale):
                return (x / scale).to(torch.float8_e5m2)


            def quant(x, dtype=torch.float8_e4m3fn):
                return x.to(dtype)


            def run(x):
                return quant(x, torch.float8_e5m2)
            """,
    })
    mla = _at(findings, "pkg/mla.py", "NPU913")
    assert len(mla) == 1 and mla[0]["line"] == 12 and mla[0]["severity"] == "error"
    assert [p[0] for p in mla[0]["also"]] == [13]
    assert "default of `dtype` is never used" in mla[0]["message"] and "per_batched_quant(" in mla[0]["message"]
    # a call that leaves the default: the FP8 default stays where it is written
    other = _at(findings, "pkg/other.py", "NPU913")
    assert other and other[0]["severity"] == "error" and 4 in [other[0]["line"], *(p[0] for p in other[0].get("also", []))]
    # a file with FP8 compute of its own keeps one finding: the moved place joins it
    mixed = _at(findings, "pkg/mixed.py", "NPU913")
    assert len(mixed) == 1 and mixed[0]["line"] == 5 and 13 in [p[0] for p in mixed[0]["also"]]
