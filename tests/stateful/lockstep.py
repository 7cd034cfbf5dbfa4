"""worker.py and the model in lockstep: every step runs on both and must agree.

Each rule is one API verb. It calls ``worker.py`` on a real SQLite file and the
``QueueModel`` with the same arguments and asserts that both return the same
value (or raise the same exception type) and call the same fault hooks in the
same order. The batch operations of ``docs/batches.md`` (``enqueue_many``,
``claim_many``, ``finish_many``) have their rules too, drawn from the same ids,
owners, leases, tickets and delays as the single calls. After every step the
invariant ``promises_hold`` compares every row of both tables and checks the
queue's promises that hold whatever the model says: no open transaction, tokens
never go down, at most one live ticket per job, and a ``done`` job never changes
again.

When a step disagrees, hypothesis shrinks the run to a short program of rule
calls (``tickets_0 = state.claim(...)``); ``docs/debugging.md`` shows how to
read and replay one.

Few rules, on purpose: hypothesis draws each step's rule from all of them (and
replays that draw for every rule when swarm testing has switched many off), so
each rule added slows every step of every shrink. Faults are an argument of the
verbs that take a hook (``fail_at=None``: no fault), ``run_file`` an argument of
``run_once`` (``verb``), and odd arguments two rules, not one per function.

What the rules draw (ids, durations, faults, sends, odd arguments) is in
``tests/stateful/strategies.py``, how a queue is made and read in ``tests/stores``
(the one adapter of every suite), and how one call is run on both sides and its
results compared in ``tests/stateful/outcomes.py``.

The machine is parametrized by store (``make_store``): ``QueueLockstep`` drives
``worker.py`` on a SQLite file, ``PostgresLockstep`` the same rules and draws on
``pgworker.py`` and a schema of a PostgreSQL database (``tests/contract/test_lockstep.py``
runs it, with fewer examples). The rules about what only one kind of store has (a
path, a file, a ``sqlite3.Connection``) judge the other's counterpart: a conninfo, a
database without the queue, a ``psycopg.Connection``. Rows are compared as the store
makes them comparable (``Store.comparable_rows``): a PostgreSQL sequence is not rolled
back, so after a redrive rolled back by its hook the next audit row's seq leaves a gap,
and there seq numbers are compared by their order.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import functools
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import psycopg
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)
from psycopg import conninfo as libpq

import model
import pgworker
import worker
from tests.divergence import (
    abbreviated,
    listed,
    outcome_text,
    result_divergence,
    rows_divergence,
    short_repr,
    value_differences,
)
from tests.stateful.outcomes import (
    NO_QUEUE_FILE,
    OPEN_TRANSACTION,
    FaultAt,
    Result,
    ScriptedClock,
    ScriptedSend,
    call_text,
    explain,
    outcome_of,
    refusal_of_path,
    summary_of,
    supplied,
)
from tests.stateful.strategies import (
    ANY_JITTERS,
    AROUND,
    AS_PATHLIKE,
    ATTEMPTS,
    BASES,
    BOUNDARY,
    BUDGETS,
    CAPS_ABOVE_BASE,
    CLOCK_STEPS,
    DB_FUNCTION,
    DEFAULT_LEASE_MS,
    DELAYS,
    EVENTS,
    FAULTS,
    FIRST_JOBS,
    ITEM_DELAYS,
    JITTERS,
    JOB_ID,
    LATER,
    LEASES,
    LIMITS,
    MAX_BATCH_ITEMS,
    MAX_NOW,
    NO_QUEUE_PLACES,
    NOT_A_QUEUE_PATHS,
    NOTES,
    ODD_BATCH_CALLS,
    ODD_CONNECTIONS,
    ODD_SINGLE_CALLS,
    OUTCOME,
    OWNER,
    PLACEHOLDER_TICKET,
    QTYS,
    RUN_VERBS,
    SEND,
    TICKET_COLUMNS,
    TICKET_FIELD,
    TTLS,
    VALID_BATCH_SIZE,
    calls_with,
    forged,
    generic,
    place,
)
from tests.stores import Store
from tests.stores.postgres import PostgresStore
from tests.stores.sqlite import SQLiteStore
from tests.support import JOB_COLUMNS

# A file on tmpfs is still a real SQLite file, but its fsyncs cost nothing: the
# lockstep machine measures logic, not the disk (the benchmarks measure the disk).
SCRATCH = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


RULE_NAMES: list[str] = []


def counted(function: Callable[..., Any]) -> Callable[..., Any]:
    """Count each run of a rule, for the fuzz campaign's coverage report."""
    RULE_NAMES.append(function.__name__)

    @functools.wraps(function)
    def run(self: QueueLockstep, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # a failure's traceback starts at the rule
        type(self).rules_run[function.__name__] += 1
        return function(self, *args, **kwargs)

    return run


# Steps per example come from the profile (tests/profiles.py): short programs in
# ci and dev, so that a failure shrinks in seconds; longer ones for mutation runs.
@settings(deadline=None)
class QueueLockstep(RuleBasedStateMachine):
    """Drive worker.py (on a real file) and model.QueueModel with the same calls."""

    tickets = Bundle("tickets")
    rules_run: ClassVar[Counter[str]] = Counter()  # for the fuzz campaign's coverage report

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix="lockstep-", dir=SCRATCH)
        self.store = self.make_store(self.folder)
        self.queue = self.store.module()
        try:
            self.path = self.store.fresh("lockstep")  # a file path or a conninfo
            self.con = self.queue.open_queue(self.path)
            self.store.assert_configured(self.con)
            self.elsewhere = self.queue.open_queue(self.path)  # another worker's connection
        except BaseException:  # no teardown follows a failed __init__
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        self.model = model.QueueModel()
        self.now = 0
        self.issued: list[dict[str, Any]] = []
        self.live: list[dict[str, Any]] = []  # see at_most_one_live_ticket
        self.highest_token: dict[str, int] = {}
        self.finished: dict[str, dict[str, Any]] = {}

    def make_store(self, folder: str) -> Store:
        """Where this machine's queues live: files in ``folder``."""
        return SQLiteStore(folder)

    def teardown(self) -> None:
        try:
            self.con.close()
            self.elsewhere.close()
            self.store.remove(self.path)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    # --- helpers ---------------------------------------------------------------

    def both(
        self,
        verb: str,
        real: Callable[[], Any],
        spec: Callable[[], Any],
        label: str | None = None,
    ) -> Result:
        """Run one call on each side; both must return or raise the same.

        ``label`` names the call in the statistics (the ``verb`` by default). The note
        says what both did, or what each did; the assertion's first line names the
        difference (``finish returned 'done' on worker.py, False on the model``).
        """
        __tracebackhide__ = True
        got, expected = outcome_of(real), outcome_of(spec)
        side = self.store.label
        if got == expected:
            explain(f"{verb}: both {outcome_text(got)}")
        else:
            explain(f"{verb}: {side} {outcome_text(got)}; the model {outcome_text(expected)}")
        self.count(f"{label or verb} -> {summary_of(expected)}")
        assert got == expected, result_divergence(verb, got, expected, side)
        return got

    @staticmethod
    def count(label: str) -> None:
        """Count ``label`` for ``--hypothesis-show-statistics`` (nothing outside hypothesis)."""
        with contextlib.suppress(InvalidArgument):
            event(label)

    def fault_hooks(self, fail_at: str | None) -> tuple[FaultAt, FaultAt]:
        """A hook for each side, failing at the same point, each seeing its own rows."""
        real = FaultAt(fail_at, lambda: self.store.comparable_rows(self.con))
        return real, FaultAt(fail_at, self.model.rows)

    def same_hooks(self, verb: str, real: FaultAt, spec: FaultAt) -> None:
        """Both sides called the same hooks, in the same order, each seeing the same rows."""
        __tracebackhide__ = True
        side = self.store.label
        real_points = [point for point, _ in real.points]
        spec_points = [point for point, _ in spec.points]
        assert real_points == spec_points, (
            f"{verb} called the hooks {real_points} on {side}, {spec_points} on the model"
        )
        for (point, real_rows), (_, spec_rows) in zip(real.points, spec.points, strict=True):
            assert real_rows == spec_rows, (
                f"{verb} at {point}: {rows_divergence(real_rows, spec_rows, side)}"
            )

    def row(self, job_id: str) -> dict[str, Any] | None:
        for values in self.model.rows()["jobs"]:
            if values[1] == job_id:
                return dict(zip(JOB_COLUMNS, values, strict=True))
        return None

    def delay_for(self, aim: int | str | None, ticket: dict[str, Any]) -> int | None:
        """A number, None (the default), or the delay landing on or just before the deadline."""
        if aim is None or isinstance(aim, int):
            return aim
        row = self.row(ticket["id"])
        deadline = row["deadline"] if row is not None else self.now
        delay = deadline - self.now - (1 if aim == "before_deadline" else 0)
        return min(max(delay, 0), 60000)

    # --- rules: the API verbs --------------------------------------------------

    @initialize(jobs=FIRST_JOBS)
    def enqueue_first(self, jobs: list[tuple[str, int, int, int | None]]) -> None:
        """Start every run with a few jobs, so that claims have something to take."""
        for job_id, qty, ttl_ms, max_attempts in jobs:
            self.enqueue(job_id, qty, ttl_ms, max_attempts)

    @rule(job_id=JOB_ID, qty=QTYS, ttl_ms=TTLS, max_attempts=BUDGETS)
    @counted
    def enqueue(self, job_id: str, qty: int, ttl_ms: int, max_attempts: int | None) -> None:
        event = {"id": job_id, "qty": qty}
        budget = supplied(max_attempts=max_attempts)
        self.both(
            "enqueue",
            lambda: self.queue.enqueue(self.con, event, self.now, ttl_ms, **budget),
            lambda: self.model.enqueue(event, self.now, ttl_ms, **budget),
        )
        assert event == {"id": job_id, "qty": qty}, f"enqueue mutated its event: {event}"

    @rule(target=tickets, owner=OWNER, lease_ms=LEASES, fail_at=FAULTS)
    @counted
    def claim(self, owner: str, lease_ms: int | None, fail_at: str | None = None) -> Any:
        """Claim on both sides; keep the ticket in the bundle if one was issued."""
        real_fault, spec_fault = self.fault_hooks(fail_at)
        lease = supplied(lease_ms=lease_ms)
        result = self.both(
            "claim",
            lambda: self.queue.claim(self.con, owner, self.now, fault=real_fault, **lease),
            lambda: self.model.claim(owner, self.now, fault=spec_fault, **lease),
        )
        self.same_hooks("claim", real_fault, spec_fault)
        if result[0] != "returned" or result[1] is None:
            return multiple()
        return self.keep_issued(result[1])

    def keep_issued(self, ticket: dict[str, Any]) -> dict[str, Any]:
        """Remember a new ticket; its token must be above every earlier one of its job."""
        earlier = [t["token"] for t in self.issued if t["id"] == ticket["id"]]
        assert all(ticket["token"] > token for token in earlier), (
            f"a fencing token was reused: job {ticket['id']!r} got token {ticket['token']}, "
            f"after tokens {abbreviated(earlier)}"
        )
        self.issued.append(dict(ticket))
        return ticket

    @rule(ticket=tickets, outcome=OUTCOME, delay=DELAYS, fail_at=FAULTS)
    @counted
    def finish(
        self,
        ticket: dict[str, Any],
        outcome: str,
        delay: int | str | None,
        fail_at: str | None = None,
    ) -> None:
        """Present a ticket from the bundle: live or stale, as it comes."""
        self.finish_with_hooks(dict(ticket), outcome, self.delay_for(delay, ticket), fail_at)

    # ``self.live`` is kept by the invariant (at_most_one_live_ticket), after every step:
    # a precondition runs many times per step, and judging each ticket costs a query.
    @precondition(lambda self: self.live)
    @rule(outcome=OUTCOME, delay=DELAYS)
    @counted
    def finish_live(self, outcome: str, delay: int | str | None) -> None:
        """Finish the newest ticket that is still live: the path where outcomes are decided."""
        ticket = self.live[-1]
        self.finish_with_hooks(dict(ticket), outcome, self.delay_for(delay, ticket), None)

    @rule(ticket=tickets, field=TICKET_FIELD, outcome=OUTCOME)
    @counted
    def finish_forged(self, ticket: dict[str, Any], field: str, outcome: str) -> None:
        """Present a well-formed ticket that differs from a real one in one field."""
        self.finish_with_hooks(forged(ticket, field), outcome, 0, None)

    def finish_with_hooks(
        self, presented: dict[str, Any], outcome: str, delay_ms: int | None, fail_at: str | None
    ) -> None:
        __tracebackhide__ = True
        call = {"ticket": presented, "outcome": outcome, "now_ms": self.now}
        explain(call_text("finish", call | supplied(delay_ms=delay_ms)))
        real_fault, spec_fault = self.fault_hooks(fail_at)
        snapshot = dict(presented)
        delay = supplied(delay_ms=delay_ms)
        self.both(
            "finish",
            lambda: self.queue.finish(
                self.con,
                presented,
                outcome,
                self.now,
                fault=real_fault,
                **delay,
            ),
            lambda: self.model.finish(presented, outcome, self.now, fault=spec_fault, **delay),
        )
        self.same_hooks("finish", real_fault, spec_fault)
        assert presented == snapshot, mutated("finish", "ticket", snapshot, presented)

    # --- rules: the batches (docs/batches.md) -----------------------------------

    @rule(events=EVENTS, ttl_ms=TTLS, max_attempts=BUDGETS)
    @counted
    def enqueue_many(
        self, events: list[tuple[str, int]], ttl_ms: int, max_attempts: int | None
    ) -> None:
        """0-6 events from the same four ids: new jobs, retries and conflicts, within and
        across batches; each side gets its own copy of the list, which it must not mutate."""
        given = [{"id": job_id, "qty": qty} for job_id, qty in events]
        real_events, spec_events = copy.deepcopy(given), copy.deepcopy(given)
        budget = supplied(max_attempts=max_attempts)
        ids = [job_id for job_id, _ in events]
        if len(set(ids)) < len(ids):
            self.count("enqueue_many: an id twice in one batch")
        self.both(
            "enqueue_many",
            lambda: self.queue.enqueue_many(self.con, real_events, self.now, ttl_ms, **budget),
            lambda: self.model.enqueue_many(spec_events, self.now, ttl_ms, **budget),
        )
        assert real_events == given, mutated("enqueue_many", "events", given, real_events)
        assert spec_events == given, mutated(
            "the model's enqueue_many", "events", given, spec_events
        )

    @rule(target=tickets, owner=OWNER, limit=LIMITS, lease_ms=LEASES, fail_at=FAULTS)
    @counted
    def claim_many(
        self, owner: str, limit: int, lease_ms: int | None, fail_at: str | None = None
    ) -> Any:
        """Claim up to ``limit`` on both sides; every ticket issued goes to the bundle."""
        real_fault, spec_fault = self.fault_hooks(fail_at)
        lease = supplied(lease_ms=lease_ms)
        result = self.both(
            "claim_many",
            lambda: self.queue.claim_many(
                self.con, owner, self.now, limit, fault=real_fault, **lease
            ),
            lambda: self.model.claim_many(owner, self.now, limit, fault=spec_fault, **lease),
        )
        self.same_hooks("claim_many", real_fault, spec_fault)
        if result[0] != "returned":
            return multiple()
        issued = result[1]
        self.count(
            "claim_many: the limit reached" if len(issued) == limit else "claim_many: ran out"
        )
        return multiple(*(self.keep_issued(ticket) for ticket in issued))

    @precondition(lambda self: self.bundle("tickets"))
    @rule(
        items=st.lists(st.tuples(tickets, OUTCOME, ITEM_DELAYS), max_size=MAX_BATCH_ITEMS),
        fail_at=FAULTS,
    )
    @counted
    def finish_many(
        self, items: list[tuple[dict[str, Any], str, int | str]], fail_at: str | None = None
    ) -> None:
        """0-6 tickets from the bundle (live or stale, the same one twice), each outcome,
        delays aimed at the deadline as ``finish``'s are."""
        given: list[dict[str, Any]] = [
            {"ticket": dict(ticket), "outcome": outcome, "delay_ms": self.delay_for(delay, ticket)}
            for ticket, outcome, delay in items
        ]
        explain(call_text("finish_many", {"results": given, "now_ms": self.now}))
        self.count_finish_items(given)
        real_results, spec_results = copy.deepcopy(given), copy.deepcopy(given)
        real_fault, spec_fault = self.fault_hooks(fail_at)
        result = self.both(
            "finish_many",
            lambda: self.queue.finish_many(self.con, real_results, self.now, fault=real_fault),
            lambda: self.model.finish_many(spec_results, self.now, fault=spec_fault),
        )
        self.same_hooks("finish_many", real_fault, spec_fault)
        assert real_results == given, mutated("finish_many", "results", given, real_results)
        assert spec_results == given, mutated(
            "the model's finish_many", "results", given, spec_results
        )
        if result[0] == "returned":
            for item, status in zip(given, result[1], strict=True):
                row = self.row(item["ticket"]["id"]) if status == "dead" else None
                reason = f" ({row['reason']})" if row is not None else ""
                self.count(f"finish_many: an item {item['outcome']} -> {status}{reason}")

    def count_finish_items(self, results: list[dict[str, Any]]) -> None:
        """Statistics: the same ticket twice in one batch, a live and a stale one together."""
        tickets = [tuple(result["ticket"].values()) for result in results]
        if len(set(tickets)) < len(tickets):
            self.count("finish_many: a ticket twice in one batch")
        live = {result["ticket"] in self.live for result in results}
        if live == {True, False}:
            self.count("finish_many: live and stale tickets in one batch")

    @rule(ms=CLOCK_STEPS)
    @counted
    def advance_clock(self, ms: int) -> None:
        self.now = min(self.now + ms, MAX_NOW)

    @rule(boundary=BOUNDARY, offset=AROUND)
    @counted
    def advance_clock_to(self, boundary: str, offset: int) -> None:
        """Move the clock to the next ``boundary`` (lease_until, deadline or available_at)
        of the jobs there are, or one ms either side of it: the earliest such moment
        after now. With none ahead, the clock stays (it never goes back)."""
        column = JOB_COLUMNS.index(boundary)
        ahead = [
            values[column] + offset
            for values in self.model.rows()["jobs"]
            if values[column] is not None and self.now < values[column] + offset <= MAX_NOW
        ]
        if ahead:
            self.now = min(ahead)
        explain(f"advance_clock_to: now={self.now}")

    @rule(
        job_id=JOB_ID,
        ttl_ms=TTLS,
        note_text=NOTES,
        fail_at=FAULTS,
    )
    @counted
    def redrive(self, job_id: str, ttl_ms: int, note_text: str, fail_at: str | None = None) -> None:
        real_fault, spec_fault = self.fault_hooks(fail_at)
        self.both(
            "redrive",
            lambda: self.queue.redrive(self.con, job_id, self.now, ttl_ms, note_text, real_fault),
            lambda: self.model.redrive(job_id, self.now, ttl_ms, note_text, spec_fault),
        )
        self.same_hooks("redrive", real_fault, spec_fault)

    @rule(
        owner=OWNER,
        send=SEND,
        later=LATER,
        jitter=JITTERS,
        lease_ms=LEASES,
        verb=RUN_VERBS,
    )
    @counted
    def run_once(
        self,
        owner: str,
        send: str,
        later: int | str,
        jitter: float,
        lease_ms: int | None,
        verb: str = "run_once",
    ) -> None:
        """One courier round: ``run_once`` on the borrowed connection, or ``run_file`` on
        its own connection to the same file; the model's run_once gets the same clock
        readings and the same send script."""
        readings = [self.now, self.second_reading(later, lease_ms or DEFAULT_LEASE_MS)]
        lease = supplied(lease_ms=lease_ms)
        explain(f"{verb}: clock readings {readings}")
        real_clock, spec_clock = ScriptedClock(readings), ScriptedClock(readings)
        real_sends: list[dict[str, Any]] = []
        spec_sends: list[dict[str, Any]] = []
        real_send = self.scripted_send(send, real_sends, self.enqueue_elsewhere_real)
        spec_send = self.scripted_send(send, spec_sends, self.enqueue_elsewhere_model)
        if verb == "run_file":
            real = partial(self.store.run_target(), self.path)
        else:
            real = partial(self.queue.run_once, self.con)
        self.both(
            verb,
            lambda: real(owner, real_clock, real_send, jitter, **lease),
            lambda: self.model.run_once(owner, spec_clock, spec_send, jitter, **lease),
        )
        side = self.store.label
        assert real_sends == spec_sends, (
            f"{verb} sent other deliveries: "
            f"{listed(value_differences(real_sends, spec_sends, side))}\n"
            f"  {side} sent: {abbreviated(real_sends)}\n  the model sent: {abbreviated(spec_sends)}"
        )
        assert real_clock.calls == spec_clock.calls, (
            f"{verb} read the clock {real_clock.calls} times on {side}, "
            f"{spec_clock.calls} on the model"
        )
        finished_at = readings[1]
        if (
            real_clock.calls == 2
            and type(finished_at) is int
            and self.now <= finished_at <= MAX_NOW
        ):
            self.now = finished_at  # the world's clock moved on (never to an invalid reading)

    def second_reading(self, later: int | str, lease_ms: int) -> object:
        if later == "same":
            return self.now
        if later == "at_lease_end":
            return min(self.now + lease_ms, MAX_NOW)
        if later == "before_lease_end":
            return min(self.now + lease_ms - 1, MAX_NOW)
        if later == "backwards":
            return self.now - 1
        if later == "invalid":
            return MAX_NOW + 1
        assert isinstance(later, int)
        return min(self.now + later, MAX_NOW)

    def enqueue_elsewhere_real(self) -> None:
        self.queue.enqueue(self.elsewhere, {"id": "c", "qty": 1}, self.now, 1000)

    def enqueue_elsewhere_model(self) -> None:
        self.model.enqueue({"id": "c", "qty": 1}, self.now, 1000)

    @staticmethod
    def scripted_send(
        behaviour: str, log: list[dict[str, Any]], enqueue_elsewhere: Callable[[], None]
    ) -> ScriptedSend:
        return ScriptedSend(behaviour, log, enqueue_elsewhere)

    @rule(
        attempt=ATTEMPTS,
        base_ms=BASES,
        cap_above_base=CAPS_ABOVE_BASE,
        jitter=ANY_JITTERS,
    )
    @counted
    def retry_delay(self, attempt: int, base_ms: int, cap_above_base: int, jitter: object) -> None:
        """The backoff of both sides agrees for every jitter, valid or odd.

        Odd values of the other arguments come from ``call_with_odd_argument``.
        """
        cap_ms = min(base_ms + cap_above_base, 60000)
        self.both(
            "retry_delay",
            lambda: worker.retry_delay(attempt, base_ms, cap_ms, jitter),  # type: ignore[arg-type]
            lambda: model.retry_delay(attempt, base_ms, cap_ms, jitter),  # type: ignore[arg-type]
        )

    @rule(odds=ODD_SINGLE_CALLS)
    @counted
    def call_with_odd_argument(self, odds: Sequence[tuple[str, object]]) -> None:
        """One argument (or field) of a valid single call replaced by an odd value."""
        self.call_with_odd_arguments(odds)

    @rule(odds=ODD_BATCH_CALLS)
    @counted
    def call_many_with_odd_arguments(self, odds: Sequence[tuple[str, object]]) -> None:
        """One or two arguments, items or fields of a valid batch call made odd."""
        self.call_with_odd_arguments(odds)

    def call_with_odd_arguments(self, odds: Sequence[tuple[str, object]]) -> None:
        """Replace arguments (or fields, or items) of one valid call by odd values; both
        sides must agree. The deepest is placed first, so that a list reshaped
        (``Reshape('tuple')``) keeps an odd item placed in it."""
        function = odds[0][0].partition(".")[0]
        real_args, spec_args = self.valid_arguments(function), self.valid_arguments(function)
        for slot, value in sorted(odds, key=lambda odd: -odd[0].count(".")):
            for arguments in (real_args, spec_args):
                place(arguments, slot.partition(".")[2], value)
        verb = " & ".join(slot for slot, _ in odds)
        label = generic(odds[0][0]) + (" & 1 more" if len(odds) > 1 else "")
        explain(call_text(function, real_args, con=function != "retry_delay"))
        real_call = getattr(self.queue, function)
        spec_call = getattr(self.model, function, None) or getattr(model, function)
        if function == "retry_delay":
            self.both(verb, lambda: real_call(**real_args), lambda: spec_call(**spec_args))
        else:
            self.both(
                verb,
                lambda: real_call(self.con, **real_args),
                lambda: spec_call(**spec_args),
                label,
            )

    def valid_arguments(self, function: str) -> dict[str, Any]:
        ticket = dict(self.issued[-1]) if self.issued else dict(PLACEHOLDER_TICKET)
        recent = [*self.issued[-VALID_BATCH_SIZE:], *[PLACEHOLDER_TICKET] * VALID_BATCH_SIZE]
        calls: dict[str, dict[str, Any]] = {
            "enqueue": {"event": {"id": "b", "qty": 1}, "now_ms": self.now, "ttl_ms": 100},
            "claim": {"owner": "c2", "now_ms": self.now, "lease_ms": 10, "fault": None},
            "finish": {"ticket": ticket, "outcome": "ok", "now_ms": self.now, "delay_ms": 0},
            "redrive": {"job_id": "a", "now_ms": self.now, "ttl_ms": 100, "note": "ops"},
            "retry_delay": {"attempt": 2, "base_ms": 100, "cap_ms": 1000, "jitter": 0.5},
            "run_once": {
                "owner": "c1",
                "clock": ScriptedClock([self.now, self.now]),
                "send": self.scripted_send("ack", [], lambda: None),
                "jitter": 0.5,
                "lease_ms": 10,
            },
            "enqueue_many": {
                "events": [{"id": "b", "qty": 1}, {"id": "d", "qty": 2}, {"id": "b", "qty": 1}],
                "now_ms": self.now,
                "ttl_ms": 100,
            },
            "claim_many": {
                "owner": "c2",
                "now_ms": self.now,
                "limit": 2,
                "lease_ms": 10,
                "fault": None,
            },
            "finish_many": {
                "results": [
                    {"ticket": dict(recent[0]), "outcome": "ok", "delay_ms": 0},
                    {"ticket": dict(recent[1]), "outcome": "retry", "delay_ms": 5},
                    {"ticket": dict(recent[2]), "outcome": "permanent", "delay_ms": 0},
                ],
                "now_ms": self.now,
                "fault": None,
            },
        }
        return calls[function]

    @rule(as_pathlike=AS_PATHLIKE)
    @counted
    def reopen(self, as_pathlike: bool) -> None:
        """Close the connection and open the same file again (str or PathLike): nothing is lost."""
        self.con.close()
        if self.store.name == "sqlite":
            self.con = worker.open_queue(Path(self.path) if as_pathlike else self.path)
        else:  # a conninfo has one form: as_pathlike changes nothing here
            self.con = self.queue.open_queue(self.path)
        self.store.assert_configured(self.con)

    @rule(path=NOT_A_QUEUE_PATHS)
    @counted
    def open_queue_odd_path(self, path: object) -> None:
        """A value that names no file (or no path at all) is a ValueError; nothing is created.

        On PostgreSQL the same values stand for a conninfo: one that is not a non-empty
        str is a ValueError, a str that does not parse is psycopg's ProgrammingError."""
        if self.store.name != "sqlite":
            self.open_queue_odd_conninfo(path)
            return
        before = sorted(os.listdir(self.folder))
        result = outcome_of(lambda: worker.open_queue(path))  # type: ignore[arg-type]
        if result[0] == "returned":
            result[1].close()
        expected = ("raised", "ValueError", refusal_of_path(path))
        assert result == expected, (
            f"open_queue({short_repr(path)}) {outcome_text(result)}, "
            f"instead of: {outcome_text(expected)}"
        )
        assert sorted(os.listdir(self.folder)) == before

    def open_queue_odd_conninfo(self, conninfo: object) -> None:
        result = outcome_of(lambda: pgworker.open_queue(conninfo), psycopg.ProgrammingError)  # type: ignore[arg-type]
        if result[0] == "returned":
            result[1].close()
        if type(conninfo) is str and conninfo:
            expected: Result = ("raised", "ProgrammingError")
        else:
            rule = "a non-empty str (a libpq connection string or URI)"
            expected = (
                "raised",
                "ValueError",
                str(model.rules.malformed("conninfo", rule, conninfo)),
            )
        assert result == expected, (
            f"open_queue({short_repr(conninfo)}) {outcome_text(result)}, "
            f"instead of: {outcome_text(expected)}"
        )

    @rule(
        function=DB_FUNCTION,
        con=ODD_CONNECTIONS,
    )
    @counted
    def borrowed_connection_odd(self, function: str, con: object) -> None:
        """A con that is no connection, or one with a transaction open, is a ValueError
        before anything else: the caller's transaction is left alone, nothing changes."""
        caller = self.store.caller(self.path)
        try:
            if con == "open transaction":
                caller.execute("BEGIN")  # deferred, no statement yet: holds no lock
                con, message = caller, OPEN_TRANSACTION
            else:
                message = str(model.rules.malformed("con", self.store.connection_type, con))
            calls = calls_with(con, self.now) if self.store.name == "sqlite" else self.calls_on(con)
            result = outcome_of(calls[function])
            expected: Result = ("raised", "ValueError", message)
            assert result == expected, (
                f"{function}(con={short_repr(con)}, ...) {outcome_text(result)}, "
                f"instead of: {outcome_text(expected)}"
            )
            assert self.store.in_transaction(caller) == (con is caller)
        finally:
            caller.close()

    def calls_on(self, con: object) -> dict[str, Callable[[], object]]:
        """``strategies.calls_with``'s calls (the same arguments) on this store's module."""

        def send(delivery: dict[str, Any]) -> object:
            return True

        q, now = self.queue, self.now
        return {
            "enqueue": lambda: q.enqueue(con, {"id": "a", "qty": 1}, now, 1000),
            "claim": lambda: q.claim(con, "c1", now),
            "finish": lambda: q.finish(con, dict(PLACEHOLDER_TICKET), "ok", now),
            "redrive": lambda: q.redrive(con, "a", now, 1000, "ops"),
            "run_once": lambda: q.run_once(con, "c1", lambda: now, send, 0.5),
            "enqueue_many": lambda: q.enqueue_many(con, [{"id": "a", "qty": 1}], now, 1000),
            "claim_many": lambda: q.claim_many(con, "c1", now, 2),
            "finish_many": lambda: q.finish_many(con, [], now),
        }

    @rule(where=NO_QUEUE_PLACES, jitter=JITTERS)
    @counted
    def run_file_without_a_queue(self, where: str, jitter: float) -> None:
        """run_file on anything but an existing regular file: FileNotFoundError, no file made.

        On PostgreSQL, run_database on a schema without the queue: UndefinedTable, no
        table made (``""`` is no conninfo: ValueError); the clock is never read."""
        if self.store.name != "sqlite":
            self.run_database_without_a_queue(where, jitter)
            return
        path = {"missing": os.path.join(self.folder, "missing.sqlite"), "folder": self.folder}
        name = path.get(where, where)
        clock = ScriptedClock([self.now, self.now])
        before = sorted(os.listdir(self.folder))
        try:
            worker.run_file(name, "c1", clock, self.scripted_send("ack", [], lambda: None), jitter)
        except FileNotFoundError as error:
            assert (error.errno, error.strerror, error.filename) == (
                errno.ENOENT,
                NO_QUEUE_FILE,
                name,
            )
        else:
            raise AssertionError(f"run_file({name!r}) did not raise FileNotFoundError")
        assert clock.calls == 0
        assert sorted(os.listdir(self.folder)) == before

    def run_database_without_a_queue(self, where: str, jitter: float) -> None:
        clock = ScriptedClock([self.now, self.now])
        send = self.scripted_send("ack", [], lambda: None)
        schema = f"no_queue_{where.strip(':') or 'empty'}"
        target = (
            "" if where == "" else libpq.make_conninfo(self.path, options=f"-csearch_path={schema}")
        )
        result = outcome_of(
            lambda: pgworker.run_database(target, "c1", clock, send, jitter),
            psycopg.errors.UndefinedTable,
        )
        expected: Result = ("raised", "UndefinedTable")
        if where == "":
            rule = "a non-empty str (a libpq connection string or URI)"
            expected = ("raised", "ValueError", str(model.rules.malformed("conninfo", rule, "")))
        assert result == expected, (
            f"run_database in {schema!r} {outcome_text(result)}, "
            f"instead of: {outcome_text(expected)}"
        )
        assert clock.calls == 0
        tables = self.con.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s", (schema,))
        assert tables.fetchone()[0] == 0, f"run_database created a table in {schema!r}"

    # --- invariants ------------------------------------------------------------

    @invariant()
    def promises_hold(self) -> None:
        """After every step: the queue's five promises, checked on one read of the rows.

        The rows equal the model's; no transaction is left open; no token went down;
        at most one ticket per job is live; a done job never changes again. (One
        invariant, not five: the printed program gets one line per step, not six.)
        """
        real = self.store.comparable_rows(self.con)
        self.rows_match_model(real)
        self.no_open_transaction()
        jobs = {values[1]: dict(zip(JOB_COLUMNS, values, strict=True)) for values in real["jobs"]}
        self.tokens_never_decrease(jobs)
        self.at_most_one_live_ticket(jobs)
        self.done_is_final(jobs)

    def rows_match_model(self, real: dict[str, list[tuple[Any, ...]]]) -> None:
        spec = self.model.rows()
        assert real == spec, rows_divergence(real, spec, self.store.label)

    def no_open_transaction(self) -> None:
        assert not self.store.in_transaction(self.con), "a call left a transaction open"
        assert not self.store.in_transaction(self.elsewhere)

    def tokens_never_decrease(self, jobs: dict[str, dict[str, Any]]) -> None:
        for job_id, row in jobs.items():
            highest = self.highest_token.get(job_id, 0)
            assert row["token"] >= highest, (
                f"token of job {job_id!r} went down: {highest} before, {row['token']} now"
            )
            self.highest_token[job_id] = row["token"]

    def at_most_one_live_ticket(self, jobs: dict[str, dict[str, Any]]) -> None:
        """Also keeps ``self.live``, the live tickets in the order issued, for finish_live."""
        self.live = [ticket for ticket in self.issued if self.is_live(ticket, jobs)]
        live = Counter(ticket["id"] for ticket in self.live)
        assert all(count <= 1 for count in live.values()), (
            "several live tickets of one job: "
            + "; ".join(
                f"job {job_id!r}: {abbreviated([t for t in self.live if t['id'] == job_id])}"
                for job_id, count in sorted(live.items())
                if count > 1
            )
        )

    def is_live(self, ticket: dict[str, Any], jobs: dict[str, dict[str, Any]]) -> bool:
        """Would finish accept this ticket now? Judged from the SQLite rows alone."""
        row = jobs.get(ticket["id"])
        if row is None or row["status"] != "leased":
            return False
        same = all(row[column] == ticket[field] for field, column in TICKET_COLUMNS)
        return same and self.now < row["lease_until"] and self.now < row["deadline"]

    def done_is_final(self, jobs: dict[str, dict[str, Any]]) -> None:
        for job_id, row in jobs.items():
            if job_id in self.finished:
                before = self.finished[job_id]
                assert row == before, (
                    f"done job {job_id!r} changed: "
                    f"{listed(value_differences(row, before, 'now', 'when done'))}"
                )
            elif row["status"] == "done":
                self.finished[job_id] = row


def mutated(call: str, argument: str, given: object, after: object) -> str:
    """The message for a call that changed its argument: what changed, by place."""
    changes = listed(value_differences(after, given, "after", "given"))
    return f"{call} mutated its {argument}: {changes}"


class PostgresLockstep(QueueLockstep):
    """The same machine on ``pgworker.py``, a schema of the database of ``conninfo``
    per example (set by the test that runs it)."""

    conninfo: ClassVar[str] = ""

    def make_store(self, folder: str) -> Store:
        return PostgresStore(self.conninfo)
