"""Issue #16, round-13 audits: CI jobs, module-name strings and method-name labels.

- a GitHub Actions job pinned to NVIDIA runners (`runs-on: group: aws-g5-...`) is a named skipped
  scope ("a CI job on NVIDIA runners"), not an info finding (AI#26, AJ#37): an Ascend job would be
  a new job; a job on a CPU runner keeps its findings;
- the module a probe looks for (`pytest.importorskip("nccl.m2n")`, `find_spec("nvidia.nccl")`) is
  a module name, not a backend (AJ#5); "nccl" given as a backend stays reported, and a module
  imported by name (`importlib.import_module`) stays reported, named as a module;
- the method name an FX tracer records (`create_proxy("call_method", "cuda", ...)`) is a label
  (AJ#18): a named skipped scope; "cuda" given as a device stays reported.
Each fixture is our own.
"""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

WORKFLOW = """\
name: gpu tests
on: [push]
jobs:
  gpu-tests:
    runs-on:
      group: aws-g5-4xlarge-plus
    container:
      image: pytorch/pytorch:2.6.0-cuda12.4-cudnn9-devel
      options: --gpus 0
    steps:
      - run: nvidia-smi
  cpu-tests:
    runs-on: ubuntu-latest
    container:
      image: pytorch/pytorch:2.6.0-cuda12.4-cudnn9-devel
    steps:
      - run: nvidia-smi
"""


def _line(text: str, needle: str, start: int = 0) -> int:
    lines = text.splitlines()
    return next(i for i in range(start, len(lines)) if needle in lines[i]) + 1


def test_ci_job_on_nvidia_runners_is_a_named_scope(tmp_path):
    root = write_project(tmp_path, {".github/workflows/gpu.yml": WORKFLOW})
    report = migrate_json(root)
    path = ".github/workflows/gpu.yml"
    cpu_job = _line(WORKFLOW, "cpu-tests:")
    findings = [f for f in report["findings"] if f["path"] == path]
    assert not [f for f in findings if f["line"] < cpu_job]
    scopes = [s for s in report["skipped"] if s.get("path") == path and "a CI job on NVIDIA runners" in s["reason"]]
    assert len(scopes) == 1
    (scope,) = scopes
    assert scope["reason"].startswith("not run on an NPU host (NPU707): a CI job on NVIDIA runners: `gpu-tests`")
    assert "runs-on: group: aws-g5-4xlarge-plus" in scope["reason"]
    assert "an Ascend job would be a new job" in scope["reason"]
    assert scope["start_line"] == _line(WORKFLOW, "image:") and scope["end_line"] < cpu_job
    # nearby true case: the job on a CPU runner keeps its errors
    assert sorted((f["code"], f["severity"]) for f in findings if f["line"] > cpu_job) == [
        ("NPU704", "error"), ("NPU707", "error")]


PROBES = '''\
import importlib
import importlib.util

import pytest
import torch.distributed as dist


def test_transfer():
    pytest.importorskip("nccl.m2n", reason="needs the m2n runtime")
    spec = importlib.util.find_spec("nvidia.nccl")
    return spec


def setup():
    dist.init_process_group(backend="nccl")
    return importlib.import_module("nccl.m2n")
'''


def test_module_names_in_probes_are_not_backends(tmp_path):
    root = write_project(tmp_path, {"tests/test_probe.py": PROBES})
    report = migrate_json(root)
    findings = [f for f in report["findings"] if f["path"] == "tests/test_probe.py"]
    probes = {_line(PROBES, "importorskip"), _line(PROBES, "find_spec")}
    assert not [f for f in findings if f["line"] in probes]
    # nearby true cases: "nccl" as a backend, and a module imported by name, stay reported
    backend = _line(PROBES, 'backend="nccl"')
    assert any(f["line"] == backend and f["severity"] != "info" for f in findings)
    imported = [f for f in findings if f["line"] == _line(PROBES, "import_module")]
    assert imported and imported[0]["severity"] == "warning"
    assert "a module imported by name" in imported[0]["message"]


TRACER = '''\
import torch


class Proxy:
    def __init__(self, tracer):
        self.tracer = tracer

    def cpu(self, *args, **kwargs):
        return self.tracer.create_proxy("call_method", "cpu", (self, *args), {**kwargs})

    def cuda(self, *args, **kwargs):
        return self.tracer.create_proxy("call_method", "cuda", (self, *args), {**kwargs})


def place(tracer, x):
    return tracer.create_proxy("call_function", torch.ones, (3,), {"device": "cuda"})
'''


def test_fx_method_name_is_a_label(tmp_path):
    root = write_project(tmp_path, {"pkg/tracer.py": TRACER})
    report = migrate_json(root)
    path = "pkg/tracer.py"
    findings = [f for f in report["findings"] if f["path"] == path]
    method = _line(TRACER, '"call_method", "cuda"')
    assert not [f for f in findings if f["line"] == method]
    scopes = [s for s in report["skipped"] if s.get("path") == path and s.get("start_line") == method]
    assert scopes and "a method name an FX tracer records" in scopes[0]["reason"]
    # nearby true case: "cuda" given as a device stays a finding
    device = _line(TRACER, '"device": "cuda"')
    assert [f for f in findings if f["line"] == device]
