"""Round-33 audit HA#6 (optparams34.py): code under `if NAME:` of a function whose parameter NAME
defaults to False and that no file of the run sets (torchao's `compile_image_encoder`) is an opt-in
(policy P1): info naming the choice and its default. Each false case is paired with its nearest true
case, which keeps its severity."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

MODEL = '''import torch


class Model(torch.nn.Module):
    def __init__(self, encoder, compile_encoder: bool = {default}):
        super().__init__()
        self.encoder = encoder
        if compile_encoder:
            self.encoder.forward = torch.compile(self.encoder.forward, mode="max-autotune")
        self.after = torch.compile(self.encoder.forward, mode="max-autotune")
'''


def _severities(report: dict) -> dict[int, str]:
    return {f["line"]: f["severity"] for f in report["findings"]
            if f["path"] == "pkg/model.py" and f["code"] == "NPU903"}


def _run(tmp_path, default="False", caller=None):
    files = {"pkg/__init__.py": "", "pkg/model.py": MODEL.format(default=default)}
    if caller is not None:
        files["pkg/build.py"] = caller
    return migrate_json(write_project(tmp_path, files))


def test_flag_parameter_no_file_sets_is_info(tmp_path):
    report = _run(tmp_path, caller="from .model import Model\n\n\ndef build(enc):\n    return Model(enc)\n")
    severities = _severities(report)
    assert severities[9] == "info"
    assert severities[10] == "warning"  # after the `if`: always run
    message = next(f["message"] for f in report["findings"] if f["line"] == 9 and f["path"] == "pkg/model.py")
    assert "`compile_encoder=True`" in message and "default False" in message


def test_flag_a_library_caller_sets_keeps_the_warning(tmp_path):
    caller = "from .model import Model\n\n\ndef build(enc):\n    return Model(enc, compile_encoder=True)\n"
    assert _severities(_run(tmp_path, caller=caller))[9] == "warning"


def test_flag_a_config_file_names_keeps_the_warning(tmp_path):
    files = {"pkg/__init__.py": "", "pkg/model.py": MODEL.format(default="False"),
             "configs/model.yaml": "model:\n  _target_: pkg.model.Model\n  compile_encoder: true\n"}
    assert _severities(migrate_json(write_project(tmp_path, files)))[9] == "warning"


def test_flag_set_by_position_keeps_the_warning(tmp_path):
    caller = "from .model import Model\n\n\ndef build(enc):\n    return Model(enc, True)\n"
    assert _severities(_run(tmp_path, caller=caller))[9] == "warning"


def test_flag_on_by_default_keeps_the_warning(tmp_path):
    assert _severities(_run(tmp_path, default="True"))[9] == "warning"


def test_flag_of_a_configuration_class_keeps_the_warning(tmp_path):
    text = MODEL.format(default="False").replace("class Model(", "class ModelConfig(")
    files = {"pkg/__init__.py": "", "pkg/model.py": text}
    assert _severities(migrate_json(write_project(tmp_path, files)))[9] == "warning"


def test_flag_of_a_plain_function_keeps_the_warning(tmp_path):
    text = ("import torch\n\n\ndef build(encoder, compile_encoder: bool = False):\n"
            "    if compile_encoder:\n"
            "        encoder.forward = torch.compile(encoder.forward, mode=\"max-autotune\")\n"
            "    return encoder\n")
    files = {"pkg/__init__.py": "", "pkg/model.py": text}
    assert _severities(migrate_json(write_project(tmp_path, files)))[6] == "warning"
