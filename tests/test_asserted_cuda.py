"""`assert torch.version.cuda` on a main path is a hard AssertionError on an NPU host (round-21 audit
BF#19, xformers' tree attention selector): the NPU990 finding is an error saying why, not a warning.
A read only for display stays a named scope."""

from tests.precision_helpers import findings_at, migrate_json, scopes_at, write_project

SELECT = '''\
import torch


def select(bias):
    if bias is None:
        return None
    assert torch.version.cuda, "flash needs CUDA"
    return "flash"


def label():
    return f"cuda {torch.version.cuda}"
'''


def test_an_asserted_cuda_version_is_an_error(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/select.py": SELECT}))
    found = findings_at(report, "pkg/select.py", "NPU990")
    assert found[7]["severity"] == "error", found
    assert "the `assert` fails there" in found[7]["message"], found[7]
    assert 12 not in found and 12 in scopes_at(report, "pkg/select.py", "NPU990")  # (display only)
