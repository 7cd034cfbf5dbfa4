"""Fixtures of the parallel suite: one pool of branch processes per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.parallel.runner import Pool


@pytest.fixture(scope="module")
def pool() -> Iterator[Pool]:
    """The branch processes of one module's programs; stopped when the module is done."""
    branches = Pool()
    try:
        yield branches
    finally:
        branches.close()
