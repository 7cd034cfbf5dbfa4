"""Shrunk parallel programs, kept as tests (paste the ``program=Program(...)`` that a
failure prints; ``docs/debugging.md``).

Most came from a planted bug (``tests.parallel.planted``). The queue must explain
every run of it, and the plant must still fail it: a program that stopped catching its
bug would be a regression of the suite, not of the queue. One came from a false alarm
of the suite itself (``TWO_KILLED_CLAIMS_HOLD_BOTH_JOBS``): the queue was right, the
model's relaxed claim order too narrow, and every run must be explained.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.parallel.planted import BY_NAME, plant
from tests.parallel.program import Call, Fault, Program, Send, TicketRef
from tests.parallel.runner import Pool
from tests.parallel.trial import replay
from tests.postgres import Server
from tests.stores import Store
from tests.stores.postgres import PostgresStore
from tests.stores.sqlite import SQLiteStore

RUNS = 10
PLANT_RUNS = 20


def call(verb: str, **args: Any) -> Call:
    return Call(verb, tuple(args.items()))


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

# pg-claim-without-skip-locked (4 of 10 runs): both claims read a as the lowest claimable
# seq with no lock, and both leased it, the second over the first.
TWO_CLAIMS_OF_ONE_JOB = Program(
    prefix=(call("enqueue_many", events=[{"id": "a", "qty": 1}], now_ms=1000, ttl_ms=100),),
    branches=(
        (call("claim", owner="c1", now_ms=1000, lease_ms=None, fault=None),),
        (call("claim", owner="c1", now_ms=1000, lease_ms=None, fault=None),),
    ),
)


def killed_claim_many(owner: str) -> Call:
    return call(
        "claim_many",
        owner=owner,
        now_ms=1023,
        limit=1,
        lease_ms=None,
        fault=Fault("kill", "after-claim"),
    )


# A false alarm (1 of 5 runs, on pgworker.py): b1 and b2 each held one of a and b,
# b2 having passed over a, when both were killed; b3 found nothing. The model had let
# another claim hold only the first job of each search.
TWO_KILLED_CLAIMS_HOLD_BOTH_JOBS = Program(
    prefix=(
        call(
            "enqueue_many",
            events=[{"id": "a", "qty": 1}, {"id": "b", "qty": 1}],
            now_ms=1001,
            ttl_ms=1000,
            max_attempts=1,
        ),
    ),
    branches=(
        (killed_claim_many("c1"),),
        (killed_claim_many("c2"),),
        (
            call("claim_many", owner="c1", now_ms=1022, limit=1, lease_ms=1, fault=None),
            call("claim", owner="c1", now_ms=1022, lease_ms=None, fault=None),
        ),
    ),
)

CASES = [
    ("claim-many-lets-go", CLAIM_MANY_KEEPS_ITS_LEASE, True),
    ("send-inside-claim", SEND_WITH_THE_CLAIM_OPEN, True),
    ("finish-checks-then-updates", TWO_FINISHES_OF_ONE_TICKET, False),
]

POSTGRES_CASES = [
    ("pg-claim-without-skip-locked", TWO_CLAIMS_OF_ONE_JOB, True),
    ("two-killed-claims", TWO_KILLED_CLAIMS_HOLD_BOTH_JOBS, False),
]


@pytest.mark.parametrize(("bug", "program", "pins_the_plant"), CASES, ids=[c[0] for c in CASES])
def test_regression(
    pool: Pool, tmp_path: Path, bug: str, program: Program, pins_the_plant: bool
) -> None:
    queue = replay(pool, SQLiteStore(str(tmp_path)), program, RUNS)
    assert not queue.failed, queue.report()
    if pins_the_plant:
        planted = replay(pool, plant(BY_NAME[bug], tmp_path), program, PLANT_RUNS)
        assert planted.failed, f"the plant {bug} passed {PLANT_RUNS} runs of its program"


@pytest.fixture(scope="module")
def postgres(pg_server: Server) -> Iterator[str]:
    with pg_server.database() as conninfo:
        yield conninfo


@pytest.mark.parametrize(
    ("bug", "program", "pins_the_plant"), POSTGRES_CASES, ids=[c[0] for c in POSTGRES_CASES]
)
def test_regression_on_postgres(
    pool: Pool, postgres: str, tmp_path: Path, bug: str, program: Program, pins_the_plant: bool
) -> None:
    queue = replay(pool, PostgresStore(postgres), program, RUNS)
    assert not queue.failed, queue.report()
    if pins_the_plant:
        planted: Store = plant(BY_NAME[bug], tmp_path, postgres)
        caught = replay(pool, planted, program, PLANT_RUNS)
        assert caught.failed, f"the plant {bug} passed {PLANT_RUNS} runs of its program"
