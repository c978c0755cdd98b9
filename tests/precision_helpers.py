"""Shared by the precision tests (issue #16): a project written into a temporary folder, migrated
as a user runs it (`npu-migrate migrate --dry-run --output-format json`), and the skipped scopes
that findings about code an NPU host never runs became (npu_migrate/moot.py)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from click.testing import CliRunner

from npu_migrate.cli import main


def write_project(tmp_path: Path, files: dict[str, str], dedent: bool = False) -> Path:
    """`files` ({relative path: text}) under tmp_path/project; the project's folder."""
    root = tmp_path / "project"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text) if dedent else text)
    return root


def migrate_json(root: Path) -> dict:
    """The JSON report of a dry run over `root` (one worker, no cache, no configuration)."""
    result = CliRunner().invoke(
        main, ["migrate", str(root), "--dry-run", "--no-cache", "--isolated", "--allow-dirty", "-j", "1",
               "--output-format", "json"],
        catch_exceptions=False,
    )
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.stdout)
    assert not report["errors"], report["errors"]
    return report


def moot_lines(skipped: list[dict], code: str | None = None, path: str | None = None) -> dict[int, str]:
    """{line: reason} of the named scopes that findings (of `code`, in `path`) about code an NPU
    host never runs became: every line of each scope."""
    prefix = f"not run on an NPU host ({code}): " if code else "not run on an NPU host ("
    out = {}
    for scope in skipped:
        if "start_line" in scope and (path is None or scope["path"] == path) and scope["reason"].startswith(prefix):
            for line in range(scope["start_line"], scope["end_line"] + 1):
                out[line] = scope["reason"]
    return out


AS_WRITTEN_PREFIX = "runs as written on an NPU host ("


def with_as_written(report: dict) -> list[dict]:
    """The report-only findings, plus one `{path, line, code, severity: "info", message, scope:
    True}` per scope moot.py named "runs as written on an NPU host (CODE): ..." (a guarded import
    whose fallback runs): tests that classify guarded imports read both the same way, and check
    with `scope` that such an import is a named scope, not a finding."""
    out = [f for f in report["findings"] if not f["fixable"]]
    for entry in report["skipped"]:
        reason = entry.get("reason", "")
        if "start_line" in entry and reason.startswith(AS_WRITTEN_PREFIX):
            code = reason[len(AS_WRITTEN_PREFIX):].split(")", 1)[0]
            out.append({"path": entry["path"], "line": entry["start_line"], "code": code,
                        "severity": "info", "message": reason, "fixable": False, "scope": True})
    return out


def findings_at(report: dict, path: str, code: str) -> dict[int, dict]:
    """{line: finding} of the report-only findings of `code` in `path`."""
    return {f["line"]: f for f in report["findings"] if f["path"] == path and f["code"] == code and not f["fixable"]}


def scopes_at(report: dict, path: str, code: str) -> dict[int, str]:
    """{first line: reason} of the skipped scopes that findings of `code` in `path` became."""
    return {s["start_line"]: s["reason"] for s in report["skipped"]
            if s.get("path") == path and "start_line" in s and f"({code})" in s["reason"]}


# vLLM's `Platform.verify_quantization` as the vllm-ascend fact tests need it (tests/test_h146.py ... test_h174.py)
VLLM_PLATFORM_INTERFACE = '''class Platform:
    supported_quantization: list[str] = []

    @classmethod
    def verify_quantization(cls, quant: str) -> None:
        if cls.supported_quantization and quant not in cls.supported_quantization:
            raise ValueError(f"{quant} quantization is currently not supported")
'''


# Finding and scope lookups several precision tests share (one copy; the duplicate report of session 44)


def finding_at(report: dict, path: str, code: str, line_text: str, files: dict) -> dict:
    """The one report-only finding of `code` in `path` with a place on the first line holding `line_text`."""
    line = next(n for n, text in enumerate(files[path].splitlines(), 1) if line_text in text)
    found = [f for f in report["findings"] if f["path"] == path and f["code"] == code and not f["fixable"]
             and (f["line"] == line or any(a[0] == line for a in f.get("also", ())))]
    assert len(found) == 1, (path, code, line, [(f["line"], f["code"], f["message"]) for f in report["findings"]
                                                if f["path"] == path])
    return found[0]


def finding_places(report: dict, path: str, code: str) -> dict[int, dict]:
    """{line: finding} of every place of the report-only findings of `code` in `path`."""
    places = {}
    for f in report["findings"]:
        if f["path"] == path and f["code"] == code and not f["fixable"]:
            places[f["line"]] = f
            for line, _column, _source in f.get("also") or ():
                places.setdefault(line, f)
    return places


def scope_reasons(report: dict, path: str, code: str) -> dict[int, str]:
    """{line: reason} of the named skipped scopes of `code` in `path`."""
    return {line: s["reason"] for s in report["skipped"] if s.get("path") == path and "start_line" in s
            and f"({code})" in s["reason"] for line in range(s["start_line"], s["end_line"] + 1)}
