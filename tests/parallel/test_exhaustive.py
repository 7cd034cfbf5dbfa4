"""A slice of the exhaustive search (``tests.parallel.exhaustive``) in ``make test``:
every interleaving of every program of two branches of at most one call each, on
worker.py and on planted copies of it.

The whole search (up to three calls per branch, ``make fuzz MODE=exhaustive``) takes
minutes; this slice takes seconds and still catches five of the planted bugs, each in
an interleaving the search runs on purpose rather than one the scheduler happened on.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.parallel.exhaustive import Search, programs
from tests.parallel.planted import BY_NAME, plant
from tests.parallel.runner import scratch_folder
from tests.stores.sqlite import SQLiteStore

CAUGHT_WITH_ONE_CALL = (
    "finish-deferred-begin",
    "claim-chooses-then-leases",
    "send-inside-claim",
    "redrive-reads-first",
    "enqueue-reads-first",
)


@pytest.fixture
def folder() -> Iterator[str]:
    with scratch_folder() as made:
        yield made


def test_every_interleaving_of_one_call_per_branch_is_explained(folder: str) -> None:
    search = Search(SQLiteStore(folder))
    for program in programs(1):
        search.program(program, stop_at_first=False)
    assert search.unexplained == [], search.unexplained[0][1]
    # 20 programs; how many interleavings each has is the scheduler's steps': pinned loosely
    # so that a search that stopped exploring (one run per program) fails here.
    assert search.programs == 20
    assert search.interleavings > 3 * search.programs


@pytest.mark.parametrize("bug", CAUGHT_WITH_ONE_CALL)
def test_the_search_finds_the_interleaving_of_a_planted_bug(folder: str, bug: str) -> None:
    search = Search(plant(BY_NAME[bug], Path(folder)), bug)
    for program in programs(1):
        search.program(program)
        if search.unexplained:
            break
    assert search.unexplained, f"every interleaving of the plant {bug} was explained"
