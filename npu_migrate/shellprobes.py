"""nvidia-smi probes with a clean fallback, and NVIDIA container variables read with a fallback, in
shell scripts and CI files (NPU704, NPU709; round-11 audits AC#5, AC#10, AD#12).

textfiles.py reports every `nvidia-smi` and every NVIDIA container variable where it stands. Some
of them do not fail on an NPU host, and the round-11 reviewers read them as false errors:

- a presence probe (`command -v nvidia-smi`, `which`, `type`, `hash`) in an `if`, `&&` or `||`
  condition, or in a fallback chain captured into a variable (`SMI_BIN=$(which nvidia-smi || which
  rocm-smi || echo "")`): on an NPU host the probe answers "absent" and the script goes on. It is
  information (PROBE_REASON, a named scope: moot.AS_WRITTEN) when nothing later needs what the
  probe's branch computes; a warning when the script then asks the probed tool for a GPU count or
  reads a value the branch sets, which an NPU host does not get (GPU_COUNT_REASON); still an error
  when the script stops without it (the failure branch or a later test of the count exits). Where
  the chain offers other vendors' tools (rocm-smi, amd-smi, xpu-smi, hl-smi), the message says
  that `npu-smi` is the Ascend counterpart to add. The probe findings of a file that stay (errors,
  warnings, notes with that advice) are one finding, the strongest, naming the others: one
  decision for the script. A run of the captured tool inside a shell function the script never
  calls (`get_num_gpus() { $SMI_BIN ...; }`, named nowhere else) is no run (round-27 BX#11): the
  probe is the note, naming the function; a function the script calls keeps the warning.
- an `nvidia-smi` call inside the branch such a probe guards (`if command -v nvidia-smi; then
  nvidia-smi -L; fi`): code an NPU host never runs (moot.PHRASES "in a branch an NPU host does not
  take"); `nvidia-smi` only named in a message an `echo`/`printf` prints: no port work.
- a read of NVIDIA_VISIBLE_DEVICES (or another NVIDIA container variable) with a default,
  `${NVIDIA_VISIBLE_DEVICES:-...}`, outside a container command: not a container setting; the NPU
  host reads it empty and takes the fallback (READ_REASON, moot.AS_WRITTEN).

A real call whose output the script needs (`num_gpus=$(nvidia-smi --query-gpu=name ... | wc -l)`,
not behind a probe of nvidia-smi) stays an error. The shell structure is read from the text with
comments blanked (textfiles' lexer) and quoted strings masked: keywords `if/then/elif/else/fi`
pair up by depth. Called once per file from textfiles.scan_text_file, before the per-file merge.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import re
from typing import Optional

from . import catalogue
from .findings import Finding

# Reasons (moot.py turns an info finding carrying one into a named scope)
PROBE_REASON = "a probe: the script goes on without it"  # moot.AS_WRITTEN
READ_REASON = "read with a fallback, not a container setting"  # moot.AS_WRITTEN
GATED_REASON = "in a branch an NPU host does not take"  # moot.PHRASES (testscopes' wording)
TESTED_REASON = "a device name the script tests, not a container setting"  # moot.AS_WRITTEN
MESSAGE_REASON = "only named in a message the script prints"  # moot.NO_WORK
# Not moot: the script goes on, but the port has something to add or to check
OTHER_VENDORS_REASON = "a probe with other vendors' fallbacks: the script goes on without it"
GPU_COUNT_REASON = "a probe, but the script then needs what it answers"
STOPS_REASON = "a probe, and the script stops without it"
PINNED_REASON = "a script pinned to NVIDIA hardware"

SMI = "nvidia-smi"
OTHER_TOOLS = re.compile(r"(?<![\w-])(rocm-smi|amd-smi|xpu-smi|hl-smi|xpumcli)(?![\w-])")
NPU_SMI_ADVICE = "`npu-smi` is the Ascend counterpart to add to it (`npu-smi info -l` lists the NPUs)"
_PROBE_BEFORE = re.compile(
    r"(?:(?<![\w-])command[ \t]+-[vV][ \t]+|(?<![\w-])which[ \t]+(?:-\w+[ \t]+)*"
    r"|(?<![\w-])type[ \t]+(?:-\w+[ \t]+)*|(?<![\w-])hash[ \t]+)[\"']?$")
_KEYWORD = re.compile(r"(?<![^\s;&|(])(if|then|elif|else|fi|while|until|do|done)(?=[\s;&|)]|$)")
_STOP = re.compile(r"(?<![\w-])(?:exit(?![ \t]+0\b)|die|abort|fatal|return[ \t]+[1-9])(?![\w-])")
_CONTAINER_COMMAND = re.compile(r"(?<![\w-])(?:docker|podman|nerdctl|export|--env|-e)(?![\w-])")
_REWRITE_NOTE = re.compile(r" \((?:not rewritten: [^()]*|the opt-in script rewrite can call npu-smi)\)$")
_NVIDIA_CONTAINER_VAR = re.compile(r"NVIDIA_(?:VISIBLE_DEVICES|DRIVER_CAPABILITIES|REQUIRE_CUDA|MIG_CONFIG_DEVICES)")


def review(findings: list[Finding], code: str) -> list[Finding]:
    """The file's NPU704/NPU709 error findings judged by what the script does around them (see the
    module's docstring); the others unchanged. `code`: the file's text with comments blanked."""
    if not any(f.code in ("NPU704", "NPU709") and not f.fixable and f.severity == "error" for f in findings):
        return findings
    text = _Text(code)
    out, probes = [], []
    for finding in findings:
        if finding.fixable or finding.severity != "error" or finding.code not in ("NPU704", "NPU709"):
            out.append(finding)
            continue
        offset = text.offset(finding.line, finding.column)
        if finding.code == "NPU709":
            out.append(_read_with_fallback(text, finding, offset) or _tested_value(text, finding, offset) or finding)
            continue
        judged = _judge_smi(text, offset)
        if judged is None:
            out.append(finding)
            continue
        severity, reason = judged
        message = _REWRITE_NOTE.sub("", finding.message)  # not a call to rewrite: the reason replaces it
        lowered = dataclasses.replace(finding, severity=severity, message=f"{message} ({reason})")
        (probes if reason.startswith((OTHER_VENDORS_REASON, GPU_COUNT_REASON, STOPS_REASON)) else out).append(lowered)
    out = sorted(out + _fold_probes(probes))
    pin = _pinned(text) if any(f.code == "NPU704" for f in out) else None
    return _fold_pinned(out, pin) if pin else out


# ------------------------------------------------------------------------------------------------
# The text: offsets, masked quotes, keywords


class _Text:
    def __init__(self, code: str) -> None:
        self.code = code
        self.masked = _mask_quotes(code)
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", code)]
        self.keywords = [(m.start(), m.group(1)) for m in _KEYWORD.finditer(self.masked)]
        self.keyword_starts = [k[0] for k in self.keywords]

    def offset(self, line: int, column: int) -> int:
        index = min(max(line - 1, 0), len(self.line_starts) - 1)
        return min(self.line_starts[index] + column - 1, len(self.code))

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.line_starts, offset)

    def logical_line(self, offset: int) -> tuple[int, int]:
        """(start, end) of the command line holding offset, with its continuation lines (a line
        ending in `\\`, `&&`, `||` or `|` goes on on the next one)."""
        index = self.line_of(offset) - 1
        start = self.line_starts[index]
        while index > 0:
            previous = self.masked[self.line_starts[index - 1]:self.line_starts[index]].rstrip()
            if not previous.endswith(("\\", "&&", "||", "|")):
                break
            index -= 1
            start = self.line_starts[index]
        end = self.code.find("\n", offset)
        end = len(self.code) if end < 0 else end
        while self.masked[:end].rstrip().endswith(("\\", "&&", "||", "|")) and end < len(self.code):
            nxt = self.code.find("\n", end + 1)
            end = len(self.code) if nxt < 0 else nxt
        return start, end

    def if_block(self, offset: int) -> Optional[tuple[str, int, int, int, int]]:
        """For an offset in the condition of an `if`/`elif`: (keyword, condition start, then-body
        start, then-body end, end of the whole `if` at its `fi`); None elsewhere."""
        index = bisect.bisect_left(self.keyword_starts, offset) - 1
        if index < 0 or self.keywords[index][1] not in ("if", "elif"):
            return None
        keyword, start = self.keywords[index][1], self.keywords[index][0]
        depth, then, body_end = 0, None, None
        for position, word in self.keywords[index + 1:]:
            if word == "if":
                depth += 1
            elif word == "fi" and depth > 0:
                depth -= 1
            elif depth == 0 and then is None:
                if word != "then":
                    return None
                then = position + len(word)
            elif depth == 0 and body_end is None and word in ("elif", "else", "fi"):
                body_end = position
                if word == "fi":
                    return keyword, start, then, body_end, position
            elif depth == 0 and word == "fi":
                return keyword, start, then, body_end, position
        return None


def _mask_quotes(code: str) -> str:
    """`code` with the insides of quoted strings blanked (same length, same line breaks)."""
    out = list(code)
    i, n, quote = 0, len(code), ""
    while i < n:
        c = code[i]
        if c == "\\" and quote != "'":
            if quote and i + 1 < n and code[i + 1] != "\n":
                out[i + 1] = " "
            i += 2
            continue
        if quote:
            if c == quote:
                quote = ""
            elif c != "\n":
                out[i] = " "
        elif c in "'\"" and (i == 0 or code[i - 1] != "$" or c == '"'):
            quote = c
        i += 1
    return "".join(out)


# ------------------------------------------------------------------------------------------------
# nvidia-smi


def _judge_smi(text: _Text, offset: int) -> Optional[tuple[str, str]]:
    """(severity, reason) for the `nvidia-smi` at offset, or None to leave its finding as it is."""
    code = text.code
    line_start = text.line_starts[text.line_of(offset) - 1]
    if _PROBE_BEFORE.search(code[line_start:offset]):
        capture = _capture(text, offset)
        if capture is not None:
            return _judge_capture(text, offset, *capture)
        return _judge_condition(text, offset)
    gate = _guarding_probe(text, offset)
    if gate:  # (the probe's line: the branches of two probes are two scopes, not one spanning both)
        return "info", f"{GATED_REASON}: `{gate[0]}` (line {text.line_of(gate[1])}) is false there"
    if text.masked[offset] == " " and re.search(r"(?<![\w-])(?:echo|printf)[ \t][^;&|\n]*$", code[line_start:offset]):
        return "info", f"{MESSAGE_REASON}, not a call"
    return None


def _capture(text: _Text, offset: int) -> Optional[tuple[str, int, int]]:
    """(variable, start, end) of `VAR=$(... nvidia-smi || ...)`, a probe chain with a fallback
    captured into a variable; None for any other probe."""
    code = text.code
    start = code.rfind("$(", text.line_starts[text.line_of(offset) - 1], offset)
    if start < 0 or ")" in code[start:offset]:
        return None
    depth, end = 0, None
    for i in range(start + 2, len(code)):
        if code[i] == "(":
            depth += 1
        elif code[i] == ")":
            if depth == 0:
                end = i
                break
            depth -= 1
    if end is None or "||" not in code[offset:end]:
        return None  # no fallback: `VAR=$(which nvidia-smi)` under `set -e` stops the script
    match = re.search(r"(?<![\w$])([A-Za-z_]\w*)=[\"']?$", code[max(0, start - 80):start])
    return (match.group(1), start, end) if match else None


def _judge_capture(text: _Text, offset: int, name: str, start: int, end: int) -> tuple[str, str]:
    chain = text.code[start:end + 1]
    vendors = sorted(set(OTHER_TOOLS.findall(chain)))
    sites = re.finditer(rf"(?:^|[;&|(`]|\bthen\b|\bdo\b|\belse\b)[ \t]*\"?\$(?:{name}\b|\{{{name}\}})",
                        text.code[end:], re.MULTILINE)
    runs, dead = None, None
    for site in sites:  # (round-27 BX#11: a run inside a shell function the script never calls is no run)
        uncalled = _uncalled_function(text, end + site.end())
        if uncalled is None:
            runs = site
            break
        dead = dead or uncalled
    advice = f"; its chain offers {', '.join(vendors)}: {NPU_SMI_ADVICE}" if vendors else ""
    if runs is None and dead is not None:
        advice = (f"; `${name}` is run only in the shell function `{dead[0]}` (line {dead[1]}), which the "
                  f"script never calls{advice}")
    if runs:
        line = text.line_of(end + runs.end())
        return "warning", (f"{GPU_COUNT_REASON}: an NPU host leaves `{name}` without `{SMI}`, and the script "
                           f"runs `${name}` at line {line} to query the GPUs, which it cannot answer there{advice}")
    if vendors:
        return "info", f"{OTHER_VENDORS_REASON} (`{name}` is left empty){advice}"
    return "info", f"{PROBE_REASON} (`{name}` is left empty)"


_SHELL_FUNCTION = re.compile(r"^[ \t]*(?:function[ \t]+)?([A-Za-z_][\w-]*)[ \t]*(?:\(\)[ \t]*)?\{[ \t]*$", re.MULTILINE)


def _uncalled_function(text: _Text, offset: int) -> Optional[tuple[str, int]]:
    """(name, line) of the shell function `name() { ... }` whose body holds `offset`, when the
    script names it nowhere outside its definition (never called); else None."""
    masked = text.masked
    for match in reversed(list(_SHELL_FUNCTION.finditer(masked, 0, offset))):
        if "()" not in match.group(0) and not match.group(0).lstrip().startswith("function"):
            continue
        depth, close = 0, None
        for i in range(match.end() - 1, len(masked)):
            if masked[i] == "{":
                depth += 1
            elif masked[i] == "}":
                depth -= 1
                if depth == 0:
                    close = i
                    break
        if close is None or close < offset:
            continue  # (a function that ends before the offset: not the one holding it)
        name = match.group(1)
        outside = masked[:match.start()] + masked[close + 1:]
        if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", outside):
            return None
        return name, text.line_of(match.start() + len(match.group(0)) - len(match.group(0).lstrip()))
    return None


def _judge_condition(text: _Text, offset: int) -> Optional[tuple[str, str]]:
    """A probe in an `if`/`elif` condition or a `&&`/`||` list."""
    block = text.if_block(offset)
    masked = text.masked
    line_start = text.line_starts[text.line_of(offset) - 1]
    probe_start = line_start + _PROBE_BEFORE.search(text.code[line_start:offset]).start()
    if block is not None:
        keyword, cond_start, then, body_end, fi = block
        negated = bool(re.search(r"(?<![\w-])!\s*$", masked[cond_start:probe_start]))
        failure = masked[then:body_end] if negated else masked[body_end:fi]
        gated = "" if negated else text.code[then:body_end]
        after = fi + 2
        whole = text.code[_chain_start(text, cond_start, keyword):fi]
    else:
        start, end = text.logical_line(offset)
        rest = masked[offset:end]
        op = re.search(r"&&|\|\||;|$", rest)
        if op.group(0) not in ("&&", "||"):
            return None  # a probe on its own: under `set -e` its failure stops the script
        before = masked[start:probe_start]
        if re.search(r"(?<![\w-])!\s*$", before):
            return None
        failure = rest[op.end():] if op.group(0) == "||" else (rest.split("||", 1)[1] if "||" in rest else "")
        gated = ""
        if op.group(0) == "&&":
            gated_end = rest.find("||", op.end())
            gated = text.code[offset + op.end():offset + gated_end if gated_end >= 0 else end]
        after = end
        whole = text.code[start:end]
    if _STOP.search(failure):
        return "error", f"{STOPS_REASON}: an NPU host takes the branch that exits"
    vendors = sorted(set(OTHER_TOOLS.findall(whole)))
    advice = f"; it offers {', '.join(vendors)}: {NPU_SMI_ADVICE}" if vendors else ""
    needed = _needed_later(text, gated, after)
    if needed:
        name, line, stops = needed
        if stops:
            return "error", (f"{STOPS_REASON}: it sets `{name}` from `{SMI}`, and the test of it at line {line} "
                             f"exits where an NPU host leaves it empty{advice}")
        return "warning", (f"{GPU_COUNT_REASON}: it sets `{name}` from `{SMI}`, which the script reads at line "
                           f"{line}; an NPU host leaves it empty{advice}")
    if vendors:
        return "info", f"{OTHER_VENDORS_REASON}{advice}"
    return "info", PROBE_REASON


def _chain_start(text: _Text, cond_start: int, keyword: str) -> int:
    """The `if` that opens the `if/elif` chain holding the condition at cond_start."""
    if keyword == "if":
        return cond_start
    index = bisect.bisect_left(text.keyword_starts, cond_start)
    depth = 0
    for position, word in reversed(text.keywords[:index]):
        if word == "fi":
            depth += 1
        elif word == "if":
            if depth == 0:
                return position
            depth -= 1
    return cond_start


def _needed_later(text: _Text, gated: str, after: int) -> Optional[tuple[str, int, bool]]:
    """A variable the probe's branch sets from nvidia-smi, read after the branch: (name, line of
    the read, whether that read is a test whose branch exits)."""
    names = re.findall(r"(?<![\w$])([A-Za-z_]\w*)=[\"']?\$\((?=[^\n]*nvidia-smi)", gated)
    for name in dict.fromkeys(names):
        read = re.search(rf"\$(?:{name}\b|\{{{name}[}}:#%/]|\(\(\s*{name}\b)", text.code[after:])
        if read is None:
            continue
        at = after + read.start()
        block = text.if_block(at)
        stops = block is not None and bool(_STOP.search(text.masked[block[2]:block[4]]))
        return name, text.line_of(at), stops
    return None


def _guarding_probe(text: _Text, offset: int) -> Optional[tuple[str, int]]:
    """The probe (`command -v nvidia-smi`) whose branch holds offset: an `if` whose condition
    probes nvidia-smi (not negated, no `||` in it) and whose then-body holds offset, or a
    `probe && ...` list on the same command line: (its text, its offset); None for none."""
    masked, code = text.masked, text.code
    index = bisect.bisect_left(text.keyword_starts, offset)
    depth = 0
    for k in range(index - 1, -1, -1):
        position, word = text.keywords[k]
        if word == "fi":
            depth += 1
        elif word == "if" and depth > 0:
            depth -= 1
        elif word == "then" and depth == 0:
            cond = next((j for j in range(k - 1, -1, -1) if text.keywords[j][1] in ("if", "elif")), None)
            if cond is None:
                return None
            condition = code[text.keywords[cond][0]:position]
            probe = re.search(r"(?:command[ \t]+-[vV]|which|type|hash)[ \t]+[\"']?nvidia-smi\b", condition)
            if probe and "||" not in masked[text.keywords[cond][0]:position] \
                    and not re.search(r"!\s*$", masked[text.keywords[cond][0]:text.keywords[cond][0] + probe.start()]):
                return probe.group(0), text.keywords[cond][0] + probe.start()
            return None
        elif word == "else" and depth == 0:
            return _negated_probe_before(text, k)
        elif word == "elif" and depth == 0:
            return None  # in a later branch of the chain, which the NPU host may take
    start, _end = text.logical_line(offset)
    head = masked[start:offset]
    probe = re.search(r"(?:command[ \t]+-[vV]|which|type|hash)[ \t]+nvidia-smi\b[^;|&\n]*&&(?:(?!\|\||;).)*$",
                      code[start:offset].replace("\n", " "))
    if probe and "||" not in head[:probe.start()]:
        return re.match(r"\S+(?:[ \t]+-[vV])?[ \t]+nvidia-smi", probe.group(0)).group(0), start + probe.start()
    return None


def _negated_probe_before(text: _Text, k: int) -> Optional[tuple[str, int]]:
    """For the `else` at keyword index k: the probe when its `if` (with no `elif`) tests that
    nvidia-smi is missing (`if ! command -v nvidia-smi; then ...; else <here>; fi`)."""
    depth = 0
    for j in range(k - 1, -1, -1):
        position, word = text.keywords[j]
        if word == "fi":
            depth += 1
        elif word == "if" and depth > 0:
            depth -= 1
        elif word == "elif" and depth == 0:
            return None
        elif word == "if":
            then = next((p for p, w in text.keywords[j + 1:k] if w == "then"), None)
            if then is None:
                return None
            condition = text.code[position:then]
            probe = re.search(r"(?<![\w-])!\s*((?:command[ \t]+-[vV]|which|type|hash)[ \t]+[\"']?nvidia-smi\b)",
                              condition)
            if probe and "||" not in text.masked[position:then] and "&&" not in text.masked[position:then]:
                return probe.group(1), position + probe.start(1)
            return None
    return None


def _fold_probes(probes: list[Finding]) -> list[Finding]:
    """The probe findings of a file that stay: one, the strongest (error, then warning, then the
    first), naming the others' lines and keeping their places (`also`)."""
    if len(probes) < 2:
        return probes
    rank = {"error": 0, "warning": 1, "info": 2}
    probes = sorted(probes)
    first = min(probes, key=lambda f: (rank[f.severity], f.line))
    rest = [f for f in probes if f is not first]
    lines = ", ".join(str(f.line) for f in rest)
    return [dataclasses.replace(
        first, message=f"{first.message} (with the other probes of `{SMI}` at lines {lines}, one decision for the script)",
        also=tuple((f.line, f.column, f.source) for f in rest))]


# ------------------------------------------------------------------------------------------------
# NVIDIA container variables


def _read_with_fallback(text: _Text, finding: Finding, offset: int) -> Optional[Finding]:
    code = text.code
    match = _NVIDIA_CONTAINER_VAR.match(code, offset)
    if match is None or not code[max(0, offset - 2):offset] == "${":
        return None
    if not re.match(r":?-", code[match.end():match.end() + 2]):
        return None
    start, end = text.logical_line(offset)
    if _CONTAINER_COMMAND.search(text.masked[start:end]):
        return None
    return dataclasses.replace(
        finding, severity="info",
        message=f"{finding.message} ({READ_REASON}: an NPU host reads it empty and takes the fallback)")


def _tested_value(text: _Text, finding: Finding, offset: int) -> Optional[Finding]:
    """`nvidia.com/gpu` as a value the script compares or strips (`[[ "$DEV" == nvidia.com/gpu=* ]]`,
    `${DEV#nvidia.com/gpu=}`), outside a container or cluster command: a read of the runner's
    device name, not a setting; an NPU host's value does not match and the script goes its other
    way (the calls and options that need the NVIDIA runtime stay findings)."""
    if not text.code.startswith("nvidia.com/gpu", offset) or not finding.source.startswith("nvidia.com/gpu"):
        return None
    start, end = text.logical_line(offset)
    line = text.code[start:offset]
    tested = re.search(r"(?:==|!=|=~)[ \t]*[\"']?\*?[\"']?$", line) and re.search(r"\[\[|\[ |\btest\b", line)
    stripped = re.search(r"\$\{[A-Za-z_]\w*(?:#{1,2}|%{1,2}|/{1,2})[\"']?$", line)
    if not (tested or stripped) or re.search(r"(?<![\w-])(?:docker|podman|kubectl|helm|--gpus|--device)(?![\w-])",
                                             text.masked[start:end]):
        return None
    return dataclasses.replace(
        finding, severity="info",
        message=f"{finding.message} ({TESTED_REASON}: an NPU host's device name does not match it)")


# ------------------------------------------------------------------------------------------------
# Scripts pinned to one NVIDIA GPU model


@functools.lru_cache(maxsize=None)
def _model_word() -> re.Pattern:
    """A GPU model word (`H200`, `a100`, `mi300x`): the CI pin words of rules/scopes.toml without the
    vendor names (a test `== *nvidia*` picks a vendor's tool, it pins no hardware)."""
    pattern = catalogue.read_table("scopes.toml").get("yaml", {}).get("ci_hardware_word", r"(?!)")
    return re.compile(rf"(?!(?:nvidia|amd|rocm)$|mi\d)(?:{pattern.replace('(?i)', '', 1)})", re.IGNORECASE)


def _pinned(text: _Text) -> Optional[tuple[int, str]]:
    """(line, model) of a test that stops the script unless the GPU is one NVIDIA model
    (`[[ "$GPU_NAME" == *H200* ]] || die ...`, the name read from `nvidia-smi --query-gpu=name`)."""
    code = text.code
    if not re.search(r"nvidia-smi[^\n]*(?:\\\n[^\n]*)*--query-gpu=[\w.,]*\bname\b|nvidia-smi[ \t]+-L\b", code):
        return None
    words = _model_word()
    for match in re.finditer(r"(?:==|!=|=~)[ \t]*([^\s\]&|;)]+)", code):
        model = next((w for w in re.split(r"[^A-Za-z0-9]+", match.group(1)) if w and words.match(w)), None)
        if model is None:
            continue
        start, end = text.logical_line(match.start())
        block = text.if_block(match.start())
        stops = _STOP.search(text.masked[start:end]) or (block and _STOP.search(text.masked[block[2]:block[4]]))
        if stops:
            return text.line_of(match.start()), model
    return None


def _fold_pinned(findings: list[Finding], pin: tuple[int, str]) -> list[Finding]:
    """The NVIDIA findings (NPU7xx errors and warnings) of a script pinned to one GPU model: one
    information, at the first, naming the others: the script is ported or dropped as a whole."""
    members = [f for f in findings if f.code.startswith("NPU7") and not f.fixable and f.severity != "info"]
    if len(members) < 2:
        return findings
    first, rest = members[0], members[1:]
    others = ", ".join(f"{f.code} at line {f.line}" for f in rest)
    line, model = pin
    kept = dataclasses.replace(
        first, severity="info",
        message=f"{_REWRITE_NOTE.sub('', first.message)} ({PINNED_REASON}: it stops unless the GPU is an NVIDIA {model} (line {line}); "
                f"port or drop it as a whole; also {others})",
        also=first.also + tuple(p for f in rest if f.code == first.code
                                for p in ((f.line, f.column, f.source), *f.also)))
    gone = {id(f) for f in members}
    return sorted([kept, *(f for f in findings if id(f) not in gone)])
