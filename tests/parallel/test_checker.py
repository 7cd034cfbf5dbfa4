"""The history checker on hand-built histories, each small enough to judge by eye.

Times are in microseconds of the shared clock; ``op(...)`` builds one call of the queue
as the runner would have recorded it. The rows after each history come from running
the model on the order the test says really happened.
"""

from __future__ import annotations

from typing import Any

import model
from tests.parallel.checker import Choices, Operation, Verdict, check
from tests.parallel.history import Observed, Record, operations
from tests.parallel.program import Fault
from tests.parallel.spec import QueueSpec

NOW = 1000


def op(
    id: int, label: str, verb: str, output: Any, invoked: int, returned: int | None, **args: Any
) -> Operation:
    observed = Observed(label, verb, tuple(args.items()), output)
    return Operation(id, label, observed, output, invoked, returned)


def enqueued(*ids: str, **kwargs) -> list[Operation]:
    """The prefix: each id enqueued (qty 1, ttl 100), one after another."""
    return [
        op(
            i,
            f"p{i}",
            "enqueue",
            ("returned", True),
            i * 10,
            i * 10 + 5,
            event={"id": job_id, "qty": 1},
            now_ms=NOW,
            ttl_ms=100,
            max_attempts=None,
        )
        for i, job_id in enumerate(ids)
    ]


def ticket(job_id: str, token: int, owner: str = "c1", until: int = NOW + 10) -> dict[str, Any]:
    return {
        "id": job_id,
        "qty": 1,
        "owner": owner,
        "token": token,
        "attempt": token,
        "lease_until": until,
    }


def rows_after(*calls: tuple[str, dict[str, Any]]) -> model.Rows:
    """The rows of a model that made these calls in this order."""
    queue = model.QueueModel()
    for verb, kwargs in calls:
        getattr(queue, verb)(**kwargs)
    return queue.rows()


def enqueue_call(job_id: str) -> tuple[str, dict[str, Any]]:
    return ("enqueue", {"event": {"id": job_id, "qty": 1}, "now_ms": NOW, "ttl_ms": 100})


def claim_call(owner: str, now: int = NOW) -> tuple[str, dict[str, Any]]:
    return ("claim", {"owner": owner, "now_ms": now, "lease_ms": 10})


def claim(
    id: int, label: str, owner: str, got: Any, invoked: int, returned: int | None, now: int = NOW
) -> Operation:
    return op(
        id,
        label,
        "claim",
        ("returned", got),
        invoked,
        returned,
        owner=owner,
        now_ms=now,
        lease_ms=10,
        fault=None,
    )


# --- linearizable ----------------------------------------------------------------------


def c1_got_b_and_c2_got_a(c1_span: tuple[int, int], c2_span: tuple[int, int]) -> Verdict[Any]:
    """The verdict on two claims of a and b, c1's (call 2) getting b and c2's (call 3)
    getting a, invoked and returned at the given times; the rows say c2 came first."""
    history = [
        *enqueued("a", "b"),
        claim(2, "b1.0", "c1", ticket("b", 1, "c1"), *c1_span),
        claim(3, "b2.0", "c2", ticket("a", 1, "c2"), *c2_span),
    ]
    rows = rows_after(enqueue_call("a"), enqueue_call("b"), claim_call("c2"), claim_call("c1"))
    return check(history, QueueSpec(rows))


def test_overlapping_claims_linearize_in_the_one_order_that_works():
    """c1 got b and c2 got a: only "c2 first" explains it, and their calls overlap."""
    verdict = c1_got_b_and_c2_got_a((100, 300), (150, 250))
    assert verdict.outcome == "ok"
    assert verdict.order.index(3) < verdict.order.index(2)


def test_real_time_order_is_kept_even_when_another_order_would_explain_it():
    """The same results, but c1's claim returned before c2's began: no order works."""
    verdict = c1_got_b_and_c2_got_a((100, 200), (250, 300))
    assert verdict.outcome == "illegal"
    assert 2 in verdict.stuck


def test_a_killed_claim_may_have_taken_effect():
    """The killed claim is needed: the rows show its lease, and c2 then got b."""
    history = [
        *enqueued("a", "b"),
        claim(2, "b1.0", "c1", None, 100, None),
        claim(3, "b2.0", "c2", ticket("b", 1, "c2"), 150, 250),
    ]
    history[2] = Operation(2, "b1.0", history[2].call, None, 100, None)
    rows = rows_after(enqueue_call("a"), enqueue_call("b"), claim_call("c1"), claim_call("c2"))
    assert check(history, QueueSpec(rows)).outcome == "ok"


def test_a_killed_claim_may_have_taken_no_effect():
    history = [*enqueued("a"), claim(1, "b1.0", "c1", None, 100, None)]
    rows = rows_after(enqueue_call("a"))
    verdict = check(history, QueueSpec(rows))
    assert verdict.outcome == "ok"
    assert verdict.order == (0,)


def claim_record(
    lane: str, owner: str, invoked: int, returned: int, output: tuple[Any, ...]
) -> Record:
    """A claim as the runner records it (the lane's first call, times in microseconds)."""
    arguments = {"owner": owner, "now_ms": NOW, "lease_ms": 10, "fault": None}
    return Record(lane, 0, "claim", arguments, invoked, returned, output)


def test_a_lock_timeout_is_a_call_that_did_nothing():
    """A claim refused the lock after waiting: left out, and the rows agree."""
    locked = ("raised", "OperationalError", "database is locked")
    refused = claim_record("b1", "c1", 100_000, 1_100_000, locked)
    took = claim_record("b2", "c2", 100_000, 200_000, ("returned", ticket("a", 1, "c2")))
    prefix = Record(
        "p",
        0,
        "enqueue",
        {"event": {"id": "a", "qty": 1}, "now_ms": NOW, "ttl_ms": 100, "max_attempts": None},
        0,
        10,
        ("returned", True),
    )
    ops = operations([prefix, refused, took], lambda kind, message: "locked" in message)
    assert [o.process for o in ops] == ["p0", "b2.0"]
    rows = rows_after(enqueue_call("a"), claim_call("c2"))
    assert check(ops, QueueSpec(rows)).outcome == "ok"


# --- not linearizable ---------------------------------------------------------------------


def test_two_live_tickets_for_one_job():
    history = [
        *enqueued("a"),
        claim(1, "b1.0", "c1", ticket("a", 1, "c1"), 100, 300),
        claim(2, "b2.0", "c2", ticket("a", 1, "c2"), 150, 250),
    ]
    rows = rows_after(enqueue_call("a"), claim_call("c2"))
    verdict = check(history, QueueSpec(rows))
    assert verdict.outcome == "illegal"
    assert verdict.stuck & {1, 2}


def test_a_stale_finish_accepted():
    """c1's lease ended at 1010; c2 took the job over at 1010; then c1's finish (at
    1005 by its own clock, but invoked after the takeover returned) said done."""
    old = ticket("a", 1, "c1", NOW + 10)
    history = [
        *enqueued("a"),
        claim(1, "b1.0", "c1", old, 100, 200),
        claim(2, "b2.0", "c2", ticket("a", 2, "c2", NOW + 20), 300, 400, now=NOW + 10),
        op(
            3,
            "b1.1",
            "finish",
            ("returned", "done"),
            500,
            600,
            ticket=old,
            outcome="ok",
            now_ms=NOW + 5,
            delay_ms=0,
            fault=None,
        ),
    ]
    rows = rows_after(enqueue_call("a"), claim_call("c1"), claim_call("c2", NOW + 10))
    verdict = check(history, QueueSpec(rows))
    assert verdict.outcome == "illegal"
    assert 3 in verdict.stuck


def test_a_claim_that_found_nothing_while_a_job_was_claimable_throughout():
    history = [*enqueued("a"), claim(1, "b1.0", "c1", None, 100, 200)]
    verdict = check(history, QueueSpec(rows_after(enqueue_call("a"))))
    assert verdict.outcome == "illegal"
    assert verdict.stuck == frozenset({1})


def test_rows_that_no_order_leaves_behind():
    """Every call can be placed, but the file says the job is done: no order ends there."""
    history = [*enqueued("a"), claim(1, "b1.0", "c1", ticket("a", 1), 100, 200)]
    done = rows_after(
        enqueue_call("a"),
        claim_call("c1"),
        ("finish", {"ticket": ticket("a", 1), "outcome": "ok", "now_ms": NOW}),
    )
    verdict = check(history, QueueSpec(done))
    assert verdict.outcome == "illegal"
    assert verdict.notes and not verdict.stuck


# --- the search itself ----------------------------------------------------------------------


class Register:
    """A register that any call may write: a model where every order works."""

    def init(self) -> int:
        return 0

    def step(self, state: int, operation: Operation) -> int | None:
        written: int = operation.call
        return written

    def final(self, state: int) -> bool:
        return True


def test_the_budget_gives_unknown_never_a_wrong_answer():
    """Twelve overlapping writes and a final check no order meets: the search would have
    to try every order; with a small budget it says unknown."""

    class Never(Register):
        def final(self, state: int) -> bool:
            return False

    history = [Operation(i, f"w{i}", i, None, 0, 100) for i in range(12)]
    verdict = check(history, Never(), budget=500)
    assert verdict.outcome == "unknown"
    assert verdict.steps + verdict.explored == 500


def test_memoization_keeps_overlapping_writes_cheap():
    """Twelve overlapping writes of one value: the states repeat, so the search stays
    small (12! orders, but only 2**12 sets of calls placed)."""

    class Same(Register):
        def step(self, state: int, operation: Operation) -> int:
            return 1

    history = [Operation(i, f"w{i}", i, None, 0, 100) for i in range(12)]
    verdict = check(history, Same(), budget=200_000)
    assert verdict.outcome == "ok"
    assert verdict.explored <= 2**12 + 1


def test_operations_need_their_own_ids_and_sane_times():
    import pytest

    with pytest.raises(ValueError, match="own id"):
        check([Operation(0, "a", 1, None, 0, 1), Operation(0, "b", 1, None, 0, 1)], Register())
    with pytest.raises(ValueError, match="before it was invoked"):
        check([Operation(0, "a", 1, None, 5, 1)], Register())


# --- the relaxed claim order (PostgreSQL) ------------------------------------------------


def claim_that_rolled_back(id: int, label: str, invoked: int, returned: int) -> Operation:
    """A claim whose fault hook raised before COMMIT: it held its row, then let it go."""
    return op(
        id,
        label,
        "claim",
        ("raised", "InjectedFault", "after-claim"),
        invoked,
        returned,
        owner="c1",
        now_ms=NOW,
        lease_ms=10,
        fault=Fault("raise", "after-claim"),
    )


def c2_passed_over_a() -> model.Rows:
    """The rows after a and b were enqueued and c2 claimed, passing over a."""
    queue = model.QueueModel("relaxed")
    queue.enqueue(**enqueue_call("a")[1])
    queue.enqueue(**enqueue_call("b")[1])
    queue.held_elsewhere({"a"})
    queue.claim(**claim_call("c2")[1])
    return queue.rows()


def test_a_relaxed_claim_passes_over_a_job_an_overlapping_claim_held():
    """c1 locked a, then rolled back; c2, meanwhile, passed a over and took b. No strict
    order explains it (a stayed claimable); the relaxed one does."""
    history = [
        *enqueued("a", "b"),
        claim_that_rolled_back(2, "b1.0", 100, 300),
        claim(3, "b2.0", "c2", ticket("b", 1, "c2"), 150, 250),
    ]
    rows = c2_passed_over_a()
    assert check(history, QueueSpec(rows, "strict", history)).outcome == "illegal"
    assert check(history, QueueSpec(rows, "relaxed", history)).outcome == "ok"


def test_a_relaxed_claim_may_not_pass_over_a_job_nobody_held():
    """The same history, but c1's claim returned before c2's began: nothing overlapped
    c2, so it had to take a."""
    history = [
        *enqueued("a", "b"),
        claim_that_rolled_back(2, "b1.0", 100, 140),
        claim(3, "b2.0", "c2", ticket("b", 1, "c2"), 150, 250),
    ]
    assert check(history, QueueSpec(c2_passed_over_a(), "relaxed", history)).outcome == "illegal"


def test_a_relaxed_claim_returns_nothing_only_when_every_claimable_job_is_held():
    """c1 leased a while c2's claim ran and found nothing; b was claimable throughout and
    c1 never looked at it (a single claim looks at the first fresh job only): the
    READ COMMITTED re-check that gives up, caught."""
    history = [
        *enqueued("a", "b"),
        claim(2, "b1.0", "c1", ticket("a", 1, "c1"), 100, 300),
        claim(3, "b2.0", "c2", None, 150, 250),
    ]
    rows = rows_after(enqueue_call("a"), enqueue_call("b"), claim_call("c1"))
    verdict = check(history, QueueSpec(rows, "relaxed", history))
    assert verdict.outcome == "illegal"
    assert 3 in verdict.stuck


def test_a_relaxed_claim_that_met_every_job_held_returns_nothing():
    """With a alone in the queue, c2 meeting it locked by c1 and returning nothing is
    what SKIP LOCKED does; the strict order says c2 should have waited its turn."""
    history = [
        *enqueued("a"),
        claim(1, "b1.0", "c1", ticket("a", 1, "c1"), 100, 300),
        claim(2, "b2.0", "c2", None, 150, 250, now=NOW + 20),
    ]
    rows = rows_after(enqueue_call("a"), claim_call("c1"))
    assert check(history, QueueSpec(rows, "relaxed", history)).outcome == "ok"
    assert check(history, QueueSpec(rows, "strict", history)).outcome == "illegal"


def test_choices_let_a_model_do_one_call_in_several_ways():
    """A set whose ``take`` may return any member: the checker follows every choice."""

    class AnyMember:
        def init(self) -> frozenset[int]:
            return frozenset({1, 2})

        def step(self, state: frozenset[int], op: Operation) -> Choices:
            return Choices(state - {member} for member in sorted(state) if member == op.output)

        def final(self, state: frozenset[int]) -> bool:
            return not state

    takes = [Operation(0, "p", "take", 2, 0, 10), Operation(1, "q", "take", 1, 5, 15)]
    assert check(takes, AnyMember()).outcome == "ok"
    twice = [Operation(0, "p", "take", 2, 0, 10), Operation(1, "q", "take", 2, 20, 30)]
    assert check(twice, AnyMember()).outcome == "illegal"
