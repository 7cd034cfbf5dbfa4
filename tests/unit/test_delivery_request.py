"""``courier.delivery_request.parse_delivery``: what a delivery body must be, read as
``json.loads`` reads it with the rules the receiver adds."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import worker
from courier.delivery_request import Problem, parse_delivery

# Small inputs: a fifth of the profile's examples cover them (400 in ci; 2,000 took 3 s).
EXAMPLES = max(20, settings().max_examples // 5)

# Bodies: any bytes, any text, and JSON texts near a delivery (keys repeated, nested,
# constants, numbers of every kind).
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["id", "qty", "x"]), inner, max_size=3)
    ),
    max_leaves=6,
)
_NEAR = st.builds(
    lambda pairs: "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in pairs) + "}",
    st.lists(
        st.tuples(
            st.sampled_from(["id", "qty", "x"]),
            st.one_of(
                _VALUES.map(json.dumps),
                st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "007", "1.0"]),
            ),
        ),
        max_size=3,
    ),
)
_BODIES = st.one_of(
    st.binary(max_size=40),
    st.text(max_size=20).map(lambda t: t.encode("utf-8")),
    _VALUES.map(lambda v: json.dumps(v).encode("utf-8")),
    _NEAR.map(lambda t: t.encode("utf-8")),
    _NEAR.map(lambda t: ("\ufeff" + t).encode("utf-8")),
)


def _outcome(body: bytes) -> tuple[str, Any]:
    """The id and qty, or the problem: its status and code, and the detail of a body
    that is not JSON (json's own words)."""
    try:
        return "ok", parse_delivery(body)
    except Problem as problem:
        if problem.code == "not_json":
            return "problem", (problem.status, problem.code, problem.detail)
        return "problem", (problem.status, problem.code)


def _reference(body: bytes) -> tuple[str, Any]:
    """What the documented rules give, read through ``json.loads`` itself."""

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        if len(set(keys)) != len(keys):
            raise _Refused(f"duplicate keys in {keys!r}")
        return dict(pairs)

    def constant(name: str) -> Any:
        raise _Refused(f"{name} is not JSON")

    try:
        value = json.loads(body.decode("utf-8"), object_pairs_hook=unique, parse_constant=constant)
    except _Refused as refused:
        return "problem", (HTTPStatus.BAD_REQUEST, "not_json", refused.detail)
    except (UnicodeDecodeError, ValueError) as error:
        return "problem", (HTTPStatus.BAD_REQUEST, "not_json", str(error))
    if (
        type(value) is dict
        and value.keys() == {"id", "qty"}
        and worker.is_identifier(value["id"])
        and type(value["qty"]) is int
        and 1 <= value["qty"] <= worker.MAX_QTY
    ):
        return "ok", (value["id"], value["qty"])
    return "problem", (HTTPStatus.UNPROCESSABLE_ENTITY, "invalid_delivery")


class _Refused(Exception):
    def __init__(self, detail: str) -> None:
        self.detail = detail


@settings(max_examples=EXAMPLES)
@given(_BODIES)
@example('\ufeff{"id": "a", "qty": 1}'.encode())
@example(b'{"id": "a", "qty": 1, "id": "b"}')
@example(b'{"id": "a", "qty": {"n": 1, "n": 2}}')
@example(b'{"id": "a", "qty": NaN}')
def test_a_body_is_read_as_json_loads_reads_it(body: bytes) -> None:
    assert _outcome(body) == _reference(body)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ('\ufeff{"id": "a", "qty": 1}'.encode(), HTTPStatus.BAD_REQUEST, "not_json"),
        (b'{"id": "a", "id": "a", "qty": 1}', HTTPStatus.BAD_REQUEST, "not_json"),
        (b'{"id": "a", "qty": Infinity}', HTTPStatus.BAD_REQUEST, "not_json"),
        (b'{"id": "a", "qty": 1.0}', HTTPStatus.UNPROCESSABLE_ENTITY, "invalid_delivery"),
        (b'{"id": "a", "qty": true}', HTTPStatus.UNPROCESSABLE_ENTITY, "invalid_delivery"),
    ],
)
def test_bodies_that_are_not_deliveries_are_refused(
    body: bytes, status: HTTPStatus, code: str
) -> None:
    with pytest.raises(Problem) as refused:
        parse_delivery(body)
    assert (refused.value.status, refused.value.code) == (status, code)


def test_a_delivery_gives_its_id_and_qty() -> None:
    assert parse_delivery(b' {"qty": 3, "id": "order-7"} ') == ("order-7", 3)
