"""Section 1: the four exceptions and retry_delay(attempt, base_ms, cap_ms, jitter)."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import pytest

import worker
from tests.support import bad_ints


@pytest.mark.parametrize("name", ["Conflict", "Retryable", "Permanent", "BadAck"])
def test_each_error_is_a_direct_subclass_of_exception(name: str) -> None:
    cls = getattr(worker, name)
    assert cls.__bases__ == (Exception,)


@pytest.mark.parametrize(
    ("attempt", "base_ms", "cap_ms", "jitter", "expected"),
    [
        (1, 100, 1000, 1.0, 100),
        (2, 100, 1000, 1.0, 200),
        (4, 100, 1000, 1.0, 800),
        (5, 100, 1000, 1.0, 1000),  # 1600 capped to 1000
        (16, 60000, 60000, 1, 60000),
        (16, 1, 60000, 1, 32768),
        (3, 100, 1000, 0.5, 200),
        (5, 100, 1000, 0.5, 500),  # cap first (1000 * 0.5), not min(1000, 1600 * 0.5)
        (1, 3, 3, 0.5, 1),  # floor(1.5)
        (1, 100, 100, 0.999, 99),  # floor(99.9)
        (7, 100, 1000, 0, 0),
        (7, 100, 1000, 0.0, 0),
        (1, 1, 1, 1, 1),
    ],
)
def test_returns_floor_of_capped_backoff_times_jitter(
    attempt: int, base_ms: int, cap_ms: int, jitter: float, expected: int
) -> None:
    delay = worker.retry_delay(attempt, base_ms, cap_ms, jitter)
    assert delay == expected
    assert type(delay) is int


def test_uses_the_injected_ratio_with_no_randomness_of_its_own() -> None:
    ratios = [i / 97 for i in range(98)]
    first = [worker.retry_delay(6, 37, 2000, r) for r in ratios]
    assert first == [worker.retry_delay(6, 37, 2000, r) for r in ratios]
    assert first == [math.floor(min(2000, 37 * 2**5) * r) for r in ratios]


BAD_JITTERS: list[object] = [
    -0.0001,
    1.0001,
    -1,
    2,
    math.nan,
    math.inf,
    -math.inf,
    True,
    False,
    "0.5",
    None,
    Decimal("0.5"),
    Fraction(1, 2),
    complex(0.5, 0),
]

VALID = {"attempt": 1, "base_ms": 100, "cap_ms": 1000, "jitter": 0.5}

INVALID_CASES = (
    [("attempt", v) for v in bad_ints(1, 16)]
    + [("base_ms", v) for v in bad_ints(1, 60000)]
    + [("cap_ms", v) for v in [99, 60001, True, 1000.0, None]]  # below base_ms (100)
    + [("jitter", v) for v in BAD_JITTERS]
)


@pytest.mark.parametrize(("argument", "value"), INVALID_CASES)
def test_rejects_malformed_or_out_of_range_argument(argument: str, value: object) -> None:
    with pytest.raises(ValueError, match=argument):
        worker.retry_delay(**{**VALID, argument: value})  # type: ignore[arg-type]


def test_cap_may_equal_base_and_reach_sixty_seconds() -> None:
    assert worker.retry_delay(16, 60000, 60000, 1.0) == 60000
    assert worker.retry_delay(16, 250, 250, 1.0) == 250
