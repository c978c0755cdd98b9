"""Private torch.cuda.memory names are one finding per family, each with its own message: the
snapshot family (`_record_memory_history`, `_snapshot`, `_dump_snapshot`, which torch_npu 2.7.1
defines in torch_npu/npu/memory.py) merges into one finding, `_set_allocator_settings` (which it does
not define) stays apart, so the merged finding does not give it the snapshot's advice."""

from tests.precision_helpers import findings_at, migrate_json, write_project

ALLOC = '''\
import torch


def snap():
    return torch.cuda.memory._snapshot()


def history():
    torch.cuda.memory._record_memory_history(max_entries=1000)


def settings(conf):
    torch.cuda.memory._set_allocator_settings(conf)
'''


def test_allocator_settings_is_not_merged_into_the_snapshot_finding(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/alloc.py": ALLOC}))
    findings = findings_at(report, "pkg/alloc.py", "NPU202")
    assert sorted(findings) == [5, 13], findings
    snapshot, settings = findings[5]["message"], findings[13]["message"]
    assert "(also at line 9)" in snapshot and "torch.npu.memory._snapshot" in snapshot, snapshot
    assert "_set_allocator_settings" not in snapshot
    assert settings.startswith("`torch.cuda.memory._set_allocator_settings`"), settings
    assert "PYTORCH_NPU_ALLOC_CONF" in settings and "_snapshot" not in settings, settings
