"""Cross-file dispatch an NPU host never takes: the import sites of backends the project itself
never selects there (issue #16, round 7).

`wholeprogram._never_imported` lowers the findings of a module every import site of which lies in
a branch an NPU host never takes. The kinds of span it cannot see from one `if` line are found
here, from the whole project, and handed to it as more such spans (first line, last line, why):

* **A backend registry with an NPU default the project forces.** SGLang registers each attention
  backend with `@register_attention_backend("fa3")` on a factory that imports the backend's module,
  and on an NPU host `set_default_server_args` (in `hardware_backend/npu/`) assigns
  `args.attention_backend = "ascend"` unconditionally. The factories of the other names never run
  there, and neither do the methods a dict keyed by the same names (`{"fa3": self._create_fa3_...,
  "ascend": self._create_ascend_...}`) reaches only under another name. The NPU default counts
  only where it is certain: an unconditional assignment of a string literal, naming the NPU
  (`npu`, `ascend`) and registered under the same decorator, to the attribute the decorator is
  named for (`register_attention_backend` -> `.attention_backend`), at the top level of a function
  in an NPU module (a path naming the NPU) or directly under an `if` true on an NPU host.
  The same forced value also decides a check of the field that raises on it (`elif
  self.attention_backend not in CHOICES: raise`): the statements after it are such spans too
  (npudefaults24.rejection_spans).
* **A branch on the project's own NPU flag.** `if not _is_npu:` (with `_is_npu = is_npu()` in the
  file, or imported by name where every assignment of the name in the project is `= is_npu()`) or
  `if not is_npu():` is never entered on an NPU host, nor are the `elif`s and `else` after a
  branch true there (`if _is_npu: ... else: <the CUDA path>`).
* **An enum value produced only off NPU.** SGLang's `_dispatch_mla_subtype` returns
  `AttnForwardMethod.MLA_FUSED_ROPE` only under `if _is_hip:`; where every place of the project
  that produces the member (anything but a comparison with it) lies in a block false on an NPU
  host, the branches `if x == E.MEMBER:` are never taken there, nor the methods called only from
  them (named nowhere else in the project). The member's name in a string, or the enum built
  from a value or a name (`E(value)`, `E[name]`) or iterated, keeps everything. (An `IntEnum`
  compared with a bare integer elsewhere is not seen: the audits found no such use.)

wholeprogram still requires every import site of a module to be such a span (and a module named
in a string stays); the findings inside the spans themselves are lowered too, as in a branch an
NPU host does not take (`lower_within`). They keep their place, at info, with the reason
(invariant 2: nothing silently missed); moot.py names them as skipped scopes.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

_NPU_NAME = re.compile(r"(^|_)(npu|ascend)($|_)", re.IGNORECASE)
_NPU_WORD = re.compile(r"npu|ascend", re.IGNORECASE)
_REGISTER = re.compile(rb"@[\w.]*register\w*\(\s*[\"']\w+[\"']\s*\)")
_FLAG = re.compile(r"^_?(is|use|on)_(npu|ascend)$")
# an `if`/`elif` line that reads an NPU flag (`if not _is_npu:`, `if is_npu():`)
_FLAG_TEXT = re.compile(rb"^[ \t]*(?:el)?if[ \t][^\n]*(?:\b_?(?:is|use|on)_(?:npu|ascend)\b|\bis_npu\(\))",
                        re.MULTILINE)
_ELSE_LINE = re.compile(rb"^([ \t]*)(elif[ \t]+.+?|else[ \t]*):[ \t]*(?:#[^\n]*)?$")
# an NPU backend name assigned to an attribute (`args.attention_backend = "ascend"`)
_NPU_DEFAULT = re.compile(rb"\.(\w+)[ \t]*=[ \t]*[\"'][^\"'\n]*(?:npu|ascend)", re.IGNORECASE)
_ASSIGNED_FLAG = re.compile(r"^\s*(\w+)\s*=\s*[\w.]*is_npu\(\)\s*$", re.MULTILINE)


def _parse(data: bytes) -> Optional[ast.Module]:
    from . import astcache

    return astcache.parse(data)


def _span(node: ast.AST) -> tuple[int, int]:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    return first, node.end_lineno or node.lineno


def _registrations(tree: ast.Module) -> list[tuple[str, str, ast.AST]]:
    """(decorator name, registered name, function) of `@register_x("name")` functions."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for decorator in node.decorator_list:
            if (isinstance(decorator, ast.Call) and len(decorator.args) == 1 and not decorator.keywords
                    and isinstance(decorator.args[0], ast.Constant) and isinstance(decorator.args[0].value, str)):
                func = decorator.func
                name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
                if name.startswith("register_") and len(name) > len("register_"):
                    out.append((name, decorator.args[0].value, node))
    return out


def _npu_true(test: ast.AST, flags: set[str]) -> Optional[bool]:
    """The value of a condition on an NPU host where it reads the project's NPU flag only
    (`_is_npu`, `is_npu()`, `not _is_npu`, `x and not _is_npu`): True, False or None (unknown)."""
    if isinstance(test, ast.Name) and test.id in flags:
        return True
    if isinstance(test, ast.Call) and not test.args and not test.keywords:
        func = test.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "is_npu":
            return True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _npu_true(test.operand, flags)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        values = [_npu_true(v, flags) for v in test.values]
        if isinstance(test.op, ast.And):
            return False if False in values else (True if all(v is True for v in values) else None)
        return True if True in values else (False if all(v is False for v in values) else None)
    return None


def _flags(text: str) -> set[str]:
    """The module-level names bound to `is_npu()` (`_is_npu = is_npu()`), each named for the NPU."""
    return {m.group(1) for m in _ASSIGNED_FLAG.finditer(text) if _FLAG.match(m.group(1))}


_IF_LINE = re.compile(rb"^([ \t]*)(?:el)?if[ \t]+(.+?):[ \t]*(?:#[^\n]*)?$", re.MULTILINE)


def _body_end(lines: list[bytes], header: int, indent: int) -> int:
    """The last line (1-based) of the block whose header is line `header` (1-based), by indentation."""
    last = header
    for k in range(header, len(lines)):  # (lines[header] is the line after the header)
        stripped = lines[k].strip()
        if not stripped or stripped.startswith(b"#"):
            continue
        if len(lines[k]) - len(lines[k].lstrip(b" \t")) <= indent:
            break
        last = k + 1
    return last


_ANY_FLAG_ASSIGN = re.compile(rb"^[ \t]*(_?(?:is|use|on)_(?:npu|ascend))[ \t]*=(?!=)[ \t]*([^\n]*)$", re.MULTILINE)
_FROM_IMPORT = re.compile(rb"^[ \t]*from[ \t]+[\w.]+[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.MULTILINE)


def _shared_flags(python: list[int], texts) -> set[str]:
    """The NPU flag names every assignment of which, in the whole project, is `= is_npu()`
    (`_is_npu = is_npu()` in sglang's utils, imported by its models)."""
    good: set[str] = set()
    bad: set[str] = set()
    for i in python:
        data = texts.get(i) or b""
        if not any(word in data for word in (b"_npu =", b"_npu=", b"_ascend =", b"_ascend=")):
            continue  # (a cheap look first: the pattern below scans every line)
        for match in _ANY_FLAG_ASSIGN.finditer(data):
            name = match.group(1).decode()
            if re.fullmatch(rb"[\w.]*is_npu\(\)[ \t]*(?:#[^\n]*)?", match.group(2).strip()):
                good.add(name)
            else:
                bad.add(name)
    return good - bad


def _imported(data: bytes, shared: set[str]) -> set[str]:
    """The shared NPU flags the file imports by name (`from .utils import _is_hip, _is_npu`) and
    does not bind otherwise."""
    if not shared:
        return set()
    out = set()
    for match in _FROM_IMPORT.finditer(data):
        names = {n.strip().split(" as ")[0].strip() for n in match.group(1).decode("utf-8", "replace").strip("()").split(",")}
        out |= {n for n in names if n in shared and " as " not in match.group(1).decode("utf-8", "replace")}
    return out


def _flag_branches(data: bytes, flags: set[str]) -> list[tuple[int, int, str]]:
    """(first, last, why) of the bodies of the one-line `if`/`elif`s false on an NPU host by its
    NPU flag (`if not _is_npu:`), and of the `elif`s and `else` after one true there (`if
    _is_npu: ... else: ...`), their extent by indentation (as wholeprogram._false_blocks: no parse
    of the file)."""
    out, lines, line, at = [], None, 1, 0
    for match in _IF_LINE.finditer(data):
        line += data.count(b"\n", at, match.start())
        at = match.start()
        if not _FLAG_TEXT.match(data, match.start()):
            continue
        text = match.group(2).decode("utf-8", "replace")
        try:
            test = ast.parse(text.strip(), mode="eval").body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        value = _npu_true(test, flags)
        if value is None:
            continue
        if lines is None:
            lines = data.splitlines()
        indent = len(match.group(1))
        last = _body_end(lines, line, indent)
        shown = " ".join(text.split())[:70]
        if value is False:
            if last > line:
                out.append((line + 1, last, f"`{shown}`"))
            continue
        # true on an NPU host: the rest of the chain is never entered there
        header = last + 1
        while header <= len(lines):
            current = lines[header - 1]
            if not current.strip() or current.strip().startswith(b"#"):
                header += 1
                continue
            other = _ELSE_LINE.match(current)
            if other is None or len(other.group(1)) != indent:
                break
            end = _body_end(lines, header, indent)
            if end > header:
                out.append((header + 1, end, f"not `{shown}`"))
            header = end + 1
    return out


def _forced_defaults(relpath: str, tree: ast.Module, registered: dict[str, set[str]],
                     flags: set[str]) -> list[tuple[str, str, int]]:
    """(decorator, NPU name, line) of the unconditional assignments `x.<kind> = "<npu name>"` of a
    module: at the top of a function of an NPU module, or directly under an `if` true on NPU."""
    npu_module = any(_NPU_NAME.search(part) for part in relpath[:-3].split("/"))
    bodies: list[list[ast.stmt]] = []
    for node in ast.walk(tree):
        if npu_module and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            bodies.append(node.body)
        elif isinstance(node, ast.If) and _npu_true(node.test, flags) is True:
            bodies.append(node.body)
    out = []
    for body in bodies:
        for stmt in body:
            if not (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str) and _NPU_WORD.search(stmt.value.value)):
                continue
            for target in stmt.targets:
                if not isinstance(target, ast.Attribute):
                    continue
                for decorator, names in registered.items():
                    if target.attr == decorator[len("register_"):] and stmt.value.value in names:
                        out.append((decorator, stmt.value.value, stmt.lineno))
    return out


def _keyed_methods(tree: ast.Module, names: set[str], npu: set[str]) -> list[tuple[int, int, str]]:
    """(first, last, key) of the functions a dict keyed by registered names reaches only under
    names other than the NPU's (`"fa3": self._create_fa3_decode_backend`): every mention of the
    function's name in the file is such a value."""
    under: dict[str, set[str]] = {}
    values: set[int] = set()  # id() of the value nodes read as keyed references
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict) or len(node.keys) < 2:
            continue
        keys = [k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None for k in node.keys]
        if sum(1 for k in keys if k in names) < 2:
            continue
        for key, value in zip(keys, node.values):
            ref = value.attr if isinstance(value, ast.Attribute) else value.id if isinstance(value, ast.Name) else None
            if ref is None:
                continue
            values.add(id(value))
            under.setdefault(ref, set()).add(key if key in names and key not in npu else "")
    if not under:
        return []
    mentions: dict[str, int] = {}
    for node in ast.walk(tree):
        ref = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if ref in under and id(node) not in values:
            mentions[ref] = mentions.get(ref, 0) + 1
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in under \
                and "" not in under[node.name] and not mentions.get(node.name):
            first, last = _span(node)
            out.append((first, last, ", ".join(f'"{k}"' for k in sorted(under[node.name]))))
    return out


def gates(results, python: list[int], texts: dict[int, Optional[bytes]],
          facts_of=None) -> dict[int, list[tuple[int, int, str]]]:
    """{file index: [(first line, last line, why)]}: spans of the run's Python files an NPU host
    never enters (see the module docstring); `why` is ready to quote. `facts_of(i)["blocks"]`: the
    file's `if` blocks false on an NPU host (wholeprogram.file_facts), for the enum dispatch."""
    out: dict[int, list[tuple[int, int, str]]] = {}
    trees: dict[int, Optional[ast.Module]] = {}

    def tree(i: int) -> Optional[ast.Module]:
        if i not in trees:
            trees[i] = _parse(texts.get(i) or b"")
        return trees[i]

    flags_of: dict[int, set[str]] = {}
    # (one look at every file for an NPU word: the flags' passes read only those files)
    npu_files = [i for i in python if b"_npu" in (texts.get(i) or b"") or b"_ascend" in (texts.get(i) or b"")]
    readers = [i for i in npu_files if _FLAG_TEXT.search(texts.get(i) or b"")]
    shared = _shared_flags(npu_files, texts)
    for i in readers:
        data = texts.get(i) or b""
        flags_of[i] = _flags(data.decode("utf-8", "replace")) | _imported(data, shared)
        spans = _flag_branches(data, flags_of[i])
        if spans:
            out.setdefault(i, []).extend(spans)

    # registries: @register_x("name") functions, by decorator
    registered: dict[str, set[str]] = {}
    factories: list[tuple[int, str, str, ast.AST]] = []
    for i in python:
        data = texts.get(i) or b""
        if b"@" not in data or not _REGISTER.search(data) or tree(i) is None:
            continue
        for decorator, name, node in _registrations(tree(i)):
            registered.setdefault(decorator, set()).add(name)
            factories.append((i, decorator, name, node))
    if facts_of is not None:
        for i, spans in _enum_dispatch(results, python, texts, tree, facts_of, out).items():
            out.setdefault(i, []).extend(spans)
    registered = {d: names for d, names in registered.items()
                  if len(names) >= 2 and any(_NPU_WORD.search(n) for n in names)}
    if not registered:
        return out
    forced: dict[str, tuple[str, str]] = {}  # decorator -> (NPU name, "path:line")
    kinds = {d[len("register_"):].encode() for d in registered}
    for i in python:
        data = texts.get(i) or b""
        if not any(kind in data for kind in kinds) or not any(
                m.group(1) in kinds for m in _NPU_DEFAULT.finditer(data)) or tree(i) is None:
            continue
        flags = flags_of[i] if i in flags_of else _flags(data.decode("utf-8", "replace"))
        for decorator, name, line in _forced_defaults(results[i].relpath, tree(i), registered, flags):
            forced.setdefault(decorator, (name, f"{results[i].relpath}:{line}"))
    if not forced:
        return out
    _rejections(results, python, texts, tree, forced, out)  # (checks raising on the forced value: npudefaults24.py)
    for i, decorator, name, node in factories:
        if decorator in forced and name != forced[decorator][0]:
            npu_name, where = forced[decorator]
            first, last = _span(node)
            out.setdefault(i, []).append(
                (first, last, f'`@{decorator}("{name}")`, while an NPU host selects "{npu_name}" ({where})'))
    # the dicts keyed by the same names (SGLang's draft backends)
    for decorator, (npu_name, where) in forced.items():
        names = registered[decorator]
        wanted = [n.encode() for n in names if n != npu_name]
        for i in python:
            data = texts.get(i) or b""
            if f'"{npu_name}"'.encode() not in data or sum(1 for w in wanted if b'"' + w + b'"' in data) < 2:
                continue
            if tree(i) is None:
                continue
            for first, last, keys in _keyed_methods(tree(i), names, {npu_name}):
                out.setdefault(i, []).append(
                    (first, last, f"the {keys} entry of a dict keyed by `@{decorator}` names, while an NPU "
                                  f'host selects "{npu_name}" ({where})'))
    return out


def _rejections(results, python, texts, tree, forced: dict[str, tuple[str, str]], out: dict) -> None:
    """npudefaults24.rejection_spans over the files that hand an object to an NPU defaults
    function, with every field that function forces, into `out`."""
    from .npudefaults24 import defaults_function, rejection_spans

    fields: dict[str, tuple[str, str, str]] = {}
    by_path = {results[i].relpath: i for i in python}
    for _npu_name, where in forced.values():
        path, _, line = where.rpartition(":")
        home = by_path.get(path)
        found = defaults_function(tree(home), int(line)) if home is not None and tree(home) is not None else None
        if found is not None:
            name, values = found
            for field, (value, at) in values.items():
                fields.setdefault(field, (value, f"{path}:{at}", name))
    if not fields:
        return
    calls = {name.encode() + b"(self" for _value, _where, name in fields.values()}
    for i in python:
        data = texts.get(i) or b""
        if not any(call in data for call in calls) or b"raise" not in data or tree(i) is None:
            continue
        spans = rejection_spans(tree(i), fields)
        if spans:
            out.setdefault(i, []).extend(spans)


# ------------------------------------------------------------------ enum values produced only off NPU

_RETURN_MEMBER = re.compile(rb"^[ \t]*return[ \t]+(?:[\w.]*\.)?([A-Z]\w*)\.([A-Z][A-Z0-9_]*)[ \t]*(?:#[^\n]*)?$", re.MULTILINE)
_MAX_ROUNDS = 3


def _line_of(data: bytes, at: int) -> int:
    return data.count(b"\n", 0, at) + 1


def _consumed(node: ast.AST, parents: dict) -> bool:
    """An `Enum.MEMBER` read only to compare with (`x == E.M`, `x in (E.M, E.N)`)."""
    parent = parents.get(id(node))
    if isinstance(parent, (ast.Tuple, ast.List, ast.Set)):
        parent = parents.get(id(parent))
        return isinstance(parent, ast.Compare) and all(isinstance(op, (ast.In, ast.NotIn)) for op in parent.ops)
    return isinstance(parent, ast.Compare)


def _enum_dispatch(results, python, texts, tree, facts_of, flag_spans) -> dict[int, list[tuple[int, int, str]]]:
    """SGLang's `_dispatch_mla_subtype` returns `AttnForwardMethod.MLA_FUSED_ROPE` only under `if
    _is_hip:`: where every place of the project that produces an enum member (anything but a
    comparison with it) lies in a block false on an NPU host, the branches `if x == E.MEMBER:` are
    never taken there, nor the methods called only from them (a method named nowhere else in the
    project). The member's name in a string, or the enum built from a value or a name
    (`E(value)`, `E[name]`) or iterated, keeps everything."""
    def false_spans(i: int) -> list[tuple[int, int, str]]:
        return [(a, b, f"`{' '.join(c.split())[:70]}`") for a, b, c in facts_of(i)["blocks"] if c != "TYPE_CHECKING"] \
            + list(flag_spans.get(i, ()))

    candidates: dict[tuple[str, str], tuple[int, int, str]] = {}  # (enum, member) -> (file, line, why)
    for i in python:
        data = texts.get(i) or b""
        if b"return" not in data:
            continue
        spans = false_spans(i)
        if not spans:
            continue
        for match in _RETURN_MEMBER.finditer(data):
            line = _line_of(data, match.start())
            span = next((sp for sp in spans if sp[0] <= line <= sp[1]), None)
            if span is not None:
                key = (match.group(1).decode(), match.group(2).decode())
                candidates.setdefault(key, (i, line, span[2]))
    out: dict[int, list[tuple[int, int, str]]] = {}
    for (enum, member), (home, home_line, condition) in sorted(candidates.items()):
        dotted = f"{enum}.{member}".encode()
        holders = [i for i in python if dotted in (texts.get(i) or b"")]
        quoted = re.compile(rb"[\"']" + member.encode() + rb"[\"']")
        built = re.compile(rb"(?<!class )\b" + re.escape(enum).encode() + rb"\s*[\[(]|\bin\s+" + re.escape(enum).encode() + rb"\s*:")
        if any(member.encode() in (texts.get(i) or b"") and quoted.search(texts.get(i) or b"") for i in python) or any(
                enum.encode() in (texts.get(i) or b"") and built.search(texts.get(i) or b"") for i in python):
            continue
        if not any(re.search(rb"(?:==|\bis)[ \t]*" + re.escape(dotted) + rb"\b", texts.get(i) or b"") for i in holders):
            continue  # (no branch on it)
        if not all(_produced_only_in(texts.get(i) or b"", dotted, false_spans(i)) for i in holders):
            continue  # (a first look at the text, before any parse)
        branches: dict[int, list[tuple[int, int, str]]] = {}
        produced_elsewhere = False
        for i in holders:
            module = tree(i)
            if module is None:
                produced_elsewhere = True
                break
            parents = {id(child): node for node in ast.walk(module) for child in ast.iter_child_nodes(node)}
            spans = false_spans(i)
            for node in ast.walk(module):
                if not (isinstance(node, ast.Attribute) and node.attr == member and astcache_dotted(node.value).rpartition(".")[2] == enum):
                    continue
                if _consumed(node, parents):
                    compare = parents[id(node)]
                    holder = parents.get(id(compare))
                    if (isinstance(holder, ast.If) and holder.test is compare and len(compare.ops) == 1
                            and isinstance(compare.ops[0], (ast.Eq, ast.Is)) and compare.comparators[0] is node):
                        first, last = holder.body[0].lineno, holder.body[-1].end_lineno or holder.body[-1].lineno
                        test = " ".join(ast.unparse(compare).split())[:70]
                        branches.setdefault(i, []).append(
                            (first, last, f"`{test}`, a value produced only under {condition} "
                                          f"({results[home].relpath}:{home_line})"))
                    continue
                if not any(a <= node.lineno <= b for a, b, _why in spans):
                    produced_elsewhere = True
                    break
            if produced_elsewhere:
                break
        if produced_elsewhere or not branches:
            continue
        for i, spans in branches.items():
            out.setdefault(i, []).extend(spans)
            out[i].extend(_called_only_from(tree(i), spans, texts, i, python))
    return out


def _produced_only_in(data: bytes, dotted: bytes, spans: list) -> bool:
    """Every `E.M` of the text that follows no comparison (`==`, `!=`, `is`, `in (`, `, `) lies
    in one of `spans` (a first look: the parse decides after)."""
    for match in re.finditer(rb"(?<![\w.])" + re.escape(dotted) + rb"\b", data):
        before = data[max(0, match.start() - 12):match.start()].rstrip()
        if before.endswith((b"==", b"!=", b" is", b" not", b" in", b",", b"(")):
            continue
        line = _line_of(data, match.start())
        if not any(a <= line <= b for a, b, _why in spans):
            return False
    return True


def astcache_dotted(node: ast.AST) -> str:
    from . import astcache

    return astcache.dotted(node)


def _called_only_from(module: ast.Module, spans: list[tuple[int, int, str]], texts, home: int,
                      python: list[int]) -> list[tuple[int, int, str]]:
    """The functions of `module` every mention of whose name (in the module; the project's other
    files name it nowhere) lies in one of `spans`, or in such a function: their spans, with why."""
    functions: dict[str, ast.AST] = {}
    defined: dict[str, int] = {}
    for node in ast.walk(module):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name] = node
            defined[node.name] = defined.get(node.name, 0) + 1
    mentions: dict[str, list[int]] = {}
    for node in ast.walk(module):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name in functions:
            mentions.setdefault(name, []).append(node.lineno)
    found: list[tuple[int, int, str]] = []
    done: set[str] = set()
    spans = list(spans)
    for _round in range(_MAX_ROUNDS):
        grew = False
        for name, lines in mentions.items():
            node = functions[name]
            if name in done:
                continue
            holders = [next((sp for sp in spans if sp[0] <= line <= sp[1]), None) for line in lines]
            if not lines or None in holders:
                continue
            word = re.compile(rb"\b" + re.escape(name).encode() + rb"\b")
            if defined[name] != 1 or any(name.encode() in (texts.get(j) or b"") and word.search(texts.get(j) or b"")
                                         for j in python if j != home):
                continue
            first, last = _span(node)
            span = (first, last, f"`{name}`, called only at line {lines[0]} under {holders[0][2]}")
            found.append(span)
            spans.append(span)
            done.add(name)
            grew = True
        if not grew:
            break
    return found


def lower_within(result, spans: list[tuple[int, int, str]], lower):
    """`result` with its report-only findings inside `spans` lowered by `lower(result, why)` (every
    place of a merged finding inside one span), as in a branch an NPU host does not take."""
    def why(finding):
        lines = [finding.line, *(line for line, _column, _source in finding.also)]
        if not all(any(first <= n <= last for first, last, _why in spans) for n in lines):
            return None
        reason = next(why for first, last, why in spans if first <= finding.line <= last)
        return f"in a branch an NPU host does not take: {reason}"

    return lower(result, why)
