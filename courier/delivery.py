"""One delivery over HTTP: the ``send`` couriers use, and the cause of its answer.

Rules this module keeps:

1. ``HttpSend`` maps the receiver's answer onto the worker's outcomes: any 2xx is
   ``True``; a timeout, a refused or broken connection, 408, 429 or 5xx raises
   ``worker.Retryable`` (the effect may or may not have happened: the receiver
   deduplicates the re-send); any other status (4xx, an unexpected 3xx) raises
   ``worker.Permanent``. Each request has ``X-Courier: <owner>``, no proxy and no
   redirects, and is bounded by its timeout.
2. Every answer has a ``Cause``: the HTTP status and the first ``EXCERPT_CHARS``
   of the body, a timeout, or a connection error. ``HttpSend.last_cause`` holds
   the last one, and the exception it raises carries it (``cause_of``); any other
   exception's cause is its class and message.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import worker

__all__ = [
    "DEFAULT_TIMEOUT_MS",
    "EXCERPT_CHARS",
    "RETRYABLE_4XX",
    "Cause",
    "HttpSend",
    "cause_of",
    "classify_status",
    "describe_cause",
    "outcome_of",
    "with_cause",
]

DEFAULT_TIMEOUT_MS = 5000
MAX_RESPONSE_BYTES = 65536
EXCERPT_CHARS = 200
RETRYABLE_4XX = frozenset({408, 429})


@dataclass(frozen=True)
class Cause:
    """Why one delivery ended as it did.

    ``kind``: ``answer`` (the receiver answered ``http_status``; ``detail`` is the
    start of its body), ``timeout``, ``connection`` (refused, reset, no route) or
    ``exception`` (``detail`` is the class and message).
    """

    kind: str
    detail: str
    http_status: int | None = None


def _excerpt(body: bytes) -> str:
    """The start of a response body as one line of text."""
    text = body[: EXCERPT_CHARS * 4].decode("utf-8", errors="replace")
    return " ".join(text.split())[:EXCERPT_CHARS]


def with_cause(error: BaseException, cause: Cause) -> BaseException:
    """``error`` with ``cause`` attached (read back by ``cause_of``)."""
    error.courier_cause = cause  # type: ignore[attr-defined]
    return error


def cause_of(error: BaseException) -> Cause:
    """The ``Cause`` attached to ``error``, else its class and message."""
    cause = getattr(error, "courier_cause", None)
    if isinstance(cause, Cause):
        return cause
    return Cause("exception", f"{type(error).__name__}: {error}"[:EXCERPT_CHARS])


def classify_status(status: int) -> bool:
    """Return ``True`` for a 2xx status, else raise the worker's classification.

    Raises:
        worker.Retryable: 408, 429 or 5xx: trying again later may succeed.
        worker.Permanent: any other status: the receiver refused this delivery.
    """
    if 200 <= status <= 299:
        return True
    if status in RETRYABLE_4XX or 500 <= status <= 599:
        raise worker.Retryable(f"receiver answered {status}")
    raise worker.Permanent(f"receiver answered {status}")


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: urllib would turn a POST into a GET."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class HttpSend:
    """``send`` for ``run_file``: POST one delivery as JSON to the receiver.

    Each call makes one request with ``X-Courier: <owner>``, no proxy and no
    redirects, bounded by ``timeout_ms``; see ``classify_status`` for the answer.
    Connection errors and timeouts raise ``worker.Retryable``: a timeout does not
    mean the work was not done, only that the answer was lost.
    """

    last_cause: Cause | None = None
    """The cause of the last call's answer (a 2xx included), for the attempt log."""

    def __init__(self, url: str, owner: str, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"'url' must be an http:// or https:// URL, got {url!r}")
        if not worker.is_identifier(owner):
            raise ValueError(
                f"'owner' must be 1-64 ASCII letters, digits, '_' or '-', got {owner!r}"
            )
        if type(timeout_ms) is not int or not 1 <= timeout_ms <= 60_000:
            raise ValueError(f"'timeout_ms' must be an int in 1..60000, got {timeout_ms!r}")
        self.url = url
        self.owner = owner
        self.timeout_s = timeout_ms / 1000
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirects)

    def __call__(self, event: dict[str, Any]) -> bool:
        request = urllib.request.Request(
            self.url,
            data=json.dumps(event).encode("utf-8"),
            method="POST",
            headers={"Content-Type": "application/json", "X-Courier": self.owner},
        )
        self.last_cause = None
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                body = response.read(MAX_RESPONSE_BYTES)
                status: int = response.status
        except urllib.error.HTTPError as error:
            status = error.code
            try:
                body = error.read(MAX_RESPONSE_BYTES)
            except (OSError, http.client.HTTPException):
                body = b""
            error.close()
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
            cause = _failure_cause(error)
            self.last_cause = cause
            raise with_cause(
                worker.Retryable(f"no answer from {self.url}: {cause.detail}"), cause
            ) from error
        self.last_cause = Cause("answer", _excerpt(body), status)
        try:
            return classify_status(status)
        except (worker.Retryable, worker.Permanent) as refusal:
            raise with_cause(refusal, self.last_cause) from None


def _failure_cause(error: BaseException) -> Cause:
    """A request that got no answer: a timeout or a connection error, with the reason."""
    reason = error.reason if isinstance(error, urllib.error.URLError) else error
    if isinstance(reason, TimeoutError):
        return Cause("timeout", f"no answer within the timeout ({reason})"[:EXCERPT_CHARS])
    text = f"{type(reason).__name__}: {reason}" if isinstance(reason, BaseException) else reason
    return Cause("connection", str(text)[:EXCERPT_CHARS])


def describe_cause(cause: Cause) -> str:
    """A cause in one line: ``HTTP 409: {...}``, ``timeout: ...``, ``connection: ...``."""
    if cause.kind == "answer":
        return (
            f"HTTP {cause.http_status}: {cause.detail}"
            if cause.detail
            else f"HTTP {cause.http_status}"
        )
    return f"{cause.kind}: {cause.detail}"


def outcome_of(cause: Cause | None, status: str) -> str:
    """How an answer was classified (``ok``, ``retry``, ``permanent``), from its cause,
    else from the status ``finish`` gave (``done`` is ``ok``, anything else ``retry``)."""
    if cause is not None and cause.kind == "answer" and cause.http_status is not None:
        code = cause.http_status
        if 200 <= code <= 299:
            return "ok"
        return "retry" if code in RETRYABLE_4XX or 500 <= code <= 599 else "permanent"
    if cause is not None and cause.kind in ("timeout", "connection"):
        return "retry"
    return "ok" if status == "done" else "retry"
