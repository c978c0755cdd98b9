"""Hot slices change nothing: parsing only the hot statements gives the whole-file result.

`hotslice.py` replaces cold statements by placeholders before libcst parses a file and splices
them back afterwards. That is a speed-up only: for every fixture, new bytes and findings (with
their positions, messages and source text) must be exactly those of a whole-file parse.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from npu_migrate import catalogue, hotslice
from npu_migrate.engine import HOT_STATEMENT, TRIGGER_WORDS, migrate_source
from npu_migrate.model import Options
from npu_migrate.sweep import rule_reads
from npu_migrate.families.context import EXTRA_HOT

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CASES = sorted(
    p.relative_to(FIXTURES).as_posix()
    for pattern in ("rules/*.py", "projects/**/*.py")
    for p in FIXTURES.glob(pattern)
)
ENABLED = catalogue.enabled_codes()
SLICED = Options(enabled=ENABLED, hot_slices=True)
WHOLE = Options(enabled=ENABLED, hot_slices=False)


def _outcome(result):
    return result.new, result.findings, result.skipped, result.suppressed, result.encoding


def _engine_reduce(source: bytes):
    """hotslice.reduce as the engine calls it."""
    return hotslice.reduce(source, (HOT_STATEMENT, EXTRA_HOT), TRIGGER_WORDS, rule_reads())


def _assert_same(source: bytes, rel: str) -> None:
    sliced = migrate_source(source, rel, SLICED)
    whole = migrate_source(source, rel, WHOLE)
    assert _outcome(sliced) == _outcome(whole)


@pytest.mark.parametrize("rel", CASES)
def test_slices_match_whole_file(rel):
    # the path the engine sees: the fixture's own (rules/scripts/... is a script in a subfolder)
    _assert_same((FIXTURES / rel).read_bytes(), rel.split("/", 1)[1])


def test_fixtures_are_sliced():
    """The comparison above means something only if some fixtures do get placeholders."""
    sliced = [
        rel for rel in CASES
        if _engine_reduce((FIXTURES / rel).read_bytes()) is not None
    ]
    assert len(sliced) >= 5


@pytest.mark.parametrize("rel", CASES)
def test_placeholders_restore_the_source(rel):
    """Splicing the chunks back into the reduced text, untouched, gives the original bytes."""
    source = (FIXTURES / rel).read_bytes()
    slices = _engine_reduce(source)
    if slices is None:
        pytest.skip("not sliced")
    assert hotslice.restore(slices.reduced, slices) == source


# Runs of short cold statements next to hot ones, in the shapes that make slicing delicate:
# several statements on a line, a compound statement on one line, comments between them, a
# decorator, an `elif`, a backslash continuation, a name of torch rebound, a CUDA alias.
_TRICKY = '''\
"""Docstring."""
import os
import torch
import torch.cuda as tc
from torch.cuda import synchronize as sync


def f(x):
    a = 1
    b = 2; c = 3
    # a comment between cold statements
    if a: b = 4
    d = os.path.join("a",
                     "b")
    x = x.cuda()
    e = 5
    f = 6 \\
        + 7
    g = 8  # trailing comment
    return x


@staticmethod
def g():
    pass


def h(y):
    if y:
        y = 1
        z = 2
    elif y is None:
        y = 3
        z = 4
    else:
        y = "cuda"
        z = 5
    torch = None
    w = 1
    v = 2
    sync()
    u = 1
    t = 2
    return tc.current_device()


class K:
    p = 1
    q = 2

    def m(self):
        r = 1
        s = 2
        return torch.device("cuda")

    n = 3
    o = 4
'''


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_tricky_runs_of_cold_statements(newline):
    source = _TRICKY.replace("\n", newline).encode()
    assert _engine_reduce(source) is not None
    _assert_same(source, "tricky.py")


# Statements without a trigger word that the rules still treat as hot, or whose text a rule
# reads through a hot statement: slicing must keep them (or read the original text).
_NOT_SO_COLD = {
    # `from mypkg import _C` is hot by the rules' extra words (families.context.EXTRA_HOT), not
    # by a trigger word (amp_C, flashinfer and the like are trigger words too: triggers.py)
    "extra_words": '''\
import torch


class A:
    x = torch.cuda.current_device()

    def f(self):
        from mypkg import _C
        return _C.x()
''',
    # a name assigned get_device_properties(...) is hot from then on: NPU931 on `props.warp_size`
    "properties_variable": '''\
import torch
from torch.cuda import get_device_properties as gdp
props = torch.cuda.get_device_properties(0)


def f():
    x = 1
    return props.warp_size


class K:
    def __init__(self):
        self.p = gdp(0)

    def g(self):
        y = 2
        return self.p.warp_size
''',
    # the `if` guards a CUDA-only feature, named only in a cold statement of its body: NPU108
    "feature_gate": '''\
def g(device):
    if device == "cuda":
        y = 1
        z = "hopper"
    return y
''',
}


@pytest.mark.parametrize("name", sorted(_NOT_SO_COLD))
def test_statements_hot_without_trigger_words(name):
    source = _NOT_SO_COLD[name].encode()
    # by the trigger words alone, the statement would go into a placeholder
    assert hotslice.reduce(source, HOT_STATEMENT, TRIGGER_WORDS) is not None
    _assert_same(source, "pkg/case.py")
    assert migrate_source(source, "pkg/case.py", SLICED).findings


def test_graph_capture_body_is_read_whole():
    """NPU932 looks for a training step anywhere in the body of `with torch.cuda.graph(g):`."""
    source = b'''\
import torch


def train(model, optimizer, x, loss_fn):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        loss = loss_fn(model(x))
        loss.backward()
        optimizer.step()
    return g
'''
    _assert_same(source, "pkg/case.py")
    assert "NPU932" in {f.code for f in migrate_source(source, "pkg/case.py", SLICED).findings}


def test_what_libcst_cannot_parse_fails_as_a_whole():
    """`(x): int` is valid Python that libcst rejects: NPU001, even when the line is cold."""
    source = b'''\
import torch
x = torch.cuda.current_device()


def f():
    (y): int
    z = 1
    return z
'''
    _assert_same(source, "pkg/case.py")
    assert [f.code for f in migrate_source(source, "pkg/case.py", SLICED).findings] == ["NPU001"]


# Literal data inside statements that stay: left out when no rule can read it, kept otherwise.
_DATA = '''\
import torch

TABLE = {
    "cuda": {
        (1, 2, 3): (4, 5, 6),
        (7, 8, 9): (-10, 11.5, None),
    }, "x": torch.device("cuda"),
    "y": [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16], "cuda:0"],
    "names": [["flash-attention", "x"], ["CUDA_VISIBLE_DEVICES", "y"], ["NCCL_DEBUG", "z"]],
    "plain": [["alpha", "beta", "gamma", "delta", "epsilon", "zeta"], torch.cuda.current_device()],
    "concat": [("flash-" "attention", "abcdefghijklmnopqrstuvwxyz"), ("abc", f"{1}")],
    "comment": [
        [1, 2,  # cuda in a comment
         3],
    ],
}
devices = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18], "cuda"]
pair = {"a": [
    1, 2], "b": (3, 4)}; x = torch.cuda.is_available()
'''


def test_literal_data_is_left_out_only_when_inert():
    source = _DATA.encode()
    slices = _engine_reduce(source)
    assert slices is not None
    hidden = set(slices.chunks.values())
    assert b"{\n        (1, 2, 3): (4, 5, 6),\n        (7, 8, 9): (-10, 11.5, None),\n    }" in hidden
    assert b'["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]' in hidden
    for kept in (b"flash-attention", b"CUDA_VISIBLE_DEVICES", b"NCCL_DEBUG", b'"flash-" "attention"', b"# cuda"):
        assert kept in slices.reduced, kept
    assert hotslice.restore(slices.reduced, slices) == source
    _assert_same(source, "pkg/data.py")
    findings = migrate_source(source, "pkg/data.py", SLICED).findings
    assert any(f.code == "NPU990" and "flash-attention" in f.message for f in findings)


def test_reduced_text_libcst_does_not_give_back():
    """The comments that end the last function's body stay after its placeholder, at the end of
    the module, where libcst keeps only the last of them: the whole file is parsed instead."""
    source = b'''\
import torch
x = torch.cuda.current_device()


def f():
    """Doc."""
    return 1
    # one
    # two
'''
    _assert_same(source, "pkg/case.py")
    assert migrate_source(source, "pkg/case.py", SLICED).new.endswith(b"    # one\n    # two\n")


_CALLS = '''\
import torch
import torch.distributed as dist
from torch import _scaled_grouped_mm as sgm

DEVICES = {
    "device_of_the_accelerator_used_here": "cuda",
    "b": [some_function(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), torch.cuda.current_device()],
}
OPS = [
    make_op("abs", dtypes=(torch.float32, torch.float64), supports_out=True,
            sample_inputs=lambda n: [n, n + 1]),
    make_op("add", device="cuda"),
    make_op("sub", group=dist.new_subgroups(backend=some_backend_value)),
    make_op("mul", kernel=sgm(alpha_beta_gamma_delta_epsilon, 1)),
    make_op("x\\x63uda_value_escaped_in_a_string_literal_here"),
    make_op("div", note=f"{torch.float16} and {some_other_value_here}"),
]
with torch.cuda.graph(g):
    steps = [(loss_function_with_a_long_name(x), loss.backward())]
'''


def test_cold_elements_of_hot_statements():
    """Elements no rule can read are left out; those naming what a rule reads stay."""
    source = _CALLS.encode()
    slices = _engine_reduce(source)
    hidden = b"".join(slices.chunks.values())
    assert b"some_function(1, 2" in hidden and b'make_op("abs"' in hidden
    for kept in (b"new_subgroups", b"sgm(", b"x63uda", b"device_of_the", b"loss.backward()"):
        assert kept not in hidden, kept
    assert hotslice.restore(slices.reduced, slices) == source
    _assert_same(source, "pkg/ops.py")
    codes = {f.code for f in migrate_source(source, "pkg/ops.py", SLICED).findings}
    assert {"NPU102", "NPU304", "NPU913", "NPU932"} <= codes
