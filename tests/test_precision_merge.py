"""Issue #16, precision: one construct, one finding (npu_migrate/redundant.py).

The uses of a reported object, the branch a reported CUDA check guards, the findings of one
statement, a backend parameter whose callers pass literals, a Dockerfile's CUDA packages on a CUDA
base image: each folds into one finding whose `also` places and message name the others. Each test
writes a small fixture of its own, asserts that the redundant finding is gone (its place kept in
the kept finding's `also`) and that a nearby distinct finding is still reported.
"""

from __future__ import annotations

from pathlib import Path

from npu_migrate.findings import Finding, split_merged
from npu_migrate.redundant import fold_into_base_image, fold_redundant

from .precision_helpers import migrate_json, write_project


def _report(tmp_path: Path, files: dict[str, str]) -> list[dict]:
    return [f for f in migrate_json(write_project(tmp_path, files))["findings"] if not f["fixable"]]


def _at(findings: list[dict], path: str, line: int, code: str | None = None) -> list[dict]:
    return [f for f in findings if f["path"] == path and f["line"] == line and (code is None or f["code"] == code)]


def _also_lines(finding: dict) -> list[int]:
    return [line for line, _column, _source in finding.get("also", [])]


def _lines(findings: list[dict], path: str) -> set[int]:
    """Every line a report names, anchors and `also` places together (nothing silently missed)."""
    return {line for f in findings if f["path"] == path for line in (f["line"], *_also_lines(f))}


# ----------------------------------------------------------------------------- 1. uses of a reported object
OBJECT = '''\
import ctypes

import torch


class NCCLLibrary:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)


class Communicator:
    def __init__(self, path):
        self.nccl = NCCLLibrary(path)
        self.version = self.nccl.ncclGetVersion()
        self.uid = self.nccl.ncclGetUniqueId()

    def all_reduce(self, tensor):
        self.nccl.ncclAllReduce(tensor.data_ptr(), tensor.numel())
        return torch.version.cuda.split(".")
'''


def test_method_calls_fold_into_the_reported_object(tmp_path):
    findings = _report(tmp_path, {"comm.py": OBJECT})
    (obj,) = _at(findings, "comm.py", 13)
    assert "`self.nccl`" in obj["message"] and obj["severity"] == "warning"
    assert _also_lines(obj) == [14, 15, 18]
    assert "also at lines 14, 15, 18" in obj["message"]
    for line in (14, 15, 18):
        assert not _at(findings, "comm.py", line)
    # a distinct CUDA-only reference nearby stays its own finding
    (version,) = _at(findings, "comm.py", 19, "NPU990")
    assert "torch.version.cuda" in version["message"] and version["severity"] == "warning"


def test_an_object_use_of_higher_severity_is_not_hidden():
    obj = Finding("m.py", 3, 5, "NPU990", "CUDA-only reference left unchanged: `self.nccl`", False, "self.nccl",
                  severity="info")
    use = Finding("m.py", 4, 5, "NPU990", "CUDA-only reference left unchanged: `self.nccl.ncclSend`", False,
                  "self.nccl.ncclSend", severity="warning")
    out = fold_redundant([obj, use], "import torch\n\nself.nccl = 1\nself.nccl.ncclSend()\n")
    assert out == [obj, use]


# ----------------------------------------------------------------------------- 2. a reported check's branch
GUARDED = '''\
import os

import torch
from mybuild import installed_cuda_version


def compatible():
    if torch.cuda.is_available():
        sys_major, _ = installed_cuda_version()
        torch_major = int(torch.version.cuda.split(".")[0])
        return sys_major == torch_major
    raise RuntimeError("the CUDA toolchain is required")


def later():
    return torch.version.cuda.split(".")
'''


def test_findings_in_a_reported_checks_branch_fold_into_the_check(tmp_path):
    findings = _report(tmp_path, {"probe.py": GUARDED})
    (gate,) = _at(findings, "probe.py", 8, "NPU110")
    assert gate["severity"] == "warning"
    assert _also_lines(gate) == [10] and "(also at line 10)" in gate["message"]
    assert not _at(findings, "probe.py", 10)
    # the same reference outside the guarded branch is still reported, no longer merged with line 10
    (outside,) = _at(findings, "probe.py", 16, "NPU990")
    assert outside["severity"] == "warning" and "torch.version.cuda" in outside["message"]
    assert not outside.get("also")


def test_the_else_branch_of_a_positive_check_is_not_folded(tmp_path):
    text = GUARDED.replace('    raise RuntimeError("the CUDA toolchain is required")\n',
                           "    else:\n        return torch.version.cuda.split('.')\n", 1)
    findings = _report(tmp_path, {"probe.py": text})
    (gate,) = _at(findings, "probe.py", 8, "NPU110")
    assert 13 not in _also_lines(gate)
    assert 13 in _lines([f for f in findings if f["code"] == "NPU990"], "probe.py")


# ----------------------------------------------------------------------------- 3. one statement: NCCL keys
NCCL_KEYS = '''\
import os


def reproducible():
    os.environ.update({"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"})
    os.environ["NCCL_IB_HCA"] = "mlx5"
'''


def test_nccl_keys_of_one_dict_are_one_finding(tmp_path):
    findings = _report(tmp_path, {"tune.py": NCCL_KEYS})
    (keys,) = _at(findings, "tune.py", 5)
    assert keys["code"] == "NPU602"
    assert "`NCCL_ALGO`" in keys["message"] and "`NCCL_PROTO`" in keys["message"]
    assert "in the same statement" in keys["message"]
    # the adjacent statement's key folds in too, named as such (ncclfolds26, round 26 BV#7)
    assert [a[0] for a in keys["also"]] == [5, 6]
    assert "(with `NCCL_IB_HCA` in the adjacent statement)" in keys["message"]
    assert not _at(findings, "tune.py", 6, "NPU602")
    # a statement between them keeps the later key its own finding
    apart = NCCL_KEYS.replace('    os.environ["NCCL_IB_HCA"]', '    print("tuned")\n    os.environ["NCCL_IB_HCA"]')
    findings = _report(tmp_path / "apart", {"tune.py": apart})
    (other,) = _at(findings, "tune.py", 7, "NPU602")
    assert "`NCCL_IB_HCA`" in other["message"]


def test_nccl_guidance_names_hccl_deterministic():
    from npu_migrate import catalogue

    assert "HCCL_DETERMINISTIC=true" in catalogue.rule("NPU602").guidance
    assert "HCCL_DETERMINISTIC=true" in catalogue.rule("NPU703").guidance


def test_a_leftover_in_one_statement_folds_into_the_statements_finding():
    text = "import torch\n\nx = torch.cuda.cudart() or 'CUDA_PROFILER'\ny = 'CUDA_PROFILER'\n"
    api = Finding("m.py", 3, 5, "NPU202", "`torch.cuda.cudart` left unchanged", False, "torch.cuda.cudart")
    left = Finding("m.py", 3, 27, "NPU990", 'CUDA-only reference left unchanged: string "CUDA_PROFILER"', False,
                   '"CUDA_PROFILER"', also=((4, 5, '"CUDA_PROFILER"'),))
    out = fold_redundant([api, left], text)
    assert [f.code for f in out] == ["NPU202", "NPU990"]
    assert out[0].also == ((3, 27, '"CUDA_PROFILER"'),)
    # the same string on its own statement stays reported, re-anchored there
    assert (out[1].line, out[1].also) == (4, ())
    assert sorted((p.line, p.column) for f in out for p in split_merged(f)) == [(3, 5), (3, 27), (4, 5)]


def test_two_distinct_codes_in_one_statement_stay_apart():
    text = "import torch\n\nx = f(torch.cuda.cudart(), torch.cuda.CUDAGraph())\n"
    a = Finding("m.py", 3, 7, "NPU202", "`torch.cuda.cudart` left unchanged", False, "torch.cuda.cudart")
    b = Finding("m.py", 3, 28, "NPU405", "something else", False, "torch.cuda.CUDAGraph", severity="warning")
    assert fold_redundant([a, b], text) == [a, b]


# ----------------------------------------------------------------------------- 4. a backend parameter's callers
BACKENDS = '''\
import torch.distributed as dist


class GroupCache:
    def __init__(self):
        self.groups = {}

    def get(self, ranks, backend: str = "nccl"):
        key = (backend, tuple(ranks))
        if key not in self.groups:
            self.groups[key] = dist.new_group(ranks=ranks, backend=backend)
        return self.groups[key]


CACHE = GroupCache()


def tensor_group(ranks):
    return CACHE.get(ranks, "nccl")


def data_group(ranks):
    return CACHE.get(ranks)


def make(ranks, backend):
    return dist.new_group(ranks=ranks, backend=backend)


def user(ranks, cfg):
    return make(ranks, cfg.backend)
'''

REWRITTEN = '''\
import torch.distributed as dist


def build(ranks, backend="nccl"):
    return dist.new_group(ranks=ranks, backend=backend)


def first(ranks):
    return build(ranks)
'''


def test_backend_parameter_absorbs_the_literals_its_callers_pass(tmp_path):
    findings = _report(tmp_path, {"groups.py": BACKENDS, "only.py": REWRITTEN})
    (unseen,) = [f for f in findings if f["path"] == "groups.py" and f["code"] == "NPU304"]
    assert unseen["line"] == 11 and unseen["severity"] == "warning"
    assert '`"nccl"`' in unseen["message"] and "passed by the calls" in unseen["message"]
    # the caller's literal (line 19) is one of its places; a parameter fed by a variable (27) stays
    assert _also_lines(unseen) == [19, 27]
    assert not _at(findings, "groups.py", 19)
    # every caller passes a literal that is rewritten: info, with the reason
    (lowered,) = [f for f in findings if f["path"] == "only.py" and f["code"] == "NPU304"]
    assert lowered["severity"] == "info" and "every call of the function in this file" in lowered["message"]


def test_backend_parameter_with_a_variable_caller_stays_a_warning(tmp_path):
    text = REWRITTEN + "\n\ndef second(ranks, cfg):\n    return build(ranks, cfg.backend)\n"
    findings = _report(tmp_path, {"only.py": text})
    (unseen,) = [f for f in findings if f["code"] == "NPU304"]
    assert unseen["severity"] == "warning" and "every call" not in unseen["message"]


# ----------------------------------------------------------------------------- 5. a Dockerfile's CUDA image
CUDA_IMAGE = '''\
FROM nvidia/cuda:12.1.0-devel-ubuntu22.04
RUN pip install torch --index-url https://download.pytorch.org/whl/cu121
RUN pip install flash-attn
'''


def test_cuda_packages_fold_into_the_cuda_base_image(tmp_path):
    findings = _report(tmp_path, {"docker/Dockerfile": CUDA_IMAGE,
                                  "cpu/Dockerfile": "FROM python:3.11\nRUN pip install flash-attn\n"})
    (image,) = [f for f in findings if f["path"] == "docker/Dockerfile"]
    assert image["code"] == "NPU707" and image["line"] == 1 and image["severity"] == "error"
    assert _also_lines(image) == [2, 3]
    assert "`flash-attn`" in image["message"] and "in the same Dockerfile" in image["message"]
    # without a CUDA base image the package install is its own finding
    (install,) = [f for f in findings if f["path"] == "cpu/Dockerfile"]
    assert install["code"] == "NPU708" and install["severity"] == "error"


def test_base_image_fold_keeps_other_codes():
    image = Finding("Dockerfile", 1, 1, "NPU707", "CUDA container image `nvidia/cuda:12`: ...", False, "nvidia/cuda:12")
    env = Finding("Dockerfile", 2, 5, "NPU703", "Environment variable `NCCL_DEBUG` ...", False, "NCCL_DEBUG")
    assert fold_into_base_image([image, env]) == [image, env]


# ----------------------------------------------------------------------------- 3b. one short `if` block
PROBE_BLOCK = '''\
import os

import torch

ROCM_VERSION = os.environ.get("ROCM_VERSION", None)
if not ROCM_VERSION:
    default_cuda_version = torch.version.cuda
    CUDA_VERSION = "".join(os.environ.get("CUDA_VERSION", default_cuda_version).split("."))

NVCC = os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
'''


def test_one_short_if_block_probing_the_cuda_version_is_one_finding(tmp_path):
    findings = _report(tmp_path, {"setup.py": PROBE_BLOCK})
    (probe,) = _at(findings, "setup.py", 7)
    assert "torch.version.cuda" in probe["message"] and '`"CUDA_VERSION"`' in probe["message"]
    assert "in the same `if` block" in probe["message"] and _also_lines(probe) == [8]
    assert not _at(findings, "setup.py", 8)
    # a reference after the block stays its own finding
    (home,) = _at(findings, "setup.py", 10, "NPU990")
    assert "CUDA_HOME" in home["message"]


# ----------------------------------------------------------------------------- 3c. one line of a script
SCRIPT = '''\
#!/bin/bash
export NCCL_ALGO=Ring NCCL_PROTO=Simple
echo "prepare"
python prepare.py
export NCCL_DEBUG=INFO
torchrun train.py
'''


def test_nccl_variables_on_one_script_line_are_one_finding(tmp_path):
    findings = _report(tmp_path, {"run.sh": SCRIPT})
    (line2,) = _at(findings, "run.sh", 2)
    assert line2["code"] == "NPU703" and "`NCCL_PROTO` on the same line" in line2["message"]
    assert len(line2["also"]) == 1
    assert "HCCL_DETERMINISTIC=true" in line2["message"]
    # a variable set apart from that line's block is its own finding, without the determinism hint
    # (one on the next lines joins the block: test_precision_blocks.py)
    (line5,) = _at(findings, "run.sh", 5, "NPU703")
    assert "`NCCL_DEBUG`" in line5["message"] and "HCCL_DETERMINISTIC" not in line5["message"]


def test_a_determinism_key_names_hccl_deterministic(tmp_path):
    findings = _report(tmp_path, {"tune.py": NCCL_KEYS})
    (keys,) = _at(findings, "tune.py", 5)
    assert "HCCL_DETERMINISTIC=true" in keys["message"]
    # (the adjacent NCCL_IB_HCA folds into it: the advice is given once)
    assert keys["message"].count("HCCL_DETERMINISTIC") == 1 and not _at(findings, "tune.py", 6)
