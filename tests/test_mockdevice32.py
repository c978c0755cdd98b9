"""A test that stores "cuda" on a mock standing in for the platform (issue #16, round-32 audit GB#36:
vLLM's tests/v1/ec_connector/unit/test_ec_example_connector.py). The mock's string is what the code
under test reads back; rewriting it alone (to `npu_compat.device_type()`) while the expected
"cuda:2" stays makes the test fail on an NPU host. Left as written, with the mock's value and the
expectation derived from it named as a mock's values; the nearest true cases stay as they were."""

from __future__ import annotations

from click.testing import CliRunner

from npu_migrate.cli import main

from .precision_helpers import migrate_json, write_project

CONNECTOR = '''import torch
from platforms import current_platform


def load(path):
    device = current_platform.device_type
    if current_platform.is_cuda_alike():
        device = f"{device}:{current_platform.current_device()}"
    return torch.load(path, map_location=device)
'''

MOCKED = '''from unittest.mock import Mock, patch

import torch

import conn


def test_pinned_device():
    mock_platform = Mock()
    mock_platform.device_type = "cuda"
    mock_platform.is_cuda_alike.return_value = True
    mock_platform.current_device.return_value = 2
    captured = {}

    def fake_load(path, map_location):
        captured["device"] = map_location
        return torch.zeros(2)

    with patch("conn.current_platform", mock_platform), patch("torch.load", side_effect=fake_load):
        conn.load("x.pt")
    assert captured["device"] == "cuda:2", "expected the rank's device"


class Holder:
    pass


def test_real_object():
    holder = Holder()
    holder.device_type = "cuda"
    return torch.zeros(2, device=holder.device_type)


def test_without_mock():
    captured = {"device": conn.load("x.pt").device.type}
    assert captured["device"] == "cuda:2"
'''


def test_a_mock_platform_string_and_the_expectation_derived_from_it_stay_as_written(tmp_path):
    root = write_project(tmp_path, {"conn.py": CONNECTOR, "platforms.py": "current_platform = None\n",
                                    "tests/test_conn.py": MOCKED})
    report = migrate_json(root)
    path = "tests/test_conn.py"
    rewrites = {f["line"] for f in report["findings"] if f["path"] == path and f["fixable"]}
    left = {f["line"]: f for f in report["findings"] if f["path"] == path and not f["fixable"]}
    scopes = {s["start_line"]: s["reason"] for s in report["skipped"] if s.get("path") == path}
    # false cases: the mock's "cuda" is not rewritten, and neither it nor the expected "cuda:2" of
    # the same function is an open finding: both are named as a mock's values
    assert 10 not in rewrites and 10 not in left and "mock" in scopes[10]
    assert 21 not in left and "mock" in scopes[21]
    # nearest true cases: the same store on a real object is a device and is rewritten; the same
    # expectation in a function with no mocked CUDA platform stays an open finding
    assert 30 in rewrites
    assert left[36]["code"] == "NPU990" and left[36]["severity"] == "warning" and 36 not in scopes


def test_the_migrated_mock_test_keeps_the_string_it_expects(tmp_path):
    root = write_project(tmp_path, {"conn.py": CONNECTOR, "platforms.py": "current_platform = None\n",
                                    "tests/test_conn.py": MOCKED})
    result = CliRunner().invoke(main, ["migrate", str(root), "--no-cache", "--isolated", "--allow-dirty", "-j", "1"],
                                catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    text = (root / "tests/test_conn.py").read_text()
    assert '    mock_platform.device_type = "cuda"\n' in text
    assert 'holder.device_type = npu_compat.device_type()' in text
