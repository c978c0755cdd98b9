"""tests/project_runs.torchrun_should_retry: which failed torchrun runs the project-run tests try again
(a gloo teardown abort or a port clash) and which are failures (the run's own error)."""

from __future__ import annotations

from types import SimpleNamespace

from tests.project_runs import TEARDOWN_ABORT, torchrun_should_retry

STEPS = "".join(f"step {i} loss 0.5\n" for i in range(5))
TORCHRUN_TRACE = ('Traceback (most recent call last):\n'
                  '  File "/work/.venv/lib/python3.11/site-packages/torch/distributed/run.py", line 892, in main\n'
                  'torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n')


def _proc(returncode: int, stdout: str, stderr: str):
    return SimpleNamespace(returncode=returncode, stdout=stdout, stderr=stderr)


def test_a_clean_run_is_not_retried():
    assert not torchrun_should_retry(_proc(0, STEPS, TEARDOWN_ABORT), 5)


def test_teardown_abort_after_every_step_is_retried():
    assert torchrun_should_retry(_proc(1, STEPS, TEARDOWN_ABORT + "\n" + TORCHRUN_TRACE), 5)


def test_teardown_abort_that_cut_the_output_short_is_retried():
    # (rank 1 aborted at exit and torchrun stopped rank 0 before its last lines: only torchrun's frames)
    assert torchrun_should_retry(_proc(1, STEPS.split("step 3")[0], TEARDOWN_ABORT + "\n" + TORCHRUN_TRACE), 5)


def test_the_runs_own_traceback_is_a_failure_even_with_an_abort():
    own = ('Traceback (most recent call last):\n  File "/tmp/x/ddp_mini/train.py", line 40, in main\n'
           'RuntimeError: boom\n')
    assert not torchrun_should_retry(_proc(1, "step 0 loss 0.5\n", own + TEARDOWN_ABORT + "\n" + TORCHRUN_TRACE), 5)


def test_a_failure_without_an_abort_or_a_port_clash_is_not_retried():
    assert not torchrun_should_retry(_proc(1, "", TORCHRUN_TRACE), 5)
    assert torchrun_should_retry(_proc(1, "", "RuntimeError: EADDRINUSE"), 5)
