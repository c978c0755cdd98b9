"""Op-builder code an NPU host never reaches, read across the builder's files (issue #16, round 15).

Three shapes the round-15 audits (AN#25, AN#40, AO#34: DeepSpeed's op builders) read as false:

(a) **A flag the base class sets from `not torch.cuda.is_available()`** (`review_cpu_flags`). An op
    builder base class assigns `self.build_for_cpu = not torch.cuda.is_available()` (kept as
    written: the migration does not rewrite it there, so it is True on an NPU host), and its other
    assignments of the attribute are constants: the default in `__init__`, `True`, or `False` in
    a `try` body whose handler sets it `True` (`try: assert_no_cuda_mismatch(...); self.x = False`
    / `except MissingCUDAException: self.x = True`: the CUDA toolkit check fails there). In the
    methods of that class and of its subclasses in the run (by class line, text only), the `else`
    of `if self.build_for_cpu:` (its `elif` included) and the body of `if not self.build_for_cpu:`
    are never run on an NPU host: their findings become info "in a branch an NPU host does not
    take" (moot.py names the block). A subclass that assigns the attribute itself, or a base
    class with any other assignment, keeps every finding.
(b) **A CUDA_HOME read that raises a handled exception** (`review_handled_reads`). An NPU911 on
    `cuda_home = torch.utils.cpp_extension.CUDA_HOME` directly followed by `if cuda_home is None:
    raise MissingCUDAException(...)`, where the run catches that exception class by name
    (`except MissingCUDAException:`) somewhere: on an NPU host the read gives None (nothing fails
    there) and the function raises the project's own exception, which its callers handle. Info
    with HANDLED (a moot.PHRASES entry). An exception nobody catches keeps the error.
(c) **A method only called from untaken branches of its own file** (`review_same_file_callers`).
    A report-only finding (any code but NPU911, which callersonly.py reads) in a method of a class
    whose name no other file of the run holds (byte-identical copies excepted: their references
    mirror these), and whose every reference in the file (attribute, name; a string naming it
    keeps the finding) lies in a block testscopes.untaken_branches names (`if
    torch.cuda.is_available() and isinstance(self, CUDAOpBuilder):`): info with
    callersonly.CALLERS_ONLY and the lines.

Whole-run, text first: a file is parsed only when its bytes hold the shape's words. Called once,
from runplan.whole_run_passes.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace

from . import astcache

UNTAKEN = "in a branch an NPU host does not take"  # (a moot.PHRASES entry)
# (moot.PHRASES holds it: the read gives None on an NPU host, and the project raises and handles that)
HANDLED = "a CUDA_HOME read that raises a handled exception"

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_CPU_FLAG = re.compile(rb"self\.(\w+)[ \t]*=[ \t]*not[ \t]+torch\.cuda\.is_available\(\)")
_CLASS_LINE = re.compile(rb"^[ \t]*class[ \t]+(\w+)[ \t]*(?:\(([^)]*)\))?[ \t]*:", re.MULTILINE)


def _open(finding) -> bool:
    from .moot import is_moot

    return not finding.fixable and finding.cell is None and finding.severity != "info" and not is_moot(finding)


def _lower(finding, why: str):
    return replace(finding, severity="info", message=f"{finding.message} ({why})")


def _self_attr(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _own_statements(function: ast.AST):
    """(statement, the `try` statements holding it) of a function, without nested functions/classes."""
    stack = [(s, ()) for s in function.body]
    while stack:
        node, tries = stack.pop()
        yield node, tries
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            continue
        inner = (*tries, node) if isinstance(node, ast.Try) else tries
        for field in ("body", "orelse", "finalbody", "handlers"):
            for child in getattr(node, field, None) or ():
                if isinstance(child, ast.excepthandler):
                    stack.extend((s, tries) for s in child.body)
                elif isinstance(child, ast.stmt):
                    stack.append((child, inner if field == "body" else tries))


def _assignments(cls: ast.ClassDef, attr: str):
    """(method, statement, its `try` statements) of each `self.attr = value` in the class."""
    for method in cls.body:
        if not isinstance(method, _FUNCTIONS):
            continue
        for statement, tries in _own_statements(method):
            targets = statement.targets if isinstance(statement, ast.Assign) else \
                [statement.target] if isinstance(statement, (ast.AnnAssign, ast.AugAssign)) else []
            if any(_self_attr(t) == attr for t in targets):
                yield method, statement, tries


def _sets_true(handler: ast.excepthandler, attr: str) -> bool:
    return any(isinstance(s, ast.Assign) and any(_self_attr(t) == attr for t in s.targets)
               and isinstance(s.value, ast.Constant) and s.value.value is True for s in handler.body)


def _is_cpu_test(value: ast.AST) -> bool:
    return (isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not) and isinstance(value.operand, ast.Call)
            and not value.operand.args and astcache.dotted(value.operand.func) == "torch.cuda.is_available")


def _true_on_npu(cls: ast.ClassDef, attr: str) -> str | None:
    """Where the class sets `self.attr` from `not torch.cuda.is_available()` ("Class.method"), when
    every other assignment of it is a constant of the allowed kinds; "" when it has no such
    assignment but every one it has is allowed (or none); None when one is not."""
    where = ""
    for method, statement, tries in _assignments(cls, attr):
        value = getattr(statement, "value", None)
        if isinstance(statement, ast.AugAssign) or value is None:
            return None
        if _is_cpu_test(value):
            where = where or f"{cls.name}.{method.name}"  # (the first one)
            continue
        if not (isinstance(value, ast.Constant) and isinstance(value.value, bool)):
            return None
        if value.value is True or method.name == "__init__":
            continue
        if not any(any(_sets_true(h, attr) for h in t.handlers) for t in tries):
            return None  # (`False` outside a toolkit check that falls back to True)
    return where


def _classes(data: bytes) -> dict[str, list[str]]:
    out = {}
    for match in _CLASS_LINE.finditer(data):
        bases = (match.group(2) or b"").decode("utf-8", "replace").split(",")
        out[match.group(1).decode("utf-8", "replace")] = [
            b.strip().rpartition(".")[2] for b in bases if re.fullmatch(r"[\w.]+", b.strip())]
    return out


def _untaken_blocks(cls: ast.ClassDef, attr: str) -> list[tuple[int, int]]:
    """(first, last line) of the blocks of the class's methods an NPU host skips when `self.attr` is True."""
    out = []
    for method in cls.body:
        if not isinstance(method, _FUNCTIONS):
            continue
        for node, _ in _own_statements(method):
            if not isinstance(node, ast.If):
                continue
            test = node.test
            if _self_attr(test) == attr and node.orelse:
                block = node.orelse
            elif (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
                  and _self_attr(test.operand) == attr and node.body):
                block = node.body
            else:
                continue
            out.append((block[0].lineno, block[-1].end_lineno or block[-1].lineno))
    return out


def review_cpu_flags(results: list, paths: dict) -> list:
    """Shape (a) of the module docstring over a run's results (a new list)."""
    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(_open(f) for f in r.findings)]
    if not candidates:
        return results
    from .modpaths import RunTexts

    text_of = RunTexts(results, paths)
    # {attr: {class name: where it is set}}: the base classes, from the files that hold the assignment
    flags: dict[str, dict[str, str]] = {}
    unsure: set[tuple[str, str]] = set()
    class_lines: dict[str, list[str]] = {}  # the class lines of those files: subclasses in other files derive through them
    for j, result in enumerate(results):
        if not result.relpath.endswith(".py"):
            continue
        data = text_of(j) or b""
        if b"torch.cuda.is_available" not in data or not _CPU_FLAG.search(data):
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        for attr in {m.group(1).decode() for m in _CPU_FLAG.finditer(data)}:
            for cls in (n for n in astcache.walk_statements(tree) if isinstance(n, ast.ClassDef)):
                where = _true_on_npu(cls, attr)
                if where:
                    flags.setdefault(attr, {})[cls.name] = where
                elif where is None:
                    unsure.add((attr, cls.name))  # (no subclass derives the flag through it)
            class_lines.update(_classes(data))
    if not flags:
        return results
    out = list(results)
    for i in candidates:
        data = text_of(i) or b""
        attrs = [a for a in flags if b"self." + a.encode() in data]
        if not attrs:
            continue
        tree = None
        findings = list(out[i].findings)
        for attr in attrs:
            tree = tree or astcache.parse(data)
            if tree is None:
                break
            known = dict(flags[attr])  # class -> where (subclasses by class line, this file's)
            lines = {**class_lines, **_classes(data)}
            grew = True
            while grew:
                grew = False
                for name, bases in lines.items():
                    base = next((b for b in bases if b in known), None)
                    if name not in known and base is not None and (attr, name) not in unsure:
                        known[name] = known[base]
                        grew = True
            for cls in (n for n in astcache.walk_statements(tree) if isinstance(n, ast.ClassDef)):
                if cls.name not in known:
                    continue
                if _true_on_npu(cls, attr) is None:
                    continue  # (a class that sets the flag its own way)
                blocks = _untaken_blocks(cls, attr)
                for k, finding in enumerate(findings):
                    if _open(finding) and any(a <= finding.line <= b for a, b in blocks) and not any(
                            not any(a <= place[0] <= b for a, b in blocks) for place in finding.also or ()):
                        findings[k] = _lower(finding, f"{UNTAKEN}: `self.{attr}` is True there: "
                                                      f"`{known[cls.name]}` sets it to `not torch.cuda.is_available()`")
        if findings != out[i].findings:
            out[i] = replace(out[i], findings=findings)
    return out


# ----------------------------------------------------------------------------- (b) handled reads
def _raised(statement: ast.AST, name: str) -> str | None:
    """E of `if name is None: raise E(...)` (the test's whole body raising), else None."""
    if not (isinstance(statement, ast.If) and not statement.orelse and statement.body
            and isinstance(statement.test, ast.Compare) and len(statement.test.ops) == 1
            and isinstance(statement.test.ops[0], ast.Is) and isinstance(statement.test.left, ast.Name)
            and statement.test.left.id == name and isinstance(statement.test.comparators[0], ast.Constant)
            and statement.test.comparators[0].value is None and isinstance(statement.body[-1], ast.Raise)):
        return None
    exc = statement.body[-1].exc
    exc = exc.func if isinstance(exc, ast.Call) else exc
    return exc.id if isinstance(exc, ast.Name) and exc.id not in ("Exception", "BaseException") else None


def review_handled_reads(results: list, paths: dict) -> list:
    """Shape (b) of the module docstring over a run's results (a new list)."""
    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(
        _open(f) and f.code == "NPU911" and (f.source or "").endswith("CUDA_HOME") for f in r.findings)]
    if not candidates:
        return results
    from .modpaths import RunTexts

    text_of = RunTexts(results, paths)
    caught: dict[str, bool] = {}

    def is_caught(name: str) -> bool:
        if name not in caught:
            pattern = re.compile(rb"^[ \t]*except[ \t]*\(?[\w., \t]*\b" + re.escape(name.encode()) + rb"\b",
                                 re.MULTILINE)
            caught[name] = any(r.relpath.endswith(".py") and name.encode() in (text_of(j) or b"")
                               and pattern.search(text_of(j) or b"") for j, r in enumerate(results))
        return caught[name]

    out = list(results)
    for i in candidates:
        data = text_of(i) or b""
        if b" is None" not in data or b"raise " not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        blocks: dict = {}
        statements = list(astcache.walk_statements(tree, blocks))
        by_block: dict[int, list] = {}
        for statement in statements:
            by_block.setdefault(blocks.get(id(statement)), []).append(statement)
        findings = list(out[i].findings)
        for k, finding in enumerate(findings):
            if not (_open(finding) and finding.code == "NPU911" and (finding.source or "").endswith("CUDA_HOME")):
                continue
            read = next((s for s in statements if isinstance(s, ast.Assign) and s.lineno == finding.line
                         and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                         and (astcache.dotted(s.value) or "").endswith("CUDA_HOME")), None)
            if read is None:
                continue
            siblings = sorted(by_block.get(blocks.get(id(read)), []), key=lambda s: s.lineno)
            after = [s for s in siblings if s.lineno > read.lineno]
            name = _raised(after[0], read.targets[0].id) if after else None
            if name is None or not is_caught(name):
                continue
            findings[k] = _lower(finding, f"{HANDLED}: on an NPU host it is None and the function raises "
                                          f"`{name}` (line {after[0].lineno}), which the project catches")
        if findings != out[i].findings:
            out[i] = replace(out[i], findings=findings)
    return out


# ----------------------------------------------------------------------------- (c) same-file callers
def _methods(tree: ast.Module) -> list:
    """(class, method) of every method of the file's classes, outer classes first."""
    return [(cls, method) for cls in sorted((n for n in astcache.walk_statements(tree) if isinstance(n, ast.ClassDef)),
                                            key=lambda c: c.lineno)
            for method in cls.body if isinstance(method, _FUNCTIONS)]


def _method_of(methods: list, line: int):
    """(class, method) of the innermost method of a class holding `line`, or None."""
    found = None
    for cls, method in methods:
        if method.lineno <= line <= (method.end_lineno or method.lineno):
            found = (cls, method)
    return found


def review_same_file_callers(results: list, paths: dict) -> list:
    """Shape (c) of the module docstring over a run's results (a new list)."""
    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(
        _open(f) and f.code != "NPU911" for f in r.findings)]
    if not candidates:
        return results
    from .callersonly import CALLERS_ONLY
    from .modpaths import RunTexts
    from .testscopes import has_decidable_branches, untaken_branches

    text_of = RunTexts(results, paths)
    python = [j for j, r in enumerate(results) if r.relpath.endswith(".py")]
    out = list(results)
    for i in candidates:
        data = text_of(i) or b""
        # (a cheap pre-test: a reference in a branch the file's own conditions may decide)
        if b"if " not in data or b"self." not in data or not has_decidable_branches(data.decode("utf-8", "replace")):
            continue
        tree = None
        findings = list(out[i].findings)
        decided: dict[str, str | None] = {}
        index = methods = None
        for k, finding in enumerate(findings):
            if not (_open(finding) and finding.code != "NPU911"):
                continue
            tree = tree or astcache.parse(data)
            if tree is None:
                break
            methods = methods if methods is not None else _methods(tree)
            held = _method_of(methods, finding.line)
            if held is None or held[1].name.startswith("__") or held[1].decorator_list and not all(
                    isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod") for d in held[1].decorator_list):
                continue
            name = held[1].name
            if name not in decided:
                index = index if index is not None else _names(tree)
                decided[name] = _only_untaken_callers(index, data, name, held[1], results[i].relpath,
                                                      lambda: (text_of(j) for j in python if j != i),
                                                      untaken_branches)
            if decided[name] is not None:
                findings[k] = _lower(finding, f"{CALLERS_ONLY}: `{held[0].name}.{name}` is called only at "
                                              f"{decided[name]}, which an NPU host does not take")
        if findings != out[i].findings:
            out[i] = replace(out[i], findings=findings)
    return out


def _names(tree: ast.Module) -> dict[str, list]:
    """{name: the nodes naming it} (strings, attributes, names, definitions): one walk per file."""
    out: dict[str, list] = {}
    for node in astcache.walk(tree):
        key = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else \
            node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else \
            node.name if isinstance(node, (*_FUNCTIONS, ast.ClassDef)) else None
        if key is not None:
            out.setdefault(key, []).append(node)
    return out


def _only_untaken_callers(index: dict, data: bytes, name: str, method, relpath: str, others, untaken) -> str | None:
    """Where each reference of the method lies ("line N, in the branch of `...`"), all in blocks an
    NPU host does not run, no other file naming it; else None."""
    if data.count(name.encode()) < 2:
        return None  # (no reference beside its definition)
    refs = []
    for node in index.get(name, ()):
        if method.lineno <= getattr(node, "lineno", 0) <= (method.end_lineno or method.lineno):
            continue
        if isinstance(node, ast.Constant) and node.value == name:
            return None  # (named in a string: a lookup by name)
        if (isinstance(node, ast.Attribute) and node.attr == name) or (isinstance(node, ast.Name) and node.id == name):
            refs.append(node.lineno)
        elif isinstance(node, _FUNCTIONS + (ast.ClassDef,)) and node.name == name and node is not method:
            return None  # (another definition of the name)
    if not refs:
        return None
    blocks = untaken(data.decode("utf-8", "replace"), relpath, set(refs))
    shown = []
    for line in sorted(set(refs)):
        block = next((b for b in blocks if b[0] <= line <= b[1] and not b[3]), None)
        if block is None:
            return None
        why = block[2] if "`" in block[2] else f"`{block[2]}`"
        shown.append(f"line {line}, in the branch of {why}")
    word = re.compile(rb"\b" + re.escape(name.encode()) + rb"\b")
    if any(other and other != data and name.encode() in other and word.search(other) for other in others()):
        return None  # (another file names it: a caller or override there; a byte-identical copy mirrors this one)
    return ", ".join(shown)


def review(results: list, paths: dict) -> list:
    """The three reviews of the module docstring, in order (called from runplan.whole_run_passes)."""
    return review_same_file_callers(review_handled_reads(review_cpu_flags(results, paths), paths), paths)
