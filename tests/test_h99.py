"""Precision wave 23, helper h99 (issue #16): CUDA-only packages the tables did not know, and
guarded optional imports. Each false case beside the nearest true one that stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project


def _report_only(report: dict, path: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and not f["fixable"]]


# ------------------------------------------------------------------------------------------------
# localcover23.py (round-23 BM#10): a helper loaded only by functions after their own imports of
# the same CUDA-only package folds into the importer's finding

COMPAT = """\
import torch.distributed as dist
from flashinfer.comm.mnnvl import CommBackend


class Communicator(CommBackend):
    def __init__(self, group):
        self.group = group

    def rank(self):
        return dist.get_rank(self.group)
"""

MANAGER = """\
import torch


class Manager:
    def __init__(self, group):
        self.group = group
        self.initialized = False

    def initialize(self, world_size):
        from flashinfer.comm import Mapping

        if self.initialized:
            return
        self.mapping = Mapping(world_size)
        from kit.comm.compat import Communicator

        self.comm = Communicator(self.group)
        self.initialized = True

    def cleanup(self):
        self.initialized = False

    def restore(self):
        if self.initialized:
            from kit.comm.compat import Communicator

            self.comm = Communicator(self.group)
"""


def _comm_project(tmp_path, manager: str, extra: dict | None = None):
    return write_project(tmp_path, {"kit/__init__.py": "", "kit/comm/__init__.py": "",
                                    "kit/comm/compat.py": COMPAT, "kit/comm/manager.py": manager, **(extra or {})})


def test_helper_loaded_only_after_the_functions_own_import_folds_into_it(tmp_path):
    report = migrate_json(_comm_project(tmp_path, MANAGER))
    assert not _report_only(report, "kit/comm/compat.py")
    (carrier,) = _report_only(report, "kit/comm/manager.py")
    assert carrier["code"] == "NPU911" and carrier["severity"] == "error" and carrier["line"] == 10
    assert "also covers `kit/comm/compat.py`" in carrier["message"] and "`flashinfer`" in carrier["message"]


def test_flag_also_set_true_without_the_import_keeps_the_helpers_error(tmp_path):
    manager = MANAGER.replace("    def cleanup(self):\n        self.initialized = False",
                              "    def cleanup(self):\n        self.initialized = True")
    report = migrate_json(_comm_project(tmp_path, manager))
    (kept,) = _report_only(report, "kit/comm/compat.py")
    assert kept["code"] == "NPU911" and kept["severity"] == "error"


def test_site_under_no_flag_keeps_the_helpers_error(tmp_path):
    manager = MANAGER.replace("        if self.initialized:\n            from kit.comm.compat",
                              "        if self.group is not None:\n            from kit.comm.compat")
    report = migrate_json(_comm_project(tmp_path, manager))
    assert [f["code"] for f in _report_only(report, "kit/comm/compat.py")] == ["NPU911"]


def test_flag_another_file_sets_keeps_the_helpers_error(tmp_path):
    other = "from kit.comm.manager import Manager\n\n\ndef resume(group):\n    m = Manager(group)\n    m.initialized = True\n    m.restore()\n"
    report = migrate_json(_comm_project(tmp_path, MANAGER, {"kit/resume.py": other}))
    assert [f["code"] for f in _report_only(report, "kit/comm/compat.py")] == ["NPU911"]


def test_import_after_the_site_covers_nothing(tmp_path):
    manager = MANAGER.replace("        from flashinfer.comm import Mapping\n\n", "").replace(
        "        self.mapping = Mapping(world_size)\n",
        "        self.mapping = None\n").replace(
        "        self.initialized = True\n", "        self.initialized = True\n        from flashinfer.comm import Mapping\n")
    report = migrate_json(_comm_project(tmp_path, manager))
    assert [f["code"] for f in _report_only(report, "kit/comm/compat.py")] == ["NPU911"]
