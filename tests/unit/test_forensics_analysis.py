"""Where the memory went: a forensics event read back, the line it names (or why none), the leak finding's
sentence, and summary.json's record."""

from __future__ import annotations

from soak.analysis.findings import FAIL, PASS, SUSPECT, Finding
from soak.analysis.forensics import NOISE_FLOOR_BYTES, add_forensics, noise_floor, read_forensics, short_path
from soak.contracts import Event, EventKind, SummaryFinding
from soak.run.summary import forensics_of

MIB = 2**20
SITE = "/usr/lib/python3.11/site-packages/vllm/v1/core/sched/scheduler.py"


def row(function: str, size: int, file: str = SITE, line: int = 812, caller: str | None = "_free_request") -> dict:
    return {"function": function, "file": file, "line": line, "caller_function": caller, "caller_file": file,
            "caller_line": 640, "bytes": size, "allocations": 32, "stacks": 1, "frames": [[function, file, line]]}


def event(rows: list[dict], held: int | None = None, **data) -> Event:
    total = sum(r["bytes"] for r in rows) if held is None else held
    body = {"pid": 4242, "name": "VLLM::EngineCore", "role": "engine", "started_s": 100.0, "ended_s": 700.0,
            "method": "memray", "held": {"held_bytes": total, "held_allocations": 9, "stacks": len(rows), "top": rows},
            "smaps_sentence": "91 % of the 40.0 MiB growth is in anonymous mappings of 1–64 MiB (10 new)",
            "refusals": [], **data}
    return Event(t_s=701.0, kind=EventKind.FORENSICS, message="", data=body)


def test_a_line_holding_most_of_the_window_is_named_with_its_caller():
    result = read_forensics([event([row("written_bytes", 32 * MIB), row("other", 9 * MIB, line=5)])])[0]
    assert result.named is not None and result.named.function == "written_bytes"
    sentence = result.sentence()
    assert sentence.startswith("78 % of the 41.0 MiB still held from the 10m window in VLLM::EngineCore (pid 4242)")
    assert "at vllm/v1/core/sched/scheduler.py:812 in written_bytes, from _free_request (vllm/v1/core/" in sentence


def test_growth_spread_over_many_stacks_names_none():
    rows = [row(f"f{i}", 4 * MIB, line=i) for i in range(10)]
    result = read_forensics([event(rows)])[0]
    assert result.named is None
    assert result.sentence().endswith("the growth is spread over 10 stacks, none above 10 %")


def test_a_dominant_line_below_what_a_threshold_leak_builds_is_noise():
    # 16 MiB/h over a 10-minute window builds 2.7 MiB: a 2 MiB line, however dominant, is not above noise
    result = read_forensics([event([row("cache_fill", 2 * MIB), row("x", MIB // 4)])], 16 * MIB)[0]
    assert result.named is None
    assert "no stack holds more than noise" in result.sentence()
    assert noise_floor(16 * MIB, 600.0) == 16 * MIB / 6 and noise_floor(None, 600.0) == NOISE_FLOOR_BYTES


def test_a_window_without_a_capture_says_why_and_keeps_the_mapping_growth():
    data = event([], held=None)
    body = {**data.data, "held": None, "method": "smaps", "refusals": ["not a Python process: by mapping only"]}
    result = read_forensics([Event(t_s=1.0, kind=EventKind.FORENSICS, data=body)])[0]
    assert result.held_bytes is None
    assert result.sentence() == ("forensics of VLLM::EngineCore (pid 4242): not a Python process: by mapping only; "
                                 "growth by mapping: 91 % of the 40.0 MiB growth is in anonymous mappings of 1–64 MiB "
                                 "(10 new)")


def test_the_leak_finding_says_where_the_memory_went_only_when_it_is_not_a_pass():
    events = [event([row("written_bytes", 32 * MIB)])]
    failing = Finding("leak.rss", FAIL, evidence="RSS of EngineCore rises 47 MiB/h.", threshold=16 * MIB)
    passing = Finding("leak.rss", PASS, evidence="flat")
    assert add_forensics([failing], events)[0].evidence.startswith("RSS of EngineCore rises 47 MiB/h. Forensics: 100 %")
    assert add_forensics([passing], events)[0].evidence == "flat"
    suspect = add_forensics([Finding("leak.rss", SUSPECT, evidence="maybe")], [])[0]
    assert suspect.evidence == "maybe" and "forensics" not in suspect.details


def test_summary_records_each_process_with_short_paths():
    leak = SummaryFinding(check="leak.rss", verdict="FAIL", value=1.0, unit="bytes/h", ci=None, threshold=16 * MIB,
                          evidence="")
    records = forensics_of([event([row("written_bytes", 32 * MIB)])], [leak])
    assert records is not None and len(records) == 1
    record = records[0]
    assert record.named and record.stacks[0].file == "vllm/v1/core/sched/scheduler.py" and record.stacks[0].share == 1.0
    assert record.sentence.startswith("100 % of the 32.0 MiB")
    assert forensics_of([], [leak]) is None


def test_short_path_keeps_a_file_outside_site_packages_whole():
    assert short_path("/srv/app/server.py") == "/srv/app/server.py"
    assert short_path("/x/dist-packages/torch/nn/modules/module.py") == "torch/nn/modules/module.py"


def test_one_large_allocation_held_is_a_cache_filled_once_not_a_growth():
    # as a healthy vLLM's API server showed: 1 MiB in one allocation at resolve_chat_template, 85 % of the window
    cache = {**row("resolve_chat_template", MIB), "allocations": 1}
    result = read_forensics([event([cache, row("other", MIB // 6, line=3)])])[0]
    assert result.named is None
    assert "is only 1 allocation, too few for a growth: a cache filled once" in result.sentence()
