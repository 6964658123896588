"""What every load process shares, local runner, master and workers alike: the plan message, the single
dispatcher user, the record queue, and the settings each process derives from the run's config."""

from __future__ import annotations

import gc
import logging
import os
import resource
from typing import Any

import gevent
import gevent.queue
from locust import User, constant, task
from locust.exception import StopUser

from soak.config import RunConfig
from soak.load.dispatcher import DispatchSettings
from soak.load.prompts import prose_corpus
from soak.load.records import RequestRecord
from soak.load.settings import ClientSettings

log = logging.getLogger(__name__)

PLAN_MESSAGE = "soak_plan"
SINK_FLUSH_S = 10.0
GC_YOUNG_THRESHOLD = 10_000  # allocations between young collections (Python's default: 700)


def api_key_from(config: RunConfig) -> str | None:
    """The API key from the environment variable the config names (never stored or logged)."""
    name = config.target.api_key_env
    return os.environ.get(name) or None if name else None


def make_client_settings(config: RunConfig, model: str, max_model_len: int) -> ClientSettings:
    """What every scenario instance of this run needs."""
    load = config.load
    return ClientSettings(model=model, max_model_len=max_model_len, request_timeout_s=load.request_timeout_s,
                          api_key=api_key_from(config), dataset_path=load.dataset, seed=load.seed,
                          adapters=tuple(adapter.name for adapter in load.loras), adapter_zipf=load.lora_zipf,
                          churn_every_s=load.lora_churn_every_s)


def dispatch_settings(config: RunConfig, client: ClientSettings, worker_index: int = 0) -> DispatchSettings:
    load = config.load
    return DispatchSettings(seed=load.seed, worker_index=worker_index, burstiness=load.burstiness,
                            max_concurrency=load.max_concurrency, client=client)


def raise_fd_limit() -> None:
    """Open loop can hold many connections at once: lift the soft file limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            log.debug("could not raise the open-file limit from %s", soft)


def settle_heap() -> None:
    """Before the load: collect once, then freeze what start-up left (modules, config, scenarios) so that the
    cyclic collector no longer walks it, and collect the young generation less often.

    Under heavy load a full collection walked every object alive and held the event loop for ~0.3 s; an
    overloaded process spent a fifth of its CPU there (10.6 s of 45 s at 3,000 req/s offered, 2.5 s after). Almost
    everything soak allocates per request is freed by reference counting the moment it is dropped. The prose that
    long prompts are cut from is made here too (~35 ms), not on the loop at the first long prompt.
    """
    prose_corpus()
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def dispatcher_user_class(get_dispatcher: Any) -> type[User]:
    """The single Locust user of each process: it runs that process's dispatcher until arrivals stop."""

    class SoakDispatcher(User):
        wait_time = constant(0)

        @task
        def dispatch(self) -> None:
            get_dispatcher(self.environment).run()
            raise StopUser()

    return SoakDispatcher


class QueueSink:
    """Hands records to `deliver` from one greenlet of its own, so a slow or failing consumer never runs
    inside (or is killed with) a request's greenlet."""

    def __init__(self, deliver: Any) -> None:
        self._deliver = deliver
        self._queue: gevent.queue.Queue = gevent.queue.Queue()
        self._greenlet = gevent.spawn(self._loop)
        self.delivered = 0

    def put(self, record: RequestRecord) -> None:
        self._queue.put(record)

    def _loop(self) -> None:
        for record in self._queue:
            self._deliver(record)
            self.delivered += 1

    def flush(self, timeout_s: float = SINK_FLUSH_S) -> None:
        """Deliver what is queued, then end."""
        self._queue.put(StopIteration)
        self._greenlet.join(timeout=timeout_s)
