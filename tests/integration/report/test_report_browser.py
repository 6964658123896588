"""The report in a real headless Chromium: no console errors, no network requests, charts drawn, usable at
1280×800 without horizontal scrolling.

Needs Debian's `chromium` and `chromium-driver` and the `selenium` package; skipped without them unless
SOAK_REQUIRE_ALL=1, when their absence is a failure.
"""

from __future__ import annotations

import pytest
from browser import (
    LOAD_TIMEOUT_S,
    VIEWPORT,
    browser_or_skip,
    load_report,
    network_requests,
    png_distinct_bytes,
    start_browser,
)

pytestmark = [pytest.mark.timeout(180)]

# The names other report tests import from here (the helpers now live in browser.py).
_browser_or_skip, _start_browser, _network_requests, _load = browser_or_skip, start_browser, network_requests, load_report
__all__ = ["LOAD_TIMEOUT_S", "_browser_or_skip", "_start_browser", "_network_requests", "_load"]


@pytest.fixture(scope="module")
def browser():
    chromium, driver_path = browser_or_skip()
    driver = start_browser(chromium, driver_path)
    yield driver
    driver.quit()


def test_report_loads_offline_with_charts_and_no_errors(browser, rendered, tmp_path):
    url = load_report(browser, rendered["path"])
    expected = browser.execute_script("return Object.keys(JSON.parse("
                                      "document.getElementById('soak-chart-data').textContent)).length")
    assert expected >= 10
    assert browser.execute_script("return document.body.getAttribute('data-charts-rendered')") == str(expected)
    counts = browser.execute_script("""return {
        plots: document.querySelectorAll('div.plot').length,
        plotly: document.querySelectorAll('div.plot.js-plotly-plot').length,
        svgs: document.querySelectorAll('div.plot .main-svg').length,
        traces: Array.from(document.querySelectorAll('div.plot')).map(
            p => p.querySelectorAll('.scatterlayer .trace, .barlayer .trace').length)};""")
    assert counts["plots"] == counts["plotly"] == expected
    assert counts["svgs"] >= expected
    assert all(n > 0 for n in counts["traces"]), counts["traces"]

    errors = [entry for entry in browser.get_log("browser") if entry["level"] in ("SEVERE", "ERROR")]
    assert errors == []
    assert network_requests(browser, url) == []


def test_report_fits_1280x800_and_charts_are_drawn(browser, rendered, tmp_path):
    load_report(browser, rendered["path"])
    widths = browser.execute_script("return [document.documentElement.scrollWidth, "
                                    "document.documentElement.clientWidth, window.innerWidth];")
    assert widths[2] == VIEWPORT["width"]
    assert widths[0] <= widths[1] <= VIEWPORT["width"], f"horizontal scroll: {widths}"

    page = browser.get_screenshot_as_png()
    (tmp_path / "page.png").write_bytes(page)
    assert png_distinct_bytes(page) > 64
    chart = browser.find_element("id", "chart-memory")
    browser.execute_script("arguments[0].scrollIntoView();", chart)
    shot = chart.screenshot_as_png
    (tmp_path / "chart-memory.png").write_bytes(shot)
    assert png_distinct_bytes(shot) > 64
    plot_box = browser.execute_script(
        "const r = document.getElementById('chart-memory-plot').getBoundingClientRect(); return [r.width, r.height];")
    assert 900 <= plot_box[0] <= VIEWPORT["width"] and plot_box[1] >= 300


def test_gate_links_scroll_to_their_chart(browser, rendered):
    load_report(browser, rendered["path"])
    link = browser.find_element("css selector", 'tr[data-check="creep.ttft_p99"] a')
    link.click()
    top = browser.execute_script("return document.getElementById('chart-ttft').getBoundingClientRect().top;")
    assert 0 <= top < VIEWPORT["height"] / 2
