"""Shrunk parallel programs, kept as tests (paste the ``program=Program(...)`` that a
failure prints; ``docs/debugging.md``).

Each one came from a planted bug (``tests.parallel.planted``). The queue must explain
every run of it, and the plant must still fail it: a program that stopped catching its
bug would be a regression of the suite, not of the queue.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.parallel.backends import SQLiteBackend
from tests.parallel.planted import BY_NAME, plant
from tests.parallel.program import Call, Fault, Program, Send, TicketRef
from tests.parallel.runner import Pool
from tests.parallel.trial import replay

RUNS = 10
PLANT_RUNS = 20


def call(verb: str, **args: Any) -> Call:
    return Call(verb, tuple(args.items()))


@pytest.fixture(scope="module")
def pool() -> Iterator[Pool]:
    pool = Pool()
    try:
        yield pool
    finally:
        pool.close()


# claim-many-lets-go (6 of 10 runs): claim_many committed its lease before the fault at
# after-claim, so the model's rollback left job a claimable and b1's claim found nothing.
CLAIM_MANY_KEEPS_ITS_LEASE = Program(
    prefix=(call("enqueue_many", events=[{"id": "a", "qty": 1}], now_ms=1000, ttl_ms=100),),
    branches=(
        (call("claim", owner="c1", now_ms=1000, lease_ms=None, fault=None),),
        (
            call(
                "claim_many",
                owner="c1",
                now_ms=1000,
                limit=1,
                lease_ms=None,
                fault=Fault("raise", "after-claim"),
            ),
        ),
    ),
)

# send-inside-claim: the send sees the claim's transaction still open.
SEND_WITH_THE_CLAIM_OPEN = Program(
    prefix=(call("enqueue", event={"id": "a", "qty": 1}, now_ms=1000, ttl_ms=100),),
    branches=(
        (
            call(
                "run_once",
                owner="c1",
                readings=(1000, 1000),
                send=Send("ack"),
                jitter=0.5,
                lease_ms=None,
            ),
        ),
        (call("claim", owner="c2", now_ms=1000, lease_ms=None, fault=None),),
    ),
)

# Both branches make the same call: two couriers finishing the one ticket of the prefix.
FINISH_THE_PREFIX_TICKET = call(
    "finish",
    ticket=TicketRef("p", 1),
    outcome="ok",
    now_ms=1000,
    delay_ms=0,
    fault=Fault("pause", "after-finish", 2),
)

# finish-checks-then-updates (1 of 10 runs): two finishes of one stale-proof ticket both
# said done; kept for the queue's side only, the race is too rare to pin the plant.
TWO_FINISHES_OF_ONE_TICKET = Program(
    prefix=(
        call("enqueue_many", events=[{"id": "a", "qty": 1}], now_ms=1000, ttl_ms=100),
        call("claim", owner="c1", now_ms=1000, lease_ms=None, fault=None),
    ),
    branches=((FINISH_THE_PREFIX_TICKET,), (FINISH_THE_PREFIX_TICKET,)),
)

CASES = [
    ("claim-many-lets-go", CLAIM_MANY_KEEPS_ITS_LEASE, True),
    ("send-inside-claim", SEND_WITH_THE_CLAIM_OPEN, True),
    ("finish-checks-then-updates", TWO_FINISHES_OF_ONE_TICKET, False),
]


@pytest.mark.parametrize(("bug", "program", "pins_the_plant"), CASES, ids=[c[0] for c in CASES])
def test_regression(
    pool: Pool, tmp_path: Path, bug: str, program: Program, pins_the_plant: bool
) -> None:
    queue = replay(pool, SQLiteBackend(), program, RUNS)
    assert not queue.failed, queue.report()
    if pins_the_plant:
        planted = replay(pool, plant(BY_NAME[bug], tmp_path), program, PLANT_RUNS)
        assert planted.failed, f"the plant {bug} passed {PLANT_RUNS} runs of its program"
