"""retry_delay(attempt, base_ms, cap_ms, jitter): cap first, then the ratio, then floor."""

from __future__ import annotations

import pytest

from model import retry_delay


@pytest.mark.parametrize(
    ("attempt", "base_ms", "cap_ms", "jitter", "delay"),
    [
        (1, 100, 1000, 1, 100),
        (2, 100, 1000, 1, 200),
        (4, 100, 1000, 1, 800),
        (5, 100, 1000, 1, 1000),  # 1600 capped at 1000
        (16, 60000, 60000, 1.0, 60000),
        (3, 100, 1000, 0.5, 200),
        (3, 100, 1000, 0.999, 399),  # floor, not round
        (5, 100, 1000, 0.3333, 333),  # the cap applies before the ratio
        (1, 1, 1, 0, 0),
        (1, 100, 100, 0.0, 0),
    ],
)
def test_examples(attempt: int, base_ms: int, cap_ms: int, jitter: float, delay: int) -> None:
    assert retry_delay(attempt, base_ms, cap_ms, jitter) == delay
    assert type(retry_delay(attempt, base_ms, cap_ms, jitter)) is int


def test_the_cap_may_not_be_below_the_base() -> None:
    with pytest.raises(ValueError, match="'cap_ms'"):
        retry_delay(1, 100, 99, 0.5)
