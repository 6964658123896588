"""The embedded CPU reference server, started as `python -m soak.refserver --port 0 …`."""

from __future__ import annotations

import re
import sys

from soak.target.base import ManagedTarget, ServerInfo
from soak.target.process import ServerProcess
from soak.units import format_duration

READY_LINE = re.compile(r"^SOAK_REFSERVER_READY (http://\S+)$", re.MULTILINE)
REFERENCE_STARTUP_TIMEOUT_S = 120.0


def reference_command(config) -> list[str]:  # config: a RunConfig
    """The refserver command line for this run's faults, seed, time scale and device."""
    target = config.target
    # The horizon is model time: the run's wall length × the time scale, so FROM:TO spans the whole run.
    cmd = [sys.executable, "-m", "soak.refserver", "--host", "127.0.0.1", "--port", "0",
           "--seed", str(target.reference_seed), "--time-scale", f"{target.time_scale:g}",
           "--device", target.device, "--fault-horizon", format_duration(config.duration_s * target.time_scale)]
    for fault in target.reference_faults:
        cmd += ["--fault", fault]
    return cmd + list(target.reference_args)


class ReferenceTarget(ManagedTarget):
    """soak's own CPU reference inference server (optionally with planted faults)."""

    kind = "reference"
    _log_offset = 0  # where this start's output begins in server.log

    def start(self) -> ServerInfo:
        log_path = self.run_dir / "server.log"
        self._log_offset = log_path.stat().st_size if log_path.exists() else 0  # a restart appends to the log
        self.process = ServerProcess(self._command(), log_path)
        self.process.start()
        timeout_s = min(self.config.target.startup_timeout_s, REFERENCE_STARTUP_TIMEOUT_S)
        outcome = self.process.wait_for(lambda: self._ready_url() is not None, timeout_s)
        if outcome == "exited":
            raise self.fail_start(f"the reference server exited with code {self.process.exit_code()} at start")
        if outcome == "timeout":
            raise self.fail_start(f"the reference server was not ready within {timeout_s:.0f}s")
        self.info = self._describe(self._ready_url(), [self.process.pid], self.process)
        return self.info

    def _command(self) -> list[str]:
        """The refserver command; after restart() it binds the old port again so the base URL stays valid."""
        cmd = reference_command(self.config)
        if self.restart_port:
            cmd[cmd.index("--port") + 1] = str(self.restart_port)
        return cmd

    def _ready_url(self) -> str | None:
        try:
            with open(self.process.log_path, "rb") as handle:
                handle.seek(self._log_offset)
                text = handle.read().decode("utf-8", errors="replace")
        except OSError:
            return None
        match = READY_LINE.search(text)
        return match.group(1) if match else None
