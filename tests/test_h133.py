"""Helper h133: code only the CUDA platform's worker, model runner or backend choices reach (issue #16,
audit round 28: CB#5, CB#21), each reading paired with its nearest true case that stays reported.

- disabled.py, the `or` mirror of its false-condition reading (CB#5): a CUDA call after a part true
  on an NPU host (`not current_platform.is_cuda_alike() or torch.cuda.x() != "native"`) is never
  evaluated there; the same call before that part is.
- customops26.py (CB#21): an op whose library calls are all dead on an NPU host (a CustomOp's
  `forward_cuda`; a fusion pass bound only under a module-level `if current_platform.is_cuda_alike():`)
  and which a benchmark calls is info naming the benchmark (policy P2); the op's handle kept as data
  (`OP = torch.ops.proj.op.default`, never called) is no call. Nearest true: the same pass imported
  unconditionally, or the handle called, keeps the error."""

from __future__ import annotations

from tests.precision_helpers import findings_at, migrate_json, write_project

# ----------------------------------------------------------------------------- CB#5: `not X or <CUDA call>`
ALLOCATOR = {
    "pkg/__init__.py": "",
    "pkg/worker.py": '''
        from contextlib import contextmanager

        import torch
        from vllm.platforms import current_platform


        @contextmanager
        def scoped_split(max_split_mb):
            if (
                not current_platform.is_cuda_alike()
                or torch.cuda.memory.get_allocator_backend() != "native"
            ):
                yield
                return
            yield max_split_mb


        @contextmanager
        def scoped_split_late(max_split_mb):
            if (
                torch.cuda.memory.get_allocator_backend() != "native"
                or not current_platform.is_cuda_alike()
            ):
                yield
                return
            yield max_split_mb
    ''',
}


def test_cuda_call_after_a_true_part_of_an_or_is_never_evaluated(tmp_path):
    report = migrate_json(write_project(tmp_path, ALLOCATOR, dedent=True))
    scopes = [s for s in report["skipped"] if s.get("path") == "pkg/worker.py" and "start_line" in s]
    assert any(s["start_line"] == 12 and "a CUDA test after a part true on an NPU host in an `or`" in s["reason"]
               and s["reason"].startswith("runs as written on an NPU host (NPU202)") for s in scopes), scopes
    # (nearest true case: the call comes first, so an NPU host evaluates it)
    kept = findings_at(report, "pkg/worker.py", "NPU202")
    assert set(kept) == {22} and kept[22]["severity"] == "error", kept


# ----------------------------------------------------------------------------- CB#21: an op's calls all dead
def _ops_project(pass_import_gated: bool, handle_called: bool) -> dict[str, str]:
    if pass_import_gated:
        manager = '''
            from pkg.platforms import current_platform

            if current_platform.is_cuda_alike():
                from pkg.passes.rope_fusion import RopeFusionPass


            class PassManager:
                def __init__(self, config):
                    self.passes = []
                    if config.fuse_rope:
                        self.passes.append(RopeFusionPass(config))
        '''
    else:
        manager = '''
            from pkg.passes.rope_fusion import RopeFusionPass


            class PassManager:
                def __init__(self, config):
                    self.passes = []
                    if config.fuse_rope:
                        self.passes.append(RopeFusionPass(config))
        '''
    handle_use = "ROPE_OP(positions, query, key)" if handle_called else "ops.append(ROPE_OP)"
    return {
        "pkg/__init__.py": "",
        "pkg/platforms.py": '''
            class Platform:
                def is_cuda_alike(self):
                    return True

            current_platform = Platform()
        ''',
        "pkg/custom_op.py": '''
            import torch
            import torch.nn as nn

            class CustomOp(nn.Module):
                def forward(self, *args):
                    return self.dispatch_forward()(*args)

                def forward_native(self, *args):
                    raise NotImplementedError

                def forward_cuda(self, *args):
                    raise NotImplementedError

                def forward_oot(self, *args):
                    return self.forward_native(*args)

            def register_op(op_name, op_func, mutates_args=()):
                lib = torch.library.Library("proj", "FRAGMENT")
                lib.define(op_name)
                lib.impl(op_name, op_func, "CUDA")
        ''',
        "pkg/rope_common.py": '''
            import torch
            from pkg.custom_op import register_op

            def _fast_rope(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> None:
                from flashinfer.rope import apply_rope_inplace
                apply_rope_inplace(positions, query, key)

            register_op(op_name="fast_rope", op_func=_fast_rope, mutates_args=["query", "key"])
        ''',
        "pkg/rope.py": '''
            import torch
            from pkg.custom_op import CustomOp

            class Rope(CustomOp):
                def __init__(self, use_fast):
                    super().__init__()
                    self.use_fast = use_fast

                def forward_native(self, positions, query, key):
                    return query, key

                def forward_cuda(self, positions, query, key):
                    if self.use_fast:
                        torch.ops.proj.fast_rope(positions, query, key)
                        return query, key
                    return self.forward_native(positions, query, key)
        ''',
        "pkg/passes/__init__.py": "",
        "pkg/passes/matchers.py": f'''
            import torch

            ROPE_OP = torch.ops.proj.fast_rope.default


            def expected_ops(positions, query, key):
                ops = []
                {handle_use}
                return ops


            class RopeMatcher:
                def __init__(self, use_fast):
                    self.use_fast = use_fast

                def pattern(self, positions, query, key):
                    if self.use_fast:
                        torch.ops.proj.fast_rope(positions, query, key)
                    return query, key
        ''',
        "pkg/passes/rope_fusion.py": '''
            from pkg.passes.matchers import RopeMatcher


            class RopeFusionPass:
                def __init__(self, config):
                    self.matcher = RopeMatcher(config.use_fast)
        ''',
        "pkg/passes/manager.py": manager,
        "benchmarks/bench_rope.py": '''
            import torch
            import pkg.rope_common  # noqa: F401


            def run(positions, query, key):
                torch.ops.proj.fast_rope(positions, query, key)


            if __name__ == "__main__":
                run(None, None, None)
        ''',
    }


def test_op_whose_library_calls_are_all_dead_is_info_naming_its_benchmark(tmp_path):
    report = migrate_json(write_project(tmp_path, _ops_project(True, False), dedent=True))
    kept = findings_at(report, "pkg/rope_common.py", "NPU911")
    assert kept[6]["severity"] == "info", kept
    message = kept[6]["message"]
    assert "reached on an NPU host only from tests/benchmarks (benchmarks/bench_rope.py:7)" in message, message
    assert "registered as the op `fast_rope`" in message and "Rope.forward_cuda" in message, message
    assert "`RopeFusionPass` is bound only under the module-level `if current_platform.is_cuda_alike():`" in message


def test_op_reached_through_an_ungated_pass_stays_an_error(tmp_path):
    # (nearest true case: the fusion pass is imported on every platform, so its matcher may run)
    report = migrate_json(write_project(tmp_path, _ops_project(False, False), dedent=True))
    kept = findings_at(report, "pkg/rope_common.py", "NPU911")
    assert kept[6]["severity"] == "error", kept


def test_op_handle_that_is_called_stays_an_error(tmp_path):
    # (nearest true case: the module-level handle is called by a function an NPU host may run)
    report = migrate_json(write_project(tmp_path, _ops_project(True, True), dedent=True))
    kept = findings_at(report, "pkg/rope_common.py", "NPU911")
    assert kept[6]["severity"] == "error", kept


# ----------------------------------------------------------------------------- CC#21: a backend module's other sites
FLEX_ENUM = '''\
from enum import Enum


class KernelBackendEnum(Enum):
    FLEX = "proj.backends.flex.FlexBackend"
    PLAIN = "proj.backends.plain.PlainBackend"

    def path(self):
        return self.value
'''

FLEX_CUDA_PLATFORM = '''\
from proj.backends.registry import KernelBackendEnum


class CudaPlatform:
    device_type = "cuda"

    @classmethod
    def backends(cls):
        return [KernelBackendEnum.FLEX, KernelBackendEnum.PLAIN]
'''

FLEX_CPU_PLATFORM = '''\
from proj.backends.registry import KernelBackendEnum


class CpuPlatform:
    @classmethod
    def backends(cls):
        return [KernelBackendEnum.PLAIN]
'''

FLEX = '''\
import torch


def build_mask(n):
    return torch.ones(n, n)


build_mask_compiled = torch.compile(build_mask, fullgraph=True, mode="reduce-overhead")


class FlexMetadata:
    pass


class FlexBackend:
    pass
'''

PROPOSER = '''\
from proj.platforms.current import current_platform


class Proposer:
    def __init__(self):
        self.allowed = ()
        if current_platform.is_rocm():
            from proj.backends.flex import FlexMetadata

            self.allowed = (FlexMetadata,)
'''

MODEL_CONFIG = '''\
from proj.backends.registry import KernelBackendEnum


def verify(config):
    if config.backend == KernelBackendEnum.FLEX:
        raise ValueError("this model needs another backend")
'''


def _flex_files(**extra) -> dict[str, str]:
    from tests.test_h80 import REGISTRY

    files = {
        "proj/__init__.py": "",
        "proj/platforms/__init__.py": REGISTRY,
        "proj/platforms/cuda.py": FLEX_CUDA_PLATFORM,
        "proj/platforms/cpu.py": FLEX_CPU_PLATFORM,
        "proj/platforms/current.py": "current_platform = None\n",
        "proj/backends/__init__.py": "",
        "proj/backends/registry.py": FLEX_ENUM,
        "proj/backends/flex.py": FLEX,
        "proj/backends/plain.py": "class PlainBackend:\n    pass\n",
        "proj/spec/__init__.py": "",
        "proj/spec/proposer.py": PROPOSER,
        "proj/models/__init__.py": "",
        "proj/models/config.py": MODEL_CONFIG,
    }
    files.update(extra)
    return files


def test_backend_module_imported_only_under_a_rocm_test_and_compared_elsewhere_is_platform_code(tmp_path):
    from tests.test_h80 import _open

    report = migrate_json(write_project(tmp_path, _flex_files()))
    flex = _open(report, "proj/backends/flex.py")
    assert set(flex) == {8} and flex[8]["severity"] == "info", flex
    assert "reached only through the CUDA platform class" in flex[8]["message"], flex


def test_backend_module_an_npu_host_may_import_stays_reported(tmp_path):
    # (nearest true case: the proposer imports the module on every platform)
    from tests.test_h80 import _open

    proposer = PROPOSER.replace("if current_platform.is_rocm():", "if current_platform is not None:")
    report = migrate_json(write_project(tmp_path, _flex_files(**{"proj/spec/proposer.py": proposer})))
    flex = _open(report, "proj/backends/flex.py")
    assert flex[8]["severity"] == "warning", flex


def test_backend_member_selected_outside_the_platform_stays_reported(tmp_path):
    # (nearest true case: the model config picks the member, not only compares it)
    from tests.test_h80 import _open

    config = MODEL_CONFIG.replace("    if config.backend == KernelBackendEnum.FLEX:\n"
                                  "        raise ValueError(\"this model needs another backend\")\n",
                                  "    config.backend = KernelBackendEnum.FLEX\n")
    report = migrate_json(write_project(tmp_path, _flex_files(**{"proj/models/config.py": config})))
    flex = _open(report, "proj/backends/flex.py")
    assert flex[8]["severity"] == "warning", flex


# ----------------------------------------------------------------------------- CA#35: an opt-in config property
def _ubatch_files(default: str = "False", setter: str = "") -> dict[str, str]:
    return {
        "proj/__init__.py": "",
        "proj/config.py": f'''
            from dataclasses import dataclass, field


            @dataclass
            class ParallelConfig:
                enable_overlap: bool = {default}
                ubatch_size: int = field(default=0)

                @property
                def use_ubatching(self) -> bool:
                    return self.enable_overlap or self.ubatch_size > 1
        ''',
        "proj/setup.py": f'''
            def configure(parallel_config):
                parallel_config.enable_overlap = False
                {setter or "return parallel_config"}
        ''',
        "proj/wrapper.py": '''
            import torch


            class UBatchWrapper:
                def __init__(self, model):
                    self.model = model

                def capture(self):
                    torch.cuda.current_blas_handle()
                    return self.model
        ''',
        "proj/runner.py": '''
            from proj.wrapper import UBatchWrapper


            class Runner:
                def __init__(self, parallel_config, model):
                    self.parallel_config = parallel_config
                    self.model = model

                def load_model(self):
                    if isinstance(self.model, UBatchWrapper):
                        return
                    if self.parallel_config.use_ubatching:
                        self.model = UBatchWrapper(self.model)
        ''',
        "proj/runner_v2.py": '''
            import torch


            class UBatchRunner:
                def run(self):
                    torch.cuda.current_blas_handle()


            def maybe_build_ubatch_runner(parallel_config):
                if not parallel_config.use_ubatching or parallel_config.world_size <= 1:
                    return None
                return UBatchRunner()
        ''',
    }


def test_class_built_only_under_a_config_property_false_by_default_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _ubatch_files(), dedent=True))
    wrapper = findings_at(report, "proj/wrapper.py", "NPU202")[10]
    assert wrapper["severity"] == "info", wrapper
    assert "reached on an NPU host only when `self.parallel_config.use_ubatching` is chosen" in wrapper["message"]
    assert "`ParallelConfig.use_ubatching` is `self.enable_overlap or self.ubatch_size > 1`, False by default, " \
           "proj/config.py:11" in wrapper["message"], wrapper["message"]
    assert "proj/runner.py:11 (a type test, which builds nothing)" in wrapper["message"], wrapper["message"]
    # (the early exit `if not parallel_config.use_ubatching ...: return None` of Model Runner V2's builder)
    runner = findings_at(report, "proj/runner_v2.py", "NPU202")[7]
    assert runner["severity"] == "info" and "`parallel_config.use_ubatching` is chosen" in runner["message"], runner


def test_config_property_true_by_default_keeps_the_error(tmp_path):
    # (nearest true case: the field defaults to True, so every NPU host builds the wrapper)
    report = migrate_json(write_project(tmp_path, _ubatch_files(default="True"), dedent=True))
    assert findings_at(report, "proj/wrapper.py", "NPU202")[10]["severity"] == "error"
    assert findings_at(report, "proj/runner_v2.py", "NPU202")[7]["severity"] == "error"


def test_config_field_the_library_sets_keeps_the_error(tmp_path):
    # (nearest true case: the library itself turns the field on)
    files = _ubatch_files(setter="parallel_config.enable_overlap = True")
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    assert findings_at(report, "proj/wrapper.py", "NPU202")[10]["severity"] == "error"


def test_config_field_the_library_computes_keeps_the_error(tmp_path):
    # (nearest true case: the library fills the field from the model, not from the user's option)
    files = _ubatch_files(setter="return ParallelConfig(enable_overlap=parallel_config.world_size > 1)")
    files["proj/setup.py"] = "            from proj.config import ParallelConfig\n" + files["proj/setup.py"]
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    assert findings_at(report, "proj/wrapper.py", "NPU202")[10]["severity"] == "error"
