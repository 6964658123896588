"""The target stage: a server soak starts and owns (reference, vLLM) or one it only attaches to (external)."""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soak.config import RunConfig
from soak.errors import TargetError
from soak.target.openai import choose_model, list_models, model_limits
from soak.target.process import ServerProcess, log_tail

log = logging.getLogger(__name__)


@dataclass
class ServerInfo:
    """What the later stages need to know of the server under test."""

    kind: str
    base_url: str
    model: str
    root_pids: list[int] = field(default_factory=list)
    metrics_urls: list[str] = field(default_factory=list)
    pgid: int | None = None
    cmd: list[str] = field(default_factory=list)
    log_path: Path | None = None
    limits: dict[str, Any] = field(default_factory=dict)


def auth_headers(config: RunConfig) -> dict[str, str]:
    """An Authorization header from the environment variable named by --api-key-env (never stored)."""
    name = config.target.api_key_env
    key = os.environ.get(name) if name else None
    return {"Authorization": f"Bearer {key}"} if key else {}


def free_port() -> int:
    """A port the OS says is free on 127.0.0.1 now (for servers that cannot take --port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Target:
    """Base of every target: `start()` gives ServerInfo, `exit_code()` tells a death, `stop()` ends it."""

    kind = "external"

    def __init__(self, config: RunConfig, run_dir: Path):
        self.config = config
        self.run_dir = run_dir
        self.info: ServerInfo | None = None

    def start(self) -> ServerInfo:
        """Make the server ready (or check it is) and describe it."""
        raise NotImplementedError

    def exit_code(self) -> int | None:
        """The server's exit code once it died; None while alive (or not ours to watch)."""
        return None

    def stop(self) -> int | None:
        """Stop what soak started; attach-only targets do nothing."""
        return None

    def root_pids(self) -> list[int]:
        """Roots of the server's process tree, read by telemetry at every sample."""
        return list(self.info.root_pids) if self.info else list(self.config.target.server_pids)

    def log_tail(self) -> str:
        """The tail of the server log, when soak captured one."""
        return log_tail(self.info.log_path) if self.info and self.info.log_path else ""

    def _describe(self, base_url: str, pids: list[int], process: ServerProcess | None = None) -> ServerInfo:
        headers = auth_headers(self.config)
        models = list_models(base_url, headers)
        model = choose_model(models, self.config.target.served_model or self._expected_model(), base_url)
        metrics = [base_url + "/metrics", *self.config.target.metrics_urls]
        return ServerInfo(
            kind=self.kind, base_url=base_url, model=model, root_pids=pids + list(self.config.target.server_pids),
            metrics_urls=metrics, pgid=process.pid if process else None, cmd=process.cmd if process else [],
            log_path=process.log_path if process else None, limits=model_limits(models, model),
        )

    def _expected_model(self) -> str | None:
        return None


class ExternalTarget(Target):
    """A server someone else runs; soak only checks it answers and learns its model."""

    kind = "external"

    def start(self) -> ServerInfo:
        url = self.config.target.url
        assert url is not None
        self.info = self._describe(url, [])
        return self.info


class ManagedTarget(Target):
    """A server soak starts in its own process group and stops at the end."""

    process: ServerProcess | None = None

    def exit_code(self) -> int | None:
        return self.process.exit_code() if self.process else None

    def stop(self, grace_s: float = 15.0) -> int | None:
        return self.process.stop(grace_s) if self.process else None

    def fail_start(self, what: str) -> TargetError:
        """A TargetError quoting the server log's tail."""
        tail = log_tail(self.process.log_path) if self.process else ""
        if self.process:
            self.process.stop(5.0)
        return TargetError(f"{what}; server log tail:\n{tail}" if tail else what)
