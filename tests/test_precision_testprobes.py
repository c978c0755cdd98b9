"""Issue #16, round-11 audits: test-only device probes and CUDA values only recorded
(npu_migrate/testprobes.py). A `"cuda"` test case whose skip stays CUDA-only after the migration,
a test device list that gets `"cuda"` only behind a `torch.cuda.is_available()` kept as written,
`torch.version.cuda` stored only as a report's value, and a bitsandbytes import whose name nothing
reads become named scopes; the nearby cases an NPU host does run stay findings."""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import AS_WRITTEN_PREFIX, migrate_json, moot_lines, write_project


def _places(report: dict, path: str, code: str, severity: str | None = None) -> set[int]:
    """Lines of the report-only findings of `code` in `path` (merged places included)."""
    out = set()
    for f in report["findings"]:
        if f["path"] == path and f["code"] == code and not f["fixable"] and severity in (None, f["severity"]):
            out |= {f["line"], *(a[0] for a in f.get("also") or [])}
    return out


def _scopes(report: dict, path: str, prefix: str) -> dict[int, str]:
    return {line: s["reason"] for s in report["skipped"] if "start_line" in s and s["path"] == path
            and s["reason"].startswith(prefix) for line in range(s["start_line"], s["end_line"] + 1)}


CASES = '''\
import pytest
import torch

from myproj.platforms import current_platform


@pytest.mark.parametrize("device", ["cuda", "xpu"])
def test_skipped_off_cuda(device):
    """The CUDA case skips where CUDA is missing."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("CUDA not available")
    if device == "xpu" and not current_platform.is_xpu():
        pytest.skip("XPU not available")
    buf = torch.zeros(1, device=device)
    assert buf.sum() == 0


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param("cuda", marks=pytest.mark.skipif(not current_platform.is_cuda(), reason="CUDA only")),
    ],
)
def test_marked_case(device):
    assert torch.ones(2, device=device).sum() == 2


@pytest.mark.parametrize("device", ["cpu", "cuda:0"])
def test_runs_everywhere(device):
    assert torch.ones(2, device=device).sum() == 2


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_skipped_on_cpu_only(device):
    if device == "cpu":
        pytest.skip("not on CPU")
    assert torch.ones(2, device=device).sum() == 2
'''


def test_a_cuda_case_an_npu_host_skips_is_a_scope_and_one_it_runs_stays(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"tests/test_cases.py": CASES}))
    path = "tests/test_cases.py"
    moot = moot_lines(report["skipped"], "NPU990", path)
    # the parametrize values whose case the migrated skip still skips on an NPU host
    assert 'a "cuda" test case an NPU host skips' in moot[7]
    assert "torch.cuda.is_available()" in moot[7]
    assert 'a "cuda" test case an NPU host skips' in moot[22]
    assert "is_cuda()" in moot[22]
    warned = _places(report, path, "NPU990", "warning")
    assert not {7, 22} & warned
    # a "cuda" case that runs on an NPU host (no skip, or a skip its value does not meet) stays
    assert {29, 34} <= warned


PROBES = {
    "tests/conftest.py": '''\
import pytest
import torch

devices = ["cpu"]
if torch.cuda.is_available():
    devices += ["cuda"]
elif torch.backends.mps.is_available():
    devices += ["mps"]


@pytest.fixture(params=devices)
def device(request):
    return torch.device(request.param)
''',
    "tests/test_probe.py": '''\
import pytest
import torch

_DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
CASES = [("cpu", 512)] + ([("cuda", 4096), ("cuda", 1)] if torch.cuda.is_available() else [])
ALWAYS = ["cpu", "cuda"]


@pytest.mark.parametrize("device", _DEVICES)
def test_ones(device):
    assert torch.ones(2, device=device).sum() == 2


@pytest.mark.parametrize("device", ALWAYS)
def test_always(device):
    assert torch.ones(2, device=device).sum() == 2
''',
    "mylib/devices.py": '''\
import torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
''',
}


def test_a_test_device_list_probed_with_a_kept_check_is_a_scope_and_a_fixed_one_stays(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, PROBES))
    reason = 'a test device list that gets "cuda" only behind a CUDA check kept as written'
    conftest = _scopes(report, "tests/conftest.py", AS_WRITTEN_PREFIX)
    assert reason in conftest[5] and reason in conftest[6] and 'adding "npu" would test the NPU' in conftest[5]
    assert not _places(report, "tests/conftest.py", "NPU110")
    probe = _scopes(report, "tests/test_probe.py", AS_WRITTEN_PREFIX)
    assert reason in probe[4] and reason in probe[5]
    # a list that always holds "cuda" runs the "cuda" case on an NPU host: still a warning
    assert 6 in _places(report, "tests/test_probe.py", "NPU990", "warning")
    assert not {4, 5} & _places(report, "tests/test_probe.py", "NPU990")
    # outside tests a device list is the library's: not judged here
    assert 3 not in _scopes(report, "mylib/devices.py", AS_WRITTEN_PREFIX)
    assert _places(report, "mylib/devices.py", "NPU990") or _places(report, "mylib/devices.py", "NPU110")


REPORTS = {
    "benchmarks/bench_report.py": '''\
import json

import torch


def metadata(args):
    report = {
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "samples": args.samples,
    }
    print(json.dumps(report))
    return dict(torch=torch.__version__, cuda=torch.version.cuda)


def major():
    return int(torch.version.cuda.split(".")[0])
''',
    "benchmarks/bench_read_back.py": '''\
import torch


def check():
    info = {"cuda_version": torch.version.cuda}
    if info["cuda_version"] < "12.0":
        raise RuntimeError("too old")
''',
}


def test_a_cuda_version_only_recorded_is_a_scope_and_one_parsed_stays(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, REPORTS))
    reason = "`torch.version.cuda` stored only as a value of a record"
    recorded = _scopes(report, "benchmarks/bench_report.py", AS_WRITTEN_PREFIX)
    assert reason in recorded[9] and reason in recorded[13]
    # parsed (`.split`), or read back by its key and compared: still findings
    assert 17 in _places(report, "benchmarks/bench_report.py", "NPU990")
    assert 5 in _places(report, "benchmarks/bench_read_back.py", "NPU990")
    assert 5 not in _scopes(report, "benchmarks/bench_read_back.py", AS_WRITTEN_PREFIX)


TABLES = {
    "mylib/flops.py": '''\
import torch


def attention_ops():
    return {
        getattr(lib, op).default.name(): (getattr(lib, op), is_bwd)
        for lib, op, is_bwd in [
            (torch.ops.aten, "scaled_dot_product_attention", False),
            (torch.ops.aten, "_scaled_dot_product_flash_attention_backward", True),
        ]
        if hasattr(lib, op)
    }


def unguarded_ops():
    return [getattr(lib, op) for lib, op in [(torch.ops.aten, "_scaled_dot_product_flash_attention")]]
''',
}


def test_an_operator_name_looked_up_with_hasattr_is_a_scope_and_an_unguarded_one_stays(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, TABLES))
    scopes = _scopes(report, "mylib/flops.py", AS_WRITTEN_PREFIX)
    assert "an operator name in a table read only through `hasattr`" in scopes[9]
    assert 9 not in _places(report, "mylib/flops.py", "NPU990")
    # looked up without `hasattr`: still a finding
    assert 16 in _places(report, "mylib/flops.py", "NPU990")


MARKERS = {
    "tests/test_launcher.py": '''\
import pytest


def test_problematic_imports(launch):
    with pytest.raises(RuntimeError, match="Please keep these imports"):
        import bitsandbytes as bnb  # noqa: F401

        launch()


def test_quantize(weight):
    import bitsandbytes as bnb

    packed, state = bnb.functional.quantize_4bit(weight, quant_type="nf4")
    return bnb.functional.dequantize_4bit(packed, state)
''',
}


def test_a_bitsandbytes_import_nothing_reads_is_a_scope_and_one_used_stays(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, MARKERS))
    path = "tests/test_launcher.py"
    scopes = _scopes(report, path, "no port work on an NPU host (NPU914)")
    assert "an import of bitsandbytes whose name nothing reads" in scopes[6]
    assert _places(report, path, "NPU914") == {12}


GPU_TESTS = {
    "tests/test_gpu.py": '''\
import pytest
import torch
from accelerate.utils import is_xpu_available


def _quantized(weight):
    import bitsandbytes as bnb

    packed, state = bnb.functional.quantize_4bit(weight, quant_type="nf4")
    return bnb.functional.dequantize_4bit(packed, state)


def _int8(weight):
    import bitsandbytes as bnb

    return bnb.nn.Int8Params(weight, requires_grad=False)


@pytest.mark.skipif(not (torch.cuda.is_available() or is_xpu_available()), reason="test requires a GPU or XPU")
class TestQuantized:
    def test_nf4(self):
        weight = torch.randn(8, 8).cuda()
        assert _quantized(weight).shape == weight.shape

    def test_linear4bit(self):
        import bitsandbytes as bnb

        layer = bnb.nn.Linear4bit(8, 8)
        assert layer.weight.shape[0] > 0


def test_int8_everywhere():
    assert _int8(torch.randn(8, 8)) is not None
''',
}


def test_helpers_of_tests_skipped_unless_cuda_or_xpu_are_scopes_and_a_shared_helper_stays(tmp_path: Path) -> None:
    # `is_xpu_available()` (accelerate's) is False on an Ascend host, as `torch.xpu.is_available()`:
    # with the CUDA check kept as written, the class skips there, and so does the helper only it calls
    report = migrate_json(write_project(tmp_path, GPU_TESTS))
    path = "tests/test_gpu.py"
    moot = moot_lines(report["skipped"], "NPU914", path)
    assert "in a helper called only from tests that do not run on an NPU host" in moot[7]
    assert "is_xpu_available()" in moot[7] and 26 in moot
    # a helper a test that runs everywhere calls: still a finding
    assert _places(report, path, "NPU914") == {14}


NESTED = '''\
import pytest
import torch


@pytest.mark.parametrize("case", ["cuda", "requires_grad"])
def test_fallback(case):
    if case == "cuda":
        if not torch.cuda.is_available():
            pytest.skip("requires CUDA")
        tensor = torch.randn(4, device="cuda")
    else:
        tensor = torch.randn(8, requires_grad=True)
    assert tensor is not None


def test_plain():
    if torch.cuda.is_available():
        pytest.skip("only without CUDA")
    tensor = torch.randn(4, device="cuda")


@pytest.mark.parametrize("case", ["cuda", "cpu"])
def test_selects(case):
    if case == "cuda":
        tensor = torch.randn(4)
    assert case
'''


def test_a_case_skipped_inside_its_own_branch_is_a_scope_and_a_branch_that_runs_stays(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"tests/test_nested.py": NESTED}))
    path = "tests/test_nested.py"
    moot = moot_lines(report["skipped"], "NPU990", path)
    # the "cuda" value and the comparison that picks it out: the case skips on an NPU host
    assert 'a "cuda" test case an NPU host skips' in moot[5]
    assert "this comparison picks it out" in moot[7]
    # a "cuda" case nothing skips, and its comparison: still findings
    assert {22, 24} <= _places(report, path, "NPU990", "warning")
    assert not {5, 7} & _places(report, path, "NPU990")


BEFORE = '''\
import pytest
import torch


def test_reduce(case):
    if case == "cuda":
        if not torch.cuda.is_available():
            pytest.skip("requires CUDA")
        tensor = torch.randn(4, device="cuda")
    else:
        tensor = torch.randn(8)
    assert tensor is not None
'''


def test_a_place_after_a_kept_skip_is_not_run_and_after_a_rewritten_one_stays() -> None:
    from npu_migrate.findings import Finding
    from npu_migrate.testprobes import review

    leftover = Finding("tests/test_reduce.py", 9, 40, "NPU990", 'CUDA-only reference left unchanged: string "cuda"',
                       False, '"cuda"')
    # the check left as written (no rewrite inside it): False on an NPU host, the test skips first
    kept = review([leftover], BEFORE, "tests/test_reduce.py")
    assert kept[0].severity == "info" and "(in a test that does not run on an NPU host: " in kept[0].message
    # the check rewritten to the shim's (a fixable finding inside it): the NPU host runs the line
    rewrite = Finding("tests/test_reduce.py", 7, 16, "NPU201", "`torch.cuda.is_available`: rewritten", True,
                      "torch.cuda.is_available")
    ran = review([rewrite, leftover], BEFORE, "tests/test_reduce.py")
    assert [f.severity for f in ran if not f.fixable] == ["warning"]
