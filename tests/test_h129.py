"""Helper h129: the code duplication wave 27 added, removed with its behaviour unchanged (issue #16).

The pieces several passes now share: callgates21.Gates' one walk over a unit's references with the
hooks testcallers27.py fills (D1), modpaths.parsed / open_python (the whole-run pass preamble,
D3/D5/D8/D9/D16), flagcalls19.lower_result (the lowering tail), kernelgates26.lower_kernels,
disabled.bound_once (D2), attrflags27.once_bound (D20), libgates23.tested_name (D7) and moot.is_open.
Each reading is paired with its nearest true case: the walk still keeps a unit reached where a
reference an NPU host may run is followed, and a finding still reached stays reported."""

from __future__ import annotations

import ast

from npu_migrate.findings import Finding
from npu_migrate.model import FileResult
from tests.precision_helpers import migrate_json, write_project


def _run(files: dict[str, str]):
    from npu_migrate.flagcalls19 import Run

    results = [FileResult(relpath=path, original=text.encode()) for path, text in files.items()]
    return results, Run(results, lambda i: results[i].original)


def _unit(tree: ast.Module, name: str):
    return next(s for s in tree.body if getattr(s, "name", None) == name)


_OPS = """\
import torch


def _helper(x):
    y = x + 1
    return torch.ops.cuda_only.fused(y)
"""

_GATED_USER = """\
import torch

from pkg.ops import _helper

USE_FUSED = False


def forward(x):
    if USE_FUSED:
        return _helper(x)
    return x
"""

_UNGATED_USER = """\
from pkg.ops import _helper


def forward(x):
    return _helper(x)
"""

_TEST = """\
from pkg.ops import _helper


def test_helper():
    assert _helper(1) is not None
"""


# ---------------------------------------------------------------- D1: one walk, the hooks
def _gates(live_tests: bool):
    from npu_migrate.callgates21 import Gates
    from npu_migrate.testcallers27 import test_side

    class Sparing(Gates):
        keep_public = False

        def test_file(self, relpath: str) -> bool:
            return test_side(relpath)

        def live_reference(self, j, relpath, node, parents, test_file):
            return (j, f"{relpath}:{node.lineno}", "test") if test_file else None

    return Sparing if live_tests else Gates


def test_d1_a_subclass_hook_spares_the_live_test_reference_the_base_walk_follows():
    files = {"pkg/__init__.py": "", "pkg/ops.py": _OPS, "pkg/user.py": _GATED_USER, "tests/test_ops.py": _TEST}
    results, run = _run(files)
    unit = _unit(run.tree(1), "_helper")
    # the base walk: the test's call runs on an NPU host and is followed (test_helper: its own
    # references, none) - nearest true case: the unit stays reached
    assert _gates(False)(run).sites(1, unit) is None
    found = _gates(True)(run).sites(1, unit)
    assert found is not None
    spared = [entry for entry in found if entry[2:] == ("test",)]
    assert spared == [(3, "tests/test_ops.py:5", "test")], found
    dead = [entry for entry in found if len(entry) == 2]
    assert dead and dead[0][1].startswith("pkg/user.py:10 ("), found  # (the gated library reference, dead)


def test_d1_pair_a_library_reference_that_runs_keeps_the_unit_reached_for_the_subclass_too():
    files = {"pkg/__init__.py": "", "pkg/ops.py": _OPS, "pkg/user.py": _UNGATED_USER, "tests/test_ops.py": _TEST}
    _results, run = _run(files)
    unit = _unit(run.tree(1), "_helper")
    assert _gates(True)(run).sites(1, unit) is None


def test_d1_naming_skips_the_module_asked_and_files_that_do_not_name_it():
    from npu_migrate.callgates21 import Gates

    files = {"pkg/ops.py": _OPS, "pkg/user.py": _GATED_USER, "pkg/other.py": "x = 1\n", "README.md": "_helper"}
    _results, run = _run(files)
    assert [j for j, _tree in Gates(run).naming("_helper")] == [0, 1]
    assert [j for j, _tree in Gates(run).naming("_helper", but=0)] == [1]


def _project(tmp_path, user: str):
    return write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/ops.py": _OPS.replace("    return torch.ops.cuda_only.fused(y)",
                                   "    from flashinfer.rope import apply_rope_inplace\n    return apply_rope_inplace(y)"),
        "pkg/user.py": user,
        "tests/test_ops.py": _TEST,
    })


def _open_at(report: dict, path: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and not f["fixable"]]


def test_d1_end_to_end_a_helper_only_a_test_reaches_is_info_naming_the_test(tmp_path):
    report = migrate_json(_project(tmp_path, _GATED_USER))
    found = _open_at(report, "pkg/ops.py")
    assert found and all(f["severity"] == "info" for f in found), found
    message = found[0]["message"]
    assert "reached on an NPU host only from tests/benchmarks (tests/test_ops.py:5)" in message, message
    assert "pkg/user.py:10" in message, message


def test_d1_end_to_end_pair_an_ungated_library_caller_keeps_the_error(tmp_path):
    report = migrate_json(_project(tmp_path, _UNGATED_USER))
    found = _open_at(report, "pkg/ops.py")
    assert found and any(f["severity"] != "info" for f in found), found
    assert not any("only from tests/benchmarks" in f["message"] for f in found), found


# ---------------------------------------------------------------- the preamble and the tail
def test_parsed_reads_only_the_files_holding_the_word_and_leaves_an_unparsable_one_to_the_caller():
    from npu_migrate.modpaths import parsed

    texts = {0: b"import triton\n", 1: b"x = 1\n", 2: b"triton = (\n", 3: None}
    read: list = []

    def text_of(i):
        read.append(i)
        return texts[i]

    walk = parsed([0, 1, 2, 3], text_of, b"triton")
    first = next(walk)
    assert first[0] == 0 and isinstance(first[1], ast.Module) and read == [0]  # (each file read when reached)
    assert list(walk) == [(2, None)]


def test_open_python_and_is_open_pick_the_open_report_only_places():
    from npu_migrate.modpaths import open_python
    from npu_migrate.moot import is_open

    open_ = Finding("a.py", 3, 1, "NPU911", "import", False, "")
    info = Finding("b.py", 3, 1, "NPU911", "import", False, "", severity="info")
    fixed = Finding("c.py", 3, 1, "NPU101", "device", True, "")
    results = [FileResult("a.py", [open_]), FileResult("b.py", [info]), FileResult("c.py", [fixed]),
               FileResult("a.sh", [open_])]
    assert is_open(open_) and not is_open(info) and not is_open(fixed)
    assert open_python(results, is_open) == [0]


def test_lower_result_keeps_the_result_itself_where_nothing_is_lowered():
    from npu_migrate.flagcalls19 import lower_result

    finding = Finding("a.py", 4, 1, "NPU911", "CUDA import", False, "")
    result = FileResult("a.py", [finding])
    assert lower_result(result, lambda f: True, lambda line: None) is result
    assert lower_result(result, lambda f: False, lambda line: "why") is result
    lowered = lower_result(result, lambda f: True, lambda line: "in a branch an NPU host does not take: x")
    assert lowered is not result and lowered.findings[0].severity == "info"
    assert lowered.findings[0].message == "CUDA import (in a branch an NPU host does not take: x)"


_KERNEL_FILE = """\
import triton


@triton.jit
def _kernel(x):
    pass


def launch(x):
    _kernel[(1,)](x)
"""


def test_lower_kernels_lowers_a_decorator_place_by_the_reason_given_and_collects_the_kept_ones():
    from npu_migrate.kernelgates26 import lower_kernels

    finding = Finding("k.py", 4, 1, "NPU910", "Triton kernel", False, "", also=((10, 5, "launch"),))
    results = [FileResult("k.py", [finding], original=_KERNEL_FILE.encode())]
    started: list = []

    def start():
        from npu_migrate.flagcalls19 import Run

        started.append(1)
        run = Run(results, lambda i: results[i].original)
        return run, "gates"

    folds: list = []
    out = lower_kernels(results, lambda i: results[i].original, lambda f: f.code == "NPU910" and f.severity != "info",
                        start, lambda gates, i, unit: f"`{unit.name}` asked of {gates}", folds)
    info = [f for f in out[0].findings if f.severity == "info"]
    assert [f.line for f in info] == [4] and "`_kernel` asked of gates" in info[0].message
    assert [f.line for f in out[0].findings if f.severity != "info"] == [10]  # (the launch: no kernel decorator)
    assert folds == [] and started == [1]
    # nearest true case: no reason, nothing lowered, the result itself
    kept = lower_kernels(results, lambda i: results[i].original, lambda f: f.code == "NPU910", start,
                         lambda gates, i, unit: None)
    assert kept[0] is results[0]


# ---------------------------------------------------------------- D2, D7, D20
_WRAPPER = """\
class Comm:
    def send(self, x):
        if self.disabled:
            return
        self.nccl.send(x)

    def __init__(self, path):
        self.disabled = False
        try:
            self.nccl = NCCLLibrary(path)
        except Exception:
            self.disabled = True
            return
{rebind}"""


def test_d2_bound_once_gives_the_library_try_of_an_attribute_bound_once():
    from npu_migrate.disabled import bound_once, library_lines

    tree = ast.parse(_WRAPPER.format(rebind=""))
    found = [(cls.name, method.name, attr) for cls, _methods, method, _stmt, attr, _flags, _returns in bound_once(tree)]
    assert found == [("Comm", "__init__", "nccl")]
    assert set(library_lines(tree, [])) >= {5, 10}


def test_d2_pair_an_attribute_bound_twice_is_none():
    from npu_migrate.disabled import bound_once, library_lines

    rebind = "\n    def reset(self):\n        self.nccl = None\n"
    tree = ast.parse(_WRAPPER.format(rebind=rebind))
    assert list(bound_once(tree)) == []
    assert library_lines(tree, []) == {}


def test_d7_probegates27_reads_a_gate_with_libgates23s_tested_name():
    from npu_migrate import probegates27
    from npu_migrate.libgates23 import tested_name

    assert probegates27.tested_name is tested_name
    assert tested_name(ast.parse("x is None", mode="eval").body) == "x"
    assert tested_name(ast.parse("not x", mode="eval").body) == "x"
    assert tested_name(ast.parse("x is not None", mode="eval").body) is None  # (nearest true: not a miss test)


def test_d20_once_bound_takes_the_plain_assignments_before_the_line_stored_once():
    from npu_migrate.attrflags27 import once_bound

    function = ast.parse("def f(a):\n    use = fast(a)\n    b = 1\n    b = 2\n    late = 3\n    if use: pass\n").body[0]
    counts = {"use": 1, "b": 2, "late": 1}
    bound = once_bound(function, 6, counts)
    assert list(bound) == ["use", "late"]
    assert list(once_bound(function, 5, counts)) == ["use"]  # (`late` is bound at the line asked: not before)
