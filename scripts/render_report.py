#!/usr/bin/env python3
"""See the HTML migration report as a reader does: run a dry run with --report on a project and
take a screenshot of the page with headless Chromium.

    python scripts/render_report.py PROJECT [--html REPORT.html] [--png REPORT.png]
                                    [--window-size 1280,2400] [--chromium PATH] [-- MIGRATE OPTIONS...]

The run is `python -m npu_migrate migrate PROJECT --dry-run --no-cache --report REPORT.html -q`
with this interpreter (the project's files are never written: a dry run, no cache folder). The
report goes to --html (default: a temporary folder, removed afterwards), the screenshot to --png
(default: ./<project name>-report.png). The report's links are relative to its folder: keep it
with --html to open it and follow them.

Chromium runs with a new, empty profile folder and without network features:
--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking
--disable-component-update --disable-sync --user-data-dir=<new temporary folder>
--screenshot=PNG --window-size=W,H. The page is self-contained (no script, no request), so the
screenshot shows what a reader sees. Chromium is `chromium` on PATH, /usr/bin/chromium, or
--chromium (Debian: `apt-get install chromium`).

Exit status: 0 when the report and the screenshot were written (whatever the run found), 2 when
the run failed (exit 2) or Chromium is missing or wrote no screenshot.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)


def find_chromium(given: str | None) -> str | None:
    if given:
        return given if Path(given).is_file() else shutil.which(given)
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").is_file() else None


def write_report(project: Path, html: Path, extra: list[str]) -> int:
    """The dry run; its exit status (0 or 1: the report is written; 2: the run failed)."""
    command = [sys.executable, "-m", "npu_migrate", "migrate", str(project), "--dry-run", "--no-cache",
               "--report", str(html), "-q", *extra]
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode not in (0, 1) or not html.is_file():
        sys.stderr.write(proc.stdout + proc.stderr)
        sys.stderr.write(f"render_report: `{' '.join(command)}` failed (exit {proc.returncode})\n")
        return 2
    return proc.returncode


def screenshot(chromium: str, html: Path, png: Path, window: str, timeout: float = 120) -> bool:
    """Render `html` to `png` in a fresh profile; True when the PNG was written."""
    png.parent.mkdir(parents=True, exist_ok=True)
    if png.exists():
        png.unlink()
    with tempfile.TemporaryDirectory(prefix="render-report-profile-") as profile:
        command = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={png}",
                   f"--window-size={window}", html.resolve().as_uri()]
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            sys.stderr.write(f"render_report: chromium did not finish within {timeout:.0f} s\n")
            return False
    if not png.is_file() or png.stat().st_size == 0:
        sys.stderr.write(proc.stderr[-4000:])
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("project", type=Path, help="the project folder (or file) to run on")
    parser.add_argument("--html", type=Path, help="where the report goes (default: a temporary folder)")
    parser.add_argument("--png", type=Path, help="the screenshot (default: ./<project>-report.png)")
    parser.add_argument("--window-size", default="1280,2400", help="W,H in pixels (default 1280,2400)")
    parser.add_argument("--chromium", help="the Chromium binary (default: chromium on PATH)")
    args = parser.parse_args(argv)

    chromium = find_chromium(args.chromium)
    if chromium is None:
        sys.stderr.write("render_report: Chromium not found (Debian: apt-get install chromium; or --chromium)\n")
        return 2
    project = args.project.resolve()
    png = (args.png or Path.cwd() / f"{project.name}-report.png").resolve()
    with tempfile.TemporaryDirectory(prefix="render-report-") as scratch:
        html = (args.html or Path(scratch) / f"{project.name}-report.html").resolve()
        if write_report(project, html, extra) == 2:
            return 2
        if not screenshot(chromium, html, png, args.window_size):
            sys.stderr.write("render_report: chromium wrote no screenshot\n")
            return 2
    print(f"report: {html if args.html else '(temporary, removed)'}")
    print(f"screenshot: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
