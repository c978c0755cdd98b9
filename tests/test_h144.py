"""Helper h144: opt-in features reached through an object built only under a config choice, round 30
(issue #16, policy P1: code an NPU host reaches only by a user's explicit choice is info naming the
choice and where its default is set; never dropped). Each false case is paired with its nearest true
case that stays reported.

- optconfig29.py (EB#29, EB#36, EC#12, EC#17): `if self.speculative_config is not None:` builds the
  object whose methods launch the kernels; `speculative_config` defaults to None in a `config/`
  dataclass (another class's own attribute of that name, `self.speculative_config = spec`, is no
  setting of the field). Nearest true: `is None` (the default's path), a field the library builds.
- optconfig29.py through gatewalk30.py (EB#26): `Manager(...) if enable else None`, `enable` a local
  reading a field off by default. Nearest true: the field on by default.
- optobjects30.py (EB#12, EB#26): a dataclass field annotation `graph: torch.cuda.CUDAGraph` merged
  with the capture follows its class. Nearest true: the wrapper built ungated; a class-level value.
"""

from __future__ import annotations

import ast

from tests.precision_helpers import findings_at, migrate_json, write_project

CHOSEN = "reached on an NPU host only when"


# ----------------------------------------------------------------------------- EB#36: `is not None` of a field
def _spec_files(test: str = "self.speculative_config is not None", setter: str = "") -> dict:
    return {
        "proj/__init__.py": "",
        "proj/config/__init__.py": "",
        "proj/config/vllm.py": '''
            from dataclasses import dataclass


            @dataclass
            class SpeculativeConfig:
                num_tokens: int = 1


            @dataclass
            class VllmConfig:
                speculative_config: SpeculativeConfig | None = None
                max_len: int = 1024
        ''',
        "proj/engine.py": f'''
            from proj.config.vllm import SpeculativeConfig, VllmConfig


            def make_config(args):
                return VllmConfig(max_len=args.max_len{setter})
        ''',
        "proj/ngram.py": '''
            class NgramProposer:
                def __init__(self, spec):
                    self.speculative_config = spec   # (its own attribute, not the field)
        ''',
        "proj/rejection.py": '''
            from vllm.triton_utils import tl, triton


            @triton.jit
            def _flatten_kernel(x_ptr):
                tl.store(x_ptr, tl.load(x_ptr) + 1)


            class RejectionSampler:
                def __init__(self, n):
                    self.n = n

                def sample(self, x):
                    _flatten_kernel[(self.n,)](x)
                    return x
        ''',
        "proj/runner.py": f'''
            from proj.rejection import RejectionSampler


            class ModelRunner:
                def __init__(self, vllm_config):
                    self.speculative_config = vllm_config.speculative_config
                    self.rejection_sampler = None
                    if {test}:
                        self.rejection_sampler = RejectionSampler(4)
        ''',
    }


def _kernel(report: dict) -> dict:
    return findings_at(report, "proj/rejection.py", "NPU910")


def test_sampler_built_only_when_an_object_field_is_not_none_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _spec_files(), dedent=True))
    found = _kernel(report)
    assert found and all(f["severity"] == "info" and CHOSEN in f["message"] for f in found.values()), found
    message = next(iter(found.values()))["message"]
    assert "`self.speculative_config is not None` is chosen" in message, message
    assert "`VllmConfig.speculative_config` defaults to None (proj/config/vllm.py:12)" in message, message
    assert "proj/runner.py:10" in message, message


def test_sampler_built_when_the_field_is_none_keeps_the_error(tmp_path):
    # (nearest true case: `is None` is the default's own path: every NPU host builds it)
    report = migrate_json(write_project(tmp_path, _spec_files(test="self.speculative_config is None"), dedent=True))
    assert _kernel(report) and all(f["severity"] == "error" for f in _kernel(report).values()), _kernel(report)


def test_sampler_under_a_field_the_library_builds_keeps_the_error(tmp_path):
    # (nearest true case: the library itself fills the field with an object on every run)
    files = _spec_files(setter=", speculative_config=SpeculativeConfig(num_tokens=2)")
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    assert _kernel(report) and all(f["severity"] == "error" for f in _kernel(report).values()), _kernel(report)


# ----------------------------------------------------------------------------- EB#26: `X() if enable else None`
def _encoder_files(default: str = "False") -> dict:
    return {
        "proj/__init__.py": "",
        "proj/config/__init__.py": "",
        "proj/config/compilation.py": f'''
            from dataclasses import dataclass


            @dataclass
            class CompilationConfig:
                cudagraph_mm_encoder: bool = {default}
                level: int = 0
        ''',
        "proj/encoder_graphs.py": '''
            import torch


            class EncoderGraphManager:
                def __init__(self, n):
                    self.n = n
                    self.graphs = {}

                def capture(self, fn):
                    graph = torch.cuda.CUDAGraph()
                    self.graphs[self.n] = graph
                    return graph
        ''',
        "proj/state.py": '''
            from proj.encoder_graphs import EncoderGraphManager


            class ModelState:
                def __init__(self, vllm_config, model_config):
                    enable_encoder_graph = (
                        not model_config.enforce_eager
                        and vllm_config.compilation_config.cudagraph_mm_encoder
                    )
                    self.manager = EncoderGraphManager(4) if enable_encoder_graph else None
        ''',
    }


def _graphs(report: dict) -> dict:
    return findings_at(report, "proj/encoder_graphs.py", "NPU202")


def test_manager_built_only_in_a_conditional_expression_under_an_opt_in_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _encoder_files(), dedent=True))
    found = _graphs(report)
    assert found and all(f["severity"] == "info" and CHOSEN in f["message"] for f in found.values()), found
    message = next(iter(found.values()))["message"]
    # (two readings name the choice: optobjects30's through the local `enable_encoder_graph`, and
    # optchoice29's, which follows that local to the config field it is bound from; the merged
    # tree reports the latter, which names the field the user sets)
    assert "cudagraph_mm_encoder` is chosen" in message or "`enable_encoder_graph` is chosen" in message, message
    assert "`CompilationConfig.cudagraph_mm_encoder` defaults to" in message, message
    assert "proj/config/compilation.py:7" in message, message


def test_manager_under_a_field_on_by_default_keeps_the_error(tmp_path):
    # (nearest true case: the field defaults to True, so every NPU host builds the manager)
    report = migrate_json(write_project(tmp_path, _encoder_files(default="True"), dedent=True))
    assert _graphs(report) and all(f["severity"] == "error" for f in _graphs(report).values()), _graphs(report)


# ----------------------------------------------------------------------------- EB#12: a dataclass field annotation
def _ubatch_files(gate: str = "if vllm_config.parallel_config.enable_dbo:", field: str = "graph: torch.cuda.CUDAGraph") -> dict:
    return {
        "proj/__init__.py": "",
        "proj/config/__init__.py": "",
        "proj/config/parallel.py": '''
            from dataclasses import dataclass


            @dataclass
            class ParallelConfig:
                enable_dbo: bool = False
                world_size: int = 1
        ''',
        "proj/ubatch.py": f'''
            from dataclasses import dataclass

            import torch


            @dataclass
            class GraphMetaData:
                {field}
                size: int = 0


            class UBatchWrapper:
                def __init__(self, runnable):
                    self.runnable = runnable
                    self.graphs = {{}}

                def capture(self, size):
                    meta = GraphMetaData(graph=torch.cuda.CUDAGraph(), size=size)
                    self.graphs[size] = meta
                    return meta
        ''',
        "proj/runner.py": f'''
            from proj.ubatch import UBatchWrapper


            class Runner:
                def load(self, vllm_config, model):
                    {gate}
                        model = UBatchWrapper(model)
                    return model
        ''',
    }


def _ubatch(report: dict) -> dict:
    return findings_at(report, "proj/ubatch.py", "NPU202")


def test_field_annotation_of_a_class_built_only_under_an_opt_in_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _ubatch_files(), dedent=True))
    found = _ubatch(report)
    assert set(found) == {9}, found  # (the annotation and the capture at 19: one finding, both lowered)
    message = found[9]["message"]
    # (line 19 is reached through another class: infojoin31 lists it with its own reason, session 42)
    assert found[9]["severity"] == "info" and CHOSEN in message and "(also at line 19" in message, message
    assert "`UBatchWrapper`" in message.split("(also at line 19", 1)[1], message
    assert "`vllm_config.parallel_config.enable_dbo` is chosen" in message, message


def test_field_annotation_of_a_class_built_ungated_keeps_the_error(tmp_path):
    # (nearest true case: the wrapper is built on every host, so its capture and the annotation stay)
    report = migrate_json(write_project(tmp_path, _ubatch_files(gate="if True:"), dedent=True))
    assert _ubatch(report) and all(f["severity"] == "error" for f in _ubatch(report).values()), _ubatch(report)


def test_field_class_reads_only_a_type_annotation():
    # (nearest true case: a class-level value runs when the class is defined: no class to follow)
    from npu_migrate.optobjects30 import field_class

    tree = ast.parse("import torch\nclass A:\n    g: torch.cuda.CUDAGraph\n    s = torch.cuda.Stream()\n"
                     "    t: torch.cuda.Stream = torch.cuda.Stream()\n    n: int = 0\nx: torch.cuda.CUDAGraph\n")
    assert field_class(tree, 3) is tree.body[1]
    assert field_class(tree, 6) is tree.body[1]
    assert field_class(tree, 4) is None and field_class(tree, 5) is None and field_class(tree, 7) is None


# ----------------------------------------------------------------------------- EB#36: two classes by one name
def _two_samplers_files(legacy_import: str = "from proj.sample.rejection import RejectionSampler") -> dict:
    files = _spec_files()
    files["proj/sample/__init__.py"] = ""
    files["proj/sample/rejection.py"] = '''
        class RejectionSampler:
            def __init__(self, n):
                self.n = n
    '''
    files["proj/legacy_runner.py"] = f'''
        {legacy_import}


        class LegacyRunner:
            def __init__(self):
                self.rejection_sampler = RejectionSampler(4)   # (built on every host)
    '''
    return files


def test_same_named_class_of_another_module_built_ungated_leaves_the_opt_in_info(tmp_path):
    # (the legacy runner builds another module's `RejectionSampler`: not the one launching the kernel)
    report = migrate_json(write_project(tmp_path, _two_samplers_files(), dedent=True))
    found = _kernel(report)
    assert found and all(f["severity"] == "info" and CHOSEN in f["message"] for f in found.values()), found
    assert "legacy_runner" not in next(iter(found.values()))["message"]


def test_same_named_class_imported_from_the_kernel_module_keeps_the_error(tmp_path):
    # (nearest true case: the legacy runner builds the kernel module's own class, ungated)
    files = _two_samplers_files(legacy_import="from proj.rejection import RejectionSampler")
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    assert _kernel(report) and all(f["severity"] == "error" for f in _kernel(report).values()), _kernel(report)


def test_another_unit_needs_the_other_module_to_define_the_name():
    # (nearest true cases: a re-export of module i's class, a star import, an import of module i)
    from npu_migrate.flagcalls19 import Run
    from npu_migrate.model import FileResult
    from npu_migrate.optobjects30 import another_unit

    texts = {"p/a.py": b"class C:\n    pass\n", "p/b.py": b"class C:\n    pass\n",
             "p/reexport.py": b"from p.a import C\n",
             "p/u1.py": b"from p.b import C\nC()\n", "p/u2.py": b"from p.reexport import C\nC()\n",
             "p/u3.py": b"from p.b import *\nC()\n", "p/u4.py": b"from p.b import C\ndef f():\n    from p.a import C\n    C()\n",
             "p/u5.py": b"from p.b import C\nfrom p import a\na.C()\n"}
    results = [FileResult(p) for p in texts]
    run = Run(results, lambda i: texts[results[i].relpath])
    index = {r.relpath: i for i, r in enumerate(results)}
    a = index["p/a.py"]

    def ask(path: str) -> bool:
        return another_unit(run, index[path], run.tree(index[path]), "C", a)

    assert ask("p/u1.py")
    assert not ask("p/u2.py") and not ask("p/u3.py") and not ask("p/u4.py") and not ask("p/u5.py")
