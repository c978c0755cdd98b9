"""Precision wave 31, helper h154 (issue #16): gates and harmless uses a reviewer sees in the
finding's own file (round-31 audit rows FB#24, FA#28, ...). Each false case is paired with its
nearest true case, which stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project


def _hits(report: dict, path: str, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code]


def _moot(report: dict, path: str) -> dict[int, str]:
    return {s["start_line"]: s["reason"] for s in report["skipped"] if s.get("path") == path}


# ------------------------------------------------------------- FB#24: a capability bound to a name, then a raise
BOUND_CAPABILITY = '''import torch


def capture(fn):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def main():
    world_size = 2
    capability = torch.cuda.get_device_capability(torch.device("cuda", 0))
    if world_size not in (2, 4, 8) or capability not in ((10, 0), (10, 3)):
        raise RuntimeError("This benchmark targets SM100/SM103")
    capture(lambda: None)


if __name__ == "__main__":
    main()
'''

# nearest true case: the same raise fires only on capable hardware, so an NPU host goes on to capture
RAISE_ON_CAPABLE = BOUND_CAPABILITY.replace("capability not in ((10, 0), (10, 3))", "capability in ((10, 0), (10, 3))")
# and a name bound twice is no longer the capability's alone
REBOUND = BOUND_CAPABILITY.replace("    if world_size", "    capability = (10, 0) if world_size > 4 else capability\n    if world_size")


def test_raise_on_a_capability_bound_to_a_name_keeps_the_capture_off_the_npu_and_a_raise_on_capable_hardware_stays(tmp_path):
    root = write_project(tmp_path, {"benchmarks/bench_gated.py": BOUND_CAPABILITY,
                                    "benchmarks/bench_capable.py": RAISE_ON_CAPABLE,
                                    "benchmarks/bench_rebound.py": REBOUND})
    report = migrate_json(root)
    assert not _hits(report, "benchmarks/bench_gated.py", "NPU202")
    moot = _moot(report, "benchmarks/bench_gated.py")
    assert 5 in moot and "`capability` bound to `get_device_capability()`" in moot[5]
    assert [(f["line"], f["severity"]) for f in _hits(report, "benchmarks/bench_capable.py", "NPU202")] \
        == [(5, "error")]
    assert [(f["line"], f["severity"]) for f in _hits(report, "benchmarks/bench_rebound.py", "NPU202")] \
        == [(5, "error")]
