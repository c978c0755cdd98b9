"""Every git command the tool runs goes through here, so that a repository we do not trust (a
downloaded project, pull-request code in CI) cannot make git run a program of its choosing.

A repository's configuration (`.git/config`, the files it pulls in with `include.path` and
`includeIf`, `config.worktree`) can name programs that git runs on its own: `core.fsmonitor` on
every read of the index (`ls-files`, `status`, `diff`), clean filters (`filter.<driver>.clean`
and `.process`, selected by the work tree's `.gitattributes`) whenever `status` or `diff`
re-hashes a file, textconv and external diff drivers in `diff`, hooks, pagers, editors,
credential helpers, ssh commands and remote helpers (a partial clone fetches missing objects
on demand). So each command runs:

- with a sanitised environment: `GIT_CONFIG_NOSYSTEM=1` (no system-wide configuration),
  `GIT_TERMINAL_PROMPT=0`, `GIT_OPTIONAL_LOCKS=0` (`status` does not write the index back),
  `GIT_NO_LAZY_FETCH=1` (git >= 2.44: a partial clone does not fetch), no `GIT_EXTERNAL_DIFF`,
  stdin from /dev/null;
- with `FIXED_OPTIONS` on the command line, whatever the configuration holds;
- with every key of the effective configuration that can name a program (`PROGRAM_KEYS`)
  overridden by a harmless value on the command line, which beats every configuration file.
  The effective configuration is read first with `git config --list --null`, which parses the
  files (following their includes) and runs nothing;
- with per-command flags (`SUBCOMMAND_FLAGS`): `diff` with `--no-ext-diff --no-textconv`,
  `status` and `diff` with `--ignore-submodules=dirty` (no `git status` run inside submodules,
  whose configuration we have not read);
- only for the read-only builtins in `SUBCOMMAND_FLAGS` (an alias never shadows a builtin).

A key that must be overridden but cannot be (its name holds `=`, which `-c` cannot express)
makes the command fail with GitError rather than run: callers treat that as "no git".
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
from pathlib import Path


class GitError(Exception):
    """git failed: not a work tree, unknown revision, no merge base (shallow clone?), or a
    configuration that cannot be made safe."""


# Always on the command line (they also hold where the configuration does not set them).
FIXED_OPTIONS: tuple[tuple[str, str], ...] = (
    ("core.quotepath", "off"),  # paths as they are, not octal-escaped
    ("core.fsmonitor", ""),  # the fsmonitor hook, run on every read of the index ("" is off for
    #                           git < 2.36, where the value is a path, and for later gits: false)
    ("core.hooksPath", "/dev/null"),  # no hook can be found (post-index-change, pre-auto-gc...)
    ("core.pager", "cat"),
    ("core.editor", ":"),
    ("sequence.editor", ":"),
    ("core.askPass", ""),
    ("core.sshCommand", ""),
    ("core.gitProxy", ""),
    ("credential.helper", ""),  # an empty value clears the list of helpers
    ("diff.external", ""),
    ("protocol.allow", "never"),  # no transport at all (a lazy fetch of a partial clone)
    ("submodule.recurse", "false"),
    ("status.submoduleSummary", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("safe.bareRepository", "explicit"),  # a bare repository planted in a project is not used
)

# Configuration keys that can make git (or one of its scripts) run a program, from git-config(1)
# and the manual pages it points to, with the harmless value each gets. Patterns match the key
# with its section and variable names lower-cased; `*` stands for a subsection (a driver, tool,
# remote or URL name).
PROGRAM_KEYS: tuple[tuple[str, str], ...] = (
    # read by the commands this tool runs (ls-files, status, diff, rev-parse, merge-base)
    ("core.fsmonitor", ""),
    ("core.hookspath", "/dev/null"),
    ("filter.*.clean", ""),  # an empty command is no filter
    ("filter.*.smudge", ""),
    ("filter.*.process", ""),
    ("filter.*.required", "false"),  # ... and its absence is not an error
    ("diff.external", ""),
    ("diff.*.command", ""),
    ("diff.*.textconv", ""),
    ("status.submodulesummary", "false"),  # runs `git submodule summary`
    ("core.alternaterefscommand", ""),
    # transports: a partial clone fetches missing objects on demand
    ("protocol.allow", "never"),
    ("protocol.*.allow", "never"),  # ext:: runs any command; file:// runs remote.*.uploadpack
    ("remote.*.uploadpack", ""),
    ("remote.*.receivepack", ""),
    ("remote.*.vcs", ""),  # a remote helper, git-remote-<vcs>
    ("core.sshcommand", ""),
    ("core.gitproxy", ""),
    ("uploadpack.packobjectshook", ""),
    ("credential.helper", ""),
    ("credential.*.helper", ""),
    ("core.askpass", ""),
    # pagers and editors
    ("core.pager", "cat"),
    ("pager.*", "false"),
    ("core.editor", ":"),
    ("sequence.editor", ":"),
    # other commands' programs: not run by the commands above, neutralised all the same
    ("gpg.program", ""),
    ("gpg.*.program", ""),
    ("gpg.ssh.defaultkeycommand", ""),
    ("merge.*.driver", ""),
    ("diff.tool", ""),
    ("diff.guitool", ""),
    ("merge.tool", ""),
    ("merge.guitool", ""),
    ("difftool.*.cmd", ""),
    ("difftool.*.path", ""),
    ("mergetool.*.cmd", ""),
    ("mergetool.*.path", ""),
    ("guitool.*.cmd", ""),
    ("trailer.*.command", ""),
    ("trailer.*.cmd", ""),
    ("submodule.*.update", "none"),  # `!command`
    ("imap.tunnel", ""),
    ("sendemail.smtpserver", ""),
    ("sendemail.*.smtpserver", ""),
    ("sendemail.sendmailcmd", ""),
    ("sendemail.*.sendmailcmd", ""),
    ("sendemail.tocmd", ""),
    ("sendemail.*.tocmd", ""),
    ("sendemail.cccmd", ""),
    ("sendemail.*.cccmd", ""),
    ("sendemail.headercmd", ""),
    ("sendemail.*.headercmd", ""),
    ("web.browser", ""),
    ("help.browser", ""),
    ("instaweb.browser", ""),
    ("browser.*.cmd", ""),
    ("browser.*.path", ""),
    ("man.viewer", ""),
    ("man.*.cmd", ""),
    ("man.*.path", ""),
)

# The builtins this module runs, with the flags each always gets.
SUBCOMMAND_FLAGS: dict[str, tuple[str, ...]] = {
    "rev-parse": (),
    "ls-files": (),
    "merge-base": (),
    "status": ("--ignore-submodules=dirty",),
    "diff": ("--no-ext-diff", "--no-textconv", "--ignore-submodules=dirty"),
}

LIST_TIMEOUT = 60


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GIT_EXTERNAL_DIFF"}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", GIT_NO_LAZY_FETCH="1")
    return env


def _options(pairs) -> list[str]:
    out = []
    for key, value in pairs:
        out += ["-c", f"{key}={value}"]
    return out


def _harmless(key: str) -> str | None:
    """The value that neutralises `key`, or None when it cannot run a program."""
    section, dot, rest = key.partition(".")
    if not dot:
        return None
    subsection, dot, variable = rest.rpartition(".")
    # section and variable names are case-insensitive, a subsection is not (`*` matches any,
    # the empty one of `[filter ""]` included)
    name = f"{section.lower()}.{subsection}.{variable.lower()}" if dot else f"{section.lower()}.{variable.lower()}"
    for pattern, value in PROGRAM_KEYS:
        if fnmatch.fnmatchcase(name, pattern):
            return value
    return None


def parse_config_list(data: bytes) -> list[str]:
    """The keys in `git config --list --null` output (entries end with NUL; a key is followed by
    a newline and its value, or by nothing for a bare boolean)."""
    keys = []
    for entry in data.decode("utf-8", "surrogateescape").split("\0"):
        key = entry.split("\n", 1)[0]
        if key:
            keys.append(key)
    return keys


def overrides(keys) -> list[tuple[str, str]]:
    """(key, harmless value) for each key that can run a program. Raises GitError for such a key
    that `-c` cannot express."""
    out: dict[str, str] = {}
    for key in keys:
        value = _harmless(key)
        if value is None:
            continue
        if "=" in key:
            raise GitError(f"the git configuration sets {key!r}, which names a program and cannot be "
                           "overridden; not running git in this repository")
        out[key] = value
    return list(out.items())


def _run(argv: list[str], cwd: Path, timeout: float) -> bytes:
    try:
        proc = subprocess.run(
            argv, cwd=cwd, env=environment(), stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise GitError(str(exc)) from None
    if proc.returncode != 0:
        message = proc.stderr.decode("utf-8", "replace").strip() or f"exit {proc.returncode}"
        raise GitError(message)
    return proc.stdout


def git(args: list[str], cwd: Path, timeout: float = 300) -> str:
    """Run `git ARGS` in cwd (args[0] a builtin of SUBCOMMAND_FLAGS) so that nothing the
    repository configures can run; its standard output. Raises GitError."""
    if not args or args[0] not in SUBCOMMAND_FLAGS:
        raise ValueError(f"safegit runs only {', '.join(SUBCOMMAND_FLAGS)}, not {args[:1]}")
    base = ["git", "--no-pager", *_options(FIXED_OPTIONS)]
    shown = f"git {' '.join(args)}"
    try:
        listing = _run([*base, "config", "--list", "--null"], cwd, LIST_TIMEOUT)
        extra = _options(overrides(parse_config_list(listing)))
        out = _run([*base, *extra, args[0], *SUBCOMMAND_FLAGS[args[0]], *args[1:]], cwd, timeout)
    except GitError as exc:
        raise GitError(f"{shown}: {exc}") from None
    return out.decode("utf-8", "surrogateescape")
