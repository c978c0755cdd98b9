"""Issue #16, round-13 audits: a helper whose every caller is CUDA-only code in other files.

A module-level function that imports a CUDA-only compiled package inside its body (NPU911) fails
on an NPU host only where it is called (callersonly.py). Where every reference of it lies in code
an NPU host never runs, the finding is a named skipped scope that names the callers:

- after the caller's own unguarded import of the same package (AJ#25: a TRT-LLM path that runs
  `import flashinfer.decode` first);
- in a caller function that uses the package's names, which its file imports only under a
  condition false on an NPU host (AJ#25: `if is_flashinfer_available(): import flashinfer`);
- under a condition false on an NPU host, through a chain of module-level helpers (AI#27);
- in methods of CUDA extension classes (AH#4: `CUDA_HOME` read in an nvcc-flags helper).

One caller in plain code keeps the finding. Each fixture is our own.
"""

from __future__ import annotations

from .precision_helpers import migrate_json, moot_lines, write_project

HELPERS = """\
import torch


def quantize_with_rope(q, k):
    import flashinfer.kernels

    return flashinfer.kernels.apply(q, k)
"""

PLAIN_HELPERS = """\
def plain_prepare(w):
    from flashinfer import shuffle

    return shuffle(w)
"""

BACKEND_IMPORT_FIRST = """\
from pkg.helpers import quantize_with_rope


class SparseBackend:
    def forward_trt(self, q, k):
        import flashinfer.decode

        q = quantize_with_rope(q, k)
        return flashinfer.decode.run(q)
"""

BACKEND_GATED = """\
from pkg.helpers import quantize_with_rope
import torch

if torch.version.hip:
    import flashinfer


class TrtBackend:
    def forward_decode(self, q, k):
        if q.dtype.itemsize == 1:
            q = quantize_with_rope(q, k)
        return flashinfer.decode.run(q)
"""

PLAIN_CALLER = """\
from pkg.plain_helpers import plain_prepare


def load(w):
    return plain_prepare(w)
"""

UTILS = """\
def is_hip():
    return False
"""


def _findings(report: dict, path: str, code: str = "NPU911") -> dict[int, dict]:
    return {f["line"]: f for f in report["findings"] if f["path"] == path and f["code"] == code}


def test_helper_called_only_after_the_package_import_or_from_its_code_is_a_named_scope(tmp_path):
    root = write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/helpers.py": HELPERS, "pkg/utils.py": UTILS,
        "pkg/sparse.py": BACKEND_IMPORT_FIRST, "pkg/trt.py": BACKEND_GATED, "pkg/loader.py": PLAIN_CALLER,
            "pkg/plain_helpers.py": PLAIN_HELPERS,
    })
    report = migrate_json(root)
    findings = _findings(report, "pkg/helpers.py")
    scopes = moot_lines(report["skipped"], "NPU911", "pkg/helpers.py")
    # the helper every caller of which is CUDA-only code: a named scope naming its callers
    assert 5 not in findings, findings
    assert 5 in scopes and "called only from code an NPU host does not run" in scopes[5]
    assert "pkg/sparse.py" in scopes[5] and "pkg/trt.py" in scopes[5]
    # the helper a plain loader calls stays a finding
    plain = _findings(report, "pkg/plain_helpers.py")
    assert 2 in plain and plain[2]["severity"] == "error", plain


def test_one_plain_caller_keeps_the_finding(tmp_path):
    plain = PLAIN_CALLER.replace("plain_prepare", "quantize_with_rope").replace("(w)", "(w, w)").replace(
        "pkg.plain_helpers", "pkg.helpers")
    root = write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/helpers.py": HELPERS, "pkg/utils.py": UTILS,
        "pkg/sparse.py": BACKEND_IMPORT_FIRST, "pkg/loader.py": plain,
    })
    report = migrate_json(root)
    findings = _findings(report, "pkg/helpers.py")
    assert 5 in findings and findings[5]["severity"] == "error", findings
    assert 5 not in moot_lines(report["skipped"], "NPU911", "pkg/helpers.py")


QUANT_UTILS = """\
def prepare_fp4_weights(w):
    from flashinfer import interleave

    return interleave(w)
"""

RUNNER = """\
def align_fp4_weights(layer):
    from pkg.quant_utils import prepare_fp4_weights

    layer.w = prepare_fp4_weights(layer.w)
"""

SCHEME = """\
from pkg.quant_utils import prepare_fp4_weights
from pkg.runner import align_fp4_weights
import torch


class HipOnlyScheme:
    def process(self, layer):
        if torch.version.hip:
            layer.w = prepare_fp4_weights(layer.w)
            align_fp4_weights(layer)
        return layer
"""


def test_helper_reached_only_through_helpers_under_a_false_condition_is_a_named_scope(tmp_path):
    root = write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/quant_utils.py": QUANT_UTILS,
        "pkg/runner.py": RUNNER, "pkg/scheme.py": SCHEME,
    })
    report = migrate_json(root)
    assert 2 not in _findings(report, "pkg/quant_utils.py")
    scopes = moot_lines(report["skipped"], "NPU911", "pkg/quant_utils.py")
    assert 2 in scopes and "align_fp4_weights" in scopes[2]
    # the same helper also called by a module-level statement (runs on import): kept
    root = write_project(tmp_path / "b", {
        "pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/quant_utils.py": QUANT_UTILS,
        "pkg/runner.py": RUNNER, "pkg/scheme.py": SCHEME + "\nWEIGHTS = prepare_fp4_weights(None)\n",
    })
    report = migrate_json(root)
    assert _findings(report, "pkg/quant_utils.py")[2]["severity"] == "error"


EXT_UTILS = """\
def append_threads(args):
    from torch.utils.cpp_extension import CUDA_HOME

    major = nvcc_major(CUDA_HOME)
    return args + ["--threads", "4"] if major >= 11 else args


def nvcc_major(home):
    return int(open(home + "/version.txt").read().split(".")[0])
"""

EXTENSIONS = """\
from pkg.ext_utils import append_threads


class _CudaExtension:
    pass


class LayerNormExtension(_CudaExtension):
    def nvcc_flags(self):
        return append_threads(["-O3"])
"""


def test_nvcc_helper_called_only_by_cuda_extension_classes_is_a_named_scope(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ext_utils.py": EXT_UTILS, "pkg/ext.py": EXTENSIONS})
    report = migrate_json(root)
    assert 2 not in _findings(report, "pkg/ext_utils.py")
    scopes = moot_lines(report["skipped"], "NPU911", "pkg/ext_utils.py")
    assert 2 in scopes and "LayerNormExtension" in scopes[2]
    # a plain class calling it (a build script's own flags) keeps the finding
    plain = EXTENSIONS.replace("class LayerNormExtension(_CudaExtension):", "class Flags:")
    root = write_project(tmp_path / "b", {"pkg/__init__.py": "", "pkg/ext_utils.py": EXT_UTILS, "pkg/ext.py": plain})
    report = migrate_json(root)
    assert _findings(report, "pkg/ext_utils.py")[2]["severity"] == "error"


def test_helper_named_in_a_config_file_keeps_the_finding(tmp_path):
    """A YAML config naming the helper (`_target_: pkg.ext_utils.append_threads`) is a caller the
    Python parse does not see: the finding stays."""
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ext_utils.py": EXT_UTILS, "pkg/ext.py": EXTENSIONS,
                                    "conf/build.yaml": "flags:\n  _target_: pkg.ext_utils.append_threads\n"})
    report = migrate_json(root)
    assert _findings(report, "pkg/ext_utils.py")[2]["severity"] == "error"
    assert 2 not in moot_lines(report["skipped"], "NPU911", "pkg/ext_utils.py")


QUANT_TWO_FUNCTIONS = """\
import torch

from pkg.kernels import scaled_fp8_quant


def requantize(weight, scale, widths):
    fused = scale[-1] > torch.finfo(torch.float8_e4m3fn).min
    if fused:
        for i, w in enumerate(widths):
            weight[i], _ = scaled_fp8_quant(w, scale)
    return weight


def prepare(w1, s1, experts):
    from flashinfer import block_interleave

    packed = w1.view(torch.float8_e4m3fn).reshape(experts, -1)
    scales = s1.view(torch.float8_e4m3fn).reshape(experts, -1)
    return block_interleave(packed), scales
"""


def test_folded_fp8_places_are_named_by_their_own_source(tmp_path):
    """AI#27: FP8 places folded into a lazy import's finding are named by what they are
    (`torch.float8_e4m3fn` after the import), not by the first place of the per-file FP8 finding
    they were split from (`scaled_fp8_quant(...)` in another function, which stays reported there)."""
    root = write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/quant.py": QUANT_TWO_FUNCTIONS,
        "pkg/kernels.py": "def scaled_fp8_quant(w, s):\n    return w, s\n",
        "pkg/use.py": "from pkg.quant import prepare, requantize\nprepare(1, 2, 3)\nrequantize(1, 2, 3)\n",
    })
    report = migrate_json(root)
    imports = _findings(report, "pkg/quant.py")
    assert "`torch.float8_e4m3fn` reached only after" in imports[15]["message"], imports
    assert "scaled_fp8_quant" not in imports[15]["message"]
    fp8 = _findings(report, "pkg/quant.py", "NPU913")
    assert fp8[10]["severity"] == "error" and "scaled_fp8_quant" in fp8[10]["message"], fp8


BACKEND_OPTIONAL = """\
import torch
from pkg.helpers import quantize_with_rope

if torch.version.hip:
    import flashinfer


class MaybeBackend:
    def forward(self, q, k, fast=False):
        if fast:
            return flashinfer.decode.run(q)
        return quantize_with_rope(q, k)
"""


def test_caller_reading_the_package_only_in_one_branch_keeps_the_finding(tmp_path):
    """The caller reads `flashinfer` only on its `fast` path and calls the helper on its default
    path: that path runs on an NPU host, the helper's import fails there (kept)."""
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/helpers.py": HELPERS, "pkg/maybe.py": BACKEND_OPTIONAL})
    report = migrate_json(root)
    assert _findings(report, "pkg/helpers.py")[5]["severity"] == "error"
    assert 5 not in moot_lines(report["skipped"], "NPU911", "pkg/helpers.py")
