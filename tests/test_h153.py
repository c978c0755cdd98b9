"""Round-31 precision wave, helper h153: kernels reached only through gates an NPU host answers
False, written in another module than the finding (issue #16; attrrefs31.py for callgates21.py).

Each false shape is paired with the nearest true one, which stays reported."""

from __future__ import annotations

from tests.precision_helpers import migrate_json, write_project

_PLATFORMS = """\
class _Platform:
    def is_cuda(self):
        return True

    def get_device_capability(self, device_id=0):
        return (10, 0)

    def is_device_capability_family(self, capability, device_id=0):
        current = self.get_device_capability(device_id)
        return current is not None and current[0] == capability // 10


current_platform = _Platform()
"""


def _line(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def _open(report, path):
    """{line: finding} of every place of the report-only findings of `path` still at warning or error."""
    out = {}
    for f in report["findings"]:
        if f["path"] == path and not f["fixable"] and f["severity"] != "info":
            out[f["line"]] = f
            for place in f.get("also", []) or []:
                out[place[0] if isinstance(place, list) else place] = f
    return out


def _scopes(report, path):
    return {line: s["reason"] for s in report["skipped"] if s.get("path") == path and "start_line" in s
            for line in range(s["start_line"], s["end_line"] + 1)}


# ---------------------------------------------------------------- FA#6: `args.warmup` is no call of `kern.warmup`
_KERN = '''\
import torch


def grouped(x):
    import cutlass

    return cutlass.run(x)


def warmup(x):
    grouped(x)
    torch.accelerator.synchronize()
'''

_MODEL = '''\
import torch

from pkg.platforms import current_platform

from .ops import kern


def fast_moe(x):
    if not current_platform.is_device_capability_family(100):
        return x
    kern.warmup(x)
    return kern.grouped(x)
'''

# A benchmark that never names the kernels' module: its `warmup` is argparse's field, a dataclass
# field and an enclosing function's parameter.
_BENCH = '''\
import argparse
import dataclasses


@dataclasses.dataclass
class BenchConfig:
    warmup: int = 25


def bench(fn, warmup=5):
    def run():
        for _ in range(warmup):
            fn()
    return run


def main():
    args = argparse.ArgumentParser().parse_args()
    print(f"warmup: {args.warmup}", BenchConfig().warmup)


if __name__ == "__main__":
    main()
'''

_GROUPED = _line(_KERN, "import cutlass")


def _project(tmp_path, extra: dict):
    files = {
        "pkg/__init__.py": "",
        "pkg/platforms.py": _PLATFORMS,
        "pkg/model/__init__.py": "",
        "pkg/model/ops/__init__.py": "",
        "pkg/model/ops/kern.py": _KERN,
        "pkg/model/model.py": _MODEL,
        "benchmarks/bench_ops.py": _BENCH,
    }
    files.update(extra)
    return migrate_json(write_project(tmp_path, files))


def test_fa6_attributes_of_other_objects_by_the_unit_name_are_no_references(tmp_path):
    """FA#6: `warmup` (the only caller of the kernel's `grouped` beside a capability-gated model
    function) is a common name; a benchmark's `args.warmup`, a dataclass field and a parameter
    of that name, in a file naming neither `kern` nor a re-exporter, are other objects."""
    report = _project(tmp_path, {})
    path = "pkg/model/ops/kern.py"
    assert _GROUPED not in _open(report, path)
    reason = _scopes(report, path)[_GROUPED]
    assert "is reached only from code an NPU host does not run" in reason
    assert "pkg/model/model.py" in reason


def test_fa6_pair_a_live_module_calling_the_module_function_keeps_the_kernel(tmp_path):
    """The nearest true case: a live module imports the kernels' module and calls `kern.warmup`."""
    report = _project(tmp_path, {"pkg/runner.py": (
        "from pkg.model.ops import kern\n\n\n"
        "def prepare(x):\n"
        "    kern.warmup(x)\n"
    )})
    assert _GROUPED in _open(report, "pkg/model/ops/kern.py")


def test_fa6_pair_a_package_re_export_keeps_the_kernel(tmp_path):
    """`ops.warmup(x)` in a file that never names `kern`, through the package `__init__` that
    re-exports it: the attribute is the unit."""
    report = _project(tmp_path, {
        "pkg/model/ops/__init__.py": "from .kern import warmup\n",
        "pkg/runner.py": (
            "from pkg.model import ops\n\n\n"
            "def prepare(x):\n"
            "    ops.warmup(x)\n"
        ),
    })
    assert _GROUPED in _open(report, "pkg/model/ops/kern.py")


def test_fa6_pair_a_module_handed_on_as_a_value_keeps_the_kernel(tmp_path):
    """The kernels' module passed as a value (`prepare_all(kern)`): a parameter elsewhere may be
    it, so `mod.warmup(x)` in a file that never names `kern` still counts."""
    report = _project(tmp_path, {
        "pkg/registry.py": (
            "from pkg.model.ops import kern\n"
            "from pkg.prep import prepare_all\n\n\n"
            "def setup(x):\n"
            "    prepare_all(kern, x)\n"
        ),
        "pkg/prep.py": (
            "def prepare_all(mod, x):\n"
            "    mod.warmup(x)\n"
        ),
    })
    assert _GROUPED in _open(report, "pkg/model/ops/kern.py")


def test_fa6_pair_a_from_import_of_the_name_keeps_the_kernel(tmp_path):
    """`from pkg.model.ops.kern import warmup` in a live module: its bare `warmup` is the unit."""
    report = _project(tmp_path, {"pkg/runner.py": (
        "from pkg.model.ops.kern import warmup\n\n\n"
        "def prepare(x):\n"
        "    warmup(x)\n"
    )})
    assert _GROUPED in _open(report, "pkg/model/ops/kern.py")
