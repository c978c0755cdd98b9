"""Issue #16: harmless CUDA switches and non-uses reported as problems.

Shapes from the ecosystem audit, each reproduced with a small fixture, each next to a true case that
is still reported:
- `cudnn.benchmark = ...` (an autotuning hint) is not reported; `cudnn.deterministic = True` is
  information, and nothing when the file also asks torch for determinism;
- `torch.backends.cuda.enable_*_sdp(False)` (a CUDA backend switched off) is not reported;
- `isinstance(m, DataParallel)` and annotations are not uses of DataParallel;
- `torch.cuda._memory_viz.trace_plot(snapshot)` renders a dict as HTML: portable;
- a profiler activity map that already holds `ProfilerActivity.PrivateUse1` is platform-aware;
- NCCL_* names that are not settings: shell-local variables, pass-through lists of names.
"""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, write_project


def _findings(tmp_path: Path, files: dict[str, str]) -> list[dict]:
    report = migrate_json(write_project(tmp_path, files))
    return [f for f in report["findings"] if not f["fixable"]]


def _at(findings: list[dict], path: str, line: int) -> list[dict]:
    return [f for f in findings if f["path"] == path and f["line"] == line]


def test_cudnn_benchmark_is_not_reported_other_backend_flags_are(tmp_path):
    found = _findings(tmp_path, {"train.py": (
        "import torch\n"
        "\n"
        "def setup(args):\n"
        "    torch.backends.cudnn.benchmark = True\n"
        "    torch.backends.cudnn.benchmark = args.benchmark\n"
        "    torch.backends.cudnn.enabled = False\n"
    )})
    assert _at(found, "train.py", 4) == [] and _at(found, "train.py", 5) == []
    assert [f["code"] for f in _at(found, "train.py", 6)] == ["NPU404"]
    assert [f["severity"] for f in _at(found, "train.py", 6)] == ["warning"]


def test_cudnn_deterministic_is_information(tmp_path):
    found = _findings(tmp_path, {"seed.py": (
        "import torch\n"
        "\n"
        "def seed(deterministic):\n"
        "    torch.backends.cudnn.deterministic = True\n"
        "    torch.backends.cudnn.benchmark = False\n"
    )})
    (only,) = _at(found, "seed.py", 4)
    assert only["code"] == "NPU404" and only["severity"] == "info"
    assert "use_deterministic_algorithms" in only["message"]
    assert _at(found, "seed.py", 5) == []


def test_cudnn_deterministic_beside_torch_determinism_is_not_reported(tmp_path):
    found = _findings(tmp_path, {
        "seed.py": (
            "import torch\n"
            "\n"
            "def seed(mode):\n"
            "    torch.set_deterministic_debug_mode(mode)\n"
            "    torch.backends.cudnn.deterministic = True\n"
            "    torch.backends.cudnn.benchmark = False\n"
        ),
        "other.py": (
            "import torch\n"
            "\n"
            "class Trainer:\n"
            "    def run(self):\n"
            "        self.use_deterministic_algorithms(True)\n"  # a method of its own, not torch's
            "        torch.backends.cudnn.deterministic = True\n"
        ),
    })
    assert [f for f in found if f["path"] == "seed.py"] == []
    assert [f["severity"] for f in _at(found, "other.py", 6)] == ["info"]


def test_sdpa_backend_switched_off_is_not_reported(tmp_path):
    report = migrate_json(write_project(tmp_path, {"platform.py": (
        "import torch\n"
        "\n"
        "torch.backends.cuda.enable_cudnn_sdp(False)\n"
        "torch.backends.cuda.enable_flash_sdp(True)\n"
        "with torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False):\n"
        "    pass\n"
    )}))
    found = [f for f in report["findings"] if not f["fixable"]]
    assert _at(found, "platform.py", 3) == []
    # a switch that only enables a backend, on by default, changes nothing: a named skipped scope
    # (moot.NO_EFFECT; round-12 audit AE#30), not a finding
    assert _at(found, "platform.py", 4) == []
    assert any(s.get("start_line") == 4 and s["reason"].startswith("no effect on an NPU host (NPU405)")
               for s in report["skipped"])
    assert [f["code"] for f in _at(found, "platform.py", 5)] == ["NPU405"]


def test_dataparallel_type_checks_are_not_uses(tmp_path):
    found = _findings(tmp_path, {"dp.py": (
        "from typing import Optional\n"
        "\n"
        "import torch\n"
        "from torch.nn import DataParallel, Module\n"
        "\n"
        "def wrap(module: Module) -> DataParallel:\n"
        "    return DataParallel(module)\n"
        "\n"
        "def unwrap(module: Optional[DataParallel]):\n"
        "    if isinstance(module, (DataParallel, torch.nn.parallel.DistributedDataParallel)):\n"
        "        return module.module\n"
        "    if issubclass(type(module), torch.nn.DataParallel):\n"
        "        return module.module\n"
        "    if type(module) is DataParallel or type(module) in (torch.nn.DataParallel,):\n"
        "        return module.module\n"
        "    return module\n"
        "\n"
        "class MyDP(torch.nn.DataParallel):\n"
        "    pass\n"
        "\n"
        "wrapper = DataParallel\n"
    )})
    # one NPU901 per file (rules/codes.toml per_file): its places are the anchor and the merged ones
    (dp,) = [f for f in found if f["code"] == "NPU901"]
    assert sorted([dp["line"], *(place[0] for place in dp.get("also") or [])]) == [7, 18, 21]


def test_memory_viz_trace_plot_is_portable(tmp_path):
    found = _findings(tmp_path, {"prof.py": (
        "import torch\n"
        "from torch.cuda._memory_viz import segment_plot\n"
        "\n"
        "def dump(snapshot, fd):\n"
        '    if not hasattr(torch.cuda._memory_viz, "trace_plot"):\n'
        "        return None\n"
        "    fd.write(torch.cuda._memory_viz.trace_plot(snapshot, device=None))\n"
        "    fd.write(segment_plot(snapshot))\n"
        "    fd.write(torch.cuda._memory_viz.profile_plot(snapshot))\n"
        "    return torch.cuda.memory._snapshot()\n"
    )})
    assert all(_at(found, "prof.py", line) == [] for line in (2, 5, 7, 8))
    assert _at(found, "prof.py", 9) and _at(found, "prof.py", 10)


def test_profiler_activity_map_with_the_npu_activity_is_platform_aware(tmp_path):
    found = _findings(tmp_path, {
        "wrapper.py": (
            "import torch\n"
            "\n"
            "ACTIVITIES = {\n"
            '    "CPU": torch.profiler.ProfilerActivity.CPU,\n'
            '    "CUDA": torch.profiler.ProfilerActivity.CUDA,\n'
            '    "PrivateUse1": torch.profiler.ProfilerActivity.PrivateUse1,\n'
            "}\n"
        ),
        "bench.py": (
            "import torch\n"
            "\n"
            "ACTIVITIES = {\n"
            '    "CPU": torch.profiler.ProfilerActivity.CPU,\n'
            '    "CUDA": torch.profiler.ProfilerActivity.CUDA,\n'
            "}\n"
        ),
    })
    assert all(f["severity"] == "info" for f in found if f["path"] == "wrapper.py")
    assert [(f["code"], f["severity"]) for f in found if f["path"] == "bench.py"] == [("NPU935", "warning")]


def test_shell_local_nccl_variables_are_not_settings(tmp_path):
    found = _findings(tmp_path, {"tools/install.sh": (
        "#!/bin/bash\n"
        'NCCL_PACKAGE="nvidia-nccl-cu12"\n'
        'NCCL_INSTALLED=$(pip show "$NCCL_PACKAGE" 2>/dev/null | sed -n "s/^Version: //p")\n'
        'echo "found ${NCCL_INSTALLED}"\n'
        "NCCL_DEBUG=INFO\n"
        "export NCCL_IB_DISABLE=1\n"
        "NCCL_MY_KNOB=1 python train.py\n"
        "NCCL_LATER=1\n"
        "export NCCL_LATER\n"
    )})
    lines = sorted(f["line"] for f in found if f["path"] == "tools/install.sh" and f["code"] == "NPU703")
    # a known NCCL variable (even unexported), an exported one, one in a command's environment,
    # one exported later: reported; the script's own variables (lines 2-4): not
    assert lines and lines[0] >= 5
    messages = " ".join(f["message"] + f["source"] for f in found if f["path"] == "tools/install.sh")
    for name in ("NCCL_DEBUG", "NCCL_IB_DISABLE", "NCCL_MY_KNOB", "NCCL_LATER"):
        assert name in messages, name
    for name in ("NCCL_PACKAGE", "NCCL_INSTALLED"):
        assert name not in messages, name


def test_forwarded_variable_names_are_not_tuning(tmp_path):
    found = _findings(tmp_path, {
        "launch.py": (
            "import os\n"
            "\n"
            "forwarded = {\n"
            "    k: os.environ[k]\n"
            "    for k in (\n"
            '        "NCCL_CUMEM_ENABLE",\n'
            '        "LD_LIBRARY_PATH",\n'
            "    )\n"
            "    if k in os.environ\n"
            "}\n"
            "\n"
            'PASS_THROUGH = ["NCCL_SOCKET_IFNAME", "NCCL_DEBUG"]\n'
            "\n"
            "def child_env():\n"
            "    env = {}\n"
            "    for k in PASS_THROUGH:\n"
            "        if k in os.environ:\n"
            "            env[k] = os.environ[k]\n"
            "    return env\n"
        ),
        "tune.py": (
            "import os\n"
            "\n"
            'TUNING = ["NCCL_P2P_DISABLE"]\n'
            "\n"
            "def child_env():\n"
            "    env = {}\n"
            "    for k in TUNING:\n"
            '        env[k] = "1"\n'
            "    return env\n"
        ),
    })
    assert [f for f in found if f["path"] == "launch.py" and f["code"] == "NPU602"] == []
    assert [f["line"] for f in found if f["path"] == "tune.py" and f["code"] == "NPU602"] == [3]


def test_dockerfile_run_local_cuda_variables_are_not_settings(tmp_path):
    found = _findings(tmp_path, {"docker/Dockerfile": (
        "FROM ubuntu:22.04\n"
        "ARG CUDA_VERSION=12.4.1\n"
        "RUN CUDA_MAJOR=$(echo $CUDA_VERSION | cut -d. -f1) && \\\n"
        '    echo "cu${CUDA_MAJOR}"\n'
        "RUN --mount=type=cache,target=/root/.cache \\\n"
        '    if [ -n "$X" ]; then \\\n'
        '        CUDA_MAJOR_MINOR=$(echo "${CUDA_VERSION}" | cut -d. -f1,2); \\\n'
        '        echo "${CUDA_MAJOR_MINOR}"; \\\n'
        "    fi\n"
        "RUN apt-get update && NCCL_DEBUG=INFO python -c 'print(1)'\n"
        "ENV NCCL_SOCKET_IFNAME=eth0\n"
    )})
    messages = " ".join(f["message"] for f in found if f["path"] == "docker/Dockerfile")
    assert "CUDA_MAJOR" not in messages  # neither CUDA_MAJOR nor CUDA_MAJOR_MINOR
    assert "NCCL_DEBUG" in messages and "NCCL_SOCKET_IFNAME" in messages
