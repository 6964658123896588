"""The timeline in words: phase sentences for each kind, one row per idle probe, matching canaries together."""

from __future__ import annotations

import re

from soak.contracts import Event
from soak.report.timeline import event_sentence, events_table, grouped_rows, phase_load, phases

MIB = 2**20


def event(t_s, kind, message="", **data):
    return Event(t_s=t_s, at="2026-12-03T08:00:00+00:00", kind=kind, message=message, data=data)


def test_each_phase_kind_reads_as_a_sentence():
    assert phase_load({"phase_kind": "steady", "rate_rps": 2.0}) == "steady at 2 req/s"
    assert phase_load({"phase_kind": "wave", "rate_rps": 4.0, "amplitude": 0.5, "period_s": 3600.0}) \
        == "wave 2 → 6 req/s, period 1h"
    assert phase_load({"phase_kind": "ramp", "rate_rps": 1.0, "to_rate_rps": 8.0, "ramp_s": 1800.0}) \
        == "ramp 1 → 8 req/s over 30m"
    assert phase_load({"phase_kind": "burst", "rate_rps": 6.0, "factor": 3.0, "burst_s": 60.0, "period_s": 900.0}) \
        == "6 req/s with bursts of 18 req/s for 1m every 15m"


def test_phase_rows_say_how_long_each_lasted_and_keep_the_settings_aside():
    start = 1_796_285_407.356
    events = [event(0.0, "phase", "phase warmup at 2 req/s", name="warmup", index=None, phase_kind="steady",
                    rate_rps=2.0, start_t=start, end_t=start + 10),
              event(10.0, "phase", "phase steady at 2 req/s", name="steady", index=0, phase_kind="steady",
                    rate_rps=2.0, ramp_s=331.0, factor=3.0, start_t=start + 10)]
    rows = phases(events, 341.0)
    assert [(row["name"], row["sentence"]) for row in rows] == [
        ("warm-up", "steady at 2 req/s for 10s"), ("phase 1", "steady at 2 req/s for 5m31s")]
    assert "1796285407" in rows[0]["raw"] and "1796285407" not in rows[0]["sentence"]


def test_an_idle_probe_is_one_row():
    events = [event(40.0, "probe_start", "idle probe 0: arrivals stopped", index=0, t=1.8e9),
              event(44.3, "probe_drained", "idle probe 0: drained in 4.30s", index=0, drain_s=4.3),
              event(74.3, "probe_reading", "idle probe 0: kv=0.0 running=0.0", index=0, drained=True, kv_usage=0.0,
                    running=0.0, waiting=0.0, processes=[{"pid": 7, "rss_bytes": 200 * MIB},
                                                         {"pid": 8, "rss_bytes": 58 * MIB}]),
              event(74.3, "probe_end", "idle probe 0: arrivals resumed", index=0, drained=True, duration_s=34.3)]
    rows = grouped_rows(events)
    assert len(rows) == 1
    assert rows[0]["text"] == "idle probe 1: drained in 4.3 s; KV 0 %, 0 running; RSS 258 MiB; idle for 34 s"
    assert rows[0]["t"] == "0:00:40" and rows[0]["kind"] == "idle probe"
    assert rows[0]["raw"].count('"kind"') == 4  # every recorded event behind the disclosure


def test_a_timed_out_probe_says_so_and_whether_requests_kept_streaming():
    events = [event(100.0, "probe_start", index=1), event(160.0, "probe_drain_timeout", index=1, drain_s=60.0,
                                                         in_flight=3),
              event(161.0, "probe_drain_streaming", index=1, chunks=12),
              event(190.0, "probe_reading", index=1, drained=False, kv_usage=0.12, running=3.0, waiting=1.0),
              event(190.0, "probe_end", index=1, duration_s=90.0)]
    (row,) = grouped_rows(events)
    assert row["text"] == ("idle probe 1: drain timed out after 1m with 3 in flight (they kept streaming); "
                           "KV 12.0 %, 3 running, 1 waiting; idle for 1m30s")
    assert row["class"] == "probe_timeout"


def test_probes_without_an_index_are_told_apart_by_their_start():
    events = [event(10.0, "probe_start"), event(12.0, "probe_drained", drain_s=2.0), event(20.0, "probe_end"),
              event(50.0, "probe_start"), event(52.0, "probe_drained", drain_s=2.0)]
    texts = [row["text"] for row in grouped_rows(events)]
    assert texts == ["idle probe 1: drained in 2 s; no reading", "idle probe 2: drained in 2 s; no reading; no end recorded"]


def test_matching_canaries_in_a_row_are_one_row_and_a_mismatch_stays_alone():
    events = [event(0.0, "canary", "canary 0: reference answer (32 chars)", reference=True),
              *(event(10.0 * i, "canary", f"canary {i}: same answer as the reference", reference=False)
                for i in range(1, 5)),
              event(50.0, "canary_mismatch", "canary 5: answer differs from the reference at character 3"),
              event(60.0, "canary", "canary 6: same answer as the reference", reference=False)]
    texts = [row["text"] for row in grouped_rows(events)]
    assert texts == ["canary 0: reference answer (32 chars)",
                     "4 canary answers the same as the reference, +0:00:10 to +0:00:40",
                     "canary 5: answer differs from the reference at character 3",
                     "canary 6: same answer as the reference"]


def test_rows_keep_time_order_and_visible_text_has_no_data():
    events = [event(0.0, "server_start", "reference server at http://127.0.0.1:1", pid=5, cmd=["python", "-m", "x"]),
              event(5.0, "probe_start", index=0), event(6.0, "probe_end", index=0),
              event(5.5, "warmup_end", "warm-up over", t=1.8e9)]
    table = events_table(sorted(events, key=lambda e: e.t_s))
    assert [row["t_s"] for row in table["rows"]] == sorted(row["t_s"] for row in table["rows"])
    assert table["recorded"] == 4 and len(table["rows"]) == 3
    for row in table["rows"]:
        assert not re.search(r"[{}]|None|\b1[6-9]\d{8}", row["text"]), row["text"]
    assert event_sentence(events[3]) == "warm-up over: from here on, windows are judged"
