"""Round-14/15 audits (issue #16): SGLang shapes still read as false or redundant (AN#1, AL#40,
AN#20, AP#17, AM#33). Each test writes a small project of its own, checks that the false finding is
gone (a named skipped scope with its reason, or info with the reason) and that a nearby true case
stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project


def _findings(report: dict, path: str, code: str) -> list[dict]:
    return [f for f in report["findings"] if not f["fixable"] and f["path"] == path and f["code"] == code]


def _lines(finding: dict) -> set[int]:
    return {finding["line"], *(place[0] for place in finding.get("also", []))}


def test_nccl_only_settings_written_are_no_port_work(tmp_path):
    """AN#1: `os.environ["NCCL_CUMEM_ENABLE"] = ...` behind `"NCCL_CUMEM_ENABLE" not in os.environ`:
    HCCL never reads it and has no counterpart; a named scope. NCCL_SOCKET_IFNAME (HCCL_SOCKET_IFNAME)
    and a read of NCCL_CUMEM_ENABLE that decides what the code does stay reported."""
    root = write_project(tmp_path, {"engine.py": '''\
import os


def set_envs(args):
    if "NCCL_CUMEM_ENABLE" not in os.environ or args.symm:
        os.environ["NCCL_CUMEM_ENABLE"] = str(int(args.symm))
    if "NCCL_NVLS_ENABLE" not in os.environ or args.nvls:
        os.environ["NCCL_NVLS_ENABLE"] = str(int(args.nvls))
    os.environ["NCCL_SOCKET_IFNAME"] = args.ifname


def use_cumem():
    return os.environ.get("NCCL_CUMEM_ENABLE", "0") == "1"
'''})
    report = migrate_json(root)
    lines = set().union(*map(_lines, _findings(report, "engine.py", "NPU602")))
    assert not lines & {5, 6, 7, 8}, report["findings"]
    assert {9, 13} <= lines
    scopes = [s for s in report["skipped"] if s["path"] == "engine.py"
              and s["reason"].startswith("no port work on an NPU host (NPU602): an NCCL-only setting")]
    assert scopes and scopes[0]["start_line"] == 5 and scopes[0]["end_line"] == 8, report["skipped"]
