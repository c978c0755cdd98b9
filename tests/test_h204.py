"""Round-34 audit rows IA#11 .. ID#28 (issue #16, helper h204): labels, settings with no effect and
claims wrong on their face. Each false case beside the nearest true case (same shape, reached on an
NPU host) that stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project


def _open(report: dict, path: str, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code and not f["fixable"]]


# ----------------------------------------------------------------------------- IA#11 (singlepins34.py)
_RUN_SH = """\
#!/bin/bash
rm -rf local_storage/

SCRIPT_DIR=$(dirname "$(readlink -f "$0")")

VLLM_ENABLE_V1_MULTIPROCESSING=0 CUDA_VISIBLE_DEVICES=0 python3 "$SCRIPT_DIR/prefill_example.py"
VLLM_ENABLE_V1_MULTIPROCESSING=0 CUDA_VISIBLE_DEVICES=0 python3 "$SCRIPT_DIR/decode_example.py"
"""

_EXAMPLE = """\
import torch


def main():
    x = torch.ones(4, device="cuda")
    print(x.sum())


if __name__ == "__main__":
    main()
"""


def test_device_zero_pins_of_runs_beside_the_script_have_no_effect(tmp_path):
    """IA#11: the pinned commands run `"$SCRIPT_DIR/x.py"`, the script's own folder: one-device
    examples in the foreground, device 0 either way (a named scope)."""
    files = {"examples/conn/run.sh": _RUN_SH, "examples/conn/prefill_example.py": _EXAMPLE,
             "examples/conn/decode_example.py": _EXAMPLE}
    report = migrate_json(write_project(tmp_path, files))
    assert not [f for f in _open(report, "examples/conn/run.sh", "NPU701") if f["severity"] != "info"]
    assert any("a pin to device 0 of single-device runs" in s["reason"]
               for s in report["skipped"] if s["path"] == "examples/conn/run.sh")


def test_device_zero_pins_of_runs_in_a_folder_not_the_scripts_stay(tmp_path):
    """Nearest true case: the same lines, but the variable is a folder the script does not name as
    its own (set from an argument): what runs is not known, the warning stays."""
    files = {"examples/conn/run.sh": _RUN_SH.replace('$(dirname "$(readlink -f "$0")")', '"$1"'),
             "examples/conn/prefill_example.py": _EXAMPLE, "examples/conn/decode_example.py": _EXAMPLE}
    report = migrate_json(write_project(tmp_path, files))
    kept = _open(report, "examples/conn/run.sh", "NPU701")
    assert kept and kept[0]["severity"] == "warning"


def test_pins_beside_the_script_of_a_multi_device_run_stay(tmp_path):
    """Nearest true case: the script's own folder, but one run spreads over several devices."""
    many = _EXAMPLE.replace("def main():", "def main(tensor_parallel_size=2):")
    files = {"examples/conn/run.sh": _RUN_SH, "examples/conn/prefill_example.py": many,
             "examples/conn/decode_example.py": _EXAMPLE}
    report = migrate_json(write_project(tmp_path, files))
    kept = _open(report, "examples/conn/run.sh", "NPU701")
    assert kept and kept[0]["severity"] == "warning"


# ----------------------------------------------------------------------------- IC#16 (families/diagnostics.py)
_FP64_TEST = """\
import torch


def test_converting_transfer():
    torch.zeros(4, dtype=torch.float64).pin_memory().to(
        "cuda", dtype=torch.float32, non_blocking=True
    )
"""


def test_float64_cast_in_its_transfer_is_a_conversion_source(tmp_path):
    """IC#16: float64 made on the CPU and converted to float32 by the `.to("cuda", dtype=...)` that
    moves it: the accelerator computes nothing in float64 (a named scope, no port work)."""
    report = migrate_json(write_project(tmp_path, {"tests/test_sync.py": _FP64_TEST}))
    assert not _open(report, "tests/test_sync.py", "NPU930")
    assert any("NPU930" in s["reason"] and "converted to `torch.float32` in the transfer" in s["reason"]
               for s in report["skipped"] if s["path"] == "tests/test_sync.py")


def test_float64_moved_as_float64_stays(tmp_path):
    """Nearest true cases: the same chain moved without a cast, cast to float64, or made float64
    again after the transfer, and float64 made on the accelerator then cast: warnings."""
    variants = {
        "plain": _FP64_TEST.replace("dtype=torch.float32, ", ""),
        "double": _FP64_TEST.replace("dtype=torch.float32", "dtype=torch.float64"),
        "after": _FP64_TEST.replace("non_blocking=True\n    )", "non_blocking=True\n    ).double()"),
        "made_there": _FP64_TEST.replace("torch.zeros(4, dtype=torch.float64).pin_memory().to(\n        \"cuda\",",
                                         "torch.zeros(4, dtype=torch.float64, device=\"cuda\").to("),
    }
    for name, text in variants.items():
        report = migrate_json(write_project(tmp_path / name, {"tests/test_sync.py": text}))
        kept = _open(report, "tests/test_sync.py", "NPU930")
        assert kept and kept[0]["severity"] == "warning", (name, text)


# ----------------------------------------------------------------------------- IB#7 (labels34.py)
_TITLES = """\
import re


def fix_case(text: str) -> str:
    subs = {
        "api": "API",
        "cli": "CLI",
        "llm": "LLM",
        "nccl": "NCCL",
        "lora": "LoRA",
        r"fp\\d+": lambda x: x.group(0).upper(),
    }
    for pattern, repl in subs.items():
        text = re.sub(rf"\\b{pattern}\\b", repl, text, flags=re.IGNORECASE)
    return text
"""

# the same shape of table, but each backend's environment prefix: backends only
_PREFIXES = """\
import os


def debug_flag(backend):
    prefixes = {
        "nccl": "NCCL",
        "gloo": "GLOO",
        "mpi": "MPI",
    }
    return os.environ.get(prefixes[backend] + "_DEBUG")
"""


def _string_findings(report: dict, path: str) -> list[dict]:
    return [f for f in _open(report, path, "NPU990") if f["severity"] != "info"]


def test_nccl_in_a_table_of_display_spellings_is_a_label(tmp_path):
    """IB#7: "nccl" is a key of a table that title-cases words for a docs generator: a named
    no-work scope."""
    report = migrate_json(write_project(tmp_path, {"docs/gen.py": _TITLES}))
    assert not _string_findings(report, "docs/gen.py")
    assert any("a word in a table of display spellings" in s["reason"]
               for s in report["skipped"] if s["path"] == "docs/gen.py")


def test_nccl_in_a_table_of_backends_stays(tmp_path):
    """Nearest true case: the same table shape whose keys are all backends (each backend's
    environment prefix): "nccl" selects a backend's setting, kept."""
    report = migrate_json(write_project(tmp_path, {"kit/flags.py": _PREFIXES}))
    assert not any("display spellings" in s["reason"] for s in report["skipped"])
    assert [f for f in report["findings"] if f["path"] == "kit/flags.py" and '"nccl"' in f["message"]]


# ----------------------------------------------------------------------------- ID#28 (labels34.py)
_PROFILE = """\
def run(args, config, run_once):
    if args.profile:
        if config.profiler == "torch":
            print(f"Profiling with torch profiler (saved to {config.torch_dir})...")
        elif config.profiler == "cuda":
            print("Profiling with cuda profiler ...")
        elif config.profiler == "proton":
            print("Profiling with Proton ...")
        run_once(do_profile=True)
"""


def test_profiler_name_that_only_picks_a_message_is_a_label(tmp_path):
    """ID#28: `profiler == "cuda"` in a chain whose every branch only prints: a named no-work
    scope."""
    report = migrate_json(write_project(tmp_path, {"bench/latency.py": _PROFILE}))
    assert not [f for f in _open(report, "bench/latency.py", "NPU990") if '"cuda"' in f["message"]]
    assert any("a choice that only picks the message shown" in s["reason"]
               for s in report["skipped"] if s["path"] == "bench/latency.py")


def test_profiler_name_whose_branch_does_work_stays(tmp_path):
    """Nearest true case: the same chain, but the "cuda" branch starts the profiler: kept."""
    text = _PROFILE.replace('print("Profiling with cuda profiler ...")', 'start_cuda_profiler(config)')
    report = migrate_json(write_project(tmp_path, {"bench/latency.py": text}))
    assert not any("message shown" in s["reason"] for s in report["skipped"])
    assert [f for f in report["findings"] if f["path"] == "bench/latency.py" and '"cuda"' in f["message"]]
