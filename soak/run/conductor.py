"""The conductor of one run: target up → telemetry → load with phases and probes → stop → finalise.

Importing this module imports Locust, which monkey-patches the process for gevent; commands that only read
the database (`runs`, `report`, `close`) do not import it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soak.config import RunConfig
from soak.contracts import EventKind, Progress, Stage, Summary, measured_rate_rps, stage_at
from soak.errors import EXIT_FORCED, SoakError, StorageError
from soak.load import LoadHooks, NoLoad, RequestRecord, check_load, gather_workers, start_load
from soak.load.canary import ProbeGate, start_canary
from soak.load.lora import load_at_start, record_reply, reload_adapters, start_churn
from soak.run.capabilities import check_mix
from soak.run.early_stop import watch_for_failure
from soak.run.environment import capture_environment, dumps
from soak.run.finalise import finalise_run
from soak.run.forensics import ForensicsWatch
from soak.run.ledger import OutcomeLedger
from soak.run.locking import hold_run_lock
from soak.run.metrics import RunMetrics, run_identity
from soak.run.notify import failed_run_payload, notify_from_env
from soak.run.server_watch import DrainWatch, drain_timeout_hook, record_server_processes
from soak.samples import KeptRequest, MetricReading
from soak.store import Store, StoreWriter
from soak.store.models import CLIENT_LOOP_LAG_MAX_METRIC, CLIENT_LOOP_LAG_P99_METRIC, Run, RunLabel
from soak.store.recorder import Recorder, new_run_id, utc_now_iso
from soak.store.writer import Outage, StorageBudget
from soak.target import ServerInfo, Target, auth_headers, make_target
from soak.target.openai import list_models
from soak.target.reachability import Blame, Loopback, Reachability, probe_reachability
from soak.telemetry.dcgm import GpuClaim
from soak.telemetry.latency import LatencyWindows
from soak.telemetry.sampler import Telemetry, TelemetrySources
from soak.telemetry.server_log import scanner_for_run
from soak.units import format_duration

log = logging.getLogger(__name__)

STOP_DRAIN_S = 10.0  # in-flight requests get this long at the end; the whole stop must fit in 30 s
TICK_S = 0.5
HEALTH_EVERY_S, DOWN_CHECKS = 2.0, 3
FORENSICS_READ_S = 600.0  # how long the end of a run waits for a forensics capture to be read
STORAGE_RETRY_S = 15.0  # how long the end of a run waits for a failing database to take its last rows
SCHEDULE_NAME_ENV = "SOAK_SCHEDULE_NAME"  # set by `soak daemon` for the runs it starts

# Receives each Progress as the dict of its fields (model_dump), which is what the CLI's printer reads.
ProgressCallback = Callable[[Progress], None]


@dataclass
class StopRequest:
    """Set by SIGINT/SIGTERM: the first asks for a clean stop, the second forces it."""

    requested: bool = False
    reason: str = ""
    on_force: Callable[[], None] | None = None

    def signal(self, signum: int) -> None:
        if self.requested and self.on_force:
            self.on_force()
        self.requested = True
        self.reason = signal.Signals(signum).name


def install_signal_handlers(stop: StopRequest) -> None:
    """Route SIGINT and SIGTERM to `stop`, through gevent when Locust has patched the process."""
    try:
        import gevent

        for signum in (signal.SIGINT, signal.SIGTERM):
            gevent.signal_handler(signum, stop.signal, signum)
    except ImportError:  # pragma: no cover - Locust always brings gevent
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda s, _f: stop.signal(s))


class RunLogHandler(logging.FileHandler):
    """The run's log file. A line it cannot write (its volume is full) is said once on stderr, not with a traceback
    per line; the full volume itself is a storage outage the writer reports."""

    failed = False

    def handleError(self, record: logging.LogRecord) -> None:
        if not self.failed:
            self.failed = True
            sys.stderr.write(f"soak: cannot write the run's log {self.baseFilename} ({sys.exc_info()[1]}); "
                             "its lines are dropped while it cannot\n")


def setup_run_logging(run_dir: Path) -> logging.Handler:
    """One log file per run, in its folder."""
    handler = RunLogHandler(run_dir / "soak.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    # APScheduler logs "Running job …" at INFO on every sampling tick (most of a run's log); its
    # warnings (missed runs) still come through.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    return handler


@dataclass
class RunState:
    """What the conductor holds while a run is under way."""

    config: RunConfig
    run_id: str
    run_dir: Path
    target: Target
    info: ServerInfo | None = None
    writer: StoreWriter | None = None
    recorder: Recorder | None = None
    telemetry: Telemetry | None = None
    load: Any = None
    workers: Any = None  # soak.load.pool.WorkerPool: the load workers, gathered before the run opens
    capabilities: Any = None  # soak.run.capabilities.MixCheck: what the server accepts, and what the mix dropped
    windows: LatencyWindows | None = None
    log_scanner: Any = None  # soak.telemetry.server_log.ServerLogScanner, when there is a log to scan
    canary: Any = None  # soak.load.canary.CanaryLoop, unless --canary-every 0
    adapters_loaded: list = field(default_factory=list)  # (LoraAdapter, AdapterReply) of --lora loaded at start
    churn: Any = None  # soak.load.lora.LoraChurn, with --lora-churn-every
    drains: DrainWatch | None = None  # requests that kept streaming through a timed-out probe drain
    early_stop: Any = None  # soak.run.early_stop.EarlyStopWatch, with --stop-on-fail or an export of the series
    forensics: ForensicsWatch | None = None  # leak forensics: opens a tracker's window when one is due
    pending_stop: Any = None  # an early-stop decision waiting for a forensics window to close
    ledger: OutcomeLedger | None = None
    web: Any = None  # soak.run.live_view.WebProcess, with --web
    web_socket: Any = None  # (listening socket, base URL) of --web, bound before anything starts
    metrics: RunMetrics | None = None  # the exported series (--metrics-bind, --otlp-endpoint), bound before anything
    outages_begun: int = 0  # storage outages whose start was recorded and said
    outages_ended: int = 0  # … and whose end was
    looked_outages: int = 0  # storage outages seen when the early-stop look last went ahead
    storage_spent: str = ""  # why a storage outage outgrew its budget (the run then stops, exit 4)
    requests_seen: int = 0  # every request the client finished, as the run_end event records it
    t0: float = 0.0
    status: str = "running"
    end_reason: str = ""
    health_checked_at: float = 0.0
    loop_lag_at: float = 0.0
    down_streak: int = 0
    in_outage: bool = False
    network_outage: bool = False  # /health down and the route to the server lost (not the server's outage)
    server_blamed: int = 0  # checks since a lost route came back with /health still down
    health_up_s: float = 0.0  # when /health last answered (seconds into the run): where a network outage began
    loopback: Loopback | None = None  # soak's own listening socket, the other side of a network outage's probe


class Conductor:
    """Runs one soak from a resolved config and returns its summary."""

    def __init__(self, config: RunConfig, on_progress: ProgressCallback | None = None):
        self.config = config
        self.on_progress = on_progress or (lambda _p: None)
        self.stop = StopRequest(on_force=self._force_stop)
        run_id = new_run_id()
        run_dir = config.out_dir / run_id
        self.state = RunState(config, run_id, run_dir, make_target(config, run_dir))
        self.store: Store | None = None
        self.summary: Summary | None = None  # once finalised: what a failure after it still notifies

    # -- phases of a run --------------------------------------------------------------------------
    def execute(self) -> Summary:
        """Run the soak end to end; SoakError on failures before load starts."""
        state = self.state
        check_load(self.config)  # a bad scenario, dataset, trace or phase: before any folder, database or server
        with self._gpu_lock():
            state.run_dir.mkdir(parents=True, exist_ok=True)
            handler = setup_run_logging(state.run_dir)
            try:
                self.store = Store.open(self.config.db_url)
                install_signal_handlers(self.stop)
                self._bind_web()
                self._bind_metrics()
                self._start_target()
                if not self.config.observe_only:  # an observed replica is sent nothing, not even a question
                    self._load_adapters()
                    self._check_capabilities()
                    self._gather_workers()
                self._open_run()
                self._start_web()
                self._start_or_close()
                self._drive()
                return self._finish()
            finally:
                self._cleanup()
                logging.getLogger().removeHandler(handler)
                handler.close()

    def _gpu_lock(self) -> contextlib.AbstractContextManager:
        """A run that starts its own server holds `<out>/.soak.lock`, so two soaks never share a GPU."""
        if self.state.target.kind == "external":
            return contextlib.nullcontext()
        self.config.out_dir.mkdir(parents=True, exist_ok=True)
        return hold_run_lock(self.config.out_dir)

    def _start_target(self) -> None:
        self._report(Progress(stage=Stage.STARTING, run_id=self.state.run_id, target=self.state.target.kind))
        self.state.info = self.state.target.start()
        for note in self.state.info.notes:  # e.g. a machine too small for a CPU vLLM and soak: said before load
            self._say(note)

    def _load_adapters(self) -> None:
        """Load the --lora adapters the server does not list yet, before the capabilities are asked (which then
        list them): one the server refuses stops here (TargetError, no run opened)."""
        state = self.state
        if not self.config.load.loras:
            return
        listed = [str(card.get("id")) for card in list_models(state.info.base_url, auth_headers(self.config))]
        state.adapters_loaded = load_at_start(self.config, state.info.base_url, listed, auth_headers(self.config))
        names = ", ".join(adapter.name for adapter, _ in state.adapters_loaded) or "none (all listed already)"
        self._say(f"LoRA adapters loaded: {names}")

    def _check_capabilities(self) -> None:
        """Ask the server what it accepts before the run opens: a scenario it refuses stops here (TargetError,
        no run opened) or, with --skip-unsupported, leaves the mix."""
        state = self.state
        state.capabilities = check_mix(self.config, state.info.base_url, state.info.model, auth_headers(self.config),
                                       self.config.target.server_log or state.info.log_path)
        self.config = state.config = state.capabilities.config
        self._say(state.capabilities.describe())

    def _gather_workers(self) -> None:
        """Load workers (local, and `soak worker`s on other hosts) join before the run opens: waiting for them
        takes nothing from the run's time, and workers that never come leave no run behind (TargetError)."""
        self.state.workers = gather_workers(self.config, self.state.info.base_url, say=self._say,
                                            cancelled=lambda: self.stop.requested)

    def _open_run(self) -> None:
        """Insert the run row (status running) once the server is up: a failed start leaves no run behind."""
        state = self.state
        state.writer = self.store.writer(budget=StorageBudget(self.config.storage_buffer_bytes,
                                                              self.config.storage_outage_s), files_at=state.run_dir)
        state.t0 = time.time()
        state.recorder = Recorder(state.writer, state.run_id, state.t0)
        state.writer.insert(Run, self._run_row())
        for key, value in self.config.labels.items():  # queued after the run row, so committed with or after it
            state.writer.insert(RunLabel, {"run_id": state.run_id, "key": key, "value": value})
        state.recorder.event(EventKind.SERVER_START, f"{state.info.kind} server at {state.info.base_url}",
                             {"pid": state.info.pgid, "cmd": state.info.cmd, "model": state.info.model})
        if state.capabilities is not None:
            state.recorder.event(EventKind.CAPABILITIES, state.capabilities.describe(), state.capabilities.data())
        for adapter, reply in state.adapters_loaded:
            record_reply(state.recorder, "load", adapter, reply)
        identity = run_identity(self.config, state.run_id, state.info.base_url, state.info.model, state.info.kind,
                                state.t0)
        state.metrics.open(identity, state.recorder, counters=lambda: state.load.counters() if state.load else None,
                           roots=state.target.root_pids)

    def _run_row(self) -> dict[str, Any]:
        state, config, info = self.state, self.config, self.state.info
        config_json = config.model_dump_json()
        environment = capture_environment(config, info.cmd, gpus=[], server=info.server_environment)
        return {
            "id": state.run_id, "status": "running", "started_at": utc_now_iso(), "t0_epoch_s": state.t0,
            "heartbeat_at": utc_now_iso(), "planned_duration_s": config.duration_s, "warmup_s": config.warmup_s,
            "window_s": config.window_s, "soak_pid": os.getpid(), "server_pgid": info.pgid,
            "server_cmd": dumps(info.cmd) if info.cmd else None, "out_dir": str(state.run_dir),
            "target_kind": info.kind, "target_url": info.base_url, "model": info.model,
            "config_json": config_json, "environment_json": dumps(environment),
            "schedule_name": os.environ.get(SCHEDULE_NAME_ENV) or None,
            "fleet_id": config.fleet_id, "replica": config.replica,
        }

    def _start_measuring(self) -> None:
        state, config = self.state, self.config
        state.windows = LatencyWindows(state.t0, config.warmup_s, config.window_s,
                                       keep_open_s=config.load.request_timeout_s + 2 * config.telemetry.flush_every_s,
                                       slo=config.slo)
        sources = TelemetrySources(server_pids=state.target.root_pids, metrics_urls=state.info.metrics_urls,
                                   health_url=state.info.base_url, headers=auth_headers(config),
                                   server_kind=config.target.server_kind, model=state.info.model,
                                   gpu_claim=GpuClaim.of_replica(config.replica, config.target.gpus)
                                   if config.fleet_id and config.replica else GpuClaim())
        state.telemetry = Telemetry(state.recorder, sources, state.windows, config.telemetry.sample_every_s,
                                    config.telemetry.flush_every_s)
        self._record_gpus()
        self._say(record_server_processes(state.recorder, state.info))
        state.ledger = OutcomeLedger(state.recorder)
        state.telemetry.start()
        self._say(state.telemetry.dialects.describe())
        hooks = self._watch_log_and_canary()
        if config.observe_only:
            state.load = NoLoad()
            self._say(f"observing {state.info.base_url} only: its load goes through the router")
        else:
            state.load = start_load(config, base_url=state.info.base_url, model=state.info.model, t0=state.t0,
                                    hooks=hooks, workers=state.workers)
            state.churn = start_churn(config, lambda: state.info.base_url, auth_headers(config), state.recorder)
        state.early_stop = watch_for_failure(state.run_id, config, on_look=state.metrics.look)
        self._say(state.early_stop and state.early_stop.describe())
        state.forensics = ForensicsWatch(config, state.run_id, state.run_dir, state.recorder, state.t0,
                                         processes=lambda: list(state.telemetry.latest.server_processes),
                                         roots=state.target.root_pids, early_stop=state.early_stop, say=self._say)
        self._say(state.forensics.describe())

    def _start_or_close(self) -> None:
        """Start telemetry and load. When the load cannot start once the run is open (a load worker cannot
        prepare the run, say), keep what was collected: end the run as aborted, finalise it, and re-raise
        saying where its report is."""
        try:
            self._start_measuring()
        except SoakError as exc:
            if self.state.ledger is None or self.state.load is not None:
                raise
            self.state.end_reason = f"the load could not start: {exc}"
            summary = self._finish()
            exc.args = (f"{exc}; run {self.state.run_id} was closed as aborted (report: {summary.report_html})",)
            raise

    def _watch_log_and_canary(self) -> LoadHooks:
        """Start the server-log scan and the canary; the load's hooks, through which the canary learns of probes."""
        state, config = self.state, self.config
        provoked = state.capabilities.provoked() if state.capabilities is not None else ()
        state.log_scanner = scanner_for_run(config.target.server_log, state.info.log_path, state.recorder, provoked)
        gate = ProbeGate()
        state.canary = None if config.observe_only else start_canary(
            config.load.canary_every_s, config.load.request_timeout_s, lambda: state.info.base_url, state.info.model,
            auth_headers(config), state.recorder, gate,
            on_refused=state.log_scanner.provoke if state.log_scanner is not None else None)
        on_idle_probe = state.telemetry.probe_reading
        if state.canary is not None:
            on_idle_probe = state.canary.around_probe(on_idle_probe, config.probe_hold_s, config.probe_drain_timeout_s)
        state.drains = DrainWatch(state.recorder)
        return LoadHooks(on_request=self._on_request, on_event=state.drains.watching(gate.watching(state.recorder.event)),
                         on_idle_probe=on_idle_probe,
                         drain_timeout_s=drain_timeout_hook(config, lambda: state.windows.progress().p99_ms.e2e))

    def _bind_metrics(self) -> None:
        """With --metrics-bind, listen first: a port in use is a clear error before anything starts."""
        self.state.metrics = RunMetrics.bind(self.config)
        self._say(self.state.metrics.describe())

    def _bind_web(self) -> None:
        """With --web, bind its address first: a port in use is a clear error before anything starts."""
        if self.config.web:
            from soak.run.live_view import bind_web_address, exposure_note

            self.state.web_socket = bind_web_address(self.config.web)
            self._say(exposure_note(self.config.web))

    def _start_web(self) -> None:
        """The live view in a process of its own (it reads the database, never this process), once the run's row
        exists."""
        state = self.state
        if state.web_socket is None:
            return
        from soak.run.live_view import start_web_process

        sock, base_url = state.web_socket
        state.web_socket = None
        state.web = start_web_process(self.config.db_url, sock, f"{base_url}/runs/{state.run_id}",
                                      state.run_dir / "web.log")
        log.info("live view at %s (pid %d)", state.web.url, state.web.process.pid)
        self._say(f"live view: {state.web.url}")

    def _stop_web(self) -> None:
        if self.state.web_socket is not None:  # bound but never handed over (the start failed)
            self.state.web_socket[0].close()
        if self.state.web is not None:
            self.state.web.stop()

    def _say(self, message: str | None) -> None:
        """Tell the user something at start (the progress line shows it), when there is something to tell."""
        if message:
            self._report(Progress(stage=Stage.STARTING, run_id=self.state.run_id, target=self.state.target.kind,
                                  message=message))

    def _scan_log(self) -> None:
        """Read what the server wrote to its log since the last tick."""
        if self.state.log_scanner is not None:
            self.state.log_scanner.poll()

    def _record_gpus(self) -> None:
        gpus = self.state.telemetry.gpus.describe()
        if gpus:
            environment = capture_environment(self.config, self.state.info.cmd, gpus,
                                              server=self.state.info.server_environment)
            self.state.recorder.update_run(environment_json=dumps(environment))

    def _on_request(self, record: RequestRecord) -> None:
        state = self.state
        state.requests_seen += 1
        state.metrics.request(record)
        state.windows.add(record)
        state.ledger.add(record)
        if state.drains is not None:
            state.drains.add(record)
        if record.expected_error and state.log_scanner is not None:
            state.log_scanner.provoke(record.as_refusal(time.time()))
        if self.config.keep_requests:
            state.recorder.request(KeptRequest(
                scenario=record.scenario, intended_s=record.intended_t - state.t0, lag_ms=record.lag_ms,
                queue_ms=record.queue_ms, ttft_ms=record.ttft_ms, e2e_ms=record.e2e_ms,
                output_tokens=record.output_tokens, status_code=record.status_code, error_class=record.error_class))

    def _drive(self) -> None:
        """Hold the load until the planned end, a stop signal, a server death or a storage failure."""
        state = self.state
        while True:
            elapsed_s = time.time() - state.t0
            if elapsed_s >= self.config.duration_s and not state.forensics.tracking:  # a window closes first
                state.end_reason = "completed"
                return
            if self.stop.requested:
                state.end_reason = f"stopped by {self.stop.reason}"
                return
            if self._storage_spent():
                return
            if state.load.failure:
                state.end_reason = state.load.failure
                return
            self._scan_log()
            self._follow_target()
            state.forensics.poll(elapsed_s)
            if self._server_lost() or self._failed_beyond_doubt(elapsed_s):
                return
            self._report(self._progress(elapsed_s))
            self._record_loop_lag(elapsed_s)
            state.metrics.tick()
            time.sleep(TICK_S)

    def _follow_target(self) -> None:
        """What the target saw of a server soak did not start: its processes ending, or a pod's container
        restarting, is a crash; the server back on its port a restart; a replaced pod a restart, and the load and
        telemetry go to its address (the target's own info, which health, the canary and LoRA churn read, it
        moved itself)."""
        state = self.state
        for change in state.target.changes():
            if change.kind == "crash":
                state.recorder.event(EventKind.CRASH, change.message, change.data)
                continue
            state.recorder.event(EventKind.RESTART, change.message, change.data)
            if change.kind == "moved" and change.base_url:
                state.telemetry.sources.health_url = change.base_url
                state.load.retarget(change.base_url)

    def _record_loop_lag(self, elapsed_s: float, final: bool = False) -> None:
        """Store the client's event-loop lag so far (P99 and max over the load), once per sample interval."""
        state = self.state
        if not final and elapsed_s - state.loop_lag_at < self.config.telemetry.sample_every_s:
            return
        state.loop_lag_at = elapsed_s
        counters = state.load.counters()
        readings = {CLIENT_LOOP_LAG_P99_METRIC: counters.loop_lag_p99_ms,
                    CLIENT_LOOP_LAG_MAX_METRIC: counters.loop_lag_max_ms}
        state.recorder.samples([MetricReading(name, value) for name, value in readings.items() if value is not None])

    def _failed_beyond_doubt(self, elapsed_s: float) -> bool:
        """With --stop-on-fail: True once the early-stop rule ends the run (docs/gates.md, "Early stop"); a stop on
        a leak waits for a forensics window first, so the tracker sees the server before it is stopped."""
        state = self.state
        decision = state.pending_stop or self._look_for_early_stop(elapsed_s)
        if decision is None:
            return False
        if state.forensics.hold_for_stop(decision.check, elapsed_s):
            state.pending_stop = decision
            return False
        state.end_reason = decision.reason()
        state.recorder.event(EventKind.EARLY_STOP, state.end_reason,
                             {"check": decision.check, "t_s": decision.t_s, "windows": decision.windows})
        return True

    def _look_for_early_stop(self, elapsed_s: float):  # -> StopDecision | None
        """The early-stop watch's answer; none while a storage outage holds rows back, and a look begun before one
        is dropped: the stored run lacks the held rows, and a look would judge it as if they never came."""
        state = self.state
        if state.early_stop is None:
            return None
        outages = len(state.writer.outages)
        if state.writer.outage is not None or outages != state.looked_outages:
            state.looked_outages = outages
            state.early_stop.close()
            return None
        return state.early_stop.poll(elapsed_s)

    def _server_lost(self) -> bool:
        """True when the server died and policy does not (or cannot) bring it back."""
        state = self.state
        code = state.target.exit_code()
        if code is None:
            self._watch_health()
            return False
        tail = state.target.log_tail()
        state.recorder.event(EventKind.CRASH, f"server exited with code {code}", {"exit_code": code, "log_tail": tail[-4000:]})
        if state.target.may_restart() and self._restart():
            return False
        no_restart = "; no restart left" if self.config.target.restart == "on-crash" else ""
        state.status, state.end_reason = "crashed", f"server exited with code {code}{no_restart}"
        return True

    def _watch_health(self) -> None:
        """Pause arrivals while /health says down (3 checks in a row, so one slow answer is not an outage); an outage
        whose cause is a lost route to the server rather than the server is a network outage."""
        state, now = self.state, time.monotonic()
        if now - state.health_checked_at < HEALTH_EVERY_S:
            return
        state.health_checked_at = now
        down = state.target.health() == "down"
        state.down_streak = state.down_streak + 1 if down else 0
        if not down:
            state.health_up_s = state.recorder.elapsed_s()
            if state.in_outage or state.network_outage:
                state.load.resume()
                self._close_outage("arrivals resumed")
        elif state.down_streak >= DOWN_CHECKS:
            self._open_outage(self._probe_route())

    def _probe_route(self) -> Reachability | None:
        """Whose a failed /health is: the route to the server, soak's own loopback, whether the server answers at all
        (soak/target/reachability.py); None for a URL without host and port."""
        state = self.state
        if state.loopback is None:
            state.loopback = Loopback()
        return probe_reachability(state.info.base_url, state.loopback, state.target.process_alive(),
                                  auth_headers(self.config))

    def _open_outage(self, found: Reachability | None) -> None:
        """Pause arrivals for an outage of the server, or of the network when the probes blame the route; an outage
        whose cause changed (the route came back, the server still down) ends and the other begins."""
        state = self.state
        network = found is not None and found.blame != Blame.SERVER
        if state.network_outage == network and (state.in_outage or state.network_outage):
            if network:
                state.server_blamed = 0
            return  # the same outage goes on
        if state.network_outage and not self._server_still_down_after_the_route():
            return  # the route just came back: the server gets the checks a new outage would before it is blamed
        if state.in_outage or state.network_outage:
            self._close_outage("its cause changed")
        else:
            state.load.pause()
        data = found.as_data() if found is not None else {}
        if not network:  # the data say whether it answered at all: accepting and answering nothing is a hang
            state.recorder.event(EventKind.OUTAGE_START, "server /health down; arrivals paused", data)
            state.in_outage = True
            return
        # Its windows are left out from the last /health that answered: the route was lost some time after it.
        state.recorder.event(EventKind.NETWORK_OUTAGE_START, f"server out of reach ({found.sentence()}); arrivals "
                             "paused", {**data, "since_s": state.health_up_s})
        state.network_outage = True

    def _server_still_down_after_the_route(self) -> bool:
        """Whether /health has failed DOWN_CHECKS times since the lost route came back: a server catching up on
        what the partition held (a busy machine, a backlog) is not blamed for the network's outage."""
        self.state.server_blamed += 1
        return self.state.server_blamed >= DOWN_CHECKS

    def _close_outage(self, then: str) -> None:
        """Record the end of the outage under way (server or network)."""
        state = self.state
        state.server_blamed = 0
        if state.in_outage:
            state.recorder.event(EventKind.OUTAGE_END, f"server /health up again; {then}")
        if state.network_outage:
            state.recorder.event(EventKind.NETWORK_OUTAGE_END, f"server reachable again; {then}")
        state.in_outage = state.network_outage = False

    def _restart(self) -> bool:
        """Pause arrivals, restart the server, resume; the outage is recorded so its windows are left out."""
        from soak.errors import TargetError

        state = self.state
        state.recorder.event(EventKind.OUTAGE_START, "server down; arrivals paused")
        state.load.pause()
        try:
            info = state.target.restart()
        except TargetError as exc:
            state.recorder.event(EventKind.RESTART_FAILED, str(exc).splitlines()[0])
            return False
        state.info = info
        state.recorder.event(EventKind.RESTART, f"server restarted at {info.base_url}", {"pid": info.pgid})
        state.recorder.update_run(server_pgid=info.pgid, server_cmd=dumps(info.cmd) if info.cmd else None)
        reload_adapters(self.config.load.loras, info.base_url, auth_headers(self.config), state.recorder)
        state.load.resume()
        state.in_outage = False
        state.recorder.event(EventKind.OUTAGE_END, "server back; arrivals resumed")
        return True

    def _progress(self, elapsed_s: float) -> Progress:
        """The live progress: counts and P99s since the warm-up, the server's latest RSS, requests in flight."""
        state, config = self.state, self.config
        live = state.windows.progress()
        requests = live.requests
        return Progress(
            stage=stage_at(elapsed_s, config.warmup_s), run_id=state.run_id, status=state.status,
            elapsed_s=elapsed_s, duration_s=config.duration_s, remaining_s=max(config.duration_s - elapsed_s, 0.0),
            requests=requests, errors=live.errors,
            rate_rps=measured_rate_rps(requests, elapsed_s, config.warmup_s), p99_ms=live.p99_ms,
            server_rss_bytes=state.telemetry.latest.server_rss_bytes, in_flight=state.load.in_flight,
            out_dir=str(state.run_dir),
        )

    def _report(self, progress: Progress) -> None:
        """Hand a progress reading to the caller's callback."""
        self.on_progress(progress)

    def _finish(self) -> Summary:
        """Stop arrivals, final sample, analyse, write the report — before the server is stopped."""
        state = self.state
        self._report(Progress(stage=Stage.FINALISING, run_id=state.run_id))
        self._stop_canary()
        self._stop_churn()
        if state.load is not None:  # None when the load never started (`_start_or_close`)
            state.load.stop(drain_timeout_s=STOP_DRAIN_S)
            self._record_loop_lag(time.time() - state.t0, final=True)
        if state.forensics is not None:  # a window still tracking is stopped; a capture being read is waited for
            state.forensics.finish(FORENSICS_READ_S)
        state.telemetry.stop()
        if state.log_scanner is not None:
            state.log_scanner.close()
        state.ledger.close()
        stopped_early = state.end_reason != "completed"
        if state.status == "running":
            state.status = "completed" if not stopped_early else "aborted"
        # The client's own count of finished requests, beside the rows: every one is in request_windows (and in
        # requests with --keep-requests) unless the database lost them (docs/robustness.md).
        state.recorder.event(EventKind.RUN_END, state.end_reason or state.status,
                             {"requests": state.requests_seen, "rows_queued": state.writer.stats.queued})
        state.recorder.update_run(status=state.status, ended_at=utc_now_iso(), duration_s=time.time() - state.t0)
        self._flush_or_give_up()
        summary = finalise_run(self.store, state.run_id, stopped_early=stopped_early,
                               gates_file=self.config.gates_file, baseline=self.config.baseline)
        self.summary = summary
        state.metrics.finish(summary)
        if state.end_reason == "storage failure":
            raise StorageError(f"{self._storage_failure_text()}: load was stopped; every row held was written once "
                               f"the database took them again; report of what was collected: {summary.report_html}")
        return summary

    def _flush_or_give_up(self) -> None:
        """Wait for the writer to commit everything (it retries a failing database promptly while this waits); an
        outage that ended meanwhile is recorded and committed too. Else the rows still held are counted as lost,
        the report of what was committed is written where it can be, and a StorageError says so in one line."""
        state = self.state
        if state.writer.flush(STORAGE_RETRY_S):
            self._follow_storage()
            if state.writer.flush(STORAGE_RETRY_S):
                return
        lost = state.writer.discard()
        report = self._report_what_was_committed()
        raise StorageError(f"{self._storage_failure_text()}: load was stopped; {lost} rows held in memory could not "
                           f"be written and are lost; run {state.run_id} keeps what was committed ({report}; "
                           f"`soak close {state.run_id}` reports on it once the database is writable)")

    def _storage_failure_text(self) -> str:
        """Why storage ended the run: the last failure (naming a full volume) and how the budget ran out."""
        state = self.state
        outages = state.writer.outages
        failure = state.writer.stats.failure or (outages[-1].last_error if outages else "") or "the database refused commits"
        if state.storage_spent:
            return f"storage outage beyond its budget ({failure}; {state.storage_spent})"
        return f"the database did not take the run's last rows ({failure})"

    def _report_what_was_committed(self) -> str:
        """The report of the run as the database holds it (up to where the outage began), written where it can be:
        where it went, or why not."""
        state = self.state
        outage = state.writer.outage
        committed_s = (outage.started_epoch_s if outage is not None else time.time()) - state.t0
        try:
            finalise_run(self.store, state.run_id, stopped_early=True, gates_file=self.config.gates_file,
                         status="aborted", duration_s=committed_s)
        except (SoakError, OSError) as exc:  # the verdict cannot be stored: the report may be written all the same
            log.warning("the report of what was committed: %s", exc)
        report = state.run_dir / "report.html"
        return f"report of it: {report}" if report.exists() else "no report could be written"

    # -- storage outages ----------------------------------------------------------------------------
    def _storage_spent(self) -> bool:
        """Say when a storage outage begins and ends; True once one has outgrown its budget (the run then stops)."""
        state = self.state
        self._follow_storage()
        spent = state.writer.exhausted
        if spent is None:
            return False
        state.end_reason, state.storage_spent = "storage failure", spent
        self._say_storage(f"storage outage beyond its budget ({spent}; --storage-buffer, --storage-outage-for): "
                          "stopping the load")
        return True

    def _follow_storage(self) -> None:
        """Record each storage outage's start and end. The events are queued like every row, so they land when the
        database is back, at the times the outage really began and ended."""
        state = self.state
        outages = list(state.writer.outages)  # the writer thread appends; a copy is read at one instant
        for outage in outages[state.outages_begun:]:
            self._outage_began(outage)
            state.outages_begun += 1
        while state.outages_ended < len(outages) and outages[state.outages_ended].ended_epoch_s is not None:
            self._outage_ended(outages[state.outages_ended])
            state.outages_ended += 1

    def _outage_began(self, outage: Outage) -> None:
        config = self.config
        budget = f"up to {config.storage_buffer_bytes / 2**20:g} MiB for {format_duration(config.storage_outage_s)}"
        self.state.recorder.event(EventKind.STORAGE_OUTAGE_START, outage.reason, {
            "volume": outage.volume, "budget_bytes": config.storage_buffer_bytes,
            "budget_s": config.storage_outage_s}, t_s=outage.started_epoch_s - self.state.t0)
        self._say_storage(f"storage outage: {outage.reason}; rows are held in memory ({budget}) and the run goes on")

    def _outage_ended(self, outage: Outage) -> None:
        lasted_s = outage.ended_epoch_s - outage.started_epoch_s
        message = (f"storage back after {format_duration(lasted_s)}: {outage.rows_held} rows held "
                   f"(~{outage.bytes_held / 2**20:.1f} MiB) are written")
        self.state.recorder.event(EventKind.STORAGE_OUTAGE_END, message, {
            "started_s": outage.started_epoch_s - self.state.t0, "lasted_s": lasted_s, "rows_held": outage.rows_held,
            "bytes_held": outage.bytes_held, "volume": outage.volume}, t_s=outage.ended_epoch_s - self.state.t0)
        self._say_storage(message)

    def _say_storage(self, message: str) -> None:
        """Tell the user of a storage outage (the progress line prints it, on a line of its own)."""
        self._report(Progress(stage=Stage.STORAGE_FAILURE, run_id=self.state.run_id, message=message))

    def _stop_canary(self) -> None:
        if self.state.canary is not None:
            self.state.canary.stop()

    def _stop_churn(self) -> None:
        if self.state.churn is not None:
            self.state.churn.stop()
            self.state.churn = None

    def _cleanup(self) -> None:
        state = self.state
        try:
            self._stop_web()
            if state.metrics is not None:
                state.metrics.close()
            self._stop_canary()
            self._stop_churn()
            if state.loopback is not None:
                state.loopback.close()
            if state.early_stop is not None:
                state.early_stop.close()
            if state.forensics is not None:  # a run that failed mid-window: the tracker detached, the look ended
                state.forensics.finish(0.0)
            if state.load is not None and not getattr(state.load, "stopped", False):
                state.load.stop(drain_timeout_s=0)
            elif state.load is None and state.workers is not None:
                state.workers.close()
        finally:
            state.target.stop()
            if state.writer is not None:
                if getattr(state.target, "vram_released", None) is False and state.recorder is not None:
                    state.recorder.event(EventKind.VRAM_NOT_RELEASED, "NVML still showed the server's VRAM held after "
                                         "the stop")
            if self.store is not None:
                self.store.close()  # commits what the writer holds, then releases the connections

    # -- failures ---------------------------------------------------------------------------------
    def _force_stop(self) -> None:
        """Second Ctrl-C: mark the run aborted, commit, end the server group, exit 130 at once.

        This runs inside a signal callback, where an exception would not reach the CLI; so it exits itself.
        """
        state = self.state
        if state.writer is not None:
            state.writer.update_run(state.run_id, status="aborted", ended_at=utc_now_iso())
            state.writer.flush(3.0)
        state.target.stop(grace_s=2.0)
        # One quick try: the user asked to stop now, so no retries here.
        self.notify_end(failed_run_payload(state.run_id, "aborted", f"forced stop by a second {self.stop.reason}"),
                     attempts=1, timeout_s=3.0)
        os._exit(EXIT_FORCED)

    def notify_end(self, summary: dict[str, Any], **options: Any) -> None:
        """With --notify-env: POST the summary to the webhook (soak/run/notify.py, with its retries)."""
        if self.config.notify_env:
            line = notify_from_env(self.config.notify_env, summary, os.environ.get(SCHEDULE_NAME_ENV) or None,
                                   **options)
            log.info(line)
            self._report(Progress(stage=Stage.FINALISING, run_id=self.state.run_id, message=line))


def execute(config: RunConfig, on_progress: ProgressCallback | None = None) -> Summary:
    """Run one soak and return its Summary (the CLI prints it and maps the verdict to an exit code).

    With --notify-env every ending is notified: a verdict, a stop by signal, a server crash, and a run that
    failed (the summary of what was collected when there is one).
    """
    conductor = Conductor(config, on_progress)
    try:
        summary = conductor.execute()
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        collected = conductor.summary.to_json_dict() if conductor.summary else None
        conductor.notify_end(collected or failed_run_payload(conductor.state.run_id, "failed", reason))
        raise
    conductor.notify_end(summary.to_json_dict())
    return summary
