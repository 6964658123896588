"""The live view's web server: a read-only Starlette app served by uvicorn, in a process of its own.

Only GET (and HEAD) are routed; any other method gets 405. Pages come from soak.web.pages; plotly.js is served
once at a fixed URL and cached by the browser, so a page that reloads every few seconds stays small.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from soak.errors import SoakError, StorageError, UnknownRunError
from soak.report.render import plotly_js
from soak.store.store import Store
from soak.web.pages import PLOTLY_URL, LivePages

log = logging.getLogger(__name__)

# No page may be framed, sniffed into another type, or leak its URL (run ids) to another site.
SAFE_HEADERS = {"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"}
PARENT_CHECK_S = 1.0
NICENESS_BESIDE_A_RUN = 10


def _html(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers={**SAFE_HEADERS, "Cache-Control": "no-store"})


def _error_page(status: int, message: str) -> HTMLResponse:
    from markupsafe import escape

    return _html(f"<!DOCTYPE html><html lang=\"en\"><meta charset=\"utf-8\"><title>soak: {status}</title>"
                 f"<p>{escape(message)}</p><p><a href=\"/\">all runs</a></p></html>", status)


def _guarded(build: Callable[[], str]) -> HTMLResponse:
    """A page, or a one-line error page: 404 for an unknown run, 503 when the database cannot be read."""
    try:
        return _html(build())
    except UnknownRunError as exc:
        return _error_page(404, str(exc))
    except StorageError as exc:  # the database is away: soak.web.pages logged it once
        return _error_page(503, str(exc))
    except SoakError as exc:
        log.warning("live view: %s", exc)
        return _error_page(503, str(exc))
    except Exception as exc:  # one page must not take the view down; the traceback goes to the log
        log.exception("live view: internal error")
        return _error_page(500, f"internal error: {type(exc).__name__}: {exc}")


def create_app(store: Store, refresh_s: float = 5.0) -> Starlette:
    """The app: `/` (the run picker), `/runs/RUN` (a run's report, live), plotly.js and an empty favicon."""
    pages = LivePages(store, refresh_s)

    def index(_request: Request) -> Response:
        return _guarded(pages.index_page)

    def run_page(request: Request) -> Response:
        return _guarded(lambda: pages.run_page(request.path_params["run_id"]))

    def plotly(_request: Request) -> Response:
        return Response(str(plotly_js()), media_type="text/javascript",
                        headers={**SAFE_HEADERS, "Cache-Control": "public, max-age=86400"})

    def no_icon(_request: Request) -> Response:  # browsers ask for one; an empty answer keeps their console clean
        return Response(status_code=204, headers=SAFE_HEADERS)

    return Starlette(routes=[Route("/", index, methods=["GET"]), Route("/runs/{run_id}", run_page, methods=["GET"]),
                             Route(PLOTLY_URL, plotly, methods=["GET"]), Route("/favicon.ico", no_icon, methods=["GET"])])


def serve(store: Store, sock: socket.socket, refresh_s: float, parent_pid: int | None = None) -> None:
    """Serve the app on a bound, listening socket until SIGINT/SIGTERM (or until `parent_pid` is gone)."""
    import uvicorn

    config = uvicorn.Config(create_app(store, refresh_s), log_level="warning", access_log=False,
                            lifespan="off", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    if parent_pid:  # beside a run: the load's process wins any contention for the CPU
        os.nice(NICENESS_BESIDE_A_RUN)
        _exit_with_parent(server, parent_pid)
    _stop_signals_end_normally()
    server.run(sockets=[sock])


def _stop_signals_end_normally() -> None:
    """uvicorn stops gracefully on SIGINT/SIGTERM and then re-raises the signal to the handler it found; a no-op
    handler here makes that a normal end (exit 0, no KeyboardInterrupt) once the server has stopped."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda _signum, _frame: None)


def _exit_with_parent(server, parent_pid: int) -> None:  # server: a uvicorn.Server
    """Stop serving once the soak that started this process is gone (even when it was SIGKILLed)."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_CHECK_S)
        server.should_exit = True

    threading.Thread(target=watch, name="soak-web-parent-watch", daemon=True).start()
