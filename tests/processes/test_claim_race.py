"""(a) Two processes race ``claim`` on one job behind a barrier: exactly one wins.

Two spawned interpreters connect to the same queue each round, meet the parent at a
barrier, and claim at once. On SQLite (a fresh file per round) ``BEGIN IMMEDIATE``
serialises them; on PostgreSQL (one database, a new job per round) the loser's
``FOR UPDATE SKIP LOCKED`` passes over the row the winner holds, or finds it leased.
Either way one gets the ticket and the other ``None``.
"""

from __future__ import annotations

import queue
from multiprocessing.queues import Queue
from typing import Any

import pytest

from tests.processes import drills
from tests.processes.conftest import Spawner

ROUNDS = 20
RACERS = ("racer-1", "racer-2")
FIRST_WAIT_S = 60.0  # includes the children's interpreter start-up
ROUND_WAIT_S = 15.0


def prepare_round(backend: str, target: str, round_no: int) -> None:
    module = drills.MODULES[backend]
    con = module.open_queue(drills.round_target(backend, target, round_no))
    try:
        assert module.enqueue(con, {"id": f"job-{round_no}", "qty": 1}, drills.NOW, 60_000)
    finally:
        con.close()


def collect(results: Queue[Any], round_no: int) -> dict[str, dict[str, Any] | None]:
    """Both racers' answers for ``round_no``, keyed by owner."""
    answers: dict[str, dict[str, Any] | None] = {}
    for _ in RACERS:
        got_round, owner, ticket = results.get(timeout=ROUND_WAIT_S)
        assert got_round == round_no
        answers[owner] = ticket
    return answers


def winner_row(backend: str, target: str, round_no: int) -> tuple[Any, ...]:
    con = drills.open_queue(backend, drills.round_target(backend, target, round_no))
    try:
        row: tuple[Any, ...] = con.execute(
            f"SELECT status, owner, token, attempts FROM jobs WHERE id = {drills.MARK[backend]}",
            (f"job-{round_no}",),
        ).fetchone()
        return row
    finally:
        con.close()


@pytest.mark.parametrize("backend", ["worker", "pgworker"])
def test_exactly_one_of_two_processes_claims_the_job_each_round(
    backend: str, request: pytest.FixtureRequest, spawner: Spawner
) -> None:
    target = str(request.getfixturevalue("tmp_path" if backend == "worker" else "pg_conninfo"))
    barrier = spawner.context.Barrier(len(RACERS) + 1)
    results: Queue[Any] = spawner.context.Queue()
    racers = [
        spawner.start(drills.race_claims, backend, target, owner, ROUNDS, barrier, results)
        for owner in RACERS
    ]
    wins = dict.fromkeys(RACERS, 0)
    for round_no in range(ROUNDS):
        prepare_round(backend, target, round_no)
        barrier.wait(FIRST_WAIT_S if round_no == 0 else ROUND_WAIT_S)  # job ready
        barrier.wait(ROUND_WAIT_S)  # both connected: go
        answers = collect(results, round_no)
        tickets = [ticket for ticket in answers.values() if ticket is not None]
        assert len(tickets) == 1, f"round {round_no}: {answers}"
        (ticket,) = tickets
        assert ticket["id"] == f"job-{round_no}"
        assert (ticket["token"], ticket["attempt"]) == (1, 1)
        assert winner_row(backend, target, round_no) == ("leased", ticket["owner"], 1, 1)
        wins[ticket["owner"]] += 1
    for racer in racers:
        racer.join(ROUND_WAIT_S)
        assert racer.exitcode == 0
    assert sum(wins.values()) == ROUNDS
    try:
        extra = results.get_nowait()
    except queue.Empty:
        extra = None
    assert extra is None, f"unexpected extra answer {extra}"
