"""A courier's rounds in batches: ``claim_many``, deliveries in flight, ``finish_many``,
batches in a pipeline.

``BatchRounds`` is a ``courier.runner.Rounds`` over the calls of one queue
(``QueueCalls``: ``FileRounds`` on a file, ``PgRounds`` on PostgreSQL), whose
connection, turns and time base it uses through their ``call``. The rules it keeps:

1. A batch is up to ``batch`` jobs claimed with one ``claim_many``, handed at once
   to the send, which has up to ``in_flight`` of them in flight, each on a
   kept-alive connection of its own: a send that takes deliveries with ``start``
   (``HttpSends`` to an ``http://`` receiver, and the wrappers that forward it:
   ``courier.delivery``'s rule 5) runs them on its own event loop; any other
   send is called by ``in_flight`` delivery threads, each sending one job at a
   time. The jobs go out in claim order, sent and classified exactly as
   ``run_once`` does it (``worker.classify_send``), outside any transaction.
2. **Batches in a pipeline** (``batch`` > 1): no more than two batches' deliveries
   are ever waiting or in flight, each batch's behind the one before. A round takes
   the oldest batch held (or claims one), and claims ahead: at its start if it
   holds no other, so that the next batch's deliveries queue behind this one's.
   On one connection (a queue file: two writers would only wait for each other)
   the queue's calls stay on the round's thread, one at a time, and that one batch
   ahead is all a round holds. Given a connection of their own for the claims
   (``claims``; ``courier run`` does it on PostgreSQL), the claims ahead run on a
   thread of their own, and a round claims once more as soon as this batch's
   deliveries have all ended, while it finishes them: the batch ahead is then
   being delivered and the new one queues behind it, so the deliveries never wait
   for a claim, and a round costs the larger of one claim, one finish and one
   batch's deliveries, not the sum of any two. Up to ``HELD_ROUNDS`` (two) batches
   are then held for the rounds after this one, never more than the courier's
   stop rules leave rounds for (``later``, ``courier.runner``'s rule 8); the
   round waits for its claims before it returns, and batches held when the
   courier stops are delivered and finished by more rounds (``holding``).
3. Jobs are finished **in groups**, one ``finish_many`` (one commit) for every
   delivery back so far: when the whole batch is back, or earlier once the
   first lease among those waiting has a quarter of the lease left
   (``finish_by``), so that a slow delivery never holds the others past their
   leases; the rest then make a later group. Finishing each as it completes
   would cost a commit every few deliveries, where a group a batch keeps the
   courier's commits at the batch calls' own two a batch, and a crash costs the
   same either way (rule 5). Each item is judged alone at the time of its group:
   a ticket whose lease has ended comes back ``stale`` and changes nothing.
4. A delivery starts only while its lease can cover it: if the claim's time plus
   the time since (the monotonic clock) plus ``timeout_ms`` has reached the
   ticket's ``lease_until`` (a lease cut short by the job's deadline, a batch
   ahead that waited too long, or a courier that was stopped), it is not sent and
   not finished: status ``unsent``, and the job waits for its lease to end. A job
   of a batch claimed ahead waits for the deliveries of the batch before it (rule
   2: at most one), so one thread may make up to ``waits(batch, in_flight)``
   deliveries, each up to the timeout, between a job's claim and the end of its
   own delivery; ``courier run`` refuses settings where those do not fit in the
   lease (``lease_covers``).
5. A crash mid-pipeline leaves each claimed job that was not finished leased until
   its lease ends: up to twice ``batch`` on one connection, up to three times
   ``batch`` with the claims apart (the batch being finished and the two held);
   another courier then claims it and sends it again, which the receiver's inbox
   absorbs.
6. A finish that meets a busy or unreachable queue is tried again with the next
   group, and the last group once more (``LAST_TRIES``; a finish is a
   compare-and-set on the ticket, so trying again is safe); if that fails too, or
   anything else fails, the round raises ``courier.runner.PartlyDone`` with the
   jobs it did finish, and the others wait for their leases (batches held ahead
   stay held, for the next rounds). A delivery that raised something unexpected
   leaves its job leased and, once the others are finished, ends the round the
   same way. A claim ahead that fails holds nothing more: a busy or unreachable
   queue is met again by a later claim, anything else ends the round as
   ``PartlyDone`` once this batch is finished.
"""

from __future__ import annotations

import collections
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import worker
from courier import backend
from courier.backend import Target
from courier.delivery import Cause, Send, can_start
from courier.runner import HELD_ROUNDS, PartlyDone, rounds_for
from courier.transient import is_transient

__all__ = ["MAX_BATCH", "UNSENT", "BatchRounds", "QueueCalls", "batch_rounds_for", "lease_covers"]
__all__ += ["waits"]

T = TypeVar("T")

MAX_BATCH = 1000  # claim_many's limit
UNSENT = "unsent"
GRACE_S = 5.0  # beyond the last lease and timeout, how long a round waits for a delivery
LAST_TRIES = 2  # of the last group's finish, if it meets a busy or unreachable queue


class QueueCalls(Protocol):
    """The calls of one queue that batched rounds make (``FileRounds`` and ``PgRounds``
    are such): ``call(action)`` runs ``action(module, con, now_ms)`` with the queue's
    module (``worker`` or ``pgworker``), its connection and the time on its time base,
    and raises a busy or unreachable queue as ``courier.transient`` says."""

    def now_ms(self) -> int: ...

    def call(self, action: Callable[[Any, Any, int], T]) -> T: ...

    def drained(self) -> bool: ...

    def close(self) -> None: ...


def waits(batch: int, in_flight: int) -> int:
    """How many deliveries, one after another in one of the ``in_flight`` places (a
    connection of the event loop, or a delivery thread), may run between a job's claim
    and the end of its own delivery: one without batches (``batch`` 1); in the
    pipeline (rule 2), the deliveries of a batch claimed ahead start only behind those
    of the one batch before it, so the two batches' ``2 * batch`` deliveries share the
    ``in_flight`` places: ``ceil(2 * batch / in_flight)``."""
    return 1 if batch == 1 else math.ceil(2 * batch / in_flight)


def lease_covers(lease_ms: int, timeout_ms: int, batch: int, in_flight: int) -> bool:
    """True if a batch's last delivery ends while its lease holds, a batch claimed ahead
    included, every delivery taking its whole timeout:
    ``waits(batch, in_flight) * timeout_ms < lease_ms``."""
    return waits(batch, in_flight) * timeout_ms < lease_ms


@dataclass
class _Delivered:
    """One job of a batch once its delivery ended, or was not started (``outcome`` None)."""

    ticket: dict[str, Any]
    outcome: str | None = None
    delay_ms: int = 0
    error: BaseException | None = None


@dataclass
class _Batch:
    """The jobs of one ``claim_many``, their claim's time on the queue's time base, when
    it came back (the monotonic clock), and their deliveries as they end."""

    tickets: list[dict[str, Any]]
    claimed_at: int
    started: float
    delivered: queue.SimpleQueue[_Delivered]


class _Started:
    """One job's delivery handed to a send's ``start`` (``courier.delivery.Delivery``):
    begun only while its lease can cover it (rule 4), ended as ``run_once``
    classifies it, then handed back to the round."""

    def __init__(self, ticket: dict[str, Any], drawn: float, claimed: _Batch, timeout_ms: int):
        self.ticket = ticket
        self.drawn = drawn
        self.claimed = claimed
        self.timeout_ms = timeout_ms

    def begin(self) -> dict[str, Any] | None:
        ticket, claimed = self.ticket, self.claimed
        now_ms = claimed.claimed_at + int((time.monotonic() - claimed.started) * 1000)
        if now_ms + self.timeout_ms < ticket["lease_until"]:
            return {"id": ticket["id"], "qty": ticket["qty"]}
        claimed.delivered.put(_Delivered(ticket))
        return None

    def end(self, outcome: bool | BaseException, cause: Cause) -> None:
        def answer(_: dict[str, Any]) -> bool:
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome

        done = _Delivered(self.ticket)
        try:
            done.outcome, done.delay_ms = worker.classify_send(answer, self.ticket, self.drawn)
        except BaseException as error:  # the round's thread decides; the job stays leased
            done.error = error
        self.claimed.delivered.put(done)


class _Senders:
    """``count`` daemon threads, named ``name``, that run the work handed to them (the
    deliveries, or the claims ahead on a connection of their own), one at a time each.

    Daemon threads: a courier stopped at once (a second Ctrl-C) does not wait for
    the deliveries in flight, whose jobs then wait for their leases.
    """

    def __init__(self, count: int, name: str = "delivery") -> None:
        self._work: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-{n}", daemon=True)
            for n in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def _serve(self) -> None:
        while (job := self._work.get()) is not None:
            job()

    def run(self, job: Callable[[], None]) -> None:
        self._work.put(job)

    def close(self) -> None:
        """Let every thread end once its delivery has."""
        for _ in self._threads:
            self._work.put(None)


class BatchRounds:
    """Rounds of up to ``batch`` jobs with up to ``in_flight`` deliveries at once,
    batches in a pipeline when ``batch`` > 1, on the queue ``rounds`` works
    (``courier.runner.Rounds``; see the module's rules).

    ``timeout_ms`` bounds one delivery (the send's own timeout): a delivery starts
    only while its lease can cover it (rule 4). ``announce``, if given, is called
    with each batch's tickets and the time of their claim (the queue's time base)
    before its deliveries start (``courier run``'s attempt
    log writes their claimed rows, ``AttemptLog.announcing_batches``); it must not
    raise. The ``send`` of each round takes the deliveries with ``start`` if it can
    (rule 1), else it is called from ``in_flight`` threads at once; a batch claimed
    ahead is sent with the ``send`` of the round that claimed it: it must allow that
    (``HttpSends`` does). ``claims``, if given, are the same queue's calls on a
    connection of their own, for the claims ahead (rule 2). ``close`` closes
    ``rounds`` and ``claims`` too.

    Raises:
        ValueError: ``batch`` is not in 1..MAX_BATCH, ``in_flight`` not in
            1..``batch``, or ``timeout_ms`` not a positive int.
    """

    def __init__(
        self,
        rounds: QueueCalls,
        batch: int,
        in_flight: int,
        timeout_ms: int,
        announce: Callable[[list[dict[str, Any]], int], None] | None = None,
        claims: QueueCalls | None = None,
    ) -> None:
        if type(batch) is not int or not 1 <= batch <= MAX_BATCH:
            raise ValueError(f"'batch' must be an int in 1..{MAX_BATCH}, got {batch!r}")
        if type(in_flight) is not int or not 1 <= in_flight <= batch:
            raise ValueError(f"'in_flight' must be an int in 1..batch ({batch}), got {in_flight!r}")
        if type(timeout_ms) is not int or timeout_ms < 1:
            raise ValueError(f"'timeout_ms' must be a positive int, got {timeout_ms!r}")
        self.rounds = rounds
        self.batch = batch
        self.in_flight = in_flight
        self.timeout_ms = timeout_ms
        self.announce = announce
        self.claims = rounds if claims is None else claims
        self._senders: _Senders | None = None
        self._claimer: _Senders | None = None  # the thread of the claims ahead, if apart
        self._held: collections.deque[_Batch] = collections.deque()  # claimed, for the next rounds

    def now_ms(self) -> int:
        """The time on the queue's time base."""
        return self.rounds.now_ms()

    def drained(self) -> bool:
        """True if no job is pending or leased."""
        return self.rounds.drained()

    def holding(self) -> bool:
        """True if batches claimed ahead wait for the next rounds (rule 2)."""
        return bool(self._held)

    def close(self) -> None:
        """Let the delivery threads end; close the queue's rounds. Batches still held
        ahead are left to their leases (rule 5)."""
        self._held.clear()
        if self._senders is not None:
            self._senders.close()
            self._senders = None
        self.rounds.close()
        if self._claimer is not None:
            self._claimer.close()
            self._claimer = None
        if self.claims is not self.rounds:
            self.claims.close()

    def round(
        self,
        owner: str,
        send: Send,
        jitter: Callable[[], float],
        lease_ms: int,
        later: int | None = None,
    ) -> list[dict[str, Any]]:
        """Take the oldest batch held (or claim one), claim ahead as rule 2 says unless
        ``batch`` is 1 (at most ``later`` batches held for the rounds after this one,
        ``courier.runner``'s rule 8), deliver this batch and finish it in groups: the
        ``run_once``-shaped results in the order they were finished (``[]`` if nothing
        was claimable).

        Raises:
            PartlyDone: a finish failed, a delivery raised something unexpected (its
                job stays leased), or a claim ahead failed with anything but a busy
                or unreachable queue, after the results it holds were finished.
            Anything this round's own claim raises (a busy or unreachable queue
            included), when no batch was held.
        """
        current = self._held.popleft() if self._held else None
        if current is None:
            current = self._claim(owner, send, jitter, lease_ms)
            if current is None:
                return []
        apart = self.claims is not self.rounds
        room = 0 if self.batch == 1 else HELD_ROUNDS if apart else 1
        room = room if later is None else min(room, later)
        ahead: queue.SimpleQueue[_Batch | BaseException | None] = queue.SimpleQueue()
        claims_made = 0

        def claim_ahead() -> None:
            try:
                ahead.put(self._claim(owner, send, jitter, lease_ms, self.claims))
            except Exception as error:  # this batch is finished first, whatever it was
                ahead.put(error)

        def claim_ahead_apart() -> None:  # on the claims' thread, nothing may go unseen
            try:
                claim_ahead()
            except BaseException as error:  # raised on the round's thread, once finished
                ahead.put(error)

        def claim_one_ahead() -> None:
            nonlocal claims_made
            claims_made += 1
            if not apart:
                claim_ahead()
                return
            if self._claimer is None:
                self._claimer = _Senders(1, "claim-ahead")
            self._claimer.run(claim_ahead_apart)  # while this batch is finished (rule 2)

        def all_back() -> None:
            """This batch's deliveries have all ended: another claim ahead, if room."""
            if len(self._held) + claims_made < room:
                claim_one_ahead()

        if room and not self._held:
            claim_one_ahead()
        until = current.started + (lease_ms + self.timeout_ms) / 1000 + GRACE_S

        def finish_by(first_lease_until: int) -> float:
            """When those waiting, whose first lease ends at ``first_lease_until``, must be
            finished, on the monotonic clock (rule 3)."""
            first = first_lease_until - current.claimed_at - lease_ms // 4
            return current.started + float(first) / 1000

        count = len(current.tickets)
        failed_ahead: Exception | None = None
        try:
            results = self._finish_in_groups(current.delivered, count, until, finish_by, all_back)
        finally:
            stopped: BaseException | None = None
            for _ in range(claims_made):  # each back once its claim is, in claim order
                claimed = ahead.get()
                if isinstance(claimed, _Batch):
                    self._held.append(claimed)
                elif isinstance(claimed, Exception):
                    failed_ahead = failed_ahead or claimed
                elif claimed is not None:
                    stopped = stopped or claimed
            if stopped is not None:
                raise stopped
        if failed_ahead is not None and not is_transient(failed_ahead):
            raise PartlyDone(failed_ahead, results)
        return results

    def _claim(
        self,
        owner: str,
        send: Send,
        jitter: Callable[[], float],
        lease_ms: int,
        calls: QueueCalls | None = None,
    ) -> _Batch | None:
        """Claim a batch and hand its deliveries over (to the send's ``start``, or to the
        delivery threads), behind any already handed out; ``None`` if nothing was
        claimable."""

        def claim(module: Any, con: Any, now_ms: int) -> tuple[int, list[dict[str, Any]]]:
            return now_ms, module.claim_many(con, owner, now_ms, self.batch, lease_ms)

        claimed_at, tickets = (calls or self.rounds).call(claim)
        if not tickets:
            return None
        claimed = _Batch(tickets, claimed_at, time.monotonic(), queue.SimpleQueue())
        if self.announce is not None:
            self.announce(tickets, claimed_at)
        if can_start(send):
            for ticket in tickets:
                send.start(_Started(ticket, jitter(), claimed, self.timeout_ms))  # type: ignore[attr-defined]
            return claimed
        if self._senders is None:
            self._senders = _Senders(self.in_flight)
        for ticket in tickets:
            self._senders.run(self._delivery(send, ticket, jitter(), claimed))
        return claimed

    def _delivery(
        self, send: Send, ticket: dict[str, Any], drawn: float, claimed: _Batch
    ) -> Callable[[], None]:
        """One job's delivery, for a delivery thread: sent if its lease can cover it
        (rule 4), classified as ``run_once`` classifies it, then handed back."""

        def deliver() -> None:
            done = _Delivered(ticket)
            try:
                now_ms = claimed.claimed_at + int((time.monotonic() - claimed.started) * 1000)
                if now_ms + self.timeout_ms < ticket["lease_until"]:
                    done.outcome, done.delay_ms = worker.classify_send(send, ticket, drawn)
            except BaseException as error:  # the round's thread decides; the job stays leased
                done.error = error
            claimed.delivered.put(done)

        return deliver

    def _finish_in_groups(
        self,
        delivered: queue.SimpleQueue[_Delivered],
        count: int,
        until: float,
        finish_by: Callable[[int], float],
        all_back: Callable[[], None],
    ) -> list[dict[str, Any]]:
        """Take the ``count`` deliveries as they come back and finish them in groups
        (rule 3); ``until`` bounds the wait for all of them, ``finish_by`` says by
        when a group whose first lease ends at a given time must be finished, and
        ``all_back`` is called once they have all ended, before the last group's
        finish (rule 2)."""
        results: list[dict[str, Any]] = []
        waiting: list[_Delivered] = []  # back, not finished yet
        first_lease_until = 0  # the earliest lease among those waiting, if any wait
        unexpected: BaseException | None = None
        failure: Exception | None = None  # of the last finish, whose group still waits
        remaining = count
        overdue = False  # the wait went past ``until`` once (see below)
        # Each pass takes a delivery, or finishes those waiting once (then no early
        # finish is tried again before another delivery is back): at most 2 a delivery,
        # and one more for the last chance past ``until``.
        for _ in range(2 * count + 1):
            if not remaining:
                break
            early = bool(waiting) and failure is None
            bound = min(until, finish_by(first_lease_until)) if early else until
            try:
                done = delivered.get(timeout=max(0.0, bound - time.monotonic()))
            except queue.Empty:
                if time.monotonic() >= until:
                    if not overdue:
                        # A process stopped (SIGSTOP, a suspended host) wakes past
                        # ``until`` before its delivery threads, whose deliveries then
                        # end at once (their own deadlines passed): one last wait.
                        overdue, until = True, time.monotonic() + GRACE_S
                        continue
                    failure = self._finish(waiting, results) if waiting else None
                    error = TimeoutError(f"{remaining} of {count} deliveries still running")
                    raise PartlyDone(error, results) from None
                failure = self._finish(waiting, results)  # a slow one must not hold these
                continue
            remaining -= 1
            failure = None  # the group waiting is tried again with the next
            if done.error is not None:
                unexpected = unexpected or done.error
            elif done.outcome is None:
                ticket = done.ticket
                results.append({"id": ticket["id"], "token": ticket["token"], "status": UNSENT})
            else:
                lease_until = done.ticket["lease_until"]
                if not waiting or lease_until < first_lease_until:
                    first_lease_until = lease_until
                waiting.append(done)
        if not remaining:
            all_back()
        for _ in range(LAST_TRIES):  # a lost connection is made again for the next try
            if waiting:
                failure = self._finish(waiting, results)
        if failure is not None:
            raise PartlyDone(failure, results)
        if unexpected is not None:
            if not isinstance(unexpected, Exception):
                raise unexpected
            raise PartlyDone(unexpected, results)
        return results

    def _finish(self, waiting: list[_Delivered], results: list[dict[str, Any]]) -> Exception | None:
        """Finish ``waiting`` in one ``finish_many`` and move them to ``results``; a
        busy or unreachable queue keeps them waiting (returned, to raise if it is
        the last try); anything else is raised as ``PartlyDone``."""
        items = [
            {"ticket": done.ticket, "outcome": done.outcome, "delay_ms": done.delay_ms}
            for done in waiting
        ]
        try:
            statuses = self.rounds.call(
                lambda module, con, now_ms: module.finish_many(con, items, now_ms)
            )
        except Exception as error:
            if is_transient(error):
                return error
            raise PartlyDone(error, results) from error
        for done, status in zip(waiting, statuses, strict=True):
            ticket = done.ticket
            results.append(
                {"id": ticket["id"], "token": ticket["token"], "status": status or "stale"}
            )
        waiting.clear()
        return None


def batch_rounds_for(
    target: Target,
    batch: int,
    in_flight: int,
    timeout_ms: int,
    announce: Callable[[list[dict[str, Any]], int], None] | None = None,
) -> BatchRounds:
    """The batched rounds ``courier run --batch`` makes on the queue at ``target``
    (``courier.runner.rounds_for``): on PostgreSQL with a connection of their own for
    the claims ahead (rule 2), on a queue file on its one connection.

    Raises:
        ValueError: as ``BatchRounds``.
    """
    claims = rounds_for(target) if backend.is_conninfo(target) else None
    return BatchRounds(rounds_for(target), batch, in_flight, timeout_ms, announce, claims)
