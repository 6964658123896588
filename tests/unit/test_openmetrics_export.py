"""`soak export RUN --format openmetrics` on runs stored in a real SQLite database by the store's writer: the latency
and request windows come from `LatencyWindows` fed with real `RequestRecord`s, the samples and events through the
recorder. The text is read back line by line (tests/support/openmetrics_text.py) and held to what promtool and the
OpenMetrics rules need and to what the store says."""

from __future__ import annotations

import io
import json
import math
import random
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from soak import __version__
from soak.cli import main
from soak.errors import StorageError
from soak.load.records import RequestRecord
from soak.metrics import catalog
from soak.metrics.openmetrics import (
    EOF,
    EXPORTED,
    NOT_STORED,
    SOURCES,
    export_openmetrics,
    render,
    scope_of,
    stamped,
    target_label,
    write_family,
)
from soak.samples import GpuProcessReading, GpuReading, ProcessReading, ProcessStats, ServerReading
from soak.slo import SloTargets
from soak.store import Store
from soak.store.models import Run
from soak.store.recorder import Recorder
from soak.telemetry.latency import LatencyWindows
from support.openmetrics_text import OmFamily, parse

pytestmark = pytest.mark.timeout(120)

T0 = 1_800_000_000.25  # the run's start, Unix time
WARMUP_S, WINDOW_S, DURATION_S = 10.0, 10.0, 95.0
SCENARIOS = ("chat", "long, \"quoted\"")  # a scenario name that needs escaping in a label value
RUN_LABEL_VALUES = {"run_id": "r1", "target": "10.0.0.5:8000", "replica": "", "soak_version": "0.0.9"}


def record(scenario: str, t_s: float, rng: random.Random, error_class: str | None = None,
           expected_error: bool = False, lag_ms: float = 3.0) -> RequestRecord:
    """A finished request intended `t_s` after the start, with random latencies (ms) and token counts."""
    ttft_ms = rng.uniform(20.0, 400.0)
    e2e_ms = ttft_ms + rng.uniform(100.0, 3000.0)
    gaps = tuple(rng.uniform(1.0, 60.0) for _ in range(rng.randint(1, 5)))
    return RequestRecord(scenario=scenario, kind="chat", intended_t=T0 + t_s, sent_t=T0 + t_s, first_token_t=None,
                         finish_t=T0 + t_s, ttft_ms=ttft_ms, e2e_ms=e2e_ms, itl_ms=gaps, queue_ms=0.0, lag_ms=lag_ms,
                         output_tokens=rng.randint(1, 300), prompt_tokens=rng.randint(10, 2000),
                         error_class=error_class, expected_error=expected_error)


def requests(rng: random.Random) -> list[RequestRecord]:
    """~900 requests over the run: mostly ok, some failed (two classes), cancelled, expected, or sent late."""
    made = []
    for i in range(900):
        t_s, scenario = i * DURATION_S / 900, SCENARIOS[i % 2]
        if i % 23 == 0:
            made.append(record(scenario, t_s, rng, error_class="http_5xx"))
        elif i % 31 == 0:
            made.append(record(scenario, t_s, rng, error_class="timeout"))
        elif i % 37 == 0:
            made.append(record(scenario, t_s, rng, error_class="cancelled"))
        elif i % 41 == 0:
            made.append(record(scenario, t_s, rng, error_class="http_4xx", expected_error=True))
        else:
            made.append(record(scenario, t_s, rng, lag_ms=1500.0 if i % 29 == 0 else 3.0))
    return made


def run_row(run_id: str, **fields) -> dict:
    """A run row: a finished 95 s run against 10.0.0.5:8000 whose server's process group was pid 100."""
    return {"id": run_id, "status": "completed", "started_at": "2027-01-15T08:00:00.250000+00:00", "t0_epoch_s": T0,
            "planned_duration_s": 90.0, "duration_s": DURATION_S, "ended_at": "2027-01-15T08:01:35.250000+00:00",
            "warmup_s": WARMUP_S, "window_s": WINDOW_S, "out_dir": "/nonexistent", "target_kind": "reference",
            "target_url": "http://10.0.0.5:8000/v1", "model": "soak-reference", "config_json": "{}",
            "environment_json": json.dumps({"soak": "0.0.9"}), "server_pgid": 100, **fields}


SUMMARY = {"findings": [{"check": "leak.rss", "verdict": "PASS"}, {"check": "hang", "verdict": "FAIL"},
                        {"check": "leak.vram", "verdict": "SKIPPED"}]}


def record_samples(recorder: Recorder, seconds: int) -> None:
    """One sample a second: the server's API process (a root), engine and a helper, soak itself, a scrape, a GPU."""
    for s in range(seconds):
        recorder.samples([
            ProcessReading("server", ProcessStats(100, "python3", 10**9 + s * 4096, swap_bytes=s)),
            ProcessReading("server", ProcessStats(101, "VLLM::EngineCore", 2 * 10**9 + s * 8192, swap_bytes=0)),
            ProcessReading("server", ProcessStats(102, "tokenizer", 10**8, swap_bytes=None)),
            ProcessReading("client", ProcessStats(7, "soak", 3 * 10**8 + s)),
            ServerReading("http://10.0.0.5:8000/metrics", True, running=float(s % 4), waiting=0.0, kv_usage=s / 200),
            GpuReading(0, mem_used_bytes=40 * 2**30 + s),
            GpuProcessReading(0, 101, 30 * 2**30 + s),
        ], t_s=s + 0.5)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    """r1: a finished run with an SLO; r2: a run still running, 35 s in, by a soak whose environment named no version."""
    store = Store.open(f"sqlite:///{tmp_path_factory.mktemp('db') / 'soak.db'}")
    writer = store.writer()
    writer.insert(Run, run_row("r1", summary_json=json.dumps(SUMMARY)))
    writer.insert(Run, run_row("r2", status="running", duration_s=None, ended_at=None, environment_json="{}",
                               heartbeat_at="2027-01-15T08:00:35.250000+00:00", target_url="https://h.example/v1"))
    rng = random.Random(7)
    for run_id, upto_s in (("r1", DURATION_S), ("r2", 35.0)):
        windows = LatencyWindows(T0, WARMUP_S, WINDOW_S, slo=SloTargets(ttft_ms=200.0) if run_id == "r1" else None)
        for request in requests(rng):
            if request.intended_t - T0 < upto_s:
                windows.add(request)
        recorder = Recorder(writer, run_id, T0)
        for part in windows.flush_windows(now_s=upto_s):
            recorder.windows(part)
        record_samples(recorder, int(upto_s))
        recorder.event("server_start", "reference server", {"pid": 100}, t_s=0.0)
        for t_s in (t_s for t_s in (20.0, 20.0, 60.0) if t_s < upto_s):
            recorder.event("probe_start", "idle probe", t_s=t_s)
    assert writer.flush()
    yield store
    store.close()


@pytest.fixture(scope="module")
def exported(store, tmp_path_factory) -> dict[str, tuple[str, list[OmFamily]]]:
    """run id → (the exported text, its families)."""
    folder = tmp_path_factory.mktemp("export")
    texts = {}
    for run_id in ("r1", "r2"):
        text = export_openmetrics(store, run_id, folder).path.read_text(encoding="utf-8")
        texts[run_id] = (text, parse(text))
    return texts


def family(families: list[OmFamily], name: str) -> OmFamily:
    return next(f for f in families if f.name == name)


def stored(store: Store, sql: str, *params) -> list[tuple]:
    with store.engine.connect() as connection:
        return list(connection.exec_driver_sql(sql, params))


# -- the shape promtool needs ------------------------------------------------------------------------------------
def test_every_catalog_series_is_exported_or_named_as_not_stored():
    assert set(SOURCES) | set(NOT_STORED) == set(catalog.CATALOG)
    assert not set(SOURCES) & set(NOT_STORED)
    assert list(EXPORTED) == [spec for spec in catalog.CATALOG if spec in SOURCES]


def test_families_have_the_catalogs_names_and_types_and_come_whole(exported):
    _, families = exported["r1"]  # parse() refuses a family whose metadata comes twice, or a text without # EOF last
    specs = {spec.prom: spec for spec in catalog.CATALOG}
    for fam in families:
        spec = specs[fam.name]
        assert fam.type == spec.kind.value and fam.help == spec.help
        assert {sample.name for sample in fam.samples} <= {spec.sample_name, f"{fam.name}_bucket", f"{fam.name}_count",
                                                           f"{fam.name}_sum"}
        for sample in fam.samples:
            assert set(sample.labels) - {"le"} == {*catalog.RUN_LABELS, *spec.labels}, sample


def test_each_series_is_whole_and_in_time_order_inside_the_run(exported):
    _, families = exported["r1"]
    for fam in families:
        closed: set = set()
        current = None
        for sample in fam.samples:  # a label set's samples (a histogram's: all its buckets, _count, _sum) together
            metric = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            if metric != current:
                assert metric not in closed, f"{fam.name}{dict(metric)} is split"
                closed.add(current)
                current = metric
        for series, samples in fam.by_series().items():
            stamps = [sample.timestamp for sample in samples]
            assert stamps == sorted(set(stamps)), series  # strictly increasing
            assert T0 <= stamps[0] and stamps[-1] <= T0 + DURATION_S, series


@pytest.mark.parametrize("spec", [catalog.TTFT, catalog.TOKENS, catalog.REQUESTS, catalog.SERVER_RSS],
                         ids=lambda spec: spec.prom)
def test_every_line_is_what_prometheus_client_writes_for_the_family(store, spec):
    scope = scope_of(store, store.get_run("r1"))
    whole = render(spec, scope, list(stamped(SOURCES[spec](store, scope, spec), scope.run.t0_epoch_s)))
    written = io.BytesIO()
    write_family(written, spec, scope, SOURCES[spec](store, scope, spec))
    assert written.getvalue() + EOF == whole  # later points reuse a series' rendered labels: the same bytes


def test_every_series_carries_the_run_labels(exported):
    _, families = exported["r1"]
    for fam in families:
        for sample in fam.samples:
            assert {key: sample.labels[key] for key in catalog.RUN_LABELS} == RUN_LABEL_VALUES


def test_the_exported_text_has_promtools_timestamps_in_seconds_with_milliseconds(exported):
    text, _ = exported["r1"]
    first = text.splitlines()[2]
    assert first.endswith(" 1800000000.250000000")


# -- counters ----------------------------------------------------------------------------------------------------
def final_values(fam: OmFamily, name: str, key: str | tuple[str, ...]) -> dict:
    """label value(s) → the series' last value; every series checked monotone and starting at 0 on the way."""
    keys = (key,) if isinstance(key, str) else key
    finals = {}
    for samples in fam.by_series(name).values():
        values = [sample.value for sample in samples]
        assert values == sorted(values) and values[0] == 0.0, samples[0]
        labels = samples[0].labels
        finals[tuple(labels[k] for k in keys) if len(keys) > 1 else labels[keys[0]]] = values[-1]
    return finals


def test_request_counters_are_running_totals_of_the_stored_windows(store, exported):
    _, families = exported["r1"]
    rows = stored(store, "select scenario, sum(ok), sum(err_connect + err_timeout + err_http_4xx + err_http_5xx + "
                         "err_bad_stream + err_invalid_output), sum(cancelled), sum(expected_errors), sum(err_timeout), "
                         "sum(err_http_5xx), sum(slo_met) from request_windows where run_id = 'r1' and scenario != '*' "
                         "group by scenario")
    outcomes = final_values(family(families, "soak_requests"), "soak_requests_total", ("scenario", "outcome"))
    errors = final_values(family(families, "soak_request_errors"), "soak_request_errors_total",
                          ("scenario", "error_class"))
    slo = final_values(family(families, "soak_requests_within_slo"), "soak_requests_within_slo_total", "scenario")
    for scenario, ok, failed, cancelled, expected, timeouts, http_5xx, slo_met in rows:
        assert {outcome: outcomes[(scenario, outcome)] for outcome in ("ok", "error", "cancelled", "expected_error")} \
            == {"ok": ok, "error": failed, "cancelled": cancelled, "expected_error": expected}
        assert (errors[(scenario, "timeout")], errors[(scenario, "http_5xx")]) == (timeouts, http_5xx)
        assert slo[scenario] == slo_met
    assert not any(key[1] in ("connect", "bad_stream") for key in errors)  # never counted: no series, as live


def test_counters_step_at_each_window_end(exported):
    _, families = exported["r1"]
    samples = family(families, "soak_requests").by_series()
    chat_ok = next(v for k, v in samples.items() if ("outcome", "ok") in k[1] and ("scenario", "chat") in k[1])
    ends = [T0 + WARMUP_S + i * WINDOW_S for i in range(9)] + [T0 + DURATION_S]  # the open window cut at the end
    assert [sample.timestamp for sample in chat_ok] == pytest.approx([T0, *ends])


def test_late_sends_count_every_scenario_once(exported):
    _, families = exported["r1"]
    late = family(families, "soak_requests_late").by_series()
    assert len(late) == 1
    expected = sum(1 for r in requests(random.Random(7)) if r.lag_ms > 1000)
    assert list(late.values())[0][-1].value == expected


def test_event_counts_run_by_kind(exported):
    _, families = exported["r1"]
    events = {dict(key[1])["kind"]: [(s.timestamp, s.value) for s in samples]
              for key, samples in family(families, "soak_events").by_series().items()}
    assert events["probe_start"] == [(T0, 0.0), (T0 + 20, 2.0), (T0 + 60, 3.0)]  # two at one time: the later total
    assert events["server_start"] == [(T0, 1.0)]  # at the run's start: its 0 gives way to it


# -- histograms --------------------------------------------------------------------------------------------------
def histogram_points(fam: OmFamily) -> dict[tuple, list[tuple[float, list[tuple[float, float]], float, float]]]:
    """label set (without le) → [(timestamp, [(le, count)…], count, sum)] in file order."""
    points: dict[tuple, list] = defaultdict(list)
    for sample in fam.samples:
        metric = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
        series = points[metric]
        if not series or series[-1][0] != sample.timestamp:
            series.append([sample.timestamp, [], None, None])
        if sample.name.endswith("_bucket"):
            series[-1][1].append((float(sample.labels["le"]), sample.value))
        elif sample.name.endswith("_count"):
            series[-1][2] = sample.value
        else:
            series[-1][3] = sample.value
    return points


@pytest.mark.parametrize("spec, metric", [(catalog.TTFT, "ttft"), (catalog.E2E, "e2e"), (catalog.ITL, "itl"),
                                          (catalog.LAG, "lag")])
def test_latency_histograms_are_cumulative_and_agree_with_count(store, exported, spec, metric):
    _, families = exported["r1"]
    points = histogram_points(family(families, spec.prom))
    assert {dict(metric_labels)["scenario"] for metric_labels in points} == set(SCENARIOS)
    for metric_labels, series in points.items():
        counts = []
        for _, buckets, count, total in series:
            assert [le for le, _ in buckets] == [*spec.buckets, math.inf]
            values = [value for _, value in buckets]
            assert values == sorted(values) and values[-1] == count and total >= 0
            counts.append(count)
        assert counts == sorted(counts) and counts[0] == 0
        scenario = dict(metric_labels)["scenario"]
        (stored_count,), = stored(store, "select sum(count) from latency_windows where run_id = 'r1' and metric = ? "
                                         "and scenario = ?", metric, scenario)
        assert counts[-1] == stored_count


def exact_values_s(metric: str, scenario: str) -> list[float]:
    """What the requests of r1 recorded, in seconds at the microsecond they were recorded at."""
    values = []
    for request in requests(random.Random(7)):
        succeeded = request.error_class is None and not request.expected_error
        if request.scenario != scenario or (metric != "lag" and not succeeded):
            continue
        values += {"ttft": [request.ttft_ms], "e2e": [request.e2e_ms], "itl": list(request.itl_ms),
                   "lag": [request.lag_ms]}[metric]
    return [round(value * 1000.0) / 1e6 for value in values]


@pytest.mark.parametrize("spec, metric", [(catalog.TTFT, "ttft"), (catalog.ITL, "itl")])
def test_buckets_count_the_values_under_each_bound_to_hdrs_precision(exported, spec, metric):
    _, families = exported["r1"]
    for metric_labels, series in histogram_points(family(families, spec.prom)).items():
        values = exact_values_s(metric, dict(metric_labels)["scenario"])
        _, buckets, count, total = series[-1]
        assert count == len(values) and total == pytest.approx(sum(values), rel=1e-3)
        for le, exported_count in buckets[:-1]:  # the HDR bucket holding a bound is 0.1 % wide at most
            assert sum(v <= le * 0.998 for v in values) <= exported_count <= sum(v <= le * 1.002 for v in values), le


def test_tokens_have_their_sums_and_counts_and_no_invented_buckets(exported):
    _, families = exported["r1"]
    points = histogram_points(family(families, catalog.TOKENS.prom))
    made = requests(random.Random(7))
    for metric_labels, series in points.items():
        labels = dict(metric_labels)
        mine = [r for r in made if r.scenario == labels["scenario"]]
        tokens = {"input": sum(r.prompt_tokens for r in mine), "output": sum(r.output_tokens for r in mine)}
        _, buckets, count, total = series[-1]
        assert [le for le, _ in buckets] == [math.inf]
        assert (count, total) == (len(mine), tokens[labels["gen_ai_token_type"]])
    assert {dict(m)["gen_ai_token_type"] for m in points} == {"input", "output"}


# -- gauges ------------------------------------------------------------------------------------------------------
def gauge_series(families: list[OmFamily], spec: catalog.MetricSpec) -> dict[tuple, list[tuple[float, float]]]:
    """The spec's own label values → [(timestamp, value)]."""
    return {tuple(dict(key[1])[name] for name in spec.labels): [(s.timestamp, s.value) for s in samples]
            for key, samples in family(families, spec.prom).by_series().items()}


def test_server_processes_are_labelled_by_role_at_their_sample_times(exported):
    _, families = exported["r1"]
    rss, swap = gauge_series(families, catalog.SERVER_RSS), gauge_series(families, catalog.SERVER_SWAP)
    assert set(rss) == {("api", "python3", "100"), ("engine", "VLLM::EngineCore", "101"), ("process", "tokenizer", "102")}
    assert rss[("engine", "VLLM::EngineCore", "101")][:2] == [(T0 + 0.5, 2e9), (T0 + 1.5, 2e9 + 8192)]
    assert len(rss[("api", "python3", "100")]) == int(DURATION_S)
    assert set(swap) == {("api", "python3", "100"), ("engine", "VLLM::EngineCore", "101")}  # 102's swap was not read


def test_client_server_and_gpu_gauges(exported):
    _, families = exported["r1"]
    assert gauge_series(families, catalog.CLIENT_RSS)[()][-1] == (T0 + 94.5, 3e8 + 94)
    source = ("http://10.0.0.5:8000/metrics",)
    assert gauge_series(families, catalog.KV_USAGE)[source][10] == (T0 + 10.5, 0.05)
    assert gauge_series(families, catalog.RUNNING)[source][3] == (T0 + 3.5, 3.0)
    assert len(gauge_series(families, catalog.WAITING)[source]) == int(DURATION_S)
    assert gauge_series(families, catalog.GPU_USED)[("0",)][0] == (T0 + 0.5, 40 * 2**30)
    assert gauge_series(families, catalog.GPU_PROCESS)[("0", "101")][-1] == (T0 + 94.5, 30 * 2**30 + 94)


def test_run_gauges_span_the_run_and_the_verdicts_stand_at_its_end(exported):
    _, families = exported["r1"]
    grid = [T0, T0 + 30, T0 + 60, T0 + 90, T0 + DURATION_S]
    info = gauge_series(families, catalog.RUN_INFO)
    assert list(info) == [("soak-reference", "reference")] and [t for t, _ in info[list(info)[0]]] == grid
    assert {v for _, v in gauge_series(families, catalog.RUN_START)[()]} == {T0}
    assert {v for _, v in gauge_series(families, catalog.RUN_PLANNED)[()]} == {90.0}
    assert {v for _, v in gauge_series(families, catalog.RUN_WARMUP)[()]} == {WARMUP_S}
    assert gauge_series(families, catalog.FINISHED)[()] == [(t, 1.0 if t == grid[-1] else 0.0) for t in grid]
    verdicts = gauge_series(families, catalog.CHECK_VERDICT)
    assert verdicts == {("hang",): [(T0 + DURATION_S, 3.0)], ("leak.rss",): [(T0 + DURATION_S, 0.0)],
                        ("leak.vram",): [(T0 + DURATION_S, -1.0)]}


# -- a run still running, from an older soak -----------------------------------------------------------------------
def test_a_running_run_exports_what_is_stored_so_far(exported):
    _, families = exported["r2"]
    names = {fam.name for fam in families}
    assert catalog.CHECK_VERDICT.prom not in names and catalog.WITHIN_SLO.prom not in names
    assert {v for _, v in gauge_series(families, catalog.FINISHED)[()]} == {0.0}
    labels = family(families, catalog.REQUESTS.prom).samples[0].labels
    assert (labels["run_id"], labels["target"], labels["soak_version"]) == ("r2", "h.example", __version__)
    for fam in families:  # the open window (ending at 40 s) is cut at the last heartbeat, 35 s in
        assert max(sample.timestamp for sample in fam.samples) <= T0 + 35.0, fam.name
    assert max(s.timestamp for s in family(families, catalog.REQUESTS.prom).samples) == T0 + 35.0


def test_target_is_host_and_port_as_the_url_wrote_them():
    assert target_label("http://127.0.0.1:8000/v1") == "127.0.0.1:8000"
    assert target_label("https://api.example.com/v1") == "api.example.com"  # as written: the live page's label
    assert target_label("http://user:secret@h:8000/v1") == "h:8000"
    assert target_label("http://[::1]:9000") == "[::1]:9000"
    assert target_label("http://a:8001/v1 http://b:8002/v1") == "a:8001"  # a fleet's own run: its first replica
    assert target_label(None) == ""


# -- the command -------------------------------------------------------------------------------------------------
def test_the_command_writes_run_id_om_txt_and_prints_its_path(store, tmp_path):
    db = store.engine.url.render_as_string(hide_password=False)
    result = CliRunner().invoke(main, ["export", "r1", "--db", db, "--format", "openmetrics",
                                       "--export-dir", str(tmp_path / "x")])
    assert result.exit_code == 0, result.output
    path = tmp_path / "x" / "r1.om.txt"
    assert result.stdout.strip().endswith(str(path)) and "samples" in result.stdout
    assert "exporting soak_requests…" in result.stderr
    assert parse(path.read_text(encoding="utf-8"))
    assert [p.name for p in (tmp_path / "x").iterdir()] == ["r1.om.txt"]  # no partial file left behind


def test_an_unknown_run_is_one_line(store, tmp_path):
    db = store.engine.url.render_as_string(hide_password=False)
    result = CliRunner().invoke(main, ["export", "nope", "--db", db, "--format", "openmetrics",
                                       "--export-dir", str(tmp_path)])
    assert result.exit_code != 0
    assert result.stderr.strip().splitlines() == [f"soak: error: unknown run id 'nope' in {store.url}"]
    assert not list(Path(tmp_path).iterdir())


# -- a database from the first schema, and a folder that cannot be written -------------------------------------------
OLD_ROWS = (
    "insert into runs (id, status, started_at, t0_epoch_s, planned_duration_s, duration_s, ended_at, warmup_s, "
    "window_s, out_dir, target_kind, target_url, config_json, environment_json) values ('old', 'completed', "
    "'2027-01-15T08:00:00', 1800000000, 20, 20, '2027-01-15T08:00:20', 5, 5, '/x', 'external', "
    "'http://srv:9000', '{}', '{}')",
    "insert into request_windows values ('old', 0, 'chat', 5, 10, 4, 3, 0, 0, 0, 1, 0, 0, 0, 40, 400, 0)",
    "insert into request_windows values ('old', 0, '*', 5, 10, 4, 3, 0, 0, 0, 1, 0, 0, 0, 40, 400, 0)",
    "insert into process_samples (run_id, t_s, role, pid, name, rss_bytes) values ('old', 3, 'server', 9, 'srv', 1000)",
)


def test_a_run_stored_by_the_first_schema_exports_what_it_stored(tmp_path):
    from alembic import command
    from sqlalchemy import text

    from soak.store.db import alembic_config, create_db_engine

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_db_engine(url)
    command.upgrade(alembic_config(engine), "0001")
    with engine.begin() as connection:
        for sql in OLD_ROWS:
            connection.execute(text(sql))
    engine.dispose()
    with Store.open(url, read_only=True) as old:
        families = parse(export_openmetrics(old, "old", tmp_path / "x").path.read_text(encoding="utf-8"))
    names = {fam.name for fam in families}
    assert {catalog.REQUESTS.prom, catalog.ERRORS.prom, catalog.SERVER_RSS.prom, catalog.TOKENS.prom} <= names
    assert not {catalog.WITHIN_SLO.prom, catalog.SERVER_SWAP.prom, catalog.CHECK_VERDICT.prom} & names
    ok = family(families, catalog.REQUESTS.prom).by_series("soak_requests_total")
    assert [[s.value for s in samples] for samples in ok.values()] == [[0.0, 3.0], [0.0, 1.0]]  # ok, then error
    labels = family(families, catalog.SERVER_RSS.prom).samples[0].labels
    assert (labels["target"], labels["soak_version"], labels["process_role"]) == ("srv:9000", __version__, "process")


def test_a_folder_that_cannot_be_written_is_one_line(store, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StorageError, match=r"^cannot write .*r1\.om\.txt: "):
        export_openmetrics(store, "r1", blocker / "x")
