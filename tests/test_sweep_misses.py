"""Issue #16, section 4: what the leftover sweep used to miss, and the look-alikes it must not flag.

- the profiler's CUDA activity (`ProfilerActivity.CUDA`, `profile(use_cuda=True)`): NPU935;
- `CUDA_VISIBLE_DEVICES` set on a copied environment before it goes to a subprocess, in each of its
  shapes: rewritten (NPU601), keywords of `.update(...)` and `patch.dict(...)` included;
- the variable set inside a command string, and tests that pin it (`expected = f"CUDA_..={x} python"`):
  NPU604 (NPU602 for NCCL, NPU990 for other CUDA names); prose (docstrings, log, print, warning and
  exception messages, help texts, assertion messages) stays quiet.

Each case runs one small file through the engine (`migrate_source`) and reads back the codes in
source order and, where the file changes, the migrated text; a migrated file migrates to itself.
"""

from __future__ import annotations

import textwrap

import pytest

from npu_migrate import catalogue
from npu_migrate.engine import migrate_source
from npu_migrate.model import Options

OPTIONS = Options(enabled=catalogue.enabled_codes())


def run(body: str):
    source = textwrap.dedent(body).encode()
    return migrate_source(source, "case.py", OPTIONS)


def codes(body: str) -> list[str]:
    return [f.code for f in sorted(run(body).findings, key=lambda f: (f.line, f.column))]


def migrated(body: str) -> str:
    result = run(body)
    return (result.new if result.changed else result.original).decode()


# ---------------------------------------------------------------------------------------- profiler

PROFILER = {
    "ProfilerActivity.CUDA through torch": (
        """\
        import torch

        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            pass
        """,
        ["NPU935"],
    ),
    "ProfilerActivity imported by name": (
        """\
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            pass
        """,
        ["NPU935"],
    ),
    "ProfilerActivity through aliases": (
        """\
        import torch.profiler as tp
        from torch.autograd import ProfilerActivity as PA

        activities = [tp.ProfilerActivity.CUDA, PA.CUDA]
        """,
        ["NPU935", "NPU935"],
    ),
    "profile(use_cuda=True)": (
        """\
        import torch

        with torch.profiler.profile(use_cuda=True) as prof:
            pass
        with torch.autograd.profiler.profile(use_cuda=args.cuda, record_shapes=True) as prof:
            pass
        """,
        ["NPU935", "NPU935"],
    ),
    "from torch.autograd.profiler import profile": (
        """\
        from torch.autograd.profiler import profile

        with profile(enabled=True, use_cuda=True) as prof:
            pass
        """,
        ["NPU935"],
    ),
    'use_device="cuda" is the profiler finding, not a leftover string': (
        """\
        import torch

        with torch.autograd.profiler.profile(use_device="cuda") as prof:
            pass
        """,
        ["NPU935"],
    ),
    "emit_nvtx: a leftover": (
        """\
        import torch

        with torch.autograd.profiler.emit_nvtx():
            model(x)
        """,
        ["NPU990"],
    ),
}


@pytest.mark.parametrize("body, expected", PROFILER.values(), ids=list(PROFILER))
def test_profiler_cuda_activity_is_reported(body, expected):
    assert codes(body) == expected
    assert migrated(body) == textwrap.dedent(body)  # reported, never rewritten


PROFILER_QUIET = {
    "CPU activity, use_cuda=False, use_cuda=None": """\
        import torch
        from torch.profiler import ProfilerActivity

        # profile on the cpu only (no cuda)
        with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof:
            pass
        with torch.autograd.profiler.profile(use_cuda=False) as prof:
            pass
        with torch.profiler.profile(use_cuda=None) as prof:
            pass
        """,
    "sort keys torch reads as the device's": """\
        import torch

        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=10))
        print(prof.key_averages().table(sort_by="self_cuda_time_total"))
        total = sum(e.self_cuda_time_total for e in prof.key_averages())
        """,
    "the user's own profile() and ProfilerActivity": """\
        import torch


        class ProfilerActivity:
            CUDA = "cuda activity"


        def profile(use_cuda=False):
            return use_cuda


        profile(use_cuda=True)
        label = ProfilerActivity.CUDA
        """,
}


@pytest.mark.parametrize("body", PROFILER_QUIET.values(), ids=list(PROFILER_QUIET))
def test_profiler_look_alikes_stay_quiet(body):
    assert "NPU935" not in codes(body)
    assert "NPU990" not in codes(body)


# ---------------------------------------------------------------------- copied environment dicts

ENV_COPIES = {
    "os.environ.copy() then a subscript": (
        """\
        import os
        import subprocess

        env = os.environ.copy()
        env["CUDA_VISIBLE_DEVICES"] = str(rank)
        subprocess.run(cmd, env=env)
        """,
        'env[npu_compat.env_name("CUDA_VISIBLE_DEVICES")] = str(rank)',
        ["NPU601"],
    ),
    "dict(os.environ) then a subscript": (
        """\
        import os

        env = dict(os.environ)
        env["CUDA_VISIBLE_DEVICES"] = "0"
        """,
        'env[npu_compat.env_name("CUDA_VISIBLE_DEVICES")] = "0"',
        ["NPU601"],
    ),
    "{**os.environ, ...}": (
        """\
        import os

        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "1", "OMP_NUM_THREADS": "4"}
        """,
        'env = {**os.environ, npu_compat.env_name("CUDA_VISIBLE_DEVICES"): "1", "OMP_NUM_THREADS": "4"}',
        ["NPU601"],
    ),
    "env.update(KEYWORD=...)": (
        """\
        import os

        env = os.environ.copy()
        env.update(CUDA_VISIBLE_DEVICES="2", OMP_NUM_THREADS="4")
        """,
        'env.update(**{npu_compat.env_name("CUDA_VISIBLE_DEVICES"): "2"}, OMP_NUM_THREADS="4")',
        ["NPU601"],
    ),
    "env.update({...})": (
        """\
        import os

        env = os.environ.copy()
        env.update({"CUDA_VISIBLE_DEVICES": "3"})
        """,
        'env.update({npu_compat.env_name("CUDA_VISIBLE_DEVICES"): "3"})',
        ["NPU601"],
    ),
    "os.environ.update(KEYWORD=...)": (
        """\
        import os

        os.environ.update(CUDA_LAUNCH_BLOCKING="1")
        """,
        'os.environ.update(**{npu_compat.env_name("CUDA_LAUNCH_BLOCKING"): "1"})',
        ["NPU601"],
    ),
    "dict(os.environ, KEYWORD=...)": (
        """\
        import os

        env = dict(os.environ, CUDA_VISIBLE_DEVICES="0")
        """,
        'env = dict(os.environ, **{npu_compat.env_name("CUDA_VISIBLE_DEVICES"): "0"})',
        ["NPU601"],
    ),
    "patch.dict(os.environ, KEYWORD=...)": (
        """\
        import os
        from unittest.mock import patch

        with patch.dict(os.environ, CUDA_VISIBLE_DEVICES="0"):
            pass
        """,
        'with patch.dict(os.environ, **{npu_compat.env_name("CUDA_VISIBLE_DEVICES"): "0"}):',
        ["NPU601"],
    ),
}


@pytest.mark.parametrize("body, line, expected", ENV_COPIES.values(), ids=list(ENV_COPIES))
def test_copied_environment_is_rewritten(body, line, expected):
    out = migrated(body)
    assert line in out.splitlines()[-1] or line in out, out
    assert codes(body) == expected
    again = migrate_source(out.encode(), "case.py", OPTIONS)
    assert not again.changed, "a migrated file migrates to itself"
    assert [f.code for f in again.findings] == []


ENV_PROGRAM = """\
import os
from unittest import mock

env = os.environ.copy()
env.update(CUDA_VISIBLE_DEVICES="2", OMP_NUM_THREADS="4")
env.update({"CUDA_LAUNCH_BLOCKING": "1"})
both = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
with mock.patch.dict(os.environ, CUDA_VISIBLE_DEVICES="5"):
    inside = os.environ["CUDA_VISIBLE_DEVICES"]
print(sorted((k, v) for k, v in env.items() if "CUDA" in k or k == "OMP_NUM_THREADS"))
print(sorted((k, v) for k, v in both.items() if "CUDA" in k), inside)
"""


def test_env_keywords_faithful_on_cuda_hosts(tmp_path):
    """The migrated program, run with the real shim on this CPU machine (no torch_npu), sets and
    reads exactly what the original does (invariant 1)."""
    from tests.shim_fixtures import check, install_shim, run_python

    new = migrated(ENV_PROGRAM)
    assert new != ENV_PROGRAM and "npu_compat.env_name" in new
    install_shim(tmp_path / "site")
    env = {"CUDA_VISIBLE_DEVICES": "", "CUDA_LAUNCH_BLOCKING": "", "PYTORCH_CUDA_ALLOC_CONF": ""}
    original = check(run_python(ENV_PROGRAM, path=[tmp_path / "site"], cwd=tmp_path, env=env))
    after = check(run_python(new, path=[tmp_path / "site"], cwd=tmp_path, env=env))
    assert after == original and "'2'" in original and original.strip().endswith(" 5")


ENV_KEYWORDS_REPORTED = {
    "an NCCL keyword of .update(): NPU602, unchanged": (
        """\
        import os

        env = os.environ.copy()
        env.update(NCCL_DEBUG="INFO")
        """,
        ["NPU602"],
    ),
    "an environment keyword of a call no rule knows": (
        """\
        import os

        launch(script, CUDA_VISIBLE_DEVICES="0")
        launch(script, NCCL_IB_DISABLE="1")
        """,
        ["NPU990", "NPU602"],
    ),
}


@pytest.mark.parametrize("body, expected", ENV_KEYWORDS_REPORTED.values(), ids=list(ENV_KEYWORDS_REPORTED))
def test_environment_keywords_that_are_not_rewritten_are_reported(body, expected):
    assert codes(body) == expected
    assert migrated(body) == textwrap.dedent(body)


def test_plain_keywords_and_updates_stay_quiet():
    body = """\
        import torch  # cuda

        config.update(lr=0.1, device="cpu")
        build(use_cuda=True, nccl=False, cuda=True)
        """
    assert codes(body) == []
    assert migrated(body) == textwrap.dedent(body)


# ------------------------------------------------------------------------------- command strings

COMMANDS = {
    "an f-string command": ('cmd = f"CUDA_VISIBLE_DEVICES={rank} python train.py"\n', ["NPU604"]),
    "a plain command": ('os.system("CUDA_VISIBLE_DEVICES=0,1 torchrun train.py")\n', ["NPU604"]),
    "an argv element": ('subprocess.run(["env", "CUDA_VISIBLE_DEVICES=1", "python", "a.py"])\n', ["NPU604"]),
    "concatenation": ('cmd = "CUDA_VISIBLE_DEVICES=" + str(rank) + " python a.py"\n', ["NPU604"]),
    "str.format": ('cmd = "CUDA_VISIBLE_DEVICES={} python a.py".format(rank)\n', ["NPU604"]),
    "percent formatting": ('cmd = "export CUDA_VISIBLE_DEVICES=%d; python a.py" % rank\n', ["NPU604"]),
    "another renamed variable": ('cmd = "CUDA_LAUNCH_BLOCKING=1 python a.py"\n', ["NPU604"]),
    "TORCH_NCCL_* has an Ascend name": ('cmd = "TORCH_NCCL_ASYNC_ERROR_HANDLING=1 torchrun a.py"\n', ["NPU604"]),
    "an NCCL tuning variable": ('cmd = "NCCL_DEBUG=INFO torchrun a.py"\n', ["NPU602"]),
    "a CUDA variable without an Ascend name": ('cmd = "CUDA_DEVICE_ORDER=PCI_BUS_ID python a.py"\n', ["NPU990"]),
    "one finding per string, the renamed name first": (
        'cmd = "NCCL_DEBUG=INFO CUDA_VISIBLE_DEVICES=0 python a.py"\n', ["NPU604"],
    ),
    "a test's expected command and the assertion on the name": (
        """\
        def test_command():
            cmd = build_command(rank=0)
            expected = f"CUDA_VISIBLE_DEVICES={0} python train.py"
            assert cmd == expected
            assert cmd.startswith("CUDA_VISIBLE_DEVICES=0 ")
            assert "CUDA_VISIBLE_DEVICES" in cmd
        """,
        ["NPU604", "NPU604", "NPU601"],
    ),
}


@pytest.mark.parametrize("body, expected", COMMANDS.values(), ids=list(COMMANDS))
def test_variable_set_in_a_command_string_is_reported(body, expected):
    body = "import os\nimport subprocess\n" + textwrap.dedent(body)
    assert codes(body) == expected
    if "NPU601" not in expected:
        assert migrated(body) == body  # reported, not rewritten


def test_command_finding_names_the_ascend_variable():
    (finding,) = run('cmd = f"CUDA_VISIBLE_DEVICES={rank} python train.py"\n').findings
    assert finding.code == "NPU604" and not finding.fixable
    assert "ASCEND_RT_VISIBLE_DEVICES" in finding.message
    assert (finding.line, finding.column) == (1, 7)  # the f-string


def test_f_string_expressions_are_still_swept():
    body = 'import torch\ncmd = f"CUDA_VISIBLE_DEVICES={CUDA_HOME} python a.py"\n'
    assert codes(body) == ["NPU604", "NPU990"]


PROSE = {
    "docstrings": '''\
        def main():
            """Run as `CUDA_VISIBLE_DEVICES=0 python main.py`; NCCL_DEBUG=INFO helps."""
        ''',
    "a module docstring and a bare string": '''\
        """Usage: CUDA_VISIBLE_DEVICES=0,1 torchrun main.py"""
        f"CUDA_VISIBLE_DEVICES={rank}"
        ''',
    "log and print messages": """\
        import logging

        logger = logging.getLogger(__name__)
        logger.info("launch with CUDA_VISIBLE_DEVICES=%s", gpus)
        logging.warning(f"CUDA_VISIBLE_DEVICES={gpus} ignored")
        print(f"CUDA_VISIBLE_DEVICES={gpus}")
        """,
    "warnings and exceptions": """\
        import warnings

        warnings.warn("set CUDA_VISIBLE_DEVICES=0 for a single device")
        raise RuntimeError(f"expected CUDA_VISIBLE_DEVICES={gpus}")
        """,
    "help texts and assertion messages": """\
        import argparse

        parser = argparse.ArgumentParser(epilog="example: CUDA_VISIBLE_DEVICES=0 python main.py")
        parser.add_argument("--gpus", help="like CUDA_VISIBLE_DEVICES=0,1")
        assert gpus, "CUDA_VISIBLE_DEVICES=0 is needed"
        """,
    "names that merely contain the word, and other variables": """\
        x = "the CUDA_VISIBLE_DEVICES variable"
        y = "MASTER_ADDR=localhost MASTER_PORT=29500 python a.py"
        z = "MY_CUDA_VISIBLE_DEVICES=0"
        w = "cuda_visible_devices=0"
        """,
    "comments": """\
        # CUDA_VISIBLE_DEVICES=0 python main.py
        x = 1  # NCCL_DEBUG=INFO
        """,
}


@pytest.mark.parametrize("body", PROSE.values(), ids=list(PROSE))
def test_prose_stays_quiet(body):
    body = "import torch  # cuda\n" + textwrap.dedent(body)
    assert codes(body) == []
    assert migrated(body) == body
