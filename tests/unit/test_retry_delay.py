"""Section 1: the four exceptions and retry_delay(attempt, base_ms, cap_ms, jitter).

The contract's examples of ``retry_delay`` are ``model.retry_delay``'s tests
(``tests/model/test_model_retry_delay.py``); here ``worker.retry_delay`` is held
against the model over the whole domain. Junk for every argument (NaN, infinities,
bools, subclasses, Decimal, Fraction, huge ints) is drawn by
``test_arbitrary_inputs.py``; here each malformed integer names its argument.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import model
import worker
from tests.support import bad_ints


@pytest.mark.parametrize("name", ["Conflict", "Retryable", "Permanent", "BadAck"])
def test_each_error_is_a_direct_subclass_of_exception(name: str) -> None:
    cls = getattr(worker, name)
    assert cls.__bases__ == (Exception,)


JITTERS = st.one_of(st.sampled_from([0, 1, 0.0, 1.0, 0.5, 0.999]), st.floats(0, 1))
BACKOFFS = st.integers(1, 60_000).flatmap(
    lambda base: st.tuples(st.just(base), st.integers(base, 60_000))
)


@given(attempt=st.integers(1, 16), backoff=BACKOFFS, jitter=JITTERS)
def test_agrees_with_the_model_over_the_whole_domain(
    attempt: int, backoff: tuple[int, int], jitter: float
) -> None:
    base_ms, cap_ms = backoff
    delay = worker.retry_delay(attempt, base_ms, cap_ms, jitter)
    assert type(delay) is int
    assert delay == model.retry_delay(attempt, base_ms, cap_ms, jitter)


def test_uses_the_injected_ratio_with_no_randomness_of_its_own() -> None:
    ratios = [i / 97 for i in range(98)]
    first = [worker.retry_delay(6, 37, 2000, r) for r in ratios]
    assert first == [worker.retry_delay(6, 37, 2000, r) for r in ratios]
    assert first == [math.floor(min(2000, 37 * 2**5) * r) for r in ratios]


VALID = {"attempt": 1, "base_ms": 100, "cap_ms": 1000, "jitter": 0.5}

INVALID_CASES = (
    [("attempt", v) for v in bad_ints(1, 16)]
    + [("base_ms", v) for v in bad_ints(1, 60000)]
    + [("cap_ms", v) for v in [99, 60001, True, 1000.0, None]]  # below base_ms (100)
    + [("jitter", v) for v in [-0.0001, 1.0001, math.nan, True, "0.5"]]
)


@pytest.mark.parametrize(("argument", "value"), INVALID_CASES)
def test_rejects_malformed_or_out_of_range_argument(argument: str, value: object) -> None:
    with pytest.raises(ValueError, match=argument):
        worker.retry_delay(**{**VALID, argument: value})  # type: ignore[arg-type]


def test_cap_may_equal_base_and_reach_sixty_seconds() -> None:
    assert worker.retry_delay(16, 60000, 60000, 1.0) == 60000
    assert worker.retry_delay(16, 250, 250, 1.0) == 250
