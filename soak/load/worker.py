"""A load worker: `soak worker --master HOST[:PORT]` on another host, or `python -m soak.load.worker HOST:PORT
PARENT_PID` as a local child of the master (started by it, never by hand).

It connects to the master (a TargetError when none answers within the connect timeout), says hello, and waits
for the run's spec; it prepares the scenarios and answers ready (or why it cannot). From the first plan message
it runs one dispatcher, on a greenlet of its own, at its share of the rate with a seed of its own (its worker
index); Locust's users do nothing here, so however Locust places or moves them (it re-deals users when workers
come and go) the dispatcher is never started twice or stopped. It reports status every 0.2 s and records with
Locust's periodic worker report, takes a larger share when another worker is lost, and drains on `soak_stop`.
It ends when the master quits it, or on SIGINT/SIGTERM after draining and handing over its last records; a
worker the master never stopped (turned away, or the master went away without a word: Locust notices after
60 s of silence) ends with a TargetError.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

import gevent
from locust.env import Environment
from locust.exception import StopUser

from soak.config import MASTER_PORT, RunConfig, split_address
from soak.errors import EXIT_FORCED, ConfigError, SoakError, TargetError
from soak.load.backend import (
    PLAN_MESSAGE,
    dispatch_settings,
    dispatcher_user_class,
    make_client_settings,
    raise_fd_limit,
    settle_heap,
)
from soak.load.dispatcher import Dispatcher, PlanBoard
from soak.load.distributed import (
    FAILED_MESSAGE,
    READY_MESSAGE,
    RECORDS_KEY,
    SHARE_MESSAGE,
    STATUS_EVERY_S,
    STATUS_MESSAGE,
    STOP_MESSAGE,
    STOPPED_MESSAGE,
    deals_times,
)
from soak.load.health import ClientHealth
from soak.load.plan import Segment
from soak.load.pool import HELLO_MESSAGE, LOCAL_CONNECT_TIMEOUT_S, SPEC_MESSAGE
from soak.load.scenarios import check_dataset, effective_specs, load_scenarios
from soak.load.trace import load_trace
from soak.units import format_duration

log = logging.getLogger("soak.load.worker")

Say = Callable[[str], None]
SIGNAL_DRAIN_S = 10.0  # what a signalled worker gives its requests in flight, like the run's own stop


class SharedBoard(PlanBoard):
    """A worker's plan board whose share of the rate can grow when another worker is lost."""

    def reshare(self, share: float) -> None:
        """Take `share` from now on (segments already published keep the old share: at most 1.5 s of them)."""
        segments = self.plan.segments
        if segments and self.share > 0:
            last = segments[-1]
            at_t = max(time.time(), last.start_t + 1e-3)
            self.plan.extend([Segment(at_t, last.rate_rps / self.share * share)])
        self.share = share
        self.poke()


class WorkerProcess:
    """One worker's part of a run: its board, its dispatcher (created when the master spawns its user), its outbox."""

    def __init__(self, runner: Any, spec: dict[str, Any]) -> None:
        self.runner = runner
        self.config = RunConfig.model_validate_json(spec["config"])
        specs = effective_specs(self.config.load)
        self.scenarios = load_scenarios(specs)
        check_dataset(specs, self.config.load.dataset)  # the same path must exist on this host
        self.base_url = runner.environment.host = spec["base_url"]
        self.board = SharedBoard(share=float(spec["share"]))
        if self.config.load.trace is not None:  # the master deals row indexes of the trace at this same path
            self.board.dealt.resolve = load_trace(self.config.load.trace, self.config.load.trace_format).row
        self.outbox: list[dict[str, Any]] = []
        self.dispatcher: Dispatcher | None = None
        self.dispatching: gevent.Greenlet | None = None
        self.stopped = False
        self.client_settings = make_client_settings(self.config, spec["settings"]["model"],
                                                    spec["settings"]["max_model_len"])
        runner.register_message(PLAN_MESSAGE, self.on_plan)
        runner.register_message(SHARE_MESSAGE, self.on_share)
        runner.register_message(STOP_MESSAGE, self.on_stop, concurrent=True)
        runner.environment.events.report_to_master.add_listener(self.on_report)

    def on_plan(self, environment: Any, msg: Any, **_kw: Any) -> None:
        """Apply the plan; the first one starts the dispatcher."""
        self.board.update(msg.data)
        if self.dispatcher is None and not self.stopped:
            settings = dispatch_settings(self.config, self.client_settings,
                                         worker_index=max(self.runner.worker_index, 0))
            settings.dealt = deals_times(self.config)
            self.dispatcher = Dispatcher(self.runner.environment, self.scenarios, self.board, settings,
                                         lambda record: self.outbox.append(record.to_wire()))
            self.dispatching = gevent.spawn(self.dispatcher.run)

    def on_report(self, client_id: str, data: dict[str, Any], **_kw: Any) -> None:
        data[RECORDS_KEY], self.outbox = self.outbox, []

    def on_share(self, environment: Any, msg: Any, **_kw: Any) -> None:
        log.warning("another load worker was lost: this one now sends %.3g of the rate", msg.data["share"])
        self.board.reshare(float(msg.data["share"]))

    def status(self) -> dict[str, Any]:
        dispatcher = self.dispatcher
        if dispatcher is None:
            return {"in_flight": 0, "schedule_t": float("-inf"), "health": ClientHealth().to_wire()}
        return {"in_flight": dispatcher.in_flight, "schedule_t": dispatcher.schedule_t,
                "health": dispatcher.health.to_wire()}

    def on_stop(self, environment: Any, msg: Any, **_kw: Any) -> None:
        """The run ends: stop, drain and hand over the last records."""
        self.finish(float(msg.data["drain_timeout_s"]))

    def finish(self, drain_timeout_s: float) -> None:
        """Stop arrivals, drain, and send the last records with the final health (once)."""
        if self.stopped:
            return
        self.stopped = True
        cancelled = 0
        if self.dispatcher is not None:
            self.dispatcher.stop_arrivals()
            cancelled = self.dispatcher.drain(drain_timeout_s)
            self.dispatcher.close()
        records, self.outbox = self.outbox, []
        self.runner.send_message(STOPPED_MESSAGE, {RECORDS_KEY: records, **self.status(), "cancelled": cancelled})


def idle_user(environment: Any) -> Any:
    """What a Locust user does on a worker: nothing (the dispatcher runs on its own greenlet)."""
    raise StopUser()


class WorkerSession:
    """A worker from its connection to its exit: the Locust runner, then the run it is handed."""

    def __init__(self, master: str, say: Say) -> None:
        self.master = master
        self.say = say
        self.environment = Environment(user_classes=[dispatcher_user_class(idle_user)])
        self.runner: Any = None
        self.process: WorkerProcess | None = None
        self.refusal: str | None = None
        self.signalled: str | None = None
        self.leaving = False

    def connect(self, host: str, port: int, timeout_s: float) -> None:
        """Join the master; TargetError when none answers within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while self.runner is None:
            try:
                with gevent.Timeout(max(deadline - time.monotonic(), 0.01)):
                    self.runner = self.environment.create_worker_runner(host, port)
            except gevent.Timeout:
                raise TargetError(f"no soak master answered at {host}:{port} within "
                                  f"{format_duration(timeout_s)}") from None
            except ConnectionError:  # Locust gives up after its own 5 minutes; the timeout here may be longer
                continue
        self.runner.register_message(SPEC_MESSAGE, self.on_spec)
        self.runner.send_message(HELLO_MESSAGE, {"pid": os.getpid(), "host": socket.gethostname(), "time": time.time()})

    def on_spec(self, environment: Any, msg: Any, **_kw: Any) -> None:
        """Prepare the run (answer ready), or say why not and leave; a worker turned away leaves too."""
        if "reject" in msg.data:
            if self.process is not None:  # declared lost mid-run: what it sent since still counts
                self.process.finish(0.0)
            self._leave(f"the soak master at {self.master} turned this worker away: {msg.data['reject']}")
            return
        try:
            self.process = WorkerProcess(self.runner, msg.data)
        except Exception as exc:  # the master needs the reason in one line, whatever it was
            error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self.runner.send_message(FAILED_MESSAGE, {"error": error})
            self._leave(f"this worker could not prepare the run of the soak master at {self.master}: {error}")
            return
        settle_heap()
        self.runner.send_message(READY_MESSAGE, {})
        self.say(f"joined the run as worker {self.runner.worker_index}: {self.process.board.share:.3g} of the "
                 f"rate to {self.process.base_url}")

    def on_signal(self, signum: int) -> None:
        """SIGINT/SIGTERM: drain, hand the last records to the master and leave; the master records the worker
        as lost and moves its share to the others. A second signal leaves at once."""
        if self.signalled is not None:
            os._exit(EXIT_FORCED)
        self.signalled = signal.Signals(signum).name
        gevent.spawn(self._leave_run)

    def _leave_run(self) -> None:
        if self.process is None:
            self._leave(f"stopped by {self.signalled} before the run of the soak master at {self.master} started")
            return
        self.process.finish(SIGNAL_DRAIN_S)
        self.say(f"stopped by {self.signalled}: the last records went to the master; leaving the run")
        self._leave(None)

    def _leave(self, refusal: str | None) -> None:
        if self.leaving:
            return
        self.leaving, self.refusal = True, refusal
        self.environment.events.quitting.fire(environment=self.environment)  # Locust tells the master: "quit"
        gevent.spawn(self.runner.quit)  # not from this greenlet: quitting kills the runner's own greenlets

    def report_status(self) -> None:
        while True:
            process = self.process
            if process is not None and process.dispatcher is not None and not process.stopped:
                self.runner.send_message(STATUS_MESSAGE, process.status())
            gevent.sleep(STATUS_EVERY_S)

    def outcome(self) -> None:
        """After the runner ended: nothing when this worker's load was stopped (by the master, or by a signal after
        handing over its records), else why not."""
        if self.refusal is not None:
            raise TargetError(self.refusal)
        if self.process is None or not self.process.stopped:
            raise TargetError(f"the soak master at {self.master} went away before the run ended")
        self.say(f"done: {self.process.status()['health']['sends']} requests sent")


def run_worker(master: str, connect_timeout_s: float, say: Say | None = None, parent_pid: int | None = None) -> None:
    """Join the master at `master` (HOST[:PORT]) and work for one run; SoakError when that fails."""
    try:
        host, port = split_address(master, MASTER_PORT)
    except ValueError as exc:
        raise ConfigError(f"--master: {exc}") from None
    say = say or (lambda _message: None)
    raise_fd_limit()
    session = WorkerSession(f"{host}:{port}", say)
    say(f"connecting to the soak master at {host}:{port} (waiting up to {format_duration(connect_timeout_s)})")
    session.connect(host, port, connect_timeout_s)
    say("connected; waiting for the run to start")
    gevent.spawn(session.report_status)
    if parent_pid is not None:
        gevent.spawn(watch_parent, parent_pid)
    else:
        for signum in (signal.SIGINT, signal.SIGTERM):
            gevent.signal_handler(signum, session.on_signal, signum)
    session.runner.greenlet.join()
    session.outcome()


def watch_parent(parent_pid: int) -> None:
    """Exit if the master process goes away (orphans must not keep loading a server)."""
    while os.getppid() == parent_pid:
        gevent.sleep(1.0)
    os._exit(0)


def main(argv: list[str]) -> int:
    """A local worker: `MASTER PARENT_PID`; errors go to stderr (the master shows its tail)."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s worker %(levelname)s %(name)s: %(message)s")
    # Ctrl-C reaches the whole process group: the master stops this worker (and collects its records) itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        run_worker(argv[0], LOCAL_CONNECT_TIMEOUT_S, parent_pid=int(argv[1]))
    except SoakError as exc:
        print(f"soak worker: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
