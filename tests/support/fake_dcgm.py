"""A fake dcgm-exporter for tests: a real HTTP server on 127.0.0.1 (OS-picked port) serving a DCGM text page.

Each GPU's fields are numbers or functions of the seconds since the page was first served (or, with `by_scrape`, of
the scrape's number), so a test can plant an
XID mid-run (`xid=lambda t: 79 if t >= 8 else 0`) or framebuffer growth (`fb_used_mib=lambda t: 1000 + 40 * t`)
without timing anything itself. The page is written the way dcgm-exporter writes it: HELP/TYPE lines, then one
sample per GPU labelled gpu, UUID, device, modelName, Hostname (and pod/container/namespace when given).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Value = float | Callable[[float], float]

# field name on FakeGpu → (DCGM field, Prometheus type)
FIELDS = {
    "fb_used_mib": ("DCGM_FI_DEV_FB_USED", "gauge"),
    "fb_free_mib": ("DCGM_FI_DEV_FB_FREE", "gauge"),
    "temp_c": ("DCGM_FI_DEV_GPU_TEMP", "gauge"),
    "power_w": ("DCGM_FI_DEV_POWER_USAGE", "gauge"),
    "util_pct": ("DCGM_FI_DEV_GPU_UTIL", "gauge"),
    "xid": ("DCGM_FI_DEV_XID_ERRORS", "gauge"),
    "throttle": ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge"),
    "ecc_dbe": ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter"),
    "ecc_sbe": ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter"),
    "rows_uncorrectable": ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter"),
    "rows_correctable": ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter"),
    "remap_failure": ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge"),
}


@dataclass
class FakeGpu:
    """One GPU's labels and readings (numbers, or functions of seconds since the first scrape)."""

    index: int
    uuid: str
    model: str = "NVIDIA H100 80GB HBM3"
    pod: str | None = None
    fb_used_mib: Value = 1024.0
    fb_free_mib: Value = 80000.0
    temp_c: Value = 45.0
    power_w: Value = 250.5
    util_pct: Value = 80.0
    xid: Value = 0.0
    throttle: Value = 0.0
    ecc_dbe: Value = 0.0
    ecc_sbe: Value = 0.0
    rows_uncorrectable: Value = 0.0
    rows_correctable: Value = 0.0
    remap_failure: Value = 0.0

    def labels(self) -> str:
        parts = [f'gpu="{self.index}"', f'UUID="{self.uuid}"', f'device="nvidia{self.index}"',
                 f'modelName="{self.model}"', 'Hostname="fake-node"', 'DCGM_FI_DRIVER_VERSION="550.54.15"']
        if self.pod:
            parts += [f'pod="{self.pod}"', 'container="vllm"', 'namespace="serving"']
        return "{" + ",".join(parts) + "}"

    def value(self, name: str, t_s: float) -> float:
        reading = getattr(self, name)
        return float(reading(t_s) if callable(reading) else reading)


def dcgm_page(gpus: list[FakeGpu], t_s: float) -> str:
    """The exposition text of every field of every GPU at `t_s` seconds."""
    lines = []
    for name, (metric, kind) in FIELDS.items():
        lines += [f"# HELP {metric} {name}.", f"# TYPE {metric} {kind}"]
        lines += [f"{metric}{gpu.labels()} {gpu.value(name, t_s):g}" for gpu in gpus]
    return "\n".join(lines) + "\n"


@dataclass
class FakeDcgmExporter:
    """Serves `dcgm_page` of its GPUs at /metrics; `url` once started. Use as a context manager."""

    gpus: list[FakeGpu]
    by_scrape: bool = False  # the functions' argument: the scrape's number (0, 1, …) instead of seconds
    scrapes: int = 0
    _first_s: float | None = None
    _server: ThreadingHTTPServer | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/metrics"

    def page(self) -> str:
        now = time.monotonic()
        if self._first_s is None:
            self._first_s = now
        self.scrapes += 1
        return dcgm_page(self.gpus, self.scrapes - 1 if self.by_scrape else now - self._first_s)

    def __enter__(self) -> FakeDcgmExporter:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                body = exporter.page().encode() if self.path == "/metrics" else b"not found\n"
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
