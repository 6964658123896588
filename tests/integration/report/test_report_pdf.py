"""`soak report --pdf`: a real headless Chromium prints the report; poppler's tools read the PDF back (its paper
size, every page as an image, the charts as embedded images). Without Chromium: one clear line, nothing written.

Needs Debian's `chromium` and `poppler-utils`; skipped without them unless SOAK_REQUIRE_ALL=1.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from report_run import RUN_ID

pytestmark = [pytest.mark.timeout(300)]
PAGE_SIZES = {"a4": "594.96 x 841.92 pts (A4)", "letter": "612 x 792 pts (letter)"}


@pytest.fixture(scope="module")
def tools():
    from soak.report.pdf import find_chromium

    missing = [name for name, found in (("chromium", find_chromium()), ("pdftoppm", shutil.which("pdftoppm")),
                                        ("pdfinfo", shutil.which("pdfinfo")), ("pdfimages", shutil.which("pdfimages")))
               if not found]
    if missing:
        message = f"the PDF test needs {', '.join(missing)} (apt: chromium poppler-utils)"
        if os.environ.get("SOAK_REQUIRE_ALL") == "1":
            pytest.fail(message + " (SOAK_REQUIRE_ALL=1)")
        pytest.skip(message)


def _db_url(built_run) -> str:
    return f"sqlite:///{built_run['store'].engine.url.database}"


def _poppler(*args: str) -> str:
    return subprocess.run(args, capture_output=True, text=True, check=True, timeout=120).stdout


@pytest.mark.parametrize("paper", ["a4", "letter"])
def test_the_pdf_opens_on_the_chosen_paper_with_the_charts_as_images(tools, built_run, tmp_path, soak_cli, paper):
    pdf = tmp_path / f"report-{paper}.pdf"
    result = soak_cli("report", RUN_ID, "--db", _db_url(built_run), "--report-dir", str(tmp_path / "r"),
                      "--pdf", str(pdf), "--paper", paper, timeout_s=240)
    assert result.returncode == 0, result.stderr
    assert f"pdf: {pdf}" in result.stderr
    info = _poppler("pdfinfo", str(pdf))
    assert PAGE_SIZES[paper] in info
    pages = int(re.search(r"Pages:\s+(\d+)", info).group(1))
    assert pages >= 3
    _poppler("pdftoppm", "-r", "20", "-png", str(pdf), str(tmp_path / "page"))
    images = sorted(tmp_path.glob("page-*.png"))
    assert len(images) == pages and all(image.stat().st_size > 1000 for image in images)
    html = (tmp_path / "r" / "report.html").read_text()
    charts = len(re.findall(r'<div class="plot" id="chart-', html))
    embedded = _poppler("pdfimages", "-list", str(pdf)).splitlines()[2:]  # two header lines
    assert charts >= 10 and len(embedded) == charts  # each drawn chart printed as one static image


def test_without_chromium_it_is_one_line_and_nothing_is_written(built_run, tmp_path, soak_cli):
    result = soak_cli("report", RUN_ID, "--db", _db_url(built_run), "--report-dir", str(tmp_path / "r"),
                      "--pdf", str(tmp_path / "r.pdf"), env={"SOAK_CHROMIUM": str(tmp_path / "no-chromium")})
    assert result.returncode == 2
    assert result.stderr.strip() == (f"soak: error: printing a PDF needs Chromium, and $SOAK_CHROMIUM="
                                     f"{tmp_path / 'no-chromium'} is not a program (install chromium, or set "
                                     "SOAK_CHROMIUM)")
    assert not (tmp_path / "r").exists() and not (tmp_path / "r.pdf").exists()


def test_paper_without_pdf_is_a_usage_error(built_run, soak_cli):
    result = soak_cli("report", RUN_ID, "--db", _db_url(built_run), "--paper", "letter")
    assert result.returncode == 2 and "--paper goes with --pdf FILE" in result.stderr
