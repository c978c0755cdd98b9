"""Issue #16 wave 26 (h113): a private helper reached only through another function's opt-in
branch that no call of the run enters (npu_migrate/unsetcallers26.py, round-23 BO#18)."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

_KERNELS = '''
import torch


def _quant_fused(x, group_size):
    from deep_gemm import transform_sf
    return transform_sf(x, group_size)


def quant(x, group_size, eps=1e-10, fuse_silu: bool = False):
    if fuse_silu:
        return _quant_fused(x, group_size)
    return x * eps
'''


def _project(tmp_path, caller: str, kernels: str = _KERNELS):
    return write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/quant/__init__.py": "",
        "pkg/quant/kernels.py": kernels,
        "pkg/user.py": caller,
    })


def _finding(report, line=6):
    found = [f for f in report["findings"] if f["path"] == "pkg/quant/kernels.py" and f["line"] == line
             and f["code"] == "NPU911"]
    assert len(found) == 1, report["findings"]
    return found[0]


def test_helper_only_under_an_unset_opt_in_is_info(tmp_path):
    root = _project(tmp_path, "from pkg.quant.kernels import quant\n\n\ndef run(x):\n"
                              "    return quant(x, 128) + quant(x, 64, 1e-6, False)\n")
    finding = _finding(migrate_json(root))
    assert finding["severity"] == "info"
    assert "under a parameter no call of the run sets: `fuse_silu`" in finding["message"]
    assert "`_quant_fused` is called only under `if fuse_silu:` of `quant` (line 11)" in finding["message"]
    assert "2 calls, e.g. pkg/user.py:5" in finding["message"]


def test_helper_of_a_function_the_run_never_calls_is_info(tmp_path):
    root = _project(tmp_path, "import torch\n")
    finding = _finding(migrate_json(root))
    assert finding["severity"] == "info"
    assert "the run never calls `quant`" in finding["message"]


def test_a_call_setting_the_opt_in_keeps_the_error(tmp_path):
    # (the nearest true case: one call of the run enters the branch)
    root = _project(tmp_path, "from pkg.quant.kernels import quant\n\n\ndef run(x):\n"
                              "    return quant(x, 128, fuse_silu=True)\n")
    assert _finding(migrate_json(root))["severity"] == "error"


def test_a_flag_handed_on_or_positional_true_keeps_the_error(tmp_path):
    root = _project(tmp_path, "from pkg.quant.kernels import quant\n\n\ndef run(x, fuse):\n"
                              "    return quant(x, 128, 1e-6, fuse)\n")
    assert _finding(migrate_json(root))["severity"] == "error"
    root = _project(tmp_path / "b", "from pkg.quant.kernels import quant\n\n\ndef run(x, **kw):\n"
                                    "    return quant(x, 128, **kw)\n")
    assert _finding(migrate_json(root))["severity"] == "error"


def test_helper_called_outside_the_branch_keeps_the_error(tmp_path):
    kernels = _KERNELS + "\n\ndef warm(x):\n    return _quant_fused(x, 128)\n"
    root = _project(tmp_path, "import torch\n", kernels)
    assert _finding(migrate_json(root))["severity"] == "error"


def test_else_branch_or_public_helper_keeps_the_error(tmp_path):
    negated = _KERNELS.replace("    if fuse_silu:\n        return _quant_fused(x, group_size)\n    return x * eps\n",
                               "    if fuse_silu:\n        return x * eps\n    else:\n"
                               "        return _quant_fused(x, group_size)\n")
    root = _project(tmp_path, "import torch\n", negated)
    assert _finding(migrate_json(root))["severity"] == "error"
    public = _KERNELS.replace("_quant_fused", "quant_fused")
    root = _project(tmp_path / "b", "import torch\n", public)
    assert _finding(migrate_json(root))["severity"] == "error"


def test_helper_named_in_another_module_keeps_the_error(tmp_path):
    root = _project(tmp_path, "from pkg.quant.kernels import _quant_fused\n\n\ndef run(x):\n"
                              "    return _quant_fused(x, 128)\n")
    assert _finding(migrate_json(root))["severity"] == "error"


# ---------------------------------------------------------------- registrykeys26.py (audit BQ#24)

_BASE = '''
_POOL = {}


class PermutePool:
    @classmethod
    def register_pre_permute(cls, dispatch_name, runner_backend_name, func):
        _POOL[(dispatch_name, runner_backend_name)] = func


def register_pre_permute(dispatch_name: str, runner_backend_name: str):
    def wrap(func):
        PermutePool.register_pre_permute(dispatch_name, runner_backend_name, func)
        return func
    return wrap


def register_alias(*names):
    def wrap(func):
        for name in names:
            _POOL[name] = func
        return func
    return wrap


def get_pre_permute(a, b):
    return _POOL[(a, b)]
'''

_RUNNER = '''
import torch
from pkg.moe.base import register_pre_permute, register_alias


def copy_counts(arr):
    from sgl_kernel.elementwise import copy_to_gpu_no_ce
    out = torch.empty(len(arr), dtype=torch.int32)
    copy_to_gpu_no_ce(torch.tensor(arr), out)
    return out


@DECORATOR
def pre_permute_deepep_to_gemm(dispatch_output, config):
    return copy_counts(dispatch_output.counts)
'''


def _registry_project(tmp_path, decorator: str, extra: str = ""):
    return write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/moe/__init__.py": "",
        "pkg/moe/base.py": _BASE,
        "pkg/moe/runner.py": _RUNNER.replace("DECORATOR", decorator) + extra,
        "pkg/moe/layer.py": "from pkg.moe.base import get_pre_permute\n\n\ndef forward(x, a, b):\n"
                            "    return get_pre_permute(a, b)(x, None)\n",
    })


def _copy_finding(report):
    found = [f for f in report["findings"] if f["path"] == "pkg/moe/runner.py" and f["line"] == 7
             and f["code"] == "NPU911"]
    assert len(found) == 1, report["findings"]
    return found[0]


def test_helper_of_a_function_registered_under_a_cuda_backend_is_info(tmp_path):
    root = _registry_project(tmp_path, 'register_pre_permute("deepep_normal", "deep_gemm")')
    finding = _copy_finding(migrate_json(root))
    assert finding["severity"] == "info"
    assert 'runs only when the CUDA-only backend "deep_gemm" is chosen' in finding["message"]
    assert '@register_pre_permute("deepep_normal", "deep_gemm")' in finding["message"]


def test_portable_backend_registration_keeps_the_error(tmp_path):
    # (the nearest true case: the default runner's permute function runs on an NPU host)
    root = _registry_project(tmp_path, 'register_pre_permute("standard", "triton")')
    assert _copy_finding(migrate_json(root))["severity"] == "error"


def test_aliases_or_a_named_function_keep_the_error(tmp_path):
    # (`*names`: one of several aliases, a portable one among them)
    root = _registry_project(tmp_path, 'register_alias("triton", "deep_gemm")')
    assert _copy_finding(migrate_json(root))["severity"] == "error"
    # (the registered function is also called directly: that caller may run on an NPU host)
    root = _registry_project(tmp_path / "b", 'register_pre_permute("deepep_normal", "deep_gemm")',
                             "\n\ndef warm(x):\n    return pre_permute_deepep_to_gemm(x, None)\n")
    assert _copy_finding(migrate_json(root))["severity"] == "error"


# ---------------------------------------------------------------- readerfolds26.py (audit BD#23)

_CONFIG = '''
import torch


def _compute_enable():
    if torch.cuda.get_device_capability()[0] < 9:
        return False
    try:
        import deep_gemm  # noqa: F401
    except ImportError:
        return False
    return True


ENABLE_JIT = _compute_enable()
'''

_COMPILE = '''
from contextlib import contextmanager

from pkg.wrapper.config import ENABLE_JIT

if ENABLE_JIT:
    import deep_gemm


class _Base:
    @staticmethod
    def create(kind):
        return {"normal": _Normal}[kind]()


class _Normal(_Base):
    def execute(self, m):
        deep_gemm.gemm(m)


def _compile_all(n, k):
    deep_gemm.set_mode(1)
    _Base.create("normal").execute(n)


@contextmanager
def execution_hook(m, n, k):
    if m > 0:
        _compile_all(n, k)
    yield
'''

_ENTRY = '''
from pkg.wrapper import compile_utils
from pkg.wrapper.config import ENABLE_JIT

if ENABLE_JIT:
    import deep_gemm


def gemm_nt(lhs, rhs, out, m, n, k):
    with compile_utils.execution_hook(m, n, k):
        deep_gemm.gemm_nt(lhs, rhs, out)
'''


def _reader_project(tmp_path, compile_utils: str = _COMPILE, extra: dict | None = None):
    return write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/wrapper/__init__.py": "",
        "pkg/wrapper/config.py": _CONFIG,
        "pkg/wrapper/compile_utils.py": compile_utils,
        "pkg/wrapper/entrypoint.py": _ENTRY,
        **(extra or {}),
    })


def _reader_notes(report):
    return {f["path"]: f for f in report["findings"] if f["code"] == "NPU911" and f["path"].startswith("pkg/wrapper/")
            and "review that an NPU host never calls them" in f["message"]}


def test_gated_import_whose_readers_only_another_notes_readers_reach_folds(tmp_path):
    notes = _reader_notes(migrate_json(_reader_project(tmp_path)))
    assert set(notes) == {"pkg/wrapper/entrypoint.py"}, notes
    message = notes["pkg/wrapper/entrypoint.py"]["message"]
    assert "also pkg/wrapper/compile_utils.py:7 `import deep_gemm`, under the same gate" in message
    assert "`_Normal`, `_compile_all`" in message and "pkg/wrapper/entrypoint.py:10" in message


def test_a_reader_reached_from_elsewhere_keeps_both_notes(tmp_path):
    # (the nearest true case: a third module calls the compile helper chain directly)
    extra = {"pkg/warmup.py": "from pkg.wrapper.compile_utils import execution_hook\n\n\n"
                              "def warm(m):\n    with execution_hook(m, 1, 1):\n        pass\n"}
    notes = _reader_notes(migrate_json(_reader_project(tmp_path, extra=extra)))
    assert set(notes) == {"pkg/wrapper/entrypoint.py", "pkg/wrapper/compile_utils.py"}, notes
    assert "also pkg/wrapper" not in notes["pkg/wrapper/entrypoint.py"]["message"]


def test_an_op_registration_is_no_backend_key(tmp_path):
    # (`@register_fake("ns::op_cutlass")` files a fake kernel under an op's name, not a backend)
    root = _registry_project(tmp_path, 'register_pre_permute("ns::gemm", "ns::deep_gemm")')
    assert _copy_finding(migrate_json(root))["severity"] == "error"


def test_a_finding_merged_with_a_place_outside_the_registration_is_not_split(tmp_path):
    # (one import of the same name in an unregistered public helper too: the merged finding stays
    # one error, with no info piece split off it)
    extra = ("\n\ndef warm_copy(arr):\n    from sgl_kernel.elementwise import copy_to_gpu_no_ce\n"
             "    return copy_to_gpu_no_ce(arr, arr)\n")
    root = _registry_project(tmp_path, 'register_pre_permute("deepep_normal", "deep_gemm")', extra)
    report = migrate_json(root)
    mine = [f for f in report["findings"] if f["path"] == "pkg/moe/runner.py" and f["code"] == "NPU911"]
    assert [(f["line"], f["severity"]) for f in mine] == [(7, "error")], mine
