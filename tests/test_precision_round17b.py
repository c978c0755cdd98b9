"""Round-17 audit (issue #16), labels9.py: names that are labels, not settings or devices (AT#7,
AV#8, AT#22), and NCCL variables whose HCCL counterpart exists (AU#20)."""

from __future__ import annotations

from .precision_helpers import findings_at, migrate_json, scopes_at, write_project

COMMUNICATOR = '''\
import os


class Communicator:
    def backends(self, symm_ok):
        all_potential_ar_backends = [
            "FLASHINFER",
            "NCCL_SYMM_MEM",
            "CUSTOM",
        ]
        enabled_ar_backends: list[str] = []
        if symm_ok:
            enabled_ar_backends.append("NCCL_SYMM_MEM")
        return all_potential_ar_backends, enabled_ar_backends


def tune():
    os.environ["NCCL_MIN_NCHANNELS"] = "4"
'''

RUNNER = '''\
import os

EXCLUDE_ENVS = {"CLUSTER_JOB_NAME": ["NCCL_IB_HCA", "UCX_NET_DEVICES"]}


def export(env):
    for key, names in EXCLUDE_ENVS.items():
        if key in env:
            for name in names:
                env.pop(name, None)
    env["NCCL_IB_GID_INDEX"] = "3"
    return env
'''

SOCKET = '''\
import os


def patch_env(name):
    os.environ["NCCL_SOCKET_IFNAME"] = name


def nvls():
    os.environ["NCCL_NET_PLUGIN"] = "none"
'''

LAZY = '''\
import torch


class LazyTensor:
    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):
        if name in {"contiguous", "cuda", "half", "data", "to"}:
            return getattr(self._loader(), name)
        raise AttributeError(name)


def place(t, device):
    if device in {"cpu", "cuda"}:
        return t
    return t.to(device)


def pick():
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def label():
    return "cuda"
'''


def _all(report, path, code):
    out = dict(findings_at(report, path, code))
    out.update({line: {"message": reason} for line, reason in scopes_at(report, path, code).items()})
    return out


def test_nccl_backend_label_is_no_setting_but_environ_write_is(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/comm.py": COMMUNICATOR}))
    findings = findings_at(report, "pkg/comm.py", "NPU602")
    assert 8 not in findings and 14 not in findings, findings  # (a backend label, AT#7)
    assert 8 in scopes_at(report, "pkg/comm.py", "NPU602")
    assert 18 in findings, findings  # os.environ["NCCL_MIN_NCHANNELS"]: a setting, kept


def test_nccl_name_in_exclusion_list_is_a_label(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/runner.py": RUNNER}))
    findings = findings_at(report, "pkg/runner.py", "NPU602")
    assert 3 not in findings, findings  # (EXCLUDE_ENVS: names not to export, AV#8)
    assert 3 in scopes_at(report, "pkg/runner.py", "NPU602")
    assert 11 in findings, findings  # env["NCCL_IB_GID_INDEX"] = ...: a setting, kept


def test_nccl_socket_ifname_names_its_hccl_counterpart(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/socket.py": SOCKET}))
    findings = findings_at(report, "pkg/socket.py", "NPU602")
    assert "HCCL_SOCKET_IFNAME" in findings[5]["message"], findings  # (AU#20)
    assert "no one-to-one" not in findings[5]["message"]
    assert findings[5]["severity"] == "info"
    assert "no one-to-one HCCL counterpart" in findings[9]["message"], findings  # (no counterpart: unchanged)


def test_cuda_among_tensor_method_names_is_a_label(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/lazy.py": LAZY}))
    findings = findings_at(report, "pkg/lazy.py", "NPU990")
    assert 9 not in findings, findings  # (a method name beside "to", AT#22)
    assert 9 in scopes_at(report, "pkg/lazy.py", "NPU990")
    # a device set keeps its finding (or rewrite), and so do the other "cuda" strings
    others = {f["line"] for f in report["findings"] if f["path"] == "pkg/lazy.py"}
    assert {15, 25} <= others, report["findings"]
