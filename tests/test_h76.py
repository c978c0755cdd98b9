"""Issue #16, round-19 audit (BB#8, BB#32): CUDA-only modules whose every importer reaches them only
where they can load (npu_migrate/importers19.py).

Each shape judged false is reproduced next to the nearest true case that must stay an error:
- a module importing `cutlass`/`cuda.bindings` unguarded, imported lazily only under
  `if has_cutedsl():` where `has_cutedsl()` returns `_has_module("cutlass")` (through another
  module), under `find_spec("cutlass") is not None`, or under a module flag bound to such a probe:
  info naming the probe (also through a helper `return _ENABLED and _has_module("cutlass")`); a
  probe of another package, a negated probe, a helper true where either of two packages is, or one
  importer without a probe: still an error;
- a module imported lazily only in `forward_cuda` of a dispatched op that also has
  `forward_native`: info; a class whose `forward_cuda` is all it has: still an error;
- a helper module imported only by such a module: info; one imported by a module that stays an
  error: still an error;
- test files aside: a library importer behind a probe plus an unguarded test importer (which also
  names the module in a string): info; a module only tests import: still an error.
"""

from __future__ import annotations

from pathlib import Path

from npu_migrate.importers19 import IMPORTERS_GATED
from npu_migrate.tritonguards import UNGUARDED

from .precision_helpers import migrate_json, write_project

PROBES = '''\
import importlib.util


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except Exception:
        return False


def has_cutedsl() -> bool:
    """Whether the optional `cutlass` package is there."""
    return _has_module("cutlass")


def has_numpy() -> bool:
    return _has_module("numpy")


HAS_CUTLASS = importlib.util.find_spec("cutlass") is not None
_ENABLED = True


def has_cutedsl_enabled() -> bool:
    return _ENABLED and _has_module("cutlass")


def either_backend() -> bool:
    return _has_module("cutlass") or _has_module("numpy")
'''

CUTEDSL = '''\
import cutlass
import cutlass.cute as cute
from cuda.bindings.driver import CUstream


def {name}(x):
    return cute.compile(x, CUstream(0))
'''

CUSTOM_OP = '''\
import torch


class CustomOp(torch.nn.Module):
    def forward(self, *args, **kwargs):
        return self.dispatch_forward()(*args, **kwargs)

    def dispatch_forward(self):
        if torch.cuda.is_available():
            return self.forward_cuda
        return self.forward_native

    def forward_native(self, *args, **kwargs):
        raise NotImplementedError

    def forward_cuda(self, *args, **kwargs):
        raise NotImplementedError
'''


def _project(tmp_path: Path) -> dict:
    files = {
        "pkg/__init__.py": "",
        "pkg/utils/__init__.py": "",
        "pkg/utils/imports.py": PROBES,
        "pkg/layers/__init__.py": "",
        "pkg/layers/custom_op.py": CUSTOM_OP,
    }
    # behind `has_cutedsl()` (another module's helper returning `_has_module("cutlass")`)
    for folder, name in (("probed", "gather"), ("spec", "spec"), ("flag", "flag"), ("other", "other"),
                         ("negated", "negated"), ("mixed", "mixed"), ("dispatched", "norm"),
                         ("cudaonly", "only"), ("onlytests", "tested"), ("withtests", "withtests"),
                         ("conj", "conj"), ("either", "either")):
        files[f"pkg/{folder}/__init__.py"] = ""
        files[f"pkg/{folder}/kernel_cutedsl.py"] = CUTEDSL.format(name=name)
    # helpers imported only by a module never loaded (probed) and by one that is (other)
    helper = "import cutlass\n\n\ndef helper(x):\n    return cutlass.Int32(x)\n"
    for folder, importer in (("chain", "probed"), ("chain2", "other")):
        files[f"pkg/{folder}/__init__.py"] = ""
        files[f"pkg/{folder}/helper.py"] = helper + f"\n\nNAME = {folder!r}\n"
        files[f"pkg/{importer}/kernel_cutedsl.py"] += f"\n\nfrom pkg.{folder}.helper import helper  # noqa: E402\n"
    files["pkg/ops.py"] = '''\
import importlib.util

import torch

from pkg.utils.imports import HAS_CUTLASS, has_cutedsl, has_cutedsl_enabled, either_backend, has_numpy


def conj(x):
    if has_cutedsl_enabled():
        from pkg.conj.kernel_cutedsl import conj as fast
        return fast(x)
    return x.clone()


def either(x):
    if either_backend():
        from pkg.either.kernel_cutedsl import either as fast
        return fast(x)
    return x.clone()


def gather(x):
    if has_cutedsl() and x.dim() == 2:
        from pkg.probed.kernel_cutedsl import gather as fast
        return fast(x)
    return x.clone()


def spec(x):
    if importlib.util.find_spec("cutlass") is not None:
        from pkg.spec.kernel_cutedsl import spec as fast
        return fast(x)
    return x.clone()


def flag(x):
    if HAS_CUTLASS:
        from pkg.flag.kernel_cutedsl import flag as fast
        return fast(x)
    return x.clone()


def other(x):
    if has_numpy():
        from pkg.other.kernel_cutedsl import other as fast
        return fast(x)
    return x.clone()


def negated(x):
    if not has_cutedsl():
        from pkg.negated.kernel_cutedsl import negated as fast
        return fast(x)
    return x.clone()


def mixed(x):
    if has_cutedsl():
        from pkg.mixed.kernel_cutedsl import mixed as fast
        return fast(x)
    return x.clone()


def mixed_plain(x):
    from pkg.mixed.kernel_cutedsl import mixed as fast
    return fast(x)


def withtests(x):
    if has_cutedsl():
        from pkg.withtests.kernel_cutedsl import withtests as fast
        return fast(x)
    return x.clone()
'''
    # a dispatched op: `forward_cuda` beside `forward_native`, and one with `forward_cuda` alone
    files["pkg/layers/norm.py"] = '''\
import torch

from pkg.layers.custom_op import CustomOp


class FusedNorm(CustomOp):
    def forward_cuda(self, x):
        from pkg.dispatched.kernel_cutedsl import norm
        return norm(x)

    def forward_native(self, x):
        return torch.nn.functional.layer_norm(x, x.shape[-1:])


class OnlyCuda(CustomOp):
    def forward_cuda(self, x):
        from pkg.cudaonly.kernel_cutedsl import only
        return only(x)
'''
    files["tests/test_kernels.py"] = '''\
from pkg.onlytests.kernel_cutedsl import tested
from pkg.withtests.kernel_cutedsl import withtests

MODULE = "pkg.withtests.kernel_cutedsl"


def test_kernels():
    assert tested(1) and withtests(1)
'''
    root = write_project(tmp_path, files)
    report = migrate_json(root)
    return {f["path"]: f for f in report["findings"] if f["code"] == "NPU911"}


def test_probe_of_the_same_package_lowers_and_others_stay(tmp_path: Path) -> None:
    found = _project(tmp_path)
    # (a direct `find_spec("cutlass") is not None` may be a named scope already: importgates.py)
    for folder in ("probed", "flag", "conj", "spec")[:4 if "pkg/spec/kernel_cutedsl.py" in found else 3]:
        finding = found[f"pkg/{folder}/kernel_cutedsl.py"]
        assert finding["severity"] == "info", finding
        assert IMPORTERS_GATED in finding["message"] and UNGUARDED not in finding["message"]
        assert "pkg/ops.py:" in finding["message"], finding["message"]
        assert "a probe of `cutlass`" in finding["message"], finding["message"]
    assert "(`_has_module('cutlass')`)" in found["pkg/probed/kernel_cutedsl.py"]["message"]
    assert "under `has_cutedsl()" in found["pkg/probed/kernel_cutedsl.py"]["message"]
    # the true cases: a probe of another package, a negated probe, one importer without a probe
    for folder in ("other", "negated", "mixed", "either"):
        finding = found[f"pkg/{folder}/kernel_cutedsl.py"]
        assert finding["severity"] == "error", finding
        assert UNGUARDED in finding["message"]


def test_forward_cuda_of_a_dispatched_op(tmp_path: Path) -> None:
    found = _project(tmp_path)
    # (never loaded on an NPU host, the package installed or not: a named scope since round 20, BD#38;
    # tests/test_h82.py reads its reason)
    assert "pkg/dispatched/kernel_cutedsl.py" not in found
    # `forward_cuda` is all the class has: an NPU host may well run it
    assert found["pkg/cudaonly/kernel_cutedsl.py"]["severity"] == "error"


def test_modules_only_unloaded_modules_import(tmp_path: Path) -> None:
    found = _project(tmp_path)
    chained = found["pkg/chain/helper.py"]
    assert chained["severity"] == "info", chained
    assert "pkg/probed/kernel_cutedsl.py:" in chained["message"]
    assert "in a module that itself is not loaded there" in chained["message"]
    # imported by a module that an NPU host may load (and fails at): still an error, which the
    # importer's own error covers, since its `import cutlass` fails first (firstfail22.py)
    assert "pkg/chain2/helper.py" not in found
    assert found["pkg/other/kernel_cutedsl.py"]["severity"] == "error"
    assert "also covers `pkg/chain2/helper.py`" in found["pkg/other/kernel_cutedsl.py"]["message"]


def test_test_importers_aside(tmp_path: Path) -> None:
    found = _project(tmp_path)
    withtests = found["pkg/withtests/kernel_cutedsl.py"]
    assert withtests["severity"] == "info", withtests
    assert "1 import site in tests aside" in withtests["message"]
    # only tests import it: nothing of the library keeps it off an NPU host
    assert found["pkg/onlytests/kernel_cutedsl.py"]["severity"] == "error"


def test_finding_without_the_unguarded_clause() -> None:
    """A module-level NPU911 whose message lacks the clause (the per-file engine did not add it)
    is read from its places: module-level imports only; a lazy import among them keeps it."""
    from npu_migrate import importers19
    from npu_migrate.findings import Finding
    from npu_migrate.model import FileResult

    module = b"import cutlass\nimport cutlass.cute as cute\n\n\ndef f():\n    import cutlass.cute.nvgpu\n"
    importer = (b"from pkg.probes import has_cutedsl\n\n\ndef g():\n    if has_cutedsl():\n"
                b"        from pkg.mod import f\n        return f()\n")
    probes = b"def _has_module(n):\n    return True\n\n\ndef has_cutedsl():\n    return _has_module('cutlass')\n"

    def run(also):
        finding = Finding("pkg/mod.py", 1, 1, "NPU911", "C++/CUDA extension or CUDA-only compiled package: import of `cutlass`",
                          False, "", None, "error", also)
        results = [FileResult("pkg/mod.py", [finding], original=module),
                   FileResult("pkg/use.py", [], original=importer), FileResult("pkg/probes.py", [], original=probes)]
        return importers19.review(results, {})[0].findings[0]

    assert run(((2, 1, ""),)).severity == "info"
    assert run(((2, 1, ""), (6, 5, ""))).severity == "error"
