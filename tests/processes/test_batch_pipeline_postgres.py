"""The batched courier on PostgreSQL (``courier.batch_rounds``, rule 2; ``courier.pg_rounds``).

On PostgreSQL the claims ahead go on a connection of their own, so the next batch's
``claim_many`` runs while this batch's ``finish_many`` does; and a courier's time is the
server's clock read at most ``CLOCK_READ_S`` ago and carried forward on the monotonic
clock, never later than the server's own. Real server, real receiver over loopback HTTP;
every wait is for a state, and bounded.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest

import pgworker
import worker
from courier import attempts, backend, queueview
from courier.batch_rounds import BatchRounds, batch_rounds_for
from courier.delivery import HttpSends
from courier.pg_rounds import CLOCK_READ_S, PgRounds
from courier.procs import Children, courier_command
from courier.receiver import Receiver
from courier.runner import CourierReport, PartlyDone, run_courier
from courier.stop_rules import StopRules
from tests.processes.test_batches import KillSenderAfter, effects_by_id

T = TypeVar("T")
WAIT_S = 10.0
LEASE_MS, TIMEOUT_MS = 30_000, 750


class _Meeting:
    """Two events that a claim ahead and a finish set on entering, each waiting
    (bounded) for the other's: both come back True only if the two were in flight at
    once. Only the first of each meets; later calls pass."""

    def __init__(self) -> None:
        self.claim_in, self.finish_in = threading.Event(), threading.Event()
        self.met: dict[str, bool] = {}

    def enter(self, mine: threading.Event, other: threading.Event, name: str) -> None:
        if name not in self.met:
            mine.set()
            self.met[name] = other.wait(WAIT_S)


class _Module:
    """``pgworker`` whose ``finish_many`` meets the claim ahead first."""

    def __init__(self, meeting: _Meeting) -> None:
        self.meeting = meeting

    def claim_many(self, *args: Any) -> Any:
        return pgworker.claim_many(*args)

    def finish_many(self, *args: Any) -> Any:
        self.meeting.enter(self.meeting.finish_in, self.meeting.claim_in, "finish")
        return pgworker.finish_many(*args)


class _Calls:
    """``PgRounds`` whose calls go through ``_Module``; ``ahead``: every call is a claim
    ahead, which meets the finish first."""

    def __init__(self, conninfo: str, meeting: _Meeting, ahead: bool) -> None:
        self.rounds = PgRounds(conninfo)
        self.meeting, self.ahead = meeting, ahead

    def now_ms(self) -> int:
        return self.rounds.now_ms()

    def call(self, action: Callable[[Any, Any, int], T]) -> T:
        if self.ahead:
            self.meeting.enter(self.meeting.claim_in, self.meeting.finish_in, "claim ahead")
        module = _Module(self.meeting)
        return self.rounds.call(lambda _, con, now_ms: action(module, con, now_ms))

    def drained(self) -> bool:
        return self.rounds.drained()

    def close(self) -> None:
        self.rounds.close()


def _run(
    conninfo: str,
    rounds: BatchRounds,
    send: Any,
    rules: StopRules,
    stop: threading.Event | None = None,
) -> CourierReport:
    """``run_courier`` as c1 over ``rounds`` under ``rules``; ``rounds`` closed after."""
    try:
        return run_courier(
            conninfo, "c1", send, lease_ms=LEASE_MS, stop_rules=rules, stop=stop, rounds=rounds
        )
    finally:
        rounds.close()


def _enqueued(conninfo: str, count: int) -> list[str]:
    ids = [f"j{n:02d}" for n in range(1, count + 1)]
    with psycopg.connect(conninfo, autocommit=True) as con:
        now = backend.server_clock_ms(con)
        events = [{"id": job_id, "qty": 1} for job_id in ids]
        assert pgworker.enqueue_many(con, events, now, 60_000) == [True] * count
    return ids


def test_the_claim_ahead_runs_on_its_own_connection_while_this_batch_is_finished(
    pg_conninfo: str, receiver: Receiver
) -> None:
    """The first finish waits until the claim ahead has begun, and the claim ahead
    until the finish has: calls made one after another on one connection would
    never get past either wait."""
    ids = _enqueued(pg_conninfo, 12)
    meeting = _Meeting()
    rounds = BatchRounds(
        _Calls(pg_conninfo, meeting, ahead=False),
        4,
        2,
        TIMEOUT_MS,
        claims=_Calls(pg_conninfo, meeting, ahead=True),
    )
    rules = StopRules(max_runs=100, max_seconds=4 * WAIT_S, until_drained=True)
    with HttpSends(receiver.url, "c1", TIMEOUT_MS, 2) as send:
        report = _run(pg_conninfo, rounds, send, rules)
    assert meeting.met == {"claim ahead": True, "finish": True}
    assert report.stop_reason == "drained"
    assert sorted(r["id"] for r in report.results if r["status"] == "done") == ids
    assert effects_by_id(receiver.inbox.path) == dict.fromkeys(ids, 1)


def test_the_carried_clock_is_never_later_than_the_servers_and_is_read_once_a_second(
    pg_conninfo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []
    read = backend.server_clock_ms

    def counted(con: Any) -> int:
        reads.append(read(con))
        return reads[-1]

    monkeypatch.setattr(backend, "server_clock_ms", counted)  # what pg_rounds calls
    rounds = PgRounds(pg_conninfo)
    seen: list[int] = []
    began = time.monotonic()
    try:
        with psycopg.connect(pg_conninfo, autocommit=True) as other:
            while time.monotonic() - began < 2.5 * CLOCK_READ_S:  # bounded in time
                carried = rounds.now_ms()
                server = read(other)
                assert carried <= server, (carried, server)
                seen.append(carried)
                time.sleep(0.005)
            assert server - carried <= 50, "carried forward, it kept up with the server"
        assert seen == sorted(seen), "it never went back"
        assert len(reads) == 3, reads  # at 0, 1 and 2 seconds
        rounds.close()
        rounds.now_ms()
        assert len(reads) == 4, "a new connection reads the clock anew"
    finally:
        rounds.close()


def test_courier_runs_rounds_make_their_claims_apart_on_postgresql_only(
    pg_conninfo: str, tmp_path: Path
) -> None:
    on_postgres = batch_rounds_for(pg_conninfo, 4, 2, TIMEOUT_MS)
    queue = tmp_path / "queue.sqlite"
    worker.open_queue(queue).close()
    on_file = batch_rounds_for(queue, 4, 2, TIMEOUT_MS)
    try:
        assert (
            isinstance(on_postgres.claims, PgRounds)
            and on_postgres.claims is not on_postgres.rounds
        )
        assert on_file.claims is on_file.rounds  # two writers of one file only wait for each other
    finally:
        on_postgres.close()
        on_file.close()


def _statuses(conninfo: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in queueview.read_queue(conninfo)["jobs"]:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    return counts


def test_with_its_claims_apart_a_round_holds_two_batches_and_no_more_than_rounds_left(
    pg_conninfo: str,
) -> None:
    """Rule 2: the first round claims one batch ahead at its start and a second once its
    own deliveries have ended; a round told one round follows (``later=1``) claims
    nothing more, and the last (``later=0``) holds nothing after it."""
    ids = _enqueued(pg_conninfo, 20)
    rounds = BatchRounds(PgRounds(pg_conninfo), 4, 2, TIMEOUT_MS, claims=PgRounds(pg_conninfo))

    def done(results: list[dict[str, Any]]) -> list[str]:
        return sorted(r["id"] for r in results if r["status"] == "done")

    try:
        assert done(rounds.round("c1", lambda event: True, lambda: 0.5, LEASE_MS)) == ids[0:4]
        assert rounds.holding() and _statuses(pg_conninfo) == {
            "done": 4,
            "leased": 8,
            "pending": 8,
        }
        leased = {
            row["id"]
            for row in queueview.read_queue(pg_conninfo)["jobs"]
            if row["status"] == "leased"
        }
        assert leased == set(ids[4:12]), "the two batches after it, in claim order"
        assert done(rounds.round("c1", lambda event: True, lambda: 0.5, LEASE_MS, 1)) == ids[4:8]
        assert _statuses(pg_conninfo) == {"done": 8, "leased": 4, "pending": 8}
        assert done(rounds.round("c1", lambda event: True, lambda: 0.5, LEASE_MS, 0)) == ids[8:12]
        assert not rounds.holding()
        assert _statuses(pg_conninfo) == {"done": 12, "pending": 8}
    finally:
        rounds.close()


def test_max_runs_counts_rounds_exactly_with_two_batches_held_on_postgresql(
    pg_conninfo: str, receiver: Receiver
) -> None:
    """``--max-runs 4``: four rounds, four batches claimed and finished, none left
    leased (the rounds before the last two hold only what the rounds left finish)."""
    ids = _enqueued(pg_conninfo, 28)
    rounds = batch_rounds_for(pg_conninfo, 4, 2, TIMEOUT_MS)
    rules = StopRules(max_runs=4, max_seconds=4 * WAIT_S)
    with HttpSends(receiver.url, "c1", TIMEOUT_MS, 2) as send:
        report = _run(pg_conninfo, rounds, send, rules)
    assert (report.runs, report.stop_reason) == (4, "max-runs")
    assert sorted(r["id"] for r in report.results if r["status"] == "done") == ids[:16]
    assert _statuses(pg_conninfo) == {"done": 16, "pending": 12}
    assert effects_by_id(receiver.inbox.path) == dict.fromkeys(ids[:16], 1)


def test_a_stop_after_the_first_round_delivers_both_batches_held(
    pg_conninfo: str, receiver: Receiver
) -> None:
    """A stop (the event SIGTERM sets) during the first round: two more rounds, each
    with nothing later, deliver and finish the two batches it held, and nothing stays
    leased."""
    ids = _enqueued(pg_conninfo, 20)
    rounds = batch_rounds_for(pg_conninfo, 4, 2, TIMEOUT_MS)
    stop = threading.Event()
    http = HttpSends(receiver.url, "c1", TIMEOUT_MS, 2)

    def send(event: dict[str, Any]) -> bool:
        stop.set()  # from the first delivery on: the first round is the only one that claims
        return http(event)

    with http:
        report = _run(
            pg_conninfo, rounds, send, StopRules(max_runs=100, max_seconds=4 * WAIT_S), stop
        )
    assert (report.runs, report.stop_reason) == (3, "stopped")
    assert sorted(r["id"] for r in report.results if r["status"] == "done") == ids[:12]
    assert _statuses(pg_conninfo) == {"done": 12, "pending": 8}
    assert effects_by_id(receiver.inbox.path) == dict.fromkeys(ids[:12], 1)


# --- `courier run --batch` as a process on PostgreSQL ------------------------------------


def _run_argv(conninfo: str, url: str, owner: str, *options: str) -> list[str]:
    argv = courier_command("run", conninfo, "--url", url, "--owner", owner, *options)
    return [*argv, "--max-seconds", str(4 * WAIT_S)]


def _rows(conninfo: str) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in queueview.read_queue(conninfo)["jobs"]}


def test_a_batched_courier_process_delivers_and_records_each_job_once(
    tmp_path: Path, pg_conninfo: str, receiver: Receiver, children: Children
) -> None:
    """Five batches of 4, each claimed ahead on the second connection (its claimed rows
    written by the claim's thread) while the one before is finished."""
    ids = _enqueued(pg_conninfo, 20)
    log = tmp_path / "c1.log"
    options = ("--batch", "4", "--in-flight", "2", "--until-drained")
    courier = children.start(_run_argv(pg_conninfo, receiver.url, "c1", *options), log)
    assert courier.wait(timeout=4 * WAIT_S + 10) == 0, log.read_text()
    text = log.read_text()
    assert "batches of 4 with 2 in flight" in text and "could not record" not in text, text
    assert {(row["status"], row["token"]) for row in _rows(pg_conninfo).values()} == {("done", 1)}
    assert effects_by_id(receiver.inbox.path) == dict.fromkeys(ids, 1)
    for job_id in ids:
        rows = [(row["outcome"], row["token"]) for row in attempts.attempts_of(pg_conninfo, job_id)]
        assert rows == [(attempts.CLAIMED, 1), ("ok", 1)], (job_id, rows)


@pytest.mark.parametrize(
    "kill_after, in_flight, most_leased",
    [(3, slice(0, 4), 8), (6, slice(4, 8), 12)],
    ids=["first-batch", "second-batch"],
)
def test_a_batched_courier_killed_mid_batch_on_postgresql_leaves_its_batches_leased(
    tmp_path: Path,
    pg_conninfo: str,
    children: Children,
    kill_after: int,
    in_flight: slice,
    most_leased: int,
) -> None:
    """Killed right after the receiver committed its ``kill_after``-th delivery: the
    batch in flight and those claimed ahead stay leased until their leases end, then a
    second courier delivers them again and the inbox absorbs the re-sends. In the
    first batch, one batch at most is held ahead (the second is claimed only once the
    first batch's deliveries have all ended); in the second, the batch claimed so
    (and the first batch too, if its finish had not committed: the crash costs up to
    three times the batch)."""
    ids = _enqueued(pg_conninfo, 20)
    killer = KillSenderAfter(kill_after)
    options = ("--batch", "4", "--in-flight", "2", "--lease-ms", "3000")
    with Receiver(tmp_path / "inbox.sqlite", interference=killer) as receiver:
        log1 = tmp_path / "c1.log"
        c1 = children.start(_run_argv(pg_conninfo, receiver.url, "c1", *options), log1)
        killer.pid = c1.pid
        assert c1.wait(timeout=WAIT_S) == -signal.SIGKILL, log1.read_text()
        rows = _rows(pg_conninfo)
        leased = {job_id for job_id, row in rows.items() if row["status"] == "leased"}
        assert {(rows[j]["owner"], rows[j]["token"]) for j in leased} == {("c1", 1)}
        assert set(ids[in_flight]) <= leased, "the batch in flight"
        assert 4 <= len(leased) <= most_leased, leased
        applied = effects_by_id(receiver.inbox.path)
        assert kill_after <= len(applied) <= kill_after + 1
        assert set(applied) - leased <= set(ids[: in_flight.start]), "done before the kill"
        killer.count = 0  # kills no more
        log2 = tmp_path / "c2.log"
        c2 = children.start(
            _run_argv(pg_conninfo, receiver.url, "c2", *options, "--until-drained"), log2
        )
        assert c2.wait(timeout=2 * WAIT_S) == 0, log2.read_text()
        summary = receiver.inbox.summary()
    rows = _rows(pg_conninfo)
    assert {row["status"] for row in rows.values()} == {"done"}
    assert {rows[j]["token"] for j in leased} == {2}, "taken over once its lease ended"
    assert effects_by_id(tmp_path / "inbox.sqlite") == dict.fromkeys(ids, 1)
    by_id = {row["id"]: row for row in summary["rows"]}
    resent = set(applied) & leased
    assert resent and all(by_id[job_id]["requests"] == 2 for job_id in resent), "absorbed"


class _FailingClaims:
    """The claims' calls on a connection of their own, each raising ``error`` instead."""

    def __init__(self, conninfo: str, error: BaseException) -> None:
        self.rounds = PgRounds(conninfo)
        self.error = error

    def now_ms(self) -> int:
        return self.rounds.now_ms()

    def call(self, action: Callable[[Any, Any, int], T]) -> T:
        raise self.error

    def drained(self) -> bool:
        return self.rounds.drained()

    def close(self) -> None:
        self.rounds.close()


@pytest.mark.parametrize(
    "error, raised",
    [
        (psycopg.OperationalError("the server went away"), None),  # met again next round
        (ValueError("not a queue call's error"), PartlyDone),
        (SystemExit(3), SystemExit),
    ],
    ids=["transient", "unexpected", "base-exception"],
)
def test_a_claim_ahead_that_fails_on_its_own_thread_is_handled_on_the_rounds(
    pg_conninfo: str, error: BaseException, raised: type[BaseException] | None
) -> None:
    """This batch is finished whatever the claim ahead met; a busy or unreachable queue
    holds nothing for the next round, anything else ends the round as ``PartlyDone``
    once finished, and what is not an ``Exception`` is raised on the round's thread,
    never left behind on the claims' (where the round would wait for it forever)."""
    ids = _enqueued(pg_conninfo, 8)
    rounds = BatchRounds(
        PgRounds(pg_conninfo), 4, 2, TIMEOUT_MS, claims=_FailingClaims(pg_conninfo, error)
    )
    ended: list[Any] = []

    def one_round() -> None:
        try:
            ended.append(rounds.round("c1", lambda event: True, lambda: 0.5, LEASE_MS))
        except BaseException as got:
            ended.append(got)

    try:
        runner = threading.Thread(target=one_round, daemon=True)
        runner.start()
        runner.join(WAIT_S)
        assert not runner.is_alive(), "the round is still waiting for its claim ahead"
    finally:
        rounds.close()
    (outcome,) = ended
    if raised is None:
        assert [result["status"] for result in outcome] == ["done"] * 4
    else:
        assert type(outcome) is raised, outcome
    if raised is PartlyDone:
        assert outcome.error is error
        assert [result["status"] for result in outcome.results] == ["done"] * 4
    assert not rounds.holding()
    rows = _rows(pg_conninfo)
    assert [rows[job_id]["status"] for job_id in ids] == ["done"] * 4 + ["pending"] * 4
