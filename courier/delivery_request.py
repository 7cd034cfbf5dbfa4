"""What a delivery request must be, and the ``Problem`` a request that is not gets.

The receiver's routes and the shape of a delivery, as rules (``courier.receiver``
serves them; this module decides them from the request line, the headers and the
body, and reads no socket):

1. The routes: ``POST /deliveries`` (``DELIVERIES_PATH``) takes a delivery; ``GET /``
   and ``GET /inbox`` (``SUMMARY_PATHS``) read the inbox. Any other path is ``404
   not_found``; any other method on a route (``HEAD`` and ``OPTIONS`` included)
   is ``405 method_not_allowed``, and its answer's ``Allow`` names the route's
   method (``allowed_method``).
2. The sender: an ``X-Courier`` header, if present, is an identifier (as the queue
   calls one), else ``400 bad_sender``.
3. The body is announced by exactly one plain decimal ``Content-Length`` (none, or
   a chunked body: ``411 length_required``; malformed or repeated: ``400
   bad_content_length``) of at most ``MAX_BODY_BYTES`` (``413 too_large``), with a
   JSON ``Content-Type`` (``415 unsupported_media_type``).
4. The body is UTF-8 strict JSON (no duplicate keys, no NaN/Infinity; else ``400
   not_json``) holding exactly ``{"id": <identifier>, "qty": <1..1000>}`` (else
   ``422 invalid_delivery``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Protocol

import worker

__all__ = [
    "DELIVERIES_PATH",
    "MAX_BODY_BYTES",
    "SENDER_HEADER",
    "SUMMARY_PATHS",
    "Headers",
    "Problem",
    "RequestLine",
    "allowed_method",
    "body_length",
    "check_route",
    "header_decimal",
    "parse_delivery",
    "sender_of",
]

DELIVERIES_PATH = "/deliveries"
SUMMARY_PATHS = ("/", "/inbox")
MAX_BODY_BYTES = 4096
MAX_DECIMAL_DIGITS = 12
SENDER_HEADER = "X-Courier"

_DELIVERY_KEYS = frozenset({"id", "qty"})


class Problem(Exception):
    """A request the receiver rejects: an HTTP status, a short code and a detail."""

    def __init__(self, status: HTTPStatus, code: str, detail: str) -> None:
        super().__init__(f"{int(status)} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail


class Headers(Protocol):
    """A request's header fields, looked up without case (``courier.request_head.Head``
    and the stdlib's ``email.message.Message`` are such)."""

    def get(self, name: str, default: str | None = None) -> str | None: ...

    def get_all(self, name: str, failobj: list[str] | None = None) -> list[str] | None: ...


@dataclass(frozen=True)
class RequestLine:
    """The method and path of one request, as logged."""

    method: str
    path: str


def header_decimal(text: str) -> int | None:
    """The value of a plain decimal header such as ``Content-Length``, else ``None``."""
    if text.isascii() and text.isdigit() and len(text) <= MAX_DECIMAL_DIGITS:
        return int(text)
    return None


def allowed_method(path: str) -> str:
    """The one method a route accepts: ``POST`` for deliveries, ``GET`` for the rest."""
    return "POST" if path == DELIVERIES_PATH else "GET"


def check_route(request: RequestLine) -> None:
    """Return if ``request`` names a route with its method; else raise ``Problem``
    (404 or 405, rule 1)."""
    if request.path not in (DELIVERIES_PATH, *SUMMARY_PATHS):
        raise Problem(HTTPStatus.NOT_FOUND, "not_found", f"no route {request.path!r}")
    allowed = allowed_method(request.path)
    if request.method != allowed:
        raise Problem(
            HTTPStatus.METHOD_NOT_ALLOWED,
            "method_not_allowed",
            f"{request.path} accepts {allowed}, not {request.method}",
        )


def sender_of(headers: Headers) -> str | None:
    """The ``X-Courier`` header, or ``None`` if there is none; raises ``Problem`` (400)
    if it is not an identifier."""
    sender = headers.get(SENDER_HEADER)
    if sender is not None and not worker.is_identifier(sender):
        raise Problem(HTTPStatus.BAD_REQUEST, "bad_sender", f"{SENDER_HEADER}: {sender!r}")
    return sender


def body_length(headers: Headers) -> int:
    """The number of body bytes to read, from headers that keep rule 3; else ``Problem``."""
    if headers.get("Transfer-Encoding") is not None:
        raise Problem(HTTPStatus.LENGTH_REQUIRED, "length_required", "send Content-Length")
    lengths = headers.get_all("Content-Length") or []
    if not lengths:
        raise Problem(HTTPStatus.LENGTH_REQUIRED, "length_required", "no Content-Length")
    length = header_decimal(lengths[0]) if len(lengths) == 1 else None
    if length is None:
        raise Problem(HTTPStatus.BAD_REQUEST, "bad_content_length", f"got {lengths!r}")
    if length > MAX_BODY_BYTES:
        raise Problem(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            "too_large",
            f"{length} bytes; at most {MAX_BODY_BYTES}",
        )
    media_type = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise Problem(
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            f"Content-Type must be application/json, got {media_type!r}",
        )
    return length


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise Problem(HTTPStatus.BAD_REQUEST, "not_json", f"duplicate keys in {keys!r}")
    return dict(pairs)


def _no_constants(name: str) -> Any:
    raise Problem(HTTPStatus.BAD_REQUEST, "not_json", f"{name} is not JSON")


# One decoder for every body: ``json.loads`` with these hooks makes a new decoder (and its
# scanner) at each call, a sixth of the receiver's event loop at every delivery.
_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_no_constants)


def _invalid(detail: str) -> Problem:
    return Problem(HTTPStatus.UNPROCESSABLE_ENTITY, "invalid_delivery", detail)


def parse_delivery(body: bytes) -> tuple[str, int]:
    """Return ``(id, qty)`` from a delivery body, or raise ``Problem``.

    The body must be UTF-8 strict JSON (no duplicate keys, no NaN/Infinity): else
    400 ``not_json``. It must be an object with exactly the keys ``id`` (a str of
    1-64 ASCII letters, digits, ``_`` or ``-``) and ``qty`` (an int 1-1000, not a
    bool, not a float): else 422 ``invalid_delivery``.
    """
    try:
        text = body.decode("utf-8")
        if text.startswith("\ufeff"):  # as json.loads says it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        value = _DECODER.decode(text)
    except (UnicodeDecodeError, ValueError) as error:
        raise Problem(HTTPStatus.BAD_REQUEST, "not_json", str(error)) from None
    if type(value) is not dict:
        raise _invalid(f"expected a JSON object, got {type(value).__name__}")
    if value.keys() != _DELIVERY_KEYS:
        raise _invalid(f"expected exactly the keys ['id', 'qty'], got {sorted(value)!r}")
    delivery_id, qty = value["id"], value["qty"]
    if not worker.is_identifier(delivery_id):
        raise _invalid(f"'id' must be 1-64 ASCII letters, digits, '_' or '-', got {delivery_id!r}")
    if type(qty) is not int or not 1 <= qty <= worker.MAX_QTY:
        raise _invalid(f"'qty' must be an integer in 1..{worker.MAX_QTY}, got {qty!r}")
    return delivery_id, qty
