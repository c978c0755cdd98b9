"""Values a test's mock returns in place of torch's or the platform's answer (issue #16, round-29 audit
DA#6). Per file, from run.migrate_file (after unlaunched29.py).

vLLM's `tests/utils_/test_mem_utils.py`:

    with patch("torch.accelerator") as mock_accelerator:
        mock_accelerator.get_memory_info.return_value = (free, total)
        mock_accelerator.current_device = lambda: "cuda:0"          # NPU990 "cuda:0"
        snapshot = MemorySnapshot(device="cuda:0")                   # (rewritten: the shim's device)

and `tests/kernels/quantization/test_fp8_min_max_helper.py`:

    @patch("...quant_utils.current_platform")
    def test_standard_fp8_platform(self, mock_platform):
        mock_platform.fp8_dtype.return_value = torch.float8_e4m3fn   # NPU913

The value is what a mock hands the code under test in place of the real query: the same on every
host, an NPU host's included, and it is no device placement or FP8 compute of its own (a string, a
dtype object). A report-only place (NPU990, NPU913, NPU102) that is exactly such a value becomes
info with the reason `MOCK_VALUE` (a moot.NO_WORK phrase: a named scope): the value of
`M.<attr>.return_value = X` (or `side_effect`), the body of `M.<attr> = lambda ...: X`, or a
`return_value=X` keyword of `Mock(...)`, `MagicMock(...)` or `patch(...)`, where M is a mock of the
file: bound by `with patch(...) as M` (`patch.object`, `mock.patch`, `mocker.patch` too), by `M =
Mock()`/`MagicMock()`/`mocker.patch(...)`, or a parameter of a function a `@patch(...)` decorates
whose name starts with `mock`. A merged finding is split where its places differ (envskips29.lower_places): its other places
keep their severity.

Round-30 audit EA#25 (vLLM's `tests/v1/worker/test_gpu_profiler.py`): the value a test expects a
mock to have been called with is no more a request of the real API than a value the mock returns:

    with patch("vllm.profiler.wrapper.torch.profiler.profile", side_effect=profilers) as profile:
        ...
    assert profile.call_args.kwargs["activities"] == [
        torch.profiler.ProfilerActivity.CUDA                       # NPU935
    ]

`profile` stands in for the profiler: nothing records, the enum exists in every torch build, and
the assertion holds the same on an NPU host. The other side of a comparison in an `assert` whose
one side reads a mock's recorded call (`M.call_args...`, `M.call_args_list...`, `M.mock_calls...`),
and an argument of `M.assert_called_with(...)` (`assert_called_once_with`, `assert_any_call`), are
such values too; NPU935 (the profiler's CUDA activity) is lowered with the codes above.

Round-30 audit EA#33 (vLLM's `tests/model_executor/kernels/test_b12x_linear.py`): a fake object a
test patches in place of the platform answers the same way:

    monkeypatch.setattr(fp8_utils, "current_platform", types.SimpleNamespace(
        is_rocm=lambda: False, fp8_dtype=lambda: torch.float8_e4m3fn))      # NPU913

A keyword value of a `SimpleNamespace(...)` (the body of a lambda one) handed as the replacement
to `monkeypatch.setattr(...)` (`setattr` of any receiver), `patch(...)` or `patch.object(...)` is
such a value too.

Round-31 audit FA#12 (vLLM's `tests/distributed/test_pynccl.py`): an attribute a test sets to a
mock stands in for the CUDA library it names:

    comm = object.__new__(PyNcclCommunicator)
    comm.nccl = Mock()                                              # NPU990 `comm.nccl`
    comm.suspend()
    assert comm.nccl.ncclCommSuspend.call_count == 1                # NPU990 `comm.nccl`

No NCCL loads; the test checks the communicator's own Python logic, the same on an NPU host. A
report-only place that is `X.attr` (or the start of `X.attr.<...>`) inside a function that assigns
`X.attr = Mock()` (any of the mock classes above, or `patch`), where the function binds `X.attr`
nowhere else, becomes info with MOCK_ATTRIBUTE (a moot.NO_WORK phrase).

Kept (the nearest true cases): the same value handed to real code (`torch.device("cuda:0")`, a
`device="cuda"` argument), assigned to an attribute of an object that is not a mock, or returned by
a mock's method whose result the test then moves a tensor with.
"""

from __future__ import annotations

import ast
import re

from . import astcache
from .envskips29 import lower_places

MOCK_VALUE = "a value a test's mock returns in place of the real query: the same on every host"
MOCK_ATTRIBUTE = ("a value a test's mock returns in place of the real query: the attribute is a mock the "
                  "test sets in place of the real object, the same on every host")

_CODES = frozenset({"NPU990", "NPU913", "NPU102", "NPU935"})
_RECORDED = frozenset({"call_args", "call_args_list", "mock_calls", "await_args", "await_args_list"})
_CALLED_WITH = frozenset({"assert_called_with", "assert_called_once_with", "assert_any_call",
                          "assert_awaited_with", "assert_awaited_once_with"})
_MOCKS = frozenset({"Mock", "MagicMock", "NonCallableMock", "AsyncMock", "create_autospec", "PropertyMock"})


def _patch_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    name = astcache.dotted(node.func)
    last = name.rsplit(".", 1)[-1]
    return last in _MOCKS or name.endswith(("patch", "patch.object", "patch.dict")) or last == "patch"


def _mock_names(tree: ast.Module) -> frozenset:
    names: set[str] = set()
    for node in astcache.walk(tree):
        if isinstance(node, ast.withitem) and _patch_call(node.context_expr) \
                and isinstance(node.optional_vars, ast.Name):
            names.add(node.optional_vars.id)
        elif isinstance(node, ast.Assign) and _patch_call(node.value):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                _patch_call(d) for d in node.decorator_list):
            names.update(a.arg for a in node.args.args if a.arg.startswith("mock"))
    return frozenset(names)


# (public: families/context.py leaves a string a test stores on a mock as written, round 32 GB#36)
mock_names = _mock_names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _reads_recorded_call(node: ast.AST, mocks: frozenset) -> bool:
    """`M.call_args.kwargs["activities"]`, `M.call_args_list[0]`: what mock M was called with."""
    seen = False
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        seen = seen or (isinstance(node, ast.Attribute) and node.attr in _RECORDED)
        node = node.value
    return seen and isinstance(node, ast.Name) and node.id in mocks


def _mock_values(tree: ast.Module, mocks: frozenset) -> set[tuple[int, int]]:
    """(line, 1-based column) of every value a mock of the file returns."""
    out: set[tuple[int, int]] = set()

    def add(value: ast.AST) -> None:
        if isinstance(value, ast.Lambda):
            value = value.body
        for node in ([value] if not isinstance(value, (ast.Tuple, ast.List)) else value.elts):
            if isinstance(node, (ast.Constant, ast.Attribute)):
                out.add((node.lineno, node.col_offset + 1))

    for node in astcache.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute):
            target = node.targets[0]
            if _root(target) not in mocks:
                continue
            if target.attr in ("return_value", "side_effect") or isinstance(node.value, ast.Lambda) \
                    or (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
                add(node.value)  # (`M.device_type = "cuda"`: what the mock answers when read, round 32 GB#36)
        elif isinstance(node, ast.Call) and _patch_call(node):
            for keyword in node.keywords:
                if keyword.arg == "return_value":
                    add(keyword.value)
        if isinstance(node, ast.Call) and (_patch_call(node) or (astcache.dotted(node.func) or "").endswith("setattr")):
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                if isinstance(arg, ast.Call) and (astcache.dotted(arg.func) or "").endswith("SimpleNamespace"):
                    for keyword in arg.keywords:  # (round 30, EA#33: a fake object patched in)
                        add(keyword.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _CALLED_WITH and _root(node.func.value) in mocks:
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                add(arg)  # (round 30, EA#25: the arguments a test expects the mock got)
        elif isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare) \
                and len(node.test.ops) == 1 and isinstance(node.test.ops[0], (ast.Eq, ast.In)):
            sides = [node.test.left, node.test.comparators[0]]
            for mine, other in (sides, sides[::-1]):
                if _reads_recorded_call(mine, mocks):
                    add(other)  # (round 30, EA#25: the value compared with a mock's recorded call)
    for function in astcache.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and _mocks_cuda_device(function, mocks):
            for node in ast.walk(function):
                if isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1 \
                        and isinstance(node.test.ops[0], (ast.Eq, ast.NotEq, ast.In)):
                    for side in (node.test.left, node.test.comparators[0]):
                        if isinstance(side, ast.Constant) and isinstance(side.value, str) \
                                and _CUDA_STRING.match(side.value):
                            out.add((side.lineno, side.col_offset + 1))
    return out


_CUDA_STRING = re.compile(r"cuda(?::\d+)?$")


def _mocks_cuda_device(function: ast.AST, mocks: frozenset) -> bool:
    """The function stores a CUDA device string on a mock (`mock_platform.device_type = "cuda"`): it
    stands in for a CUDA platform, and the CUDA strings its assertions expect are what the code
    under test derives from that mock, on every host (round 32 GB#36)."""
    return any(isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute)
               and isinstance(node.targets[0].value, ast.Name) and node.targets[0].value.id in mocks
               and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
               and _CUDA_STRING.match(node.value.value) for node in ast.walk(function))


def _mock_attributes(tree: ast.Module) -> dict[tuple[int, int], bool]:
    """{(line, 1-based column): True} of `X.attr` wherever the function holding it sets `X.attr =
    Mock()` and binds `X.attr` nowhere else (round 31, FA#12)."""
    out: dict[tuple[int, int], bool] = {}
    for function in astcache.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        stores: dict[str, list] = {}
        for node in ast.walk(function):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and not isinstance(node.ctx, ast.Load):
                stores.setdefault(f"{node.value.id}.{node.attr}", []).append(node)
        mocked = {name for name, nodes in stores.items() if len(nodes) == 1 and any(
            isinstance(a, ast.Assign) and len(a.targets) == 1 and a.targets[0] is nodes[0] and _patch_call(a.value)
            for a in ast.walk(function))}
        if not mocked:
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and f"{node.value.id}.{node.attr}" in mocked:
                out[(node.lineno, node.col_offset + 1)] = True
    return out


def review(findings: list, text: str, relpath: str) -> list:
    """`findings`, with each place of the docstring's shape lowered to info."""
    from .importgates import is_test

    hits = [f for f in findings if f.code in _CODES and not f.fixable and f.severity != "info"]
    if not hits or not is_test(relpath) or ("ock" not in text and "SimpleNamespace" not in text):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    mocks = _mock_names(tree)
    values = _mock_values(tree, mocks)
    attributes = _mock_attributes(tree)
    if not values and not attributes:
        return findings
    out, changed = [], False
    for finding in findings:
        pieces = None
        if any(finding is hit for hit in hits):
            columns = {finding.line: finding.column, **{line: column for line, column, _s in finding.also}}
            pieces = lower_places(finding, lambda line: MOCK_VALUE if (line, columns.get(line)) in values else
                                  MOCK_ATTRIBUTE if (line, columns.get(line)) in attributes else None)
        changed = changed or pieces is not None
        out.extend([finding] if pieces is None else pieces)
    return sorted(out) if changed else findings
