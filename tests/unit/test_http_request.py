"""``courier.delivery.HttpSend.request``: the bytes a delivery writes, whatever the event."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from courier.delivery import HttpSend

# Small inputs: a fifth of the profile's examples cover them (400 in ci; 2,000 took 3 s).
EXAMPLES = max(20, settings().max_examples // 5)

URL = "http://127.0.0.1:9/deliveries"

# Events as the queue makes them, and what else a caller might hand a send: other key
# orders, other keys, ids that need escaping, qty that is not an int.
_IDS = st.one_of(st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True), st.text(max_size=8))
_QTYS = st.one_of(st.integers(), st.booleans(), st.floats(allow_nan=False), st.none())
_EVENTS = st.one_of(
    st.builds(lambda i, q: {"id": i, "qty": q}, _IDS, _QTYS),
    st.builds(lambda i, q: {"qty": q, "id": i}, _IDS, _QTYS),
    st.dictionaries(st.sampled_from(["id", "qty", "x"]), st.one_of(_IDS, _QTYS), max_size=3),
)


def _split(request: bytes) -> tuple[bytes, bytes]:
    head, _, body = request.partition(b"\r\n\r\n")
    return head, body


@settings(max_examples=EXAMPLES)
@given(_EVENTS)
def test_the_body_is_json_dumps_bytes_and_its_length_is_declared(event: dict[str, Any]) -> None:
    given_event = dict(event)
    head, body = _split(HttpSend(URL, "c1", 1000).request(event))
    assert body == json.dumps(event).encode("utf-8")
    assert head.endswith(b"\r\nContent-Length: %d" % len(body))
    assert event == given_event and list(event) == list(given_event)  # not changed


def test_a_queue_event_reads_back_as_itself() -> None:
    _, body = _split(HttpSend(URL, "c1", 1000).request({"id": "order-7", "qty": 3}))
    assert body == b'{"id": "order-7", "qty": 3}'
    assert json.loads(body) == {"id": "order-7", "qty": 3}
