"""Headless Chromium for the report tests: find it (or skip), start it offline, load a report and wait for its
charts. Needs Debian's `chromium` and `chromium-driver` and the `selenium` package; without them a test skips,
unless SOAK_REQUIRE_ALL=1, when their absence is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import zlib
from pathlib import Path

import pytest

VIEWPORT = {"width": 1280, "height": 800}
BLOCKED_URLS = ["http://*", "https://*", "ws://*", "wss://*", "ftp://*"]
LOAD_TIMEOUT_S = 60


def _find(*candidates: str | None) -> str | None:
    return next((path for path in candidates if path and os.access(path, os.X_OK)), None)


def browser_or_skip() -> tuple[str, str]:
    """Paths of chromium and chromedriver, having checked selenium imports; skip (or fail) otherwise."""
    chromium = _find(os.environ.get("SOAK_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                     shutil.which("chromium-browser"))
    driver = _find(os.environ.get("SOAK_CHROMEDRIVER"), "/usr/bin/chromedriver", shutil.which("chromedriver"))
    missing = [name for name, path in (("chromium", chromium), ("chromium-driver", driver)) if not path]
    try:
        import selenium  # noqa: F401 - imported only to see that it is installed
    except ImportError:
        missing.append("selenium (pip)")
    if missing:
        message = f"browser test needs {', '.join(missing)}"
        if os.environ.get("SOAK_REQUIRE_ALL") == "1":
            pytest.fail(message + " (SOAK_REQUIRE_ALL=1)")
        pytest.skip(message)
    return chromium, driver


def start_browser(chromium: str, driver_path: str):  # returns a selenium WebDriver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-extensions",
                     "--window-size=1280,800", "--no-first-run", "--disable-background-networking",
                     "--disable-component-update", "--host-resolver-rules=MAP * ~NOTFOUND"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(LOAD_TIMEOUT_S)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": BLOCKED_URLS})
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {**VIEWPORT, "deviceScaleFactor": 1, "mobile": False})
    return driver


def png_distinct_bytes(png: bytes) -> int:
    """How many distinct byte values the decompressed image data holds (a blank image has a handful)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    position, data = 8, b""
    while position < len(png):
        (length,) = struct.unpack(">I", png[position:position + 4])
        kind = png[position + 4:position + 8]
        if kind == b"IDAT":
            data += png[position + 8:position + 8 + length]
        position += 12 + length
    return len(set(zlib.decompress(data)))


def network_requests(driver, page_url: str) -> list[str]:
    """URLs the page asked for, other than itself and inline data."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            url = message["params"]["request"]["url"]
            if url != page_url and not url.startswith(("data:", "blob:")):
                urls.append(url)
    return urls


def load_report(driver, path: Path) -> str:
    from selenium.webdriver.support.ui import WebDriverWait

    url = path.resolve().as_uri()
    driver.get(url)
    WebDriverWait(driver, LOAD_TIMEOUT_S).until(
        lambda d: d.execute_script("return document.body.getAttribute('data-charts-rendered')") is not None)
    return url
