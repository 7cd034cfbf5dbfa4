"""What the lockstep machine draws: ids, owners, durations, faults, sends, and odd arguments.

The tables lean on the edges of each range and on values that make leases,
deadlines and availability collide. The odd arguments (``ODD_ARGUMENTS``) are the
edges of each argument's range on both sides, wrong types and arbitrary values, one
slot per argument, field or batch item; ``place`` puts a drawn one into a valid call
(``QueueLockstep.valid_arguments``), and ``Reshape`` makes an odd value from the
valid one it replaces. ``tests/stateful/lockstep.py`` is the machine that draws them.
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from hypothesis import strategies as st

import worker
from model.explore import forged as forged  # a ticket differing in one field: the model's rule
from tests.support import MAX_NOW as MAX_NOW  # the lockstep clock's bound, drawn here too
from tests.support import DictSubclass, IntSubclass, StrSubclass

IDS = ("a", "b", "c", "d")
OWNERS = ("c1", "c2")
JOB_ID = st.sampled_from(IDS)
OUTCOMES = ("ok", "retry", "permanent")
HOOK_POINTS = ("after-claim", "after-finish", "after-audit", "after-redrive", "after-commit")
TICKET_FIELDS = ("id", "qty", "owner", "token", "attempt", "lease_until")
# Each field of a ticket and the jobs column it must equal while the ticket is live.
TICKET_COLUMNS = (
    ("qty", "qty"),
    ("owner", "owner"),
    ("token", "token"),
    ("attempt", "attempts"),
    ("lease_until", "lease_until"),
)
PLACEHOLDER_TICKET: dict[str, Any] = dict.fromkeys(TICKET_FIELDS, 1) | {"id": "a", "owner": "c1"}

# Durations lean on the edges of their ranges and on short values that make
# leases, deadlines and availability collide with each other.
TTLS = st.one_of(st.sampled_from([1, 5, 100, 1000, 60000]), st.integers(1, 60000))
# None means "leave the argument out": the default must behave as documented.
LEASES = st.one_of(st.none(), st.sampled_from([1, 2, 10, 50, 1000]), st.integers(1, 60000))
# A budget of one is drawn often: its first lease that ends exhausts the job (quarantine).
BUDGETS = st.one_of(st.none(), st.just(1), st.integers(1, 4))
DEFAULT_LEASE_MS = 1000
# Half the calls that take a fault hook fail at one of its points (None: no fault).
FAULTS = st.one_of(st.none(), st.sampled_from(HOOK_POINTS))
OUTCOME = st.sampled_from(OUTCOMES)
# A delay is either a number or an aim relative to the job's deadline.
DELAYS = st.one_of(
    st.sampled_from(["to_deadline", "before_deadline"]),
    st.none(),  # the default delay
    st.sampled_from([0, 1]),
    st.integers(0, 60000),
)
# A finish_many item must say its delay_ms: the same aims and numbers, without the default.
ITEM_DELAYS = st.one_of(
    st.sampled_from(["to_deadline", "before_deadline"]),
    st.sampled_from([0, 1]),
    st.integers(0, 60000),
)
# Batches: up to six events or items, so that ids and tickets repeat inside one batch.
MAX_BATCH_ITEMS = 6
EVENTS = st.lists(st.tuples(JOB_ID, st.integers(1, 2)), max_size=MAX_BATCH_ITEMS)
LIMITS = st.integers(1, 5)
BOUNDARIES = ("available_at", "deadline", "lease_until")
# The second clock reading of run_once: an offset in ms, or an aim.
LATER = st.one_of(
    st.sampled_from(["same", "at_lease_end", "before_lease_end", "backwards", "invalid"]),
    st.integers(0, 100),
)
OWNER = st.sampled_from(OWNERS)
SENDS = (
    "ack",  # returns True
    "bad_ack",  # returns 1: BadAck, job stays leased
    "retryable",
    "permanent",
    "crash",  # an unclassified error: propagates, job stays leased
    "vandal",  # mutates the dict it got, then acks
    "enqueue_elsewhere",  # enqueues through another connection, then acks
)
SEND = st.sampled_from(SENDS)
JITTERS = st.one_of(st.sampled_from([0, 1, 0.0, 0.5, 1.0]), st.floats(0, 1))

# Odd values for one argument of one call: the edges of its range on both
# sides, wrong types and arbitrary ints. Both sides must agree on every one.
WRONG_TYPES: st.SearchStrategy[object] = st.sampled_from(
    [None, True, False, 1.0, "1", b"1", [], IntSubclass(1)]
)


def ints_around(lo: int, hi: int) -> st.SearchStrategy[object]:
    """An int argument ranging over ``lo .. hi``: its edges, wrong types, anything."""
    edges = sorted({lo - 1, lo, lo + 1, hi - 1, hi, hi + 1})
    return st.one_of(st.sampled_from(edges), WRONG_TYPES, st.integers())


IDENTIFIER_ODDITIES = st.one_of(
    st.sampled_from(["", "a", "c1", "a" * 64, "a" * 65, "a\n", "a b", "a.b", "\u00e9", "\u0661"]),
    st.builds(StrSubclass, st.just("a")),
    WRONG_TYPES,
    st.text(max_size=3),
)
JITTER_ODDITIES = st.one_of(
    st.sampled_from([-1e-9, 1 + 1e-9, 2, -1, 10**400]),  # outside 0..1, past float range
    st.sampled_from([0, 1, 0.0, 1.0]),  # its edges, int and float
    st.sampled_from([math.nan, math.inf, -math.inf]),
    WRONG_TYPES,
    st.floats(),
)
DICT_ODDITIES: st.SearchStrategy[object] = st.sampled_from(
    [None, [], {}, {"id": "a"}, {"qty": 1}, {"id": "a", "qty": 1, "extra": 0}, "a"]
)
TIME_ODDITIES = ints_around(0, MAX_NOW)


class Reshape(NamedTuple):
    """An odd value made from the valid one it replaces: ``Reshape('tuple')`` turns the
    valid list into a tuple of the same items (see ``reshaped``)."""

    how: str


class ListSubclass(list):  # type: ignore[type-arg]
    """A list that is not an exact list: a batch must be an exact list."""


# A batch is an exact list of 0..1000 items: its valid items in a tuple or a list
# subclass, or cycled to 1001 items (a rare draw); empty and 1000 items are its edges.
LIST_ODDITIES: st.SearchStrategy[object] = st.one_of(
    st.sampled_from(
        [
            Reshape("tuple"),
            Reshape("list subclass"),
            Reshape("1001 items"),
            Reshape("1000 items"),
            Reshape("empty"),
        ]
    ),
    st.sampled_from([None, {}, "a", 3]),
)
ITEM_ODDITIES = st.one_of(DICT_ODDITIES, st.just(Reshape("dict subclass")))
RESULT_ODDITIES = st.one_of(
    ITEM_ODDITIES,
    st.sampled_from(
        [
            {"ticket": PLACEHOLDER_TICKET, "outcome": "ok"},
            {"ticket": PLACEHOLDER_TICKET, "outcome": "ok", "delay_ms": 0, "status": "done"},
            {"ticket": PLACEHOLDER_TICKET, "outcome": "ok", "delay_ms": 0},  # well formed
        ]
    ),
)
OUTCOME_ODDITIES = st.sampled_from(["ok", "retry", "permanent", "OK", "done", "", None])
ODD_ARGUMENTS = {
    "enqueue.event": DICT_ODDITIES,
    "enqueue.event.id": IDENTIFIER_ODDITIES,
    "enqueue.event.qty": ints_around(1, 1000),
    "enqueue.now_ms": TIME_ODDITIES,
    "enqueue.ttl_ms": ints_around(1, 60000),
    "enqueue.max_attempts": ints_around(1, 16),
    "claim.owner": IDENTIFIER_ODDITIES,
    "claim.now_ms": TIME_ODDITIES,
    "claim.lease_ms": ints_around(1, 60000),
    "claim.fault": st.sampled_from(["after-claim", 1, True, None]),
    "finish.ticket": DICT_ODDITIES,
    "finish.ticket.id": IDENTIFIER_ODDITIES,
    "finish.ticket.qty": ints_around(1, 1000),
    "finish.ticket.owner": IDENTIFIER_ODDITIES,
    "finish.ticket.token": ints_around(1, 10**15),
    "finish.ticket.attempt": ints_around(1, 16),
    "finish.ticket.lease_until": ints_around(1, 10**15),
    "finish.outcome": OUTCOME_ODDITIES,
    "finish.now_ms": TIME_ODDITIES,
    "finish.delay_ms": ints_around(0, 60000),
    "redrive.job_id": IDENTIFIER_ODDITIES,
    "redrive.now_ms": TIME_ODDITIES,
    "redrive.ttl_ms": ints_around(1, 60000),
    "redrive.note": IDENTIFIER_ODDITIES,
    "retry_delay.attempt": ints_around(1, 16),
    "retry_delay.base_ms": ints_around(1, 60000),
    "retry_delay.cap_ms": ints_around(100, 60000),  # base_ms is 100 in the valid call
    "retry_delay.jitter": JITTER_ODDITIES,
    "run_once.owner": IDENTIFIER_ODDITIES,
    "run_once.jitter": JITTER_ODDITIES,
    "run_once.lease_ms": ints_around(1, 60000),
    "run_once.clock": st.sampled_from([None, 1, "clock"]),
    "run_once.send": st.sampled_from([None, True, "http://127.0.0.1/deliveries"]),
    # The batches: '*' is the place of one item in the valid batch of VALID_BATCH_SIZE.
    # The parts of an item are listed in the order they are checked.
    "enqueue_many.events": LIST_ODDITIES,
    "enqueue_many.events.*": ITEM_ODDITIES,
    "enqueue_many.events.*.id": IDENTIFIER_ODDITIES,
    "enqueue_many.events.*.qty": ints_around(1, 1000),
    "enqueue_many.now_ms": TIME_ODDITIES,
    "enqueue_many.ttl_ms": ints_around(1, 60000),
    "enqueue_many.max_attempts": ints_around(1, 16),
    "claim_many.owner": IDENTIFIER_ODDITIES,
    "claim_many.now_ms": TIME_ODDITIES,
    "claim_many.limit": ints_around(1, 1000),  # 0, 1001, True and False among them
    "claim_many.lease_ms": ints_around(1, 60000),
    "claim_many.fault": st.sampled_from(["after-claim", 1, True, None]),
    "finish_many.results": LIST_ODDITIES,
    "finish_many.results.*": RESULT_ODDITIES,
    "finish_many.results.*.ticket": ITEM_ODDITIES,
    "finish_many.results.*.ticket.id": IDENTIFIER_ODDITIES,
    "finish_many.results.*.ticket.owner": IDENTIFIER_ODDITIES,
    "finish_many.results.*.ticket.qty": ints_around(1, 1000),
    "finish_many.results.*.ticket.token": ints_around(1, 10**15),
    "finish_many.results.*.ticket.attempt": ints_around(1, 16),
    "finish_many.results.*.ticket.lease_until": ints_around(1, 10**15),
    "finish_many.results.*.outcome": OUTCOME_ODDITIES,
    "finish_many.results.*.delay_ms": ints_around(0, 60000),
    "finish_many.now_ms": TIME_ODDITIES,
    "finish_many.fault": st.sampled_from(["after-finish", 1, True, None]),
}
# One argument: (slot, value), e.g. ('retry_delay.jitter', 2) or ('enqueue_many.events.2.qty', 0).
VALID_BATCH_SIZE = 3


@functools.cache  # drawn through flatmap: build each strategy once, not per draw
def odd_argument_of(function: str) -> st.SearchStrategy[tuple[str, object]]:
    """One odd argument of ``function``: (slot, value), e.g. ('finish.outcome', 'OK').

    The slot is drawn first, evenly (``one_of`` over the slots favoured some
    slots tenfold over others), then an odd value for it."""
    slots = [slot for slot in ODD_ARGUMENTS if slot.partition(".")[0] == function]
    return st.sampled_from(slots).flatmap(
        lambda slot: st.tuples(slot_of_one_item(slot), ODD_ARGUMENTS[slot])
    )


def slot_of_one_item(slot: str) -> st.SearchStrategy[str]:
    """The slot, with its '*' (if any) the place of one item: 'events.*.id' -> 'events.2.id'."""
    if "*" not in slot:
        return st.just(slot)
    return st.sampled_from([slot.replace("*", str(index)) for index in range(VALID_BATCH_SIZE)])


@functools.cache  # drawn through flatmap: build each strategy once, not per draw
def odd_arguments_of(function: str) -> st.SearchStrategy[Sequence[tuple[str, object]]]:
    """One or two odd arguments (in two different slots) of a batch ``function``; the
    message must name the first in the order of the checks: signature order, a list
    item by item, each item fully (its shape, then its fields in order).

    Two odd parts next to each other in that order are drawn on purpose, in one item
    or in two neighbouring items: they pin the order of the checks inside a list.
    """
    anywhere = st.lists(
        odd_argument_of(function), min_size=1, max_size=2, unique_by=lambda odd: odd[0]
    )
    # The parts of one item, in the order they are checked (ODD_ARGUMENTS lists them so).
    order = [slot for slot in ODD_ARGUMENTS if slot.partition(".")[0] == function and "*" in slot]
    if not order:
        return anywhere
    places = range(VALID_BATCH_SIZE)
    next_in_one_item = st.tuples(st.integers(0, len(order) - 2), st.sampled_from(places)).flatmap(
        lambda chosen: odd_parts((order[chosen[0]], chosen[1]), (order[chosen[0] + 1], chosen[1]))
    )
    # A later part of one item and an earlier part of the next: the item's own part is
    # named first only if each item is checked fully before the next.
    in_two_neighbouring_items = st.tuples(
        st.lists(st.integers(0, len(order) - 1), min_size=2, max_size=2, unique=True),
        st.sampled_from(places[:-1]),
    ).flatmap(
        lambda chosen: odd_parts(
            (order[max(chosen[0])], chosen[1]), (order[min(chosen[0])], chosen[1] + 1)
        )
    )
    # One argument of the call itself (not of an item), alone: the item slots outnumber
    # them, and a later odd argument is only named when nothing before it is odd.
    own_arguments = [
        st.tuples(st.just(slot), values)
        for slot, values in ODD_ARGUMENTS.items()
        if slot.partition(".")[0] == function and "*" not in slot
    ]
    one_own_argument = st.one_of(own_arguments).map(lambda odd: [odd])
    return st.one_of(anywhere, next_in_one_item, in_two_neighbouring_items, one_own_argument)


def odd_parts(
    first: tuple[str, int], second: tuple[str, int]
) -> st.SearchStrategy[tuple[tuple[str, object], tuple[str, object]]]:
    """An odd value for each of two item slots, each at its place: ('results.*.outcome', 1)
    draws ('results.1.outcome', <an odd outcome>)."""
    return st.tuples(
        *(
            st.tuples(st.just(slot.replace("*", str(place))), ODD_ARGUMENTS[slot])
            for slot, place in (first, second)
        )
    )


# One call with odd arguments: one argument of a single call, or one or two of a batch.
# The function is drawn first, evenly, so that each one's validation is exercised as
# often; single calls and batches have a rule each (about 70 slots in all).
ODD_SINGLE_CALLS = st.sampled_from(
    ["enqueue", "claim", "finish", "redrive", "retry_delay", "run_once"]
).flatmap(lambda function: odd_argument_of(function).map(lambda odd: [odd]))
ODD_BATCH_CALLS = st.sampled_from(["enqueue_many", "claim_many", "finish_many"]).flatmap(
    odd_arguments_of
)


def generic(slot: str) -> str:
    """A slot without its item's place: 'finish_many.results.2.outcome' -> '...results.*...'."""
    return re.sub(r"\.\d+(?=\.|$)", ".*", slot)


class BrokenPathLike(os.PathLike[str]):
    """A PathLike whose ``__fspath__`` gives no path."""

    def __fspath__(self) -> Any:
        return 5


# Values open_queue must refuse with ValueError: no path, or an in-memory database.
NOT_A_QUEUE_PATH: list[object] = [
    None,
    7,
    b"queue.sqlite",
    "",
    ":memory:",
    Path(":memory:"),
    "queue\x00.sqlite",
    BrokenPathLike(),
]

# What the model cannot hold (a connection, a file): the lockstep checks these in the words
# of model.rules, the same message format as every other malformed argument.
NOT_A_CONNECTION: list[object] = [None, 3, "queue.sqlite", b"queue.sqlite", object()]


# Each DB function with valid arguments after ``con`` (run_once's clock is read once,
# before claim checks the connection).
def calls_with(con: object, now: int) -> dict[str, Callable[[], object]]:
    def send(delivery: dict[str, Any]) -> object:
        return True

    return {
        "enqueue": lambda: worker.enqueue(con, {"id": "a", "qty": 1}, now, 1000),  # type: ignore[arg-type]
        "claim": lambda: worker.claim(con, "c1", now),  # type: ignore[arg-type]
        "finish": lambda: worker.finish(con, dict(PLACEHOLDER_TICKET), "ok", now),  # type: ignore[arg-type]
        "redrive": lambda: worker.redrive(con, "a", now, 1000, "ops"),  # type: ignore[arg-type]
        "run_once": lambda: worker.run_once(con, "c1", lambda: now, send, 0.5),  # type: ignore[arg-type]
        "enqueue_many": lambda: worker.enqueue_many(con, [{"id": "a", "qty": 1}], now, 1000),  # type: ignore[arg-type]
        "claim_many": lambda: worker.claim_many(con, "c1", now, 2),  # type: ignore[arg-type]
        "finish_many": lambda: worker.finish_many(con, [], now),  # type: ignore[arg-type]
    }


DB_FUNCTIONS = sorted(calls_with(None, 0))


def place(arguments: dict[str, Any], path: str, value: object) -> None:
    """Set the value at the dotted ``path`` of ``arguments``: "ticket.qty" is
    ``arguments["ticket"]["qty"]``, "results.2.ticket" is ``arguments["results"][2]["ticket"]``
    (copying every inner dict and list on the way). A ``Reshape`` reshapes the value there."""
    arguments.update(replaced(arguments, path, value))


def replaced(container: Any, path: str, value: object) -> Any:
    """A copy of ``container`` (a dict or a list) with ``value`` placed at ``path``."""
    head, _, rest = path.partition(".")
    key: Any = int(head) if head.isdigit() else head
    copied = list(container) if type(container) is list else dict(container)
    if rest:
        copied[key] = replaced(copied[key], rest, value)
    else:
        copied[key] = reshaped(value, copied[key]) if isinstance(value, Reshape) else value
    return copied


def reshaped(reshape: Reshape, valid: Any) -> object:
    """The odd value ``reshape`` makes of the ``valid`` value it replaces."""
    if reshape.how == "tuple":
        return tuple(valid)
    if reshape.how == "list subclass":
        return ListSubclass(valid)
    if reshape.how == "dict subclass":
        return DictSubclass(valid)
    if reshape.how == "empty":
        return []
    count = int(reshape.how.split()[0])  # "1000 items", "1001 items": the valid ones, cycled
    return [valid[index % len(valid)] for index in range(count)]


# --- What the machine's rules draw, beyond the tables above ---------------------------

FIRST_JOBS = st.lists(st.tuples(JOB_ID, st.integers(1, 2), TTLS, BUDGETS), min_size=1, max_size=3)
QTYS = st.integers(1, 2)
TICKET_FIELD = st.sampled_from(TICKET_FIELDS)
CLOCK_STEPS = st.one_of(st.integers(0, 3), st.integers(0, 300), st.integers(0, 70000))
BOUNDARY = st.sampled_from(BOUNDARIES)
AROUND = st.sampled_from([0, -1, 1])  # on a boundary, or one ms either side of it
NOTES = st.sampled_from(["ops", "fixed-address"])
RUN_VERBS = st.sampled_from(["run_once", "run_file"])
ATTEMPTS = st.integers(1, 16)
BASES = st.one_of(st.sampled_from([1, 100, 60000]), st.integers(1, 60000))
CAPS_ABOVE_BASE = st.one_of(st.just(0), st.integers(0, 60000))
ANY_JITTERS = st.one_of(JITTERS, JITTER_ODDITIES)
AS_PATHLIKE = st.booleans()
NO_QUEUE_PLACES = st.sampled_from(["missing", "folder", "", ":memory:"])
NOT_A_QUEUE_PATHS = st.sampled_from(NOT_A_QUEUE_PATH)
DB_FUNCTION = st.sampled_from(DB_FUNCTIONS)
ODD_CONNECTIONS = st.one_of(st.sampled_from(NOT_A_CONNECTION), st.just("open transaction"))
