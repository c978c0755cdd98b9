"""Code that already supports the NPU is left as its authors wrote it (issue 16, section 1).

The shapes themselves (a branch chain with an NPU arm, an `or` chain, a dict, a conditional
expression, a platform class with an NPU sibling, a comment that explains an NCCL-only check, and
device checks in front of CUDA-only code) are the families' EXAMPLES and the golden pair
fixtures/rules/platform_aware.py. Here, what a whole run makes of them: the skipped files and
scopes named in the JSON output (the shape scripts/ecosystem.py reads), `--show-skipped` for
`npu-migrate` and `npu-migrate check`, the sweep's NPU991 (information) inside the scopes, the
same answer with and without hot slices and from the cache, and no more sibling-folder rule.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from npu_migrate import catalogue, hotslice
from npu_migrate.cli import main
from npu_migrate.engine import EXTRA_HOT, HOT_STATEMENT, NPU_AWARE_REASON, TRIGGER_WORDS, migrate_source
from npu_migrate.model import Options
from npu_migrate.sweep import rule_reads

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "fixtures" / "rules" / "platform_aware.py"
ENABLED = catalogue.enabled_codes()

PLATFORM = '''\
import torch


class CudaPlatform:
    device_type = "cuda"
    dist_backend = "nccl"

    def synchronize(self):
        torch.cuda.synchronize()


class NpuPlatform:
    device_type = "npu"
    dist_backend = "hccl"
'''

CHAIN = '''\
import torch


def count(device):
    if device == "cuda":
        return torch.cuda.device_count()
    elif device == "npu":
        return 8
    return 0


def plain(device):
    if device == "cuda":
        torch.cuda.synchronize()
'''

NPU_FILE = '''\
import torch
import torch_npu

x = torch.zeros(2).cuda()
'''

CUDA_BESIDE = '''\
import torch

x = torch.zeros(2).cuda()
'''


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "acc").mkdir(parents=True)
    (root / "acc" / "platform.py").write_text(PLATFORM)
    (root / "acc" / "npu.py").write_text(NPU_FILE)
    (root / "acc" / "cuda.py").write_text(CUDA_BESIDE)  # beside a torch_npu file: migrated all the same
    (root / "chain.py").write_text(CHAIN)
    (root / "plain.py").write_text("x = 1\n")
    return root


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _migrate_json(root: Path, *extra: str) -> dict:
    result = _invoke("migrate", str(root), "--dry-run", "--no-cache", "--isolated", "-j", "1",
                     "--output-format", "json", *extra)
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


# ----------------------------------------------------------------------------- the engine
def _run(source: str, hot_slices: bool = True, enabled=ENABLED):
    return migrate_source(source.encode(), "example.py", Options(enabled=enabled, hot_slices=hot_slices))


def test_scopes_are_named_on_the_file_result():
    result = _run(CHAIN)
    assert result.skipped_scopes == [(5, 8, "branch chain handles NPU")]
    # the chain is untouched; the plain check below it is widened
    new = result.new.decode()
    assert 'if device == "cuda":\n        return torch.cuda.device_count()' in new
    assert "if npu_compat.is_accelerator_type(device):\n        npu_compat.synchronize()" in new


@pytest.mark.parametrize("source", [PLATFORM, CHAIN, FIXTURE.read_text()], ids=["platform", "chain", "fixture"])
def test_slices_and_whole_file_agree(source):
    sliced, whole = _run(source, True), _run(source, False)
    assert (sliced.new, sliced.findings, sliced.skipped_scopes) == (whole.new, whole.findings, whole.skipped_scopes)


def test_the_sibling_class_is_a_placeholder_in_the_hot_slices():
    """The decision needs the NPU class, which a hot slice leaves out: it is read from the text."""
    slices = hotslice.reduce(PLATFORM.encode(), (HOT_STATEMENT, EXTRA_HOT), TRIGGER_WORDS, rule_reads())
    assert slices is not None and b"class NpuPlatform" not in slices.reduced
    result = _run(PLATFORM)
    assert result.new is None
    assert result.skipped_scopes == [(4, 9, "class family: sibling class NpuPlatform handles NPU")]


def test_leftovers_inside_a_scope_are_information_only():
    result = _run(PLATFORM)
    assert [f.code for f in result.findings] == ["NPU991", "NPU991", "NPU991"]
    assert all(not f.fixable for f in result.findings)
    assert catalogue.rule("NPU991").fixable is False
    assert getattr(catalogue.rule("NPU991"), "severity", "info") == "info"
    assert result.findings[0].message.endswith("scope: class family: sibling class NpuPlatform handles NPU, lines 4-9")
    assert [f.source for f in result.findings] == ['"cuda"', '"nccl"', "torch.cuda.synchronize"]
    # deselected, the scope is still left alone and still named
    quiet = _run(PLATFORM, enabled=ENABLED - {"NPU991"})
    assert quiet.findings == [] and quiet.new is None and quiet.skipped_scopes == result.skipped_scopes


def test_a_file_importing_torch_npu_stays_skipped():
    result = migrate_source(NPU_FILE.encode(), "npu.py", Options(enabled=ENABLED))
    assert result.skipped == NPU_AWARE_REASON and result.new is None and not result.findings


def test_the_sibling_folder_rule_is_gone():
    assert not hasattr(Options(enabled=ENABLED), "npu_aware_dirs")


# ----------------------------------------------------------------------------- the commands
def test_json_names_skipped_files_and_scopes(tmp_path):
    root = _project(tmp_path)
    payload = _migrate_json(root)
    # the CUDA references left as written inside a scope are named with it, not as findings
    assert payload["skipped"] == [
        {"path": "acc/npu.py", "reason": NPU_AWARE_REASON},
        {"path": "acc/platform.py", "start_line": 4, "end_line": 9,
         "reason": "class family: sibling class NpuPlatform handles NPU; "
                   "CUDA references left as written: lines 5, 6, 9 (3)"},
        {"path": "chain.py", "start_line": 5, "end_line": 8,
         "reason": "branch chain handles NPU; CUDA references left as written: lines 5, 6 (2)"},
    ]
    # files with nothing to migrate are counted, not named
    assert payload["files_skipped"]["no CUDA trigger words"] == 1
    # the torch_npu file's neighbour is migrated (no sibling-folder rule)
    assert "acc/cuda.py" in payload["changed_files"]
    assert [f for f in payload["findings"] if f["code"] == "NPU991"] == []
    assert "NPU991" not in payload["findings_by_code"]


def test_json_shape_is_what_the_ecosystem_script_reads(tmp_path):
    script = REPO / "scripts" / "ecosystem.py"
    if not script.is_file():
        pytest.skip("scripts/ecosystem.py is not in this checkout")
    spec = importlib.util.spec_from_file_location("_eco_for_platform_aware", script)
    eco = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = eco
    spec.loader.exec_module(eco)
    payload = _migrate_json(_project(tmp_path))
    labels = [eco.skip_label(e) for e in eco.skipped_from_json(payload)]
    assert labels == [
        f"acc/npu.py ({NPU_AWARE_REASON})",
        "acc/platform.py:4-9 (class family: sibling class NpuPlatform handles NPU; "
        "CUDA references left as written: lines 5, 6, 9 (3))",
        "chain.py:5-8 (branch chain handles NPU; CUDA references left as written: lines 5, 6 (2))",
    ]


def test_text_output_counts_and_show_skipped_lists(tmp_path):
    root = _project(tmp_path)
    base = ("migrate", str(root), "--dry-run", "--no-cache", "--isolated", "-j", "1", "--no-color")
    plain = _invoke(*base)
    assert "left as written: 1 skipped file and 2 skipped scopes (platform-aware code, type-checking blocks, code an NPU host never runs, runs as written or needs no port work for) (--show-skipped lists them)" in plain.stdout
    assert "skipped chain.py:5-8" not in plain.stdout
    shown = _invoke(*base, "--show-skipped")
    assert "skipped acc/npu.py: " + NPU_AWARE_REASON in shown.stdout
    assert "skipped acc/platform.py:4-9: class family: sibling class NpuPlatform handles NPU; CUDA references left as written: lines 5, 6, 9 (3)" in shown.stdout
    assert "skipped chain.py:5-8: branch chain handles NPU; CUDA references left as written: lines 5, 6 (2)" in shown.stdout
    assert "left as written: 1 skipped file and 2 skipped scopes (platform-aware code, type-checking blocks, code an NPU host never runs, runs as written or needs no port work for)\n" in shown.stdout


def test_check_shows_skipped_on_stderr(tmp_path):
    root = _project(tmp_path)
    runner = CliRunner()
    base = ["check", str(root), "--no-cache", "--isolated", "-j", "1"]
    plain = runner.invoke(main, base, catch_exceptions=False)
    assert "left as written: 1 skipped file and 2 skipped scopes (platform-aware code, type-checking blocks, code an NPU host never runs, runs as written or needs no port work for) (--show-skipped lists them)" in plain.stderr
    shown = runner.invoke(main, [*base, "--show-skipped"], catch_exceptions=False)
    assert "skipped chain.py:5-8: branch chain handles NPU" in shown.stderr
    assert "skipped chain.py" not in shown.stdout  # the report itself keeps its format
    assert "NPU991" not in shown.stdout  # the scope's CUDA references are named in its entry
    assert "CUDA references left as written: lines 5, 6 (2)" in shown.stderr


def test_cached_results_keep_their_scopes(tmp_path):
    root = _project(tmp_path)
    cache = tmp_path / "cache"
    args = ("migrate", str(root), "--dry-run", "--isolated", "-j", "1", "--output-format", "json",
            "--cache-dir", str(cache))
    first = json.loads(_invoke(*args).stdout)
    second = json.loads(_invoke(*args).stdout)
    assert first["skipped"] == second["skipped"] and len(second["skipped"]) == 3


# ----------------------------------------------------------------------------- class families across modules
# DeepSpeed's and ColossalAI's shape: accelerator/abstract.py defines the base, and one module per
# device defines a subclass; the NPU one beside the CUDA one means the project decides per device.
BASE = "class Accelerator:\n    def name(self):\n        raise NotImplementedError\n"
NPU_ACCEL = ("from .abstract import Accelerator\n\n\nclass NpuAccelerator(Accelerator):\n"
             "    def name(self):\n        return \"npu\"\n\n    def backend(self):\n        return \"hccl\"\n")
CUDA_ACCEL = '''\
try:
    import torch.cuda
except ImportError:
    pass

from .abstract import Accelerator


class CudaAccelerator(Accelerator):
    def name(self):
        return "cuda"

    def backend(self):
        return "nccl"

    def count(self):
        return torch.cuda.device_count()


def helper():
    return torch.cuda.is_available()
'''


def _accelerators(tmp_path: Path, npu: bool = True, base: str = BASE) -> Path:
    root = tmp_path / "accel_project"
    (root / "accel").mkdir(parents=True)
    (root / "accel" / "__init__.py").write_text("")
    (root / "accel" / "abstract.py").write_text(base)
    (root / "accel" / "cuda_accelerator.py").write_text(CUDA_ACCEL)
    if npu:
        (root / "accel" / "npu_accelerator.py").write_text(NPU_ACCEL)
    return root


def _cuda_result(report: dict) -> tuple[list, list]:
    findings = [(f["line"], f["code"]) for f in report["findings"] if f["path"] == "accel/cuda_accelerator.py"]
    skipped = [s for s in report["skipped"] if s["path"] == "accel/cuda_accelerator.py"]
    return findings, skipped


def test_a_cuda_class_beside_its_npu_sibling_module_is_left_alone(tmp_path):
    report = _migrate_json(_accelerators(tmp_path))
    findings, skipped = _cuda_result(report)
    assert len(skipped) == 1 and (skipped[0]["start_line"], skipped[0]["end_line"]) == (9, 17)
    assert skipped[0]["reason"].startswith(
        "class family: sibling class NpuAccelerator (npu_accelerator.py) handles NPU; "
        "CUDA references left as written: lines ")
    codes = [code for _line, code in findings]
    # the class: its CUDA references are named with its scope, not as findings; the
    # module-level helper outside it is still migrated
    assert "NPU991" not in codes
    assert (21, "NPU201") in findings
    assert not any(code != "NPU206" and line < 19 for line, code in findings)


def test_without_an_npu_sibling_the_cuda_class_is_migrated(tmp_path):
    findings, skipped = _cuda_result(_migrate_json(_accelerators(tmp_path, npu=False)))
    assert skipped == []
    assert {(14, "NPU301"), (17, "NPU201")} <= set(findings)


def test_a_base_from_elsewhere_does_not_make_a_family(tmp_path):
    """Subclasses of a base the folder does not define (nn.Module, ABC, object) are not a family:
    a model with an NPU-specific sibling does not freeze every CUDA model beside it."""
    root = _accelerators(tmp_path, base="x = 1\n")
    for name in ("cuda_accelerator.py", "npu_accelerator.py"):
        path = root / "accel" / name
        path.write_text(path.read_text().replace("from .abstract import Accelerator", "from torch.nn import Module as Accelerator"))
    findings, skipped = _cuda_result(_migrate_json(root))
    assert skipped == [] and (14, "NPU301") in findings


def test_an_import_of_torch_cuda_kept_for_a_family_class_is_not_a_finding(tmp_path):
    root = _accelerators(tmp_path)
    path = root / "accel" / "cuda_accelerator.py"
    path.write_text(path.read_text().split("\n\ndef helper")[0] + "\n")  # the class only
    findings, skipped = _cuda_result(_migrate_json(root))
    assert findings == []  # no NPU206 rewrite, no NPU990: the class's references are named
    assert "CUDA references left as written" in skipped[0]["reason"]


def test_the_cache_sees_a_new_npu_sibling(tmp_path):
    root = _accelerators(tmp_path, npu=False)
    args = ("migrate", str(root), "--dry-run", "--isolated", "-j", "1", "--output-format", "json",
            "--cache-dir", str(tmp_path / "cache"))
    assert _cuda_result(json.loads(_invoke(*args).stdout))[1] == []
    (root / "accel" / "npu_accelerator.py").write_text(NPU_ACCEL)
    assert len(_cuda_result(json.loads(_invoke(*args).stdout))[1]) == 1


def test_info_findings_alone_pass_check_and_migrate(tmp_path):
    """CUDA references left as written in a platform-aware scope are named with the scope and
    fail neither `check` nor `migrate` (exit 0); a real finding beside them still fails."""
    root = tmp_path / "only_info"
    root.mkdir()
    (root / "chain.py").write_text(CHAIN.split("\n\n\ndef plain")[0] + "\n")  # the NPU-aware chain only
    checked = _invoke("check", str(root), "--no-cache", "--isolated", "-j", "1")
    assert checked.exit_code == 0, checked.output
    assert "NPU991" not in checked.stdout
    shown = _invoke("check", str(root), "--no-cache", "--isolated", "-j", "1", "--show-skipped")
    assert "CUDA references left as written: lines" in shown.output
    migrated = _invoke("migrate", str(root), "--dry-run", "--no-cache", "--isolated", "-j", "1")
    assert migrated.exit_code == 0, migrated.output
    (root / "other.py").write_text("import triton\n")
    assert _invoke("check", str(root), "--no-cache", "--isolated", "-j", "1").exit_code == 1
    assert _invoke("migrate", str(root), "--dry-run", "--no-cache", "--isolated", "-j", "1").exit_code == 1


@pytest.mark.parametrize("name, named", [
    ("npu_accelerator.py", True), ("npu.py", True), ("NpuPlatform.py", True), ("ascend_backend.py", True),
    ("hccl_group.py", True), ("input.py", False), ("inputs_npu_free.py", True), ("cuda_accelerator.py", False),
    ("throughput.py", False),
])
def test_which_modules_are_named_for_the_npu(name, named):
    """The class-family pre-pass reads a folder only when a module there is named for the NPU."""
    from npu_migrate.run import _names_the_npu

    assert _names_the_npu(name) is named


def test_a_folder_without_an_npu_module_is_not_read(tmp_path, monkeypatch):
    from npu_migrate import run

    root = _accelerators(tmp_path)
    (root / "accel" / "npu_accelerator.py").rename(root / "accel" / "other_accelerator.py")
    read = []
    monkeypatch.setattr(run, "read_regular", lambda path: read.append(path) or b"")
    items = [(str(p), str(p.relative_to(root))) for p in sorted(root.rglob("*.py"))]
    assert run.platform_classes(items) == frozenset() and read == []
