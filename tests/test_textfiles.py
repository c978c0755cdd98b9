"""Scripts, configs, Dockerfiles, .env files and CUDA sources (npu_migrate/textfiles.py).

Fixtures: fixtures/textfiles/ (inputs) and fixtures/textfiles/expected/<name>.out (the shell scripts
after the opt-in rewrite, reviewed by hand). Rewritten scripts are checked with `bash -n` and run on
fake hosts: a tmp folder on PATH with shell stubs for nvidia-smi / npu-smi and a torchrun that
prints the variables it was started with.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from npu_migrate import catalogue, textfiles
from npu_migrate.model import Options

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "textfiles"
EXPECTED = FIXTURES / "expected"
REPORT = Options(enabled=catalogue.enabled_codes())
REWRITE = replace(REPORT, rewrite_scripts=True)
BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="bash is not installed")

# (line, column, code, "rewrite" | "report") per fixture, with rewrite_scripts=True; the columns
# point at the construct (the variable, the `nccl` / `cuda` value, the image, the package).
EXPECTED_FINDINGS = {
    "launch.sh": [
        (5, 8, "NPU701", "rewrite"),  # export CUDA_VISIBLE_DEVICES=0,1
        (6, 8, "NPU703", "report"),  # NCCL_DEBUG: no counterpart
        (7, 8, "NPU702", "rewrite"),  # TORCH_NCCL_ASYNC_ERROR_HANDLING -> HCCL_... (read by every release)
        (8, 1, "NPU704", "rewrite"),  # bare nvidia-smi
        (9, 1, "NPU701", "rewrite"),  # CUDA_VISIBLE_DEVICES=0,1 torchrun
        (9, 73, "NPU705", "report"),  # --backend nccl
        (9, 87, "NPU706", "report"),  # --device cuda
        (10, 8, "NPU704", "report"),  # $(nvidia-smi -L | wc -l): output captured
        (11, 1, "NPU704", "report"),  # nvidia-smi --query-gpu ... | head: output parsed
        (13, 18, "NPU701", "rewrite"),  # for ...; do CUDA_VISIBLE_DEVICES=$i torchrun
        (14, 1, "NPU701", "report"),  # CUDA_VISIBLE_DEVICES=1,0: not ascending
        (16, 5, "NPU701", "report"),  # text of a here-document
    ],
    "train_multi.sh": [
        (5, 8, "NPU701", "rewrite"),
        (6, 8, "NPU702", "rewrite"),
        (7, 1, "NPU704", "rewrite"),
        (9, 1, "NPU701", "rewrite"),
        (11, 5, "NPU701", "rewrite"),
        (13, 4, "NPU704", "rewrite"),  # if nvidia-smi > /dev/null 2>&1; then
    ],
    "train_config.yaml": [
        (7, 11, "NPU706", "report"),  # device: cuda
        (8, 17, "NPU706", "report"),  # eval_device: "cuda:1"
        (9, 16, "NPU706", "report"),  # accelerator: cuda
        (11, 12, "NPU705", "report"),  # backend: nccl
        (12, 18, "NPU705", "report"),  # dist_backend: "nccl"
        (15, 3, "NPU701", "report"),
        (16, 3, "NPU703", "report"),
        (17, 3, "NPU702", "report"),  # PYTORCH_CUDA_ALLOC_CONF
    ],
    "ci.yml": [
        (7, 14, "NPU707", "report"),  # image: nvcr.io/nvidia/pytorch:24.01-py3
        (8, 16, "NPU709", "report"),  # --gpus all
        (11, 14, "NPU704", "report"),  # - run: nvidia-smi
        (14, 23, "NPU708", "report"),  # pip install flash-attn==2.5.8 (the apex line is a comment)
        (15, 11, "NPU701", "report"),
    ],
    "docker-compose.yml": [
        (3, 12, "NPU707", "report"),  # pytorch/pytorch:2.1.0-cuda12.1-cudnn8-runtime
        (4, 5, "NPU709", "report"),  # runtime: nvidia
        (6, 9, "NPU709", "report"),  # NVIDIA_VISIBLE_DEVICES
        (13, 15, "NPU709", "report"),  # driver: nvidia
        # CUDA_VISIBLE_DEVICES=0 on line 7 is quiet: ASCEND_RT_VISIBLE_DEVICES is set beside it
    ],
    "train.toml": [
        (3, 11, "NPU706", "report"),
        (8, 12, "NPU705", "report"),
        (12, 1, "NPU702", "report"),  # CUDA_LAUNCH_BLOCKING -> ASCEND_LAUNCH_BLOCKING
        (13, 1, "NPU703", "report"),
    ],
    "Dockerfile": [
        (3, 10, "NPU707", "report"),  # ARG BASE=nvidia/cuda:12.1.0-...
        (6, 9, "NPU708", "report"),  # apex
        (7, 9, "NPU708", "report"),  # xformers
        (8, 9, "NPU708", "report"),  # "bitsandbytes>=0.41"
        (9, 9, "NPU708", "report"),  # triton (numpy on line 10 is fine)
        (11, 45, "NPU708", "report"),  # --index-url .../whl/cu121
        (14, 5, "NPU701", "report"),  # ENV CUDA_VISIBLE_DEVICES=0
        (15, 5, "NPU709", "report"),  # NVIDIA_VISIBLE_DEVICES
        (16, 5, "NPU703", "report"),  # TORCH_CUDA_ARCH_LIST
        (17, 5, "NPU703", "report"),  # ENV CUDA_HOME /usr/local/cuda
        (18, 5, "NPU704", "report"),  # RUN nvidia-smi: never rewritten in a Dockerfile
        (20, 68, "NPU705", "report"),  # "--dist-backend=nccl"
    ],
    ".env": [
        (2, 1, "NPU701", "report"),
        (3, 8, "NPU706", "report"),  # DEVICE=cuda
        (4, 1, "NPU703", "report"),
        (6, 8, "NPU702", "report"),  # export TORCH_NCCL_BLOCKING_WAIT=1
    ],
    "kernels/fused_add.cu": [(1, 1, "NPU912", "report")],
    # comments, paths, URLs and prose that mention cuda / nccl / nvidia-smi
    "clean.sh": [],
    "clean.yaml": [],
    "clean.toml": [],
}
SCRIPTS = ["launch.sh", "train_multi.sh"]


def _scan(rel: str, options: Options = REWRITE, source: bytes | None = None):
    data = (FIXTURES / rel).read_bytes() if source is None else source
    return textfiles.scan_text_file(data, rel, options)


def _rows(result) -> list[tuple]:
    return [(f.line, f.column, f.code, "rewrite" if f.fixable else "report") for f in result.findings]


def test_every_fixture_has_expectations():
    on_disk = {
        p.relative_to(FIXTURES).as_posix() for p in FIXTURES.rglob("*")
        if p.is_file() and EXPECTED not in p.parents
    }
    assert on_disk == set(EXPECTED_FINDINGS)


@pytest.mark.parametrize(
    "rel, kind",
    [
        ("run.sh", "shell"), ("tools/x.bash", "shell"), ("a.zsh", "shell"),
        ("conf/train.yaml", "yaml"), ("ci.yml", "yaml"), ("pyproject.toml", "toml"),
        ("Dockerfile", "dockerfile"), ("docker/Dockerfile.cuda", "dockerfile"),
        ("gpu.dockerfile", "dockerfile"), ("Containerfile", "dockerfile"),
        (".env", "env"), ("deploy/prod.env", "env"), (".env.local", "env"),
        ("csrc/kernel.cu", "cuda-source"), ("csrc/kernel.cuh", "cuda-source"),
        ("train.py", None), ("README.md", None), ("kernel.cpp", None), ("environment", None),
    ],
)
def test_target_kind(rel, kind):
    assert textfiles.target_kind(rel) == kind


@pytest.mark.parametrize("rel", sorted(EXPECTED_FINDINGS))
def test_findings(rel):
    result = _scan(rel)
    assert _rows(result) == EXPECTED_FINDINGS[rel]
    for finding in result.findings:
        rule = catalogue.rule(finding.code)
        assert finding.path == rel and finding.source
        assert finding.message.startswith(rule.message.split("`{")[0].split("{")[0])
        assert not finding.fixable or rule.fixable, finding


@pytest.mark.parametrize("rel", sorted(EXPECTED_FINDINGS))
def test_report_only_writes_nothing(rel):
    result = _scan(rel, REPORT)
    assert result.new is None and result.original == (FIXTURES / rel).read_bytes()
    assert not any(f.fixable for f in result.findings)
    assert [(ln, c, code) for ln, c, code, _ in _rows(result)] == [
        (ln, c, code) for ln, c, code, _ in EXPECTED_FINDINGS[rel]
    ]


@pytest.mark.parametrize("rel", sorted(set(EXPECTED_FINDINGS) - set(SCRIPTS)))
def test_only_shell_scripts_are_rewritten(rel):
    assert _scan(rel).new is None


@pytest.mark.parametrize("rel", SCRIPTS)
def test_rewrite_matches_reviewed_output(rel):
    assert _scan(rel).new == (EXPECTED / f"{rel}.out").read_bytes()


@pytest.mark.parametrize("rel", SCRIPTS)
def test_rewrite_is_idempotent_and_quiet_about_what_it_did(rel):
    first = _scan(rel)
    second = _scan(rel, source=first.new)
    assert second.new is None
    # what was rewritten is dual-host now; what was only reported still is
    reported = [(code, kind) for _, _, code, kind in EXPECTED_FINDINGS[rel] if kind == "report"]
    assert [(code, kind) for _, _, code, kind in _rows(second)] == reported


@needs_bash
@pytest.mark.parametrize("rel", SCRIPTS)
def test_scripts_parse_before_and_after(rel):
    for path in (FIXTURES / rel, EXPECTED / f"{rel}.out"):
        subprocess.run([BASH, "-n", str(path)], check=True, capture_output=True)


# ------------------------------------------------------------------------------------------------
# Fake hosts

FAKE_NVIDIA_SMI = """#!/bin/sh
case "$1" in
  "") echo "NVIDIA-SMI fake table" ;;
  -L) echo "GPU 0: Fake (UUID: GPU-0)"; echo "GPU 1: Fake (UUID: GPU-1)" ;;
  --query-gpu=*) echo "Fake GPU" ;;
  *) echo "nvidia-smi: unknown option $1" >&2; exit 2 ;;
esac
"""
FAKE_NPU_SMI = """#!/bin/sh
if [ "$1" = info ] && [ $# -eq 1 ]; then echo "npu-smi fake table"; else echo "npu-smi: usage" >&2; exit 2; fi
"""
FAKE_TORCHRUN = """#!/bin/sh
echo "torchrun $*"
for name in $FAKE_ENV_VARS; do
  eval "value=\\${$name-<unset>}"
  echo "  $name=$value"
done
"""


def _host(tmp_path: Path, tools: dict[str, str]) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in tools.items():
        tool = bin_dir / name
        tool.write_text(body)
        tool.chmod(0o755)
    return bin_dir


def _run(script: bytes, tmp_path: Path, bin_dir: Path, env_vars: str) -> tuple[int, str]:
    path = tmp_path / f"script{len(list(tmp_path.glob('script*')))}.sh"
    path.write_bytes(script)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_ENV_VARS": env_vars, "HOME": str(tmp_path), "LC_ALL": "C"}
    proc = subprocess.run([BASH, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    return proc.returncode, proc.stdout


def _no_real_smi():
    return all(shutil.which(tool, path="/usr/bin:/bin") is None for tool in ("nvidia-smi", "npu-smi"))


needs_clean_path = pytest.mark.skipif(not _no_real_smi(), reason="a real nvidia-smi/npu-smi is on /usr/bin")


@needs_bash
@needs_clean_path
@pytest.mark.parametrize("rel", SCRIPTS)
def test_rewritten_script_behaves_the_same_on_a_cuda_host(rel, tmp_path):
    bin_dir = _host(tmp_path, {"nvidia-smi": FAKE_NVIDIA_SMI, "torchrun": FAKE_TORCHRUN})
    variables = "CUDA_VISIBLE_DEVICES CUDA_LAUNCH_BLOCKING NCCL_DEBUG TORCH_NCCL_ASYNC_ERROR_HANDLING"
    original = _run((FIXTURES / rel).read_bytes(), tmp_path, bin_dir, variables)
    rewritten = _run(_scan(rel).new, tmp_path, bin_dir, variables)
    assert original == rewritten
    assert original[0] == 0 and "NVIDIA-SMI fake table" in original[1] and "torchrun" in original[1]


def _torchrun_calls(stdout: str) -> list[dict]:
    calls: list[dict] = []
    for line in stdout.splitlines():
        if line.startswith("torchrun "):
            calls.append({"args": line[len("torchrun "):]})
        elif line.startswith("  ") and calls:
            name, _, value = line.strip().partition("=")
            calls[-1][name] = value
    return calls


@needs_bash
@needs_clean_path
def test_rewritten_script_uses_the_npu_on_an_npu_host(tmp_path):
    bin_dir = _host(tmp_path, {"npu-smi": FAKE_NPU_SMI, "torchrun": FAKE_TORCHRUN})
    variables = "CUDA_VISIBLE_DEVICES ASCEND_RT_VISIBLE_DEVICES ASCEND_LAUNCH_BLOCKING"
    before = _run((FIXTURES / "train_multi.sh").read_bytes(), tmp_path, bin_dir, variables)
    assert before[0] == 127  # the original stops at nvidia-smi (command not found)
    code, stdout = _run(_scan("train_multi.sh").new, tmp_path, bin_dir, variables)
    assert code == 0
    assert stdout.splitlines()[0] == "npu-smi fake table"
    assert stdout.rstrip().endswith("accelerator present")
    calls = _torchrun_calls(stdout)
    assert [c["ASCEND_RT_VISIBLE_DEVICES"] for c in calls] == ["0,1", "2,3", "0,1", "2,3"]
    assert all(c["ASCEND_RT_VISIBLE_DEVICES"] == c["CUDA_VISIBLE_DEVICES"] for c in calls)
    assert all(c["ASCEND_LAUNCH_BLOCKING"] == "1" for c in calls)


@needs_bash
@needs_clean_path
def test_rewritten_script_fails_the_same_way_without_any_accelerator_tool(tmp_path):
    bin_dir = _host(tmp_path, {"torchrun": FAKE_TORCHRUN})
    original = _run((FIXTURES / "train_multi.sh").read_bytes(), tmp_path, bin_dir, "CUDA_VISIBLE_DEVICES")
    rewritten = _run(_scan("train_multi.sh").new, tmp_path, bin_dir, "CUDA_VISIBLE_DEVICES")
    assert original == rewritten == (127, "")


@needs_bash
@pytest.mark.parametrize("preset, expected", [(None, "<unset>"), ("3,5", "3,5"), ("", "")])
def test_bare_export_copies_the_variable_only_when_it_is_set(tmp_path, preset, expected):
    script = b"export CUDA_VISIBLE_DEVICES\ntorchrun\n"
    new = _scan("run.sh", source=script).new
    assert new == (b"export CUDA_VISIBLE_DEVICES\n"
                   b'[ -z "${CUDA_VISIBLE_DEVICES+x}" ] || export ASCEND_RT_VISIBLE_DEVICES="$CUDA_VISIBLE_DEVICES"\n'
                   b"torchrun\n")
    bin_dir = _host(tmp_path, {"torchrun": FAKE_TORCHRUN})
    prefix = b"" if preset is None else f"CUDA_VISIBLE_DEVICES={preset}\n".encode()
    code, stdout = _run(b"set -eu\n" + prefix + new, tmp_path, bin_dir, "ASCEND_RT_VISIBLE_DEVICES")
    assert code == 0 and stdout.splitlines()[1] == f"  ASCEND_RT_VISIBLE_DEVICES={expected}"


# ------------------------------------------------------------------------------------------------
# What is only reported


@pytest.mark.parametrize(
    "source, code, note",
    [
        (b"CUDA_VISIBLE_DEVICES=$(pick_gpus) torchrun x.py\n", "NPU701", "runs a command"),
        (b"CUDA_VISIBLE_DEVICES=GPU-5e2f torchrun x.py\n", "NPU701", "not a list of device indices"),
        (b"CUDA_VISIBLE_DEVICES=1,1 torchrun x.py\n", "NPU701", "not strictly ascending"),
        (b"export CUDA_VISIBLE_DEVICES=2,0\n", "NPU701", "not strictly ascending"),
        (b'test -n "$X" &&\nexport CUDA_VISIBLE_DEVICES=0\n', "NPU701", "part of a command list"),
        (b"export CUDA_VISIBLE_DEVICES=0 && torchrun x.py\n", "NPU701", "not a command line of its own"),
        (b"export CUDA_VISIBLE_DEVICES=0 &\n", "NPU701", "not a command line of its own"),
        (b"CUDA_VISIBLE_DEVICES=0\n", "NPU701", "not exported here"),
        (b"echo $CUDA_VISIBLE_DEVICES\n", "NPU701", "caller's environment"),
        (b"docker run -e CUDA_VISIBLE_DEVICES=0 img\n", "NPU701", "not a plain assignment"),
        (b"PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python x.py\n", "NPU702", "set by hand"),
        (b"watch -n 1 nvidia-smi\n", "NPU704", "argument"),
        (b"CUDA_VISIBLE_DEVICES=0 ASCEND_RT_VISIBLE_DEVICES=0 nvidia-smi\n", "NPU704", "assignments"),
        (b"nvidia-smi | grep MiB\n", "NPU704", "output is parsed"),
        (b"cat <<EOF\nnvidia-smi\nEOF\n", "NPU704", "here-document"),
    ],
)
def test_unsafe_constructs_are_reported_not_rewritten(source, code, note):
    result = _scan("run.sh", source=source)
    assert result.new is None
    matching = [f for f in result.findings if f.code == code]
    assert len(matching) == 1 and not matching[0].fixable and note in matching[0].message


def test_already_dual_host_constructs_are_not_findings():
    source = (
        b'export CUDA_VISIBLE_DEVICES=0\nexport ASCEND_RT_VISIBLE_DEVICES="$CUDA_VISIBLE_DEVICES"\n'
        b"CUDA_VISIBLE_DEVICES=1 ASCEND_RT_VISIBLE_DEVICES=1 torchrun x.py\n"
        b"echo ${CUDA_VISIBLE_DEVICES:-$ASCEND_RT_VISIBLE_DEVICES}\n"
        b"if command -v npu-smi >/dev/null; then npu-smi info; else nvidia-smi; fi\n"
    )
    result = _scan("run.sh", source=source)
    assert result.findings == [] and result.new is None


def test_reads_of_a_variable_the_script_sets_are_not_findings():
    result = _scan("run.sh", REPORT, b"export CUDA_VISIBLE_DEVICES=0,1\necho \"$CUDA_VISIBLE_DEVICES\"\n")
    assert _rows(result) == [(1, 8, "NPU701", "report")]


@pytest.mark.parametrize(
    "line, what",
    [
        (b"pip install git+https://github.com/NVIDIA/apex.git@master\n", "NPU902"),
        (b"python -m pip install 'flash_attn @ https://x.org/flash_attn-2.5.8+cu122torch2.3-cp310-linux_x86_64.whl'\n",
         "NPU501"),
        (b"uv pip install -e git+https://github.com/Dao-AILab/flash-attention#egg=flash-attn\n", "NPU501"),
        (b"pip3 install --upgrade xformers\n", "NPU915"),
        (b"pip install cupy-cuda12x\n", "NPU911"),
        (b"pip install torch==2.1.0+cu121\n", "CUDA build of torch"),
    ],
)
def test_cuda_only_installs_name_the_python_diagnostic(line, what):
    result = _scan("setup.sh", source=line)
    assert [f.code for f in result.findings] == ["NPU708"]
    assert what in result.findings[0].message


def test_npu_packages_and_requirement_files_are_not_findings():
    source = b"pip install triton-ascend torch-npu==2.1.0 numpy -r requirements.txt -c constraints.txt\n"
    assert _scan("setup.sh", source=source).findings == []
    # vLLM installs on Ascend too (with vllm-ascend beside it): not a CUDA-only package (issue #16)
    assert _scan("setup.sh", source=b"pip install vllm==0.6.0 vllm-ascend==0.6.0\n").findings == []


# ------------------------------------------------------------------------------------------------
# Bytes, line endings, selection, suppression


def test_crlf_and_missing_final_newline_are_kept():
    result = _scan("run.sh", source=b"export CUDA_VISIBLE_DEVICES=0\r\nnvidia-smi")
    assert result.new == (
        b"export CUDA_VISIBLE_DEVICES=0\r\n"
        b'export ASCEND_RT_VISIBLE_DEVICES="$CUDA_VISIBLE_DEVICES"\r\n'
        b"{ if command -v npu-smi >/dev/null 2>&1; then npu-smi info; else nvidia-smi; fi; }"
    )


def test_last_line_export_without_newline_keeps_that_state():
    result = _scan("run.sh", source=b"  export CUDA_VISIBLE_DEVICES=0")
    assert result.new == b'  export CUDA_VISIBLE_DEVICES=0\n  export ASCEND_RT_VISIBLE_DEVICES="$CUDA_VISIBLE_DEVICES"'


def test_bom_and_undecodable_bytes_survive_and_columns_skip_the_bom():
    source = b"\xef\xbb\xbfexport CUDA_VISIBLE_DEVICES=0  # caf\xe9\n"
    result = _scan("run.sh", source=source)
    assert _rows(result) == [(1, 8, "NPU701", "rewrite")]
    assert result.new == source + b'export ASCEND_RT_VISIBLE_DEVICES="$CUDA_VISIBLE_DEVICES"\n'


def test_binary_file_is_reported_and_left_alone():
    result = _scan("blob.yaml", source=b"device: cuda\0\x01\x02")
    assert [(f.code, f.line) for f in result.findings] == [("NPU002", 1)] and result.new is None


def test_ignore_and_select_apply_to_findings_and_rewrites():
    source = b"export CUDA_VISIBLE_DEVICES=0\nnvidia-smi\n"
    without_701 = replace(REWRITE, enabled=catalogue.enabled_codes(ignore=("NPU701",)))
    result = _scan("run.sh", without_701, source)
    assert [f.code for f in result.findings] == ["NPU704"]
    assert b"ASCEND_RT_VISIBLE_DEVICES" not in result.new and b"npu-smi info" in result.new
    only_9 = replace(REWRITE, enabled=catalogue.enabled_codes(select=("NPU9",)))
    assert _scan("run.sh", only_9, source).findings == []
    assert _scan("kernels/fused_add.cu", only_9).findings[0].code == "NPU912"
    assert _scan("kernels/fused_add.cu", replace(REPORT, enabled=frozenset())).findings == []


def test_suppression_comments():
    source = b"nvidia-smi  # npu-migrate: ignore[NPU704]\nexport CUDA_VISIBLE_DEVICES=1  # noqa: NPU701\n"
    result = _scan("run.sh", source=source)
    assert result.findings == [] and result.new is None and result.suppressed == 2
    skipped = _scan("run.sh", source=b"# npu-migrate: skip-file\nnvidia-smi\n")
    assert skipped.findings == [] and skipped.new is None and skipped.skipped


def test_absurd_nesting_is_reported_not_raised():
    source = b"export CUDA_VISIBLE_DEVICES=0\necho " + b'"$(' * 5000 + b"CUDA_VISIBLE_DEVICES=1 x\n"
    result = _scan("run.sh", source=source)
    assert result.new is None and "NPU001" in [f.code for f in result.findings]


def test_files_without_trigger_words_are_skipped():
    result = _scan("run.sh", source=b"#!/bin/sh\necho hello\n")
    assert result.skipped and result.findings == [] and result.new is None


@pytest.mark.parametrize("rel", ["x.sh", "x.yaml", "x.toml", "Dockerfile", ".env"])
@pytest.mark.parametrize(
    "source",
    [
        b"echo 'unbalanced cuda\nexport CUDA_VISIBLE_DEVICES=0\n",
        b"x=$(nvidia-smi\ncat <<\n<<-'EOF\nbackend: nccl \\",
        b'"""\ndevice = "cuda\n\'\'\'\n${CUDA_VISIBLE_DEVICES\n`nvidia-smi',
        bytes(range(1, 256)) + b"cuda nccl\n",
        b"\xff\xfe" + "CUDA_VISIBLE_DEVICES=0 nvidia-smi".encode("utf-16-le"),
        b"",
    ],
)
def test_never_raises_on_bad_input(rel, source):
    result = _scan(rel, source=source)
    assert result.original == source
    if result.new is not None:
        assert result.new != source
