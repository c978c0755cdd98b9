"""Files that are not Python: launch scripts, configs, Dockerfiles, .env files and CUDA sources.

CUDA-only settings live outside the Python code too (patterns.md G38): `CUDA_VISIBLE_DEVICES=0,1
torchrun ...`, `nvidia-smi`, `NCCL_*` variables, `backend: nccl`, `FROM nvidia/cuda:...`, `pip install
flash-attn`. There is no parser of ours for these formats, so a small lexer per format tells code
from comments (and, for shell, splits commands into words); detectors then report each construct with
its Ascend counterpart (codes NPU701-NPU709, NPU912 in rules/codes_files.toml; the variable map is
rules/env.toml, shared with the Python rules).

The opt-in rewrite (`Options.rewrite_scripts`, shell scripts only) keeps a script working on both
kinds of host and changes nothing else: it sets the Ascend variable next to the CUDA one and lets a
bare `nvidia-smi` call npu-smi where that exists. What it cannot rewrite safely is only reported.
A rewritten script scanned again is left as it is: a construct whose Ascend side is already there
is not a finding.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import hashlib
import os
import re
from dataclasses import dataclass, field
from typing import Iterator, Optional

from . import catalogue, suppress, yamlscopes
from .findings import Finding
from .model import FileResult, Options

# ------------------------------------------------------------------------------------------------
# Which files


def target_kind(relpath: str) -> Optional[str]:
    """The format of a file this module scans, from its name; None for every other file."""
    name = relpath.replace("\\", "/").rsplit("/", 1)[-1].lower()
    if name.endswith((".sh", ".bash", ".zsh")):
        return "shell"
    if name.endswith((".yaml", ".yml")):
        return "yaml"
    if name.endswith(".toml"):
        return "toml"
    if name in ("dockerfile", "containerfile") or name.startswith(("dockerfile.", "containerfile.")) \
            or name.endswith(".dockerfile"):
        return "dockerfile"
    if name == ".env" or name.endswith(".env") or name.startswith(".env."):
        return "env"
    if name.endswith((".cu", ".cuh")):
        return "cuda-source"
    return None


# A file without any of these (or of the CUDA-only package names) cannot hold a construct the
# detectors look for: variables, images, backends and devices all contain one of them.
TRIGGERS = r"cuda|nccl|nvidia|pytorch/pytorch|--gpus|/whl/cu|\+cu\d"


# ------------------------------------------------------------------------------------------------
# Data from the rule tables


@dataclass(frozen=True)
class _Tables:
    renames: dict  # CUDA/NCCL variable -> Ascend variable (rules/env.toml [rename])
    names: re.Pattern  # every variable a detector looks at: renamed, NCCL_*, CUDA_*, NVIDIA_*
    device_words: frozenset  # words of a key or option that names a device (rules/device.toml)
    accelerator_keys: frozenset
    packages: dict  # normalised package name -> code of the Python diagnostic (or "")
    prefilter: re.Pattern  # bytes: a file without a match has nothing to report
    known: re.Pattern  # variables NCCL, CUDA and PyTorch read (rules/env.toml [known])


# Renamed variables whose value has no guaranteed NPU meaning: reported, never copied.
REPORT_ONLY_RENAMES = frozenset({"PYTORCH_CUDA_ALLOC_CONF"})
# Variables of the NVIDIA container toolkit (NPU709).
NVIDIA_CONTAINER_VARS = re.compile(r"NVIDIA_(?:VISIBLE_DEVICES|DRIVER_CAPABILITIES|REQUIRE_CUDA|MIG_CONFIG_DEVICES)")
# Package families: every `cupy-cuda12x` is cupy, every `nvidia-cudnn-cu12` a CUDA library wheel.
PACKAGE_FAMILIES = ("cupy", "nvidia")
# pip names whose import name differs; the flash-attn import is what npu_compat.flash_attn replaces.
PACKAGE_ALIASES = {"flash_attention": "flash_attn", "transformer_engine_torch": "transformer_engine"}
PACKAGE_SEE = {"flash_attn": "NPU501"}


@functools.lru_cache(maxsize=None)
def _tables() -> _Tables:
    env = catalogue.env_table()
    renames = dict(env.get("rename", {}))
    # A script cannot ask the installed torch_npu for its version as the shim's env_name does: it
    # gets the HCCL_* names, which every checked release reads (2.14.0 as deprecated aliases) where
    # torch_npu 2.7.1-2.10.0 ignore the TORCH_HCCL_* ones.
    renames.update(env.get("rename_by_version", {}).get("legacy", {}))
    report = env.get("report", {}).get("pattern", r"^(TORCH_)?NCCL_[A-Z0-9_]+$").strip("^$")
    cuda_vars = r"(?:TORCH_|PYTORCH_(?:NO_)?)?CUDA_[A-Z0-9_]+"  # CUDA_HOME, TORCH_CUDA_ARCH_LIST, ...
    listed = "|".join(sorted((re.escape(n) for n in renames), key=len, reverse=True))
    names = re.compile(rf"(?P<name>\b(?:{listed}|{report}|{NVIDIA_CONTAINER_VARS.pattern}|{cuda_vars})\b)")
    device = catalogue.device_table()
    sweep = catalogue.read_table("sweep.toml")  # the Python diagnostics' module -> code map
    packages = {}
    for module in sweep.get("guard", {}).get("modules", []) + sweep.get("modules", []):
        if "." not in module and module != "torch":
            packages[module] = ""
    for module, code in sweep.get("module_codes", {}).items():
        if "." not in module:
            packages[module] = code
    packages.update(PACKAGE_SEE)
    for module in sweep.get("ascend_plugin", []):  # vllm: runs on Ascend with its plugin
        packages.pop(module, None)
    spelled = "|".join(sorted(re.escape(p).replace("_", "[-_.]") for p in [*packages, *PACKAGE_ALIASES]))
    return _Tables(
        prefilter=re.compile(f"(?i){TRIGGERS}|{spelled}".encode()),
        renames=renames,
        names=names,
        device_words=frozenset(w.lower() for w in device.get("device_name_words", [])),
        accelerator_keys=frozenset(w.lower() for w in device.get("framework_accelerator_keywords", [])),
        packages=packages,
        known=re.compile(env.get("known", {}).get("pattern", r"(?!)")),
    )


# ------------------------------------------------------------------------------------------------
# Lexing: which characters are code, where commands start and end


@dataclass
class _Lexed:
    text: str
    code: str  # text with comments blanked to spaces (same length, same line breaks)
    units: list  # (start, end) of each command line (shell) or line (yaml/toml); heredocs excluded
    line_starts: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        self.unit_starts = [u[0] for u in self.units]

    def position(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of an offset; a UTF-8 BOM does not count as a column."""
        index = bisect.bisect_right(self.line_starts, offset) - 1
        column = offset - self.line_starts[index] + 1
        if index == 0 and self.text.startswith("\ufeff"):
            column -= 1
        return index + 1, max(column, 1)

    def unit_at(self, offset: int) -> Optional[tuple[int, int]]:
        index = bisect.bisect_right(self.unit_starts, offset) - 1
        if index >= 0 and self.units[index][0] <= offset < max(self.units[index][1], self.units[index][0] + 1):
            return self.units[index]
        return None

    def line_of(self, offset: int) -> tuple[int, int]:
        """(start, end) of the physical line holding offset, without its line break."""
        index = bisect.bisect_right(self.line_starts, offset) - 1
        start = self.line_starts[index]
        end = self.text.find("\n", start)
        end = len(self.text) if end < 0 else end
        if end > start and self.text[end - 1] == "\r":
            end -= 1
        return start, end


def _blank(text: str, ranges: list) -> str:
    if not ranges:
        return text
    parts, last = [], 0
    for start, end in sorted(ranges):
        if start < last:
            continue
        parts.append(text[last:start])
        parts.append("".join(c if c in "\r\n" else " " for c in text[start:end]))
        last = end
    parts.append(text[last:])
    return "".join(parts)


_COMMENT_AFTER = " \t\r\n;&|()\ufeff"  # a BOM is not part of a word


def _expansion(text: str, i: int) -> str:
    """The expansion a `$` at i opens: "$((", "$(", "${", or "" for none."""
    for opener in ("$((", "$(", "${"):
        if text.startswith(opener, i):
            return opener
    return ""


def _lex_shell(text: str) -> _Lexed:
    """POSIX-shell lexing (also used for Dockerfiles and .env files).

    Tracks quotes, `$(...)`, `$((...))`, `${...}` and backticks, so that a `#` inside them is not a
    comment and a newline inside them does not end the command; here-document bodies are not
    commands (their `#` lines are blanked, their text is still read by the reporting detectors).
    """
    n = len(text)
    stack: list[str] = []
    comments: list[tuple[int, int]] = []
    units: list[tuple[int, int]] = []
    pending: list[tuple[str, bool]] = []
    unit_start = 0
    i = 0
    while i < n:
        c = text[i]
        top = stack[-1] if stack else ""
        if top == "'":
            if c == "'":
                stack.pop()
            i += 1
            continue
        if c == "\\":
            i += 3 if text.startswith("\r\n", i + 1) else 2
            continue
        if top == "`":
            if c == "`":
                stack.pop()
            i += 1
            continue
        opener = _expansion(text, i) if c == "$" else None
        if opener:  # $(( )), $( ) and ${ } open a context inside double quotes and outside them
            stack.append(opener)
            i += len(opener)
            continue
        if top == '"':
            if c == '"':
                stack.pop()
            elif c == "`":
                stack.append("`")
            i += 1
            continue
        # command contexts: top level, $( ), ( ) inside them, ${ }, $(( ))
        if c == "#" and top in ("", "$(", "(") and (i == 0 or text[i - 1] in _COMMENT_AFTER):
            end = text.find("\n", i)
            end = n if end < 0 else end
            comments.append((i, end))
            i = end
            continue
        if c in "'\"`":
            stack.append(c)
        elif c == "(" and top in ("$(", "$((", "("):
            stack.append("(")
        elif c == ")" and top in ("$(", "("):
            stack.pop()
        elif c == ")" and top == "$((" and text.startswith(")", i + 1):
            stack.pop()
            i += 2
            continue
        elif c == "}" and top == "${":
            stack.pop()
        elif c == "<" and top == "" and text.startswith("<", i + 1):
            if text.startswith("<", i + 2):  # here-string
                i += 3
                continue
            i = _heredoc_operator(text, i + 2, pending)
            continue
        elif c == "\n" and top == "":
            units.append((unit_start, i))
            i += 1
            if pending:
                i = _heredoc_bodies(text, i, pending, comments)
            unit_start = i
            continue
        i += 1
    if unit_start < n:
        units.append((unit_start, n))
    return _Lexed(text, _blank(text, comments), units)


def _heredoc_operator(text: str, i: int, pending: list) -> int:
    """Read the delimiter after `<<` / `<<-`; returns the offset after it."""
    strip = text.startswith("-", i)
    if strip:
        i += 1
    while i < len(text) and text[i] in " \t":
        i += 1
    start = i
    while i < len(text) and text[i] not in " \t\r\n;&|<>()":
        i += 1
    delimiter = re.sub(r"[\"'\\]", "", text[start:i])
    if delimiter:
        pending.append((delimiter, strip))
    return i


def _heredoc_bodies(text: str, i: int, pending: list, comments: list) -> int:
    """Skip the bodies of the here-documents opened on the line before offset i."""
    n = len(text)
    for delimiter, strip in pending:
        while i < n:
            end = text.find("\n", i)
            end = n if end < 0 else end
            line = text[i:end].rstrip("\r")
            if (line.lstrip("\t") if strip else line) == delimiter:
                i = end + 1
                break
            if line.lstrip().startswith("#"):
                comments.append((i, end))
            i = end + 1
    pending.clear()
    return min(i, n)


def _lex_lines(text: str, kind: str) -> _Lexed:
    """YAML and TOML: `#` starts a comment outside quoted strings; every line is a unit.

    YAML opens a quote only where a quoted scalar can start (a plain scalar may hold an apostrophe);
    TOML's multi-line strings (\"\"\" and ''') span lines.
    """
    comments: list[tuple[int, int]] = []
    units: list[tuple[int, int]] = []
    multiline = ""  # TOML: the open multi-line string's quotes
    pos = 0
    for line in text.split("\n"):
        end = pos + len(line)
        units.append((pos, end))
        i = 0
        quote = multiline
        while i < len(line):
            c = line[i]
            if quote:
                if len(quote) == 3 and line.startswith(quote, i):
                    quote = ""
                    i += 3
                    continue
                if len(quote) == 1 and c == quote:
                    if kind == "yaml" and quote == "'" and line.startswith("''", i):
                        i += 2
                        continue
                    quote = ""
                elif c == "\\" and quote in ('"', '"""'):
                    i += 1
                i += 1
                continue
            if c == "#" and (kind == "toml" or i == 0 or line[i - 1] in " \t\ufeff"):
                comments.append((pos + i, end))
                break
            if c in "'\"":
                if kind == "toml" and line.startswith(c * 3, i):
                    quote = c * 3
                    i += 3
                    continue
                if kind == "toml" or i == 0 or line[i - 1] in " \t:[{,-=":
                    quote = c
            i += 1
        multiline = quote if len(quote) == 3 else ""
        pos = end + 1
    return _Lexed(text, _blank(text, comments), units)


def _lex(text: str, kind: str) -> _Lexed:
    return _lex_lines(text, kind) if kind in ("yaml", "toml") else _lex_shell(text)


# ------------------------------------------------------------------------------------------------
# Shell words and simple commands


@dataclass(frozen=True)
class _Tok:
    kind: str  # "word" or "op"
    text: str
    start: int
    end: int


_OPS = ("&&", "||", ";;", "|&", ">>", "<<", ">&", "<&", "&>", ";", "&", "|", "(", ")", "<", ">")
_REDIRECTS = frozenset({">>", "<<", ">&", "<&", "&>", "<", ">"})
_RESERVED = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "}", "time",
                       "fi", "done", "esac"})
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*(?:\[[^\]]*\])?\+?=")


def _group_end(code: str, i: int, end: int) -> int:
    """Offset after the quoted string, `$(...)`, `${...}` or backtick group starting at i."""
    c = code[i]
    if c == "'":
        k = code.find("'", i + 1, end)
        return end if k < 0 else k + 1
    if c == "`":
        j = i + 1
        while j < end:
            if code[j] == "\\":
                j += 2
                continue
            if code[j] == "`":
                return j + 1
            j += 1
        return end
    if c == '"':
        j = i + 1
        while j < end:
            ch = code[j]
            if ch == "\\":
                j += 2
            elif ch == '"':
                return j + 1
            elif ch in "$`" and (ch == "`" or code[j + 1:j + 2] in ("(", "{")):
                j = _group_end(code, j, end)
            else:
                j += 1
        return end
    closer = ")" if code.startswith("$(", i) else "}"
    j, depth = i + 2, 0
    while j < end:
        ch = code[j]
        if ch == "\\":
            j += 2
        elif ch in "'\"`" or (ch == "$" and code[j + 1:j + 2] in ("(", "{")):
            j = _group_end(code, j, end)
        elif ch == ("(" if closer == ")" else "{"):
            depth += 1
            j += 1
        elif ch == closer:
            if depth == 0:
                return j + 1
            depth -= 1
            j += 1
        else:
            j += 1
    return end


def _tokens(code: str, start: int, end: int) -> list[_Tok]:
    toks: list[_Tok] = []
    i = start
    while i < end:
        c = code[i]
        if c == "\\" and code.startswith("\n", i + 1):
            i += 2
            continue
        if c == "\\" and code.startswith("\r\n", i + 1):
            i += 3
            continue
        if c in " \t\r\n\ufeff":
            i += 1
            continue
        op = next((o for o in _OPS if code.startswith(o, i)), None)
        if op is not None:
            toks.append(_Tok("op", op, i, i + len(op)))
            i += len(op)
            continue
        j = i
        while j < end:
            ch = code[j]
            if ch == "\\":
                j += 2
            elif ch in "'\"`" or (ch == "$" and code[j + 1:j + 2] in ("(", "{")):
                j = _group_end(code, j, end)
            elif ch in " \t\r\n\ufeff;&|()<>":
                break
            else:
                j += 1
        j = min(j, end)
        toks.append(_Tok("word", code[i:j], i, j))
        i = j
    return toks


@dataclass
class _Command:
    """One simple command: reserved words skipped, then assignments, the command word, arguments."""

    assignments: list
    word: Optional[_Tok]
    args: list
    op_before: str
    op_after: str
    redirected: bool


def _commands(toks: list[_Tok]) -> list[_Command]:
    out: list[_Command] = []
    i, op_before = 0, ""
    while i <= len(toks):
        words: list[_Tok] = []
        redirected = False
        while i < len(toks) and not (toks[i].kind == "op" and toks[i].text not in _REDIRECTS):
            tok = toks[i]
            if tok.kind == "op":  # a redirection: its target is not an argument
                redirected = True
                i += 2
                continue
            nxt = toks[i + 1] if i + 1 < len(toks) else None
            if tok.text.isdigit() and nxt is not None and nxt.kind == "op" and nxt.start == tok.end \
                    and nxt.text in _REDIRECTS:
                i += 1  # the fd number of `2>&1`
                continue
            words.append(tok)
            i += 1
        op_after = toks[i].text if i < len(toks) else ""
        k = 0
        while k < len(words) and words[k].text in _RESERVED:
            k += 1
        assignments = []
        while k < len(words) and _ASSIGNMENT.match(words[k].text):
            assignments.append(words[k])
            k += 1
        word = words[k] if k < len(words) else None
        out.append(_Command(assignments, word, words[k + 1:], op_before, op_after, redirected))
        op_before = op_after
        i += 1
    return out


def _command_of(commands: list[_Command], offset: int) -> Optional[tuple[_Command, _Tok]]:
    for command in commands:
        for tok in command.assignments + ([command.word] if command.word else []) + command.args:
            if tok.start <= offset < tok.end:
                return command, tok
    return None


# ------------------------------------------------------------------------------------------------
# The scan of one file


@dataclass
class _Edit:
    start: int
    end: int
    text: str


@dataclass
class _Scan:
    relpath: str
    kind: str
    lexed: _Lexed
    options: Options
    suppressions: suppress.Suppressions
    findings: list = field(default_factory=list)
    edits: list = field(default_factory=list)
    suppressed: int = 0
    _seen: set = field(default_factory=set)
    _unit_cache: dict = field(default_factory=dict)
    _file_cache: dict = field(default_factory=dict)

    @property
    def rewriting(self) -> bool:
        return self.kind == "shell" and bool(getattr(self.options, "rewrite_scripts", False))

    def enabled(self, code: str) -> bool:
        return code in self.options.enabled

    def commands(self, unit: tuple[int, int]) -> list[_Command]:
        if unit not in self._unit_cache:
            self._unit_cache[unit] = _commands(_tokens(self.lexed.code, unit[0], unit[1]))
        return self._unit_cache[unit]

    def sets(self, name: str) -> bool:
        """The file assigns or exports `name` somewhere (a whole-file search, done once per name)."""
        return self._once(("sets", name), lambda: _assigns(self.lexed.code, name))

    def exports(self, name: str) -> bool:
        """The file exports `name` (`export NAME`, `declare -x NAME`), or every variable it sets
        (`set -a`, `set -o allexport`): a plain assignment of it reaches the commands it runs."""
        pattern = (rf"\b(?:export|declare[ \t]+-\w*x\w*)\b[^\n;&|]*\b{re.escape(name)}\b"
                   r"|\bset[ \t]+(?:-\w*a\w*|-o[ \t]+allexport)\b")
        return self._once(("exports", name), lambda: bool(re.search(pattern, self.lexed.code)))

    def mentions(self, name: str) -> bool:
        return self._once(("mentions", name), lambda: bool(re.search(rf"\b{re.escape(name)}\b", self.lexed.code)))

    def unsets(self, name: str) -> bool:
        pattern = rf"\bunset\b[^\n;&|]*\b{re.escape(name)}\b"
        return self._once(("unsets", name), lambda: bool(re.search(pattern, self.lexed.code)))

    def _once(self, key: tuple, compute) -> bool:
        if key not in self._file_cache:
            self._file_cache[key] = compute()
        return self._file_cache[key]

    def allowed(self, code: str, offset: int) -> bool:
        """Enabled, and not silenced by a suppression comment on its line (counted)."""
        line, column = self.lexed.position(offset)
        if not self.enabled(code) or (line, column, code) in self._seen:
            return False
        if self.suppressions.suppresses(code, line):
            self.suppressed += 1
            return False
        return True

    def add(self, code: str, offset: int, source: str, fixable: bool = False, note: str = "",
            **fmt: str) -> None:
        line, column = self.lexed.position(offset)
        if (line, column, code) in self._seen:
            return
        self._seen.add((line, column, code))
        rule = catalogue.rule(code)
        try:
            message = rule.message.format(**fmt)
        except (KeyError, IndexError):
            message = rule.message
        if note:
            message = f"{message} ({note})"
        source = re.sub(r"\s+", " ", source).strip()
        if len(source) > 200:
            source = source[:197] + "..."
        self.findings.append(Finding(self.relpath, line, column, code, message, fixable, source))


def _assigns(code: str, name: str) -> bool:
    """The file sets `name` (an assignment, `export name`, `ENV name`)."""
    return bool(
        re.search(rf"(?<![\w${{]){re.escape(name)}=", code)
        or re.search(rf"\b(?:export|ENV)[ \t]+(?:[^\n;&|]*?[ \t])?{re.escape(name)}\b", code)
    )


_ENV_BEFORE = re.compile(
    r"(?:\bexport|\bunset|\bENV|\bARG|\blocal|\bdeclare(?:\s+-\w+)*|\breadonly|\btypeset|\s-e|--env|"
    r"\bname:)\s+[\"']?$"
)


def _env_context(code: str, start: int, end: int, allow_colon: bool) -> bool:
    """An occurrence of a variable name that is a setting or a read, not a word in prose."""
    before = code[max(0, start - 40):start]
    after = code[end:end + 6]
    if before.endswith(("$", "${")):
        return True
    if re.match(r"[\"']?[ \t]*=" if not allow_colon else r"[\"']?[ \t]*[=:]", after):
        return True
    if _ENV_BEFORE.search(before):
        return True
    return before.endswith(("'", '"')) and after.startswith(("'", '"'))


def _counterpart_note(name: str, tables: _Tables) -> tuple[str, dict]:
    counterpart = tables.renames.get(name)
    if counterpart is None:
        return "NPU709" if NVIDIA_CONTAINER_VARS.fullmatch(name) else "NPU703", {"name": name, "what": name}
    code = "NPU701" if name == "CUDA_VISIBLE_DEVICES" else "NPU702"
    return code, {"name": name, "counterpart": counterpart}


def _visible_value_problem(value: str) -> str:
    """Why a CUDA_VISIBLE_DEVICES value may not be copied to ASCEND_RT_VISIBLE_DEVICES ('' if it may)."""
    if "$" in value or "`" in value:
        return ""
    literal = value.strip("\"'")
    if literal == "":
        return ""
    if not re.fullmatch(r"\d+(,\d+)*", literal):
        return "the value is not a list of device indices"
    numbers = [int(x) for x in literal.split(",")]
    if any(a >= b for a, b in zip(numbers, numbers[1:])):
        return "the list is not strictly ascending, which ASCEND_RT_VISIBLE_DEVICES requires"
    return ""


_UNSAFE_TO_COPY = re.compile(r"`|\$\(|\$\{[^}]*?:?=|RANDOM|\$\$|BASHPID")


def _scan_variables(scan: _Scan, tables: _Tables) -> None:
    code = scan.lexed.code
    for match in tables.names.finditer(code):
        name, start, end = match.group("name"), match.start("name"), match.end("name")
        finding_code, fmt = _counterpart_note(name, tables)
        if scan.kind == "shell":
            _shell_variable(scan, tables, name, start, end, finding_code, fmt)
            continue
        if not _env_context(code, start, end, allow_colon=scan.kind == "yaml"):
            continue
        counterpart = tables.renames.get(name)
        if counterpart and scan.mentions(counterpart):
            continue  # the file sets the Ascend variable too
        if scan.kind == "dockerfile" and counterpart is None and not tables.known.fullmatch(name) \
                and _run_local(scan, code, name, start, end):
            continue  # `RUN CUDA_MAJOR=$(...) && ...` and its `$CUDA_MAJOR`: the RUN shell's own variable
        if scan.allowed(finding_code, start):
            scan.add(finding_code, start, code[start:_word_end(code, end)], **fmt)


_RUN_STATEMENT_START = re.compile(r"(?:&&|\|\||;|\b(?:then|else|do)|\bRUN(?:(?:[ \t]|\\\n)+--[^\s\\]+)*)(?:[ \t]|\\\n)*$")
_LOCAL_VALUE_END = re.compile(r"""(?:\$\((?:[^()]|\([^()]*\))*\)|"[^"\n]*"|'[^'\n]*'|[^\s;&|]*)"""
                              r"""[ \t]*(?:&&|\|\||;|\\?[ \t]*\n|$)""")


def _run_local(scan: _Scan, code: str, name: str, start: int, end: int) -> bool:
    """This occurrence is a RUN-local assignment of `name`, or a reference (`$name`) to a name the
    Dockerfile only ever sets that way (never in ENV or ARG, never exported)."""
    if scan.exports(name):
        return False
    if _run_local_assignment(code, start, end):
        return True
    if not code[max(0, start - 2):start].endswith(("$", "${")):
        return False

    def only_local() -> bool:
        sets = [m for m in re.finditer(rf"(?<![\w$]){re.escape(name)}(?==)", code)]
        declared = re.search(rf"^[ \t]*(?:ENV|ARG)\b[^\n]*\b{re.escape(name)}\b", code, re.MULTILINE)
        return bool(sets) and not declared and all(_run_local_assignment(code, m.start(), m.end()) for m in sets)

    return scan._once(("run-local", name), only_local)


def _run_local_assignment(code: str, start: int, end: int) -> bool:
    """`NAME=value` as a statement of its own in a Dockerfile's RUN shell (after `RUN` and its
    options, `&&`, `;`, `then`, and followed by `&&`, `;` or the line's end), not a command's
    environment or ENV/ARG."""
    if code[end:end + 1] != "=" or not _RUN_STATEMENT_START.search(code[max(0, start - 200):start]):
        return False
    return bool(_LOCAL_VALUE_END.match(code, end + 1))


def _word_end(code: str, i: int) -> int:
    match = re.compile(r"[^\s;&|]*").match(code, i)
    return match.end() if match else i


def _shell_variable(scan: _Scan, tables: _Tables, name: str, start: int, end: int, finding_code: str,
                    fmt: dict) -> None:
    """A variable in a shell script: classify the occurrence, then rewrite, report or stay quiet."""
    code = scan.lexed.code
    counterpart = tables.renames.get(name)
    unit = scan.lexed.unit_at(start)
    found = _command_of(scan.commands(unit), start) if unit else None
    reference = code[max(0, start - 2):start].endswith(("$", "${"))
    role = "other"
    command = tok = None
    if found and not reference:
        command, tok = found
        head = command.word.text if command.word else ""
        if tok.start == start and tok.text.startswith(name + "="):
            if tok in command.assignments:
                role = "prefix" if command.word else "standalone"
            elif head == "export":
                role = "export"
            elif head == "env" and all(a.text.startswith("-") or _ASSIGNMENT.match(a.text)
                                        for a in command.args[:command.args.index(tok)]):
                role = "env"
            elif head in ("local", "declare", "typeset", "readonly"):
                role = "declare"
        elif tok.text == name and head in ("export", "unset") and tok in command.args:
            role = "export-bare" if head == "export" else "unset"
    elif reference:
        role = "reference"

    if role == "standalone" or (role == "declare" and command.word.text == "local"):
        if counterpart is None and not tables.known.fullmatch(name) and not scan.exports(name):
            return  # `NCCL_INSTALLED=$(pip show ...)`: the script's own variable, no process reads it
    if role == "reference":
        unit_text = code[unit[0]:unit[1]] if unit else ""
        if scan.sets(name) or (counterpart and counterpart in unit_text):
            return  # set by this script (reported there), or read together with its counterpart
    elif role == "other" and not _env_context(code, start, end, allow_colon=False):
        return
    if counterpart and _handled(scan, role, command, counterpart, start):
        return
    if not scan.allowed(finding_code, start):
        return

    source = tok.text if tok is not None and role != "reference" else name
    if counterpart is None:
        scan.add(finding_code, start, source, **fmt)
        return
    why = _why_not_rewritten(scan, name, role, command, tok)
    if why or not scan.rewriting:
        scan.add(finding_code, start, source, note=why or "the opt-in script rewrite can set both", **fmt)
        return
    if role in ("prefix", "env"):  # the same value on the same command
        scan.edits.append(_Edit(tok.end, tok.end, f" {counterpart}={tok.text[len(name) + 1:]}"))
        note = f"rewritten: {counterpart} set on the same command"
    else:  # exported on the next line; a bare `export NAME` copies it only when it is set
        line = f'export {counterpart}="${name}"' if role == "export" else \
            f'[ -z "${{{name}+x}}" ] || export {counterpart}="${name}"'
        _insert_line_after(scan, unit, line)
        note = f"rewritten: {counterpart} exported after it"
    scan.add(finding_code, start, source, fixable=True, note=note, **fmt)


def _handled(scan: _Scan, role: str, command: Optional[_Command], counterpart: str, offset: int) -> bool:
    """The script already sets the Ascend variable for this occurrence."""
    if role in ("prefix", "env") and command is not None:
        return any(t.text.startswith(counterpart + "=") for t in command.assignments + command.args)
    if role == "unset":
        return scan.unsets(counterpart)
    if role == "other":  # an argument (`docker run -e ...`) or text in a here-document
        if command is not None:
            return any(counterpart in t.text for t in command.args + command.assignments)
        start, end = scan.lexed.line_of(offset)
        return counterpart in scan.lexed.code[start:end]
    return scan.sets(counterpart)


def _why_not_rewritten(scan: _Scan, name: str, role: str, command: Optional[_Command],
                       tok: Optional[_Tok]) -> str:
    if name in REPORT_ONLY_RENAMES:
        return "not rewritten: its options are set by hand"
    if role in ("prefix", "env"):
        value = tok.text[len(name) + 1:]
        if _UNSAFE_TO_COPY.search(value):
            return "not rewritten: the value runs a command or has side effects"
        if name == "CUDA_VISIBLE_DEVICES":
            problem = _visible_value_problem(value)
            return f"not rewritten: {problem}" if problem else ""
        return ""
    if role in ("export", "export-bare"):
        unit = scan.lexed.unit_at(tok.start)
        commands = [c for c in scan.commands(unit) if c.word or c.assignments]
        plain = (lambda a: _ASSIGNMENT.match(a.text)) if role == "export" else \
            (lambda a: re.fullmatch(r"[A-Za-z_]\w*", a.text))
        alone = commands == [command] and not command.assignments and not command.redirected \
            and command.op_before == "" and command.op_after in ("", ";") \
            and all(plain(a) for a in command.args)
        if not alone:
            return "not rewritten: the export is not a command line of its own"
        if _continues_list(scan, unit):
            return "not rewritten: the export is part of a command list"
        if role == "export" and name == "CUDA_VISIBLE_DEVICES":
            problem = _visible_value_problem(tok.text[len(name) + 1:])
            return f"not rewritten: {problem}" if problem else ""
        return ""
    if role == "standalone":
        return "not rewritten: not exported here; export ASCEND_RT_VISIBLE_DEVICES where it is exported" \
            if name == "CUDA_VISIBLE_DEVICES" else "not rewritten: not exported here"
    if role == "reference":
        return "read from the caller's environment; on an NPU host the caller sets the Ascend variable"
    return "not rewritten: not a plain assignment or export"


def _continues_list(scan: _Scan, unit: tuple[int, int]) -> bool:
    """The command line before `unit` ends with `&&`, `||` or `|`, so `unit` belongs to its list."""
    index = bisect.bisect_left(scan.lexed.unit_starts, unit[0])
    while index > 0:
        index -= 1
        previous = scan.lexed.units[index]
        toks = _tokens(scan.lexed.code, previous[0], previous[1])
        if toks:
            return toks[-1].kind == "op" and toks[-1].text in ("&&", "||", "|", "|&")
    return False


def _insert_line_after(scan: _Scan, unit: tuple[int, int], line: str) -> None:
    text = scan.lexed.text
    first_start, _ = scan.lexed.line_of(unit[0])
    indent = re.match(r"[ \t]*", text[first_start:]).group(0)
    end = unit[1]
    if end < len(text):  # text[end] is the "\n" that ends the unit
        eol = "\r\n" if end > 0 and text[end - 1] == "\r" else "\n"
        scan.edits.append(_Edit(end + 1, end + 1, f"{indent}{line}{eol}"))
    else:  # the last line, without a line break: keep it that way
        eol = "\r\n" if "\r\n" in text else "\n"
        scan.edits.append(_Edit(end, end, f"{eol}{indent}{line}"))


# nvidia-smi -------------------------------------------------------------------------------------

_NVIDIA_SMI = re.compile(r"(?<![\w.-])nvidia-smi(?![\w-]|\.\w)")
SMI_BOTH = "{{ if command -v npu-smi >/dev/null 2>&1; then npu-smi info; else {smi}; fi; }}"


def _scan_nvidia_smi(scan: _Scan) -> None:
    code = scan.lexed.code
    for match in _NVIDIA_SMI.finditer(code):
        start = match.start()
        unit = scan.lexed.unit_at(start)
        span = unit if unit else scan.lexed.line_of(start)
        if "npu-smi" in code[span[0]:span[1]]:
            continue  # already calls npu-smi where it exists
        if not scan.allowed("NPU704", start):
            continue
        why = _smi_not_rewritable(scan, unit, start)
        found = _command_of(scan.commands(unit), start) if unit and scan.kind == "shell" else None
        source = found[1].text if found else "nvidia-smi"
        if scan.rewriting and not why:
            _, tok = found
            scan.edits.append(_Edit(tok.start, tok.end, SMI_BOTH.format(smi=tok.text)))
            scan.add("NPU704", start, source, fixable=True, note="rewritten: npu-smi info where it exists")
        elif scan.kind == "shell":
            scan.add("NPU704", start, source, note=why or "the opt-in script rewrite can call npu-smi")
        else:
            scan.add("NPU704", start, source)


def _smi_not_rewritable(scan: _Scan, unit: Optional[tuple[int, int]], start: int) -> str:
    if scan.kind != "shell":
        return "not a shell script"
    if unit is None:
        return "not rewritten: inside a here-document"
    found = _command_of(scan.commands(unit), start)
    if found is None:
        return "not rewritten: not a command"
    command, tok = found
    if tok is not command.word or not re.fullmatch(r"(?:[\w./-]*/)?nvidia-smi", tok.text):
        return "not rewritten: its output is captured or it is an argument"
    if command.op_before in ("|", "|&") or command.op_after in ("|", "|&"):
        return "not rewritten: its output is parsed"
    if command.args:
        return "not rewritten: npu-smi has other options and another output format"
    if command.assignments:
        return "not rewritten: it has variable assignments"
    return ""


# Keys and flags ---------------------------------------------------------------------------------

_BACKEND_KEY = re.compile(
    r"(?P<key>\b(?:[A-Za-z_][\w.-]*)?backend)[\"']?[ \t]*[:=][ \t]*[\"']?[\w:,]*?(?P<nccl>\bnccl\b)", re.I
)
_BACKEND_FLAG = re.compile(r"--(?P<key>[\w-]*backend)(?:=|[ \t]+)[\"']?[\w:,]*?(?P<nccl>\bnccl\b)", re.I)
_DEVICE_KEY = re.compile(
    r"(?P<key>\b[A-Za-z_][\w.-]*)[\"']?[ \t]*[:=][ \t]*[\"']?(?P<value>cuda(?::\d+)?)(?![\w.:/-])"
)
_DEVICE_FLAG = re.compile(r"--(?P<key>[\w-]+)(?:=|[ \t]+)[\"']?(?P<value>cuda(?::\d+)?)(?![\w.:/-])")


def _scan_backend(scan: _Scan) -> None:
    code = scan.lexed.code
    for regex in (_BACKEND_KEY, _BACKEND_FLAG):
        for match in regex.finditer(code):
            start = match.start("nccl")
            if scan.allowed("NPU705", start):
                scan.add("NPU705", start, match.group(0))


def _device_key(key: str, tables: _Tables) -> bool:
    lower = key.lower()
    words = set(re.split(r"[._-]+", lower))
    return bool(words & tables.device_words) or lower in tables.device_words or lower in tables.accelerator_keys


def _scan_device(scan: _Scan, tables: _Tables) -> None:
    code = scan.lexed.code
    for regex in (_DEVICE_KEY, _DEVICE_FLAG):
        for match in regex.finditer(code):
            if not _device_key(match.group("key"), tables):
                continue
            start = match.start("value")
            if scan.allowed("NPU706", start):
                scan.add("NPU706", start, match.group(0), value=match.group("value"))


# Images and containers --------------------------------------------------------------------------

_IMAGE = re.compile(
    r"(?<![\w./-])(?P<image>(?:docker\.io/)?(?:nvidia/cuda(?::[\w.-]+)?|pytorch/pytorch:[\w.-]+)(?![\w/.-])"
    r"|nvcr\.io/nvidia/[\w./-]+(?::[\w.-]+)?)"
)
_CONTAINER_GPU = re.compile(
    r"(?<![\w-])(?P<what>--gpus(?:=|[ \t]+)\S+"
    r"|runtime[\"']?[ \t]*[:=][ \t]*[\"']?nvidia\b"
    r"|driver[\"']?[ \t]*:[ \t]*[\"']?nvidia\b"
    r"|nvidia\.com/gpu\b)"
)


def _scan_containers(scan: _Scan) -> None:
    code = scan.lexed.code
    for match in _IMAGE.finditer(code):
        start = match.start("image")
        if scan.allowed("NPU707", start):
            scan.add("NPU707", start, match.group("image"), image=match.group("image"))
    for match in _CONTAINER_GPU.finditer(code):
        start = match.start("what")
        if scan.allowed("NPU709", start):
            scan.add("NPU709", start, match.group("what"), what=match.group("what"))


# pip install ------------------------------------------------------------------------------------

_PIP = re.compile(r"(?:[\w./-]*/)?pip(?:3(?:\.\d+)?)?")
_PIP_VALUE_OPTIONS = frozenset({
    "-r", "--requirement", "-c", "--constraint", "-i", "--index-url", "--extra-index-url", "-f",
    "--find-links", "-t", "--target", "--prefix", "--root", "--src", "--python-version", "--platform",
    "--implementation", "--abi", "--cache-dir", "--trusted-host", "--progress-bar", "--upgrade-strategy",
})  # not -e / --editable: what follows them is a requirement, read like the others
_CUDA_INDEX = re.compile(r"/whl/(?:nightly/)?cu\d+")


def _unquote(word: str) -> str:
    return re.sub(r"[\"'\\]", "", word)


def _package_name(spec: str) -> str:
    """The normalised project name of a requirement, wheel file name or VCS URL ('' if none)."""
    egg = re.search(r"[#&]egg=([\w.-]+)", spec)
    if egg:
        spec = egg.group(1)
    elif "://" in spec or spec.startswith("git+"):
        segment = spec.split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        spec = re.sub(r"\.git$", "", segment.split("@", 1)[0])
    if spec.endswith((".whl", ".tar.gz", ".zip")):
        spec = spec.rsplit("/", 1)[-1].split("-", 1)[0]
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", spec)
    return re.sub(r"[-_.]+", "_", match.group(0)).lower() if match else ""


def _cuda_package(name: str, tables: _Tables) -> Optional[str]:
    """The module the package provides, when it is CUDA-only."""
    name = PACKAGE_ALIASES.get(name, name)
    if "ascend" in name or "npu" in name.split("_"):
        return None
    if name in tables.packages:
        return name
    for family in PACKAGE_FAMILIES:
        if name.startswith(family + "_") and family in tables.packages:
            return family
    return None


def _install_args(toks: list[_Tok]) -> Iterator[list[_Tok]]:
    """The argument words of every `pip install` / `python -m pip install` / `uv pip install`."""
    words = [t if t.kind == "word" else None for t in toks]
    for i, tok in enumerate(words):
        if tok is None or i + 1 >= len(words) or words[i + 1] is None:
            continue
        if _PIP.fullmatch(_unquote(tok.text)) and _unquote(words[i + 1].text) == "install":
            args = []
            for later in words[i + 2:]:
                if later is None:
                    break
                args.append(later)
            yield args


def _scan_pip(scan: _Scan, tables: _Tables) -> None:
    code = scan.lexed.code
    if not re.search(r"\bpip", code):
        return
    for unit in scan.lexed.units:
        if "pip" not in code[unit[0]:unit[1]]:
            continue
        for args in _install_args(_tokens(code, unit[0], unit[1])):
            expects_value = False
            for tok in args:
                word = _unquote(tok.text)
                if expects_value or word.startswith("-"):
                    value = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
                    if _CUDA_INDEX.search(value) and scan.allowed("NPU708", tok.start):
                        scan.add("NPU708", tok.start, tok.text, what="torch from a CUDA wheel index",
                                 note="install the CPU build of torch and torch-npu on NPU")
                    expects_value = not expects_value and word in _PIP_VALUE_OPTIONS
                    continue
                _report_package(scan, tables, tok, word)


def _report_package(scan: _Scan, tables: _Tables, tok: _Tok, word: str) -> None:
    name = _package_name(word)
    if name == "torch" and re.search(r"\+cu\d+", word):
        if scan.allowed("NPU708", tok.start):
            scan.add("NPU708", tok.start, tok.text, what=word, note="the CUDA build of torch; on NPU install "
                     "the CPU build and torch-npu")
        return
    module = _cuda_package(name, tables)
    if module is None or not scan.allowed("NPU708", tok.start):
        return
    see = tables.packages.get(module) or "NPU911"
    # the project's name, not the spelling (`flash-attn==2.5.8`, a wheel URL: the source keeps it),
    # so that installs of one package in one file make one finding (per_file = "message")
    scan.add("NPU708", tok.start, tok.text, what=name.replace("_", "-"), note=f"see {see}: {catalogue.rule(see).name}")


# ------------------------------------------------------------------------------------------------
# Entry point


def _apply(text: str, edits: list[_Edit]) -> str:
    out, last = [], 0
    for edit in sorted(edits, key=lambda e: (e.start, e.end)):
        if edit.start < last:
            continue  # overlapping edits cannot happen; never apply one twice
        out.append(text[last:edit.start])
        out.append(edit.text)
        last = edit.end
    out.append(text[last:])
    return "".join(out)


def group_cuda_headers(results: list[FileResult]) -> list[FileResult]:
    """NPU912 once per folder of `.cuh` headers, not once per header.

    A folder of vendored CUDA headers (CUB, CUTLASS, a kernel library's includes) is one thing to
    replace; a finding per header buries the `.cu` files that need porting. The first header of
    each folder (in path order) keeps the finding, which now counts and names the others; the
    other headers' NPU912 findings go. A folder with a single header, and every `.cu` file (each a
    translation unit to port), keep their own finding, except that byte-identical `.cu` files (a
    kernel tree shipped twice) make one finding, on the first path, naming the copies. This runs over a whole run's results, after
    the per-file engine (and its cache): `results` is not changed, a new list is returned.
    Headers in a folder that has a `.cu` of its own are named in that file's finding instead
    (`_fold_headers_into_sources`); byte-identical copies are grouped first, so that the `.cu`
    naming the headers is the one that keeps its finding.
    """
    results = _fold_headers_into_sources(_group_identical_sources(results))
    folders: dict[str, list[int]] = {}
    for index, result in enumerate(results):
        if result.relpath.lower().endswith(".cuh") and any(f.code == "NPU912" for f in result.findings):
            folders.setdefault(os.path.dirname(result.relpath), []).append(index)
    out = list(results)
    for folder, indexes in folders.items():
        if len(indexes) < 2:
            continue
        indexes.sort(key=lambda i: results[i].relpath)
        first, rest = indexes[0], indexes[1:]
        names = [_header_name(results[i]) for i in rest]
        shown = ", ".join(names[:MAX_HEADERS_NAMED])
        more = f" and {len(names) - MAX_HEADERS_NAMED} more" if len(names) > MAX_HEADERS_NAMED else ""
        where = f"`{folder}/`" if folder else "the root folder"
        kept = []
        for finding in results[first].findings:
            if finding.code == "NPU912":
                finding = dataclasses.replace(
                    finding,
                    message=f"{finding.message} ({len(indexes)} CUDA headers in {where}, reported once for "
                            f"the folder; also {shown}{more})",
                    source=f"{folder}/*.cuh" if folder else "*.cuh",
                )
            kept.append(finding)
        out[first] = dataclasses.replace(results[first], findings=kept)
        for i in rest:
            out[i] = dataclasses.replace(results[i], findings=[f for f in results[i].findings if f.code != "NPU912"])
    return out


_COPIES_NOTE = re.compile(r" (\(byte-identical (?:copy|copies): .*\))$")


def _header_name(result: FileResult) -> str:
    """A folded header as the finding that takes it in names it: its file name, with the copies
    its own finding named (`_group_identical_sources`), which would otherwise go unnamed."""
    name = os.path.basename(result.relpath)
    note = next((m.group(1) for f in result.findings if f.code == "NPU912"
                 for m in [_COPIES_NOTE.search(f.message)] if m), None)
    return f"{name} {note}" if note else name


def _fold_headers_into_sources(results: list[FileResult]) -> list[FileResult]:
    """A folder's `.cuh` headers are part of the `.cu` beside them (`embed.cuh` next to
    `embed_cuda.cu`): porting that translation unit ports its headers, so they are named in the
    first `.cu` file's NPU912 finding (path order) instead of making findings of their own. A folder
    with headers and no `.cu` keeps its header finding (grouped per folder below)."""
    sources: dict[str, int] = {}
    headers: dict[str, list[int]] = {}
    for index, result in enumerate(results):
        if not any(f.code == "NPU912" for f in result.findings):
            continue
        folder, lower = os.path.dirname(result.relpath), result.relpath.lower()
        if lower.endswith(".cu"):
            if folder not in sources or result.relpath < results[sources[folder]].relpath:
                sources[folder] = index
        elif lower.endswith(".cuh"):
            headers.setdefault(folder, []).append(index)
    out = list(results)
    for folder, indexes in headers.items():
        if folder not in sources:
            continue
        host = sources[folder]
        names = sorted(_header_name(results[i]) for i in indexes)
        shown = ", ".join(names[:MAX_HEADERS_NAMED])
        more = f" and {len(names) - MAX_HEADERS_NAMED} more" if len(names) > MAX_HEADERS_NAMED else ""
        noun = "header" if len(names) == 1 else "headers"
        out[host] = dataclasses.replace(out[host], findings=[
            dataclasses.replace(f, message=f"{f.message} (with the CUDA {noun} beside it: {shown}{more})")
            if f.code == "NPU912" else f for f in out[host].findings])
        for i in indexes:
            out[i] = dataclasses.replace(out[i], findings=[f for f in out[i].findings if f.code != "NPU912"])
    return out


MAX_HEADERS_NAMED = 10

# Folders that hold the ROCm/HIP build of a project's kernels (vLLM's csrc/rocm/): HIP C++ that keeps
# the .cu suffix, compiled only for AMD GPUs, so not CUDA to port (NPU912).
ROCM_FOLDERS = frozenset({"rocm", "hip", "amd"})


def rocm_source(relpath: str) -> bool:
    """A `.cu`/`.cuh` file under a folder named rocm, hip or amd (any case)."""
    return any(part.lower() in ROCM_FOLDERS for part in relpath.replace("\\", "/").split("/")[:-1])


def _group_identical_sources(results: list[FileResult]) -> list[FileResult]:
    """Report-only findings once per set of byte-identical files (a kernel tree or an op-builder
    package shipped twice, `op_builder/` beside `deepspeed/ops/op_builder/`): the first path keeps
    its findings, which name the copies; the copies keep their rewrites (each copy is a file that
    runs) but not the findings the first one already reports."""
    copies: dict[bytes, list[int]] = {}
    for index, result in enumerate(results):
        if result.original is not None and any(not f.fixable for f in result.findings):
            copies.setdefault(hashlib.sha256(result.original).digest(), []).append(index)
    out = list(results)
    for indexes in copies.values():
        if len(indexes) < 2:
            continue
        indexes.sort(key=lambda i: results[i].relpath)
        first, rest = indexes[0], indexes[1:]
        names = [results[i].relpath for i in rest]
        shown = ", ".join(f"`{n}`" for n in names[:MAX_HEADERS_NAMED])
        more = f" and {len(names) - MAX_HEADERS_NAMED} more" if len(names) > MAX_HEADERS_NAMED else ""
        noun = "copy" if len(names) == 1 else "copies"
        out[first] = dataclasses.replace(results[first], findings=[
            f if f.fixable else dataclasses.replace(f, message=f"{f.message} (byte-identical {noun}: {shown}{more})")
            for f in results[first].findings])
        for i in rest:
            out[i] = dataclasses.replace(results[i], findings=[f for f in results[i].findings if f.fixable])
    return out


def scan_text_file(source: bytes, relpath: str, options: Options) -> FileResult:
    """Findings (and, opt-in, a dual-host rewrite of a shell script) for one non-Python file.

    Never raises for bad input: a binary file is reported as NPU002 and left alone; bytes that are
    not UTF-8 are read with surrogateescape, so they come back unchanged in the output.
    """
    result = FileResult(relpath=relpath, original=source)
    kind = target_kind(relpath)
    if kind is None:
        result.skipped = "not a script, config or CUDA source"
        return result
    if kind == "cuda-source":
        if rocm_source(relpath):
            result.skipped = "ROCm/HIP source (in a rocm, hip or amd folder)"
            return result
        if "NPU912" in options.enabled:
            name = os.path.basename(relpath)
            result.findings.append(Finding(relpath, 1, 1, "NPU912", catalogue.rule("NPU912").message, False, name))
        return result
    if b"\0" in source:
        if "NPU002" in options.enabled:
            rule = catalogue.rule("NPU002")
            result.findings.append(Finding(relpath, 1, 1, "NPU002", f"{rule.message}: binary content (NUL bytes)",
                                           False, ""))
        return result
    tables = _tables()
    if not tables.prefilter.search(source):
        result.skipped = "no CUDA trigger words"
        return result
    supp = suppress.Suppressions()
    suppress.parse_lines(source, supp)  # `#` comments, one physical line each (not Python tokens)
    if supp.skips_file:
        result.skipped = "npu-migrate: skip-file comment"
        return result
    text = source.decode("utf-8", "surrogateescape")
    scan = _Scan(relpath, kind, _lex(text, kind), options, supp)
    try:
        _scan_variables(scan, tables)
        _scan_nvidia_smi(scan)
        _scan_backend(scan)
        _scan_device(scan, tables)
        _scan_containers(scan)
        _scan_pip(scan, tables)
    except RecursionError:  # quotes and $( ) nested thousands deep: read no further, change nothing
        scan.edits.clear()
        if "NPU001" in options.enabled:
            rule = catalogue.rule("NPU001")
            scan.findings.append(Finding(relpath, 1, 1, "NPU001", f"{rule.message}: nested too deeply", False, ""))
    result.findings = sorted(scan.findings)
    if result.findings:  # an AMD/ROCm script, by name or code: a named skipped file (configs20.py)
        from .configs20 import vendor_script_reason

        why = vendor_script_reason(relpath, kind, scan.lexed.code)
        if why:
            result.findings, result.skipped = [], why
            return result
    if kind in ("shell", "yaml") and result.findings:  # nvidia-smi probes, NVIDIA variables read with a fallback
        from .shellprobes import review as review_probes

        result.findings = review_probes(result.findings, scan.lexed.code)
        if kind == "shell":  # (a script that exits 0 where its CUDA variable is unset: labels8.py)
            from .labels8 import review_exit_probe

            result.findings = review_exit_probe(result.findings, scan.lexed.code)
            from .cudabuilds31 import review as review_cuda_builds  # (a CUDA-only package's build script: cudabuilds31.py)

            result.findings = review_cuda_builds(result.findings, scan.lexed.code)
            from .cudaonly21 import review_shell_labels  # (a "cuda" mode label only compared: cudaonly21.py)

            result.findings = review_shell_labels(result.findings, scan.lexed.code)
    if kind == "yaml" and result.findings:  # documentation, CUDA CI jobs, platform-aware entries
        result.findings, result.skipped_scopes = yamlscopes.refine(
            text, scan.lexed.code, relpath, result.findings, options.enabled)
        result.findings.sort()
    result.suppressed = scan.suppressed
    if scan.edits:
        new = _apply(text, scan.edits).encode("utf-8", "surrogateescape")
        if new != source:
            result.new = new
    return result
