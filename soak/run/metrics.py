"""The run's exported series (docs/observability.md): the `/metrics` page bound at start, the live numbers fed as
the run goes, the OTLP push, and the last word at the end — the final verdicts, scraped once more before the page
goes away.

The conductor calls `bind` before anything starts (a taken port is a clear error then), `open` once the run's row
exists, `request`/`tick`/`look` while it runs, and `finish` then `close` at the end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import urlsplit

from soak import __version__
from soak.address import split_host_port
from soak.analysis.early_stop import Look
from soak.config import RunConfig
from soak.contracts import Summary
from soak.load.health import LoadCounters
from soak.load.records import RequestRecord
from soak.metrics.live import LiveMetrics, RunIdentity
from soak.metrics.prometheus import MetricsEndpoint, families, scraped_families
from soak.store.recorder import Recorder

log = logging.getLogger(__name__)

LAST_SCRAPE_WAIT_S = 30.0  # at the end, how long the page waits for a scraper to read the final verdicts


def target_of(base_url: str) -> str:
    """The server's host:port, the `target` label (never a user:password the URL carries)."""
    return urlsplit(base_url).netloc.rpartition("@")[2] or base_url


class RunMetrics:
    """Everything the run exports; inert (every call a no-op) when neither --metrics-bind nor --otlp-endpoint is set."""

    def __init__(self, config: RunConfig, endpoint: MetricsEndpoint | None = None) -> None:
        self.config, self.endpoint = config, endpoint
        self.live: LiveMetrics | None = None
        self.push = None  # soak.metrics.otlp.OtlpPush, with --otlp-endpoint

    @classmethod
    def bind(cls, config: RunConfig) -> RunMetrics:
        """Listen on --metrics-bind now (ConfigError when it cannot); a fleet's replica also says where, for the
        fleet's own page to gather."""
        bind = config.metrics.bind
        metrics = cls(config, MetricsEndpoint(*split_host_port(bind)) if bind else None)
        if metrics.endpoint is not None and config.fleet_id and config.replica:
            replica_page_file(config.out_dir, config.replica).write_text(metrics.endpoint.url, encoding="utf-8")
        return metrics

    def describe(self) -> str | None:
        """What the user is told at start."""
        said = [f"metrics for Prometheus: {self.endpoint.url}"] if self.endpoint else []
        if self.config.metrics.otlp_endpoint:
            said.append(f"OTLP push every {self.config.metrics.otlp_every_s:g}s to {self.config.metrics.otlp_endpoint}")
        return "; ".join(said) or None

    def open(self, identity: RunIdentity, recorder: Recorder, counters: Callable[[], LoadCounters | None] | None,
             roots: Callable[[], list[int]]) -> None:
        """Start feeding and serving the run's series."""
        if not self.config.metrics.enabled:
            return
        self.live = live = LiveMetrics(identity, self.config.slo, counters, roots, self.config.telemetry.sample_every_s)
        recorder.observers.append(live)
        if self.endpoint is not None:
            self.endpoint.serve(lambda: families(live.snapshot(), identity.labels))
        if self.config.metrics.otlp_endpoint:
            from soak.metrics.otlp import OtlpPush  # OpenTelemetry's SDK and protobuf load only for a push (~0.2 s)

            self.push = OtlpPush(self.config.metrics.otlp_endpoint, identity, live.snapshot,
                                 self.config.metrics.otlp_every_s, on_failure=live.export_failed)
            self.push.start()

    def request(self, record: RequestRecord) -> None:
        if self.live is not None:
            self.live.request(record)

    def tick(self) -> None:
        if self.live is not None:
            self.live.tick()

    def look(self, look: Look) -> None:
        """An early-stop look judged the run so far: its verdicts set the check gauges."""
        if self.live is not None:
            self.live.look(look.verdicts)

    def finish(self, summary: Summary) -> None:
        """The final verdicts; the page stays up until a scraper has read them (at most LAST_SCRAPE_WAIT_S), and
        the push sends them."""
        if self.live is None:
            return
        self.live.finish({finding.check: str(finding.verdict) for finding in summary.findings})
        if self.endpoint is not None:
            self._wait_for_a_scrape(LAST_SCRAPE_WAIT_S)

    def _wait_for_a_scrape(self, timeout_s: float) -> None:
        scrapes, deadline = self.endpoint.scrapes, time.monotonic() + timeout_s
        if scrapes == 0:  # nobody has scraped this run: nobody is waiting for its end either
            return
        while self.endpoint.scrapes == scrapes and time.monotonic() < deadline:
            time.sleep(0.2)

    def close(self) -> None:
        """Push once more and stop serving; safe to call twice, and on a run that never opened."""
        push, self.push = self.push, None
        if push is not None:
            push.close()
        endpoint, self.endpoint = self.endpoint, None
        if endpoint is not None:
            endpoint.close()


def replica_page_file(fleet_folder: Path, replica: str) -> Path:
    """Where a fleet's replica writes the URL of its own page (on loopback, at a free port)."""
    return fleet_folder / f"{replica}.metrics-url"


def replica_pages(fleet_folder: Path, replicas: Iterable[str]) -> list[str]:
    """The pages the replicas that started have written so far."""
    files = (replica_page_file(fleet_folder, name) for name in replicas)
    return [file.read_text(encoding="utf-8").strip() for file in files if file.exists()]


def serve_fleet(config: RunConfig, fleet_folder: Path, replicas: list[str]) -> MetricsEndpoint | None:
    """A fleet's one page: every replica's series (each labelled with its replica), gathered at each scrape."""
    if not config.metrics.bind:
        return None
    endpoint = MetricsEndpoint(*split_host_port(config.metrics.bind))
    endpoint.serve(lambda: scraped_families(replica_pages(fleet_folder, replicas)))
    return endpoint


def run_identity(config: RunConfig, run_id: str, base_url: str, model: str | None, target_kind: str,
                 start_s: float) -> RunIdentity:
    """The run's labels and constants."""
    return RunIdentity(run_id=run_id, target=target_of(base_url), replica=config.replica or "",
                       soak_version=__version__, model=model or "", target_kind=target_kind, start_s=start_s,
                       planned_s=config.duration_s, warmup_s=config.warmup_s)
