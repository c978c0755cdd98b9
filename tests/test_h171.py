"""Round-33 audit GA#35 (pinned33.py): a test that pins the platform's device type to "cuda"
(`with patch(...device_type, "cuda")`, `@patch.object(...)`, `monkeypatch.setattr(...)`) and hands
the code under test a `device="cuda"`: rewriting the argument alone breaks the test on an NPU host.
Each false case is paired with its nearest true case, which is still rewritten or reported."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from npu_migrate import pinned33
from npu_migrate.cli import main

from .precision_helpers import migrate_json, write_project

CONFIG = '''import torch
from platforms import current_platform


def validate(device, role):
    if torch.device(device).type != current_platform.device_type:
        return
    if role != "producer":
        raise ValueError("also runs the language model")
'''

PINNED = '''from unittest.mock import patch

import pytest
import torch

import config
from platforms import current_platform


def test_rejected():
    with patch("platforms.current_platform.device_type", "cuda"), pytest.raises(ValueError):
        config.validate(device="cuda", role=None)


def test_rejected_unpinned():
    with pytest.raises(ValueError):
        config.validate(device="cuda", role=None)


def test_other_attribute():
    with patch("platforms.current_platform.name", "cuda"):
        config.validate(device="cuda", role="producer")


def test_cpu_platform():
    with patch("platforms.current_platform.device_type", "cpu"):
        config.validate(device="cuda", role="producer")


@patch.object(current_platform, "device_type", "cuda")
def test_decorated():
    config.validate(device="cuda", role="producer")


def test_monkeypatched(monkeypatch):
    x = torch.zeros(2, device="cuda")
    assert x.sum() == 0
    kwargs = {"device": "cuda"}
    monkeypatch.setattr(current_platform, "device_type", "cuda")
    config.validate(role=None, **kwargs)


@pytest.fixture
def cuda_platform(monkeypatch):
    monkeypatch.setattr("platforms.current_platform.device_type", "cuda")


def test_with_fixture(cuda_platform):
    config.validate(device="cuda", role="producer")


def test_without_fixture(tmp_path):
    config.validate(device="cuda", role="producer")


def _resolve(device=None):
    with patch("platforms.current_platform.device_type", "cuda"):
        config.validate(device=device, role="producer")
    return device


def test_helper():
    assert _resolve(device="cuda") == "cuda"


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ("cuda:1", "cuda"),
        (torch.device("cuda", 1), "cuda"),
        (torch.device("cuda", 1), "cpu"),
    ],
)
def test_normalizes(device, expected):
    assert torch.device(device).type == expected


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_runs(device):
    return torch.zeros(2, device=device)
'''


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """(rewritten lines, {line: open finding}, {line: scope reason}) of the test file: one run."""
    root = write_project(tmp_path_factory.mktemp("h171"), {"config.py": CONFIG, "platforms.py": "current_platform = None\n",
                                    "tests/test_config.py": PINNED})
    report = migrate_json(root)
    path = "tests/test_config.py"
    rewrites = {f["line"] for f in report["findings"] if f["path"] == path and f["fixable"]}
    left = {f["line"]: f for f in report["findings"] if f["path"] == path and not f["fixable"]}
    for f in report["findings"]:
        if f["path"] == path and not f["fixable"]:
            for line, _column, _source in f.get("also", []):
                left.setdefault(line, f)
    scopes = {}
    for s in report["skipped"]:
        if s.get("path") == path:
            for line in range(s["start_line"], s["end_line"] + 1):
                scopes[line] = s["reason"]
    return rewrites, left, scopes


def test_a_device_the_test_hands_code_under_a_cuda_pinned_platform_stays_as_written(report):
    rewrites, left, scopes = report
    # false case: inside `with patch(...device_type, "cuda")` the argument is not rewritten, and it
    # and the pin's own "cuda" are named by the scope, not open findings
    assert 12 not in rewrites and 12 not in left and pinned33.PINNED in scopes[12]
    assert 11 not in left and pinned33.PINNED in scopes[11]
    # nearest true case: the same call without the pin is rewritten
    assert 17 in rewrites and 17 not in scopes


def test_a_pin_of_no_device_attribute_or_to_no_cuda_device_rewrites_as_before(report):
    rewrites, left, scopes = report
    assert 22 in rewrites and 22 not in scopes  # patch("...name", "cuda"): not a device attribute
    assert left[21]["severity"] == "warning" and 21 not in scopes  # (its "cuda" stays an open finding)
    assert 27 in rewrites and 27 not in scopes  # a platform pinned to "cpu"


def test_a_decorator_a_monkeypatch_and_a_fixture_pin_their_test(report):
    rewrites, left, scopes = report
    assert 32 not in rewrites and pinned33.PINNED in scopes[32]  # @patch.object(...)
    # monkeypatch.setattr: the input it hands the pinned code, built before the pin, stays...
    assert 38 not in rewrites and 38 not in left and pinned33.PINNED in scopes[38]
    # ...the tensor the test places on the device (read by nothing the pin runs) is still rewritten
    assert 36 in rewrites and 36 not in scopes
    # a fixture that pins: the test taking it stays, the test that does not is rewritten
    assert 49 not in rewrites and pinned33.PINNED in scopes[49]
    assert 53 in rewrites and 53 not in scopes


def test_a_call_of_a_helper_that_pins_keeps_its_cuda_strings(report):
    rewrites, left, scopes = report
    assert 63 not in rewrites and 63 not in left and pinned33.PINNED in scopes[63]


def test_a_parameter_row_pairing_a_cuda_device_with_the_cuda_type_it_expects_stays(report):
    rewrites, left, scopes = report
    assert 69 not in left and pinned33.PAIRED in scopes[69]
    assert 70 not in rewrites and 70 not in left and pinned33.PAIRED in scopes[70]
    # nearest true cases: a row expecting no CUDA string is rewritten, a plain device list stays
    # an open finding
    assert 71 in rewrites and 71 not in scopes
    assert left[78]["severity"] == "warning" and 78 not in scopes


def test_the_migrated_pinned_test_keeps_the_device_it_hands_the_pinned_platform(tmp_path):
    root = write_project(tmp_path, {"config.py": CONFIG, "platforms.py": "current_platform = None\n",
                                    "tests/test_config.py": PINNED})
    result = CliRunner().invoke(main, ["migrate", str(root), "--no-cache", "--isolated", "--allow-dirty", "-j", "1"],
                                catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    lines = (root / "tests/test_config.py").read_text().splitlines()
    assert sum('config.validate(device="cuda", role=None)' in line for line in lines) == 1
    assert sum("device=npu_compat.device_type()" in line for line in lines) >= 3


# Round-33 audit GA#7 (optchoice29._chained_settings): LLaMA-Factory's `fp8` option, a field of a
# dataclass named `*Arguments` in a file naming no `Args` (the cheap byte test missed it), which the
# library turns on only under another FP8 option off by default.
ARGUMENTS = '''from dataclasses import dataclass, field


@dataclass
class Fp8Arguments:
    fp8: bool = field(default=False, metadata={"help": "Enable FP8 training (Hopper GPUs)."})
    fp8_all_gather: bool = field(default=False, metadata={"help": "FP8 all-gather."})
'''

PARSER = '''import torch


def check(training_args, model_args):
    if training_args.fp8_all_gather and not training_args.fp8:
        model_args.fp8 = True
'''

PARSER_UNGATED = PARSER.replace("training_args.fp8_all_gather and not training_args.fp8", "torch.cuda.is_available()")

FP8 = '''import types


def create_fp8_kwargs(training_args):
    if not training_args.fp8:
        return []
    from torchao.float8 import Float8LinearConfig

    return [Float8LinearConfig.from_recipe_name("rowwise")]


def patch_te():
    import transformer_engine.pytorch as te

    te.fp8 = types.ModuleType("fp8")
    return te
'''

TRAINER = '''from .fp8_utils import patch_te


def setup(training_args):
    if training_args.fp8:
        patch_te()
'''


def _fp8_finding(tmp_path, parser: str):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/hparams/__init__.py": "",
                                    "pkg/hparams/training_args.py": ARGUMENTS, "pkg/hparams/parser.py": parser,
                                    "pkg/train/__init__.py": "", "pkg/train/fp8_utils.py": FP8,
                                    "pkg/train/trainer.py": TRAINER})
    report = migrate_json(root)
    return next(f for f in report["findings"] if f["path"] == "pkg/train/fp8_utils.py" and f["line"] == 7)


def test_an_fp8_option_the_library_turns_on_only_under_another_opt_in_is_an_opt_in(tmp_path):
    finding = _fp8_finding(tmp_path, PARSER)
    assert finding["code"] == "NPU913" and finding["severity"] == "info"
    assert "`training_args.fp8` is chosen" in finding["message"] and "Fp8Arguments.fp8" in finding["message"]


def test_an_fp8_option_the_library_turns_on_by_itself_stays_an_error(tmp_path):
    # nearest true case: the same store under a test of no opt-in field (the library decides)
    finding = _fp8_finding(tmp_path, PARSER_UNGATED)
    assert finding["code"] == "NPU913" and finding["severity"] == "error"


NORMALIZE = '''import pytest
import torch


@pytest.mark.parametrize(("device", "expected"), [("cpu", "cpu"), (torch.device("cuda", 1), "cuda")])
def test_normalizes(device, expected):
    assert torch.device(device).type == expected


def test_places():
    return torch.zeros(2, device=torch.device("cuda", 1))
'''


def test_a_paired_row_is_read_in_a_file_that_patches_nothing(tmp_path):
    root = write_project(tmp_path, {"tests/test_norm.py": NORMALIZE})
    report = migrate_json(root)
    rewrites = {f["line"] for f in report["findings"] if f["fixable"]}
    scopes = {s["start_line"]: s["reason"] for s in report["skipped"]}
    assert 5 not in rewrites and pinned33.PAIRED in scopes[5]
    assert 11 in rewrites  # (nearest true case: the same device placing a tensor)


# Round-33 audit GA#14, in part (benchhelpers33.py): a benchmark script's function nothing calls.
BENCH = '''import torch


def to_fp8(tensor):
    finfo = torch.finfo(torch.float8_e4m3fn)
    return tensor.clamp(min=finfo.min, max=finfo.max).to(torch.float8_e4m3fn)


def to_fp8_used(tensor):
    return tensor.to(torch.float8_e4m3fn)


def bench_run(n):
    w = torch.empty((n, n), dtype=torch.float8_e4m3fn)
    return to_fp8_used(w)


if __name__ == "__main__":
    bench_run(8)
'''


def test_a_benchmark_function_nothing_calls_is_a_named_scope_its_callers_places_stay(tmp_path):
    harness = "# found by name\n" + BENCH[:BENCH.index("if __name__")]
    root = write_project(tmp_path, {"benchmarks/kernels/bench_fp8.py": BENCH, "pkg/__init__.py": "",
                                    "benchmarks/kernels/bench_harness.py": harness,
                                    "pkg/bench_utils.py": "# a library module\n" + BENCH})
    report = migrate_json(root)
    path = "benchmarks/kernels/bench_fp8.py"
    places = {}
    for f in report["findings"]:
        if f["path"] == path and not f["fixable"]:
            for line in [f["line"], *(a[0] for a in f.get("also", []))]:
                places[line] = f["severity"]
    scopes = {line: s["reason"] for s in report["skipped"] if s["path"] == path
              for line in range(s["start_line"], s["end_line"] + 1)}
    # false case: `to_fp8`, named nowhere, is a named scope
    assert 6 not in places and "nothing references" in scopes[6] and "`to_fp8`" in scopes[6]
    # nearest true cases: the function the script calls, and the script's own body, stay errors
    assert places[10] == "error" and places[14] == "error" and 10 not in scopes and 14 not in scopes
    # and the same function in a library module (an API) stays an error
    library = [f for f in report["findings"] if f["path"] == "pkg/bench_utils.py" and not f["fixable"]]
    assert library and library[0]["line"] == 7 and library[0]["severity"] == "error"
    # and in a benchmark module without a `__main__` block (a harness may call it by name)
    harness = [f for f in report["findings"] if f["path"] == "benchmarks/kernels/bench_harness.py" and not f["fixable"]]
    assert harness and harness[0]["line"] == 7 and harness[0]["severity"] == "error"
