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
