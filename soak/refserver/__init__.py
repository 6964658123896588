"""The CPU reference inference server: OpenAI-compatible HTTP, vLLM metric names, fault injection.

It is its own process and shares nothing with the harness but the wire protocol. Run it with
`python -m soak.refserver --port 0` (or `soak refserver ...`); see docs/refserver.md.
"""

import signal
import threading

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _StopBeforeReady(Exception):
    """SIGTERM/SIGINT arrived while the server was still starting."""


def _stop_before_ready(signum, frame) -> None:
    raise _StopBeforeReady


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` (default: sys.argv[1:]), serve until SIGTERM/SIGINT, return the exit code."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, _stop_before_ready) for s in _STOP_SIGNALS} if in_main_thread else {}
    try:
        from soak.refserver.cli import main as cli_main

        return cli_main(argv)
    except _StopBeforeReady:
        return 0  # asked to stop while importing torch or building the model: still a clean stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


__all__ = ["main"]
