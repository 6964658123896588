"""Reports of REAL reference-server runs, read as a person reads them.

Two short runs of `soak start` against the embedded reference server: one with a wave phase, idle probes, a
crash with a restart and rising errors; one with a planted leak that follows cancelled requests. Headless
Chromium loads each report, and the text a person sees (`innerText`, closed <details> left out) must hold no
Python reprs, no epoch times and no JSON. Each gate row must tell one truth: its value and threshold, the numbers
in its sentence and summary.json agree.
"""

from __future__ import annotations

import html
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from browser import browser_or_skip, load_report, start_browser

from support.consistency import NUMBER, SCALE, UNIT, agrees, dimension, summary_in_base, threshold_disagreements

# One xdist group: the runs are a module fixture, made once on one worker (`--dist loadgroup`).
pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(900), pytest.mark.xdist_group("report_real_runs")]

COMMON = ("start", "--warmup", "10s", "--window", "3s", "--sample-every", "1s", "--json")
RUNS = {
    "timeline": ("--duration", "100s", "--rate", "4", "--idle-probe-every", "25s", "--canary-every", "10s",
                 "--phase", "steady rate_rps=3 duration_s=30s", "--phase", "wave rate_rps=4 amplitude=0.5 period_s=20s",
                 "--reference-fault", "crash-after=60s", "--reference-fault", "error-rise=0:0.1",
                 "--restart", "on-crash"),
    "leak": ("--duration", "90s", "--rate", "4", "--idle-probe-every", "30s", "--scenario", "chat_short:2",
             "--scenario", "cancel:1", "--reference-fault", "rss-leak-on=cancel:1MiB"),
}
# Text that is data, not words: a Python repr, an epoch time in seconds (plain or with thousands separators),
# a JSON object or a JSON key.
FORBIDDEN = {
    "Python None/True/False": re.compile(r"\b(None|True|False)\b"),
    "epoch seconds": re.compile(r"\b1[6-9]\d{8}(\.\d+)?\b|\b1,[6-9]\d{2},\d{3},\d{3}\b"),
    "JSON braces": re.compile(r"[{}]"),
    "JSON key": re.compile(r'"\w+":'),
}
VISIBLE_TEXT = "return document.body.innerText"


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory: pytest.TempPathFactory, soak_cli) -> dict[str, dict[str, Any]]:
    """Each run's summary, report path and events, keyed by the run's name."""
    runs = {}
    for name, args in RUNS.items():
        out = tmp_path_factory.mktemp(f"real-{name}")
        result = soak_cli(*COMMON, *args, "--out", str(out), timeout_s=400)
        assert result.returncode in (0, 1, 3), result.stderr[-3000:]
        summary = json.loads(result.stdout)
        db = sqlite3.connect(out / "soak.db")
        events = db.execute("select kind, data_json from events where run_id = ? order by t_s",
                            (summary["run_id"],)).fetchall()
        db.close()
        runs[name] = {"summary": summary, "report": out / summary["run_id"] / "report.html", "events": events}
    return runs


@pytest.fixture(scope="module")
def browser():
    chromium, driver_path = browser_or_skip()
    driver = start_browser(chromium, driver_path)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def pages(real_runs, browser) -> dict[str, dict[str, str]]:
    """Each report as Chromium shows it: the visible text, and the whole text with what <details> hide."""
    shown = {}
    for name, run in real_runs.items():
        load_report(browser, run["report"])
        assert browser.execute_script("return document.querySelectorAll('details[open]').length") == 0
        shown[name] = {"visible": browser.execute_script(VISIBLE_TEXT),
                       "all": browser.execute_script("return document.body.textContent")}
    return shown


# ---- what a person sees ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(RUNS))
def test_visible_text_holds_no_reprs_epochs_or_json(pages, name):
    visible = pages[name]["visible"]
    for what, pattern in FORBIDDEN.items():
        found = [visible[max(m.start() - 60, 0):m.end() + 60] for m in pattern.finditer(visible)]
        assert not found, f"{what} in the visible text of the {name} report: {found[:3]}"
    # The raw records are there, behind their disclosures: the check above looked at what is shown, not at less.
    assert re.search(FORBIDDEN["JSON braces"], pages[name]["all"])
    assert '"start_t":' in pages[name]["all"] and '"start_t":' not in visible


def test_each_idle_probe_is_one_sentence(real_runs, pages):
    visible = pages["timeline"]["visible"]
    starts = [kind for kind, _ in real_runs["timeline"]["events"] if kind == "probe_start"]
    assert len(starts) >= 2
    # A probe that met the crash finds the server gone: no gauges and no RSS, and it says so.
    rows = re.findall(r"idle probe (\d+): (drained in [\d.]+ (?:ms|s)|drain timed out[^;]*);"
                      r" (KV [\d.]+ %, \d+ running; RSS [\d.]+ (?:MiB|GiB)|no server gauges)", visible)
    assert [int(number) for number, *_ in rows] == list(range(1, len(starts) + 1)), visible[:3000]
    assert "probe_reading" not in visible and "probe_drained" not in visible


def test_phases_read_as_sentences(pages):
    visible = pages["timeline"]["visible"]
    # How long each lasted comes from the recorded phase events, so a second either way is the machine's.
    assert re.search(r"warm-up\s+steady at 3 req/s for (9|10)(\.\d)?s\s", visible)
    assert re.search(r"phase 1\s+steady at 3 req/s for (29|30|31)(\.\d)?s\s", visible)
    assert re.search(r"phase 2\s+wave 2 → 6 req/s, period 20s for 1m\d*s?\s", visible)


def test_crash_and_restart_are_in_the_timeline(real_runs, pages):
    visible = pages["timeline"]["visible"]
    crashes = next(f for f in real_runs["timeline"]["summary"]["findings"] if f["check"] == "crashes")
    assert crashes["verdict"] == "FAIL" and "Events" in crashes["next_step"]
    assert re.search(r"\+0:0\d:\d\d\s+crash\s", visible) and re.search(r"\+0:0\d:\d\d\s+restart\s", visible)


def test_every_unsettled_check_says_what_next(real_runs, pages):
    for name, run in real_runs.items():
        visible = pages[name]["visible"]
        what_next = visible[visible.index("What next"):visible.index("Check\tVerdict")]
        for finding in run["summary"]["findings"]:
            if finding["verdict"] in ("FAIL", "SUSPECT", "INCONCLUSIVE", "INVALID"):
                assert finding.get("next_step"), (name, finding["check"])
                assert f"{finding['check']}: {finding['next_step']}" in what_next, (name, finding["check"])
            else:
                assert "next_step" not in finding and f"{finding['check']}:" not in what_next


# ---- one truth per gate -----------------------------------------------------------------------------------

def gate_rows(html: str) -> dict[str, list[str]]:
    """Each gate row's cells as text, by check."""
    rows = {}
    for check, body in re.findall(r'<tr class="gate-row[^"]*" data-check="([^"]+)">(.*?)</tr>', html, re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", body, re.S)
        rows[check] = [re.sub(r"\s+", " ", re.sub(r"<details.*?</details>|<[^>]+>", " ", c, flags=re.S)).strip()
                       for c in cells]
    return rows


def test_each_gate_row_tells_one_truth(real_runs):
    checked = 0
    for name, run in real_runs.items():
        rows = gate_rows(run["report"].read_text(encoding="utf-8"))
        for finding in run["summary"]["findings"]:
            value_cell, threshold_cell, evidence_cell = rows[finding["check"]][2:5]
            where = (name, finding["check"], value_cell, threshold_cell, finding["evidence"])
            assert finding["evidence"].split(";")[0][:60] in html.unescape(evidence_cell), where
            for cell, key in ((value_cell, "value"), (threshold_cell, "threshold")):
                if finding[key] is None:
                    assert cell.startswith("—"), where
                    continue
                actual, dim = summary_in_base(finding[key], finding["unit"])
                match = re.match(rf"{NUMBER}\s*{UNIT}?", cell)
                assert match, where
                unit = match.group(2) or ""
                if unit in SCALE and dimension(unit) == dim:
                    assert agrees(match.group(1), unit, actual), where
                else:  # counts and other units shown as they are stored
                    assert float(match.group(1).replace(",", "")) == pytest.approx(finding[key], rel=0.01, abs=0.5)
            compared, wrong = threshold_disagreements(finding)
            assert not wrong, (name, wrong)
            checked += compared
    assert checked >= 4, "too few sentences stated a threshold to compare"


def test_the_summary_file_is_what_the_report_shows(real_runs):
    """summary.json on disk is the one the report was rendered from (one truth, also across files)."""
    for run in real_runs.values():
        on_disk = json.loads((Path(run["report"]).parent / "summary.json").read_text(encoding="utf-8"))
        assert [(f["check"], f["verdict"], f["value"], f["threshold"], f.get("next_step")) for f in on_disk["findings"]] \
            == [(f["check"], f["verdict"], f["value"], f["threshold"], f.get("next_step"))
                for f in run["summary"]["findings"]]
