"""Shrunk parallel programs, kept as tests, each with the schedule that fails its plant
(``docs/debugging.md`` shows how to add one from a printed failure).

Most came from a planted bug (``tests.parallel.planted``). The queue must explain
every interleaving of the program (they are few: the exhaustive search runs them all),
and the plant must still fail it under its schedule, every time (a run under the
scheduler is deterministic): a program that stopped catching its bug would be a
regression of the suite, not of the queue. One came from a false alarm of the suite
itself (``TWO_KILLED_CLAIMS_HOLD_BOTH_JOBS``): the queue was right, the model's relaxed
claim order too narrow; its 560 interleavings take a minute and a half on PostgreSQL,
so it is judged under ``SAMPLED`` random schedules here.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.parallel.case import judged
from tests.parallel.exhaustive import Search
from tests.parallel.planted import BY_NAME, plant
from tests.parallel.program import Call, Fault, Program, Send, TicketRef
from tests.parallel.schedule import DECISIONS, Replay, Switches, parse
from tests.parallel.timeline import render
from tests.postgres import Server
from tests.stores import Store
from tests.stores.postgres import PostgresStore
from tests.stores.sqlite import SQLiteStore


def call(verb: str, **args: Any) -> Call:
    return Call(verb, tuple(args.items()))


# claim-many-lets-go: claim_many committed its lease before the fault at
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

# finish-checks-then-updates: two finishes of one ticket both said done (the race was
# too rare to pin in real processes, 1 run in 10; its schedule pins it every time).
TWO_FINISHES_OF_ONE_TICKET = Program(
    prefix=(
        call("enqueue_many", events=[{"id": "a", "qty": 1}], now_ms=1000, ttl_ms=100),
        call("claim", owner="c1", now_ms=1000, lease_ms=None, fault=None),
    ),
    branches=((FINISH_THE_PREFIX_TICKET,), (FINISH_THE_PREFIX_TICKET,)),
)

# pg-claim-without-skip-locked: both claims read a as the lowest claimable
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


# A false alarm (1 of 5 real-process runs, on pgworker.py): b1 and b2 each held one of a and b,
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

# A false alarm (a fuzz campaign on pgworker.py, under "explicit 122333111112"): c's insert
# drew seq 2 from the sequence and committed after b's, which drew 3; b1's claim, not
# seeing c yet, took b. The model numbers jobs in the order they take effect, so it ended
# with b before c. On PostgreSQL seq order is the order of the inserts, not of the commits.
SEQ_DRAWN_BEFORE_COMMIT = Program(
    prefix=(call("enqueue_many", events=[{"id": "a", "qty": 1}], now_ms=1000, ttl_ms=100),),
    branches=(
        (
            call("enqueue_many", events=[{"id": "b", "qty": 1}], now_ms=1000, ttl_ms=100),
            call("claim", owner="c1", now_ms=1000, lease_ms=None, fault=None),
        ),
        (call("enqueue", event={"id": "c", "qty": 1}, now_ms=1000, ttl_ms=100),),
        (call("claim", owner="c1", now_ms=1000, lease_ms=None, fault=None),),
    ),
)

# (plant, program, the schedule that fails the plant, or None: the queue's side only)
CASES = [
    ("claim-many-lets-go", CLAIM_MANY_KEEPS_ITS_LEASE, "22222222211111"),
    ("send-inside-claim", SEND_WITH_THE_CLAIM_OPEN, "1111111111122222"),
    ("finish-checks-then-updates", TWO_FINISHES_OF_ONE_TICKET, "111121122222"),
]

POSTGRES_CASES = [
    ("pg-claim-without-skip-locked", TWO_CLAIMS_OF_ONE_JOB, "explicit 1122122"),
]
SAMPLED = 20


@pytest.mark.parametrize(("bug", "program", "schedule"), CASES, ids=[c[0] for c in CASES])
def test_regression(tmp_path: Path, bug: str, program: Program, schedule: str | None) -> None:
    every_interleaving_explained(SQLiteStore(str(tmp_path)), program)
    if schedule is not None:
        planted = plant(BY_NAME[bug], tmp_path)
        assert judged(program, planted, Replay.of(schedule)).failed, f"{bug} passed {schedule}"


@pytest.fixture(scope="module")
def postgres(pg_server: Server) -> Iterator[str]:
    with pg_server.database() as conninfo:
        yield conninfo


@pytest.mark.parametrize(
    ("bug", "program", "schedule"), POSTGRES_CASES, ids=[c[0] for c in POSTGRES_CASES]
)
def test_regression_on_postgres(
    postgres: str, tmp_path: Path, bug: str, program: Program, schedule: str
) -> None:
    explicit, _ = parse(schedule)
    every_interleaving_explained(PostgresStore(postgres), program, explicit)
    planted: Store = plant(BY_NAME[bug], tmp_path, postgres)
    assert judged(program, planted, Replay.of(schedule)).failed, f"{bug} passed {schedule}"


def test_two_killed_claims_hold_both_jobs(postgres: str) -> None:
    store = PostgresStore(postgres)
    for seed in range(SAMPLED):
        coins = random.Random(seed)
        flags = tuple(coins.random() < 0.5 for _ in range(DECISIONS))
        policy = Switches(flags=flags, explicit=seed % 2 == 1)
        judgement = judged(TWO_KILLED_CLAIMS_HOLD_BOTH_JOBS, store, policy)
        assert not judgement.failed, render(judgement)


def test_seq_drawn_before_commit(postgres: str) -> None:
    judgement = judged(
        SEQ_DRAWN_BEFORE_COMMIT, PostgresStore(postgres), Replay.of("explicit 122333111112")
    )
    assert not judgement.failed, render(judgement)


def every_interleaving_explained(store: Store, program: Program, explicit: bool = False) -> None:
    search = Search(store, explicit=explicit)
    search.program(program, stop_at_first=False)
    assert search.interleavings > 1
    for _, schedule, judgement in search.unexplained:
        raise AssertionError(f"schedule {schedule}:\n{render(judgement)}")
