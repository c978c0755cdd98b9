"""Wave 20, helper h86 (issue #16): round-19 leftovers and a too-wide rule. The fixtures are
written here in the shape of the audited code, not copied from it.

* optparams20.py: CUDA-only code behind a function's own False-default flag that only tests not
  run on an NPU host set (round-19 AZ#6), or an NVIDIA profiler hook behind a flag no call sets
  (AZ#4);
* loaderproof20.py: patcher19's subsystem rule lowers only where the module is proven to run in the
  process that loaded transfer_to_npu (round-20 BE#13, SGLang's encode server);
* testscopes._absent_package: a feature probe named for a disjunction is no package probe.
"""

from __future__ import annotations

import ast

from npu_migrate.patcher19 import PATCHER_PHRASE
from tests.precision_helpers import migrate_json, moot_lines, with_as_written, write_project
from tests.test_h75 import _project as _patcher_project


def _open(report, path):
    # (patcher19's infos whose load lies in the project's NPU layer, test_h75's proj/srt/hw/npu_utils.py,
    # are named scopes since round 23, platformlayer23.py: read as info findings here)
    from npu_migrate.platformlayer23 import STARTUP

    return {(f["line"], f["code"]): f for f in with_as_written(report) if f["path"] == path
            and (not f.get("scope") or STARTUP in f["message"])}


# ------------------------------------------------------------------ optparams20: a helper's flag

HELPER_TEST = '''\
import pytest
import torch

from proj.platform import current_platform


def run_backend(x, scale: float = 1.0, use_graph: bool = False):
    y = x * scale
    if use_graph:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = x * scale
    return y


def _check(x, use_graph: bool = False):
    return run_backend(x, use_graph=use_graph)


def test_plain():
    assert _check(torch.ones(2)) is not None
    assert run_backend(torch.ones(2), 2.0, False) is not None


@pytest.mark.skipif(not current_platform.is_cuda(), reason="CUDA graphs")
@pytest.mark.parametrize("use_graph", [False, True])
def test_graph(use_graph):
    def run(n, use_graph=False):
        return _check(torch.ones(n), use_graph=use_graph)

    assert run(2, use_graph) is not None
    assert run_backend(torch.ones(2), use_graph=True) is not None
'''

PLATFORM = '''\
class _Platform:
    def is_cuda(self):
        return False


current_platform = _Platform()
'''


def _helper_project(tmp_path, text=HELPER_TEST):
    return write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/platform.py": PLATFORM,
        "tests/test_backend.py": text,
    })


def test_flag_set_only_by_skipped_tests_becomes_a_scope(tmp_path):
    report = migrate_json(_helper_project(tmp_path))
    assert not _open(report, "tests/test_backend.py")
    scopes = moot_lines(report["skipped"], "NPU202", "tests/test_backend.py")
    assert 10 in scopes and 11 in scopes
    assert "in a helper whose `if use_graph:` branch only tests not run on an NPU host reach: " \
        "`not current_platform.is_cuda()`" in scopes[10]


def test_flag_set_by_a_test_that_runs_on_npu_stays_reported(tmp_path):
    text = HELPER_TEST.replace("    assert run_backend(torch.ones(2), 2.0, False) is not None\n",
                               "    assert run_backend(torch.ones(2), 2.0, True) is not None\n")
    found = _open(migrate_json(_helper_project(tmp_path, text)), "tests/test_backend.py")
    assert found[(10, "NPU202")]["severity"] == "error"


def test_flag_forwarded_from_a_running_test_stays_reported(tmp_path):
    # the forwarding helper's own flag is set by a test that runs on the NPU
    text = HELPER_TEST.replace("    assert _check(torch.ones(2)) is not None\n",
                               "    assert _check(torch.ones(2), use_graph=True) is not None\n")
    found = _open(migrate_json(_helper_project(tmp_path, text)), "tests/test_backend.py")
    assert found[(10, "NPU202")]["severity"] == "error"


def test_flag_passed_through_kwargs_stays_reported(tmp_path):
    text = HELPER_TEST.replace("    assert _check(torch.ones(2)) is not None\n",
                               "    assert run_backend(torch.ones(2), **{'use_graph': True}) is not None\n")
    found = _open(migrate_json(_helper_project(tmp_path, text)), "tests/test_backend.py")
    assert found[(10, "NPU202")]["severity"] == "error"


# ------------------------------------------------------------ optparams20: an Nsight opt-in hook

PROFILE = '''\
import torch
from torch.profiler import ProfilerActivity, profile


def get_profile_context(enable, warmup, active, nsys=False):
    class Dummy:
        def step(self):
            pass

    class NsysProfiler:
        def __init__(self):
            self.n = 0

        def step(self):
            if self.n == warmup:
                torch.cuda.cudart().cudaProfilerStart()
            elif self.n == warmup + active:
                torch.cuda.cudart().cudaProfilerStop()
            self.n += 1

    if enable:
        if nsys:
            return NsysProfiler()
        return profile(activities=[ProfilerActivity.CPU])
    return Dummy()


def capture(fn, use_graph=False):
    if use_graph:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
    return fn()
'''


def test_nsight_hook_under_an_unset_flag_is_info(tmp_path):
    root = write_project(tmp_path, {"proj/__init__.py": "", "proj/perf.py": PROFILE})
    found = _open(migrate_json(root), "proj/perf.py")
    hook = found[(16, "NPU202")]
    assert hook["severity"] == "info"
    assert "an opt-in NVIDIA profiler path: `NsysProfiler`, used only under `if nsys:`, where `nsys` " \
        "defaults to False and no call in the run sets it" in hook["message"]
    assert hook["message"].endswith("(also at line 18)")
    # not a profiler hook: a library's user may set the flag, the finding stays
    assert found[(30, "NPU202")]["severity"] == "error"


def test_nsight_hook_with_a_caller_setting_the_flag_stays_reported(tmp_path):
    root = write_project(tmp_path, {
        "proj/__init__.py": "", "proj/perf.py": PROFILE,
        "proj/train.py": "from proj.perf import get_profile_context\n\n"
                         "ctx = get_profile_context(True, 1, 2, nsys=args_nsys())\n",
    })
    found = _open(migrate_json(root), "proj/perf.py")
    assert found[(16, "NPU202")]["severity"] == "error"


# ------------------------------------------------------------- loaderproof20: the subsystem rule

LAUNCHER = '''\
def main(mode):
    if mode == "encode":
        from proj.srt.serve.encode_server import launch

        launch()
'''

ENCODE = '''\
import torch


def launch():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
        pass
'''


def _subsystem_project(tmp_path):
    root = _patcher_project(tmp_path)
    (root / "proj/srt/utils_bench.py").write_text(ENCODE.replace("def launch", "def bench"))
    (root / "proj/srt/serve").mkdir()
    (root / "proj/srt/serve/__init__.py").write_text("")
    (root / "proj/srt/serve/encode_server.py").write_text(ENCODE)
    (root / "proj/launch.py").write_text(LAUNCHER)
    return root


def test_subsystem_module_without_a_proven_import_keeps_its_finding(tmp_path):
    root = _subsystem_project(tmp_path)
    (root / "proj/srt/models/registry.py").unlink()  # (no scan of the models' package)
    report = migrate_json(root)
    # a model module nothing imports and no registry scans
    assert _open(report, "proj/srt/models/model.py")[(5, "NPU202")]["severity"] == "error"
    # a helper no module imports, and a server only a launcher's function (no loader there) imports
    for path in ("proj/srt/utils_bench.py", "proj/srt/serve/encode_server.py"):
        finding = _open(report, path)[(5, "NPU935")]
        assert finding["severity"] == "warning" and PATCHER_PHRASE not in finding["message"]
    # a module that imports the loader stays lowered
    assert _open(report, "proj/bench.py")[(7, "NPU935")]["severity"] == "info"


def test_module_imported_only_from_proven_modules_and_scanned_models_are_lowered(tmp_path):
    root = _subsystem_project(tmp_path)
    # the runner imports the model registry (test_h75's fixture), which scans its own package's
    # modules; and now the server too
    runner = root / "proj/srt/executor/runner.py"
    runner.write_text(runner.read_text() + "\n\ndef load():\n    from proj.srt.serve.encode_server import launch\n\n"
                      "    launch()\n")
    launcher = root / "proj/launch.py"
    launcher.write_text(launcher.read_text().replace("from proj.srt.serve.encode_server import launch",
                                                     "from proj.srt.executor.runner import load as launch"))
    report = migrate_json(root)
    model = _open(report, "proj/srt/models/model.py")[(5, "NPU202")]
    assert model["severity"] == "info" and PATCHER_PHRASE in model["message"]
    # imported only by the runner (the loader) now
    assert _open(report, "proj/srt/serve/encode_server.py")[(5, "NPU935")]["severity"] == "info"
    # still imported by nobody
    assert _open(report, "proj/srt/utils_bench.py")[(5, "NPU935")]["severity"] == "warning"


def test_model_that_imports_its_scanning_registry_is_still_proven(tmp_path):
    # the model module imports the registry that scans it: a cycle back, neither proof nor disproof
    root = _subsystem_project(tmp_path)
    model = root / "proj/srt/models/model.py"
    model.write_text("from proj.srt.models.registry import import_models  # noqa: F401\n" + model.read_text())
    found = _open(migrate_json(root), "proj/srt/models/model.py")
    assert found[(6, "NPU202")]["severity"] == "info"


# ----------------------------------------------------------- testscopes: a strict feature probe

def test_feature_probe_named_for_a_disjunction_is_no_package_probe():
    from npu_migrate.testscopes import _absent_package

    call = ast.parse("f()").body[0].value
    assert _absent_package("has_flashinfer_cutlass_fused_moe", call) is False
    assert _absent_package("has_cutlass_or_numpy", call) is None
    assert _absent_package("has_flashinfer_or_fallback", call) is None


def test_disjunction_probe_skip_keeps_the_test_running(tmp_path):
    text = '''\
import pytest
import torch

from proj.caps import {probe}


@pytest.mark.skipif(not {probe}(), reason="needs it")
def test_graph():
    torch.cuda.CUDAGraph()
'''
    for probe, severity in (("has_flashinfer_trtllm_moe", "info"), ("has_flashinfer_or_numpy", "error")):
        root = write_project(tmp_path / probe, {"proj/__init__.py": "", "proj/caps.py": f"def {probe}():\n    return True\n",
                                                "tests/test_probe.py": text.format(probe=probe)})
        report = migrate_json(root)
        found = _open(report, "tests/test_probe.py")
        if severity == "info":
            assert not found and moot_lines(report["skipped"], "NPU202", "tests/test_probe.py")
        else:
            assert found[(9, "NPU202")]["severity"] == "error"


# ---------------------------------- optparams20: skips an NPU host takes that the scopes miss

MEMBER_TEST = '''\
import pytest
import torch

from tests.test_backend import run_backend

BACKENDS = ["flash", "{package}"]
try:
    import {package}  # noqa: F401
except ImportError:
    BACKENDS.remove("{package}")


def _require_graphs():
    """CUDA graphs only."""
    version = torch.version.cuda
    if torch.version.cuda is None or version < "12":
        pytest.skip("needs CUDA graphs")


@pytest.mark.skipif("{package}" not in BACKENDS or torch.backends.mps.is_available(), reason="needs it")
def test_member():
    assert run_backend(torch.ones(2), use_graph=True) is not None


def test_required():
    _require_graphs()
    assert run_backend(torch.ones(2), use_graph=True) is not None
'''


def test_member_removed_where_a_cuda_package_is_missing_and_a_skipping_helper(tmp_path):
    # the helper's only True callers: a test skipped when flashinfer (no NPU build) failed to
    # import and so left the list, and a test that first calls a helper skipping off CUDA
    text = HELPER_TEST.replace("    assert run_backend(torch.ones(2), use_graph=True) is not None\n", "")
    root = write_project(tmp_path, {
        "proj/__init__.py": "", "proj/platform.py": PLATFORM, "tests/__init__.py": "",
        "tests/test_backend.py": text, "tests/test_member.py": MEMBER_TEST.format(package="flashinfer"),
    })
    report = migrate_json(root)
    assert not _open(report, "tests/test_backend.py")
    assert 10 in moot_lines(report["skipped"], "NPU202", "tests/test_backend.py")


def test_member_removed_for_a_package_with_an_npu_build_stays_reported(tmp_path):
    text = HELPER_TEST.replace("    assert run_backend(torch.ones(2), use_graph=True) is not None\n", "")
    root = write_project(tmp_path, {
        "proj/__init__.py": "", "proj/platform.py": PLATFORM, "tests/__init__.py": "",
        "tests/test_backend.py": text, "tests/test_member.py": MEMBER_TEST.format(package="numpy"),
    })
    assert _open(migrate_json(root), "tests/test_backend.py")[(10, "NPU202")]["severity"] == "error"


# ------------------------------------------- probedplugins20: a plugin whose load() is probed

PLUGIN = '''\
class _Extension:
    pass


class FastAttnCudaExtension(_Extension):
    def is_available(self) -> bool:
        try:
            import torch  # noqa: F401
            from flash_attn.bert_padding import pad_input  # noqa: F401
            ok = True
        except:  # noqa: E722
            ok = False
        return ok

    def load(self):
        from flash_attn.bert_padding import index_first_axis, pad_input
        {extra}
        return index_first_axis, pad_input
'''

NPU_PLUGIN = '''\
class FastAttnNpuExtension:
    def is_available(self):
        return True

    def load(self):
        return None
'''

LOADER = '''\
from proj.ext.cuda import FastAttnCudaExtension
from proj.ext.npu import FastAttnNpuExtension


class Loader:
    REGISTRY = [FastAttnNpuExtension, FastAttnCudaExtension]

    def load(self):
        exts = [cls() for cls in self.REGISTRY]
        usable = [ext for ext in exts if ext.is_available()]
        return usable[0].load()
'''


def _plugin_project(tmp_path, extra="", more=None):
    return write_project(tmp_path, {
        "proj/__init__.py": "", "proj/ext/__init__.py": "",
        "proj/ext/cuda.py": PLUGIN.replace("{extra}", extra),
        "proj/ext/npu.py": NPU_PLUGIN, "proj/loader.py": LOADER, **(more or {}),
    })


def _flash_findings(report):
    return {k: f for k, f in _open(report, "proj/ext/cuda.py").items() if k[1] == "NPU502"}


def test_plugin_load_repeating_its_probe_is_a_scope(tmp_path):
    report = migrate_json(_plugin_project(tmp_path))
    assert not _flash_findings(report)
    scope = [s for s in report["skipped"] if s["path"] == "proj/ext/cuda.py" and "start_line" in s]
    assert scope and "`FastAttnCudaExtension.is_available()` imports `flash_attn.bert_padding` in a `try` " \
        "that answers False where it fails, and proj/loader.py loads only available plugins, beside " \
        "`FastAttnNpuExtension`" in scope[0]["reason"]


def test_plugin_load_importing_what_the_probe_does_not_stays_reported(tmp_path):
    extra = "from flash_attn.layers.rotary import apply_rotary_emb  # noqa: F401"
    found = _flash_findings(migrate_json(_plugin_project(tmp_path, extra)))
    assert any(f["severity"] == "error" for f in found.values())


def test_plugin_loaded_directly_stays_reported(tmp_path):
    more = {"proj/direct.py": "from proj.ext.cuda import FastAttnCudaExtension\n\nFN = FastAttnCudaExtension().load()\n"}
    found = _flash_findings(migrate_json(_plugin_project(tmp_path, more=more)))
    assert any(f["severity"] == "error" for f in found.values())


# ------------------------------------------ optionalext: an extension built only under a CUDA test

def test_extension_loaded_only_behind_a_cuda_test_is_a_named_scope(tmp_path):
    # round-19 AZ#21: the extension never builds on an NPU host: a named scope, not an info finding;
    # an extension loaded unconditionally keeps its error
    from tests.test_precision_optionalext import CPP_INIT, CUDA_INIT, EAGER_INIT, EXT_INIT, KERNEL

    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/ext/__init__.py": EXT_INIT, "pkg/ext/cpp/__init__.py": CPP_INIT,
        "pkg/ext/cuda/__init__.py": CUDA_INIT, "pkg/ext/cuda/unpack.cu": KERNEL % 1,
        "pkg/eager/__init__.py": EAGER_INIT, "pkg/eager/eager.cu": KERNEL % 3, "pkg/user.py": "import pkg.eager\n",
    }))
    found = {f["path"]: f for f in report["findings"] if f["code"] == "NPU912"}
    assert "pkg/ext/cuda/unpack.cu" not in found and found["pkg/eager/eager.cu"]["severity"] == "error"
    assert 1 in moot_lines(report["skipped"], "NPU912", "pkg/ext/cuda/unpack.cu")
