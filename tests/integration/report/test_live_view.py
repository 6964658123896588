"""`soak web` as a real subprocess over a real database: the run picker and the run pages answer 200, a running
run is marked in progress and follows new data, nothing but GET is answered, and nothing is written."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
import urllib.error
import urllib.request
from email.message import Message

import pytest
from live_run import build_live_db, soak_web, table_dump

pytestmark = [pytest.mark.timeout(180)]
REFRESH_S = 2.0


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """The database and a `soak web` serving it, shared by this module's tests."""
    built = build_live_db(tmp_path_factory.mktemp("live"))
    with soak_web(built["db_url"], "--refresh", f"{REFRESH_S:g}") as (url, process):
        yield {**built, "url": url, "process": process}


def fetch(url: str, method: str = "GET") -> tuple[int, Message, str]:
    request = urllib.request.Request(url, method=method, data=b"x=1" if method in ("POST", "PUT", "PATCH") else None)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.headers, response.read().decode("utf-8")
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode("utf-8", "replace")


def test_the_url_is_on_loopback_at_the_port_the_os_picked(live):
    assert live["url"].startswith("http://127.0.0.1:") and live["url"].endswith("/")
    assert int(live["url"].rsplit(":", 1)[1].rstrip("/")) > 0


def test_the_run_picker_lists_every_run_and_reloads_itself(live):
    status, headers, html = fetch(live["url"])
    assert status == 200 and headers["Cache-Control"] == "no-store"
    assert f'<meta http-equiv="refresh" content="{REFRESH_S:g}">' in html
    for run_id in (live["running"], live["finished"]):
        assert f'<a href="runs/{run_id}">' in html
    assert 'status-running">running<' in html and 'status-completed">completed<' in html


def test_a_running_run_is_its_report_marked_in_progress(live):
    status, _, html = fetch(f"{live['url']}runs/{live['running']}")
    assert status == 200
    assert 'id="in-progress"' in html and "its verdict is provisional" in html
    assert "provisional, the run is in progress" in html  # the banner's reason says so too
    assert '<section id="gates">' in html and 'id="chart-memory"' in html  # the report's own sections
    assert f'<meta http-equiv="refresh" content="{REFRESH_S:g}">' in html
    assert '<script src="/static/plotly.js"></script>' in html and len(html) < 2_000_000  # plotly not inlined


def test_a_finished_run_shows_its_stored_verdict(live):
    status, _, html = fetch(f"{live['url']}runs/{live['finished']}")
    assert status == 200
    assert 'id="live-finished"' in html and 'id="in-progress"' not in html
    assert "stored verdict" in html and '<div class="verdict-word">PASS</div>' in html


def test_the_running_page_follows_what_the_run_stores(live):
    page = f"{live['url']}runs/{live['running']}"
    assert "live view marker" not in fetch(page)[2]
    db = sqlite3.connect(live["db_path"])
    db.execute("insert into events (run_id, t_s, at, kind, message) values (?, 1790, '2026-12-02T10:44:50+00:00', "
               "'phase', 'live view marker')", (live["running"],))
    db.commit()
    db.close()
    deadline = time.monotonic() + 30
    while "live view marker" not in fetch(page)[2]:
        assert time.monotonic() < deadline, "the page never showed the new event"
        time.sleep(0.2)


def test_plotly_is_served_once_for_the_browser_to_cache(live):
    status, headers, body = fetch(f"{live['url']}static/plotly.js")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript")
    assert "max-age=86400" in headers["Cache-Control"] and "plotly" in body[:2000].lower()


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_nothing_but_get_is_answered(live, method):
    before = table_dump(live["db_path"])
    for path in ("", f"runs/{live['running']}", "static/plotly.js"):
        status, headers, _ = fetch(live["url"] + path, method)
        assert status == 405, (method, path)
        assert "GET" in headers["Allow"]
    assert table_dump(live["db_path"]) == before


def test_an_unknown_run_is_a_404_page_naming_it(live):
    status, _, html = fetch(f"{live['url']}runs/20990101T000000Z-0000")
    assert status == 404 and "unknown run id &#39;20990101T000000Z-0000&#39;" in html


def test_viewing_writes_nothing(live):
    before = table_dump(live["db_path"])
    for path in ("", f"runs/{live['running']}", f"runs/{live['finished']}"):
        assert fetch(live["url"] + path)[0] == 200
    assert table_dump(live["db_path"]) == before
    running = json.loads(json.dumps(before["runs"]))  # the running run kept no verdict and its status
    assert any("'running'" in row and live["running"] in row for row in running)


def test_a_missing_database_is_one_clear_line(tmp_path, soak_cli):
    result = soak_cli("web", "--db", f"sqlite:///{tmp_path / 'none.db'}", "--port", "0", timeout_s=60)
    assert result.returncode == 2
    assert result.stderr.strip() == f"soak: error: no database at {tmp_path / 'none.db'}: nothing to show yet " \
                                    "(give --out or --db of your runs)"
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_is_a_clean_stop(live, signum):
    with soak_web(live["db_url"]) as (url, process):
        assert fetch(url)[0] == 200
        process.send_signal(signum)
        assert process.wait(timeout=15) == 0
        assert "Traceback" not in process.stderr.read()


def test_in_a_browser_the_page_draws_its_charts_and_reloads_itself(live):
    from selenium.webdriver.support.ui import WebDriverWait
    from test_report_browser import _browser_or_skip

    driver = _loopback_browser(*_browser_or_skip())
    try:
        driver.get(f"{live['url']}runs/{live['running']}")
        rendered = "return document.body.getAttribute('data-charts-rendered')"
        stamp = "return document.getElementById('in-progress').getAttribute('data-generated-at')"
        WebDriverWait(driver, 60).until(lambda d: d.execute_script(rendered) is not None)
        assert int(driver.execute_script(rendered)) >= 10  # plotly.js came from /static/plotly.js
        first = driver.execute_script(stamp)
        WebDriverWait(driver, 30).until(lambda d: d.execute_script(stamp) not in (None, first))
        WebDriverWait(driver, 60).until(lambda d: d.execute_script(rendered) is not None)
        errors = [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "ERROR")]
        assert errors == []
    finally:
        driver.quit()


def _loopback_browser(chromium: str, driver_path: str):  # returns a selenium WebDriver
    """Headless Chromium that reaches 127.0.0.1 and no other host."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-extensions",
                     "--window-size=1280,800", "--no-first-run", "--disable-background-networking",
                     "--disable-component-update", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
