"""The report as a PDF for the release record: the written report.html printed by headless Chromium.

Chromium opens the page as `report.html?print=a4` (or `letter`): the page's print script then sets the paper
size as an @page rule and turns every chart into a static image, and the print stylesheet lays the page out for
paper. Nothing is fetched: the page is self-contained and every host name resolves to nowhere.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from soak.errors import StorageError, ToolError

PAPERS = ("a4", "letter")
CHROMIUM_ENV = "SOAK_CHROMIUM"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")  # the names `soak doctor` looks for
PRINT_TIMEOUT_S = 180.0
# Virtual time lets the page's scripts (drawing, then imaging, the charts) finish before Chromium prints.
VIRTUAL_TIME_BUDGET_MS = 60_000


def find_chromium() -> str | None:
    """$SOAK_CHROMIUM when it names a program, else the first of CHROMIUM_NAMES on PATH."""
    given = os.environ.get(CHROMIUM_ENV)
    if given:
        return shutil.which(given)
    return next((path for path in map(shutil.which, CHROMIUM_NAMES) if path), None)


def require_chromium() -> str:
    """The Chromium to print with; ToolError saying where it looked when there is none."""
    chromium = find_chromium()
    if chromium is None:
        given = os.environ.get(CHROMIUM_ENV)
        looked = f"${CHROMIUM_ENV}={given} is not a program" if given else \
            f"none of {', '.join(CHROMIUM_NAMES)} is on PATH"
        raise ToolError(f"printing a PDF needs Chromium, and {looked} (install chromium, or set {CHROMIUM_ENV})")
    return chromium


def chromium_command(chromium: str, page_url: str, pdf_path: Path, profile_dir: Path) -> list[str]:
    """Headless Chromium printing `page_url` to `pdf_path`, offline, with a throwaway profile."""
    return [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-extensions", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={profile_dir}", "--no-pdf-header-footer", "--run-all-compositor-stages-before-draw",
            f"--virtual-time-budget={VIRTUAL_TIME_BUDGET_MS}", f"--print-to-pdf={pdf_path}", page_url]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if "dbus" not in line.lower()]
    return lines[-1][:300] if lines else ""


def print_pdf(html_path: Path, pdf_path: Path, paper: str = "a4") -> Path:
    """Print the report at `html_path` to `pdf_path` on `paper` (a4 or letter); ToolError when Chromium is
    missing or fails. The PDF appears whole or not at all."""
    if paper not in PAPERS:
        raise ToolError(f"unknown paper {paper!r}: use one of {', '.join(PAPERS)}")
    chromium = require_chromium()
    page_url = f"{Path(html_path).resolve().as_uri()}?print={paper}"
    with tempfile.TemporaryDirectory(prefix="soak-pdf-") as scratch:
        printed = Path(scratch) / "report.pdf"
        _run_chromium(chromium_command(chromium, page_url, printed, Path(scratch) / "profile"))
        if not printed.exists() or printed.stat().st_size == 0:
            raise ToolError(f"Chromium ({chromium}) wrote no PDF for {html_path}")
        return _place(printed, Path(pdf_path))


def _place(printed: Path, pdf_path: Path) -> Path:
    """Copy the printed file to `pdf_path` through a temporary name, so no one opens half a PDF."""
    temp = pdf_path.with_name(pdf_path.name + ".tmp")
    try:
        pdf_path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(printed, temp)
        os.replace(temp, pdf_path)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise StorageError(f"cannot write the PDF {pdf_path}: {exc.strerror or exc}") from None
    return pdf_path


def _run_chromium(command: list[str]) -> None:
    """Run Chromium to completion in its own process group; a failure is a ToolError naming what it said last,
    and a hang ends the whole group (Chromium's helpers included)."""
    try:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, start_new_session=True)
    except OSError as exc:
        raise ToolError(f"cannot run Chromium ({command[0]}): {exc.strerror or exc}") from None
    try:
        _, stderr = process.communicate(timeout=PRINT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise ToolError(f"Chromium did not finish printing within {PRINT_TIMEOUT_S:g} s") from None
    if process.returncode != 0:
        raise ToolError(f"Chromium failed to print (exit {process.returncode}): {_last_line(stderr)}")
