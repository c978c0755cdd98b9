"""Issue #16, round 11: FP8 dtypes used as data or metadata, not FP8 compute (NPU913, fp8data.py).

- `torch.float8_e8m0fnu.itemsize`: a size constant, a named "no port work" scope; a cast of a
  device tensor in another file stays an error;
- FP8 in a `SUPPORTED_DTYPES` union of an operator whose `SUPPORTED_DEVICES = {"cuda"}`: a dtype
  listing; an FP8 buffer the same kind of class allocates on the device stays an error;
- FP8 in a test's `parametrize` list, the tensors `device="cpu"` fed to a mock: data on the CPU;
  the same parametrize list over a test that builds its tensors on `"cuda"` stays an error;
- CPU tensors cast to FP8 as checkpoint data (no device, a `torch.Generator()`), through a helper
  of the file, in a test file that also has a CUDA test: data on the CPU; the CUDA test's cast
  stays an error;
- FP8 as the storage dtype of a `parameterized.expand` test on a CPU model: data on the CPU; a
  test method that moves its inputs `.to(torch_device)` stays an error;
- a torchao float8 class imported inside a test only for `isinstance` checks, on a CPU model that
  a project helper named for an FP8 cast converts: no FP8 compute; the same import whose class is
  built on a `.cuda()` module keeps its error.
- a helper of a test file that builds an FP8 checkpoint on the CPU for a device-free test: data
  on the CPU; the same helper for a test that takes a fixture from elsewhere (a model runner) stays.
Each fixture is written here, with a nearby true case that stays reported.
"""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, write_project

NO_WORK = "no port work on an NPU host (NPU913)"


def _run(tmp_path: Path, files: dict[str, str]) -> tuple[list[dict], list[dict]]:
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    return [f for f in report["findings"] if not f["fixable"]], report["skipped"]


def _fp8(findings: list[dict], path: str) -> list[dict]:
    return [f for f in findings if f["path"] == path and f["code"] == "NPU913"]


def _no_work(skipped: list[dict], path: str) -> list[dict]:
    return [s for s in skipped if s["path"] == path and "start_line" in s and s["reason"].startswith(NO_WORK)]


def test_fp8_itemsize_is_metadata_a_device_cast_stays(tmp_path):
    findings, skipped = _run(tmp_path, {
        "pkg/sizes.py": """\
            import torch


            def scale_bytes(use_fp4: bool, hidden: int) -> int:
                if use_fp4:
                    scale_type_size = torch.float8_e8m0fnu.itemsize
                else:
                    scale_type_size = torch.float32.itemsize
                return hidden // 32 * scale_type_size
            """,
        "pkg/quant.py": """\
            import torch


            def quantize(x: torch.Tensor) -> torch.Tensor:
                y = x.to("cuda")
                return y.to(torch.float8_e4m3fn)
            """,
    })
    assert not _fp8(findings, "pkg/sizes.py")
    scopes = _no_work(skipped, "pkg/sizes.py")
    assert scopes and "`.itemsize`" in scopes[0]["reason"]
    kept = _fp8(findings, "pkg/quant.py")
    assert kept and kept[0]["severity"] == "error"


def test_fp8_in_a_supported_dtypes_union_of_a_cuda_only_operator_is_a_listing(tmp_path):
    findings, skipped = _run(tmp_path, {
        "pkg/ops/flash.py": """\
            from typing import Set

            import torch

            try:
                import flash_attn_3_ext  # noqa: F401
                HAS_FLOAT8 = True
            except ImportError:
                HAS_FLOAT8 = False


            class FwOp:
                SUPPORTED_DEVICES: Set[str] = {"cuda"}
                SUPPORTED_DTYPES: Set[torch.dtype] = {
                    torch.half,
                    torch.bfloat16,
                } | ({torch.float8_e4m3fn} if HAS_FLOAT8 else set())
                SUPPORTED_MAX_K = 256
            """,
        "pkg/ops/buffers.py": """\
            from typing import Set

            import torch


            class FwOp:
                SUPPORTED_DEVICES: Set[str] = {"cuda"}

                def workspace(self, n: int, device: torch.device) -> torch.Tensor:
                    return torch.empty(n, dtype=torch.float8_e4m3fn, device=device)
            """,
    })
    assert not _fp8(findings, "pkg/ops/flash.py")
    scopes = _no_work(skipped, "pkg/ops/flash.py")
    assert scopes and "SUPPORTED_DTYPES" in scopes[0]["reason"] and "CUDA only" in scopes[0]["reason"]
    kept = _fp8(findings, "pkg/ops/buffers.py")
    assert kept and kept[0]["severity"] == "error"


def test_fp8_parametrized_cpu_test_fed_to_a_mock_is_data_a_cuda_test_stays(tmp_path):
    findings, skipped = _run(tmp_path, {
        "tests/test_layout.py": """\
            \"\"\"CPU tests for a wrapper's input layout.\"\"\"
            from unittest.mock import Mock

            import pytest
            import torch

            from pkg import wrapper


            @pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16])
            def test_descale_layout(monkeypatch, dtype):
                monkeypatch.setattr(torch.cuda, "get_device_capability", lambda: (10, 0))
                q = torch.empty(2, 4, 128, dtype=dtype, device="cpu")
                out = torch.empty_like(q, dtype=torch.bfloat16)
                fwd = Mock(return_value=out)
                monkeypatch.setattr(wrapper, "_fwd", fwd)
                wrapper.attention(q, q, q)
                fwd.assert_called_once()
            """,
        "tests/test_kernel.py": """\
            import pytest
            import torch

            from pkg import wrapper


            @pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16])
            def test_attention(dtype):
                q = torch.randn(2, 4, 128, device="cuda").to(dtype)
                wrapper.attention(q, q, q)
            """,
    })
    assert not _fp8(findings, "tests/test_layout.py")
    scopes = _no_work(skipped, "tests/test_layout.py")
    assert scopes and "FP8 data on the CPU" in scopes[0]["reason"] and "test_descale_layout" in scopes[0]["reason"]
    kept = _fp8(findings, "tests/test_kernel.py")
    assert kept and kept[0]["severity"] == "error"


def test_fp8_checkpoint_built_on_the_cpu_for_a_loader_is_data_the_cuda_test_stays(tmp_path):
    findings, skipped = _run(tmp_path, {
        "tests/test_loading.py": """\
            import pytest
            import torch

            from pkg.layers import Experts, fused_experts


            def _make_experts(monkeypatch, tp_size):
                monkeypatch.setattr(Experts, "select_backend", lambda **kwargs: None)
                return Experts(num_experts=2, tp_size=tp_size)


            @pytest.mark.parametrize("tp_size", [2, 4])
            def test_loader_keeps_checkpoint(monkeypatch, tp_size):
                generator = torch.Generator().manual_seed(0)
                weight = torch.randn(2, 256, 256, generator=generator).to(torch.float8_e4m3fn)
                layer = _make_experts(monkeypatch, tp_size)
                layer.load(weight)
                assert layer.weight.shape == (2, 256 // tp_size, 256)


            def test_loader_rejects_presharded(monkeypatch):
                layer = _make_experts(monkeypatch, 4)
                with pytest.raises(ValueError):
                    layer.load(torch.zeros(64, 256, dtype=torch.float8_e4m3fn))


            def test_fused_matches_reference():
                with torch.device("cuda"):
                    w = torch.randn(4, 64, 64).to(torch.float8_e4m3fn)
                    x = torch.randn(8, 64)
                    fused_experts(x, w)
            """,
    })
    kept = _fp8(findings, "tests/test_loading.py")
    assert len(kept) == 1 and kept[0]["severity"] == "error"
    places = [kept[0]["line"], *(a[0] for a in kept[0].get("also", []))]
    assert places == [29], places  # only the cast under `torch.device("cuda")`


def test_fp8_storage_dtype_of_a_cpu_model_is_data_a_device_test_stays(tmp_path):
    findings, skipped = _run(tmp_path, {
        "tests/test_hooks.py": """\
            import unittest

            import torch
            from parameterized import parameterized

            from pkg.hooks import attach_casting_hooks


            class Model(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.linear = torch.nn.Linear(3, 4)

                def forward(self, x):
                    return self.linear(x)


            class HooksTester(unittest.TestCase):
                def check_dtypes(self, model, storage_dtype):
                    for parameter in model.parameters():
                        assert parameter.dtype == storage_dtype

                @parameterized.expand([(torch.float16, torch.float32), (torch.float8_e4m3fn, torch.float32)])
                def test_layerwise_casting(self, storage_dtype, compute_dtype):
                    model = Model()
                    inputs = torch.randn(2, 3).to(compute_dtype)
                    attach_casting_hooks(model, storage_dtype=storage_dtype, compute_dtype=compute_dtype)
                    self.check_dtypes(model, storage_dtype)
                    with torch.no_grad():
                        model(inputs)
            """,
        "tests/test_hooks_device.py": """\
            import unittest

            import torch
            from parameterized import parameterized

            from pkg.hooks import attach_casting_hooks
            from pkg.testing import torch_device


            class HooksDeviceTester(unittest.TestCase):
                @parameterized.expand([(torch.float8_e4m3fn, torch.float32)])
                def test_layerwise_casting_on_device(self, storage_dtype, compute_dtype):
                    model = torch.nn.Linear(3, 4)
                    inputs = torch.randn(2, 3).to(torch_device)
                    attach_casting_hooks(model, storage_dtype=storage_dtype, compute_dtype=compute_dtype)
                    model(inputs)
            """,
    })
    assert not _fp8(findings, "tests/test_hooks.py")
    scopes = _no_work(skipped, "tests/test_hooks.py")
    assert scopes and "FP8 data on the CPU" in scopes[0]["reason"]
    kept = _fp8(findings, "tests/test_hooks_device.py")
    assert kept and kept[0]["severity"] == "error"


def test_fp8_class_imported_for_isinstance_only_is_no_compute_a_built_one_stays(tmp_path):
    findings, skipped = _run(tmp_path, {
        "tests/test_swap.py": """\
            import torch

            from pkg.ao import convert_model_to_fp8


            def test_swap_skips_first_and_last():
                from torchao.float8.float8_linear import Float8Linear

                model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
                convert_model_to_fp8(model)
                assert not isinstance(model[0], Float8Linear)
                assert isinstance(model[1], Float8Linear)
            """,
        "tests/test_build.py": """\
            import torch


            def test_build():
                from torchao.float8.float8_linear import Float8Linear

                layer = Float8Linear.from_float(torch.nn.Linear(4, 4).cuda())
                assert layer is not None
            """,
    })
    assert not _fp8(findings, "tests/test_swap.py")
    scopes = _no_work(skipped, "tests/test_swap.py")
    assert scopes and "isinstance" in scopes[0]["reason"]
    kept = _fp8(findings, "tests/test_build.py")
    assert kept and kept[0]["severity"] == "error"


def test_fp8_checkpoint_helper_of_a_cpu_test_is_data_of_a_runner_test_stays(tmp_path):
    findings, skipped = _run(tmp_path, {
        "tests/test_loader_helper.py": """\
            import torch

            from pkg.model import load_block


            def _block_fp8(rows: int, cols: int):
                weight = torch.randn(rows, cols).to(torch.float8_e4m3fn)
                return weight, torch.ones(rows // 128, cols // 128)


            def test_loader_accepts_block_scales():
                weight, scale = _block_fp8(256, 256)
                assert load_block(weight, scale).shape == (256, 256)
            """,
        "tests/test_runner.py": """\
            import torch


            def _pack_fp8(weights: dict, name: str):
                value = weights[name].float()
                weights[name] = value.to(torch.float8_e4m3fn)


            def test_checkpoint_generates(tmp_path, model_runner):
                weights = {"w": torch.randn(64, 64)}
                _pack_fp8(weights, "w")
                torch.save(weights, tmp_path / "model.pt")
                with model_runner(tmp_path) as runner:
                    assert runner.generate("hello")
            """,
    })
    assert not _fp8(findings, "tests/test_loader_helper.py")
    scopes = _no_work(skipped, "tests/test_loader_helper.py")
    assert scopes and "`_block_fp8`" in scopes[0]["reason"]
    kept = _fp8(findings, "tests/test_runner.py")  # (`model_runner`: a fixture from elsewhere)
    assert kept and kept[0]["severity"] == "error"
