"""Backends and schemes the project's own argument validation rejects on an NPU host (issue #16,
round 15: AK#15, AK#22).

Two shapes of selection that raise off NVIDIA hardware, read from the project itself:

* **A backend name validated against a CUDA capability.** SGLang's server arguments raise
  unless the GPU is Blackwell when `trtllm_mla` is chosen:

      if self.attention_backend == "trtllm_mla" or self.decode_attention_backend == "trtllm_mla":
          if not is_blackwell_supported():
              raise ValueError(...)

  The predicate is false on an NPU host (testscopes.false_on_npu), so the name is never in
  force there: the factory registered for it (`@register_attention_backend("trtllm_mla")`, the
  decorator named for the validated attribute) never runs.
* **A scheme class built only where a capability check passes.** A compressed-tensors scheme
  declares `get_min_capability()` -> 100, and the selector builds it only under
  `if self._check_scheme_supported(C.get_min_capability(), error=False):` (or a name bound to
  that call), where the checker compares `torch.cuda.get_device_capability()` with `>=` against
  its argument: the shim answers (0, 0) on an NPU host, so the check fails and the scheme is
  never built (the `else` raises "Current platform does not support ...").

A class every construction of which in the project (a call of its name) lies in such code, or in
a span dispatch.gates already proves an NPU host never enters (a factory of a registry whose NPU
default the project forces), or in another such class, is code an NPU host never runs; so is a
module-level function of its file every mention of which lies in such classes (and which no other
file names). Any other use of the class's name (a subclass, a value passed on, a registry entry)
keeps everything; `isinstance`/`issubclass` tests and imports build nothing. The report-only
findings wholly inside are lowered to info with the validating line quoted (VALIDATED, a moot
phrase: a named skipped scope). Runner backends the validation allows on any hardware (SGLang's
`flashinfer_trtllm` MoE runner, auto-selected on SM100 only but accepted anywhere) stay reported.

A whole-run pass (runplan.whole_run_passes): only files with a non-moot report-only finding are
candidates; the project's files are read for cheap byte tests and parsed only where they hold a
validation, a capability scheme or a mention of a candidate class.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from . import astcache

VALIDATED = "in a backend the project's own validation rejects on an NPU host"

# (the shape validated_names reads, as bytes: a name comparison (`.attr == "name"`) at most three
# lines above the raising check that starts the `if` body; a longer condition keeps its findings)
_VALIDATION = re.compile(rb"\.\w+[ \t]*==[ \t]*[\"']\w+[\"'][^\n]*\n(?:[^\n]*\n){0,3}?"
                         rb"[ \t]*if not [\w.]+\([^\n]*\)[ \t]*:[ \t]*\n[ \t]*raise\b")
_NAME_EQ = re.compile(rb"\.\w+[ \t]*==[ \t]*[\"']\w+[\"']")
# (comment lines may stand between the `def` and its `return`: `# lovelace and up`)
_MIN_CAPABILITY = re.compile(rb"def get_min_capability\([^)]*\)[^:]*:[ \t]*\n(?:[ \t]*(?:#[^\n]*)?\n)*"
                             rb"[ \t]*return[ \t]+([1-9]\d*)\b")
_CLASS = re.compile(rb"^class[ \t]+(\w+)", re.MULTILINE)
_MAX_ROUNDS = 4
_TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")
_IN_TEST = "a test that does not run on an NPU host: "


def _compared_names(test: ast.AST) -> list[tuple[str, str]]:
    """(attribute, name) of `x.attr == "name"` (joined by `or`), or [] for any other test."""
    values = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]
    out = []
    for value in values:
        if not (isinstance(value, ast.Compare) and len(value.ops) == 1 and isinstance(value.ops[0], ast.Eq)
                and isinstance(value.left, ast.Attribute) and isinstance(value.comparators[0], ast.Constant)
                and isinstance(value.comparators[0].value, str)):
            return []
        out.append((value.left.attr, value.comparators[0].value))
    return out


def validated_names(relpath: str, tree: ast.Module) -> dict[tuple[str, str], str]:
    """{(attribute, name): why} of the names whose selection raises first thing on an NPU host:
    `if x.attr == "name" ...:` whose first statement is `if not <predicate false there>(): raise`."""
    from .testscopes import false_on_npu

    out: dict[tuple[str, str], str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.If) or not node.body:
            continue
        pairs = _compared_names(node.test)
        first = node.body[0]
        if not pairs or not (isinstance(first, ast.If) and not first.orelse and isinstance(first.test, ast.UnaryOp)
                             and isinstance(first.test.op, ast.Not) and isinstance(first.test.operand, ast.Call)
                             and isinstance(first.body[0], ast.Raise)):
            continue
        predicate = ast.unparse(first.test.operand)
        if not false_on_npu(predicate):
            continue
        why = f"`if not {predicate}: raise` ({relpath}:{first.lineno})"
        for pair in pairs:
            out.setdefault(pair, why)
    return out


def _checker_fails(tree: ast.Module, name: str) -> bool:
    """Whether the method `name` of the file compares the device capability with `>=` against its
    first argument (after self): false for the shim's (0, 0) against any positive minimum."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            params = [a.arg for a in node.args.args if a.arg not in ("self", "cls")]
            if not params or "get_device_capability" not in ast.unparse(node):
                return False
            return any(isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], ast.GtE)
                       and isinstance(n.comparators[0], ast.Name) and n.comparators[0].id == params[0]
                       for n in ast.walk(node))
    return False


def _own_query(tree: ast.Module, name: str) -> bool:
    """Whether the checker `name` asks the project's own `get_device_capability()` (a bare name,
    not torch's or a platform object's, whose answer on an NPU host is the project's: capnone25)."""
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name
               and any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "get_device_capability"
                       for n in ast.walk(node))
               for node in ast.walk(tree))


def _capability_call(node: ast.AST, schemes: dict[str, int], tree: ast.Module) -> str | None:
    """The scheme class whose minimum capability `self.check(C.get_min_capability(), ...)` tests
    with a checker that fails on an NPU host, or None."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute)):
        return None
    arg = node.args[0]
    if not (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "get_min_capability"
            and isinstance(arg.func.value, ast.Name) and arg.func.value.id in schemes):
        return None
    return arg.func.value.id if _checker_fails(tree, node.func.attr) else None


def capability_spans(relpath: str, tree: ast.Module, schemes: dict[str, int]) -> list[tuple[int, int, str]]:
    """(first, last, why) of the bodies of `if <capability check of C>:` (or of a name bound to
    it in the same function) that build a scheme C requiring a positive capability."""
    out = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        bound: dict[str, tuple[str, int]] = {}
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                scheme = _capability_call(node.value, schemes, tree)
                if scheme is not None:
                    bound[node.targets[0].id] = (scheme, node.lineno)
        for node in ast.walk(function):
            if not isinstance(node, ast.If) or not node.body:
                continue
            if isinstance(node.test, ast.Name) and node.test.id in bound:
                scheme, line = bound[node.test.id]
            else:
                scheme, line = _capability_call(node.test, schemes, tree), node.lineno
                if scheme is None:
                    continue
            checker = node.test.func.attr if isinstance(node.test, ast.Call) else None
            if checker is None:
                checker = next((n.value.func.attr for n in ast.walk(function) if isinstance(n, ast.Assign)
                                and n.lineno == line and isinstance(n.value, ast.Call)
                                and isinstance(n.value.func, ast.Attribute)), None)
            device = ("which the project's `get_device_capability()` does not give on an NPU host (no NVIDIA "
                      "capability there)" if checker and _own_query(tree, checker) else "(0, 0) on an NPU host")
            why = (f"a check of its minimum capability {schemes[scheme]} ({relpath}:{line}) against the "
                   f"device's, {device}")
            out.append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno, why))
    return out


def _span(node: ast.AST) -> tuple[int, int]:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    return first, node.end_lineno or node.lineno


def _factory_spans(tree: ast.Module, names: dict[tuple[str, str], str]) -> list[tuple[int, int, str]]:
    """The functions registered as `@register_<attr>("name")` for a validated (attr, name)."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for decorator in node.decorator_list:
            if not (isinstance(decorator, ast.Call) and len(decorator.args) == 1
                    and isinstance(decorator.args[0], ast.Constant) and isinstance(decorator.args[0].value, str)):
                continue
            func = decorator.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if not name.startswith("register_"):
                continue
            why = names.get((name[len("register_"):], decorator.args[0].value))
            if why is not None:
                first, last = _span(node)
                out.append((first, last, f'`@{name}("{decorator.args[0].value}")`, rejected by {why}'))
    return out


def _name_uses(tree: ast.Module) -> dict[str, list[tuple[int, str]]]:
    """{name: [(line, kind)]} of the module's `Name` nodes, kind "call" for `name(...)`, "none" for
    what builds nothing (an `isinstance`/`issubclass` test, `C.get_min_capability()`), else
    "other" (a subclass, a value passed on, an annotation)."""
    parents = astcache.parents(tree)
    out: dict[str, list[tuple[int, str]]] = {}
    for node in astcache.walk(tree):
        if not isinstance(node, ast.Name):
            continue
        parent = parents.get(id(node))
        holder = parents.get(id(parent)) if isinstance(parent, ast.Tuple) else parent
        if isinstance(parent, ast.Call) and parent.func is node:
            kind = "call"
        elif (isinstance(holder, ast.Call) and isinstance(holder.func, ast.Name)
              and holder.func.id in ("isinstance", "issubclass") and holder.func is not node) \
                or (isinstance(parent, ast.Attribute) and parent.attr == "get_min_capability"):
            kind = "none"
        else:
            kind = "other"
        out.setdefault(node.id, []).append((node.lineno, kind))
    return out


def review(results: list, paths: dict) -> list:
    """The results, with the report-only findings inside backends and schemes the project's own
    validation rejects on an NPU host (this module's docstring) lowered to info."""
    from .modpaths import RunTexts
    from .moot import is_moot

    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    candidates = [i for i in python if any(not f.fixable and f.cell is None and f.severity != "info"
                                           and not is_moot(f) for f in results[i].findings)]
    if not candidates:
        return results
    texts = RunTexts(results, paths)
    trees: dict[int, ast.Module | None] = {}

    def tree(i: int):
        if i not in trees:
            trees[i] = astcache.parse(texts(i) or b"")
        return trees[i]

    # the classes the candidate files define: nothing to do without one
    defined = {i: [m.group(1).decode() for m in _CLASS.finditer(texts(i) or b"")] for i in candidates}
    if not any(defined.values()):
        return results
    names: dict[tuple[str, str], str] = {}
    schemes: dict[str, int] = {}
    for i in python:
        data = texts(i) or b""
        if b"raise" in data and _VALIDATION.search(data) and _NAME_EQ.search(data) and tree(i) is not None:
            names.update(validated_names(results[i].relpath, tree(i)))
        if b"get_min_capability" in data:
            for match in _MIN_CAPABILITY.finditer(data):
                before = data[:match.start()]
                owner = list(_CLASS.finditer(before))
                if owner:
                    schemes[owner[-1].group(1).decode()] = int(match.group(1))
    spans: dict[int, list[tuple[int, int, str]]] = {}
    registered = re.compile(rb"@[\w.]*register_(?:" + b"|".join(sorted({re.escape(a.encode()) for a, _n in names}))
                            + rb")\(\s*[\"'](?:" + b"|".join(sorted({re.escape(n.encode()) for _a, n in names}))
                            + rb")[\"']") if names else None
    for i in python:
        data = texts(i) or b""
        if registered is not None and b"register_" in data and registered.search(data) and tree(i) is not None:
            spans.setdefault(i, []).extend(_factory_spans(tree(i), names))
        if schemes and b".get_min_capability()" in data and tree(i) is not None:
            spans.setdefault(i, []).extend(capability_spans(results[i].relpath, tree(i), schemes))
    if not any(spans.values()):
        return results
    from .dispatch import gates

    for i, more in gates(results, python, texts).items():  # (registries whose NPU default the project forces)
        spans.setdefault(i, []).extend((a, b, f"a registry entry an NPU host never selects: {why}") for a, b, why in more)
    # (a first look before any parse: a class some span builds, directly or through another class
    # of its file, is named in a file holding a span)
    span_texts = [texts(j) or b"" for j, found in spans.items() if found]
    candidates = [i for i in candidates if any(name.encode() in data for name in defined[i] for data in span_texts)]
    return _lower(results, candidates, python, texts, tree, spans)


def _within(spans, line: int):
    return next((s for s in spans if s[0] <= line <= s[1]), None)


def _top_classes(module: ast.Module) -> list[ast.ClassDef]:
    return [n for n in module.body if isinstance(n, ast.ClassDef)]


def _lower(results, candidates, python, texts, tree, spans) -> list:
    """Lower the findings of the classes (and their files' helpers) built only inside `spans`."""
    from .moot import is_moot

    def open_finding(f) -> bool:
        return not f.fixable and f.cell is None and f.severity != "info" and not is_moot(f)

    tests: dict[int, list[tuple[int, int, str]]] = {}

    def test_spans(j: int) -> list[tuple[int, int, str]]:
        """The tests of a test file skipped off CUDA (testscopes): a construction there builds
        nothing on an NPU host."""
        if j not in tests:
            tests[j] = []
            if _TEST_FILE.search(results[j].relpath):
                from .testscopes import cuda_only_test_scopes

                text = (texts(j) or b"").decode("utf-8", "replace")
                tests[j] = [(a, b, f"{_IN_TEST}{why}") for a, b, why in cuda_only_test_scopes(text)]
        return tests[j]

    uses: dict[int, dict] = {}

    def uses_of(j: int) -> dict:
        if j not in uses:
            uses[j] = _name_uses(tree(j)) if tree(j) is not None else {}
        return uses[j]

    verdicts: dict[tuple[int, str], tuple[int, int, str] | None] = {}

    def never_built(i: int, node: ast.ClassDef, depth: int = 0):
        """(first, last, why) when every construction of the class lies in code an NPU host
        never runs (a span, or another such class of a file of the run), else None."""
        key = (i, node.name)
        if key in verdicts:
            return verdicts[key]
        verdicts[key] = None  # (while deciding: a cycle builds it)
        name = node.name
        encoded = name.encode()
        word = re.compile(rb"\b" + encoded + rb"\b")
        reasons = []
        for j in python:
            data = texts(j) or b""
            if encoded not in data or not word.search(data):
                continue
            if tree(j) is None:
                return None
            for line, kind in uses_of(j).get(name, ()):
                if kind == "none":
                    continue
                if kind == "other":
                    return None
                span = _within([*spans.get(j, ()), *test_spans(j)], line)
                if span is None and depth < _MAX_ROUNDS:
                    outer = next((c for c in _top_classes(tree(j))
                                  if c.name != name and c.lineno <= line <= (c.end_lineno or c.lineno)), None)
                    span = never_built(j, outer, depth + 1) if outer is not None else None
                if span is None:
                    return None
                reasons.append(span[2])
        reasons = [r for r in reasons if not r.startswith(_IN_TEST)]
        if not reasons:
            return None  # (built nowhere, or only in tests: nothing the validation rejects)
        first, last = _span(node)
        verdicts[key] = (first, last, f"`{name}`, built only under {reasons[0]}")
        return verdicts[key]

    out = list(results)
    for i in candidates:
        if tree(i) is None:
            continue
        lines = [f.line for f in results[i].findings if open_finding(f)]
        classes = _top_classes(tree(i))
        # the classes holding a finding, and those naming a module-level function holding one
        functions = {n.name for n in tree(i).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and any(n.lineno <= line <= (n.end_lineno or n.lineno) for line in lines)}
        wanted = [c for c in classes if any(c.lineno <= line <= (c.end_lineno or c.lineno) for line in lines)
                  or any(isinstance(n, ast.Name) and n.id in functions for n in ast.walk(c))]
        found = [v for v in (never_built(i, c) for c in wanted) if v is not None]
        if not found:
            continue
        found += _helpers_of(tree(i), found, name_free=lambda n, i=i: not any(
            j != i and n.encode() in (texts(j) or b"") and re.search(rb"\b" + n.encode() + rb"\b", texts(j) or b"")
            for j in python))
        changed, findings = False, []
        for finding in results[i].findings:
            places = [finding.line, *(line for line, _column, _source in finding.also or ())]
            span = _within(found, finding.line)
            if open_finding(finding) and span is not None and all(_within(found, n) for n in places):
                finding = dataclasses.replace(finding, severity="info",
                                              message=f"{finding.message} ({VALIDATED}: {span[2]})")
                changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(results[i], findings=findings)
    return out


def _helpers_of(module: ast.Module, classes, name_free) -> list[tuple[int, int, str]]:
    """The module-level functions every mention of whose name in the file lies in `classes`
    (no other file naming it)."""
    functions = {n.name: n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if not functions:
        return []
    mentions: dict[str, list[int]] = {}
    for node in ast.walk(module):
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if name in functions:
            mentions.setdefault(name, []).append(node.lineno)
    out = []
    for name, lines in mentions.items():
        holders = [_within(classes, line) for line in lines]
        if lines and None not in holders and name_free(name):
            first, last = _span(functions[name])
            out.append((first, last, f"`{name}`, called only at line {lines[0]}, in {holders[0][2]}"))
    return out
