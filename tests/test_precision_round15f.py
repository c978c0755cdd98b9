"""Issue #16, round-15 audits: op-builder code an NPU host never reaches (npu_migrate/builders15.py).

- the `elif` after `if self.build_for_cpu:` in an op builder whose base class (another file of the
  run) sets `self.build_for_cpu = not torch.cuda.is_available()` is a branch an NPU host does not
  take (AN#25); a builder whose flag is set some other way stays reported;
- a CUDA_HOME read followed by `if cuda_home is None: raise MissingToolkit(...)`, an exception the
  project catches, is a named scope (AN#40); the same read whose exception nobody catches stays;
- a method whose only caller in its file sits under `if torch.cuda.is_available() and
  isinstance(self, CUDAOpBuilder):` is a named scope (AO#34); one also called in plain code stays.
Each fixture is our own.
"""

from __future__ import annotations

from .precision_helpers import migrate_json, moot_lines, write_project

BASE = """\
import os
import torch


class MissingToolkit(Exception):
    pass


def toolkit_version():
    import torch.utils.cpp_extension
    home = torch.utils.cpp_extension.CUDA_HOME
    if home is None:
        raise MissingToolkit("no CUDA toolkit")
    return os.path.join(home, "bin")


class OpBuilder:
    def __init__(self, name):
        self.name = name
        self.build_for_cpu = False

    @staticmethod
    def check_runtime(info):
        current = torch.version.cuda.split(".")[0]
        if current != info["cuda"]:
            raise RuntimeError("mismatch")

    def load(self, info):
        if torch.cuda.is_available() and isinstance(self, CUDAOpBuilder):
            self.check_runtime(info)
        return self.jit_load()

    def jit_load(self):
        if isinstance(self, CUDAOpBuilder):
            self.build_for_cpu = not torch.cuda.is_available()
        return self.include_paths()


class CUDAOpBuilder(OpBuilder):
    def builder(self):
        try:
            toolkit_version()
            self.build_for_cpu = False
        except MissingToolkit:
            self.build_for_cpu = True
        return self.include_paths()
"""

KERNEL = """\
import os
import torch
from .builder import CUDAOpBuilder


class KernelBuilder(CUDAOpBuilder):
    def __init__(self):
        super().__init__("kernel")

    def include_paths(self):
        if self.build_for_cpu:
            extra = []
        else:
            extra = [os.path.join(torch.utils.cpp_extension.CUDA_HOME, "include")]
        return ["csrc"] + extra
"""

OWN_FLAG = """\
import os
import torch
from .builder import CUDAOpBuilder


class OtherBuilder(CUDAOpBuilder):
    def __init__(self):
        super().__init__("other")
        self.build_for_cpu = os.environ.get("CPU_ONLY") == "1"

    def include_paths(self):
        if self.build_for_cpu:
            extra = []
        else:
            extra = [os.path.join(torch.utils.cpp_extension.CUDA_HOME, "include")]
        return ["csrc"] + extra
"""

USES = """\
from ops.builder import toolkit_version


def where():
    return toolkit_version()
"""

CATCHES = """\
from ops.builder import MissingToolkit, toolkit_version


def where():
    try:
        return toolkit_version()
    except MissingToolkit:
        return None
"""


def _reported(report: dict, path: str, code: str) -> list[dict]:
    return [f for f in report["findings"] if not f["fixable"] and f["path"] == path and f["code"] == code
            and f["severity"] != "info"]


def _line(text: str, words: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if words in line)


def test_cpu_flag_set_from_cuda_availability_makes_the_cuda_branch_untaken(tmp_path):
    root = write_project(tmp_path, {"ops/__init__.py": "", "ops/builder.py": BASE, "ops/kernel.py": KERNEL,
                                    "ops/other.py": OWN_FLAG, "user.py": CATCHES})
    report = migrate_json(root)
    line = _line(KERNEL, "CUDA_HOME")
    assert not [f for f in _reported(report, "ops/kernel.py", "NPU911") if f["line"] == line]
    reason = moot_lines(report["skipped"], "NPU911", "ops/kernel.py")[line]
    assert "`self.build_for_cpu` is True there" in reason and "OpBuilder.jit_load" in reason
    # (a subclass that sets the flag its own way keeps its finding)
    assert [f for f in _reported(report, "ops/other.py", "NPU911") if f["line"] == _line(OWN_FLAG, "CUDA_HOME")]


def test_cuda_home_read_raising_a_caught_exception_is_a_named_scope(tmp_path):
    root = write_project(tmp_path, {"ops/__init__.py": "", "ops/builder.py": BASE, "user.py": CATCHES})
    report = migrate_json(root)
    line = _line(BASE, "home = torch.utils")
    assert not [f for f in _reported(report, "ops/builder.py", "NPU911") if f["line"] == line]
    assert "a CUDA_HOME read that raises a handled exception" in moot_lines(
        report["skipped"], "NPU911", "ops/builder.py")[line]


def test_cuda_home_read_whose_exception_nobody_catches_stays(tmp_path):
    base = BASE.replace("        except MissingToolkit:\n", "        except RuntimeError:\n")
    root = write_project(tmp_path, {"ops/__init__.py": "", "ops/builder.py": base, "user.py": USES})
    report = migrate_json(root)
    line = _line(base, "home = torch.utils")
    assert [f for f in _reported(report, "ops/builder.py", "NPU911") if f["line"] == line]


def test_method_called_only_under_an_untaken_branch_is_a_named_scope(tmp_path):
    root = write_project(tmp_path, {"ops/__init__.py": "", "ops/builder.py": BASE})
    report = migrate_json(root)
    line = _line(BASE, "torch.version.cuda.split")
    assert not [f for f in _reported(report, "ops/builder.py", "NPU990") if f["line"] == line]
    reason = moot_lines(report["skipped"], "NPU990", "ops/builder.py")[line]
    assert "called only from code an NPU host does not run" in reason and "OpBuilder.check_runtime" in reason


def test_method_also_called_in_plain_code_stays(tmp_path):
    base = BASE.replace("        return self.jit_load()\n", "        self.check_runtime(info)\n        return self.jit_load()\n")
    root = write_project(tmp_path, {"ops/__init__.py": "", "ops/builder.py": base})
    report = migrate_json(root)
    line = _line(base, "torch.version.cuda.split")
    assert [f for f in _reported(report, "ops/builder.py", "NPU990") if f["line"] == line]


CUTE_MODULE = """\
from typing import Optional

import cutlass.cute as cute
import torch


def normalize(cnt: Optional[torch.Tensor], idx: Optional[torch.Tensor]):
    if cnt is None or idx is None:
        return None, None
    if not cnt.is_cuda or not idx.is_cuda:
        raise ValueError("block tensors must live on CUDA")
    return cute.make_layout(cnt.shape), idx
"""


def test_kernel_module_input_check_without_trigger_words_is_a_named_scope(tmp_path):
    root = write_project(tmp_path, {"kern/__init__.py": "", "kern/sparsity.py": CUTE_MODULE})
    report = migrate_json(root)
    line = _line(CUTE_MODULE, "is_cuda")
    assert not _reported(report, "kern/sparsity.py", "NPU110")
    # (since round 16 `cutlass` is a sweep package: the module's unguarded CuTe import is its own
    # NPU911 error, which may fold the check in as one of its lines; otherwise the check is a
    # named scope)
    folded = [f for f in report["findings"] if f["path"] == "kern/sparsity.py" and f["code"] == "NPU911"
              and line in [a[0] for a in f.get("also") or []]]
    assert folded or any(s["path"] == "kern/sparsity.py" and s["start_line"] <= line <= s["end_line"]
                         and "a kernel module's input check kept meaning CUDA" in s["reason"]
                         for s in report["skipped"] if "start_line" in s)


def test_same_input_check_outside_a_kernel_module_is_still_rewritten(tmp_path):
    plain = CUTE_MODULE.replace("import cutlass.cute as cute\n", "").replace("cute.make_layout(cnt.shape)", "cnt")
    root = write_project(tmp_path, {"kern/__init__.py": "", "kern/plain.py": plain})
    report = migrate_json(root)
    line = _line(plain, "is_cuda")
    assert [f for f in report["findings"] if f["path"] == "kern/plain.py" and f["line"] == line and f["fixable"]]
    assert not [s for s in report["skipped"] if s["path"] == "kern/plain.py"]
