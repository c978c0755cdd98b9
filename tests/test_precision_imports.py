"""Issue #16: ecosystem import findings that were false or redundant on real projects.

- a guarded availability probe (`try: import triton; HAS_TRITON = True except ImportError: ...`)
  was an error: on an NPU host the package is missing and the fallback runs, so it is info with
  that reason; the code that uses the package keeps its own finding;
- a block under `if importlib.util.find_spec("flash_attn"):` / `if is_flash_attn_available():`
  is a branch an NPU host does not take (info), and the references to the imported module inside
  it are folded into the import's finding;
- `from .ops_cuda import f` and `from .._cpp_lib import _built_with_cuda` of a `.py` module of
  the project were taken for compiled extensions (NPU911);
- vLLM's CUDA custom-op libraries (`vllm._C`, `vllm._custom_ops`) were NPU916 ("runs on Ascend
  through vllm-ascend"), which they do not: NPU911.
All fixtures are written here, each with a nearby true case that stays reported.
"""

from __future__ import annotations

from pathlib import Path

from npu_migrate.probes import GUARDED

from .precision_helpers import migrate_json, with_as_written, write_project


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    return write_project(tmp_path, files, dedent=True)


def _findings(root: Path) -> list[dict]:
    report = migrate_json(root)
    _LAST_SKIPPED[:] = report["skipped"]
    return with_as_written(report)  # (guarded imports that fall back: named scopes, read back)


_LAST_SKIPPED: list[dict] = []  # the `skipped` list of the last _findings run


def _moot(path: str, code: str) -> list[dict]:
    """The last run's skipped scopes that a finding of `code` in `path` about code an NPU host
    never runs became (moot.py)."""
    return [s for s in _LAST_SKIPPED if "start_line" in s and s["path"] == path
            and s["reason"].startswith(f"not run on an NPU host ({code}): ")]


def _at(findings: list[dict], path: str, line: int) -> list[dict]:
    return [f for f in findings if f["path"] == path and f["line"] == line]


def test_guarded_probes_are_info_and_uses_stay_errors(tmp_path):
    root = _project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/flags.py": """\
            try:
                import triton  # noqa

                HAS_TRITON = True
            except ImportError:
                HAS_TRITON = False
                print("please install triton")
            """,
        "pkg/probe.py": """\
            def is_fa_available() -> bool:
                try:
                    import flash_attn

                    return flash_attn.__version__ >= "2.7.4"
                except Exception:
                    return False
            """,
        "pkg/register.py": """\
            REGISTRY = {}


            def register(cls):
                return lambda fn: REGISTRY.setdefault(cls, fn)


            try:
                import apex

                register(apex.normalization.FusedLayerNorm)(len)
            except (ImportError, AttributeError):
                pass
            """,
        "pkg/deps.py": """\
            import importlib.metadata

            from packaging.version import Version


            class Kernel:
                @classmethod
                def check_deps(cls) -> bool:
                    return True


            class Liger(Kernel):
                @classmethod
                def check_deps(cls) -> bool:
                    try:
                        import liger_kernel  # noqa: F401

                        return super().check_deps()
                    except ImportError:
                        return False


            try:
                import bitsandbytes as bnb

                try:
                    BNB_VERSION = Version(bnb.__version__)
                except AttributeError:
                    BNB_VERSION = Version(importlib.metadata.version("bitsandbytes"))
                HAS_4BIT = BNB_VERSION >= Version("0.39.0")
            except ImportError:
                HAS_4BIT = False
            """,
        # true cases: a guarded import whose body defines a kernel, and an unguarded one
        "pkg/kernel.py": """\
            try:
                import triton

                @triton.jit
                def kernel(x):
                    pass
            except ImportError:
                kernel = None
            """,
        "pkg/plain.py": """\
            import apex

            def norm(x):
                return apex.normalization.FusedLayerNorm(x)
            """,
    })
    findings = _findings(root)
    for path, line, code in (("pkg/flags.py", 2, "NPU910"), ("pkg/probe.py", 3, "NPU502")):
        [found] = [f for f in _at(findings, path, line) if f["code"] == code]
        assert found["severity"] == "info" and GUARDED in found["message"], found
    # read only by a registration: nothing of apex runs on an NPU host, a named skipped scope
    # (fallbacks.py, tests/test_precision_probes2.py)
    assert not [f for f in findings if f["path"] == "pkg/register.py"]
    assert _moot("pkg/register.py", "NPU902")
    deps = [f for f in findings if f["path"] == "pkg/deps.py"]
    assert {(f["line"], f["code"]) for f in deps} == {(16, "NPU918"), (24, "NPU914")}, deps
    # (Liger-Kernel is info of its own, NPU918: it runs on Ascend with Triton-Ascend)
    assert all(f["severity"] == "info" and (GUARDED in f["message"] or f["code"] == "NPU918") for f in deps), deps
    kernel = [f for f in findings if f["path"] == "pkg/kernel.py" and f["code"] == "NPU910"]
    assert kernel and all(f["severity"] == "error" for f in kernel), kernel
    plain = [f for f in findings if f["path"] == "pkg/plain.py" and f["code"] == "NPU902"]
    assert plain and plain[0]["severity"] == "error" and GUARDED not in plain[0]["message"]


def test_probe_beside_a_reported_use_is_merged_into_it(tmp_path):
    root = _project(tmp_path, {
        "moe.py": """\
            import triton


            @triton.jit
            def kernel(x):
                pass


            def check_deps() -> bool:
                try:
                    import triton  # noqa: F401

                    return True
                except ImportError:
                    return False
            """,
    })
    findings = [f for f in _findings(root) if f["code"] == "NPU910"]
    # one finding for the file, at error, that lists the probe's line among its places
    assert len(findings) == 1 and findings[0]["severity"] == "error", findings
    assert 11 in [line for line, _col, _src in findings[0].get("also", [])]


def test_find_spec_branch_is_untaken_and_its_references_fold_into_the_import(tmp_path):
    root = _project(tmp_path, {
        "fa.py": """\
            import importlib.util

            _impl = None
            if importlib.util.find_spec("flash_attn"):
                import flash_attn
                import flash_attn.flash_attn_interface

                if hasattr(flash_attn.flash_attn_interface, "flash_attn_cuda"):
                    _impl = flash_attn.flash_attn_interface.flash_attn_cuda
                else:
                    _impl = flash_attn.flash_attn_interface.flash_attn_gpu
            """,
        "avail.py": """\
            from .utils import is_xformers_available

            if is_xformers_available():
                import xformers.ops
            """,
        # triton-ascend installs `triton` on an NPU host: its branch may be taken there
        "tri.py": """\
            import importlib.util

            if importlib.util.find_spec("triton") is not None:
                import triton
            """,
        # true case: the same import outside such a branch
        "direct.py": """\
            import flash_attn.flash_attn_interface

            fn = flash_attn.flash_attn_interface.flash_attn_gpu
            """,
    })
    findings = _findings(root)
    assert not [f for f in findings if f["path"] == "fa.py"]
    # one construct (the import, with the others as its places), never run on an NPU host: one
    # named scope from the import to its last folded place
    [scope] = _moot("fa.py", "NPU502")
    assert (scope["start_line"], scope["end_line"]) == (5, 11) and "does not take" in scope["reason"]
    assert not [f for f in findings if f["path"] == "avail.py" and f["code"] == "NPU915"]
    assert _moot("avail.py", "NPU915")
    [tri] = [f for f in findings if f["path"] == "tri.py"]
    assert tri["code"] == "NPU910" and tri["severity"] == "error"
    direct = [f for f in findings if f["path"] == "direct.py"]
    assert [f["code"] for f in direct] == ["NPU502"] and direct[0]["severity"] == "error"
    assert {line for line, _c, _s in direct[0]["also"]} == {3}


def test_a_use_that_fails_is_not_folded_into_a_probe(tmp_path):
    root = _project(tmp_path, {
        "mix.py": """\
            try:
                import flash_attn

                HAS_FA = True
            except ImportError:
                HAS_FA = False


            def attend(q, k, v):
                return flash_attn.flash_attn_interface.flash_attn_gpu(q, k, v)
            """,
    })
    findings = [f for f in _findings(root) if f["path"] == "mix.py"]
    [probe] = [f for f in findings if f["line"] == 2]
    assert probe["severity"] == "info" and GUARDED in probe["message"]
    use = [f for f in findings if f["line"] == 10]
    assert use and use[0]["severity"] != "info", findings


def test_python_modules_named_like_extensions_are_not_npu911(tmp_path):
    root = _project(tmp_path, {
        "lib/__init__.py": "",
        "lib/ext/__init__.py": "from .inference_ops_cuda import fused_add\n",
        "lib/ext/inference_ops_cuda.py": "def fused_add(a, b):\n    return a + b\n",
        "lib/_cpp_lib.py": """\
            try:
                from . import _C  # noqa

                _built_with_cuda = True
            except ImportError:
                _built_with_cuda = False
            """,
        "lib/ops/__init__.py": "",
        "lib/ops/common.py": "from .._cpp_lib import _built_with_cuda\n",
        "lib/ops/absolute.py": "from lib.ext.inference_ops_cuda import fused_add\n",
        # true case: an extension with no Python module of that name
        "lib/ops/native.py": "from .kernels_cuda import fused_mul\nfrom . import selective_scan_cuda\n",
    })
    findings = [f for f in _findings(root) if f["code"] == "NPU911"]
    paths = {f["path"] for f in findings}
    assert "lib/ext/__init__.py" not in paths and "lib/ops/common.py" not in paths
    assert "lib/ops/absolute.py" not in paths
    native = [f for f in findings if f["path"] == "lib/ops/native.py"]
    assert native and native[0]["severity"] == "error", findings
    # the guarded extension import inside the Python module is still there, as a probe
    [guarded] = [f for f in findings if f["path"] == "lib/_cpp_lib.py"]
    assert guarded["severity"] == "info"


def test_vllm_custom_op_libraries_are_compiled_extensions(tmp_path):
    root = _project(tmp_path, {
        "serve.py": """\
            from vllm import LLM, SamplingParams


            def run(prompt):
                return LLM("m").generate(prompt, SamplingParams())
            """,
        "ops.py": """\
            from vllm import _custom_ops as ops


            def act(x):
                return ops.silu_and_mul(x)
            """,
        "guarded.py": """\
            try:
                import vllm._C  # noqa

                HAS_VLLM_OPS = True
            except ImportError:
                HAS_VLLM_OPS = False
            """,
    })
    findings = _findings(root)
    [serve] = [f for f in findings if f["path"] == "serve.py"]
    assert serve["code"] == "NPU916" and serve["severity"] == "info"
    ops = [f for f in findings if f["path"] == "ops.py" and f["line"] == 1]
    assert [f["code"] for f in ops] == ["NPU911"] and ops[0]["severity"] == "error"
    assert "vllm-ascend" not in ops[0]["message"]
    [guarded] = [f for f in findings if f["path"] == "guarded.py"]
    assert guarded["code"] == "NPU911" and guarded["severity"] == "info" and GUARDED in guarded["message"]


def test_a_guarded_import_used_elsewhere_without_a_finding_is_no_probe(tmp_path):
    root = _project(tmp_path, {
        "amp.py": """\
            try:
                import apex.amp as apex_amp
            except ImportError:
                pass


            class Wrapper:
                def backward(self, loss, optim):
                    with apex_amp.scale_loss(loss, optim) as scaled:
                        scaled.backward()
            """,
        # the `else:` of the try runs when the import worked: code there is a use
        "else_use.py": """\
            try:
                import apex
            except ImportError:
                HAS_APEX = False
            else:
                def norm(x):
                    return apex.normalization.fused_layer_norm(x)
            """,
        # the same probe with no use outside it is one
        "probe_only.py": """\
            try:
                import apex.amp as apex_amp  # noqa

                HAS_APEX = True
            except ImportError:
                HAS_APEX = False
            """,
    })
    findings = _findings(root)
    [amp] = [f for f in findings if f["path"] == "amp.py" and f["line"] == 2]
    assert amp["code"] == "NPU902" and amp["severity"] == "error", amp
    else_use = [f for f in findings if f["path"] == "else_use.py" and f["line"] == 2]
    assert else_use and else_use[0]["severity"] == "error", findings
    [probe] = [f for f in findings if f["path"] == "probe_only.py"]
    assert probe["severity"] == "info" and GUARDED in probe["message"]


def test_members_of_a_package_named_like_an_extension_stay_npu911(tmp_path):
    root = _project(tmp_path, {
        "proj/__init__.py": "",
        "proj/_C/__init__.py": "",
        # `fused_optim` is no module of the run: a compiled library built into the package
        "proj/optim.py": "import torch\nfrom proj._C import fused_optim\n\nDEVICE = torch.device('cuda')\n",
        "proj/layers/__init__.py": "",
        "proj/layers/attn.py": """\
            from flash_attn.bert_padding import unpad_input


            def first(x, mask):
                return unpad_input(x, mask)


            def second(x):
                from flash_attn.bert_padding import pad_input

                return pad_input(x)
            """,
    })
    findings = _findings(root)
    assert [f["line"] for f in findings if f["path"] == "proj/optim.py" and f["code"] == "NPU911"] == [2]
    # imports of one package in two functions are two constructs: not folded
    fa = [f for f in findings if f["path"] == "proj/layers/attn.py" and f["code"] == "NPU502"]
    assert {f["line"] for f in fa} >= {1, 9}, fa
