"""What one finished request looked like, as the rest of soak sees it (docs/load.md, "Measurements").

All `*_t` fields are wall-clock epoch seconds; latencies are measured from the *intended* send time, so a
late client or a full concurrency cap shows up in the numbers instead of hiding (coordinated omission).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from soak.contracts import ProvokedExchange

# invalid_output: a 200 whose answer failed the scenario's validation (soak.load.validate).
INVALID_OUTPUT = "invalid_output"
ERROR_CLASSES = ("connect", "timeout", "http_4xx", "http_5xx", "bad_stream", INVALID_OUTPUT)
CANCELLED = "cancelled"
KINDS = ("chat", "completion")


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One finished (or failed, or cancelled) request.

    ttft_ms: intended send → first content token (None without one, e.g. non-streaming or failed).
    itl_ms: every gap between consecutive content chunks. e2e_ms: intended send → last byte.
    queue_ms: time waiting on the concurrency cap. lag_ms: (sent − intended) − queue_ms, the client's own delay.
    error_class: None | connect | timeout | http_4xx | http_5xx | bad_stream | invalid_output | cancelled;
    `invalid_output` is a 200 whose structured answer failed validation; `cancelled` is a
    deliberate client disconnect (or a request cut at stop), not an error. expected_error marks a failure the
    scenario asked for (bad_input's 4xx), which counts as success. validation_gap names the expectation a
    success broke: the scenario expected a refusal (`Expect`) and the server answered 200 instead. request_id is
    the `X-Request-Id` soak sent with a request expecting a refusal (the server's log of it is its answer), else None.
    """

    scenario: str
    kind: str
    intended_t: float
    sent_t: float
    first_token_t: float | None
    finish_t: float
    ttft_ms: float | None
    e2e_ms: float
    itl_ms: tuple[float, ...]
    queue_ms: float
    lag_ms: float
    output_tokens: int
    prompt_tokens: int | None
    error_class: str | None = None
    expected_error: bool = False
    status_code: int | None = None
    error_message: str | None = None
    validation_gap: str | None = None
    request_id: str | None = None

    @property
    def is_error(self) -> bool:
        """True for a real failure: an error class that is neither a deliberate cancel nor expected."""
        return self.error_class not in (None, CANCELLED) and not self.expected_error

    @property
    def itl_mean_ms(self) -> float | None:
        """Mean gap between content chunks of this request, None with fewer than two chunks."""
        return sum(self.itl_ms) / len(self.itl_ms) if self.itl_ms else None

    def as_refusal(self, noticed_t: float) -> ProvokedExchange:
        """This request as one refused on purpose, seen at `noticed_t`: what the server logged for it is its answer."""
        message = re.sub(r"^HTTP \d+: ", "", self.error_message or "") or None
        return ProvokedExchange(self.request_id or "", f"{self.scenario} request expecting a refusal",
                                message=message, noticed_t=noticed_t)

    def to_wire(self) -> dict[str, Any]:
        """Plain types only (lists, not tuples), for Locust's msgpack messages between processes."""
        data = {name: getattr(self, name) for name in _FIELD_NAMES}  # not asdict: it deep-copies, ~50 µs a record
        data["itl_ms"] = list(self.itl_ms)
        return data

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> RequestRecord:
        """Inverse of `to_wire`."""
        return cls(**{**data, "itl_ms": tuple(data.get("itl_ms") or ())})


_FIELD_NAMES = tuple(field.name for field in fields(RequestRecord))
