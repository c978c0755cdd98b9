"""Helper h191: opt-in options reported as errors, round 33 second attempt (issue #16, policy P1: code
an NPU host reaches only by a user's explicit choice is info naming the choice and its default,
never dropped). Each false case is paired with its nearest true case that stays reported.

- optstates34.py (HA#24, HB#3): state that holds None/False unless an opt-in set it (`self.sharder =
  Sharder()` only under `if cfg.enable_batch_sharded_sampling:`; `self.fp8_enabled = True` only
  after an early exit taken at the default), and a local set only under a test of such state, read
  in `if S:` / `if S is not None:`. Nearest true: the store ungated, the option on by default, an
  `is None` test, a store in the `else:`, a name another object stores.
"""

from __future__ import annotations

from tests.precision_helpers import findings_at, migrate_json, write_project

_KERNELS = "proj/worker/batch_shard.py"
_FP8 = "proj/kernels/fp8_quant.py"


# ----------------------------------------------------------------------------- HA#24: an object built under an opt-in
def _shard_files(default: str = "None", build: str = "", gate: str = "self.batch_sharder is not None",
                 local_store: str = "        if self.batch_sharder is not None:\n"
                                    "            batch, shard_metadata = self.batch_sharder.shard(batch)\n",
                 extra: str = "") -> dict:
    build = build or ("        if self.parallel_config.enable_batch_sharded_sampling:\n"
                      "            if hasattr(model, \"compute_logits_local\"):\n"
                      "                self.batch_sharder = BatchSharder(8, self.device)\n")
    return {
        "proj/__init__.py": "",
        "proj/config/__init__.py": "",
        "proj/config/parallel.py": (
            "from dataclasses import dataclass\n\n\n@dataclass\nclass ParallelConfig:\n"
            f"    tensor_parallel_size: int = 1\n    enable_batch_sharded_sampling: bool | None = {default}\n"),
        "proj/config/vllm.py": (
            "from dataclasses import dataclass\n\nfrom .parallel import ParallelConfig\n\n\n@dataclass\n"
            "class VllmConfig:\n    parallel_config: ParallelConfig\n\n"
            "    def __post_init__(self):\n"
            "        if not self.parallel_config.enable_batch_sharded_sampling:\n"
            "            self.parallel_config.enable_batch_sharded_sampling = False\n"
            "            return\n"
            "        if self.parallel_config.tensor_parallel_size <= 1:\n"
            "            raise ValueError(\"nothing to shard\")\n"),
        "proj/worker/__init__.py": "",
        _KERNELS: (
            "import torch\n\nfrom vllm.triton_utils import tl, triton\n\n\n"
            "@triton.jit\ndef _shard_kernel(x_ptr, n):\n    tl.store(x_ptr + tl.program_id(0), n)\n\n\n"
            "@triton.jit\ndef _gather_kernel(x_ptr, n):\n    tl.store(x_ptr + tl.program_id(0), n)\n\n\n"
            "class BatchSharder:\n    def __init__(self, n, device):\n"
            "        self.buf = torch.zeros(n, device=device)\n\n"
            "    def shard(self, batch):\n        _shard_kernel[(8,)](self.buf, 8)\n        return batch, self.buf\n\n\n"
            "def gather_output(out, meta):\n    _gather_kernel[(8,)](meta, 8)\n    return out\n"),
        "proj/worker/model_runner.py": (
            "from proj.worker.batch_shard import BatchSharder, gather_output\n\n\n"
            "class ModelRunner:\n    def __init__(self, vllm_config, device):\n"
            "        self.parallel_config = vllm_config.parallel_config\n"
            "        self.device = device\n"
            "        self.batch_sharder: BatchSharder | None = None\n\n"
            "    def load_model(self, model):\n" + build + extra + "\n"
            "    def sample(self, batch):\n"
            "        shard_metadata = None\n" + local_store +
            "        out = batch\n"
            f"        if {gate.replace('self.batch_sharder', 'shard_metadata')}:\n"
            "            out = gather_output(out, shard_metadata)\n"
            "        return out\n"),
    }


def _kernel_severity(report: dict, path: str = _KERNELS) -> str:
    found = findings_at(report, path, "NPU910")
    triton = [f for f in found.values() if "`@triton.jit` kernel" in f["message"]]
    assert len(triton) == 1, found
    return triton[0]["severity"]


def test_object_built_only_under_an_opt_in_field_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _shard_files()))
    assert _kernel_severity(report) == "info"
    message = next(f["message"] for f in findings_at(report, _KERNELS, "NPU910").values()
                   if "`@triton.jit` kernel" in f["message"])
    # (the kernel launched through the local set only under the object's test names the option)
    assert "`shard_metadata is not None` is chosen" in message
    assert "ParallelConfig.enable_batch_sharded_sampling` defaults to None" in message


def test_object_built_ungated_keeps_the_error(tmp_path):
    # (nearest true case: every NPU host builds the sharder, so the local is set there too)
    build = "        self.batch_sharder = BatchSharder(8, self.device)\n"
    assert _kernel_severity(migrate_json(write_project(tmp_path, _shard_files(build=build)))) == "error"


def test_object_built_under_an_option_on_by_default_keeps_the_error(tmp_path):
    assert _kernel_severity(migrate_json(write_project(tmp_path, _shard_files(default="True")))) == "error"


def test_object_also_built_in_the_else_branch_keeps_the_error(tmp_path):
    build = ("        if self.parallel_config.enable_batch_sharded_sampling:\n"
             "            self.batch_sharder = BatchSharder(8, self.device)\n"
             "        else:\n"
             "            self.batch_sharder = BatchSharder(1, self.device)\n")
    assert _kernel_severity(migrate_json(write_project(tmp_path, _shard_files(build=build)))) == "error"


def test_local_set_outside_the_state_test_keeps_the_error(tmp_path):
    # (the local is bound on every host: `shard_metadata is not None` holds without the option)
    local_store = ("        if self.batch_sharder is not None:\n"
                   "            batch, shard_metadata = self.batch_sharder.shard(batch)\n"
                   "        else:\n"
                   "            shard_metadata = batch\n")
    files = _shard_files(local_store=local_store)
    assert _kernel_severity(migrate_json(write_project(tmp_path, files))) == "error"


def test_state_tested_is_none_keeps_the_error(tmp_path):
    # (`is None` is true at the off value: every host with the default runs the body)
    files = _shard_files(gate="self.batch_sharder is None",
                         local_store="        if self.batch_sharder is None:\n"
                                     "            batch, shard_metadata = batch, batch\n")
    assert _kernel_severity(migrate_json(write_project(tmp_path, files))) == "error"


def test_state_another_object_stores_keeps_the_error(tmp_path):
    # (`runner.batch_sharder = ...` from another module: the state is not only the class's own)
    files = _shard_files()
    files["proj/worker/setup.py"] = ("from proj.worker.batch_shard import BatchSharder\n\n\n"
                                     "def attach(runner):\n    runner.batch_sharder = BatchSharder(2, \"cuda\")\n")
    assert _kernel_severity(migrate_json(write_project(tmp_path, files))) == "error"


# ----------------------------------------------------------------------------- HB#3: a flag set after an opt-in exit
def _fp8_files(init: str = "") -> dict:
    init = init or ("        self.fp8_enabled = False\n"
                    "        mm_cfg = get_multimodal_config()\n"
                    "        if mm_cfg is None or mm_cfg.mm_encoder_attn_dtype != \"fp8\":\n"
                    "            return\n"
                    "        if self.backend != \"flashinfer\":\n"
                    "            raise ValueError(\"fp8 needs flashinfer\")\n"
                    "        self.fp8_enabled = True\n")
    return {
        "proj/__init__.py": "",
        "proj/config/__init__.py": "",
        "proj/config/multimodal.py": (
            "from dataclasses import dataclass\nfrom typing import Literal\n\n\n@dataclass\n"
            "class MultiModalConfig:\n    mm_encoder_attn_dtype: Literal[\"fp8\"] | None = None\n\n\n"
            "_CONFIG = None\n\n\ndef get_multimodal_config():\n    return _CONFIG\n"),
        "proj/kernels/__init__.py": "",
        _FP8: (
            "import torch\n\nfrom vllm.triton_utils import tl, triton\n\n\n"
            "@triton.jit\ndef _quantize_pad_fp8_kernel(x_ptr, n):\n"
            "    tl.store(x_ptr + tl.program_id(0), n)\n\n\n"
            "def quantize_pad_fp8(x: torch.Tensor) -> torch.Tensor:\n"
            "    _quantize_pad_fp8_kernel[(x.numel(),)](x, x.numel())\n    return x\n"),
        "proj/layers/__init__.py": "",
        "proj/layers/encoder_attention.py": (
            "import torch\n\nfrom proj.config.multimodal import get_multimodal_config\n"
            "from proj.kernels.fp8_quant import quantize_pad_fp8\n\n\n"
            "class EncoderAttention(torch.nn.Module):\n"
            "    def __init__(self, backend):\n        super().__init__()\n        self.backend = backend\n"
            "        self._init_fp8_state()\n\n"
            "    def _init_fp8_state(self) -> None:\n" + init + "\n"
            "    def forward(self, query):\n"
            "        if self.fp8_enabled:\n            query = quantize_pad_fp8(query)\n"
            "        return query\n"),
    }


def test_flag_set_only_after_an_opt_in_exit_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _fp8_files()))
    assert _kernel_severity(report, _FP8) == "info"
    message = next(f["message"] for f in findings_at(report, _FP8, "NPU910").values()
                   if "`@triton.jit` kernel" in f["message"])
    assert "`self.fp8_enabled` is chosen" in message and "mm_encoder_attn_dtype` defaults to None" in message


def test_flag_set_before_the_exit_keeps_the_error(tmp_path):
    # (nearest true case: the flag is on before the option is read, on every host)
    init = ("        self.fp8_enabled = True\n"
            "        mm_cfg = get_multimodal_config()\n"
            "        if mm_cfg is None or mm_cfg.mm_encoder_attn_dtype != \"fp8\":\n"
            "            return\n")
    assert _kernel_severity(migrate_json(write_project(tmp_path, _fp8_files(init))), _FP8) == "error"


def test_flag_computed_on_every_host_keeps_the_error(tmp_path):
    init = ("        self.fp8_enabled = False\n"
            "        if self.backend == \"flashinfer\":\n"
            "            self.fp8_enabled = True\n")
    assert _kernel_severity(migrate_json(write_project(tmp_path, _fp8_files(init))), _FP8) == "error"


def test_state_a_subclass_sets_ungated_keeps_the_error(tmp_path):
    # (a subclass in another module builds the sharder on every host: the base's test holds there)
    files = _shard_files()
    files["proj/worker/sharded_runner.py"] = (
        "from proj.worker.model_runner import ModelRunner\n\n\n"
        "class ShardedRunner(ModelRunner):\n    def load_model(self, model):\n"
        "        self.batch_sharder = model.sharder\n")
    assert _kernel_severity(migrate_json(write_project(tmp_path, files))) == "error"


def _exit_files(exit_test: str) -> dict:
    files = _shard_files()
    files["proj/worker/model_runner.py"] = files["proj/worker/model_runner.py"].replace(
        "    def sample(self, batch):\n",
        "    def finish(self, out):\n"
        f"        if {exit_test}:\n"
        "            return out\n"
        "        return gather_output(out, self.batch_sharder.buf)\n\n"
        "    def sample(self, batch):\n").replace("            out = gather_output(out, shard_metadata)\n",
                                               "            out = shard_metadata\n")
    return files


def test_code_after_an_exit_taken_while_the_state_is_off_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, _exit_files("self.batch_sharder is None")))
    assert _kernel_severity(report) == "info"


def test_code_after_an_exit_taken_while_the_state_is_set_keeps_the_error(tmp_path):
    # (nearest true case: the exit is taken only with the option; every default host goes on)
    report = migrate_json(write_project(tmp_path, _exit_files("self.batch_sharder is not None")))
    assert _kernel_severity(report) == "error"
