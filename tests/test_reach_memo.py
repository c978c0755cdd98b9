"""reach.py works out a file's functions false on an NPU host once per tree: `untaken` (asked by
several passes with different lines of interest) and `with_file_facts` ask the same question. The
memo must give the answer a fresh computation gives, and never one of another tree."""

from __future__ import annotations

import ast
import copy

from npu_migrate import reach, testscopes

TEXT = '''\
import torch


def _built_for_cuda():
    return torch.version.cuda is not None


def kernel_ready():
    return _built_for_cuda() and torch.backends.cudnn.enabled


def launch(x):
    if kernel_ready():
        import cutlass
        return cutlass.run(x)
    return x
'''


def _count_computations(monkeypatch) -> list:
    calls = []
    real = reach._compute_false_functions

    def counting(module_names):
        calls.append(module_names)
        return real(module_names)

    monkeypatch.setattr(reach, "_compute_false_functions", counting)
    reach._FALSE_MEMO.clear()
    return calls


def test_the_same_tree_is_worked_out_once_with_the_same_blocks(monkeypatch):
    calls = _count_computations(monkeypatch)
    tree = ast.parse(TEXT)
    lines = TEXT.splitlines(keepends=True)
    blocks = reach.untaken(tree, TEXT, "pkg/mod.py", [], testscopes.npu_truth, testscopes.source_segment)
    asked = len(calls)
    assert asked >= 1
    again = reach.untaken(tree, TEXT, "pkg/mod.py", [], testscopes.npu_truth, testscopes.source_segment, {14})
    reach.with_file_facts(tree, testscopes.npu_truth)
    assert len(calls) == asked  # (both answered from the memo)
    # the memo's answer equals a fresh one, and the blocks are the ones a cold run finds
    reach._FALSE_MEMO.clear()
    cold = reach.untaken(tree, TEXT, "pkg/mod.py", [], testscopes.npu_truth, testscopes.source_segment)
    assert blocks == cold and len(calls) > asked
    assert [b for b in again if b[0] <= 14 <= b[1]] == [b for b in cold if b[0] <= 14 <= b[1]]
    assert any(b[0] <= 14 <= b[1] for b in cold), (cold, lines[13])


def test_another_tree_is_never_given_the_memo_answer(monkeypatch):
    calls = _count_computations(monkeypatch)
    tree = ast.parse(TEXT)
    reach.untaken(tree, TEXT, "pkg/mod.py", [], testscopes.npu_truth, testscopes.source_segment)
    asked = len(calls)
    # a different text (the gate now true on an NPU host) in a new tree: worked out anew
    other_text = TEXT.replace("return _built_for_cuda() and torch.backends.cudnn.enabled", "return torch.backends.cudnn.enabled")
    other = ast.parse(other_text)
    blocks = reach.untaken(other, other_text, "pkg/mod.py", [], testscopes.npu_truth, testscopes.source_segment)
    assert len(calls) > asked
    assert not any(b[0] <= 14 <= b[1] for b in blocks)
    # a copy of the first tree is another object: asked again, same answer
    twin = copy.deepcopy(tree)
    before = len(calls)
    assert reach.untaken(twin, TEXT, "pkg/mod.py", [], testscopes.npu_truth, testscopes.source_segment) == \
        reach.untaken(tree, TEXT, "pkg/mod.py", [], testscopes.npu_truth, testscopes.source_segment)
    assert len(calls) > before
