"""Webhook notifications: POST a run's summary (with a Slack-compatible `text` line) to a URL.

The URL usually embeds a secret token (Slack, Teams, Mattermost), so it is never logged, stored or put in an
exception message: logs name only the attempt, the HTTP status or the error class.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

log = logging.getLogger("soak.run.notify")

DEFAULT_ATTEMPTS = 4
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0
# Worth another try: the receiver was busy or briefly broken. Any other 4xx means the request is wrong.
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Treat a redirect as a failure, so the summary is never re-sent somewhere the operator did not name."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def summary_text(summary: dict[str, Any], schedule_name: str | None = None) -> str:
    """One human line: verdict, run id, status, reason and report path."""
    verdict = summary.get("verdict") or "NO VERDICT"
    who = f"schedule {schedule_name}: " if schedule_name else ""
    parts = [f"soak {who}{verdict}", f"run {summary.get('run_id') or '(none)'}",
             f"status {summary.get('status') or 'unknown'}"]
    reason = summary.get("verdict_reason") or summary.get("reason")
    if reason:
        parts.append(f"reason: {reason}")
    if summary.get("report_html"):
        parts.append(f"report: {summary['report_html']}")
    return " — ".join(parts)


def notification_payload(summary: dict[str, Any], schedule_name: str | None = None) -> dict[str, Any]:
    """The summary plus `text` (what Slack-style webhooks show) and the schedule's name."""
    payload = dict(summary)
    payload["text"] = summary_text(summary, schedule_name)
    if schedule_name:
        payload["schedule_name"] = schedule_name
    return payload


def _post_once(url: str, body: bytes, timeout_s: float) -> int:
    """POST once; return the HTTP status (0 for a transport failure). Raises nothing."""
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "soak-notify"})
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError, ValueError) as exc:
        # Class name only: some messages quote the host or the URL.
        log.warning("webhook: transport error %s", type(exc).__name__)
        return 0


def _backoff_s(attempt: int, base_s: float) -> float:
    return min(base_s * 2 ** attempt, MAX_BACKOFF_S)


def notify(url: str, summary: dict[str, Any], *, schedule_name: str | None = None,
           attempts: int = DEFAULT_ATTEMPTS, timeout_s: float = DEFAULT_TIMEOUT_S,
           backoff_s: float = DEFAULT_BACKOFF_S, sleep: Callable[[float], None] = time.sleep) -> bool:
    """POST the summary as JSON; retry transport errors, 408/429/5xx with exponential backoff.

    Returns True once the receiver answers 2xx, False when it refused or every attempt failed.
    """
    if not url.startswith(("http://", "https://")):
        log.warning("webhook: the URL is not http(s); not sending")
        return False
    body = json.dumps(notification_payload(summary, schedule_name), default=str).encode()
    for attempt in range(attempts):
        status = _post_once(url, body, timeout_s)
        if 200 <= status < 300:
            log.info("webhook: delivered (HTTP %d, attempt %d)", status, attempt + 1)
            return True
        if status and status not in RETRY_STATUSES:
            log.warning("webhook: refused with HTTP %d; not retrying", status)
            return False
        if attempt + 1 < attempts:
            delay_s = _backoff_s(attempt, backoff_s)
            log.warning("webhook: attempt %d failed (%s); retrying in %.1f s", attempt + 1,
                        f"HTTP {status}" if status else "no response", delay_s)
            sleep(delay_s)
    log.warning("webhook: giving up after %d attempts", attempts)
    return False


def notify_from_env(variable: str, summary: dict[str, Any], schedule_name: str | None = None, **options: Any) -> str:
    """POST the summary to the webhook URL held in $variable; one line saying what happened (the URL itself
    never appears in it). `options` go to `notify` (attempts, timeout_s…)."""
    url = os.environ.get(variable, "").strip()
    if not url:
        return f"note: ${variable} is not set; no notification sent"
    delivered = notify(url, summary, schedule_name=schedule_name, **options)
    return f"notification {'delivered' if delivered else 'NOT delivered'} to the webhook in ${variable}"


def failed_run_payload(run_id: str, status: str, reason: str) -> dict[str, Any]:
    """What is sent for a run that ended without a summary (it failed to start, or was forced to stop)."""
    return {"run_id": run_id, "status": status, "verdict": None, "verdict_reason": reason, "report_html": None}
