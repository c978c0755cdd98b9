"""A test's patched-in value of a setting the project only compares with labels (issue #16, audit
round 31 FC#17; helper h155). Whole run, from runplan.whole_run_passes (after choicelabels26.py,
before moot.to_scopes).

vLLM's `tests/test_zen_cpu_platform_detection.py`:

    with (
        patch("vllm.platforms.envs.VLLM_TARGET_DEVICE", "cuda"),          # NPU990 "cuda"
        patch("vllm.platforms.load_plugins_by_group", return_value={}),
        ...
    ):
        platform = resolve_current_platform_cls_qualname()
    assert platform == "vllm.platforms.cpu.CpuPlatform"

The string is the value the test puts in place of the setting `VLLM_TARGET_DEVICE` for the code
under test: the same on every host, an NPU host's included. And the project reads that setting
only as a label: every read of `.VLLM_TARGET_DEVICE` in the run is compared with string constants
(`envs.VLLM_TARGET_DEVICE != "cpu"`, `not in ["cuda"]`), or bound once to a module-level name of
the same spelling that is itself only compared or formatted (setup.py's `VLLM_TARGET_DEVICE =
envs.VLLM_TARGET_DEVICE`, then `== "cuda"` and `f"-DVLLM_TARGET_DEVICE={VLLM_TARGET_DEVICE}"`). So the
string reaches no device: it picks a branch of comparisons an NPU host makes the same way. Such a
place becomes a named scope (choicelabels26.RESOLVED, moot.NO_WORK), naming the setting and its
reads; a merged finding whose other places differ is split (envskips29.lower_places).

The shape: an open NPU990 `"cuda"` place of a test file that is the replacement argument of
`patch("a.b.NAME", X)` (`mock.patch`, `mocker.patch`), `patch.object(obj, "NAME", X)` or
`monkeypatch.setattr("a.b.NAME", X)` / `monkeypatch.setattr(obj, "NAME", X)`, NAME an upper-case
setting name. Kept (nearest true cases): a setting one read of which does anything else (handed to
a call, `torch.device(envs.NAME)`, returned, subscripted), a setting nothing reads (labels6's own
rule), a lower-case attribute patched in (an object's field: not followed), and a `getattr` by
string of the setting anywhere in the run.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache

_SETTING = re.compile(r"^[A-Z][A-Z0-9_]*$")
_COMPARE_OPS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _name(func: ast.AST) -> str:
    return (astcache.dotted(func, strict=False) or "").rsplit(".", 2)[-1] if func is not None else ""


def _patched(call: ast.Call) -> Optional[tuple]:
    """(setting name, replacement node) of a patch call of the module docstring's shape, or None."""
    dotted = astcache.dotted(call.func, strict=False) or ""
    last = dotted.rsplit(".", 1)[-1]
    args = call.args
    if last == "patch" and not dotted.endswith("dict.patch") and len(args) >= 2 and _string(args[0]):
        return args[0].value.rsplit(".", 1)[-1], args[1]
    if last == "object" and dotted.endswith("patch.object") and len(args) >= 3 and _string(args[1]):
        return args[1].value, args[2]
    if last == "setattr" and dotted != "setattr":
        if len(args) == 2 and _string(args[0]) and "." in args[0].value:
            return args[0].value.rsplit(".", 1)[-1], args[1]
        if len(args) >= 3 and _string(args[1]):
            return args[1].value, args[2]
    return None


def _string(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _strings(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and all(_strings(e) for e in node.elts)


def _compared(node: ast.AST, parents: dict) -> bool:
    parent = parents.get(id(node))
    return (isinstance(parent, ast.Compare) and all(isinstance(op, _COMPARE_OPS) for op in parent.ops)
            and all(_strings(o) for o in (parent.left, *parent.comparators) if o is not node))


def _label_reads(results: list, text_of, name: str) -> Optional[list]:
    """The places of the run reading setting `name`, where every read is a label's; else None."""
    from .modpaths import parsed

    places: list = []
    python = [j for j, r in enumerate(results) if r.relpath.endswith(".py")]
    for j, tree in parsed(python, text_of, name.encode()):
        if tree is None:
            return None
        parents = astcache.parents(tree)
        bound = False
        for node in astcache.walk(tree):
            if isinstance(node, ast.Call) and _name(node.func) == "getattr" and any(
                    isinstance(a, ast.Constant) and a.value == name for a in node.args):
                return None  # (`getattr(envs, "NAME")`: not followed)
            if not (isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.ctx, ast.Load)):
                continue
            parent = parents.get(id(node))
            if _compared(node, parents):
                places.append(f"{results[j].relpath}:{node.lineno}")
            elif isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(
                    parent.targets[0], ast.Name) and parent.targets[0].id == name and parent in tree.body:
                bound = True
                places.append(f"{results[j].relpath}:{node.lineno}")
            else:
                return None
        if bound and not _name_reads_are_labels(tree, parents, name):
            return None
    return places


def _name_reads_are_labels(tree: ast.Module, parents: dict, name: str) -> bool:
    """Every load of the module-level name `name` is compared with strings or formatted."""
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
            parent = parents.get(id(node))
            if not (_compared(node, parents) or isinstance(parent, ast.FormattedValue)):
                return False
    return True


def review(results: list, paths: Optional[dict] = None) -> list:
    """The results, with the patched-in "cuda" values of label settings named as labels."""
    from .choicelabels26 import RESOLVED
    from .envskips29 import lower_places
    from .importgates import is_test
    from .modpaths import RunTexts
    from .moot import is_open

    def wanted(f) -> bool:
        return is_open(f) and f.code == "NPU990" and f.cell is None and f.source in ('"cuda"', "'cuda'")

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and is_test(r.relpath)
                  and any(map(wanted, r.findings))]
    if not candidates:
        return results
    text_of = RunTexts(results, paths or {})
    out = list(results)
    readers: dict = {}
    for i in candidates:
        data = text_of(i)
        tree = astcache.parse(data) if data and b"cuda" in data else None
        if tree is None:
            continue
        values: dict = {}  # line -> setting name of a "cuda" replacement there
        for node in astcache.walk(tree):
            if isinstance(node, ast.Call):
                got = _patched(node)
                if got and _SETTING.match(got[0]) and isinstance(got[1], ast.Constant) and got[1].value == "cuda":
                    values.setdefault(got[1].lineno, set()).add(got[0])

        def reason_of(line, values=values) -> Optional[str]:
            names = values.get(line)
            if not names or len(names) != 1:
                return None
            name = next(iter(names))
            if name not in readers:
                readers[name] = _label_reads(results, text_of, name)
            places = readers[name]
            if not places:
                return None
            shown = ", ".join(places[:4]) + (f" and {len(places) - 4} more" if len(places) > 4 else "")
            return (f"{RESOLVED}the test patches `{name}` with this value for the code under test, and the run "
                    f"reads `{name}` only as a label, compared with strings ({shown}): the string reaches no "
                    "device, and an NPU host takes the same branches")

        if not values:
            continue
        findings = []
        for finding in out[i].findings:
            lowered = lower_places(finding, reason_of) if wanted(finding) else None
            findings.extend(lowered if lowered else [finding])
        out[i] = _replace(out[i], findings)
    return out


def _replace(result, findings: list):
    import dataclasses

    return dataclasses.replace(result, findings=findings) if findings != result.findings else result
