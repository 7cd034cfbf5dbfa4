"""Count what the model tries while the stateful suite runs (``tests/stateful/coverage.py``;
``tests/conftest.py`` prints the count beside the explorer's in the terminal summary)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from model.explore import Combo, counting
from model.job import recording
from tests.stateful.coverage import REACHED


@pytest.fixture(scope="package", autouse=True)
def model_coverage() -> Iterator[Counter[Combo]]:
    """Count what the model tries while this package's tests run."""
    with recording(counting(REACHED)):
        yield REACHED
