"""LoRA churn without a server: parsing --lora, the wall-clock churn schedule, the Zipf spread over adapters, the
checks before a run, the fit of growth per load/unload cycle and the chart markers of adapter events."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from soak.analysis.churn import ChurnFit, cycle_times, fit_churn
from soak.config import LoadSettings, LoraAdapter, resolve_config
from soak.contracts import Event, EventKind
from soak.errors import ConfigError
from soak.load.lora import ChurnSchedule, check_lora, churn_schedule, pick_adapter, zipf_weights
from soak.report.markers import build_markers, event_class

MiB = 2**20


@pytest.mark.parametrize(("text", "message"), [
    ("sql", "is not NAME=PATH"),
    ("=/models/sql", "is not NAME=PATH"),
    ("sql=", "is not NAME=PATH"),
    ("my adapter=/x", "must be letters, digits"),
])
def test_a_bad_lora_is_one_line_naming_it(text, message):
    with pytest.raises(ConfigError) as caught:
        resolve_config({"duration": "5m", "lora": [text]})
    assert message in str(caught.value) and "--lora" in str(caught.value) and "\n" not in str(caught.value)


def test_loras_parse_keep_their_order_and_refuse_a_name_twice():
    config = resolve_config({"duration": "5m", "lora": ["sql=/m/sql", "chat=/m/chat"], "lora_churn_every": "10m"})
    assert config.load.loras == (LoraAdapter(name="sql", path="/m/sql"), LoraAdapter(name="chat", path="/m/chat"))
    assert config.load.lora_churn_every_s == 600.0 and config.load.lora_zipf == 1.0
    with pytest.raises(ConfigError, match="'sql' is given twice"):
        resolve_config({"duration": "5m", "lora": ["sql=/a", "sql=/b"]})


def test_the_lora_scenario_and_churn_need_an_adapter():
    with pytest.raises(ConfigError, match="the lora scenario needs at least one --lora"):
        check_lora(["chat_short", "lora"], LoadSettings())
    with pytest.raises(ConfigError, match="--lora-churn-every needs at least one --lora"):
        check_lora(["chat_short"], LoadSettings(lora_churn_every_s=60))
    check_lora(["lora"], LoadSettings(loras=("a=/x",), lora_churn_every_s=60))


def test_the_schedule_cycles_adapters_in_turn_on_the_wall_clock():
    schedule = ChurnSchedule(("a", "b", "c"), 600.0)
    assert schedule.next_cycle(1_200_000.5) == (2001, 1_200_600.0)
    assert [schedule.adapter_of(k) for k in (2000, 2001, 2002, 2003)] == ["c", "a", "b", "c"]
    assert schedule.quiet_s == 30.0 and ChurnSchedule(("a",), 8.0).quiet_s == 2.0
    # each adapter is out of the traffic for quiet_s either side of its own cycle, and only then
    assert schedule.resting(1_200_600.0 - 29) == "a" and schedule.resting(1_200_600.0 + 29) == "a"
    assert schedule.resting(1_200_600.0 + 31) is None and schedule.resting(1_200_300.0) is None
    assert churn_schedule(["a"], None) is None and churn_schedule([], 60.0) is None


def test_zipf_favours_the_first_adapter_and_never_picks_the_resting_one():
    assert zipf_weights(3, 1.0) == [1.0, 0.5, pytest.approx(1 / 3)] and zipf_weights(3, 0.0) == [1.0, 1.0, 1.0]
    rng = random.Random(3)
    counts = Counter(pick_adapter(rng, ["a", "b", "c"], 1.0) for _ in range(6000))
    assert counts["a"] / counts["b"] == pytest.approx(2.0, rel=0.15)
    assert counts["a"] / counts["c"] == pytest.approx(3.0, rel=0.15)
    assert {pick_adapter(rng, ["a", "b", "c"], 1.0, avoid="a") for _ in range(200)} == {"b", "c"}
    assert pick_adapter(rng, ["a"], 1.0, avoid="a") is None


def sampled(cycles_t: np.ndarray, per_cycle: float, per_s: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """RSS sampled every second for 120 s: a level, growth per second, a step per cycle and a little noise."""
    t_s = np.arange(0.0, 120.0, 1.0)
    values = 300 * MiB + per_s * t_s + per_cycle * np.searchsorted(cycles_t, t_s, side="right")
    return t_s, values + np.random.default_rng(seed).normal(0, 64 * 1024, t_s.size)


def test_growth_that_steps_at_each_cycle_is_attributed_to_churn():
    cycles_t = np.arange(5.5, 120.0, 10.0)
    fit = fit_churn(*sampled(cycles_t, per_cycle=2 * MiB, per_s=4096), cycles_t)
    assert fit.cycles == 12 and fit.per_cycle == pytest.approx(2 * MiB, rel=0.05)
    assert fit.named and fit.ci[0] < fit.per_cycle < fit.ci[1]
    text = fit.text(lambda b: f"{b / MiB:.1f} MiB", lambda lo, hi: f"{lo / MiB:.1f}–{hi / MiB:.1f} MiB", 0.95)
    assert text.startswith("growth follows lora churn: ≈ 2.0 MiB per load/unload cycle (95 % CI ")
    assert text.endswith(", 12 cycles)")


def test_growth_with_time_alone_is_not_put_on_the_churn():
    cycles_t = np.arange(5.5, 120.0, 10.0)
    fit = fit_churn(*sampled(cycles_t, per_cycle=0.0, per_s=64 * 1024), cycles_t)
    assert not fit.named and fit.ci[0] < 0 < fit.ci[1]
    assert fit.text(str, lambda lo, hi: "", 0.95).startswith("the growth is not shown to follow lora churn")


def test_too_few_cycles_or_samples_fit_nothing():
    t_s, values = sampled(np.array([50.5]), per_cycle=MiB, per_s=0.0)
    assert fit_churn(t_s, values, np.array([50.5, 60.5])) is None
    assert fit_churn(t_s[:5], values[:5], np.array([0.5, 1.5, 2.5])) is None


def test_only_scheduled_loads_are_cycles():
    events = [Event(1.0, EventKind.LORA_LOAD, data={"cycle": None}), Event(9.0, EventKind.LORA_LOAD, data={"cycle": 7}),
              Event(8.9, EventKind.LORA_UNLOAD, data={"cycle": 7}), Event(12.0, EventKind.LORA_ERROR, data={"cycle": 8})]
    assert cycle_times(events).tolist() == [9.0]
    assert ChurnFit(3, 1.0, (0.5, 1.5), 0.9).to_dict("bytes")["unit"] == "bytes/cycle"


def test_adapter_loads_and_refusals_are_chart_markers_and_unloads_are_not():
    assert (event_class("lora_load"), event_class("lora_error"), event_class("lora_unload")) == ("lora", "lora_error",
                                                                                                 "other")
    events = [Event(9.0, EventKind.LORA_UNLOAD, "LoRA adapter a unloaded"),
              Event(9.1, EventKind.LORA_LOAD, "LoRA adapter a loaded (0.10s)"),
              Event(19.0, EventKind.LORA_ERROR, "unload of LoRA adapter b failed: HTTP 404: gone")]
    markers = build_markers(events, None, 30.0)
    assert [(m.marker_class, m.t_s) for m in markers] == [("lora", 9.1), ("lora_error", 19.0)]
