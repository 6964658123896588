"""A load worker process: `python -m soak.load.worker SPEC.json` (started by the master, never by hand).

It connects to the master, runs one dispatcher at its share of the rate with a seed of its own (its worker
index), reports status every 0.2 s and records with Locust's periodic worker report, and drains on
`soak_stop`. It exits when the master quits it, or when the master process disappears.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment

from soak.config import RunConfig
from soak.load.backend import (
    PLAN_MESSAGE,
    dispatch_settings,
    dispatcher_user_class,
    make_client_settings,
    raise_fd_limit,
)
from soak.load.dispatcher import Dispatcher, PlanBoard
from soak.load.distributed import (
    RECORDS_KEY,
    STATUS_EVERY_S,
    STATUS_MESSAGE,
    STOP_MESSAGE,
    STOPPED_MESSAGE,
    deals_times,
)
from soak.load.scenarios import effective_specs, load_scenarios

log = logging.getLogger("soak.load.worker")


class WorkerProcess:
    """One worker's state: its board, its dispatcher (created once the master gives it an index), its outbox."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.config = RunConfig.model_validate_json(spec["config"])
        self.scenarios = load_scenarios(effective_specs(self.config.load))
        self.board = PlanBoard(share=1.0 / spec["workers"])
        self.outbox: list[dict[str, Any]] = []
        self.dispatcher: Dispatcher | None = None
        self.environment = Environment(user_classes=[dispatcher_user_class(self.get_dispatcher)],
                                       host=spec["base_url"], stop_timeout=self.config.load.request_timeout_s)
        self.client_settings = make_client_settings(self.config, spec["settings"]["model"],
                                                    spec["settings"]["max_model_len"])
        self.runner = self.environment.create_worker_runner("127.0.0.1", spec["master_port"])
        self.runner.register_message(PLAN_MESSAGE, lambda environment, msg, **_kw: self.board.update(msg.data))
        self.runner.register_message(STOP_MESSAGE, self.on_stop, concurrent=True)
        self.environment.events.report_to_master.add_listener(self.on_report)

    def get_dispatcher(self, environment: Any) -> Dispatcher:
        if self.dispatcher is None:
            settings = dispatch_settings(self.config, self.client_settings,
                                         worker_index=max(self.runner.worker_index, 0))
            settings.dealt = deals_times(self.config)
            self.dispatcher = Dispatcher(environment, self.scenarios, self.board, settings,
                                         lambda record: self.outbox.append(record.to_wire()))
        return self.dispatcher

    def on_report(self, client_id: str, data: dict[str, Any], **_kw: Any) -> None:
        data[RECORDS_KEY], self.outbox = self.outbox, []

    def status(self) -> dict[str, Any]:
        dispatcher = self.dispatcher
        if dispatcher is None:
            return {"in_flight": 0, "schedule_t": float("-inf"), "health": {"sends": 0, "skipped": 0,
                    "late_sends_1s": 0, "lag_max_ms": 0.0, "lag_bins": {}}}
        return {"in_flight": dispatcher.in_flight, "schedule_t": dispatcher.schedule_t,
                "health": dispatcher.health.to_wire()}

    def report_status(self) -> None:
        while True:
            if self.dispatcher is not None:
                self.runner.send_message(STATUS_MESSAGE, self.status())
            gevent.sleep(STATUS_EVERY_S)

    def on_stop(self, environment: Any, msg: Any, **_kw: Any) -> None:
        """Stop arrivals, drain, and send the last records with the final health."""
        cancelled = 0
        if self.dispatcher is not None:
            self.dispatcher.stop_arrivals()
            cancelled = self.dispatcher.drain(float(msg.data["drain_timeout_s"]))
            self.dispatcher.close()
        records, self.outbox = self.outbox, []
        self.runner.send_message(STOPPED_MESSAGE, {RECORDS_KEY: records, **self.status(), "cancelled": cancelled})


def watch_parent(parent_pid: int) -> None:
    """Exit if the master process goes away (orphans must not keep loading a server)."""
    while os.getppid() == parent_pid:
        gevent.sleep(1.0)
    os._exit(0)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s worker %(levelname)s %(name)s: %(message)s")
    spec_path = Path(argv[0])
    spec = json.loads(spec_path.read_text())
    raise_fd_limit()
    worker = WorkerProcess(spec)
    gevent.spawn(worker.report_status)
    gevent.spawn(watch_parent, os.getppid())
    worker.runner.greenlet.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
