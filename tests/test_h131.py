"""Round 28's opt-in, label, CI and repeat rows (audit CA, CB, CC; helper h131, issue #16): each
false or redundant shape paired with the nearest true case that must stay reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project
from .precision_helpers import finding_places as _places


# ----------------------------------------------------------------------------- CA#40, CC#29: config opt-in
RECIPE = '''import torch


class Recipe:
    def __init__(self, cfg):
        self._device = torch.device(cfg.device)
        self._is_rank_zero = True
        self.profile_memory = False
        self.trace_always = cfg.get("trace_always", True)
        self.trace_set = cfg.get("trace_set", False)

    def setup_profiler(self, profiler_cfg):
        self.profile_memory = profiler_cfg.get("profile_memory", False)

    def train(self, step):
        if (
            self._is_rank_zero
            and self.profile_memory
            and self._device.type == "cuda"
        ):
            torch.cuda.memory._record_memory_history()
        if self._is_rank_zero and self.profile_memory and step == 3:
            torch.cuda.memory._record_memory_history(enabled=None)
        if self._is_rank_zero and step == 3:
            torch.cuda.memory._record_memory_history(enabled=None)
        if self.trace_always:
            torch.cuda.memory._record_memory_history(enabled=None)
        if self.trace_set:
            torch.cuda.memory._record_memory_history(enabled=None)
        if self._device.type == "cuda" and self.profile_memory:
            torch.cuda.memory._dump_snapshot("x.pickle")


def main(recipe):
    recipe.trace_set = True
'''


def test_config_option_with_false_default_is_info(tmp_path):
    """CA#40, CC#29 (P1): code behind `self.profile_memory`, bound only to `cfg.get("profile_memory",
    False)` or False in its class, runs on an NPU host only once the user turns the option on:
    info naming the option and the line that reads it; the nearest true cases (the same call with
    no option operand, a True default, an attribute set from outside the class, a device check
    evaluated before the option) keep their severity."""
    report = migrate_json(write_project(tmp_path, {"recipe.py": RECIPE}))
    checks = _places(report, "recipe.py", "NPU110")
    calls = _places(report, "recipe.py", "NPU202")
    assert checks[19]["severity"] == "info" and "`profile_memory`" in checks[19]["message"]
    assert "(line 13)" in checks[19]["message"]
    assert calls[23]["severity"] == "info" and "config option `profile_memory`" in calls[23]["message"]
    assert calls[25]["severity"] == "error"  # no option operand
    assert calls[27]["severity"] == "error"  # default True
    assert calls[29]["severity"] == "error"  # also set from outside the class
    assert checks[30]["severity"] != "info"  # the device check runs before the option is read


# ----------------------------------------------------------------------------- CA#5: FP8 buffer of a kernel
KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def _quant_kernel(x_ptr, y_ptr, n, fp8_min, fp8_max, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.clamp(x, fp8_min, fp8_max), mask=offs < n)


def quant_triton(x):
    fp8_dtype = torch.float8_e4m3fn
    y = torch.empty(x.shape, dtype=fp8_dtype, device=x.device)
    info = torch.finfo(fp8_dtype)
    _quant_kernel[(1,)](x, y, x.numel(), info.min, info.max, BLOCK=128)
    return y


def quant_and_cast(x):
    fp8_dtype = torch.float8_e5m2
    y = torch.empty(x.shape, dtype=fp8_dtype, device=x.device)
    _quant_kernel[(1,)](x, y, x.numel(), -57344.0, 57344.0, BLOCK=128)
    return y, x.to(fp8_dtype)
'''


def test_fp8_dtype_name_that_only_types_a_kernel_buffer_folds(tmp_path):
    """CA#5: `fp8_dtype = torch.float8_e4m3fn` read only as the `dtype=` of the buffer a same-file
    Triton kernel fills (and by `torch.finfo`) goes with the kernel's NPU910; the nearest true case,
    the same name also used for a cast of its own, stays an FP8 compute error."""
    report = migrate_json(write_project(tmp_path, {"quant.py": KERNEL}))
    fp8 = _places(report, "quant.py", "NPU913")
    triton = _places(report, "quant.py", "NPU910")
    assert 14 not in fp8 and 14 in triton  # folded into the kernel's finding
    assert fp8[22]["severity"] == "error"  # the name also feeds a cast outside the kernel


# ----------------------------------------------------------------------------- CA#6, CC#3: CI pipeline notes
PIPELINE = '''env:
  CUDA_ARCH_X86: "8.0 9.0 12.0"

steps:
  - label: "Build wheel - x86_64 - CUDA 13.0"
    agents:
      queue: cpu_queue_release
    commands:
      - "docker build --build-arg CUDA_VERSION=13.0.2 --build-arg torch_cuda_arch_list=${CUDA_ARCH_X86} --build-arg BUILD_BASE_IMAGE=pytorch/manylinux2_28-builder:cuda13.0 -f docker/Dockerfile ."
'''

ASCEND_TOO = PIPELINE + '''  - label: "Build wheel - Ascend NPU"
    commands:
      - "docker build -f docker/Dockerfile.npu ."
'''


def _notes(report: dict, path: str) -> dict[int, dict]:
    return {f["line"]: f for f in report["findings"] if f["path"] == path and f["code"] == "NPU703"
            and f.get("severity") != "skipped"}


def test_ci_pipeline_building_cuda_wheels_is_tooling(tmp_path):
    """CA#6, CC#3: the NPU703 notes of a CI pipeline under `.buildkite/` whose steps build from a CUDA
    builder image are NVIDIA build tooling an NPU host never runs (a named scope); the nearest true
    cases, the same pipeline when it builds an Ascend image too and the same YAML in the package's
    own folder, keep their notes."""
    report = migrate_json(write_project(tmp_path, {
        ".buildkite/release-pipeline.yaml": PIPELINE, ".buildkite/ascend-pipeline.yaml": ASCEND_TOO,
        "deploy/pipeline.yaml": PIPELINE + "# deployed with the package\n"}))
    assert not _notes(report, ".buildkite/release-pipeline.yaml")
    assert any(s["path"] == ".buildkite/release-pipeline.yaml" and "NVIDIA build tooling" in s["reason"]
               and "CUDA image" in s["reason"] for s in report["skipped"])
    assert 2 in _notes(report, ".buildkite/ascend-pipeline.yaml")
    assert 2 in _notes(report, "deploy/pipeline.yaml")


# ----------------------------------------------------------------------------- CC#27: an AMD recipe section
RECIPE_YAML = '''meta:
  title: "Model"
  hardware:
    mi355x: verified
    b300: verified
strategy_overrides:
  pd_cluster:
    prefill:
      hardware_overrides:
        mi355x:
          extra_env:
            CUDA_VISIBLE_DEVICES: "0,1,2,3"
            VLLM_KV_CACHE_LAYOUT: "BLHNC"
    decode:
      extra_env:
        CUDA_VISIBLE_DEVICES: "4,5,6,7"
'''


def test_recipe_section_keyed_by_an_amd_model_is_another_platforms(tmp_path):
    """CC#27: `CUDA_VISIBLE_DEVICES` under `hardware_overrides: mi355x:` (the model name's own `x`
    is no `8x` count) is another platform's configuration (a named scope); the nearest true case,
    the same variable in the strategy's own `extra_env`, stays reported."""
    report = migrate_json(write_project(tmp_path, {"recipes/model.yaml": RECIPE_YAML}))
    places = _places(report, "recipes/model.yaml", "NPU701")
    assert 12 not in places
    assert any(s["path"] == "recipes/model.yaml" and "hardware_overrides.mi355x" in s["reason"]
               for s in report["skipped"])
    assert 16 in places and places[16]["severity"] != "info"


# ----------------------------------------------------------------------------- CC#23: a conditional expression's gate
KV_UTILS = '''import torch


def is_cuda():
    return torch.version.cuda is not None


_is_cuda = is_cuda()


def enable_fused_kv(batch):
    """Only on CUDA with a bf16 KV cache."""
    return _is_cuda and batch.dtype == torch.bfloat16


def create_fused_kv_arg(value, batch):
    from sgl_kernel import FusedSetKVBufferArg

    return FusedSetKVBufferArg(value=value, loc=batch.loc)


def create_plain_kv_arg(value, batch):
    from sgl_kernel import PlainKVBufferArg

    return PlainKVBufferArg(value=value, loc=batch.loc)
'''

KV_MODEL = '''from pkg.utils import create_fused_kv_arg, create_plain_kv_arg, enable_fused_kv


class Attention:
    def forward(self, q, k, v, batch):
        arg = create_fused_kv_arg(value=v, batch=batch) if enable_fused_kv(batch) else None
        plain = create_plain_kv_arg(value=v, batch=batch) if batch.plain else None
        return self.rotary(q, k, fused=arg, plain=plain)
'''


def test_helper_called_only_in_a_false_conditional_expression_is_not_run(tmp_path):
    """CC#23: a lazy CUDA-only import in a helper every call of which is the true branch of `x if
    enable_fused_kv(batch) else None`, the predicate `_is_cuda and ...` (false on an NPU host), is
    code an NPU host never runs (a named scope naming the gate); the nearest true case, the same
    helper shape under a test the tool cannot decide (`batch.plain`), stays an error."""
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/utils.py": KV_UTILS, "pkg/model.py": KV_MODEL}))
    imports = _places(report, "pkg/utils.py", "NPU911")
    assert 17 not in imports or imports[17]["severity"] == "info"
    assert any(s["path"] == "pkg/utils.py" and s["start_line"] <= 17 <= s["end_line"]
               and "enable_fused_kv(batch)" in s["reason"] for s in report["skipped"])
    assert imports[23]["severity"] == "error"


# ----------------------------------------------------------------------------- CA#10: a parsed identifier
IDENTITY = '''import ast
from pathlib import Path


def cuda_runtime(version_path: Path) -> str:
    syntax = ast.parse(version_path.read_text())
    for statement in syntax.body:
        target = statement.targets[0] if isinstance(statement, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id == "cuda":
            return str(ast.literal_eval(statement.value) or "")
    return ""


def runtime_kind(spec) -> str:
    if spec.id == "cuda":
        return "gpu"
    return "other"
'''


def test_string_compared_with_a_parsed_identifier_is_a_label(tmp_path):
    """CA#10: `isinstance(target, ast.Name) and target.id == "cuda"` looks a name up in parsed
    source (a named scope "a label the code resolves"); the nearest true case, the same comparison
    with no `isinstance(..., ast.X)` test (`spec.id == "cuda"`), stays reported."""
    report = migrate_json(write_project(tmp_path, {"identity.py": IDENTITY}))
    labels = _places(report, "identity.py", "NPU990")
    assert 9 not in labels
    assert any(s["path"] == "identity.py" and s["start_line"] <= 9 <= s["end_line"]
               and "identifier of parsed Python source" in s["reason"] for s in report["skipped"])
    assert 15 in labels


# ----------------------------------------------------------------------------- CB#36: FP8 inside a CUDA-only op
CUSTOM_OP = '''import torch


@torch.library.custom_op("mylib::fused_linear", mutates_args={"out"}, device_types="cuda")
def _fused_linear(x: torch.Tensor, w: torch.Tensor, scale_x: torch.Tensor, out: torch.Tensor) -> None:
    if scale_x is not None:
        torch._scaled_mm(x, w.t(), out_dtype=out.dtype, scale_a=scale_x, scale_b=scale_x, out=out)
    else:
        torch.matmul(x, w.t(), out=out)


@torch.library.custom_op("mylib::fused_linear_any", mutates_args={"out"}, device_types=("cuda", "cpu"))
def _fused_linear_any(x: torch.Tensor, w: torch.Tensor, scale_x: torch.Tensor, out: torch.Tensor) -> None:
    torch._scaled_mm(x, w.t(), out_dtype=out.dtype, scale_a=scale_x, scale_b=scale_x, out=out)


def quantized_linear(x, w, scale):
    return torch._scaled_mm(x, w.t(), out_dtype=torch.bfloat16, scale_a=scale, scale_b=scale)
'''


def test_fp8_in_the_body_of_a_cuda_only_custom_op_folds_into_its_registration(tmp_path):
    """CB#36: `torch._scaled_mm` in the body of a custom op registered with `device_types="cuda"`
    never runs on an NPU host (a call with NPU tensors raises at dispatch): it folds into the
    op's NPU990 note, which names it; the nearest true cases, an op registered for the CPU too and a
    plain function of the file, keep their FP8 errors."""
    report = migrate_json(write_project(tmp_path, {"ops.py": CUSTOM_OP}))
    fp8 = _places(report, "ops.py", "NPU913")
    notes = _places(report, "ops.py", "NPU990")
    assert 7 not in fp8 and 7 in notes and "`torch._scaled_mm` inside this CUDA-only custom op" in notes[7]["message"]
    assert fp8[14]["severity"] == "error" and fp8[18]["severity"] == "error"
