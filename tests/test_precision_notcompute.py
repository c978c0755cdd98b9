"""Precision (issue #16, round 9): findings about code that is not device compute (an FP8 dtype
used as an analytic model's key, an Inductor lowering's default, a module skipped where FP8 is
unsupported, an annotation never evaluated, a test tolerance, a DataParallel never called,
bitsandbytes in tests). Each test: the false finding is gone or lowered with its reason, and a
nearby true case is still reported."""

from __future__ import annotations

from tests.precision_helpers import migrate_json, moot_lines, write_project


def _run(tmp_path, files):
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    findings = [f for f in report["findings"] if not f["fixable"]]
    return findings, report["skipped"]


def _at(findings, path, code):
    return [f for f in findings if f["path"] == path and f["code"] == code]


def _no_work(skipped, path, code):
    return [s for s in skipped if s.get("path") == path and s.get("reason", "").startswith(f"no port work on an NPU host ({code})")]


def test_fp8_dtype_key_of_analytic_model(tmp_path):
    findings, skipped = _run(tmp_path, {
        "pkg/roofline.py": """\
            import torch


            def gemm_time(m, k, dtype):
                if dtype is torch.bfloat16:
                    return m * k
                elif dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
                    return m * k / 2
                assert False, f"unsupported {dtype}"


            def blockwise_time(m, k):
                return gemm_time(m, k, torch.float8_e4m3fn) + gemm_time(k, m, dtype=torch.float8_e4m3fn)
            """,
        "pkg/quant.py": """\
            import torch


            def quant(x, dtype):
                return x.to(dtype)


            def run(x):
                return quant(x, torch.float8_e4m3fn)
            """,
    })
    assert not [f for f in _at(findings, "pkg/roofline.py", "NPU913") if f["severity"] != "info"]
    assert _no_work(skipped, "pkg/roofline.py", "NPU913")
    # true case: the same call shape into a function that casts to the dtype
    kept = _at(findings, "pkg/quant.py", "NPU913")
    assert kept and kept[0]["severity"] == "error" and kept[0]["line"] == 9


def test_fp8_default_of_inductor_lowering(tmp_path):
    findings, skipped = _run(tmp_path, {
        "pkg/lowering.py": """\
            import torch
            from torch._inductor.ir import Pointwise
            from torch._inductor.lowering import register_lowering


            def _register():
                @register_lowering(torch.ops.mylib.quant_fp8.default, type_promotion_kind=None)
                def quantize_fp8(input, scale, float8_dtype: torch.dtype = torch.float8_e4m3fn):
                    def inner_fn(idx):
                        return idx

                    return Pointwise.create(device=input.get_device(), dtype=float8_dtype, inner_fn=inner_fn,
                                            ranges=input.get_size())
            """,
        "pkg/quant.py": """\
            import torch


            def quantize_fp8(x, float8_dtype: torch.dtype = torch.float8_e4m3fn):
                return torch.empty_like(x, dtype=float8_dtype)
            """,
    })
    assert not [f for f in _at(findings, "pkg/lowering.py", "NPU913") if f["severity"] != "info"]
    assert _no_work(skipped, "pkg/lowering.py", "NPU913")
    kept = _at(findings, "pkg/quant.py", "NPU913")
    assert kept and kept[0]["severity"] == "error"


def test_module_skipped_without_fp8_support(tmp_path):
    body = """\
            def test_graph():
                x = torch.randn(4, device="cuda").to(FP8)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    y = x * 2
            """
    findings, skipped = _run(tmp_path, {
        "tests/test_skipped.py": """\
            import pytest
            import torch

            from vllm.platforms import current_platform

            FP8 = torch.float8_e4m3fn

            pytestmark = pytest.mark.skipif(
                not current_platform.supports_fp8(),
                reason="fp8 needed",
            )


""" + body,
        "tests/test_kept.py": """\
            import torch

            FP8 = torch.float8_e4m3fn


""" + body,
    })
    assert not [f for f in findings if f["path"] == "tests/test_skipped.py" and f["severity"] != "info"]
    moot = moot_lines(skipped, "NPU202", "tests/test_skipped.py")
    assert moot and "supports_fp8()" in next(iter(moot.values()))
    assert {f["code"] for f in findings if f["path"] == "tests/test_kept.py" and f["severity"] == "error"} >= {
        "NPU202", "NPU913"}


def test_annotation_never_evaluated(tmp_path):
    findings, skipped = _run(tmp_path, {
        "pkg/mixin.py": """\
            from __future__ import annotations

            from torch.cuda.streams import ExternalStream


            class Mixin:
                def groups(self) -> tuple[int, tuple[ExternalStream, ExternalStream]]:
                    return 0, ()
            """,
        "pkg/used.py": """\
            from __future__ import annotations

            from torch.cuda.streams import ExternalStream


            def make(ptr) -> ExternalStream:
                return ExternalStream(ptr)
            """,
    })
    assert not _at(findings, "pkg/mixin.py", "NPU202")
    assert moot_lines(skipped, "NPU202", "pkg/mixin.py").get(7, "").endswith(
        "a type annotation, never evaluated: `from __future__ import annotations` or a string; "
        "the name's import is reported where it is")
    # the import of a class every torch build has, used only in annotations, runs on an NPU host:
    # a named scope (typerefs.py, round-11 audit); a use outside the annotation keeps the error
    assert not _at(findings, "pkg/mixin.py", "NPU990")
    assert any(s["path"] == "pkg/mixin.py" and s.get("start_line") == 3
               and "a torch.cuda class named only as a type" in s["reason"] for s in skipped)
    used = _at(findings, "pkg/used.py", "NPU202")
    assert used and used[0]["severity"] == "error"


def test_branch_that_only_sets_a_test_tolerance(tmp_path):
    findings, skipped = _run(tmp_path, {
        "tests/test_tol.py": """\
            import pytest
            import torch

            from mylib import qfloat8


            @pytest.mark.parametrize("weights", [1, qfloat8])
            def test_linear(weights, device):
                atol = None
                if device.type == "cuda" and weights == qfloat8:
                    # the CUDA FP8 kernel is less exact
                    atol = 1e-2
                check(weights, device, atol)


            @pytest.mark.parametrize("weights", [1, qfloat8])
            def test_feature(weights, device):
                if device.type == "cuda" and weights == qfloat8:
                    atol = 1e-2
                    run_fp8_kernel(device)
            """,
    })
    assert not [f for f in _at(findings, "tests/test_tol.py", "NPU108") if f["line"] == 10]
    assert "only sets the test tolerance `atol`" in moot_lines(skipped, "NPU108", "tests/test_tol.py")[10]
    assert [f for f in _at(findings, "tests/test_tol.py", "NPU108") if f["line"] == 18]


def test_data_parallel_built_in_a_test_never_called(tmp_path):
    findings, skipped = _run(tmp_path, {
        "tests/test_unwrap.py": """\
            import torch

            from mylib import unwrap


            def test_unwrap():
                model = torch.nn.Linear(2, 2)
                wrapped = torch.nn.DataParallel(model)
                compiled = torch.compile(wrapped)
                assert unwrap(compiled) is model


            def test_unwrap_again():
                model = torch.nn.Linear(2, 2)
                wrapped = torch.nn.DataParallel(model)
                assert unwrap(wrapped) is model
            """,
        "tests/test_forward.py": """\
            import torch


            def test_forward():
                model = torch.nn.Linear(2, 2)
                wrapped = torch.nn.DataParallel(model)
                out = wrapped(torch.ones(2, 2))
                assert out.shape == (2, 2)


            def test_forward_again():
                wrapped = torch.nn.DataParallel(torch.nn.Linear(2, 2))
                assert wrapped.forward(torch.ones(2, 2)).shape == (2, 2)
            """,
    })
    # (round 10: "nothing to port": a named scope that runs as written, not a finding)
    assert not _at(findings, "tests/test_unwrap.py", "NPU901")
    unwrap = [s for s in skipped if s.get("path") == "tests/test_unwrap.py"
              and s["reason"].startswith("runs as written on an NPU host (NPU901): ")]
    assert len(unwrap) == 1  # one per file
    assert "a DataParallel built in a test and never called" in unwrap[0]["reason"]
    assert unwrap[0]["end_line"] == 15
    forward = _at(findings, "tests/test_forward.py", "NPU901")
    assert len(forward) == 1 and forward[0]["severity"] == "error" and forward[0]["line"] == 6
    assert "also at line 12" in forward[0]["message"]


def test_bitsandbytes_round_trip_in_a_test(tmp_path):
    body = """\
        def roundtrip(weight):
            import bitsandbytes as bnb

            q, state = bnb.functional.quantize_4bit(weight, quant_type="nf4")
            return bnb.functional.dequantize_4bit(q, state)
        """
    library = body.replace("roundtrip", "quantize")  # (not a byte-identical copy: those are merged)
    findings, skipped = _run(tmp_path, {"tests/test_quant.py": body, "pkg/quant.py": library})
    test = _at(findings, "tests/test_quant.py", "NPU914")
    assert test and test[0]["severity"] == "info" and "in a test file" in test[0]["message"]
    # (round 15, AN#12: a library function that only calls bitsandbytes functions its NPU backend
    # has runs as written there: a named scope, gates16.py)
    assert not _at(findings, "pkg/quant.py", "NPU914")
    assert any(s.get("path") == "pkg/quant.py" and "functions its NPU backend provides" in s.get("reason", "")
               for s in skipped)


def test_label_guard_folded_into_the_parametrize_list(tmp_path):
    findings, _skipped = _run(tmp_path, {
        "tests/test_prof.py": """\
            import pytest
            import torch


            @pytest.mark.parametrize(
                "device_bs",
                [("cpu", 512)]
                + (
                    [
                        ("cuda", 4096),
                        ("cuda", 1),
                    ]
                    if torch.cuda.is_available()
                    else []
                ),
            )
            def test_overhead(device_bs) -> None:
                run(device_bs)
            """,
        "tests/test_devices.py": """\
            import torch

            DEVICES = ["cpu"]
            if torch.cuda.is_available():
                DEVICES.append("cuda")
            """,
    })
    # the "cuda" cases join only under the kept `torch.cuda.is_available()`: an NPU host runs the
    # CPU case alone (testprobes.py), so the list and its guard are one named scope, no finding
    prof = [f for f in findings if f["path"] == "tests/test_prof.py"]
    assert prof == [], prof
    scopes = [s for s in _skipped if s["path"] == "tests/test_prof.py"]
    assert [s["start_line"] for s in scopes] == [10, 11, 13] and all("other devices" in s["reason"] for s in scopes), _skipped
    # a guard in a statement of its own, in a test module: the same (it was reported before testprobes.py)
    assert not _at(findings, "tests/test_devices.py", "NPU110")
    assert any(s["path"] == "tests/test_devices.py" and "(NPU110)" in s["reason"] for s in _skipped), _skipped


def test_triton_finding_anchored_on_the_kernel(tmp_path):
    kernel = (
        "def launch(x):\n"
        "    import triton\n"
        "    import triton.language as tl\n"
        "\n"
        "    @triton.jit\n"
        "    def _kernel(x_ptr, n: tl.constexpr):\n"
        "        pid = tl.program_id(0)\n"
        "\n"
        "    _kernel[(1,)](x, 4)\n"
    )
    tune = ('def tune(x):\n    """Tune the kernel."""\n    import triton\n\n'
            "    return triton.testing.do_bench(lambda: x)\n\n\n")
    root = write_project(tmp_path, {"pkg/lazy.py": tune + kernel, "pkg/eager.py": "import triton\n\n\n" + kernel})
    findings = [f for f in migrate_json(root)["findings"] if not f["fixable"]]
    lazy = _at(findings, "pkg/lazy.py", "NPU910")
    assert len(lazy) == 1 and lazy[0]["severity"] == "error" and "`@triton.jit` kernel" in lazy[0]["message"]
    assert lazy[0]["line"] == 12 and "also at lines 3, 9, 10" in lazy[0]["message"]
    # a module-level import is the file's own dependency: it keeps the anchor
    eager = _at(findings, "pkg/eager.py", "NPU910")
    assert len(eager) == 1 and eager[0]["line"] == 1 and eager[0]["severity"] == "error"


def test_fp8_in_cpu_kernel_tests(tmp_path):
    findings, skipped = _run(tmp_path, {
        "tests/test_cpu_ops.py": """\
            import pytest
            import torch


            def _reference(x):
                return x.to(torch.float8_e4m3fn).to(torch.float)


            @pytest.mark.skipif(
                "CPU" not in torch._C._dispatch_dump("mylib::fp8_linear_cpu"),
                reason="cpp kernels not built",
            )
            @pytest.mark.parametrize("dtype", [torch.float, torch.float8_e4m3fn])
            def test_fp8_linear_cpu(dtype):
                x = torch.randn(4, 4)
                torch.testing.assert_close(torch.ops.mylib.fp8_linear_cpu(x, dtype), _reference(x))


            def test_scaled_cpu():
                device = "cpu"
                x = torch.randn(4, 4, device=device)
                assert x.to(torch.float8_e4m3fn).dtype == torch.float8_e4m3fn
            """,
        "tests/test_gpu_ops.py": """\
            import torch


            def _reference(x):
                return x.to(torch.float8_e4m3fn).to(torch.float)


            def test_fp8_linear():
                x = torch.randn(4, 4, device="cuda")
                torch.testing.assert_close(torch.ops.mylib.fp8_linear(x), _reference(x))
            """,
    })
    assert not _at(findings, "tests/test_cpu_ops.py", "NPU913")
    scopes = [s for s in skipped if s.get("path") == "tests/test_cpu_ops.py"
              and s.get("reason", "").startswith("runs as written on an NPU host (NPU913): FP8 on CPU tensors in a CPU test")]
    assert scopes and scopes[0]["start_line"] == 6 and scopes[0]["end_line"] == 22
    kept = _at(findings, "tests/test_gpu_ops.py", "NPU913")
    assert kept and kept[0]["severity"] == "error"
