"""Scopes of a YAML file that change what a text-file finding means (textfiles.py calls this).

The detectors of textfiles.py read a YAML file line by line. These shapes need its structure:

- Markdown documentation in a block scalar (`guide: |` with `###` headings and code fences): a
  snippet under a heading that names another accelerator (`### Docker (NVIDIA)`, `### 4xA100`,
  `### AMD ROCm`) is an example for that hardware, not configuration: its findings go, and the
  section is named as a skipped scope. Other snippets there are documentation examples: their
  findings are lowered to info, with the reason in the message.
- A GitHub Actions job whose `runs-on` names a GPU runner (`gpu`, `g5`, `a100`, a `group:` such as
  `aws-g5-4xlarge-plus`): a CUDA CI job, where an Ascend job would be a new job. Its findings are
  one info finding, on the first of them, naming the others; its reason (`CI_JOB`) is one of
  moot.PHRASES, so the run names it as a skipped scope, not a finding.
- A sequence or mapping that already names the NPU next to CUDA (`matrix: include: [{device:
  cuda}, {device: npu-a2}]`, `cuda: ...` beside `npu: ...`): platform-aware, like the Python
  scopes of families/platform.py; its findings become NPU991 (info).
- An entry of a per-hardware mapping (a parent key naming hardware, overrides or platforms) for
  another vendor's hardware (`hardware_overrides: amd:`, `gb200:`): a deployment picks its own
  hardware's entry, an NPU host one naming the NPU or the defaults; a named skipped scope.
- A deployment profile pinned to other hardware (round 20, audit BE#5): a mapping (a recipe's
  preset or variant) whose own `hardware:`/`supported_hardware:` key ([yaml] profile_hardware_keys)
  has a scalar or list value naming only other vendors' hardware (`hardware: gb200`,
  `supported_hardware: [h100, mi300x]`); an NPU deployment picks the profile naming the NPU. Its
  NPU7xx findings become a named skipped scope (`pinned_profiles`); a value with a word that is no
  vendor's hardware (`xeon6`, a template `${HW}`) or an NPU word, or a mapping value, keeps them.

The knowledge (vendor words, runner words) is rules/scopes.toml [yaml]. The structure is read from
indentation only (no YAML parser): block scalars, `key:` lines and `- ` items; flow collections
and multi-line plain scalars are read as single lines, which can only make a scope smaller.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from typing import Optional

from . import catalogue, singles22
from .findings import Finding, merge_per_file, split_merged


@functools.lru_cache(maxsize=None)
def _patterns() -> tuple[re.Pattern, re.Pattern, re.Pattern]:
    table = catalogue.read_table("scopes.toml").get("yaml", {})
    return (re.compile(table["other_vendor_heading"]), re.compile(table["npu_words"]),
            re.compile(table["gpu_runner_word"]))


@functools.lru_cache(maxsize=None)
def _script_keys() -> frozenset:
    return frozenset(catalogue.read_table("scopes.toml").get("yaml", {}).get("script_keys", []))


# ------------------------------------------------------------------------------------------------
# Structure from indentation

_BLOCK_OPENER = re.compile(r"(?:^|:|^\s*-|\s-)\s+[|>][-+0-9]{0,2}\s*$")
_KEY = re.compile(r"""(?P<key>"[^"]*"|'[^']*'|[^\s#'"\[\]{},&*!|>%@`-][^:#]*?|-[^\s:#][^:#]*?)\s*:(?:\s|$)""")
_ITEM = re.compile(r"-(?:\s+|$)")


@dataclass
class _Node:
    line: int  # 1-based
    col: int  # the dash's column for an item, the key's otherwise (0-based)
    item: bool
    key: str  # the key of `key:` (after the dash for `- key:`), "" for none
    parent: Optional[int] = None  # index into the node list
    end: int = 0  # last line of the node (its children and block scalar included)


@dataclass
class _Block:
    owner: int  # index of the node whose value it is
    first: int  # first content line (1-based)
    last: int


@dataclass
class _Doc:
    lines: list  # the file's lines (raw text: a Markdown heading is a comment to the lexer)
    nodes: list
    blocks: list
    node_of_line: dict  # line -> index of the node it belongs to (its own or its block's owner)
    children: dict  # parent index (None: the top level) -> child indexes, in file order


def _structure(text: str, code: str) -> _Doc:
    raw = text.split("\n")
    lines = code.split("\n")
    nodes: list[_Node] = []
    blocks: list[_Block] = []
    node_of_line: dict[int, int] = {}
    stack: list[int] = []
    i = 0
    while i < len(lines):
        line = lines[i].rstrip("\r")
        stripped = line.strip()
        if not stripped or stripped in ("---", "...") or stripped.startswith("%"):
            i += 1
            continue
        indent = len(line) - len(line.lstrip(" "))
        rest, item = line[indent:], False
        match = _ITEM.match(rest)
        if match:
            item, rest = True, rest[match.end():]
            while _ITEM.match(rest):  # `- - a`: read as one item
                rest = rest[_ITEM.match(rest).end():]
        key_match = _KEY.match(rest)
        node = _Node(i + 1, indent, item, key_match.group("key").strip("\"'") if key_match else "")
        while stack:
            top = nodes[stack[-1]]
            if top.col < node.col or (top.col == node.col and node.item and not top.item):
                break
            stack.pop()
        node.parent = stack[-1] if stack else None
        nodes.append(node)
        index = len(nodes) - 1
        stack.append(index)
        node_of_line[i + 1] = index
        i += 1
        if _BLOCK_OPENER.search(line):
            first = i
            while i < len(lines):
                inner = lines[i].rstrip("\r")
                raw_inner = raw[i].rstrip("\r") if i < len(raw) else inner
                if raw_inner.strip() and len(raw_inner) - len(raw_inner.lstrip(" ")) <= indent:
                    break
                node_of_line[i + 1] = index
                i += 1
            last = i
            while last > first and not raw[last - 1].strip():
                last -= 1
            if last > first:
                blocks.append(_Block(index, first + 1, last))
    for node in nodes:
        node.end = node.line
    for block in blocks:
        nodes[block.owner].end = max(nodes[block.owner].end, block.last)
    for index in range(len(nodes) - 1, -1, -1):  # a parent ends where its last child ends
        parent = nodes[index].parent
        if parent is not None:
            nodes[parent].end = max(nodes[parent].end, nodes[index].end)
    children: dict = {}
    for index, node in enumerate(nodes):
        children.setdefault(node.parent, []).append(index)
    return _Doc(raw, nodes, blocks, node_of_line, children)


def _ancestors(doc: _Doc, index: int):
    while index is not None:
        yield index
        index = doc.nodes[index].parent


def _children(doc: _Doc, parent: Optional[int]) -> list[int]:
    return doc.children.get(parent, [])


def _text(doc: _Doc, first: int, last: int) -> str:
    return "\n".join(doc.lines[first - 1:last])


# ------------------------------------------------------------------------------------------------
# Markdown documentation in block scalars

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^\s*(?P<level>#{1,6})\s+(?P<title>\S.*?)\s*#*\s*$")
_MARKDOWN_INLINE = re.compile(r"\[[^\]\n]+\]\([^)\n]+\)|\*\*[^*\n]+\*\*")
_MULTIPLIER = re.compile(r"\b\d+\s*[x×]\s*(?=[A-Za-z])")


def _markdown(doc: _Doc, block: _Block) -> bool:
    if doc.nodes[block.owner].key.lower() in _script_keys():
        return False  # a script, even one that writes Markdown
    body = doc.lines[block.first - 1:block.last]
    if any(_FENCE.match(line) for line in body):
        return True
    return any(re.match(r"^\s*#{2,6}\s+\S", line) for line in body) and \
        any(_MARKDOWN_INLINE.search(line) for line in body)


def vendor_heading(title: str) -> bool:
    """A Markdown heading that names another accelerator and not the NPU."""
    vendor, npu, _ = _patterns()
    title = _MULTIPLIER.sub(" ", title)
    return bool(vendor.search(title)) and not npu.search(title)


def _sections(doc: _Doc, block: _Block) -> list[tuple[int, int, str]]:
    """(first line, last line, heading) of each section under a heading that names another
    accelerator (the innermost heading naming a platform decides)."""
    headings = []  # (line, level, title), fences excluded
    fenced = False
    for number in range(block.first, block.last + 1):
        line = doc.lines[number - 1]
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            headings.append((number, len(match.group("level")), match.group("title")))
    _, npu, _ = _patterns()
    out = []
    for k, (number, level, title) in enumerate(headings):
        if not vendor_heading(title):
            continue
        end = block.last
        for later, later_level, later_title in headings[k + 1:]:
            if later_level <= level:
                end = later - 1
                break
        # a subsection that names the NPU is not this vendor's: cut it out
        subs = [(n, lv) for n, lv, t in headings[k + 1:] if n <= end and lv > level and npu.search(t)]
        first = number
        if subs:
            out.append((first, subs[0][0] - 1, title))
            continue
        out.append((first, end, title))
    return out


# ------------------------------------------------------------------------------------------------
# GitHub Actions jobs on GPU runners


def _workflow(relpath: str) -> bool:
    path = relpath.replace("\\", "/").lower()
    return "/.github/workflows/" in f"/{path}" and path.endswith((".yml", ".yaml"))


def _gpu_jobs(doc: _Doc) -> list[tuple[int, str, str]]:
    """(node index, job name, runs-on text) of every job whose runs-on names a GPU runner."""
    _, npu, word = _patterns()
    jobs = next((i for i in _children(doc, None) if doc.nodes[i].key == "jobs"), None)
    if jobs is None:
        return []
    out = []
    for job in _children(doc, jobs):
        runs_on = next((i for i in _children(doc, job) if doc.nodes[i].key == "runs-on"), None)
        if runs_on is None:
            continue
        node = doc.nodes[runs_on]
        value = _text(doc, node.line, node.end)
        value = value.split(":", 1)[1] if ":" in value else value
        value = re.sub(r"#.*", "", value)
        value = _matrix_values(doc, job, value)
        words = [w for w in re.split(r"[\s\-_./,\[\]{}:'\"]+", value) if w]
        if any(word.match(w) for w in words) and not npu.search(value):  # (an NPU runner too: not CUDA-only)
            out.append((job, doc.nodes[job].key, " ".join(value.split())))
    return out


def _matrix_values(doc: _Doc, job: int, value: str) -> str:
    """`${{ matrix.os }}` read as the values of the job's matrix key `os`."""
    def values(match: re.Match) -> str:
        name = match.group(1)
        strategy = next((i for i in _children(doc, job) if doc.nodes[i].key == "strategy"), None)
        matrix = next((i for i in _children(doc, strategy) if doc.nodes[i].key == "matrix"), None) \
            if strategy is not None else None
        key = next((i for i in _children(doc, matrix) if doc.nodes[i].key == name), None) \
            if matrix is not None else None
        if key is None:
            return match.group(0)
        text = _text(doc, doc.nodes[key].line, doc.nodes[key].end)
        return text.split(":", 1)[1] if ":" in text else text
    return re.sub(r"\$\{\{\s*matrix\.([\w-]+)\s*\}\}", values, value)


# ------------------------------------------------------------------------------------------------
# Sequences and mappings that already name the NPU


def _platform_aware(doc: _Doc, index: int, key: str) -> str:
    """Why the node at `index` (or an ancestor) is in a platform-aware sequence or mapping ('' if
    it is not): a sibling item sets the same key to an NPU value, or a sibling key names the NPU."""
    _, npu, _ = _patterns()
    for node_index in _ancestors(doc, index):
        node = doc.nodes[node_index]
        siblings = [i for i in _children(doc, node.parent) if i != node_index]
        for sibling in siblings:
            other = doc.nodes[sibling]
            if node.item and other.item and key:
                body = _text(doc, other.line, other.end)
                match = re.search(rf"(?m)(?:^|[\s{{,-]){re.escape(key)}\s*:\s*(?P<value>[^\n#,}}]*)", body)
                if match and npu.search(match.group("value")):
                    value = match.group("value").strip().strip("\"'")
                    return f"a YAML sequence whose entries also set `{key}: {value}` (line {other.line})"
            elif not node.item and not other.item and other.key and npu.search(other.key):
                return f"a YAML mapping with an NPU entry `{other.key}` beside it (line {other.line})"
    return ""


# ------------------------------------------------------------------------------------------------
# Another vendor's section of a per-hardware mapping

_PER_HARDWARE = re.compile(r"(?i)hardware|override|platform|vendor|accelerator")


def _vendor_section(doc: _Doc, index: int) -> Optional[tuple[int, int, str]]:
    """The scope of a per-hardware mapping's entry for another vendor's hardware that holds the
    node at `index` (`hardware_overrides: {amd: {extra_env: ...}, gb200: ...}` in a vLLM recipe),
    or None: the deployment picks the entry of its own hardware, an NPU host one naming the NPU
    (`ascend_910c:`) or the defaults, never this one."""
    vendor, npu, _ = _patterns()
    for node_index in _ancestors(doc, index):
        node = doc.nodes[node_index]
        if node.item or not node.key or node.parent is None:
            continue
        parent = doc.nodes[node.parent]
        # (a count prefix `8xh100` goes, a model's own `x` stays: `mi355x`, round-28 audit CC#27)
        if (_PER_HARDWARE.search(parent.key) and vendor.search(re.sub(r"(?<![A-Za-z0-9])\d+x", " ", node.key.replace("_", " ")))
                and not npu.search(node.key)):
            return (node.line, node.end, f"another platform's configuration (the `{parent.key}.{node.key}` "
                                         f"section of a per-hardware mapping)")
    return None


# ------------------------------------------------------------------------------------------------
# Entry point


def refine(text: str, code: str, relpath: str, findings: list[Finding], enabled) -> tuple[list, list]:
    """(findings, skipped scopes) of a YAML file once its scopes are read."""
    if not findings:
        return findings, []
    doc = _structure(text, code)
    scopes: list[tuple[int, int, str]] = []
    out: list[Finding] = []

    doc_blocks = [b for b in doc.blocks if _markdown(doc, b)]
    sections = [(s, b) for b in doc_blocks for s in _sections(doc, b)]
    for finding in findings:
        section = next((s for s, _b in sections if s[0] <= finding.line <= s[1]), None)
        if section is not None:
            block = next(b for s, b in sections if s is section)
            key = doc.nodes[block.owner].key or "block"
            scope = (section[0], section[1], f"documentation example for another platform (Markdown "
                     f"section `{section[2]}` in `{key}: |`)")
            if scope not in scopes:
                scopes.append(scope)
            continue
        block = next((b for b in doc_blocks if b.first <= finding.line <= b.last), None)
        if block is not None:
            key = doc.nodes[block.owner].key or "block"
            finding = dataclasses.replace(
                finding, severity="info",
                message=f"{finding.message} (documentation example in the Markdown of `{key}: |`, not "
                        f"configuration)")
        out.append(finding)

    # another vendor's entry of a per-hardware mapping: a named scope
    findings, out = out, []
    for finding in findings:
        index = doc.node_of_line.get(finding.line)
        section = _vendor_section(doc, index) if index is not None else None
        if section is None:
            out.append(finding)
        elif section not in scopes:
            scopes.append(section)

    # CI steps pinned to other hardware, recipes for other hardware: named scopes
    out = other_hardware(doc, out, scopes)
    out = pinned_profiles(doc, out, scopes)
    out = singles22.unsupported_strategies(doc, out, scopes, _patterns()[1])  # (a strategy marked unsupported on NPU)

    # platform-aware sequences and mappings: NPU991
    findings, out = out, []
    for finding in findings:
        index = doc.node_of_line.get(finding.line)
        if index is None or finding.severity == "info" or not finding.code.startswith("NPU7"):
            out.append(finding)
            continue
        key = _finding_key(finding)
        why = _platform_aware(doc, index, key)
        if not why:
            out.append(finding)
            continue
        node = doc.nodes[index]
        parent = doc.nodes[node.parent] if node.parent is not None else node
        scope = (parent.line, parent.end, f"platform-aware YAML: {why}")
        if scope not in scopes:
            scopes.append(scope)
        if "NPU991" in enabled:
            message = catalogue.rule("NPU991").message.format(scope=why)
            out.append(dataclasses.replace(finding, code="NPU991", severity="info", fixable=False,
                                           message=f"{message} ({finding.code}: {finding.message})"))

    # CUDA CI jobs: one info finding per job
    if _workflow(relpath):
        out = _fold_jobs(doc, out)
    return out, sorted(scopes)


def _finding_key(finding: Finding) -> str:
    match = re.match(r"""\s*(?:-\s+)?["']?([A-Za-z_][\w.-]*)["']?\s*[:=]""", finding.source)
    return match.group(1) if match else ""


# moot.PHRASES carries this reason: the folded finding becomes a named skipped scope (round-13 audits
# AI#26, AJ#37: nothing to port in a CUDA CI job; an NPU host never runs it)
CI_JOB = "a CI job on NVIDIA runners"


def _fold_jobs(doc: _Doc, findings: list[Finding]) -> list[Finding]:
    jobs = _gpu_jobs(doc)
    if not jobs:
        return _fold_containers(doc, findings)
    out: list[Finding] = []
    held: dict[int, list[Finding]] = {}
    for finding in findings:
        job = next((j for j in jobs if doc.nodes[j[0]].line <= finding.line <= doc.nodes[j[0]].end), None)
        if job is None or finding.code == "NPU991" or not finding.code.startswith("NPU7"):
            out.append(finding)
            continue
        held.setdefault(job[0], []).append(finding)
    for index, name, runs_on in jobs:
        group = sorted(held.get(index, []))
        if not group:
            continue
        first, rest = group[0], group[1:]
        others = ", ".join(f"{f.code} at line {f.line}" for f in rest)
        also = f"; also {others}" if others else ""
        out.append(dataclasses.replace(
            first, severity="info",
            message=f"{first.message} ({CI_JOB}: `{name}`, `runs-on: {runs_on}`: an Ascend job would be a "
                    f"new job{also})",
            also=tuple((f.line, f.column, f.source) for f in rest if f.code == first.code)))
    return _fold_containers(doc, sorted(out))


def _fold_containers(doc: _Doc, findings: list[Finding]) -> list[Finding]:
    """NPU709 (`--gpus`, `runtime: nvidia`) inside a `container:` block whose image is already an
    NPU707 finding: part of that finding, not a second error."""
    images = {}
    for finding in findings:
        if finding.code != "NPU707":
            continue
        index = doc.node_of_line.get(finding.line)
        container = next((i for i in _ancestors(doc, index) if doc.nodes[i].key == "container"), None) \
            if index is not None else None
        if container is not None:
            images.setdefault(container, finding)
    if not images:
        return findings
    folded: dict[int, list[Finding]] = {}
    out = []
    for finding in findings:
        index = doc.node_of_line.get(finding.line)
        container = next((i for i in _ancestors(doc, index) if doc.nodes[i].key == "container"), None) \
            if finding.code == "NPU709" and index is not None else None
        if container in images:
            folded.setdefault(container, []).append(finding)
            continue
        out.append(finding)
    result = []
    for finding in out:
        container = next((c for c, f in images.items() if f is finding), None)
        if container in folded:
            names = ", ".join(f"`{f.source}` at line {f.line}" for f in folded[container])
            finding = dataclasses.replace(finding, message=f"{finding.message} (the container's NVIDIA "
                                          f"runtime setting {names} goes with the image)")
        result.append(finding)
    return result


# ------------------------------------------------------------------------------------------------
# CI steps pinned to other hardware, recipes for other hardware (round-10 audits)


@functools.lru_cache(maxsize=None)
def _pin_table() -> tuple[frozenset, re.Pattern, frozenset]:
    table = catalogue.read_table("scopes.toml").get("yaml", {})
    return (frozenset(table.get("ci_pin_keys", [])), re.compile(table.get("ci_hardware_word", r"(?!)")),
            frozenset(table.get("recipe_hardware_keys", [])))


def _value(doc: _Doc, index: int) -> str:
    node = doc.nodes[index]
    text = _text(doc, node.line, node.end)
    text = text.split(":", 1)[1] if ":" in text else text
    return " ".join(re.sub(r"#.*", "", text).split()).strip("\"'")


def _pinned_step(doc: _Doc, index: int) -> Optional[tuple[int, int, str]]:
    """The scope of the CI step holding the node at `index` when the step is pinned to other
    hardware (`device: h100` beside `commands:` in a Buildkite step), or None: an NPU host is
    never such a runner, so it never runs the step's commands. A step with no pin (it may run
    anywhere, an NPU runner included) or pinned to a runner naming the NPU is no such scope."""
    pin_keys, word, _ = _pin_table()
    _, npu, _ = _patterns()
    scripts = _script_keys()
    for node_index in _ancestors(doc, index):
        children = _children(doc, node_index)
        if not {doc.nodes[i].key for i in children} & scripts:
            continue
        pins = [i for i in children if doc.nodes[i].key in pin_keys]
        pins += [i for c in children if doc.nodes[c].key == "agents" for i in _children(doc, c)
                 if doc.nodes[i].key in pin_keys]
        for pin in pins:
            value = _value(doc, pin)
            words = [w for w in re.split(r"[\s\-_./,\[\]{}:'\"]+", value) if w]
            if value and any(word.match(w) for w in words) and not npu.search(value):
                node = doc.nodes[node_index]
                return (node.line, node.end, f"a CI step pinned to other hardware (`{doc.nodes[pin].key}: "
                                             f"{value}`, line {doc.nodes[pin].line}) that an NPU host never runs")
        return None  # the innermost step decides
    return None


def _recipe_hardware(doc: _Doc) -> str:
    """`a recipe for other hardware (...)` when the file's `hardware:` mapping (top level or under
    `meta:`) lists only other vendors' hardware, '' otherwise."""
    _, _, keys = _pin_table()
    vendor, npu, _ = _patterns()
    for top in [None, *(i for i in _children(doc, None) if doc.nodes[i].key == "meta")]:
        for index in _children(doc, top):
            if doc.nodes[index].key not in keys:
                continue
            names = [doc.nodes[i].key for i in _children(doc, index) if doc.nodes[i].key]
            if names and all(vendor.search(re.sub(r"^\d+x", " ", n.replace("_", " "))) and not npu.search(n)
                             for n in names):
                shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
                return (f"a recipe for other hardware (its `{doc.nodes[index].key}:` list, line "
                        f"{doc.nodes[index].line}, names only {shown})")
    return ""


_ENV_KEYS = frozenset({"env", "extra_env", "envs", "environment", "env_vars"})
_NCCL_KEY = re.compile(r"""\s*(?:-\s+)?["']?NCCL_\w*["']?\s*[:=]""")


def _npu_env_entry(doc: _Doc) -> tuple[str, int, int]:
    """(`a file with its own NPU environment (...)`, first line, last line of that entry) when a
    per-hardware mapping of the file has an entry for the NPU that sets variables other than
    NCCL's (`hardware_overrides: npu: extra_env: {HCCL_BUFFSIZE: ...}`): the file's authors tuned
    the NPU's environment there. ('', 0, 0) otherwise."""
    _, npu, _ = _patterns()
    for index, node in enumerate(doc.nodes):
        if node.item or not node.key or node.parent is None or not npu.search(node.key):
            continue
        parent = doc.nodes[node.parent]
        if not _PER_HARDWARE.search(parent.key):
            continue
        for env in (i for i in _children(doc, index) if doc.nodes[i].key in _ENV_KEYS):
            if any(doc.nodes[i].key and not doc.nodes[i].key.strip("\"'").startswith("NCCL_")
                   for i in _children(doc, env)):
                return (f"a file with its own NPU environment (`{parent.key}.{node.key}`, line {node.line}): "
                        f"NCCL reads it, HCCL does not", node.line, node.end)
    return "", 0, 0


def other_hardware(doc: _Doc, findings: list[Finding], scopes: list) -> list[Finding]:
    """Findings in a CI step pinned to other hardware, and the information about NCCL switches with
    no counterpart (NPU703 info) in a recipe for other hardware, or in a file whose per-hardware
    mapping sets the NPU's own environment (only NCCL_* switches there): named skipped scopes."""
    informed = any(f.code == "NPU703" and f.severity == "info" for f in findings)
    recipe = _recipe_hardware(doc) if informed else ""
    npu_env, npu_first, npu_last = _npu_env_entry(doc) if informed and not recipe else ("", 0, 0)
    out = []
    for finding in findings:
        index = doc.node_of_line.get(finding.line)
        scope = _pinned_step(doc, index) if index is not None and finding.code.startswith("NPU7") else None
        if scope is None and recipe and finding.code == "NPU703" and finding.severity == "info":
            lines = [finding.line, *(line for line, _column, _source in finding.also)]
            scope = (min(lines), max(lines), f"{recipe}: `{finding.source.rstrip(':')}` is inert on an NPU host")
        if (scope is None and npu_env and finding.code == "NPU703" and finding.severity == "info"
                and not any(npu_first <= line <= npu_last
                            for line in [finding.line, *(line for line, _column, _source in finding.also)])
                and all(_NCCL_KEY.match(source) for source in
                        [finding.source, *(source for _line, _column, source in finding.also)])):
            lines = [finding.line, *(line for line, _column, _source in finding.also)]
            scope = (min(lines), max(lines), f"{npu_env}: `{finding.source.strip().rstrip(':')}` is inert on an NPU host")
        if scope is None:
            out.append(finding)
        elif scope not in scopes:
            scopes.append(scope)
    return out


# ------------------------------------------------------------------------------------------------
# Deployment profiles pinned to other hardware (round 20, audit BE#5)


@functools.lru_cache(maxsize=None)
def _profile_keys() -> frozenset:
    table = catalogue.read_table("scopes.toml").get("yaml", {})
    return frozenset(table.get("profile_hardware_keys", ["hardware", "supported_hardware"]))


_WORD_SPLIT = re.compile(r"[\s,\[\]{}\"']+")


def _hardware_words(doc, index: int) -> list[str]:
    """The hardware names of a `hardware:` key: its scalar or flow-list value, or its block list's
    items; [] for a mapping value or nothing."""
    kids = _children(doc, index)
    if kids:
        if any(not doc.nodes[i].item or doc.nodes[i].key for i in kids):
            return []  # a mapping (`hardware: {h200: verified}` as a block): not a profile's pin
        return [w for i in kids for w in _WORD_SPLIT.split(_value_of_item(doc, i)) if w]
    value = _value(doc, index)
    if not value or ":" in value or "$" in value or "{" in value:
        return []
    return [w for w in _WORD_SPLIT.split(value) if w]


def _value_of_item(doc, index: int) -> str:
    line = doc.lines[doc.nodes[index].line - 1]
    return re.sub(r"#.*", "", line).strip().lstrip("-").strip()


def _profile_of(doc, index: int) -> Optional[tuple[int, int, str]]:
    """The scope of the innermost mapping holding the node at `index` whose own hardware key names
    only other vendors' hardware, or None."""
    vendor, npu, _ = _patterns()
    keys = _profile_keys()
    for node_index in _ancestors(doc, index):
        pins = [i for i in _children(doc, node_index) if doc.nodes[i].key in keys and i != index]
        for pin in pins:
            words = _hardware_words(doc, pin)
            if words and all(vendor.search(re.sub(r"^\d+x", " ", w.replace("_", " "))) and not npu.search(w)
                             for w in words):
                node = doc.nodes[node_index]
                shown = ", ".join(words[:6]) + (", ..." if len(words) > 6 else "")
                label = f"`{node.key}`" if node.key else f"the entry at line {node.line}"
                return (node.line, node.end, f"a deployment profile for other hardware ({label}: "
                                             f"`{doc.nodes[pin].key}: {shown}`, line {doc.nodes[pin].line}) "
                                             f"that an NPU deployment never picks")
        if pins:
            return None  # the innermost profile with a hardware key decides
    return None


def pinned_profiles(doc, findings: list[Finding], scopes: list) -> list[Finding]:
    """Findings (NPU7xx) inside a profile pinned to other hardware: named skipped scopes; places of
    a merged finding inside such a profile leave it when its first place is outside."""
    out: list[Finding] = []
    for finding in findings:
        if not finding.code.startswith("NPU7") or finding.fixable:
            out.append(finding)
            continue
        places = [finding.line, *(line for line, _column, _source in finding.also)]
        found = {}
        for line in places:
            index = doc.node_of_line.get(line)
            scope = _profile_of(doc, index) if index is not None else None
            if scope is not None:
                found[line] = scope
        if not found:
            out.append(finding)
            continue
        if finding.line in found and len(found) < len(set(places)):
            out.append(finding)  # its first place is pinned, others are not: left as it is
            continue
        for scope in found.values():
            if scope not in scopes:
                scopes.append(scope)
        if finding.line in found:
            continue
        kept = [piece for piece in split_merged(finding) if piece.line not in found]
        out.extend(merge_per_file(kept) if len(kept) > 1 else kept)
    return out
