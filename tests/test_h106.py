"""Rewrites instead of NPU990 warnings where a "cuda" value provably reaches a device or a process
group (issue #16, round 24 BO#14, BO#17, BO#21; helper h106: npu_migrate/devflows24.py). Each
rewrite is paired with the nearest case that keeps its warning (a use the file does not prove)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from npu_migrate import devflows24
from npu_migrate.cli import main
from npu_migrate.shim import dist_backend, device_arg, device_str, device_type

from .precision_helpers import migrate_json, write_project

# ----------------------------------------------------------------------------- `--device` through a function
EVAL = '''\
import argparse

import torch


def run_evaluation(repo_id, limit, device, precision):
    print(f"Evaluating {repo_id} on {device}")
    model = torch.nn.Linear(4, 4)
    model.to(device=device)
    return evaluate(model, limit, precision)


def evaluate(model, limit, precision):
    return model


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo-id", type=str, default="org/model")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--device", type=str, default="cuda", help="Device to use")
    parser.add_argument("--precision", type=str, default="bf16")
    args = parser.parse_args()
    run_evaluation(args.repo_id, args.limit, args.device, args.precision)
'''
DEVICE_LINE = 21

# the value is handed on twice: by position to one function, which passes it on by keyword
NESTED = '''\
import argparse

import torch


def benchmark(model, device="cpu"):
    return model(torch.ones(2, 4).to(device))


def compare_models(model_id, device):
    model = torch.nn.Linear(4, 4).to(device)
    return benchmark(model, device=device)


def create_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=str, default="org/model")
    parser.add_argument(
        "--device",
        type=str,
        default="cuda",
        help="Device to run on",
    )
    return parser


if __name__ == "__main__":
    args = create_parser().parse_args()
    compare_models(args.model, args.device)
'''

# the whole namespace handed to `main(cfg)` under another name
NAMESPACE = '''\
import argparse

import torch


def main(cfg):
    device = cfg.device
    model = torch.nn.Linear(4, 4).to(device)
    return model


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda:0")
    main(parser.parse_args())
'''
NAMESPACE_BOUND = NAMESPACE.replace("    main(parser.parse_args())", "    opts = parser.parse_args()\n    main(opts)")


def _codes(report, path):
    return {(f["line"], f["code"]) for f in report["findings"] if f["path"] == path}


def _report(tmp_path, text, name="pkg/run.py"):
    return migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", name: text}))


def test_device_default_passed_by_position_to_a_function_is_converted(tmp_path):
    codes = _codes(_report(tmp_path, EVAL), "pkg/run.py")
    assert (DEVICE_LINE, "NPU603") in codes and (DEVICE_LINE, "NPU990") not in codes, codes


def test_device_default_handed_on_twice_is_converted(tmp_path):
    codes = _codes(_report(tmp_path, NESTED), "pkg/run.py")
    assert (21, "NPU603") in codes and (21, "NPU990") not in codes, codes


def test_namespace_handed_to_main_under_another_name_is_converted(tmp_path):
    codes = _codes(_report(tmp_path, NAMESPACE_BOUND), "pkg/run.py")
    assert (14, "NPU603") in codes and (14, "NPU990") not in codes, codes


# the nearest true cases: a use the file does not prove keeps the NPU990 warning
def test_device_compared_with_cuda_in_the_callee_stays(tmp_path):
    text = EVAL.replace('    print(f"Evaluating {repo_id} on {device}")',
                        '    if device == "cuda":\n        torch.cuda.synchronize()')
    codes = _codes(_report(tmp_path, text), "pkg/run.py")
    line = DEVICE_LINE + 1
    assert (line, "NPU990") in codes and (line, "NPU603") not in codes, codes


def test_device_tested_for_none_is_converted(tmp_path):
    text = EVAL.replace('    print(f"Evaluating {repo_id} on {device}")',
                        '    if device is None:\n        raise ValueError("no device")')
    codes = _codes(_report(tmp_path, text), "pkg/run.py")
    line = DEVICE_LINE + 1
    assert (line, "NPU603") in codes and (line, "NPU990") not in codes, codes


def test_device_used_as_a_dict_key_stays(tmp_path):
    text = EVAL.replace('    print(f"Evaluating {repo_id} on {device}")',
                        '    tolerance = {"cuda": 1e-3, "cpu": 1e-5}[device]')
    codes = _codes(_report(tmp_path, text), "pkg/run.py")
    assert (DEVICE_LINE, "NPU990") in codes and (DEVICE_LINE, "NPU603") not in codes, codes


def test_device_passed_only_to_a_call_outside_the_file_stays(tmp_path):
    # the flow is not proven: no device position of the file takes the value
    text = EVAL.replace("    model.to(device=device)\n", "    external.place(model, device)\n")
    codes = _codes(_report(tmp_path, text), "pkg/run.py")
    assert (DEVICE_LINE, "NPU990") in codes and (DEVICE_LINE, "NPU603") not in codes, codes


def test_device_passed_to_a_call_outside_the_file_besides_a_device_position_is_converted(tmp_path):
    text = EVAL.replace("    return evaluate(model, limit, precision)",
                        "    return external.evaluate(model, limit, device)")
    codes = _codes(_report(tmp_path, text), "pkg/run.py")
    assert (DEVICE_LINE, "NPU603") in codes and (DEVICE_LINE, "NPU990") not in codes, codes


def test_direct_read_compared_elsewhere_stays(tmp_path):
    # singles23's direct flow (`device=args.device`) with a comparison of the same option
    text = EVAL.replace("    run_evaluation(args.repo_id, args.limit, args.device, args.precision)",
                        "    x = torch.zeros(2, device=args.device)\n"
                        "    if args.device.startswith(\"cuda\"):\n        torch.cuda.synchronize()")
    codes = _codes(_report(tmp_path, text), "pkg/run.py")
    assert (DEVICE_LINE, "NPU990") in codes and (DEVICE_LINE, "NPU603") not in codes, codes


def test_namespace_handed_only_outside_the_file_stays(tmp_path):
    text = NAMESPACE_BOUND.replace("    main(opts)", "    external.main(opts)")
    codes = _codes(_report(tmp_path, text), "pkg/run.py")
    assert (14, "NPU990") in codes and (14, "NPU603") not in codes, codes


def test_namespace_callee_comparing_the_option_stays(tmp_path):
    text = NAMESPACE_BOUND.replace("    return model", '    if cfg.device.startswith("cuda"):\n'
                                   "        torch.cuda.synchronize()\n    return model")
    codes = _codes(_report(tmp_path, text), "pkg/run.py")
    assert (16, "NPU990") in codes and (16, "NPU603") not in codes, codes


def test_option_flows_needs_a_device_position():
    text = EVAL.replace("    model.to(device=device)\n", "")
    assert devflows24.option_flows(EVAL, "device", frozenset({"device"}))
    assert not devflows24.option_flows(text, "device", frozenset({"device"}))  # (only printed)


# ----------------------------------------------------------------------------- device_map
PRETRAINED = '''\
import torch
from transformers import AutoModelForCausalLM, pipeline


def load(model_id, dtype):
    kwargs = dict(device_map="cuda:0", dtype=dtype)
    model = AutoModelForCausalLM.from_pretrained(model_id, **kwargs)
    other = AutoModelForCausalLM.from_pretrained(model_id, device_map="cuda")
    pipe = pipeline("text-generation", model=model_id, device_map="cuda")
    auto = AutoModelForCausalLM.from_pretrained(model_id, device_map="auto")
    return model, other, pipe, auto


def dispatch(model):
    return accelerate.dispatch_model(model, device_map="cuda")
'''


def test_device_map_string_is_a_device_position(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/load.py": PRETRAINED})
    report = migrate_json(root)
    codes = _codes(report, "pkg/load.py")
    for line in (6, 8, 9):
        assert (line, "NPU102") in codes and (line, "NPU990") not in codes, (line, codes)
    # the nearest true case: the keyword of another call (a map or a strategy there) keeps the warning
    assert (15, "NPU990") in codes and (15, "NPU102") not in codes, codes
    assert not [c for c in codes if c[0] == 10], codes  # ("auto" is no CUDA reference)


def test_device_map_rewrite_text_and_check_is_clean(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/load.py": PRETRAINED})
    result = CliRunner().invoke(main, ["migrate", str(root), "--no-cache", "--isolated", "--allow-dirty",
                                       "-j", "1", "--output-format", "json"], catch_exceptions=False)
    assert not json.loads(result.stdout)["errors"]
    text = (root / "pkg/load.py").read_text()
    assert "kwargs = dict(device_map=npu_compat.device_str(0), dtype=dtype)" in text
    assert 'from_pretrained(model_id, device_map="auto")' in text
    checked = _check(root)
    assert not [f for f in checked if f["path"].endswith("pkg/load.py") and f["line"] in (6, 8, 9, 10)], checked
    # on a CUDA or CPU host (no torch_npu here) the shim gives the original values back
    assert (device_str(0), device_type()) == ("cuda:0", "cuda")


# ----------------------------------------------------------------------------- `--backend` "nccl"
DIST = '''\
import argparse

import torch
import torch.distributed as dist


def setup(args):
    dist.init_process_group(backend=args.dist_backend)
    torch.cuda.set_device(args.local_rank)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local-rank", type=int, default=0)
    parser.add_argument("--dist-backend", type=str, default="nccl", help="process group backend")
    args = parser.parse_args()
    setup(args)


if __name__ == "__main__":
    main()
'''
BACKEND_LINE = 15


def _check(root):
    result = CliRunner().invoke(main, ["check", str(root), "--no-cache", "--isolated", "--output-format", "json"],
                                catch_exceptions=False)
    return json.loads(result.stdout)["findings"]


def test_backend_default_that_reaches_init_process_group_is_converted(tmp_path):
    report = _report(tmp_path, DIST)
    found = {(f["line"], f["code"]): f for f in report["findings"] if f["path"] == "pkg/run.py"}
    assert (BACKEND_LINE, "NPU603") in found and (BACKEND_LINE, "NPU990") not in found, found
    assert "npu_compat.dist_backend" in found[(BACKEND_LINE, "NPU603")]["message"]
    # the backend read is the converted option's value: information, naming the option
    assert found[(8, "NPU304")]["severity"] == "info", found[(8, "NPU304")]
    assert f"`--dist-backend` (line {BACKEND_LINE})" in found[(8, "NPU304")]["message"]


def test_backend_default_rewrite_text_rerun_and_check(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/run.py": DIST})
    for _ in range(2):
        result = CliRunner().invoke(main, ["migrate", str(root), "--no-cache", "--isolated", "--allow-dirty",
                                           "-j", "1", "--output-format", "json"], catch_exceptions=False)
        assert not json.loads(result.stdout)["errors"]
        text = (root / "pkg/run.py").read_text()
        assert ('parser.add_argument("--dist-backend", type=npu_compat.dist_backend, default="nccl", '
                'help="process group backend")') in text, text
    second = [f for f in json.loads(result.stdout)["findings"] if f["path"] == "pkg/run.py"]
    assert not [f for f in second if f["fixable"]], second
    checked = [f for f in _check(root) if f["path"].endswith("pkg/run.py")]
    assert not [f for f in checked if f["severity"] != "info"], checked
    # the converter on a CUDA or CPU host: the value as given
    assert (dist_backend("nccl"), dist_backend("gloo"), device_arg("cuda:1")) == ("nccl", "gloo", "cuda:1")


def test_backend_compared_with_nccl_stays(tmp_path):
    text = DIST.replace("    setup(args)", '    setup(args)\n    if args.dist_backend == "nccl":\n'
                                          '        torch.cuda.synchronize()')
    codes = _codes(_report(tmp_path, text), "pkg/run.py")
    assert (BACKEND_LINE, "NPU990") in codes and (BACKEND_LINE, "NPU603") not in codes, codes
    report = _report(tmp_path / "b", text)
    npu304 = [f for f in report["findings"] if f["path"] == "pkg/run.py" and f["code"] == "NPU304"]
    assert npu304 and npu304[0]["severity"] == "warning", npu304


def test_backend_option_returned_unparsed_stays(tmp_path):
    # a parser returned for others to parse: the file shows no flow
    text = '''\
import argparse


def get_default_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", type=str, default="nccl", help="backend for distributed communication")
    return parser
'''
    codes = _codes(_report(tmp_path, text), "pkg/run.py")
    assert (6, "NPU990") in codes and (6, "NPU603") not in codes, codes
