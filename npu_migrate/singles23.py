"""Single shapes left from the round-23 audits (issue #16): tests, cuDNN flags, NCCL-only checks.

Per file (testscopes.py and run.migrate_file), on report-only findings; each shape decides on the
exact construct:

- **A module skipped in the `else:` of a CUDA-only test** (round 23 BL#5, testscopes.py calls
  `else_skip`): a module-level `if <condition>: <imports> else: pytest.skip(...,
  allow_module_level=True)` whose condition is certainly false on an NPU host
  (`current_platform.is_cuda() and has_deep_ep_v2()`: a CUDA-only predicate in an `and`). pytest
  skips the whole module there, so every later line is a test scope that does not run on an NPU
  host, named as testscopes.py names its other skips (the reason is the skip's own condition,
  `not (...)`). A condition an NPU host may pass (`has_deep_ep_v2()` alone, an `or` with an
  unknown side, a rewritten `torch.cuda.is_available()`), an `if` whose body skips too, and the
  same shape inside a function keep the findings.
- **`cudnn.deterministic = True` in a test with no cuDNN op** (BN#24, `review`): the NPU404
  information "for deterministic NPU runs also call `torch.use_deterministic_algorithms(True)`" in
  a pytest test module whose text names no operation cuDNN runs (no convolution, RNN/LSTM/GRU,
  batch norm, CTC loss, grid sampling) and builds no model that could hold one (no `model`,
  `from_pretrained`, `torchvision`, a CNN name). The flag changes nothing in that test even on
  CUDA, so the NPU loses nothing and the advice does not apply: lowered with NO_CUDNN_OP (a
  moot.NO_EFFECT phrase: a named scope). The same line in a file with convolutions, in a library
  module (its callers' models may hold any op, round 23 BL#32) or in a test that builds a model
  stays information.
- **A CUDA check whose raise names NCCL** (BL#22, `review`): the NPU108 warning "kept because the
  code says it needs CUDA ..., but it names no CUDA-only feature ... widen the check to the NPU"
  on the test of an `if` whose body raises with a text that names NCCL (`"... runs on vLLM's NCCL
  weight-transfer engine, which needs a CUDA device"`). NCCL is the CUDA-only feature: the check
  turns the NPU away with the code's own clear error, and widening it would lead into NCCL (which
  the run reports where it is imported or called). Lowered with NCCL_CHECK (a moot.AS_WRITTEN
  phrase: a named scope). A raise that names only CUDA keeps the warning.
- **A profiler's CUDA activity in a profile that only counts FLOPs** (BN#17, `review`): the NPU935
  "The profiler is asked for CUDA activity" on an activity of a `with torch.profiler.profile(...,
  with_flops=True, activities=[CPU, CUDA]) as p:` whose function reads nothing the CUDA activity
  records: outside that call its text names no time, memory, table, export, device or CUDA
  (`results = Analyzer.from_profile(p.events()); total_flops += ...`) and returns or yields no value.
  FLOPs are counted on the
  CPU-side ops; on an NPU host torch drops the CUDA activity with a warning and the FLOP totals are
  the same. Lowered with FLOPS_ONLY (a moot.NO_EFFECT phrase: a named scope). A profile without
  `with_flops=True`, or whose function reads times (`key_averages()`, `cuda_time_total`,
  `export_chrome_trace`), keeps the finding.
- **An argparse `--device` default of "cuda"** (BN#6, BN#9; families/cli_env.py calls
  `device_option_flows`): `parser.add_argument("--device", default="cuda:0")` with no `choices`
  (those get NPU603 already) and no `type` (or `type=str`) fell through to the generic NPU990
  warning. Where the file shows the parsed value reaching a device position, the option gets the
  NPU603 rewrite (`type=npu_compat.device_arg`, which argparse applies to a string default too: on
  an NPU host "cuda:0" becomes "npu:0", elsewhere nothing changes). The proof: `<ns>.device` (the
  option's `dest`), `<ns>` a name bound to a `parse_args(...)` result in the file, is the value of a
  device keyword (`device=args.device`), the first argument of `torch.device(...)` or the argument
  of `.to(...)`. An option whose value the file only prints or passes to an unknown call keeps the
  NPU990 warning.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from typing import Callable, Optional

from . import astcache
from .findings import Finding

NO_CUDNN_OP = "a cuDNN flag in a test that runs no cuDNN op"
NCCL_CHECK = "a CUDA check that turns the NPU away from NCCL-only code"
FLOPS_ONLY = "a profile that only counts FLOPs"

_TEST_MODULE = re.compile(r"(^|/)(test_[^/]*|[^/]*_test)\.py$")
# What cuDNN runs (convolutions, RNNs, batch norm, CTC, grid sampling), and what may build a model
# holding such ops outside the file
_CUDNN_OPS = re.compile(r"conv|rnn|lstm|\bgru|batch_?norm|ctc|grid_sample|affine_grid|model|from_pretrained"
                        r"|torchvision|resnet|vgg|unet|cnn|vision|audio|pool", re.IGNORECASE)
_SAYS_CUDA = 'kept because the code says it needs CUDA'
_NCCL = re.compile(r"\bNCCL\b", re.IGNORECASE)


# ----------------------------------------------------------------------------- module skip in an `else:`
def _skips(stmt: ast.stmt) -> bool:
    return any(isinstance(n, ast.Call) and astcache.dotted(n.func) in ("pytest.skip", "skip")
               and any(k.arg == "allow_module_level" for k in n.keywords) for n in ast.walk(stmt))


def else_skip(stmt: ast.stmt, truth: Callable) -> Optional[ast.AST]:
    """The test of a module-level `if` whose `else:` skips the module and whose condition `truth`
    (testscopes' three-valued reading on an NPU host) finds certainly false, else None."""
    if not (isinstance(stmt, ast.If) and stmt.orelse and any(_skips(s) for s in stmt.orelse)):
        return None
    if any(_skips(s) for s in stmt.body):
        return None
    return stmt.test if truth(stmt.test) is False else None


# ----------------------------------------------------------------------------- per-file review
def _no_cudnn_op(finding: Finding, text: str, relpath: str) -> bool:
    return (finding.code == "NPU404" and finding.severity == "info"
            and finding.source == "torch.backends.cudnn.deterministic"
            and "use_deterministic_algorithms" in finding.message and NO_CUDNN_OP not in finding.message
            and bool(_TEST_MODULE.search(relpath)) and not _CUDNN_OPS.search(text))


def _raise_text(node: ast.Raise) -> str:
    return " ".join(str(n.value) for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str))


def nccl_raise(tree: ast.Module, line: int) -> Optional[int]:
    """The line of the `raise` naming NCCL in the body of the `if` whose test holds `line`."""
    for node in astcache.nodes(tree, (ast.If,)):
        test = node.test
        if not test.lineno <= line <= (test.end_lineno or test.lineno):
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.Raise) and _NCCL.search(_raise_text(stmt)):
                return stmt.lineno
    return None


_READS_DEVICE = re.compile(r"time|memory|table|export|device|cuda", re.IGNORECASE)


def flops_only(tree: ast.Module, text: str, line: int) -> bool:
    """The `profile(...)` call holding `line` counts FLOPs and its function reads nothing else."""
    for function in astcache.nodes(tree, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if not function.lineno <= line <= (function.end_lineno or function.lineno):
            continue
        for node in ast.walk(function):
            if not isinstance(node, (ast.With, ast.AsyncWith)):
                continue
            for item in node.items:
                call = item.context_expr
                if not (isinstance(call, ast.Call) and call.lineno <= line <= (call.end_lineno or call.lineno)):
                    continue
                flops = any(k.arg == "with_flops" and isinstance(k.value, ast.Constant) and k.value.value is True
                            for k in call.keywords)
                if not flops or (astcache.dotted(call.func) or "").rpartition(".")[2] != "profile":
                    return False
                whole = ast.get_source_segment(text, function) or ""
                own = ast.get_source_segment(text, call) or ""
                header = ast.get_source_segment(text, function.args) or ""
                rest = whole.replace(own, "", 1).replace(header, "", 1)
                handed_on = any(isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom)) and n.value is not None
                                for n in ast.walk(function))  # (a caller elsewhere may read the times)
                return bool(own) and not handed_on and not _READS_DEVICE.search(rest)
    return False


def review(findings: list[Finding], text: str, relpath: str = "") -> list[Finding]:
    """NPU404 and NPU108 findings of the shapes of the module doc, lowered to named scopes."""
    cudnn = [f for f in findings if _no_cudnn_op(f, text, relpath)]
    checks = [f for f in findings if f.code == "NPU108" and f.severity == "warning" and f.cell is None
              and _SAYS_CUDA in f.message and not f.also]
    profiles = [f for f in findings if f.code == "NPU935" and f.severity != "info" and f.cell is None
                and "with_flops" in text and not f.also]
    if not cudnn and not checks and not profiles:
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass")) if checks or profiles else None
    out = []
    for finding in findings:
        if any(finding is f for f in cudnn):
            finding = dataclasses.replace(finding, severity="info", message=(
                f"{finding.message} ({NO_CUDNN_OP}: the test module names no convolution, RNN, batch norm "
                "or model, so the flag changes nothing here even on CUDA)"))
        elif tree is not None and any(finding is f for f in checks):
            line = nccl_raise(tree, finding.line)
            if line is not None:
                finding = dataclasses.replace(finding, severity="info", message=(
                    f"{finding.message.split(' kept because', 1)[0]} kept ({NCCL_CHECK}: the `raise` at line "
                    f"{line} names NCCL, which has no NPU build; the check refuses the NPU with the code's own "
                    "error, and the NCCL code is reported where it is imported or called)"))
        elif tree is not None and any(finding is f for f in profiles) and flops_only(tree, text, finding.line):
            finding = dataclasses.replace(finding, severity="info", message=(
                f"{finding.message} ({FLOPS_ONLY}: `with_flops=True`, and its function reads no time or "
                "memory the CUDA activity records; FLOPs are counted on CPU-side ops, the same on an NPU host)"))
        out.append(finding)
    return out


# ----------------------------------------------------------------------------- argparse device defaults
@functools.lru_cache(maxsize=64)
def _device_reads(text: str, keywords: frozenset) -> frozenset:
    """The attributes `<ns>.<attr>` read in a device position, `<ns>` bound to `parse_args(...)`."""
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return frozenset()
    parsed = {t.id for n in astcache.nodes(tree, (ast.Assign,)) if isinstance(n.value, ast.Call)
              and astcache.dotted(n.value.func) is not None and astcache.dotted(n.value.func).endswith("parse_args")
              for t in n.targets if isinstance(t, ast.Name)}
    if not parsed:
        return frozenset()

    def read(node: ast.AST) -> Optional[str]:
        ok = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in parsed
        return node.attr if ok else None

    out = set()
    for call in astcache.nodes(tree, (ast.Call,)):
        values = [k.value for k in call.keywords if k.arg in keywords]
        name = astcache.dotted(call.func) or ""
        if call.args and (name == "torch.device" or (isinstance(call.func, ast.Attribute) and call.func.attr == "to"
                                                      and len(call.args) == 1)):
            values.append(call.args[0])
        out.update(a for a in map(read, values) if a)
    return frozenset(out)


def device_option_flows(text: str, dest: str, keywords: frozenset) -> bool:
    """The parsed value of the option `dest` reaches a device position in the file (module doc)."""
    return dest in _device_reads(text, keywords)

