"""Parsing of the reference server's --fault specs and unit texts."""

import pytest

from soak.refserver.faults import (
    LONG_PROMPT_TOKENS,
    EventFault,
    FaultSet,
    FaultSpecError,
    KindLeak,
    KVLeak,
    MemoryShape,
    MemorySteps,
    parse_faults,
)
from soak.refserver.units import parse_bytes, parse_duration


@pytest.mark.parametrize("text, seconds", [
    ("90s", 90), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25), ("2", 2), ("1.5h", 5400), ("1d", 86400)])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text, size", [("4096", 4096), ("512KiB", 512 * 1024), ("2MiB", 2 * 2**20),
                                        ("1.5GB", 1_500_000_000), ("10 kb", 10_000)])
def test_byte_sizes(text, size):
    assert parse_bytes(text) == size


@pytest.mark.parametrize("text", ["5x", "m5", "", "1h 30m", "-3s"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_every_fault_parses():
    faults = parse_faults([
        "rss-leak=2MiB", "kv-leak-on-abort", "latency-creep=20%", "error-rise=0:0.2", "error-bursts=4",
        "fd-leak=3", "crash-after=1h30m", "hang-after=90s", "vram-leak=1MiB", "warmup-ratchet",
        "gc-sawtooth=32MiB:30s", "stalls=2:1500ms", "rss-leak-on=cancel:1MiB"])
    assert faults == FaultSet(
        texts=faults.texts, names=faults.names, rss_leak_bytes=2 * 2**20, rss_leak_on=KindLeak("cancel", 2**20),
        kv_leak_on_abort=KVLeak(None),
        latency_creep_pct=20.0, error_rise=(0.0, 0.2), error_bursts=EventFault(4.0, 3.0), fd_leak=3,
        crash_after_s=5400.0, hang_after_s=90.0, vram_leak_bytes=2**20, warmup_ratchet=MemoryShape(16 * 2**20, 300.0),
        gc_sawtooth=MemoryShape(32 * 2**20, 30.0), stalls=EventFault(2.0, 1.5))
    assert faults.names[:3] == ("rss-leak", "kv-leak-on-abort", "latency-creep")


def test_rss_steps_take_a_size_and_step_times():
    faults = parse_faults(["rss-steps=200MiB@18h,12h5m"])
    assert faults.rss_steps == MemorySteps(200 * 2**20, (12 * 3600.0 + 300.0, 18 * 3600.0))


def test_no_faults_is_all_off():
    faults = parse_faults([])
    assert faults == FaultSet() and faults.stalls is None and not faults.kv_leak_on_abort


def test_kv_leak_can_be_limited_to_a_few_blocks_per_abort():
    leak = parse_faults(["kv-leak-on-abort=1"]).kv_leak_on_abort
    assert leak == KVLeak(1) and leak.blocks_kept(5) == 1 and leak.blocks_kept(0) == 0
    assert KVLeak().blocks_kept(5) == 5


def test_a_leak_on_one_kind_of_request_names_the_kind_and_the_size():
    assert parse_faults(["rss-leak-on=cancel:2MiB"]).rss_leak_on == KindLeak("cancel", 2 * 2**20)
    assert parse_faults(["rss-leak-on=long-prompt:1MiB"]).rss_leak_on == KindLeak("long-prompt", 2**20,
                                                                                     LONG_PROMPT_TOKENS)
    assert parse_faults(["rss-leak-on=long-prompt:1MiB:512"]).rss_leak_on == KindLeak("long-prompt", 2**20, 512)


def test_a_leak_on_cancel_takes_only_aborts_and_on_long_prompts_only_long_ones():
    cancel, long_prompt = KindLeak("cancel", 1), KindLeak("long-prompt", 1, 1024)
    assert cancel.leaks("abort", 10) and not cancel.leaks("stop", 5000) and not cancel.leaks("length", 5000)
    assert long_prompt.leaks("stop", 1024) and long_prompt.leaks("abort", 2000)
    assert not long_prompt.leaks("length", 1023) and not long_prompt.leaks("abort", 10)


def test_stall_length_defaults_to_random():
    assert parse_faults(["stalls=3"]).stalls == EventFault(3.0, None)


@pytest.mark.parametrize("text, fragment", [
    ("memory-leak=1MiB", "unknown fault 'memory-leak'"),
    ("rss-leak", "needs a value"),
    ("rss-leak=lots", "malformed byte size"),
    ("rss-leak=0", "> 0"),
    ("kv-leak-on-abort=yes", "whole number"),
    ("kv-leak-on-abort=0", "whole number"),
    ("latency-creep=-5", ">= 0"),
    ("error-rise=0.5", "FROM:TO"),
    ("error-rise=0:2", "[0, 1]"),
    ("error-bursts=0", "> 0"),
    ("error-bursts=3:0s", "LENGTH must be > 0"),
    ("fd-leak=1.5", "whole number"),
    ("crash-after=soon", "malformed duration"),
    ("gc-sawtooth=64MiB:", "malformed duration"),
    ("rss-leak-on=cancel", "needs a size"),
    ("rss-leak-on=errors:1MiB", "KIND must be cancel or long-prompt"),
    ("rss-leak-on=cancel:1MiB:10", "only long-prompt takes N"),
    ("rss-leak-on=long-prompt:1MiB:0", "whole number"),
    ("rss-leak-on=long-prompt:0", "> 0"),
    ("rss-steps=200MiB", "needs the step times"),
    ("rss-steps=200MiB@", "needs the step times"),
    ("rss-steps=0@1h", "> 0"),
    ("rss-steps=1MiB@soon", "malformed duration"),
])
def test_bad_faults_name_the_problem(text, fragment):
    with pytest.raises(FaultSpecError) as info:
        parse_faults([text])
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_a_fault_given_twice_is_an_error():
    with pytest.raises(FaultSpecError, match="given twice"):
        parse_faults(["fd-leak=1", "fd-leak=2"])
