"""Code behind the project's own predicates an NPU host answers False, across the run (issue #16,
round 10; called from wholeprogram.py): `if` bodies behind a project predicate such as
`def is_cuda(): return torch.cuda.is_available() and torch.version.cuda` (or a flag bound to it),
and public helpers called only inside blocks an NPU host never runs. Split from predicates.py,
which testscopes.py imports: these read importgates.py, which imports testscopes.py."""

from __future__ import annotations

import ast
import re

from . import astcache

# ----------------------------------------------------------------------------- the project's own CUDA predicates
def predicate_branches(results, python: list, targets: list, texts, skip=()) -> dict[int, list]:
    """{file: [(first line, last line, reason)]} of the `if` bodies of the run's files whose test
    is false on an NPU host once the project's own predicates are read (importgates'
    `false_predicates`: `def is_cuda(): return torch.cuda.is_available() and torch.version.cuda`,
    None there) and the module's flags bound to them resolved (`_is_cuda = is_cuda()`): SGLang's
    `if is_cuda(): return torch.cuda.device_memory_used(...)` never runs there. importgates uses
    the same blocks for whole modules; these are the blocks' own findings (files in `skip`, whole
    modules already lowered, are left alone)."""
    from . import importgates

    candidates = [i for i in targets if i not in skip]
    if not candidates:
        return {}
    found: frozenset | None = None
    out: dict[int, list] = {}
    for i in candidates:
        data = texts.get(i) or b""
        if b"if " not in data:
            continue
        if found is None:
            found = importgates.false_predicates(python, texts)
            if not found:
                return {}
            calls = re.compile(rb"\b(?:" + b"|".join(re.escape(p.encode()) for p in sorted(found)) + rb")\(\)")
        if not calls.search(data):
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        spans = importgates.gate_spans(tree, importgates.module_bindings(tree), found)
        if spans:
            named = ", ".join(f"`{p}()`" for p in sorted(found) if p.encode() in data)
            out[i] = [(first, last, f"in a branch an NPU host does not take: `{test}` (the project's {named} "
                       f"is false or None there)") for first, last, test in spans]
    return out


# ----------------------------------------------------------------------------- public helpers called only behind a gate
_PLATFORM_TEST = re.compile(rb"current_platform\.|\bis_(?:cuda|rocm|hip|xpu)(?:_alike)?\(\)|(?:has|is)_device_capability\("
                            rb"|\bhas_(?:flashinfer|deep_?gemm|deep_?ep|cutlass|cudnn|apex|flash_?attn)\w*\(")
_CACHE_DECORATOR = re.compile(r"(^|\.)(cache|lru_cache|cached|wraps)$")


def public_helpers(results, python: list, targets: list, texts, skip=()) -> dict[int, list]:
    """{file: [(first line, last line, reason)]} of public module-level functions of a runtime
    module (not a test) every reference of which in the file sits in a block an NPU host never
    runs (testscopes.untaken_branches: vLLM's `flashinfer_autotune(...)`, called only under `elif
    has_flashinfer() and current_platform.has_device_capability(90):`), that no other module of the
    run but tests names, and that the file never names in a string or `__all__`. reach.py does
    this for private helpers in the file alone; a public one needs the run's other files (a test
    that imports the helper runs it on its own and is reported on its own)."""
    from .importgates import is_test
    from .testscopes import untaken_branches

    out: dict[int, list] = {}
    others = None
    for i in targets:
        if i in skip or is_test(results[i].relpath):
            continue
        lines = sorted({f.line for f in results[i].findings if not f.fixable and f.cell is None
                        and f.severity != "info"})
        data = texts.get(i) or b""
        # (a cheap test before the parse: a block an NPU host never runs asks a platform question)
        if not lines or b"def " not in data or not _PLATFORM_TEST.search(data):
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        defs = [s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
                and not s.name.startswith(("_", "test")) and any(s.lineno <= n <= (s.end_lineno or s.lineno) for n in lines)
                and all(_CACHE_DECORATOR.search(astcache.dotted(d.func if isinstance(d, ast.Call) else d) or "")
                        for d in s.decorator_list)]
        if not defs:
            continue
        text = data.decode("utf-8", "replace")
        blocks = None
        # (one walk of the tree for every def: names, attributes and strings by name)
        strings: set = set()
        names_at: dict[str, list] = {}
        attrs_at: dict[str, list] = {}
        for n in astcache.walk(tree):
            if isinstance(n, ast.Name):
                names_at.setdefault(n.id, []).append(n.lineno)
            elif isinstance(n, ast.Attribute):
                attrs_at.setdefault(n.attr, []).append(n.lineno)
            elif isinstance(n, ast.Constant) and isinstance(n.value, str):
                strings.add(n.value)
        for d in defs:
            if d.name in strings:
                continue
            refs = [line for line in names_at.get(d.name, ()) if not (d.lineno <= line <= (d.end_lineno or d.lineno))]
            refs += attrs_at.get(d.name, [])
            if not refs:
                continue
            if blocks is None:
                blocks = [b for b in untaken_branches(text, results[i].relpath) if not b[3]]
            inside = [next((b for b in blocks if b[0] <= line <= b[1]), None) for line in refs]
            if not blocks or any(b is None for b in inside):
                continue
            word = re.compile(rb"\b" + re.escape(d.name.encode()) + rb"\b")
            if others is None:
                others = [j for j in python if not is_test(results[j].relpath)]
            if any(j != i and d.name.encode() in (texts.get(j) or b"") and word.search(texts.get(j) or b"")
                   for j in others):
                continue
            condition = inside[0][2]
            shown = condition if "`" in condition else f"`{condition}`"
            out.setdefault(i, []).append((
                min([d.lineno, *(x.lineno for x in d.decorator_list)]), d.end_lineno or d.lineno,
                f"in a branch an NPU host does not take: `{d.name}` is called only under {shown}, "
                f"and no other module of the run but tests names it"))
    return out
