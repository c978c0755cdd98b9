"""Issue #16: backends and kernels the project itself never selects on an NPU host (cross-file
dispatch, npu_migrate/dispatch.py, read by wholeprogram._never_imported).

Shapes found by the round-7 audits of SGLang, each reproduced with a small fixture of our own:
- a registry of backends (`@register_attention_backend("fa3")` on a factory importing the
  backend's module) and a project default that forces the NPU backend on an NPU host
  (`args.attention_backend = "ascend"` in a function of an NPU module): the modules only the other
  factories import (and what only they import) become named skipped scopes; so do those a dict
  keyed by the same names reaches only under another name; a backend module also imported from
  shared code, the NPU backend, and a registry whose NPU default is only conditional keep theirs;
- a module imported only under `if not _is_npu:` (`_is_npu = is_npu()`): a skipped scope; one
  imported under `if _is_npu:` keeps its findings.
"""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, moot_lines, write_project


def _findings(report: dict, code: str, path: str | None = None) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code and (path is None or f["path"] == path)]


FP8_KERNEL = """\
import torch


def quantize(x):
    return x.to(torch.float8_e4m3fn)
"""

REGISTRY = """\
BACKENDS = {}


def register_attention_backend(name):
    def decorator(fn):
        BACKENDS[name] = fn
        return fn

    return decorator


@register_attention_backend("fastmha")
def create_fastmha(runner):
    from proj.attention.fastmha_backend import FastBackend

    return FastBackend(runner)


@register_attention_backend("shared")
def create_shared(runner):
    from proj.attention.shared_backend import SharedBackend

    return SharedBackend(runner)


@register_attention_backend("ascend")
def create_ascend(runner):
    from proj.npu.ascend_backend import AscendBackend

    return AscendBackend(runner)
"""

NPU_DEFAULTS = """\
def set_default_server_args(args):
    # NPU only works with the ascend backend
    args.attention_backend = "ascend"
    if args.page_size is None:
        args.page_size = 128
"""

DRAFT = """\
class DraftBackendFactory:
    def create_decode_backend(self, name):
        backend_map = {
            "fastmha": self._create_fastmha_decode_backend,
            "shared": self._create_shared_decode_backend,
            "ascend": self._create_ascend_decode_backend,
        }
        return backend_map[name]()

    def _create_fastmha_decode_backend(self):
        from proj.attention.draft_only_backend import DraftBackend

        return DraftBackend()

    def _create_shared_decode_backend(self):
        from proj.attention.shared_backend import SharedBackend

        return SharedBackend()

    def _create_ascend_decode_backend(self):
        from proj.npu.ascend_backend import AscendBackend

        return AscendBackend()

    def warmup(self):
        from proj.attention.warm_backend import WarmBackend

        return self._create_warm_decode_backend(WarmBackend)

    def _create_warm_decode_backend(self, cls):
        return cls()
"""


def _registry_project(tmp_path: Path, defaults: str = NPU_DEFAULTS) -> Path:
    return write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/attention/__init__.py": "",
        "proj/attention/registry.py": REGISTRY,
        "proj/attention/fastmha_backend.py": "import torch\n\nfrom proj.attention.fp8_kv import quantize\n\n\nclass FastBackend:\n"
                                             "    def cast(self, x):\n        return x.to(torch.float8_e4m3fn)\n",
        "proj/attention/fp8_kv.py": "# only the fast backend imports it\n" + FP8_KERNEL,
        "proj/attention/shared_backend.py": "# shared\n" + FP8_KERNEL + "\n\nclass SharedBackend:\n    pass\n",
        "proj/attention/draft_only_backend.py": "# draft\n" + FP8_KERNEL + "\n\nclass DraftBackend:\n    pass\n",
        "proj/attention/warm_backend.py": "# warm\n" + FP8_KERNEL + "\n\nclass WarmBackend:\n    pass\n",
        "proj/npu/__init__.py": "",
        "proj/npu/ascend_backend.py": "# npu\n" + FP8_KERNEL + "\n\nclass AscendBackend:\n    pass\n",
        "proj/npu/utils.py": defaults,
        "proj/speculative/draft_utils.py": DRAFT,
        # shared code imports the shared backend unconditionally
        "proj/layers/common.py": "from proj.attention.shared_backend import SharedBackend\n",
    })


def test_backend_registered_under_a_name_the_npu_default_never_selects_is_a_skipped_scope(tmp_path: Path) -> None:
    report = migrate_json(_registry_project(tmp_path))
    assert not _findings(report, "NPU913", "proj/attention/fastmha_backend.py")
    backend = moot_lines(report["skipped"], "NPU913", "proj/attention/fastmha_backend.py")
    assert backend and ('proj/attention/registry.py:14 under `@register_attention_backend("fastmha")`, while an NPU '
                        'host selects "ascend" (proj/npu/utils.py:3)') in next(iter(backend.values()))
    fast = moot_lines(report["skipped"], "NPU913", "proj/attention/fp8_kv.py")
    assert fast, report["findings"]
    assert "a module an NPU host never imports" in next(iter(fast.values()))
    assert not _findings(report, "NPU913", "proj/attention/fp8_kv.py")
    # a method a dict reaches only under another backend's name
    draft = moot_lines(report["skipped"], "NPU913", "proj/attention/draft_only_backend.py")
    assert draft and ('the "fastmha" entry of a dict keyed by `@register_attention_backend` names, while an NPU host '
                     'selects "ascend" (proj/npu/utils.py:3)') in next(iter(draft.values()))
    # still reported: the NPU backend itself, a backend shared code imports, one a method called
    # outside the dict imports
    for path in ("proj/npu/ascend_backend.py", "proj/attention/shared_backend.py", "proj/attention/warm_backend.py"):
        assert [f["severity"] for f in _findings(report, "NPU913", path)] == ["error"], path


def test_registry_without_a_forced_npu_default_keeps_its_findings(tmp_path: Path) -> None:
    # only a default where the user gave none: another backend may still be chosen on an NPU host
    conditional = NPU_DEFAULTS.replace('    args.attention_backend = "ascend"',
                                       '    if args.attention_backend is None:\n        args.attention_backend = "ascend"')
    report = migrate_json(_registry_project(tmp_path, conditional))
    for path in ("proj/attention/fp8_kv.py", "proj/attention/fastmha_backend.py", "proj/attention/draft_only_backend.py"):
        assert [f["severity"] for f in _findings(report, "NPU913", path)] == ["error"], path
    assert not moot_lines(report["skipped"], "NPU913", "proj/attention/fp8_kv.py")


def test_registry_default_forced_under_an_npu_check_counts(tmp_path: Path) -> None:
    # the same default in shared code, directly under `if is_npu():`
    forced = ("from proj.platform import is_npu\n\n\nclass ServerArgs:\n    def resolve(self):\n"
              "        if is_npu():\n            self.attention_backend = \"ascend\"\n")
    root = _registry_project(tmp_path, "")
    (root / "proj/server_args.py").write_text(forced)
    report = migrate_json(root)
    fast = moot_lines(report["skipped"], "NPU913", "proj/attention/fastmha_backend.py")
    assert fast and '"ascend" (proj/server_args.py:7)' in next(iter(fast.values()))
    assert not _findings(report, "NPU913", "proj/attention/fp8_kv.py")
    assert [f["severity"] for f in _findings(report, "NPU913", "proj/npu/ascend_backend.py")] == ["error"]


def test_module_imported_only_off_npu_by_the_project_flag_is_a_skipped_scope(tmp_path: Path) -> None:
    indexer = """\
from proj.platform import is_npu

_is_npu = is_npu()


def forward(x):
    if not _is_npu:
        from proj.kernels.tile_kernel import quantize

        return quantize(x)
    if _is_npu:
        from proj.kernels.npu_kernel import quantize

        return quantize(x)
    return x
"""
    root = write_project(tmp_path, {
        "proj/__init__.py": "",
        # (a probe the tool cannot answer: a literal `return False` would make `if _is_npu:` below
        # provably untaken, and callees22 rightly scopes what only it reaches)
        "proj/platform.py": "import torch\n\n\ndef is_npu():\n    return hasattr(torch, \"npu\")\n",
        "proj/indexer.py": indexer,
        "proj/kernels/__init__.py": "",
        "proj/kernels/tile_kernel.py": "# tile\n" + FP8_KERNEL,
        "proj/kernels/npu_kernel.py": "# npu\n" + FP8_KERNEL,
    })
    report = migrate_json(root)
    tile = moot_lines(report["skipped"], "NPU913", "proj/kernels/tile_kernel.py")
    assert tile and "proj/indexer.py:8 under `not _is_npu`" in next(iter(tile.values()))
    assert not _findings(report, "NPU913", "proj/kernels/tile_kernel.py")
    # the module imported where an NPU host goes keeps its finding
    assert [f["severity"] for f in _findings(report, "NPU913", "proj/kernels/npu_kernel.py")] == ["error"]


def test_a_flag_not_bound_to_is_npu_decides_nothing(tmp_path: Path) -> None:
    indexer = "_is_npu = False\n\n\ndef forward(x):\n    if not _is_npu:\n        from proj.tile_kernel import quantize\n\n        return quantize(x)\n"
    root = write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/indexer.py": indexer,
        "proj/tile_kernel.py": FP8_KERNEL,
    })
    report = migrate_json(root)
    assert [f["severity"] for f in _findings(report, "NPU913", "proj/tile_kernel.py")] == ["error"]


ENUM = """\
from enum import IntEnum, auto


class ForwardMethod(IntEnum):
    MHA = auto()
    MLA = auto()
    MLA_FUSED = auto()
    MLA_ROCM = auto()
"""

HANDLER = """\
from proj.methods import ForwardMethod
from proj.utils import is_hip

_is_hip = is_hip()


def dispatch_subtype(attn, batch):
    if _is_hip:
        if attn.fused_decode and batch.is_decode():
            return ForwardMethod.MLA_FUSED
        return ForwardMethod.MLA
    return ForwardMethod.MLA if batch.is_decode() else ForwardMethod.MHA
"""

MODEL = """\
import torch

from proj.methods import ForwardMethod


class Attention(torch.nn.Module):
    def forward(self, x, method):
        if method == ForwardMethod.MHA:
            state = self.forward_normal(x)
        elif method == ForwardMethod.MLA_FUSED:
            state = self.forward_fused_prepare(x)
        else:
            state = x
        return state

    def forward_normal(self, x):
        return x

    def forward_fused_prepare(self, x):
        y = x.to(torch.float8_e4m3fn)
        return self._fused_core(y)

    def _fused_core(self, y):
        return y.view(torch.float8_e4m3fn)
"""

# the same shape on a value an NPU host produces
MODEL_B = MODEL.replace("MLA_FUSED", "MLA").replace("class Attention", "class AttentionB").replace(
    "forward_fused_prepare", "forward_absorb").replace("_fused_core", "_absorb_core")


def test_branch_on_an_enum_value_produced_only_off_npu_is_a_skipped_scope(tmp_path: Path) -> None:
    root = write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/utils.py": "def is_hip():\n    return False\n",
        "proj/methods.py": ENUM,
        "proj/handler.py": HANDLER,
        "proj/model.py": MODEL,
        "proj/model_b.py": MODEL_B,
    })
    report = migrate_json(root)
    moot = moot_lines(report["skipped"], "NPU913", "proj/model.py")
    assert 20 in moot, (moot, report["findings"])
    assert ("`forward_fused_prepare`, called only at line 11 under `method == ForwardMethod.MLA_FUSED`, a value "
            "produced only under `_is_hip` (proj/handler.py:10)") in moot[20]
    assert not _findings(report, "NPU913", "proj/model.py")
    # a value an NPU host may produce keeps its methods' findings
    assert [f["severity"] for f in _findings(report, "NPU913", "proj/model_b.py")] == ["error"]


def test_branches_after_one_true_on_npu_are_skipped_scopes(tmp_path: Path) -> None:
    ops = """\
import torch

from proj.platform import is_npu

_is_npu = is_npu()


def quantize(x):
    if _is_npu:
        return x.to(torch.int8)
    elif x.is_floating_point():
        return x.to(torch.float8_e4m3fn)
    else:
        return x.to(torch.float8_e5m2)
"""
    other = """\
import torch


def maybe_cast(x, use_fp8):
    if use_fp8:
        return x.to(torch.float8_e4m3fn)
    else:
        return x
"""
    root = write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/platform.py": "def is_npu():\n    return False\n",
        "proj/ops.py": ops,
        "proj/other.py": other,
    })
    report = migrate_json(root)
    moot = moot_lines(report["skipped"], "NPU913", "proj/ops.py")
    assert 12 in moot and "in a branch an NPU host does not take: not `_is_npu`" in moot[12], (moot, report["findings"])
    assert not _findings(report, "NPU913", "proj/ops.py")
    # an `else` after a branch an NPU host may or may not take keeps its finding
    assert [f["severity"] for f in _findings(report, "NPU913", "proj/other.py")] == ["error"]


def test_flag_imported_from_the_project_utils_counts_and_a_rebound_one_does_not(tmp_path: Path) -> None:
    user = """\
import torch

from proj.utils import _is_npu


def cast(x):
    if not _is_npu:
        return x.to(torch.float8_e4m3fn)
    return x
"""
    root = write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/platform.py": "def is_npu():\n    return False\n",
        "proj/utils.py": "from proj.platform import is_npu\n\n_is_npu = is_npu()\n",
        "proj/user.py": user,
        # `_use_npu` is bound to something else somewhere in the project: not a flag
        "proj/other_utils.py": "from proj.platform import is_npu\n\n_use_npu = is_npu()\n",
        "proj/cfg.py": "_use_npu = False\n",
        "proj/user2.py": user.replace("_is_npu", "_use_npu").replace("proj.utils", "proj.other_utils"),
    })
    report = migrate_json(root)
    moot = moot_lines(report["skipped"], "NPU913", "proj/user.py")
    assert 8 in moot and "does not take: `not _is_npu`" in moot[8], (moot, report["findings"])
    assert [f["severity"] for f in _findings(report, "NPU913", "proj/user2.py")] == ["error"]


def test_bare_backend_name_in_a_string_is_no_dynamic_import(tmp_path: Path) -> None:
    # sglang: `moe_runner_backend = "triton_kernel"` is a value, not the module nsa/triton_kernel.py
    indexer = """\
from proj.platform import is_npu

_is_npu = is_npu()


def quant(x):
    if not _is_npu:
        from proj.nsa.triton_kernel import act_quant

        return act_quant(x)
    return x
"""
    root = write_project(tmp_path, {
        "proj/__init__.py": "",
        # (a probe the tool cannot answer: a literal `return False` would make `if _is_npu:` below
        # provably untaken, and callees22 rightly scopes what only it reaches)
        "proj/platform.py": "import torch\n\n\ndef is_npu():\n    return hasattr(torch, \"npu\")\n",
        "proj/indexer.py": indexer,
        "proj/nsa/__init__.py": "",
        "proj/nsa/triton_kernel.py": FP8_KERNEL,
        "proj/nsa/tile_kernel.py": "# tile\n" + FP8_KERNEL,
        "proj/indexer2.py": indexer.replace("triton_kernel", "tile_kernel"),
        "proj/args.py": 'MOE_BACKEND = "triton_kernel"\n',
        # a bare name in a file that imports by name may be a dynamic import: the module stays
        "proj/loader.py": 'import importlib\n\nNAMES = ["tile_kernel"]\nMODS = [importlib.import_module(n) for n in NAMES]\n',
        # (`importlib.util.find_spec` loads nothing: a bare name beside it is a value)
        "proj/probe.py": 'import importlib.util\n\nHAS = importlib.util.find_spec("mooncake")\nB = "triton_kernel"\n',
    })
    report = migrate_json(root)
    moot = moot_lines(report["skipped"], "NPU913", "proj/nsa/triton_kernel.py")
    assert moot and "proj/indexer.py:8 under `not _is_npu`" in next(iter(moot.values())), report["findings"]
    assert [f["severity"] for f in _findings(report, "NPU913", "proj/nsa/tile_kernel.py")] == ["error"]
