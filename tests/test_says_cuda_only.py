"""NPU108 kept a device-type check as a CUDA-only feature gate when the only evidence was the code's
own words ("requires CUDA tensors"): round-21 audit BF#18 (DeepSpeed's expert-parallel split plan,
whose guarded code uses only the accelerator API) judged the info "guards a CUDA-only feature; left
unchanged" false, since on an NPU host the check turns that code away. The check is still kept (the
guarded code may need CUDA), but the finding says what it is and asks for the review, as a
warning. A check in front of a named CUDA-only feature (Hopper kernels here) is read as before."""

from tests.precision_helpers import findings_at, migrate_json, write_project

SPLIT = '''\
import torch


def split_plan(counts, stream):
    if counts.device.type != "cuda":
        raise RuntimeError("the async split plan requires CUDA tensors")
    with torch.cuda.stream(stream):
        return counts.to("cpu", non_blocking=True)


def pick(device):
    if device == "cuda":
        kernel = "hopper"
        return kernel
    return "plain"
'''


def test_a_check_only_the_error_text_calls_cuda_only_asks_for_review(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/split.py": SPLIT}))
    found = findings_at(report, "pkg/split.py", "NPU108")
    said = found[5]
    assert said["severity"] == "warning", said
    assert '"requires CUDA"' in said["message"] and "names no CUDA-only feature" in said["message"], said
    assert "widen the check" in said["message"]
    # (Hopper: a named feature, the check keeps meaning CUDA as before, and its fallback runs on an
    # NPU host: the named scope keptgates.py makes of it, with the reason it always gave)
    assert 12 not in found, found
    scopes = [s for s in report["skipped"] if s["path"] == "pkg/split.py" and s["start_line"] == 12]
    assert scopes and "NPU108" in scopes[0]["reason"] and "fallback" in scopes[0]["reason"], report["skipped"]


TRANSFER = '''\
import torch


class Client:
    def init_transfer(self, device=0):
        device = torch.device(device)
        if device.type != "cuda":
            raise NotImplementedError(
                f"Weight transfer runs on an NCCL engine, which needs a CUDA device, got '{device}'."
            )
        return self.engine.join(device)


def to_device(device):
    if device.type != "cuda":
        raise ValueError(f"unsupported device {device}")
    return device
'''


def test_a_raise_that_says_it_needs_a_cuda_device_is_kept_not_widened(tmp_path):
    """Round-21 BG#12 (trl's weight-transfer client): the NPU104 rewrite widened a check whose own
    error says the code behind it "needs a CUDA device", so an NPU host went on into an NCCL engine
    instead of getting that clear error. "needs a CUDA device" is read like "requires CUDA": the check
    stays as written, with the warning asking to review; a check whose error says nothing of CUDA is
    widened as before. Round 23 (BL#22): this error also names NCCL, the CUDA-only feature, so the
    kept check is a named scope (singles23.NCCL_CHECK), not the warning asking to widen it."""
    project = write_project(tmp_path, {"pkg/client.py": TRANSFER})
    report = migrate_json(project)
    found = findings_at(report, "pkg/client.py", "NPU108")
    assert 7 not in found, found
    scopes = [s for s in report["skipped"] if s["path"] == "pkg/client.py" and s.get("start_line") == 7]
    assert scopes and "NCCL-only code" in scopes[0]["reason"], report["skipped"]
    rewritten = {f["line"] for f in report["findings"] if f["path"] == "pkg/client.py" and f["fixable"]}
    assert rewritten == {15}, rewritten
