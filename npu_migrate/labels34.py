"""Labels, not devices or backends: two shapes of the leftover sweep (NPU990) that only choose what
is shown (issue #16, round-34 audits IB#7 and ID#28; helper h204).

- a CUDA word that is a key of a table of display spellings: a dict literal whose keys and values
  are strings, at least three of its entries spell their key in other letter case (`"nccl": "NCCL"`,
  `"cli": "CLI"`, `"lora": "LoRA"`), the flagged key among them, and one or more keys that are
  neither devices nor backends (IB#7: vLLM's docs generator title-cases words with
  `re.sub(rf"\\b{pattern}\\b", repl, text)`). The word is text to capitalise, nothing selects a
  device or backend with it. Kept (the nearest true cases): a table of devices or backends only
  (`{"nccl": "NCCL", "gloo": "GLOO"}`, an environment prefix per backend), a key mapped to another
  word (`{"cuda": "nccl"}`).
- a comparison with a CUDA word in an `if`/`elif` chain whose every branch only shows a message
  (`print(...)`, `logger.info(...)`, `pass`, with arguments that call nothing but `str`, `len`,
  `repr`, `format`, `join`): `elif profiler_config.profiler == "cuda": print("Profiling with cuda
  profiler ...")` (ID#28). Whichever branch runs, only the message differs; what the choice does
  lives where the value is used. Kept: a chain with a branch that does anything else (calls a
  function, assigns, raises, returns), and a comparison outside an `if` test.

Both become information with their reason, a moot.NO_WORK phrase (a named scope). The sweep calls
`mark` for each node it enters (Sweep.on_visit, after labels9.mark).
"""

from __future__ import annotations

import ast
from typing import Any

import libcst as cst

from . import astcache

Sweep = Any  # sweep.Sweep

# (moot.NO_WORK) a CUDA word in a table that maps words to their display spelling
SPELLING_TABLE = "a word in a table of display spellings, not a device or backend: "
# (moot.NO_WORK) a CUDA word compared in an if/elif chain whose every branch only shows a message
MESSAGE_CHOICE = "a choice that only picks the message shown, not a device: "

_DEVICES_BACKENDS = frozenset({"cpu", "cuda", "npu", "xpu", "mps", "hpu", "meta", "xla", "gpu", "tpu", "hip",
                               "rocm", "musa", "mlu", "nccl", "gloo", "mpi", "hccl", "ucc", "xccl", "rccl", "cudnn",
                               "cublas", "nvidia", "amd", "ascend"})
_SHOW_FUNCTIONS = frozenset({"print"})
_SHOW_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "log", "write",
                           "info_once", "warning_once", "debug_once"})
_PURE_CALLS = frozenset({"str", "len", "repr", "format", "join", "upper", "lower", "title"})


def _text(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.SimpleString):
        raw = node.value
        quote = raw[-1:]
        start = raw.find(quote)
        if raw[:start].lower() not in ("", "r", "u") or raw[start:start + 3] == quote * 3:
            return None
        return raw[start + 1:-1]
    return None


def mark(sweep: Sweep, node) -> None:
    """Called by the sweep for each node it enters: the module doc's labels become information
    (sweep.label_info)."""
    if isinstance(node, cst.Dict):
        _spelling_table(sweep, node)
    elif isinstance(node, cst.SimpleString):
        _message_chain(sweep, node)


# ------------------------------------------------------------------ a table of display spellings (IB#7)
def _spelling_table(sweep: Sweep, node: cst.Dict) -> None:
    respelled, keys = [], []
    for element in node.elements:
        if not isinstance(element, cst.DictElement):
            return
        key = _text(element.key)
        if key is None:
            return
        keys.append(key)
        value = _text(element.value)
        if value is not None and value != key and value.lower() == key.lower():
            respelled.append((key, element.key))
        elif value is None and not isinstance(element.value, cst.Lambda):
            return  # (a value that is neither a spelling nor a replacement function)
    words = {key.lower() for key, _ in respelled}
    if len(respelled) < 3 or not (words - _DEVICES_BACKENDS):
        return
    for key, string in respelled:
        if key.lower() in _DEVICES_BACKENDS:
            sweep.label_info.setdefault(id(string), (
                f"{SPELLING_TABLE}`{key}` is a key of a table that maps {len(respelled)} words to how they "
                "are written (`" + "`, `".join(k for k, _ in respelled[:3]) + "`, ...)"))


# ------------------------------------------------------------------ a choice of the message shown (ID#28)
def _message_chain(sweep: Sweep, node: cst.SimpleString) -> None:
    """Read from the file's syntax tree (the sweep sees a statement with no CUDA word as a
    placeholder): the strings compared in the tests of display-only chains, by position."""
    found = getattr(sweep, "_labels34_found", None)
    if found is None:
        found = {}
        tree = sweep.m._ast() if "print" in sweep.m.file_text() or "log" in sweep.m.file_text() else None
        if tree is not None:
            found = message_choices(tree)
        sweep._labels34_found = found
    reason = found.get(tuple(sweep.m.position(node)))
    if reason:
        sweep.label_info.setdefault(id(node), reason)


def message_choices(tree: ast.AST) -> dict:
    """{(line, column 1-based): reason} of the strings compared with `==`/`!=` in the tests of
    if/elif chains whose every branch only shows a message."""
    found, inner = {}, set()
    for node in astcache.walk(tree):
        if not isinstance(node, ast.If) or id(node) in inner:
            continue
        chain, bodies, current = [], [], node
        while True:
            chain.append(current)
            bodies.append(current.body)
            if len(current.orelse) == 1 and isinstance(current.orelse[0], ast.If):
                current = current.orelse[0]
                inner.add(id(current))
                continue
            if current.orelse:
                bodies.append(current.orelse)
            break
        if not all(_shows_only(body) for body in bodies):
            continue
        for branch in chain:
            test = branch.test
            if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq))):
                continue
            sides = (test.left, test.comparators[0])
            for side, other in (sides, sides[::-1]):
                if _string(side) and not _string(other):
                    found[(side.lineno, side.col_offset + 1)] = (
                        f"{MESSAGE_CHOICE}every branch of the `if` chain it is tested in (line {chain[0].lineno}) "
                        "only shows a message")
    return found


def _string(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _shows_only(body: list) -> bool:
    return bool(body) and all(isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and _shows(s.value)) for s in body)


def _shows(call: ast.AST) -> bool:
    if not isinstance(call, ast.Call):
        return False
    func = call.func
    if isinstance(func, ast.Name):
        if func.id not in _SHOW_FUNCTIONS:
            return False
    elif not (isinstance(func, ast.Attribute) and func.attr in _SHOW_METHODS):
        return False
    return all(_pure(arg) for arg in (*call.args, *(k.value for k in call.keywords)))


def _pure(node: ast.AST) -> bool:
    """No call in `node` but those that only format a value."""
    for current in ast.walk(node):
        if isinstance(current, ast.Call):
            func = current.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name not in _PURE_CALLS:
                return False
        if isinstance(current, (ast.Lambda, ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr)):
            return False
    return True
