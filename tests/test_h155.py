"""vLLM code vllm-ascend never reaches and "cuda" strings that are only labels (audit round 31;
helper h155, issue #16; ascendfacts30.py): each false shape paired with the nearest true case that
must stay reported at its severity."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project
from .precision_helpers import VLLM_PLATFORM_INTERFACE as INTERFACE

QUANT = "vllm/model_executor/layers/quantization"
REGISTRY = '''def get_quantization_config(quantization: str):
    from .fp_quant import FPQuantConfig

    method_to_config = {"fp_quant": FPQuantConfig}
    return method_to_config[quantization]
'''
# (vLLM's shared custom-op module: a QUTLASS wrapper only FPQuant calls, and one nobody in the
# library names)
CUSTOM_OPS = '''import torch

from vllm.triton_utils import tl, triton


def fusedQuantizeMx(a):
    return torch.empty(a.shape, dtype=torch.float8_e8m0fnu, device=a.device)


@triton.jit
def scaled_quantize_unused(x_ptr, n: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, n), 0)


def rms_norm(x):
    return x
'''
QUTLASS_UTILS = '''import torch

from vllm.triton_utils import tl, triton


@triton.jit
def triton_scale_swizzle(x_ptr, out_ptr, n: tl.constexpr):
    offs = tl.arange(0, n)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


@torch.library.custom_op("vllm::triton_mx_block_rearrange", mutates_args=())
def triton_mx_block_rearrange(scale_tensor: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(scale_tensor)
    triton_scale_swizzle[(1,)](scale_tensor, out, scale_tensor.numel())
    return out


@triton_mx_block_rearrange.register_fake
def _triton_mx_block_rearrange_fake(scale_tensor: torch.Tensor) -> torch.Tensor:
    return scale_tensor.new_empty(scale_tensor.shape)


def to_blocked(x, backend="triton"):
    if backend == "triton":
        return triton_mx_block_rearrange(x).flatten()
    return x.flatten()
'''
FP_QUANT = '''import torch

from vllm._custom_ops import fusedQuantizeMx
from vllm.model_executor.layers.quantization.qutlass_utils import to_blocked
from vllm.utils.torch_utils import direct_register_custom_op


def fused_quantize_mx(x):
    return fusedQuantizeMx(x)


def fused_quantize_mx_fake(x):
    return x


direct_register_custom_op(op_name="fused_quantize_mx", op_func=fused_quantize_mx, fake_impl=fused_quantize_mx_fake)


class FPQuantConfig:
    def apply(self, x, xs):
        q = torch.ops.vllm.fused_quantize_mx(x)
        return q, to_blocked(xs, backend="triton")
'''
# (a model that uses vLLM's shared ops module for something else)
MODEL = '''from vllm import _custom_ops as ops


def forward(x):
    return ops.rms_norm(x)
'''


def _project(extra: dict | None = None) -> dict:
    files = {
        "vllm/platforms/interface.py": INTERFACE,
        f"{QUANT}/__init__.py": REGISTRY,
        f"{QUANT}/fp_quant.py": FP_QUANT,
        f"{QUANT}/qutlass_utils.py": QUTLASS_UTILS,
        "vllm/_custom_ops.py": CUSTOM_OPS,
        "vllm/models/llama.py": MODEL,
    }
    files.update(extra or {})
    return files


def _findings(report: dict, path: str, code: str) -> list:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code and not f["fixable"]]


def _at(report: dict, path: str, code: str, line_text: str, files: dict) -> dict:
    line = next(n for n, text in enumerate(files[path].splitlines(), 1) if line_text in text)
    found = [f for f in _findings(report, path, code) if f["line"] == line]
    assert len(found) == 1, (path, code, line, [(f["line"], f["message"]) for f in report["findings"] if f["path"] == path])
    return found[0]


def test_qutlass_helpers_only_fpquant_names_are_info_naming_the_fact(tmp_path):
    """FA#10, FA#40: the QUTLASS helpers of shared modules (qutlass_utils.py's Triton swizzle behind
    `to_blocked(backend="triton")`, `_custom_ops.fusedQuantizeMx`'s FP8 scale dtype) are named only by
    FPQuantConfig, a method vllm-ascend's platform rejects at config time: info naming the fact. The
    custom-op registrations (`direct_register_custom_op(op_func=...)`, `@op.register_fake`) call
    nothing. A unit of the shared module no library code names (`scaled_quantize_unused`) is not
    the method's: kept as an error."""
    files = _project()
    report = migrate_json(write_project(tmp_path, files))
    kernel = _at(report, f"{QUANT}/qutlass_utils.py", "NPU910", "@triton.jit", files)
    assert kernel["severity"] == "info" and "vllm-ascend" in kernel["message"] and "fp_quant" in kernel["message"]
    fp8 = _at(report, "vllm/_custom_ops.py", "NPU913", "float8_e8m0fnu", files)
    assert fp8["severity"] == "info" and "fusedQuantizeMx" in fp8["message"]
    unused = _at(report, "vllm/_custom_ops.py", "NPU910", "@triton.jit", files)
    assert unused["severity"] == "error" and "vllm-ascend" not in unused["message"]


def test_qutlass_helper_another_module_calls_stays_an_error(tmp_path):
    """Nearest true case: a MoE method vllm-ascend keeps that calls `ops.fusedQuantizeMx` and
    `to_blocked(backend="triton")` itself reaches both on an Ascend host: kept as errors."""
    caller = '''from vllm import _custom_ops as ops
from vllm.model_executor.layers.quantization.qutlass_utils import to_blocked


def quantize(x, xs):
    return ops.fusedQuantizeMx(x), to_blocked(xs)
'''
    files = _project({"vllm/model_executor/layers/fused_moe/mxfp4_moe.py": caller})
    report = migrate_json(write_project(tmp_path, files))
    kernel = _at(report, f"{QUANT}/qutlass_utils.py", "NPU910", "@triton.jit", files)
    assert kernel["severity"] == "error" and "vllm-ascend" not in kernel["message"]
    fp8 = [f for f in _findings(report, "vllm/_custom_ops.py", "NPU913")]
    assert fp8 and all(f["severity"] == "error" for f in fp8)


def test_custom_op_called_through_torch_ops_elsewhere_stays_an_error(tmp_path):
    """Nearest true case: the swizzle custom op called as `torch.ops.vllm.triton_mx_block_rearrange`
    by a module vllm-ascend runs (no import of qutlass_utils) reaches the Triton kernel: kept."""
    caller = '''import torch


def swizzle(xs):
    return torch.ops.vllm.triton_mx_block_rearrange(xs)
'''
    files = _project({"vllm/model_executor/layers/fused_moe/swizzle.py": caller})
    report = migrate_json(write_project(tmp_path, files))
    kernel = _at(report, f"{QUANT}/qutlass_utils.py", "NPU910", "@triton.jit", files)
    assert kernel["severity"] == "error" and "vllm-ascend" not in kernel["message"]


# ------------------------------------------------------------------ FB#32: an implementation's name
BENCH = '''import argparse

import torch


def run_benchmark(num_tokens: int, implementation: str) -> float:
    if implementation not in ("cuda", "triton"):
        raise ValueError(f"Unsupported implementation: {implementation}")
    x = torch.randn(num_tokens, device="cuda")
    if implementation == "cuda":
        return float(x.sum())
    return float(x.mean())


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-tokens", type=int, default=128)
    parser.add_argument(
        "--implementation",
        type=str,
        choices=["cuda", "triton"],
        default="cuda",
    )
    args = parser.parse_args()
    print(f"implementation {args.implementation}")
    print(run_benchmark(num_tokens=args.num_tokens, implementation=args.implementation))
'''


def test_argparse_implementation_label_default_is_a_named_scope(tmp_path):
    """FB#32: `--implementation` chooses between "cuda" and "triton" (an implementation's name, not
    a device); its value is shown and handed on under its own name to a function of the file that
    only compares it with strings: the default "cuda" is a label (a named scope), not a finding."""
    report = migrate_json(write_project(tmp_path, {"bench.py": BENCH}))
    line = next(n for n, text in enumerate(BENCH.splitlines(), 1) if 'default="cuda"' in text)
    assert not [f for f in report["findings"] if f["path"] == "bench.py" and f["line"] == line]
    assert any(s["path"] == "bench.py" and s["start_line"] == line and "option's label" in s["reason"]
               for s in report["skipped"])


def test_argparse_label_whose_parameter_reaches_a_device_stays_reported(tmp_path):
    """Nearest true case: the same option handed on to a function that places a tensor on it
    (`device=implementation`): the string reaches a device on an NPU host, so the default keeps its
    finding."""
    source = BENCH.replace('x = torch.randn(num_tokens, device="cuda")', "x = torch.randn(num_tokens, device=implementation)")
    report = migrate_json(write_project(tmp_path, {"bench.py": source}))
    line = next(n for n, text in enumerate(source.splitlines(), 1) if 'default="cuda"' in text)
    assert not any(s["path"] == "bench.py" and s["start_line"] == line for s in report["skipped"])
    assert [f for f in report["findings"] if f["path"] == "bench.py" and f["line"] == line]


# ------------------------------------------------------------------ FA#17: a CUDA-only package's build script
BUILD = '''#!/usr/bin/env bash
set -ex

if [[ -z "${CUDA_VERSION}" ]]; then
    echo "CUDA_VERSION must be specified" >&2
    exit 1
fi

echo "Building the kernels for CUDA ${CUDA_VERSION}"
git clone --depth 1 https://github.com/example/kernels.git flashinfer
pushd flashinfer
    export TORCH_CUDA_ARCH_LIST="8.0 9.0a"
    python3 -m flashinfer.aot
    uv build --no-build-isolation --wheel --out-dir ../dist .
popd
'''


def _npu703(report: dict, path: str) -> list:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == "NPU703" and not f["fixable"]]


def test_build_script_of_a_cuda_only_package_that_stops_without_cuda_is_a_named_scope(tmp_path):
    """FA#17: a maintainers' script that builds FlashInfer (no NPU build) and stops at its top level
    where CUDA_VERSION is unset: its CUDA variables ask an NPU user for nothing (named scopes)."""
    report = migrate_json(write_project(tmp_path, {"tools/build-kernels.sh": BUILD}))
    assert not _npu703(report, "tools/build-kernels.sh")
    reasons = [s["reason"] for s in report["skipped"] if s["path"] == "tools/build-kernels.sh"]
    assert reasons and all("builds a CUDA-only package" in r and "`flashinfer`" in r for r in reasons)


def test_same_probe_in_a_script_building_the_project_itself_stays_reported(tmp_path):
    """Nearest true case: the same stop on CUDA_VERSION in a script that builds the project's own
    wheel (an NPU user ports that build): the CUDA variables stay reported."""
    source = BUILD.replace("git clone --depth 1 https://github.com/example/kernels.git flashinfer\n", "") \
        .replace("pushd flashinfer", "pushd csrc").replace("python3 -m flashinfer.aot", "python3 setup.py build_ext")
    report = migrate_json(write_project(tmp_path, {"tools/build-kernels.sh": source}))
    assert _npu703(report, "tools/build-kernels.sh")


def test_cuda_only_package_build_without_the_stop_stays_reported(tmp_path):
    """Nearest true case: a FlashInfer build with no stop where CUDA is absent runs on an NPU host
    and fails inside: its CUDA variables stay reported."""
    source = BUILD.replace('if [[ -z "${CUDA_VERSION}" ]]; then\n    echo "CUDA_VERSION must be specified" >&2\n'
                           '    exit 1\nfi\n', "")
    report = migrate_json(write_project(tmp_path, {"tools/build-kernels.sh": source}))
    assert _npu703(report, "tools/build-kernels.sh")


# ------------------------------------------------------------------ FC#17: a mocked build-target label
ENVS = '''import os

environment_variables = {
    "MYPKG_TARGET_DEVICE": lambda: os.getenv("MYPKG_TARGET_DEVICE", "cpu").lower(),
}


def __getattr__(name):
    return environment_variables[name]()
'''
PLATFORMS = '''from mypkg import envs


def resolve_platform():
    if envs.MYPKG_TARGET_DEVICE == "cpu":
        return "mypkg.platforms.cpu.CpuPlatform"
    if envs.MYPKG_TARGET_DEVICE in ("empty", "cuda"):
        return None
    return "mypkg.platforms.interface.UnspecifiedPlatform"
'''
TARGET_TEST = '''from unittest.mock import patch

from mypkg.platforms import resolve_platform


def test_resolves_cpu_when_plugins_fail():
    with patch("mypkg.platforms.envs.MYPKG_TARGET_DEVICE", "cuda"), patch(
            "mypkg.platforms.load_plugins", return_value={}):
        assert resolve_platform() is None
'''


def _target_project(platforms: str = PLATFORMS) -> dict:
    return {"mypkg/__init__.py": "", "mypkg/envs.py": ENVS, "mypkg/platforms/__init__.py": platforms,
            "tests/test_target.py": TARGET_TEST}


def test_patched_target_label_only_compared_is_a_named_scope(tmp_path):
    """FC#17: the test patches the build-target setting with "cuda" while the project reads that
    setting only in comparisons with strings: a label the code resolves (a named scope)."""
    report = migrate_json(write_project(tmp_path, _target_project()))
    assert not [f for f in report["findings"] if f["path"] == "tests/test_target.py" and f["code"] == "NPU990"]
    assert any(s["path"] == "tests/test_target.py" and "patches `MYPKG_TARGET_DEVICE`" in s["reason"]
               for s in report["skipped"])


def test_patched_setting_the_project_uses_as_a_device_stays_reported(tmp_path):
    """Nearest true case: the same patch where the project places a tensor on the setting's value
    (`torch.device(envs.MYPKG_TARGET_DEVICE)`): the patched string reaches a device, kept."""
    platforms = PLATFORMS + '''

def scratch():
    import torch

    return torch.zeros(1, device=torch.device(envs.MYPKG_TARGET_DEVICE))
'''
    report = migrate_json(write_project(tmp_path, _target_project(platforms)))
    kept = [f for f in report["findings"] if f["path"] == "tests/test_target.py" and f["code"] == "NPU990"]
    assert kept and all(f["severity"] != "info" for f in kept)
