"""Tests, benchmarks and tools whose subject is CUDA-only (issue #16, precision wave 21, round-21
audits BH#2, BG#6, BF#12). Porting what is reported there achieves nothing on an NPU host: the test
never runs there, the value never reaches a device, the script is NVIDIA build tooling.

* **A capability's major number compared** (`known_value`, for testscopes' truth of a condition):
  `torch.cuda.get_device_capability()[0] < 9` is true on an NPU host, `>= 9` false: the migration
  rewrites the query to the shim's, which answers (0, 0) there (rules/scopes.toml [npugates]
  `zero_capability_calls`, the same table npugates.py reads for `major, _ = ...`). So an autouse
  module fixture `if torch.cuda.get_device_capability()[0] < 9: pytest.skip(...)` skips every test of
  the module there (reach.py's skipping fixture), and the CUDA graphs it captures never run. A
  platform object's query (`current_platform.get_device_capability()`, None there) is not one: its
  `[0]` raises, which is no skip; a minor number (`[1]`) and a bound of 0 decide nothing.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from . import astcache, catalogue
from .findings import Finding

_dotted = astcache.dotted


def _zero_capability_calls() -> frozenset:
    return frozenset(catalogue.read_table("scopes.toml").get("npugates", {}).get("zero_capability_calls", ()))


def _major_of_query(node: ast.AST) -> bool:
    """`torch.cuda.get_device_capability(...)[0]`: the shim's major number, 0 on an NPU host."""
    return (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
            and node.slice.value == 0 and not isinstance(node.slice.value, bool)
            and isinstance(node.value, ast.Call)
            and _dotted(node.value.func) in _zero_capability_calls())


def known_value(node: ast.AST):
    """True or False where `node` compares the shim's major capability number (0 on an NPU host)
    with a positive integer literal (`[0] < 9` true, `[0] >= 9` false), else None."""
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
        return None
    left, op, right = node.left, node.ops[0], node.comparators[0]
    if _major_of_query(right) and not _major_of_query(left):  # (`9 > cap()[0]`)
        flipped = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE}
        left, right = right, left
        op = flipped.get(type(op), type(op))()
    if not _major_of_query(left):
        return None
    if not (isinstance(right, ast.Constant) and isinstance(right.value, int)
            and not isinstance(right.value, bool) and right.value > 0):
        return None
    if isinstance(op, (ast.Lt, ast.LtE, ast.NotEq)):
        return True
    if isinstance(op, (ast.Gt, ast.GtE, ast.Eq)):
        return False
    return None


# ------------------------------------------------------------------------------------------------
# A shell variable whose value "cuda" is only a mode label (round-21 BG#6)

MODE_LABEL = ("a mode label the script only compares with \"cuda\": `{name}` is passed on only where "
              "it holds another value (line {line}), so \"cuda\" never reaches a device")
_TEST = r'\[\[?\s*"?\$\{{?{name}\}}?"?\s*(==|=|!=)\s*["\']?cuda["\']?\s*\]\]?'


def _if_branches(lines: list[str], start: int) -> tuple[int, int] | None:
    """(the `else` line or None, the `fi` line) of the `if` that opens at line index `start`
    (0-based), or None when it has an `elif` or no `fi`."""
    depth, other = 0, None
    for i in range(start + 1, len(lines)):
        words = re.findall(r"(?:^|[;\s])(if|fi|else|elif)(?=$|[;\s])", lines[i])
        for word in words:
            if word == "if":
                depth += 1
            elif word == "fi":
                if depth == 0:
                    return other, i
                depth -= 1
            elif depth == 0:
                if word == "elif":
                    return None
                other = i
    return None


def review_shell_labels(findings: list[Finding], code: str) -> list[Finding]:
    """NPU706 on `NAME="cuda"` in a shell script (comments blanked in `code`) whose every read of
    `$NAME` is in an `if [[ "$NAME" == "cuda" ]]` test (or `!=`), in an `echo`/`printf`, or in the
    branch of such a test where the value is not "cuda": info with MODE_LABEL (a named scope).
    An exported variable, a read anywhere else (`--device $NAME`), a test with `elif`: kept."""
    lines = code.split("\n")
    out = []
    for finding in findings:
        if finding.code != "NPU706" or finding.fixable or finding.severity == "info" \
                or not 0 < finding.line <= len(lines):
            out.append(finding)
            continue
        match = re.match(r"\s*(?:local\s+|readonly\s+)?([A-Za-z_]\w*)=[\"']?cuda[\"']?\s*(?:$|;)",
                         lines[finding.line - 1])
        line = _label_only(lines, match.group(1), finding.line - 1) if match else None
        if line is None:
            out.append(finding)
            continue
        reason = MODE_LABEL.format(name=match.group(1), line=line)
        out.append(dataclasses.replace(finding, severity="info", message=f"{finding.message} ({reason})"))
    return out


def _label_only(lines: list[str], name: str, assigned: int) -> int | None:
    """The line (1-based) where `name` is passed on with a value other than "cuda", when every read
    of it is a test against "cuda", a message or inside such a branch; None otherwise."""
    if re.search(rf"\b(export|declare\s+-x)\s+(?:\w+=\S*\s+)*{name}\b", "\n".join(lines)):
        return None
    read = re.compile(rf"\$(?:{name}\b|\{{{name}[}}:])")
    test = re.compile(r"^\s*(?:if|elif)\s+" + _TEST.format(name=re.escape(name)) + r"\s*;?\s*(?:then)?\s*$")
    allowed: set[int] = set()
    passed = None
    for i, text in enumerate(lines):
        found = test.match(text)
        if not found:
            continue
        branches = _if_branches(lines, i)
        if branches is None or not text.lstrip().startswith("if"):
            return None
        other, end = branches
        allowed.add(i)
        # `==`: the else branch holds another value; `!=`: the then branch does
        if found.group(1) != "!=":
            first, last = (other + 1, end) if other is not None else (end, end)
        else:
            first, last = i + 1, other if other is not None else end
        allowed.update(range(first, last))
        if passed is None and any(read.search(lines[j]) for j in range(first, last)):
            passed = next(j for j in range(first, last) if read.search(lines[j])) + 1
    if passed is None:
        return None
    for i, text in enumerate(lines):
        if i == assigned or not read.search(text) or i in allowed:
            continue
        if re.match(r"\s*(echo|printf)\b", text):
            continue
        return None
    return passed


# ------------------------------------------------------------------------------------------------
# NVIDIA build tooling (round-21 BF#12)

NVIDIA_TOOLING = ("in NVIDIA build tooling: a standalone script under `{folder}/` that runs the CUDA "
                  "toolkit's `{program}` (line {line}); it builds or inspects CUDA code for an NVIDIA "
                  "image, and an NPU host has no use for it")


def _tooling_table() -> dict:
    return catalogue.read_table("scopes.toml").get("cudaonly21", {})


def _toolkit_run(tree: ast.Module, programs: frozenset) -> tuple[str, int] | None:
    """(program, line) of the first string naming a CUDA toolkit program (`"nvcc"`, `"/bin/nvcc"`,
    an f-string's `/bin/nvcc` part), or None."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value.rstrip().rsplit("/", 1)[-1]
            if name in programs and (node.value == name or "/" in node.value):
                return name, node.lineno
    return None


def _standalone(tree: ast.Module) -> bool:
    return any(isinstance(s, ast.If) and isinstance(s.test, ast.Compare)
               and _dotted(s.test.left) == "__name__"
               and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in s.test.comparators)
               for s in tree.body)


def review(findings: list[Finding], text: str, relpath: str) -> list[Finding]:
    """NPU990 in a standalone script of a tooling folder (rules/scopes.toml [cudaonly21]) that runs
    a CUDA toolkit program and names no NPU: info with NVIDIA_TOOLING (a named no-work scope).
    A setup script (`setup*.py`), a module of the package, a script that also serves the NPU: kept."""
    candidates = [f for f in findings if f.code == "NPU990" and not f.fixable and f.severity != "info"]
    if not candidates:
        return findings
    table = _tooling_table()
    parts = relpath.replace("\\", "/").split("/")
    if len(parts) < 2 or parts[0] not in table.get("tooling_folders", ()) or parts[-1].startswith("setup"):
        return findings
    if re.search(table.get("npu_words", r"(?!)"), text):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogateescape"))
    if tree is None or not _standalone(tree):
        return findings
    run = _toolkit_run(tree, frozenset(table.get("toolkit_programs", ())))
    if run is None:
        return findings
    reason = NVIDIA_TOOLING.format(folder=parts[0], program=run[0], line=run[1])
    return [dataclasses.replace(f, severity="info", message=f"{f.message} ({reason})") if f in candidates else f
            for f in findings]
