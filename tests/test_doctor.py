"""The environment doctor: `npu_migrate/shim/doctor.py` (`python -m npu_compat`) and `npu-migrate doctor`.

No machine here has an NPU or a GPU, so every failure mode is faked through the doctor's Probes
(environment, which, files, /dev, imports, subprocess runner) and small fake torch / torch_npu
objects. The end-to-end runs use the real shim injected into a temp dir, in a subprocess, with the
fake torch_npu of tests/fake_npu for the NPU host.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from rich.console import Console

from npu_migrate import __version__, npu_api
from npu_migrate.doctor import doctor_command, find_interpreter, load_shim_doctor, print_rich, venv_python
from npu_migrate.inject import TEMPLATE_FILES, inject

REPO = Path(__file__).resolve().parent.parent
DOCTOR_FILE = REPO / "npu_migrate" / "shim" / "doctor.py"
FAKE_NPU = Path(__file__).resolve().parent / "fake_npu"
ANSI = re.compile(r"\x1b\[")

doctor = load_shim_doctor()

TOOLKIT = "/usr/local/Ascend/ascend-toolkit/latest"
DRIVER_INFO = "/usr/local/Ascend/driver/version.info"


# --------------------------------------------------------------------------------------------
# Fakes


def fake_torch(version="2.7.1+cpu", cuda=None, hip=None, npu=None, gpus=None, nccl=True,
               hccl=None, compute=None):
    """A stand-in for the torch module: only what the doctor touches.

    ``compute``: None computes on the CPU (the device argument is recorded in ``devices``), an
    exception instance is raised by ``ones``, a number makes the sum come out wrong.
    """
    devices = []

    def ones(n, device=None):
        devices.append(device)
        if isinstance(compute, BaseException):
            raise compute
        if compute is not None:
            return torch.full((n,), float(compute) / (2 * n))
        return torch.ones(n)

    def is_hccl_available():
        return hccl

    distributed = types.SimpleNamespace(is_available=lambda: True, is_nccl_available=lambda: nccl)
    if hccl is not None:
        distributed.is_hccl_available = is_hccl_available
    module = types.SimpleNamespace(
        __version__=version, version=types.SimpleNamespace(cuda=cuda, hip=hip), ones=ones,
        devices=devices, distributed=distributed)
    if npu is not None:
        module.npu = npu
    if gpus is not None:
        module.cuda = types.SimpleNamespace(device_count=lambda: gpus,
                                            get_device_name=lambda index: "NVIDIA A100")
    return module


def fake_npu_module(count=8, name="Ascend910B3", raises=None):
    """``torch.npu`` as torch_npu installs it (is_available, device_count, get_device_name)."""

    def device_count():
        if raises is not None:
            raise raises
        return count

    return types.SimpleNamespace(is_available=lambda: count > 0, device_count=device_count,
                                 get_device_name=lambda index: name)


def fake_torch_npu(version="2.7.1.post1", cann="8.3.RC1"):
    utils = types.SimpleNamespace(get_cann_version=lambda: cann)
    return types.SimpleNamespace(__version__=version, npu=types.SimpleNamespace(utils=utils))


class FakeHost(object):
    """A machine for the doctor's Probes: environment, files, directories, tools, /dev, modules."""

    def __init__(self, env=None, files=None, dirs=(), tools=None, dev=(), modules=None,
                 results=None):
        self.env = dict(env or {})
        self.files = dict(files or {})
        self.dirs = set(dirs)
        self.tools = dict(tools or {})
        self.dev = list(dev)
        self.modules = dict(modules or {})
        self.results = dict(results or {})  # tool name -> (code, out, err) or an exception
        self.ran = []

    def read_text(self, path):
        if path not in self.files:
            raise FileNotFoundError(2, "No such file or directory", path)
        return self.files[path]

    def import_module(self, name):
        if name not in self.modules:
            raise ModuleNotFoundError("No module named {!r}".format(name), name=name)
        module = self.modules[name]
        if isinstance(module, BaseException):
            raise module
        return module

    def run(self, argv, timeout):
        self.ran.append((list(argv), timeout))
        result = self.results.get(os.path.basename(argv[0]), (0, "", ""))
        if isinstance(result, BaseException):
            raise result
        return result

    def probes(self):
        return doctor.Probes(
            environ=self.env, which=self.tools.get, read_text=self.read_text,
            exists=lambda p: p in self.files or p in self.dirs, is_dir=lambda p: p in self.dirs,
            list_dir=lambda p: list(self.dev) if p == "/dev" else [], import_module=self.import_module,
            is_installed=lambda name: name in self.modules, run=self.run,
            python_version="3.11.7", executable="/usr/bin/python3")


def npu_host(devices=8, env=None, drop=(), **torch_args):
    """A healthy Ascend host: CANN sourced, driver, npu-smi, ``devices`` NPUs, torch 2.7.1 + torch_npu."""
    npu = fake_npu_module(count=devices)
    host = FakeHost(
        env={"ASCEND_HOME_PATH": TOOLKIT, "ASCEND_TOOLKIT_HOME": TOOLKIT},
        files={DRIVER_INFO: "Version=24.1.rc3\nascendhal_version=7.35.23\n",
               "/usr/local/Ascend/ascend-toolkit/set_env.sh": "# CANN\n"},
        dirs={TOOLKIT},
        tools={"npu-smi": "/usr/local/sbin/npu-smi"},
        dev=["davinci{}".format(i) for i in range(devices)] + ["davinci_manager", "null"],
        modules={"torch": fake_torch(npu=npu, **torch_args), "torch_npu": fake_torch_npu()},
    )
    host.env.update(env or {})
    for name in drop:
        host.env.pop(name, None)
    return host


def cuda_host(gpus=2, env=None, **torch_args):
    torch_args.setdefault("cuda", "12.1")
    listing = "".join("GPU {}: NVIDIA A100 (UUID: GPU-{})\n".format(i, i) for i in range(gpus))
    host = FakeHost(env=env, tools={"nvidia-smi": "/usr/bin/nvidia-smi"},
                    modules={"torch": fake_torch(version="2.7.1+cu121", gpus=gpus, **torch_args)},
                    results={"nvidia-smi": (0, listing, "")})
    return host


def cpu_host(env=None):
    return FakeHost(env=env, modules={"torch": fake_torch(version="2.13.0+cpu")})


def run(host, require=None):
    return doctor.run_checks(host.probes(), require=require)


def status(report, name):
    check = report.get(name)
    assert check is not None, "no check {!r}: {}".format(name, report.checks)
    return check.status


# --------------------------------------------------------------------------------------------
# NPU host


def test_healthy_npu_host_passes():
    host = npu_host()
    report = run(host)
    assert report.host == "npu"
    assert report.exit_code == 0
    assert {c.status for c in report.checks} == {"ok"}, report.checks
    names = [c.name for c in report.checks]
    assert names == ["python", "torch", "torch_npu", "versions", "cann", "driver", "npu-smi",
                     "npu devices", "npu compute", "ASCEND_RT_VISIBLE_DEVICES", "hccl"]
    assert report.get("driver").detail.startswith("24.1.rc3")
    assert "CANN 8.3.RC1" in report.get("cann").detail
    assert report.get("npu devices").detail == "8 visible (Ascend910B3)"
    assert host.modules["torch"].devices == ["npu:0"]  # the tiny computation ran on the NPU
    assert host.ran == [(["/usr/local/sbin/npu-smi", "info"], doctor.TOOL_TIMEOUT)]


@pytest.mark.parametrize("torch_version, npu_version", [
    ("2.7.1+cpu", "2.7.1"),
    ("2.7.1", "2.7.1.post1"),
    ("2.7.1", "2.7.1.post10"),
    ("2.9.0", "2.9.0rc1"),
    ("2.12.0+cpu", "2.12.0.post2"),
    ("2.14.0", "2.14.0"),
    ("1.11.0", "1.11.0.post14"),
])
def test_versions_that_pair(torch_version, npu_version):
    check = doctor.check_versions(fake_torch(version=torch_version), fake_torch_npu(version=npu_version))
    assert check.status == "ok", check.detail


@pytest.mark.parametrize("torch_version, npu_version", [
    ("2.8.0", "2.7.1.post1"),
    ("2.7.0", "2.7.1"),
    ("2.13.0+cpu", "2.7.1.fake"),
    ("2.6.0", "2.7.1rc1"),
])
def test_version_mismatch_fails(torch_version, npu_version):
    check = doctor.check_versions(fake_torch(version=torch_version), fake_torch_npu(version=npu_version))
    assert check.status == "fail"
    assert "torch-npu=={}".format(".".join(torch_version.split("+")[0].split(".")[:3])) in check.hint


def test_version_mismatch_on_a_host_exits_1():
    host = npu_host(version="2.8.0+cpu")
    report = run(host)
    assert status(report, "versions") == "fail"
    assert report.exit_code == 1


def test_version_unparsable_is_a_warning():
    check = doctor.check_versions(fake_torch(version="2.7.1"), fake_torch_npu(version="unknown"))
    assert check.status == "warn"


def test_version_rule_agrees_with_the_pin_table():
    """Every torch <-> torch_npu pair of rules/torch_npu_versions.toml pairs by the doctor's rule."""
    table = REPO / "rules" / "torch_npu_versions.toml"
    if not table.is_file():
        pytest.skip("rules/torch_npu_versions.toml is not there")
    import tomllib

    pairs = tomllib.loads(table.read_text())["pair"]
    assert pairs
    for pair in pairs:
        check = doctor.check_versions(fake_torch(version=pair["torch"]),
                                      fake_torch_npu(version=pair["torch_npu"]))
        assert check.status == "ok", pair


def test_torch_npu_missing_on_an_ascend_host():
    host = npu_host()
    del host.modules["torch_npu"]
    report = run(host)
    assert report.host == "npu"
    check = report.get("torch_npu")
    assert check.status == "fail"
    assert "not installed" in check.detail and "npu-smi is on PATH" in check.detail
    assert check.hint.startswith("/usr/bin/python3 -m pip install torch-npu==2.7.1")  # this interpreter's pip
    for name in ("versions", "npu devices", "npu compute"):
        assert status(report, name) == "skip", name
    assert status(report, "cann") == "ok"  # the rest of the host is still checked
    assert report.exit_code == 1


def test_any_single_ascend_sign_makes_an_npu_host():
    host = FakeHost(dev=["davinci0"], modules={"torch": fake_torch()})
    report = run(host)
    assert report.host == "npu"
    assert "/dev/davinci devices exist" in report.get("torch_npu").detail


def test_torch_npu_import_failure_with_a_cuda_torch():
    host = npu_host(cuda="12.1")
    host.modules["torch_npu"] = RuntimeError("Two accelerators cannot be used at the same time")
    report = run(host)
    check = report.get("torch_npu")
    assert check.status == "fail"
    assert "Two accelerators" in check.detail
    assert "CPU build of torch" in check.hint and "torch==2.7.1" in check.hint
    assert report.exit_code == 1


def test_cann_unset_gives_the_set_env_hint():
    host = npu_host(drop=("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"))
    report = run(host)
    check = report.get("cann")
    assert check.status == "fail"
    assert "ASCEND_HOME_PATH and ASCEND_TOOLKIT_HOME are unset" in check.detail
    assert check.hint == "source /usr/local/Ascend/ascend-toolkit/set_env.sh"
    assert report.exit_code == 1


def test_cann_unset_hint_without_any_set_env_script():
    host = npu_host(drop=("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"))
    host.files.clear()
    check = run(host).get("cann")
    assert check.hint.startswith("source /usr/local/Ascend/ascend-toolkit/set_env.sh")


def test_cann_unset_hint_names_the_new_layout_when_only_it_exists():
    host = npu_host(drop=("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"))
    del host.files["/usr/local/Ascend/ascend-toolkit/set_env.sh"]
    host.files["/usr/local/Ascend/cann/set_env.sh"] = "# CANN 9\n"
    assert run(host).get("cann").hint == "source /usr/local/Ascend/cann/set_env.sh"


def test_cann_home_that_does_not_exist():
    host = npu_host(env={"ASCEND_HOME_PATH": "/opt/nowhere"}, drop=("ASCEND_TOOLKIT_HOME",))
    check = run(host).get("cann")
    assert check.status == "fail"
    assert check.detail == "ASCEND_HOME_PATH=/opt/nowhere is not a directory"


def test_cann_homes_that_differ_warn():
    host = npu_host(env={"ASCEND_TOOLKIT_HOME": "/opt/cann"})
    host.dirs.add("/opt/cann")
    report = run(host)
    assert status(report, "cann") == "warn"
    assert report.exit_code == 0


def test_driver_version_file_missing():
    host = npu_host(compute=RuntimeError("drvError: no driver"))
    del host.files[DRIVER_INFO]
    report = run(host)
    check = report.get("driver")
    assert check.status == "fail"
    assert check.detail == DRIVER_INFO + " is missing"
    assert check.hint.startswith("install the NPU driver") and "mount" in check.hint
    assert report.exit_code == 1


def test_driver_version_file_missing_with_torch_npu_missing():
    host = npu_host()
    del host.files[DRIVER_INFO]
    del host.modules["torch_npu"]
    assert status(run(host), "driver") == "fail"


def test_driver_version_file_missing_where_the_npu_computes_warns():
    """A container without the version.info mount: the NPU works, so the driver does."""
    host = npu_host()
    del host.files[DRIVER_INFO]
    report = run(host)
    check = report.get("driver")
    assert check.status == "warn"
    assert "the NPU computes" in check.detail
    assert report.exit_code == 0


def test_driver_path_follows_ascend_install_info():
    host = npu_host()
    del host.files[DRIVER_INFO]
    host.files["/etc/ascend_install.info"] = "UserName=HwHiAiUser\nDriver_Install_Path_Param=/opt/Ascend\n"
    host.files["/opt/Ascend/driver/version.info"] = "Version=25.2.0\n"
    check = run(host).get("driver")
    assert check.status == "ok"
    assert check.detail == "25.2.0 (/opt/Ascend/driver/version.info)"


def test_driver_file_without_version_line_warns():
    host = npu_host()
    host.files[DRIVER_INFO] = "something else\n"
    assert status(run(host), "driver") == "warn"


def test_npu_smi_missing_is_a_warning():
    host = npu_host()
    del host.tools["npu-smi"]
    report = run(host)
    check = report.get("npu-smi")
    assert check.status == "warn"
    assert "not on PATH" in check.detail
    assert report.exit_code == 0  # training does not need npu-smi
    assert host.ran == []


@pytest.mark.parametrize("result, words", [
    ((8, "", "dcmi module initialize failed. ret is -8005\n"),
     "failed (exit 8): dcmi module initialize failed"),
    (subprocess.TimeoutExpired(["npu-smi", "info"], 10), "did not answer within 10s"),
    (PermissionError(13, "Permission denied"), "cannot run: PermissionError"),
])
def test_npu_smi_that_fails(result, words):
    host = npu_host()
    host.results["npu-smi"] = result
    report = run(host)
    check = report.get("npu-smi")
    assert check.status == "fail"
    assert words in check.detail
    assert report.exit_code == 1


def test_zero_devices():
    host = npu_host()
    host.modules["torch"].npu = fake_npu_module(count=0)
    report = run(host)
    check = report.get("npu devices")
    assert check.status == "fail"
    assert "is_available() is False" in check.detail and "device_count() is 0" in check.detail
    assert status(report, "npu compute") == "skip"
    assert report.exit_code == 1


def test_zero_devices_points_at_the_visible_devices_variable():
    host = npu_host(env={"ASCEND_RT_VISIBLE_DEVICES": "3,1"})
    host.modules["torch"].npu = fake_npu_module(count=0)
    report = run(host)
    assert "ASCEND_RT_VISIBLE_DEVICES='3,1'" in report.get("npu devices").hint
    assert status(report, "ASCEND_RT_VISIBLE_DEVICES") == "fail"


def test_device_query_that_raises():
    host = npu_host()
    host.modules["torch"].npu = fake_npu_module(raises=RuntimeError("drvMngGetConsoleLogLevel failed"))
    report = run(host)
    check = report.get("npu devices")
    assert check.status == "fail"
    assert "RuntimeError: drvMngGetConsoleLogLevel failed" in check.detail
    assert status(report, "npu compute") == "skip"


def test_on_device_computation_that_raises_is_a_fail_record():
    host = npu_host(compute=RuntimeError("EZ9999: Inner Error! aclnnAdd failed"))
    report = run(host)  # no exception escapes
    check = report.get("npu compute")
    assert check.status == "fail"
    assert "RuntimeError: EZ9999: Inner Error! aclnnAdd failed" in check.detail
    assert report.exit_code == 1


def test_on_device_computation_with_a_wrong_result():
    host = npu_host(compute=7.0)
    check = run(host).get("npu compute")
    assert check.status == "fail"
    assert "ArithmeticError" in check.detail


def test_long_error_messages_are_cut():
    host = npu_host(compute=RuntimeError("x" * 1000 + "\nsecond line"))
    detail = run(host).get("npu compute").detail
    assert "second line" not in detail and detail.endswith("...")
    assert len(detail) < 300


@pytest.mark.parametrize("value, physical, expected, words", [
    (None, 8, "ok", "unset"),
    ("0,1,2,3", 8, "ok", "4 visible: 0,1,2,3"),
    ("4", None, "ok", "range not checked"),
    ("3,1", 8, "fail", "not ascending"),
    ("1,1", 8, "fail", "duplicated id 1"),
    ("0,8", 8, "fail", "id 8 is out of range, this host has 8 device(s)"),
    ("0, 1", 8, "fail", "' 1' is not a device id"),
    ("0,-1", 8, "fail", "'-1' is not a device id"),
    ("", 8, "fail", "no device is visible"),
])
def test_ascend_rt_visible_devices(value, physical, expected, words):
    env = {} if value is None else {"ASCEND_RT_VISIBLE_DEVICES": value}
    check = doctor.check_ascend_visible(env, physical)
    assert check.status == expected
    assert words in check.detail


def test_ascend_rt_visible_devices_not_ascending_hint_gives_the_sorted_list():
    check = doctor.check_ascend_visible({"ASCEND_RT_VISIBLE_DEVICES": "2,0,1"}, 8)
    assert check.hint == "ASCEND_RT_VISIBLE_DEVICES=0,1,2"


def test_ascend_rt_visible_devices_range_comes_from_dev_davinci():
    host = npu_host(devices=2, env={"ASCEND_RT_VISIBLE_DEVICES": "0,2"})
    report = run(host)
    assert "this host has 2 device(s)" in report.get("ASCEND_RT_VISIBLE_DEVICES").detail
    assert report.exit_code == 1


@pytest.mark.parametrize("env, words", [
    ({"HCCL_CONNECT_TIMEOUT": "60"},
     "HCCL_CONNECT_TIMEOUT='60' is not an integer number of seconds in [120, 7200]"),
    ({"HCCL_CONNECT_TIMEOUT": "7201"}, "HCCL_CONNECT_TIMEOUT='7201'"),
    ({"HCCL_EXEC_TIMEOUT": "-5"}, "HCCL_EXEC_TIMEOUT='-5'"),
    ({"HCCL_BUFFSIZE": "0"}, "HCCL_BUFFSIZE='0' is not an integer number of MB >= 1"),
    ({"HCCL_BUFFSIZE": "200MB"}, "HCCL_BUFFSIZE='200MB'"),
    ({"HCCL_IF_IP": "10.0.0"}, "HCCL_IF_IP='10.0.0' is not one IPv4 or IPv6 address"),
    ({"HCCL_IF_IP": "10.0.0.1,10.0.0.2"}, "HCCL_IF_IP="),
    ({"HCCL_SOCKET_IFNAME": "eth0,,enp1"}, "HCCL_SOCKET_IFNAME="),
    ({"HCCL_WHITELIST_DISABLE": "yes"}, "HCCL_WHITELIST_DISABLE='yes' is not 0 or 1"),
    ({"HCCL_WHITELIST_DISABLE": "0"}, "HCCL_WHITELIST_DISABLE=0 needs HCCL_WHITELIST_FILE"),
])
def test_hccl_invalid_values_fail_on_multi_card_hosts(env, words):
    report = run(npu_host(env=env))
    check = report.get("hccl")
    assert check.status == "fail"
    assert words in check.detail
    assert check.detail.startswith("8 card(s): ")
    assert report.exit_code == 1


def test_hccl_valid_values_are_listed():
    env = {"HCCL_CONNECT_TIMEOUT": "1200", "HCCL_EXEC_TIMEOUT": "0.05", "HCCL_BUFFSIZE": "400",
           "HCCL_IF_IP": "192.0.2.10", "HCCL_SOCKET_IFNAME": "^=docker0,lo",
           "HCCL_WHITELIST_DISABLE": "0", "HCCL_WHITELIST_FILE": "/etc/hccl_whitelist.json"}
    host = npu_host(env=env)
    host.files["/etc/hccl_whitelist.json"] = '{"host_ip": ["192.0.2.10"]}'
    check = run(host).get("hccl")
    assert check.status == "ok", check.detail
    assert "HCCL_CONNECT_TIMEOUT=1200" in check.detail and "HCCL_IF_IP=192.0.2.10" in check.detail


def test_hccl_is_skipped_for_a_single_device():
    report = run(npu_host(devices=1, env={"HCCL_CONNECT_TIMEOUT": "1"}))
    assert status(report, "hccl") == "skip"
    assert report.exit_code == 0


def test_hccl_world_size_makes_a_multi_card_run():
    report = run(npu_host(devices=1, env={"WORLD_SIZE": "2", "HCCL_BUFFSIZE": "-1"}))
    assert status(report, "hccl") == "fail"


def test_hccl_multi_node_without_a_nic_setting_warns():
    report = run(npu_host(env={"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"}))
    check = report.get("hccl")
    assert check.status == "warn"
    assert "HCCL_SOCKET_IFNAME" in check.hint
    report = run(npu_host(env={"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "HCCL_SOCKET_IFNAME": "eth"}))
    assert status(report, "hccl") == "ok"


def test_hccl_backend_missing_fails():
    report = run(npu_host(hccl=False))
    check = report.get("hccl")
    assert check.status == "fail"
    assert "no HCCL backend" in check.detail
    assert status(run(npu_host(hccl=True)), "hccl") == "ok"


def test_forced_cuda_skips_the_npu_checks():
    host = npu_host(env={"NPU_COMPAT_DEVICE": "cuda"})
    report = run(host)
    assert report.host == "cpu"  # fake torch is a CPU build, no nvidia-smi
    assert status(report, "NPU_COMPAT_DEVICE") == "warn"
    assert report.get("torch_npu").detail == "installed, not imported (NPU_COMPAT_DEVICE=cuda)"
    assert report.get("cann") is None and report.get("npu devices") is None
    assert host.modules["torch"].devices == []


def test_unknown_device_env_value_warns():
    report = run(npu_host(env={"NPU_COMPAT_DEVICE": "npu"}))
    assert report.host == "npu"
    assert "ignored" in report.get("NPU_COMPAT_DEVICE").detail


def test_a_check_that_raises_becomes_a_fail_record(monkeypatch):
    def broken(*args):
        raise KeyError("surprise")

    monkeypatch.setattr(doctor, "check_driver", broken)
    report = run(npu_host())
    check = report.get("driver")
    assert check.status == "fail"
    assert check.detail == "the check itself raised KeyError: 'surprise'"
    assert status(report, "npu-smi") == "ok"  # the next checks still ran


def test_a_device_check_that_raises_becomes_a_fail_record(monkeypatch):
    def broken(torch, torch_npu, environ):
        raise TypeError("surprise")

    monkeypatch.setattr(doctor, "check_npu_devices", broken)
    report = run(npu_host())
    assert report.get("npu devices").detail == "the check itself raised TypeError: surprise"
    assert status(report, "npu compute") == "skip"
    assert report.exit_code == 1


# --------------------------------------------------------------------------------------------
# CUDA host, CPU host, torch missing, --require


def test_healthy_cuda_host():
    host = cuda_host()
    report = run(host)
    assert report.host == "cuda"
    assert report.exit_code == 0, report.checks
    assert [c.name for c in report.checks] == ["python", "torch", "torch_npu", "cuda build", "nvidia-smi",
                                               "cuda devices", "cuda compute", "CUDA_VISIBLE_DEVICES", "nccl"]
    assert report.get("torch").detail == "2.7.1+cu121 (CUDA 12.1 build)"
    assert report.get("nvidia-smi").detail == "2 GPU(s) listed by /usr/bin/nvidia-smi"
    assert host.modules["torch"].devices == ["cuda:0"]
    assert host.ran == [(["/usr/bin/nvidia-smi", "-L"], doctor.TOOL_TIMEOUT)]


def test_cpu_torch_on_a_host_with_nvidia_smi():
    host = cuda_host(cuda=None)
    report = run(host)
    assert report.host == "cuda"
    assert status(report, "cuda build") == "fail"
    assert status(report, "cuda devices") == "skip"
    assert report.exit_code == 1


def test_cuda_build_without_nvidia_smi_and_without_gpus():
    host = cuda_host(gpus=0)
    host.tools.clear()
    report = run(host)
    assert report.host == "cuda"
    assert status(report, "nvidia-smi") == "warn"
    assert status(report, "cuda devices") == "fail"
    assert status(report, "cuda compute") == "skip"
    assert report.exit_code == 1


def test_nvidia_smi_that_fails():
    host = cuda_host()
    message = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    host.results["nvidia-smi"] = (9, message, "")
    check = run(host).get("nvidia-smi")
    assert check.status == "fail"
    assert "couldn't communicate" in check.detail


def test_cuda_computation_that_raises():
    report = run(cuda_host(compute=RuntimeError("CUDA error: no kernel image is available")))
    assert status(report, "cuda compute") == "fail"
    assert report.exit_code == 1


@pytest.mark.parametrize("value, expected, words", [
    ("0,1", "ok", "2 visible: 0,1"),
    ("1,0", "ok", "2 visible: 1,0"),  # CUDA does not need ascending
    ("0,0", "fail", "repeated index 0 hides every GPU"),
    ("0,5", "fail", "index 5 is out of range, nvidia-smi lists 2 GPU(s)"),
    ("0,gpu1", "fail", "'gpu1' is not a GPU index"),
    ("-1", "warn", "hides every GPU"),
    ("", "warn", "hides every GPU"),
    ("1,-1,0", "warn", "the entries from '-1' on are ignored"),
    ("GPU-aaaa,GPU-bbbb", "ok", "2 GPU(s) by UUID"),
    ("GPU-aaaa,GPU-aaaa", "fail", "repeated UUID"),
])
def test_cuda_visible_devices(value, expected, words):
    report = run(cuda_host(env={"CUDA_VISIBLE_DEVICES": value}))
    check = report.get("CUDA_VISIBLE_DEVICES")
    assert check.status == expected
    assert words in check.detail


def test_nccl_missing_fails_only_with_several_gpus():
    assert status(run(cuda_host(gpus=2, nccl=False)), "nccl") == "fail"
    assert status(run(cuda_host(gpus=1, nccl=False)), "nccl") == "warn"


def test_plain_cpu_host_says_so_and_passes():
    report = run(cpu_host())
    assert report.host == "cpu"
    assert [c.name for c in report.checks] == ["python", "torch", "torch_npu", "accelerator"]
    check = report.get("accelerator")
    assert check.status == "warn"
    assert "no Ascend NPU and no CUDA GPU" in check.detail
    assert "CPU fallback" in check.detail
    assert report.exit_code == 0


@pytest.mark.parametrize("require, make, expected", [
    ("npu", cpu_host, 1),
    ("cuda", cpu_host, 1),
    ("any", cpu_host, 1),
    ("npu", npu_host, 0),
    ("any", npu_host, 0),
    ("cuda", npu_host, 1),
    ("cuda", cuda_host, 0),
    ("any", cuda_host, 0),
])
def test_require(require, make, expected):
    report = run(make(), require=require)
    assert status(report, "require") == ("fail" if expected else "ok")
    assert report.exit_code == expected


def test_require_rejects_unknown_values():
    with pytest.raises(ValueError):
        doctor.run_checks(cpu_host().probes(), require="tpu")


def test_torch_missing_is_reported_not_raised():
    host = FakeHost()
    report = run(host)
    check = report.get("torch")
    assert check.status == "fail"
    assert "torch is not importable: ModuleNotFoundError" in check.detail
    assert report.host == "cpu"
    assert report.exit_code == 1


def test_torch_missing_advises_the_install_for_this_interpreter():
    check = run(FakeHost()).get("torch")
    assert check.hint.startswith("/usr/bin/python3 -m pip install torch (")
    assert "--index-url https://download.pytorch.org/whl/cpu" in check.hint  # the CPU build


@pytest.mark.parametrize("executable, command", [
    ("/opt/venvs/proj/bin/python", "/opt/venvs/proj/bin/python -m pip install"),
    ("/home/a b/.venv/bin/python", "'/home/a b/.venv/bin/python' -m pip install"),
    ("/tmp/it's/python", "'/tmp/it'\"'\"'s/python' -m pip install"),
])
def test_pip_command_is_quoted_for_the_shell(executable, command):
    probes = doctor.Probes(environ={}, executable=executable)
    assert doctor.pip_command(probes) == command


def test_torch_missing_on_an_ascend_host():
    host = npu_host()
    del host.modules["torch"]
    report = run(host)
    assert status(report, "torch") == "fail"
    assert status(report, "torch_npu") == "skip"
    assert status(report, "driver") == "ok"
    assert report.exit_code == 1


# --------------------------------------------------------------------------------------------
# Output: JSON, text, colour, exit codes


class TtyStream(io.StringIO):
    def isatty(self):
        return True


def test_json_shape_and_exit_code():
    stream = io.StringIO()
    code = doctor.main(["--json"], probes=npu_host(drop=("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")).probes(),
                       stream=stream)
    payload = json.loads(stream.getvalue())
    assert set(payload) == {"host", "checks", "summary", "exit_code"}
    assert payload["host"] == "npu"
    assert code == payload["exit_code"] == 1
    for check in payload["checks"]:
        assert set(check) == {"name", "status", "detail", "hint"}
        assert check["status"] in ("ok", "warn", "fail", "skip")
    assert set(payload["summary"]) == {"ok", "warn", "fail", "skip"}
    assert sum(payload["summary"].values()) == len(payload["checks"])
    assert payload["summary"]["fail"] == 1
    cann = next(c for c in payload["checks"] if c["name"] == "cann")
    assert cann["hint"] == "source /usr/local/Ascend/ascend-toolkit/set_env.sh"


def test_json_carries_what_the_shim_detected():
    stream = io.StringIO()
    info = {"package": "npu_compat", "version": "0.1.0", "device_type": "cuda", "reason": "r"}
    assert doctor.main(["--json"], probes=cpu_host().probes(), stream=stream, shim_info=info) == 0
    assert json.loads(stream.getvalue())["shim"] == info


def test_text_table_without_colour_off_a_terminal():
    stream = io.StringIO()
    code = doctor.main([], probes=npu_host(version="2.8.0").probes(), stream=stream)
    out = stream.getvalue()
    assert code == 1
    assert not ANSI.search(out)
    assert re.search(r"^versions\s+fail\s+torch 2\.8\.0 with torch_npu 2\.7\.1\.post1", out, re.M)
    assert re.search(r"^\s+hint: install the torch_npu built for this torch", out, re.M)
    assert out.rstrip().endswith("host: npu; summary: 10 ok, 0 warn, 1 fail, 0 skip -> exit 1")


def test_text_table_is_coloured_on_a_terminal():
    stream = TtyStream()
    doctor.main([], probes=npu_host(version="2.8.0").probes(), stream=stream)
    out = stream.getvalue()
    assert "\x1b[31mfail" in out and "\x1b[32mok" in out


@pytest.mark.parametrize("argv, env", [(["--no-color"], {}), ([], {"NO_COLOR": "1"})])
def test_no_colour_on_request(argv, env):
    stream = TtyStream()
    doctor.main(argv, probes=npu_host(env=env).probes(), stream=stream)
    assert not ANSI.search(stream.getvalue())


def test_main_exit_codes():
    assert doctor.main([], probes=npu_host().probes(), stream=io.StringIO()) == 0
    assert doctor.main([], probes=cpu_host().probes(), stream=io.StringIO()) == 0
    assert doctor.main(["--require", "npu"], probes=cpu_host().probes(), stream=io.StringIO()) == 1
    host = npu_host(compute=RuntimeError("device lost"))
    assert doctor.main([], probes=host.probes(), stream=io.StringIO()) == 1


# --------------------------------------------------------------------------------------------
# `npu-migrate doctor` (click)


def invoke(args, host):
    return CliRunner().invoke(doctor_command, args, obj={"doctor_probes": host.probes()})


def test_command_json():
    result = invoke(["--json"], npu_host(env={"ASCEND_RT_VISIBLE_DEVICES": "1,1"}))
    assert result.exit_code == 1, result.output
    payload = json.loads(result.stdout)
    assert payload["tool"] == {"name": "npu-migrate", "version": __version__}
    assert payload["exit_code"] == 1
    visible = next(c for c in payload["checks"] if c["name"] == "ASCEND_RT_VISIBLE_DEVICES")
    assert visible["status"] == "fail"


def test_command_text_and_exit_zero():
    result = invoke([], cpu_host())
    assert result.exit_code == 0, result.output
    assert "accelerator" in result.stdout and "host: cpu;" in result.stdout
    assert not ANSI.search(result.stdout)


def test_command_require():
    assert invoke(["--require", "cuda"], cpu_host()).exit_code == 1
    assert invoke(["--require", "cuda"], cuda_host()).exit_code == 0
    assert invoke(["--require", "tpu"], cpu_host()).exit_code == 2  # click's usage error


def test_command_rich_table_on_a_terminal():
    report = run(npu_host(version="2.8.0"))
    stream = io.StringIO()
    console = Console(file=stream, force_terminal=True, color_system="standard", width=160)
    print_rich(report, console, doctor.summary_line(report))
    out = stream.getvalue()
    assert ANSI.search(out)
    plain = ANSI.sub("", re.sub(r"\x1b\[[0-9;]*m", "", out))
    assert "npu-migrate {} doctor: npu host".format(__version__) in plain
    assert re.search(r"versions\s+│\s+fail", plain)
    assert "summary: 10 ok, 0 warn, 1 fail, 0 skip -> exit 1" in plain


def test_command_runs_on_this_machine(tmp_path, monkeypatch):
    """No fakes: whatever this machine is, the report is consistent and the exit code follows it."""
    monkeypatch.chdir(tmp_path)  # no project environment there: this interpreter, in-process
    for name in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(doctor_command, ["--json"])
    payload = json.loads(result.stdout)
    assert payload["interpreter"]["in_process"] is True
    assert payload["checks"][0]["name"] == "interpreter"
    assert payload["host"] in ("npu", "cuda", "cpu")
    assert result.exit_code == payload["exit_code"] == (1 if payload["summary"]["fail"] else 0)
    assert next(c for c in payload["checks"] if c["name"] == "torch")["status"] == "ok"


def _clean_env(**extra):
    """This process's environment without anything that steers the doctor."""
    steer = re.compile(r"^(ASCEND_|HCCL_|NPU_COMPAT_|FAKE_TORCH_NPU_|CUDA_VISIBLE_DEVICES$|WORLD_SIZE$|"
                       r"LOCAL_WORLD_SIZE$|PYTHONPATH$|PYTHONSTARTUP$|NO_COLOR$)")
    env = {k: v for k, v in os.environ.items() if not steer.match(k)}
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # a real torch_npu must not sneak in
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


def test_command_reports_without_torch(tmp_path):
    """torch not importable: the command still runs (the shim package, which imports torch, is not)."""
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # import torch now raises ImportError\n"
        "from click.testing import CliRunner\n"
        "from npu_migrate.doctor import doctor_command\n"
        "result = CliRunner().invoke(doctor_command, ['--json'])\n"
        "assert 'npu_migrate.shim' not in sys.modules, 'the shim package was imported'\n"
        "sys.stdout.write(result.stdout)\n"
        "sys.exit(result.exit_code)\n"
    )
    env = _clean_env()
    for name in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        env.pop(name, None)  # the checks run in this (torch-less) process
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    payload = json.loads(proc.stdout)
    torch_check = next(c for c in payload["checks"] if c["name"] == "torch")
    assert torch_check["status"] == "fail"
    assert "torch is not importable" in torch_check["detail"]


# --------------------------------------------------------------------------------------------
# `npu-migrate doctor` checks the project's interpreter, not its own


def fake_env(folder, venv=True):
    """A folder that looks like a virtual environment (conda's when not ``venv``: no pyvenv.cfg)."""
    (folder / "bin").mkdir(parents=True)
    if venv:
        (folder / "pyvenv.cfg").write_text("home = /usr/bin\n")
    python = folder / "bin" / "python"
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(0o755)
    return python


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory):
    """A real virtual environment without torch (nor pip: fast), made from the base interpreter."""
    folder = tmp_path_factory.mktemp("bare") / "env"
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120,
                   capture_output=True)
    python = venv_python(folder)
    assert python is not None
    assert subprocess.run([str(python), "-c", "import torch"], capture_output=True).returncode != 0
    return folder


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A git work tree to run the doctor in, with no activated environment."""
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    monkeypatch.chdir(root)
    for name in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    return root


def test_interpreter_order(tmp_path):
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    deep = root / "src" / "pkg"
    deep.mkdir(parents=True)
    dot_venv = fake_env(root / ".venv")
    active = tmp_path / "active"
    fake_env(active)
    conda = tmp_path / "conda"
    fake_env(conda, venv=False)

    found = find_interpreter(cwd=deep, environ={})  # from a subfolder, up to the work tree's top
    assert (found.python, found.source, found.status) == (str(dot_venv), ".venv/", "ok")
    assert "the project's virtual environment" in found.detail
    found = find_interpreter(cwd=deep, environ={"VIRTUAL_ENV": str(active), "CONDA_PREFIX": str(conda)})
    assert (found.python, found.source) == (str(active / "bin" / "python"), "$VIRTUAL_ENV")
    found = find_interpreter(str(conda), cwd=deep, environ={"VIRTUAL_ENV": str(active)})
    assert (found.python, found.source) == (str(conda / "bin" / "python"), "--python")
    found = find_interpreter(str(dot_venv), cwd=tmp_path, environ={})
    assert (found.python, found.source) == (str(dot_venv), "--python")
    found = find_interpreter(cwd=deep, environ={"CONDA_PREFIX": str(conda)})
    assert found.source == ".venv/"  # the project's own environment before a conda base
    (root / ".venv" / "pyvenv.cfg").unlink()  # not a virtual environment any more
    fake_env(root / "venv")
    assert find_interpreter(cwd=deep, environ={}).source == "venv/"


def test_interpreter_not_found_above_the_work_tree(tmp_path):
    fake_env(tmp_path / ".venv")  # belongs to whatever holds the project, not to it
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    conda = tmp_path / "conda"
    fake_env(conda, venv=False)
    assert find_interpreter(cwd=root, environ={"CONDA_PREFIX": str(conda)}).source == "$CONDA_PREFIX"
    found = find_interpreter(cwd=root, environ={})
    assert found.python is None and found.source == "self"  # this process, in-process
    assert found.status == ("warn" if sys.prefix != sys.base_prefix else "ok")
    assert "--python" in found.hint or found.status == "ok"
    outside = tmp_path / "loose"  # not in a git work tree: only the folder itself
    (outside / "sub").mkdir(parents=True)
    fake_env(outside / ".venv")
    assert find_interpreter(cwd=outside / "sub", environ={}).source == "self"
    assert find_interpreter(cwd=outside, environ={}).source == ".venv/"


def test_this_environment_runs_in_process(tmp_path):
    found = find_interpreter(cwd=tmp_path, environ={"VIRTUAL_ENV": sys.prefix})
    if venv_python(Path(sys.prefix)) is None:
        pytest.skip("this interpreter is not in a virtual environment")
    assert found.python is None and found.source == "$VIRTUAL_ENV" and "this tool's own" in found.detail


@pytest.mark.parametrize("value, words", [
    ("/no/such/python", "no such interpreter"),
    ("EMPTY_DIR", "not a virtual environment"),
])
def test_python_option_that_is_not_an_interpreter(value, words, project):
    (project / "EMPTY_DIR").mkdir()
    result = CliRunner().invoke(doctor_command, ["--python", value])
    assert result.exit_code == 2  # a usage error, like any bad option
    assert words in result.output and "Traceback" not in result.output


def test_project_venv_without_torch_is_a_row(project, bare_venv):
    """The project's .venv has no torch: a fail row naming that interpreter's pip, no traceback."""
    shutil.copytree(bare_venv, project / ".venv", symlinks=True)
    python = venv_python(project.resolve() / ".venv")
    result = CliRunner().invoke(doctor_command, ["--json"])
    assert result.exit_code == 1, result.output
    payload = json.loads(result.stdout)
    assert payload["interpreter"] == {"python": str(python), "source": ".venv/", "in_process": False}
    checks = {c["name"]: c for c in payload["checks"]}
    assert payload["checks"][0]["name"] == "interpreter"
    assert checks["interpreter"]["status"] == "ok"
    assert str(python) in checks["python"]["detail"]  # the checks ran there
    assert checks["torch"]["status"] == "fail"
    assert checks["torch"]["detail"] == "torch is not importable: ModuleNotFoundError: No module named 'torch'"
    assert checks["torch"]["hint"].startswith(f"{python} -m pip install torch (")

    text = CliRunner().invoke(doctor_command, [])
    assert text.exit_code == 1
    assert re.search(r"^torch\s+fail\s+torch is not importable", text.stdout, re.M)
    assert "Traceback" not in text.output


def test_python_option_runs_the_checks_there(project):
    """--python this interpreter: run in a subprocess, torch found there."""
    result = CliRunner().invoke(doctor_command, ["--json", "--python", sys.executable, "--require", "npu"])
    payload = json.loads(result.stdout)
    assert payload["interpreter"]["source"] == "--python" and not payload["interpreter"]["in_process"]
    checks = {c["name"]: c for c in payload["checks"]}
    assert checks["torch"]["status"] == "ok" and checks["torch"]["detail"].startswith(torch.__version__)
    assert "require" in checks  # the options travel to the checks
    assert result.exit_code == payload["exit_code"]


def test_interpreter_that_cannot_run_the_checks(project, tmp_path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'fatal: this is not python' >&2\nexit 3\n")
    broken.chmod(0o755)
    result = CliRunner().invoke(doctor_command, ["--python", str(broken)])
    assert result.exit_code == 1
    assert re.search(r"^checks\s+fail\s+the checks could not run there \(exit 3\): fatal: this is not python",
                     result.stdout, re.M), result.stdout
    assert "Traceback" not in result.output


# --------------------------------------------------------------------------------------------
# `python -m npu_compat --json` on an injected shim


@pytest.fixture
def injected(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    assert "created shim npu_compat/" in inject(root, "npu_compat")
    return root


def run_module(root, *args, path=(), **env):
    paths = [str(root)] + [str(p) for p in path]
    return subprocess.run([sys.executable, "-m", "npu_compat", *args], cwd=root,
                          env=_clean_env(PYTHONPATH=os.pathsep.join(paths), **env),
                          capture_output=True, text=True, timeout=300)


def test_injected_shim_has_the_doctor(injected):
    assert "doctor.py" in TEMPLATE_FILES
    assert (injected / "npu_compat" / "doctor.py").read_bytes() == DOCTOR_FILE.read_bytes()


def test_module_json_on_a_cpu_host(injected):
    proc = run_module(injected, "--json")
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["host"] == "cpu"
    assert payload["exit_code"] == 0
    assert payload["shim"]["package"] == "npu_compat"
    assert payload["shim"]["device_type"] == "cuda"
    assert payload["shim"]["reason"] == "torch_npu is not installed"
    torch_check = next(c for c in payload["checks"] if c["name"] == "torch")
    assert torch_check["detail"].startswith(torch.__version__)


def test_module_json_on_a_fake_npu_host(injected, tmp_path):
    toolkit = tmp_path / "toolkit"
    toolkit.mkdir()
    proc = run_module(injected, "--json", path=[FAKE_NPU], ASCEND_HOME_PATH=str(toolkit),
                      ASCEND_RT_VISIBLE_DEVICES="1,0", HCCL_CONNECT_TIMEOUT="30")
    assert proc.returncode == 1, proc.stderr
    payload = json.loads(proc.stdout)
    checks = {c["name"]: c for c in payload["checks"]}
    assert payload["host"] == "npu"
    assert payload["shim"]["device_type"] == "npu"
    assert checks["torch_npu"]["status"] == "ok" and checks["torch_npu"]["detail"] == "2.7.1.fake"
    # the fake torch_npu is "2.7.1" and this torch is not: a real mismatch, reported as such
    assert checks["versions"]["status"] == ("ok" if torch.__version__.startswith("2.7.1") else "fail")
    assert checks["cann"]["status"] == "ok"
    assert checks["npu devices"] == {"name": "npu devices", "status": "ok",
                                     "detail": "2 visible (Ascend910B-fake)", "hint": ""}
    # the fake cannot run kernels: the tiny computation fails, and the doctor says so
    assert checks["npu compute"]["status"] == "fail"
    assert checks["ASCEND_RT_VISIBLE_DEVICES"]["status"] == "fail"
    assert "not ascending" in checks["ASCEND_RT_VISIBLE_DEVICES"]["detail"]
    assert checks["hccl"]["status"] == "fail"
    assert "HCCL_CONNECT_TIMEOUT='30'" in checks["hccl"]["detail"]


def test_module_text_on_a_fake_npu_host_without_cann(injected):
    proc = run_module(injected, path=[FAKE_NPU])
    assert proc.returncode == 1, proc.stderr
    assert re.search(r"^cann\s+fail\s+ASCEND_HOME_PATH and ASCEND_TOOLKIT_HOME are unset", proc.stdout, re.M)
    assert "hint: source /usr/local/Ascend/" in proc.stdout
    assert not ANSI.search(proc.stdout)


def test_module_without_torch_prints_a_row_not_a_traceback(injected, bare_venv):
    python = venv_python(bare_venv)
    proc = subprocess.run([str(python), "-m", "npu_compat"], cwd=injected,
                          env=_clean_env(PYTHONPATH=str(injected)), capture_output=True, text=True,
                          timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1
    assert "device type:  unknown" in proc.stdout
    assert re.search(r"^torch\s+fail\s+torch is not importable", proc.stdout, re.M)
    assert f"{python} -m pip install torch (" in proc.stdout


def test_module_require(injected):
    assert run_module(injected, "--require", "npu").returncode == 1
    assert run_module(injected, "--require", "bogus").returncode == 2  # argparse usage error


# --------------------------------------------------------------------------------------------
# The template file itself


def test_doctor_template_is_conservative_python():
    source = DOCTOR_FILE.read_text()
    tree = ast.parse(source, feature_version=(3, 8))
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)], "no f-strings in shim files"
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "the doctor must not import its own package (npu-migrate loads the file)"
            imported.add(node.module.split(".")[0])
    # standard library only: torch is imported by the checks, through Probes.import_module
    assert imported <= {"argparse", "importlib", "ipaddress", "json", "os", "re", "shutil",
                        "subprocess", "sys"}, imported
    assert "npu_compat" not in source  # it may be installed under another name


def test_doctor_uses_only_torch_npu_names_in_the_api_table():
    source = DOCTOR_FILE.read_text()
    code = "\n".join(line.split("#", 1)[0] for line in source.splitlines())
    used = set(re.findall(r"\b(torch_npu(?:\.\w+)+|torch\.npu(?:\.\w+)+)", code))
    used = {name for name in used if name.rsplit(".", 1)[-1] not in {"__version__", "__file__"}}
    assert "torch.npu.device_count" in used and "torch_npu.npu.utils.get_cann_version" in used
    unknown = sorted(name for name in used if not npu_api.has_name(name, "2.7.1"))
    assert not unknown, "not in the torch_npu API table: {}".format(unknown)


def test_fake_device_module_uses_only_real_names():
    for name in vars(fake_npu_module()):
        assert npu_api.has_name("torch.npu." + name), name
