"""Code only an opt-in command-line flag or choice reaches (audit round 31 FA#2, FA#26; helper h152,
issue #16, policy P1): each false shape paired with the nearest true case that stays reported at its
severity."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

# (FA#2: a benchmark's profiler helper called only under its config's default-off flag)
COMMON = '''import dataclasses

import torch


@dataclasses.dataclass
class BenchConfig:
    batch: int
    ncu_profile: bool = False
    torch_profile: bool = False


def run_ncu_profile(fn) -> None:
    fn()
    torch.cuda.cudart().cudaProfilerStart()
    fn()
    torch.cuda.cudart().cudaProfilerStop()
'''
RUNNER = '''import torch

from common import BenchConfig, run_ncu_profile


def run(config: BenchConfig, fn):
    if config.ncu_profile:
        run_ncu_profile(fn)
        return 0.0
    if config.torch_profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
            fn()
    else:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
            fn()
    return 1.0
'''
MAIN = '''import argparse

from common import BenchConfig
from runner import run


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--ncu-profile", action="store_true", default=False)
    parser.add_argument("--torch-profile", action="store_true")
    args = parser.parse_args()
    config = BenchConfig(batch=args.batch, ncu_profile=args.ncu_profile, torch_profile=args.torch_profile)
    run(config, lambda: None)


if __name__ == "__main__":
    main()
'''
# (FA#26: a kernel's bench function built only when the user picks the FP8 choice of `--act-type`)
MACHETE = '''import argparse
import dataclasses

import torch


@dataclasses.dataclass
class Types:
    act_type: torch.dtype


def fp16_bench_fn(w):
    return lambda: w.half()


def w4a8_bench_fn(w):
    scales = w.to(torch.float8_e4m3fn)
    return lambda: scales


def bench(types: Types, group_size: int, w):
    fns = [fp16_bench_fn(w)]
    if types.act_type == torch.float8_e4m3fn and group_size == 128:
        fns.append(w4a8_bench_fn(w))
    return fns


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--act-type", required=True, choices=["bfloat16", "float16", "float8_e4m3fn"])
    parser.add_argument("--group-size", type=int, default=128)
    args = parser.parse_args()
    bench(Types(act_type=getattr(torch, args.act_type)), args.group_size, torch.ones(4))


if __name__ == "__main__":
    main()
'''


def _findings(report: dict, path: str, code: str) -> dict:
    return {f["line"]: f for f in report["findings"] if f["path"] == path and f["code"] == code and not f["fixable"]}


def _profile_project(tmp_path, main: str = MAIN, runner: str = RUNNER):
    return migrate_json(write_project(tmp_path, {
        "benchmarks/attn/common.py": COMMON, "benchmarks/attn/runner.py": runner,
        "benchmarks/attn/benchmark.py": main}))


def test_profiler_helper_called_only_under_a_default_off_flag_is_info(tmp_path):
    report = _profile_project(tmp_path)
    cudart = _findings(report, "benchmarks/attn/common.py", "NPU202")
    assert cudart and all(f["severity"] == "info" for f in cudart.values()), cudart
    message = next(iter(cudart.values()))["message"]
    assert "reached on an NPU host only when `--ncu-profile` is chosen" in message, message
    assert "benchmarks/attn/benchmark.py:10" in message and "`run_ncu_profile` is called only under it" in message
    profile = _findings(report, "benchmarks/attn/runner.py", "NPU935")
    # (the place under `if config.torch_profile:` is the user's choice; the `else:` branch runs by default)
    assert profile[11]["severity"] == "info" and "`--torch-profile` is chosen" in profile[11]["message"], profile
    assert profile[14]["severity"] != "info", profile


def test_profiler_helper_also_called_ungated_stays_an_error(tmp_path):
    runner = RUNNER.replace("    return 1.0\n", "    run_ncu_profile(fn)\n    return 1.0\n")
    cudart = _findings(_profile_project(tmp_path, runner=runner), "benchmarks/attn/common.py", "NPU202")
    assert cudart and all(f["severity"] == "error" for f in cudart.values()), cudart


def test_flag_on_by_default_stays_an_error(tmp_path):
    main = MAIN.replace('"--ncu-profile", action="store_true", default=False', '"--ncu-profile", action="store_true"') \
        .replace("    args = parser.parse_args()\n", "    parser.set_defaults(ncu_profile=True)\n    args = parser.parse_args()\n")
    cudart = _findings(_profile_project(tmp_path, main=main), "benchmarks/attn/common.py", "NPU202")
    assert cudart and all(f["severity"] == "error" for f in cudart.values()), cudart


def test_flag_the_benchmark_computes_stays_an_error(tmp_path):
    main = MAIN.replace("ncu_profile=args.ncu_profile", "ncu_profile=args.ncu_profile or args.batch > 1")
    cudart = _findings(_profile_project(tmp_path, main=main), "benchmarks/attn/common.py", "NPU202")
    assert cudart and all(f["severity"] == "error" for f in cudart.values()), cudart


def test_fp8_bench_fn_built_only_for_the_fp8_choice_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, {"benchmarks/kernels/benchmark_machete.py": MACHETE}))
    fp8 = _findings(report, "benchmarks/kernels/benchmark_machete.py", "NPU913")
    assert fp8 and all(f["severity"] == "info" for f in fp8.values()), fp8
    message = next(iter(fp8.values()))["message"]
    assert "only when `--act-type float8_e4m3fn` is chosen" in message and "`w4a8_bench_fn`" in message, message


def test_fp8_choice_that_is_the_default_stays_an_error(tmp_path):
    machete = MACHETE.replace('"--act-type", required=True,', '"--act-type", default="float8_e4m3fn",')
    report = migrate_json(write_project(tmp_path, {"benchmarks/kernels/benchmark_machete.py": machete}))
    fp8 = _findings(report, "benchmarks/kernels/benchmark_machete.py", "NPU913")
    assert fp8 and all(f["severity"] == "error" for f in fp8.values()), fp8


def test_fp8_choice_under_an_or_stays_an_error(tmp_path):
    machete = MACHETE.replace("if types.act_type == torch.float8_e4m3fn and group_size == 128:",
                              "if types.act_type == torch.float8_e4m3fn or group_size == 128:")
    report = migrate_json(write_project(tmp_path, {"benchmarks/kernels/benchmark_machete.py": machete}))
    fp8 = _findings(report, "benchmarks/kernels/benchmark_machete.py", "NPU913")
    assert fp8 and all(f["severity"] == "error" for f in fp8.values()), fp8


def test_library_module_is_not_read_as_a_benchmark(tmp_path):
    # (the same helper in library code: testcallers27's and optchoice29's business, not this pass's)
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/common.py": COMMON,
        "pkg/runner.py": RUNNER.replace("from common import", "from pkg.common import"),
        "pkg/cli.py": MAIN.replace("from common import", "from pkg.common import")
        .replace("from runner import", "from pkg.runner import")}))
    cudart = _findings(report, "pkg/common.py", "NPU202")
    assert cudart and all("`--ncu-profile` is chosen" not in f["message"] for f in cudart.values()), cudart


# (FB#3: ColossalAI's ring attention, reached only under a sequence-parallel mode the library never stores)
SHARD_CONFIG = '''from dataclasses import dataclass


@dataclass
class ShardConfig:
    enable_sequence_parallelism: bool = False
    sequence_parallelism_mode: str = None

    def __post_init__(self):
        if self.enable_sequence_parallelism:
            self.sequence_parallelism_mode = (
                "split_gather" if self.sequence_parallelism_mode is None else self.sequence_parallelism_mode
            )
        else:
            self.sequence_parallelism_mode = None
'''
PLUGIN = '''from pkg.shard_config import ShardConfig


class Plugin:
    def __init__(self, sequence_parallelism_mode: str = None):
        self.sequence_parallelism_mode = (
            sequence_parallelism_mode if sequence_parallelism_mode is not None else "all_to_all"
        )
        self.shard_config = ShardConfig(
            enable_sequence_parallelism=True, sequence_parallelism_mode=self.sequence_parallelism_mode
        )
'''
ATTN = '''import torch

_pad_input = None


def _load_varlen_helpers():
    global _pad_input
    if _pad_input is None:
        try:
            from flash_attn.bert_padding import pad_input

            _pad_input = pad_input
        except ImportError as e:
            raise RuntimeError("Flash Attention is not installed") from e


class RingAttention(torch.autograd.Function):
    @staticmethod
    def attention(q, k, v):
        _load_varlen_helpers()
        return RingAttention.apply(q, k, v)

    @staticmethod
    def forward(ctx, q, k, v):
        import flash_attn

        if flash_attn.__version__ > "2.6.3":
            q = q * 2
        return _pad_input(q, k, v)
'''
MODELING = '''import torch

from pkg.attn import RingAttention


def forward(shard_config, q, k, v):
    sp_mode = shard_config.sequence_parallelism_mode
    if sp_mode == "ring_attn":
        return RingAttention.attention(q, k, v)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)
'''


def _ring_project(tmp_path, plugin: str = PLUGIN, modeling: str = MODELING):
    return migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/shard_config.py": SHARD_CONFIG, "pkg/plugin.py": plugin,
        "pkg/attn.py": ATTN, "pkg/modeling.py": modeling}))


def test_ring_attention_under_a_mode_only_the_user_names_is_info(tmp_path):
    flash = _findings(_ring_project(tmp_path), "pkg/attn.py", "NPU502")
    assert flash and all(f["severity"] == "info" for f in flash.values()), flash
    message = next(iter(flash.values()))["message"]
    assert "only when `sp_mode == 'ring_attn'` is chosen (`ShardConfig.sequence_parallelism_mode` defaults to `None`" \
        in message and "'all_to_all', 'split_gather'" in message, message


def test_ring_attention_under_a_mode_the_library_picks_stays_an_error(tmp_path):
    plugin = PLUGIN.replace('else "all_to_all"', 'else "ring_attn"')
    flash = _findings(_ring_project(tmp_path, plugin=plugin), "pkg/attn.py", "NPU502")
    assert flash and all(f["severity"] == "error" for f in flash.values()), flash


def test_ring_attention_under_a_computed_mode_stays_an_error(tmp_path):
    plugin = PLUGIN.replace('else "all_to_all"', 'else pick_mode()')
    flash = _findings(_ring_project(tmp_path, plugin=plugin), "pkg/attn.py", "NPU502")
    assert flash and all(f["severity"] == "error" for f in flash.values()), flash


def test_ring_attention_under_a_not_equal_test_stays_an_error(tmp_path):
    modeling = MODELING.replace('if sp_mode == "ring_attn":', 'if sp_mode != "all_to_all":')
    flash = _findings(_ring_project(tmp_path, modeling=modeling), "pkg/attn.py", "NPU502")
    assert flash and all(f["severity"] == "error" for f in flash.values()), flash


FACTORY = '''import torch

from pkg.attn import RingAttention


def get_forward(shard_config, sp_mode=None):
    def forward(q, k, v):
        if sp_mode == "ring_attn":
            return RingAttention.attention(q, k, v)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    return forward
'''
POLICY = '''from pkg.modeling import get_forward


class Policy:
    def __init__(self, shard_config):
        self.shard_config = shard_config

    def module_policy(self):
        sp_mode = self.shard_config.sequence_parallelism_mode or None
        return {"forward": get_forward(self.shard_config, sp_mode)}
'''
RING_POLICY = POLICY + '''

def ring_forward(shard_config):
    return get_forward(shard_config, "ring_attn")
'''


def _factory_project(tmp_path, policy: str = POLICY):
    return migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/shard_config.py": SHARD_CONFIG, "pkg/plugin.py": PLUGIN,
        "pkg/attn.py": ATTN, "pkg/modeling.py": FACTORY, "pkg/policy.py": policy}))


def test_ring_attention_under_a_parameter_every_call_passes_the_mode_is_info(tmp_path):
    # (ColossalAI's `get_llama_flash_attention_forward(self.shard_config, sp_mode, ...)`)
    flash = _findings(_factory_project(tmp_path), "pkg/attn.py", "NPU502")
    assert flash and all(f["severity"] == "info" for f in flash.values()), flash
    assert "`sp_mode == 'ring_attn'` is chosen" in next(iter(flash.values()))["message"]


def test_ring_attention_under_a_parameter_one_call_sets_stays_an_error(tmp_path):
    flash = _findings(_factory_project(tmp_path, policy=RING_POLICY), "pkg/attn.py", "NPU502")
    assert flash and all(f["severity"] == "error" for f in flash.values()), flash
