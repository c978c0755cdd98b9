"""Issue #16, round-11 audits (AC#5, AC#10, AD#12): nvidia-smi probes with a clean fallback in
shell scripts (NPU704), and NVIDIA_VISIBLE_DEVICES read with a default (NPU709), judged by what
the script does without them (npu_migrate/shellprobes.py). Real calls whose output the script
needs stay errors."""

from __future__ import annotations

from pathlib import Path

from npu_migrate import catalogue, textfiles
from npu_migrate.model import Options

from .precision_helpers import migrate_json, write_project

OPTIONS = Options(enabled=catalogue.enabled_codes())


def scan(name: str, text: str) -> list:
    return textfiles.scan_text_file(text.encode(), name, OPTIONS).findings


def by_line(findings: list, code: str = "NPU704") -> dict:
    return {f.line: f for f in findings if f.code == code}


TELEMETRY = """\
#!/bin/bash
start_sampler() {
  if [ "${SAMPLING:-1}" != "0" ] &&
    command -v nvidia-smi >/dev/null 2>&1; then
    python3 sampler.py &
  fi
}
if command -v nvidia-smi &> /dev/null; then
    count=$(nvidia-smi --list-gpus | wc -l)
    echo "GPUs: $count"
else
    echo "nvidia-smi not found, skipping detection"
fi
command -v nvidia-smi >/dev/null && nvidia-smi -L
num_gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
"""


def test_probe_gating_optional_work_is_a_named_scope_and_real_call_stays(tmp_path: Path) -> None:
    found = by_line(scan("ci/telemetry.sh", TELEMETRY))
    # line 4: a probe in an `if` with no else: the script goes on (AC#5)
    assert found[4].severity == "info" and "a probe: the script goes on without it" in found[4].message
    assert "not rewritten" not in found[4].message
    # the calls inside the probe's branch never run on an NPU host; the echo only names the tool
    assert found[8].severity == "info" and "a probe: the script goes on without it" in found[8].message
    assert found[9].severity == "info" and "in a branch an NPU host does not take" in found[9].message
    assert found[12].severity == "info" and "only named in a message" in found[12].message
    # line 14: `probe && call`: the probe goes on, the call behind it never runs on NPU
    line14 = sorted(f.message for f in scan("ci/telemetry.sh", TELEMETRY) if f.line == 14)
    assert len(line14) == 2 and "a probe: the script goes on" in line14[0]
    assert "in a branch an NPU host does not take" in line14[1]
    # line 15: a real call whose output the script needs, behind no probe: still an error
    assert found[15].severity == "error" and "probe" not in found[15].message

    report = migrate_json(write_project(tmp_path, {"ci/telemetry.sh": TELEMETRY}))
    lines = {f["line"] for f in report["findings"] if f["code"] == "NPU704"}
    assert lines == {15}
    reasons = " ".join(s.get("reason", "") for s in report["skipped"])
    assert "runs as written on an NPU host (NPU704): a probe: the script goes on without it" in reasons
    assert "not run on an NPU host (NPU704): in a branch an NPU host does not take" in reasons


FALLBACK_CHAIN = """\
#!/bin/bash
SMI_BIN=$(which nvidia-smi || which rocm-smi || echo "")
get_num_gpus() {
  if [[ "$SMI_BIN" == *"nvidia"* ]]; then
    $SMI_BIN --query-gpu=name --format=csv,noheader | wc -l
  else
    echo "1"
  fi
}
NUM_GPUS=$(get_num_gpus)  # (called: an uncalled function runs nothing, round-27 BX#11, test_h127.py)
"""

LABEL_CHAIN = """\
#!/bin/bash
SMI_BIN=$(command -v nvidia-smi || command -v rocm-smi || echo "")
if [[ "$SMI_BIN" == *"rocm"* ]]; then
  export VAR=HIP_VISIBLE_DEVICES
fi
"""

PLAIN_CAPTURE = """\
#!/bin/bash
set -e
SMI_BIN=$(which nvidia-smi)
$SMI_BIN -L
"""


def test_fallback_chain_is_a_warning_when_the_count_is_needed_and_info_otherwise() -> None:
    counted = by_line(scan("run_test.sh", FALLBACK_CHAIN))[2]
    # the script runs the probed tool for a GPU count it cannot get on NPU: runs, but differs (AC#10)
    assert counted.severity == "warning"
    assert "line 5" in counted.message and "`npu-smi` is the Ascend counterpart" in counted.message
    labelled = by_line(scan("label.sh", LABEL_CHAIN))[2]
    assert labelled.severity == "info" and "other vendors' fallbacks" in labelled.message
    assert "`npu-smi` is the Ascend counterpart" in labelled.message
    # no fallback in the capture: under `set -e` the missing tool stops the script
    assert by_line(scan("plain.sh", PLAIN_CAPTURE))[3].severity == "error"


MULTI_VENDOR = """\
#!/bin/bash
check_gpus() {
  if command -v nvidia-smi; then
    gpu_count=$(nvidia-smi --list-gpus | grep -c .)
  elif command -v amd-smi; then
    gpu_count=$(amd-smi list | grep -c GPU)
  fi
  if [[ $gpu_count -gt 0 ]]; then
    echo "GPU found."
  else
    echo "Need at least 1 GPU."
    exit 1
  fi
  if command -v nvidia-smi; then
    gpu_type=$(nvidia-smi --query-gpu=name --format=csv,noheader)
  fi
  echo "type $gpu_type"
}
command -v nvidia-smi >/dev/null || { echo "needs an NVIDIA GPU"; exit 1; }
"""


def test_probe_whose_absence_stops_the_script_stays_an_error() -> None:
    found = by_line(scan("bench.sh", MULTI_VENDOR))
    # line 3: the count it sets is tested at line 8, whose branch exits on an NPU host
    assert found[3].severity == "error" and "the script stops without it" in found[3].message
    assert "amd-smi" in found[3].message and "`npu-smi` is the Ascend counterpart" in found[3].message
    # line 19 (`probe || exit`: a requirement, an error too) and line 14 (its value only read later:
    # a warning) are folded into line 3: one decision for the script
    assert 14 not in found and 19 not in found
    assert {(14, 17, "nvidia-smi"), (19, 12, "nvidia-smi")} <= set(found[3].also)
    alone = by_line(scan("need.sh", "#!/bin/bash\ncommand -v nvidia-smi >/dev/null || { echo no; exit 1; }\n"))
    assert alone[2].severity == "error" and "stops without it" in alone[2].message
    later = by_line(scan("type.sh", "\n".join(MULTI_VENDOR.splitlines()[13:17]) + "\n"))
    assert later[1].severity == "warning" and "`gpu_type`" in later[1].message
    # the calls in the probes' branches never run on NPU
    assert found[4].severity == "info" and found[15].severity == "info"


SNAPSHOT = """\
#!/bin/bash
VISIBLE_GPU="${NVIDIA_VISIBLE_DEVICES:-}"
if [[ -z "$VISIBLE_GPU" ]]; then
    VISIBLE_GPU="${CUDA_VISIBLE_DEVICES:-0}"
fi
docker run --gpus all -e NVIDIA_DRIVER_CAPABILITIES="${NVIDIA_DRIVER_CAPABILITIES:-all}" image
GPUS=$NVIDIA_VISIBLE_DEVICES
"""


def test_nvidia_variable_read_with_a_default_is_not_a_container_setting(tmp_path: Path) -> None:
    found = by_line(scan("snapshot.sh", SNAPSHOT), "NPU709")
    # line 2: read with a default, then a fallback chain (AD#12)
    assert found[2].severity == "info" and "read with a fallback, not a container setting" in found[2].message
    # a docker run's `--gpus` and `-e` (even with a default) and a read with no fallback: still errors
    assert found[6].severity == "error" and found[7].severity == "error"
    assert [f.severity for f in scan("snapshot.sh", SNAPSHOT) if f.code == "NPU709" and f.line == 6] == ["error"] * 2
    report = migrate_json(write_project(tmp_path, {"snapshot.sh": SNAPSHOT}))
    kept = {f["line"] for f in report["findings"] if f["code"] == "NPU709"} | {
        a[0] for f in report["findings"] if f["code"] == "NPU709" for a in f.get("also") or []}
    assert 2 not in kept and {6, 7} <= kept


PINNED = """\
#!/bin/bash
die() { echo "$*" >&2; exit 1; }
DEV="${RUNNER_DEVICE:-}"
if [[ "$DEV" == nvidia.com/gpu=* ]]; then
    GPU="${DEV#nvidia.com/gpu=}"
fi
ROW="$(nvidia-smi --id="$GPU" --query-gpu=name,uuid --format=csv,noheader)"
IFS=',' read -r NAME UUID <<< "$ROW"
[[ "$NAME" == *H200* ]] || die "not an H200: $ROW"
docker run --gpus "device=$UUID" image
"""

UNPINNED = PINNED.replace('[[ "$NAME" == *H200* ]] || die "not an H200: $ROW"\n', "")


def test_script_pinned_to_one_nvidia_model_is_one_information() -> None:
    findings = scan("snapshot-e2e.sh", PINNED)
    # lines 4-5 only test and strip the runner's CDI device name: no container setting
    assert all(f.severity == "info" and "a device name the script tests" in f.message
               for f in findings if f.code == "NPU709" and f.line in (4, 5))
    # the script stops unless the GPU is an H200: its NVIDIA calls and options are one decision
    kept = [f for f in findings if f.severity != "info" or "pinned" in f.message]
    assert len(kept) == 1 and kept[0].line == 7 and kept[0].severity == "info"
    assert "pinned to NVIDIA hardware" in kept[0].message and "H200 (line 9)" in kept[0].message
    assert "NPU709 at line 10" in kept[0].message
    # without the pin, the same script keeps its errors
    errors = {(f.line, f.code) for f in scan("e2e.sh", UNPINNED) if f.severity == "error"}
    assert {(7, "NPU704"), (9, "NPU709")} <= errors


def test_negated_probe_exits_or_guards_its_else_branch() -> None:
    stops = by_line(scan("a.sh", "if ! command -v nvidia-smi >/dev/null; then echo no; exit 1; fi\n"))
    assert stops[1].severity == "error" and "stops without it" in stops[1].message
    guarded = scan("b.sh", "if ! command -v nvidia-smi >/dev/null; then\n  echo no\nelse\n  nvidia-smi -L\nfi\n")
    assert [(f.line, f.severity) for f in guarded if f.code == "NPU704"] == [(1, "info"), (4, "info")]
    assert "in a branch an NPU host does not take" in by_line(guarded)[4].message
    # the else branch of a positive probe is what an NPU host runs: its call stays an error
    runs = scan("c.sh", "if command -v nvidia-smi >/dev/null; then\n  echo yes\nelse\n  nvidia-smi -L\nfi\n")
    assert by_line(runs)[4].severity == "error"
