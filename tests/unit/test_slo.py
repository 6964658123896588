"""`--slo`: parsing from a flag, a variable and a TOML file, the one-line errors, and which requests are good."""

from __future__ import annotations

import pytest

from soak.config import resolve_config
from soak.errors import ConfigError
from soak.load.records import RequestRecord
from soak.slo import SloTargets, parse_slo


def record(ttft_ms: float | None = 100.0, e2e_ms: float = 1000.0, itl_ms: tuple[float, ...] = (10.0, 20.0, 30.0),
           output_tokens: int = 4, error_class: str | None = None, expected_error: bool = False) -> RequestRecord:
    return RequestRecord(scenario="chat", kind="chat", intended_t=0.0, sent_t=0.0, first_token_t=None, finish_t=1.0,
                         ttft_ms=ttft_ms, e2e_ms=e2e_ms, itl_ms=itl_ms, queue_ms=0.0, lag_ms=0.0,
                         output_tokens=output_tokens, prompt_tokens=10, error_class=error_class,
                         expected_error=expected_error)


@pytest.mark.parametrize("text, expected", [
    ("ttft=500ms,itl=50ms,e2e=20s", SloTargets(ttft_ms=500.0, itl_ms=50.0, e2e_ms=20000.0)),
    ("ttft:500 tpot:50".replace(" ", ","), SloTargets(ttft_ms=500.0, tpot_ms=50.0)),  # vllm bench serve's form
    (" E2EL = 1.5s ", SloTargets(e2e_ms=1500.0)),
    ({"ttft": "250ms", "e2e": 2}, SloTargets(ttft_ms=250.0, e2e_ms=2.0)),  # a bare number is milliseconds
    (["itl=40ms"], SloTargets(itl_ms=40.0)),
    ("", None),
])
def test_slo_forms(text, expected):
    assert parse_slo(text) == expected


@pytest.mark.parametrize("text, message", [
    ("ttfb=1s", "unknown SLO metric 'ttfb': use ttft, itl, tpot or e2e"),
    ("ttft=fast", "ttft: 'fast' is not a duration (use forms like 500ms or 20s)"),
    ("ttft=0ms", "ttft: the target must be above 0"),
    ("ttft", "'ttft' is not KEY=DURATION"),
    ("e2e=1s,e2el=2s", "SLO metric e2e is given twice"),
])
def test_bad_slo_is_one_clear_line(text, message):
    with pytest.raises(ConfigError) as caught:
        resolve_config({"duration": "1h", "slo": text}, environ={})
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert str(caught.value).startswith("invalid setting slo (--slo)")


def test_slo_from_the_environment_and_a_toml_table(tmp_path):
    from_env = resolve_config({"duration": "1h"}, environ={"SOAK_SLO": "ttft=500ms,e2e=20s"})
    path = tmp_path / "soak.toml"
    path.write_text('duration = "1h"\n[slo]\nttft = "500ms"\ne2e = "20s"\n')
    from_file = resolve_config({"config": str(path)}, environ={})
    assert from_env.slo == from_file.slo == SloTargets(ttft_ms=500.0, e2e_ms=20000.0)
    assert resolve_config({"duration": "1h"}, environ={}).slo is None


def test_the_slo_survives_the_stored_config():
    config = resolve_config({"duration": "1h", "slo": "ttft=500ms"}, environ={})
    assert type(config).model_validate_json(config.model_dump_json()).slo == config.slo


def test_a_good_request_meets_every_target_set():
    slo = SloTargets(ttft_ms=200.0, itl_ms=25.0, e2e_ms=2000.0)
    assert slo.met(record())
    assert not slo.met(record(ttft_ms=201.0))
    assert not slo.met(record(itl_ms=(10.0, 50.0)))  # mean gap 30 ms
    assert not slo.met(record(e2e_ms=2001.0))


def test_tpot_is_vllms_time_per_output_token_after_the_first():
    slo = SloTargets(tpot_ms=300.0)
    assert slo.met(record(ttft_ms=100.0, e2e_ms=1000.0, output_tokens=4))  # 900 ms / 3 tokens
    assert not slo.met(record(ttft_ms=100.0, e2e_ms=1003.0, output_tokens=4))
    assert slo.met(record(ttft_ms=100.0, e2e_ms=9000.0, output_tokens=1))  # one token: TPOT 0, as vLLM counts it


def test_failed_and_cancelled_requests_are_never_good():
    slo = SloTargets(e2e_ms=10_000.0)
    assert not slo.met(record(error_class="timeout"))
    assert not slo.met(record(error_class="cancelled"))
    assert slo.met(record(ttft_ms=None, error_class="http_4xx", expected_error=True))  # the refusal it asked for


def test_an_answer_without_a_first_token_time_counts_its_end():
    slo = SloTargets(ttft_ms=500.0)
    assert slo.met(record(ttft_ms=None, e2e_ms=400.0))
    assert not slo.met(record(ttft_ms=None, e2e_ms=600.0))


def test_describe_names_each_target():
    assert SloTargets(ttft_ms=500.0, e2e_ms=20000.0).describe() == "TTFT ≤ 500 ms, E2E ≤ 20 s"


def test_a_record_from_a_load_worker_is_judged_as_one_made_here():
    import msgpack  # Locust's wire format between a worker and the master

    slo = SloTargets(ttft_ms=200.0, itl_ms=25.0, tpot_ms=300.0, e2e_ms=2000.0)
    for sent in (record(), record(itl_ms=(10.0, 50.0)), record(error_class="timeout")):
        received = RequestRecord.from_wire(msgpack.unpackb(msgpack.packb(sent.to_wire())))
        assert slo.met(received) == slo.met(sent)
    assert [slo.met(r) for r in (record(), record(itl_ms=(10.0, 50.0)))] == [True, False]
