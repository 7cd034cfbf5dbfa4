"""Bad input at scale: every public function of worker.py, called with arbitrary values.

For each call hypothesis picks which arguments to spoil and draws, for each argument,
either a well-formed value (aimed at the rows of a prepared queue, so that a valid
call really changes something) or junk: wrong types, bools, huge and negative ints,
floats with NaN and infinities, ``str``/``int``/``float``/``dict`` subclasses, dicts
with missing or extra keys or junk values, non-ASCII and control characters, bytes,
nested containers. ``model.rules``, the contract's argument rules written apart from
worker.py, says whether the call is malformed. Then:

1. A malformed call raises ``ValueError``. A well-formed one raises only what the
   contract lets it: ``Conflict`` from enqueue, ``ValueError`` from redrive for a job
   that is not dead, ``FileNotFoundError`` from run_file, and from run_once what our
   own ``clock`` and ``send`` make it raise.
2. After a ``ValueError`` every row is as it was and no hook was called (except after
   run_once's second clock reading, which the contract puts after the claim's commit).
3. No transaction is left open on the borrowed connection.
4. No argument is mutated: a NaN-safe, type-exact fingerprint (key order included)
   is the same before and after.

The examples per function are a fraction of the active profile's ``max_examples``, so
``HYPOTHESIS_PROFILE=fuzz`` turns this into a long campaign; the calls tried are
counted and printed when the module ends.

The second half checks, by reading the source (AST), that no SQL statement in
worker.py, courier/ or bench/ is built from values: every ``execute`` gets a string
made only of literals and module constants, and passes parameters for its
placeholders.
"""

from __future__ import annotations

import ast
import math
import os
import re
import shutil
import sqlite3
import tempfile
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pgworker
import worker
from chaos import operator
from courier import inbox, queueview
from courier.commands import redrive
from model.rules import ARGUMENT_RULES, MAX_TIME_MS
from tests import support
from tests.support import HookLog, RecordingSend, ScriptedClock

ACTIVE = settings.default
assert ACTIVE is not None
EXAMPLES = max(20, ACTIVE.max_examples // 16)  # per function: 250 in ci
T0 = 1_000_000
LEASE_MS = 1000
IDS = ("leased-1", "done-1", "dead-1", "pending-1", "new-1")
OWNERS = ("c1", "c2", "c3")
DEAD_ID = "dead-1"
SCRATCH = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
TALLY: Counter[str] = Counter()

Rows = dict[str, list[tuple[Any, ...]]]


class FloatSubclass(float):
    """A float that is not an exact float: jitter rejects it."""


class SendCrash(Exception):
    """An error our send raises that the contract does not classify: it propagates."""


# --- The prepared queue ------------------------------------------------------------


@dataclass
class Queue:
    """A queue file with one job in each state, and the rows to reset it to."""

    path: Path
    con: sqlite3.Connection
    in_transaction: sqlite3.Connection  # another connection, with a transaction open
    template: Rows
    live_ticket: dict[str, Any]
    calls: dict[str, st.SearchStrategy[dict[str, object]]] = field(default_factory=dict)

    @property
    def fresh_path(self) -> Path:
        """A path where no file exists (open_queue creates it; run_file refuses it)."""
        return self.path.with_name("fresh.sqlite")


def read_rows(con: sqlite3.Connection) -> Rows:
    """Every row of both tables and of ``sqlite_sequence``, in order."""
    return {
        "jobs": con.execute("SELECT * FROM jobs ORDER BY seq").fetchall(),
        "redrives": con.execute("SELECT * FROM redrives ORDER BY seq").fetchall(),
        "sqlite_sequence": con.execute("SELECT * FROM sqlite_sequence ORDER BY name").fetchall(),
    }


def prepare(con: sqlite3.Connection) -> dict[str, Any]:
    """Jobs leased-1 (leased to c1 until T0+1000), done-1, dead-1 (exhausted), pending-1."""
    assert worker.enqueue(con, {"id": "leased-1", "qty": 7}, T0, 60_000)
    live = worker.claim(con, "c1", T0, LEASE_MS)
    assert live is not None and live["id"] == "leased-1"
    assert worker.enqueue(con, {"id": "done-1", "qty": 3}, T0, 60_000)
    done = worker.claim(con, "c2", T0, LEASE_MS)
    assert done is not None and worker.finish(con, done, "ok", T0 + 1) == "done"
    assert worker.enqueue(con, {"id": DEAD_ID, "qty": 9}, T0, 60_000, max_attempts=1)
    dead = worker.claim(con, "c2", T0, LEASE_MS)
    assert dead is not None and worker.finish(con, dead, "retry", T0 + 2) == "dead"
    assert worker.enqueue(con, {"id": "pending-1", "qty": 5}, T0, 60_000)
    return live


def reset(queue: Queue) -> None:
    """Put the template rows back, in one transaction (the test's own SQL)."""
    con = queue.con
    con.execute("BEGIN IMMEDIATE")
    for table in ("jobs", "redrives", "sqlite_sequence"):
        con.execute(f"DELETE FROM {table}")  # table names are the literals above
        for row in queue.template[table]:
            marks = ", ".join("?" * len(row))
            con.execute(f"INSERT INTO {table} VALUES ({marks})", row)
    con.execute("COMMIT")
    queue.fresh_path.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def queue(request: pytest.FixtureRequest) -> Iterator[Queue]:
    """One prepared queue for the whole module (hypothesis reuses it across examples)."""
    folder = Path(tempfile.mkdtemp(prefix="arbitrary-inputs-", dir=SCRATCH))
    path = folder / "queue.sqlite"
    con = worker.open_queue(path)
    live = prepare(con)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN")  # deferred, no statement yet: holds no lock at all
    try:
        yield Queue(path, con, other, read_rows(con), live)
    finally:
        other.execute("ROLLBACK")
        other.close()
        con.close()
        shutil.rmtree(folder, ignore_errors=True)
        _report_tally(request)


def _report_tally(request: pytest.FixtureRequest) -> None:
    """Print how many calls were tried, past pytest's output capture."""
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
    if reporter is None or capture is None or not TALLY:
        return
    total = sum(n for key, n in TALLY.items() if ":" not in key)
    details = ", ".join(f"{key} {n}" for key, n in sorted(TALLY.items()))
    with capture.global_and_fixture_disabled():
        reporter.write_line(f"\narbitrary inputs: {total} calls of worker.py tried ({details})")


# --- Junk ------------------------------------------------------------------------------

ODD_TEXT = [
    "",
    "a" * 65,
    "a b",
    "a\n",
    "\na",
    "a.b",
    "\x00",
    "\u00e9",
    "\u0661",
    "\uff41",
    "\ud800",
]
ODD_INTS = [-1, 0, 1, 2**63, -(2**63) - 1, 10**15, 10**15 + 1, MAX_TIME_MS + 1, 10**30, -(10**30)]
ODD_FLOATS = [math.nan, -math.nan, math.inf, -math.inf, -0.0, 0.0, 1.0, 0.5, 1e-300, 1e300]

LEAVES: st.SearchStrategy[object] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(ODD_INTS),
    st.floats(),
    st.sampled_from(ODD_FLOATS),
    st.text(max_size=8),
    st.sampled_from(ODD_TEXT),
    st.binary(max_size=8),
    st.builds(bytearray, st.binary(max_size=4)),
    st.builds(support.StrSubclass, st.sampled_from(["a", "c1", DEAD_ID, "ok"])),
    st.builds(support.IntSubclass, st.integers(-2, 2)),
    st.builds(FloatSubclass, st.floats(0, 1)),
    st.complex_numbers(max_magnitude=2),
    st.builds(Decimal, st.sampled_from(["0.5", "1", "NaN", "-Infinity"])),
    st.builds(Fraction, st.integers(0, 3), st.integers(1, 3)),
    st.builds(object),
)
JUNK: st.SearchStrategy[object] = st.recursive(
    LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.tuples(children, children),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers()), children, max_size=3),
        st.builds(support.DictSubclass, st.dictionaries(st.text(max_size=3), children, max_size=2)),
    ),
    max_leaves=6,
)


# Values that once slipped through as OverflowError / TypeError (see the end of the file).
HUGE_INTS = st.sampled_from([10**400, -(10**400)])
JITTER_JUNK = st.one_of(JUNK, HUGE_INTS)
# Arbitrary strings are left out: as paths they would create files where the test runs.
PATH_JUNK = st.one_of(
    JUNK.filter(lambda value: type(value) is not str),
    st.sampled_from(["", ":memory:", "queue\x00.sqlite"]),
    st.builds(lambda: BrokenPathLike()),
)


def spoiled(record: dict[str, Any]) -> st.SearchStrategy[object]:
    """A dict argument gone wrong: a key dropped or added, a junk value, a subclass."""
    keys = sorted(record)
    return st.one_of(
        st.sampled_from(keys).map(lambda key: {k: v for k, v in record.items() if k != key}),
        JUNK.map(lambda extra: {**record, "extra": extra}),
        st.tuples(st.sampled_from(keys), JUNK).map(lambda kv: {**record, kv[0]: kv[1]}),
        st.just(support.DictSubclass(record)),
        st.just(OrderedDict(record)),
        st.just(list(record.items())),
    )


# --- Well-formed values ------------------------------------------------------------------

IDENTIFIERS = st.one_of(st.sampled_from(IDS), st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True))
TIMES = st.one_of(
    st.sampled_from([T0, T0 + 1, T0 + LEASE_MS - 1, T0 + LEASE_MS, T0 + 60_000, 0, MAX_TIME_MS]),
    st.integers(0, MAX_TIME_MS),
)
DURATIONS = st.one_of(st.sampled_from([1, 60_000]), st.integers(1, 60_000))
EVENTS = st.fixed_dictionaries(
    {"id": st.sampled_from(IDS), "qty": st.sampled_from([7, 3, 9, 5, 1, 1000])}
)


def tickets(live: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """The live ticket of leased-1, or a well-formed ticket that differs in one field."""
    others = {
        "id": st.sampled_from(IDS),
        "qty": st.integers(1, 1000),
        "owner": st.sampled_from(OWNERS),
        "token": st.integers(1, 10**15),
        "attempt": st.integers(1, 16),
        "lease_until": st.integers(1, 10**15),
    }
    return st.one_of(
        st.just(live).map(dict),
        st.sampled_from(sorted(others)).flatmap(
            lambda key: others[key].map(lambda value: {**live, key: value})
        ),
    )


class ListSubclass(list):  # type: ignore[type-arg]
    """A list that is not an exact list: a batch rejects it."""


def batches(items: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    """A well-formed batch: up to four items."""
    return st.lists(items, max_size=4)


def spoiled_batch(
    items: st.SearchStrategy[Any], bad_item: st.SearchStrategy[object]
) -> st.SearchStrategy[object]:
    """A batch gone wrong: one bad item somewhere, not a list, a list subclass, too long."""
    return st.one_of(
        st.tuples(batches(items), bad_item, st.integers(0, 4)).map(
            lambda t: [*t[0][: t[2]], t[1], *t[0][t[2] :]]
        ),
        batches(items).map(tuple),
        batches(items).map(ListSubclass),
        items.map(lambda item: [item] * 1001),
    )


def results(live: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """An item of finish_many: a ticket, an outcome and a delay, each well formed."""
    return st.fixed_dictionaries(
        {
            "ticket": tickets(live),
            "outcome": st.sampled_from(worker.OUTCOMES),
            "delay_ms": st.integers(0, 60_000),
        }
    )


def spoiled_result(live: dict[str, Any]) -> st.SearchStrategy[object]:
    """An item of finish_many gone wrong, as a whole or in its ticket."""
    return st.one_of(
        results(live).flatmap(spoiled),
        st.tuples(results(live), tickets(live).flatmap(spoiled)).map(
            lambda t: {**t[0], "ticket": t[1]}
        ),
    )


def clocks() -> st.SearchStrategy[object]:
    """A scripted clock: a first reading, then a later, an earlier or an odd one."""
    first = st.one_of(st.sampled_from([T0 + LEASE_MS, T0, T0 + 60_000]), JUNK)
    return st.tuples(first, st.integers(-1, 2_000), JUNK, st.booleans()).map(
        lambda t: ScriptedClock(t[0], (t[0] + t[1]) if t[3] and type(t[0]) is int else t[2])
    )


def sends() -> st.SearchStrategy[object]:
    """A recording send that acks, answers junk, or raises a classified or unknown error."""
    answers = st.one_of(
        st.just(True),
        JUNK,
        st.builds(worker.Retryable),
        st.builds(worker.Permanent),
        st.builds(SendCrash),
    )
    return answers.map(RecordingSend)


def well_formed(name: str, queue: Queue) -> st.SearchStrategy[object]:
    """A value the contract accepts for the argument ``name``."""
    if name == "con":
        return st.just(queue.con)
    if name == "path":
        return st.sampled_from(
            [queue.path, str(queue.path), queue.fresh_path, str(queue.fresh_path)]
        )
    return {
        "event": EVENTS,
        "now_ms": TIMES,
        "ttl_ms": DURATIONS,
        "lease_ms": DURATIONS,
        "max_attempts": st.integers(1, 16),
        "owner": st.sampled_from(OWNERS),
        "fault": st.one_of(st.none(), st.builds(HookLog)),
        "ticket": tickets(queue.live_ticket),
        "outcome": st.sampled_from(worker.OUTCOMES),
        "delay_ms": st.integers(0, 60_000),
        "job_id": IDENTIFIERS,
        "note": IDENTIFIERS,
        "jitter": st.one_of(st.sampled_from([0, 1, 0.0, 0.5, 1.0]), st.floats(0, 1)),
        "clock": clocks(),
        "send": sends(),
        "attempt": st.integers(1, 16),
        "base_ms": DURATIONS,
        "cap_ms": DURATIONS,
        "events": batches(EVENTS),
        "limit": st.one_of(st.sampled_from([1, 2, 1000]), st.integers(1, 1000)),
        "results": batches(results(queue.live_ticket)),
        "value": IDENTIFIERS,
    }[name]


def junk_for(name: str, queue: Queue) -> st.SearchStrategy[object]:
    """A value that is probably wrong for ``name`` (the oracle decides)."""
    if name == "con":
        return st.one_of(JUNK, st.just(queue.in_transaction), st.just(queue.path))
    if name == "path":
        return PATH_JUNK
    if name == "jitter":
        return JITTER_JUNK
    if name == "event":
        return st.one_of(JUNK, EVENTS.flatmap(spoiled))
    if name == "ticket":
        return st.one_of(JUNK, tickets(queue.live_ticket).flatmap(spoiled))
    if name == "events":
        return st.one_of(JUNK, spoiled_batch(EVENTS, st.one_of(JUNK, EVENTS.flatmap(spoiled))))
    if name == "results":
        live = queue.live_ticket
        return st.one_of(JUNK, spoiled_batch(results(live), st.one_of(JUNK, spoiled_result(live))))
    return JUNK


# --- The functions and the oracle -------------------------------------------------------

SIGNATURES: dict[str, tuple[str, ...]] = {
    "retry_delay": ("attempt", "base_ms", "cap_ms", "jitter"),
    "open_queue": ("path",),
    "enqueue": ("con", "event", "now_ms", "ttl_ms", "max_attempts"),
    "claim": ("con", "owner", "now_ms", "lease_ms", "fault"),
    "finish": ("con", "ticket", "outcome", "now_ms", "delay_ms", "fault"),
    "redrive": ("con", "job_id", "now_ms", "ttl_ms", "note", "fault"),
    "run_once": ("con", "owner", "clock", "send", "jitter", "lease_ms"),
    "run_file": ("path", "owner", "clock", "send", "jitter", "lease_ms"),
    "enqueue_many": ("con", "events", "now_ms", "ttl_ms", "max_attempts"),
    "claim_many": ("con", "owner", "now_ms", "limit", "lease_ms", "fault"),
    "finish_many": ("con", "results", "now_ms", "fault"),
    "is_identifier": ("value",),
    "classify_send": ("send", "ticket", "jitter"),
}


def path_accepted(function: str, value: object) -> bool:
    """``open_queue`` takes a str or PathLike naming a file (not in memory, no NUL);
    ``run_file`` takes any str or PathLike and answers FileNotFoundError if it is no file."""
    if type(value) is not str and not isinstance(value, os.PathLike):
        return False
    try:
        name = os.fsdecode(os.fspath(value))
    except TypeError:  # a PathLike whose __fspath__ gives no path
        return False
    return function == "run_file" or (name not in ("", ":memory:") and "\x00" not in name)


def malformed(function: str, arguments: dict[str, object]) -> list[str]:
    """The arguments the contract calls malformed (``model.rules`` for the named ones).

    ``is_identifier`` takes any value and answers whether it is an identifier: none is
    malformed (``check_well_formed`` holds its answer against ``model.rules``).
    """
    if function == "is_identifier":
        return []
    bad = []
    for name, value in arguments.items():
        if name == "con":
            accepted = isinstance(value, sqlite3.Connection) and not value.in_transaction
        elif name == "path":
            accepted = path_accepted(function, value)
        else:
            accepted = ARGUMENT_RULES[name].accepts(value, arguments)
        if not accepted:
            bad.append(name)
    return bad


def fingerprint(value: object) -> object:
    """What a value looks like, deeply: type-exact, NaN-safe, dict key order included.

    Our own instruments (clocks, sends, hooks) and opaque objects count by identity:
    they are meant to change, and ``object()`` has nothing else to compare.
    """
    kind = type(value).__qualname__
    if isinstance(value, float):
        return kind, float.__repr__(value)
    if isinstance(value, int):
        return kind, int.__repr__(value)
    if isinstance(value, str | bytes | bytearray | complex | Decimal | Fraction | Path):
        return kind, repr(value)
    if isinstance(value, dict):
        return kind, tuple((fingerprint(k), fingerprint(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return kind, tuple(fingerprint(item) for item in value)
    return kind, id(value)


@dataclass
class Call:
    """One call: the function, its arguments, what came back or what was raised."""

    function: str
    arguments: dict[str, object]
    result: object = None
    error: BaseException | None = None

    def run(self) -> None:
        target: Callable[..., object] = getattr(worker, self.function)
        try:
            self.result = target(*self.arguments.values())
        except Exception as error:
            self.error = error


def hooks_called(arguments: dict[str, object]) -> list[str]:
    fault = arguments.get("fault")
    return fault.points if isinstance(fault, HookLog) else []


def sends_made(arguments: dict[str, object]) -> int:
    send = arguments.get("send")
    return len(send.deliveries) if isinstance(send, RecordingSend) else 0


def clock_reads(arguments: dict[str, object]) -> int:
    clock = arguments.get("clock")
    return clock.calls if isinstance(clock, ScriptedClock) else 0


def allowed_when_well_formed(call: Call) -> tuple[type[BaseException], ...]:
    """The exceptions a well-formed call may raise, by the contract."""
    return {
        "enqueue": (worker.Conflict,),
        "redrive": (ValueError,),
        "run_once": (ValueError, worker.BadAck, SendCrash),
        "run_file": (ValueError, worker.BadAck, SendCrash, FileNotFoundError),
        "classify_send": (worker.BadAck, SendCrash),
    }.get(call.function, ())


def check_well_formed(call: Call, queue: Queue, before: Rows) -> None:
    """A well-formed call returns, or raises only what the contract names for it."""
    if call.error is None:
        if call.function == "retry_delay":
            cap = call.arguments["cap_ms"]
            assert type(call.result) is int and type(cap) is int and 0 <= call.result <= cap
        if call.function == "is_identifier":
            value = call.arguments["value"]
            assert call.result is ARGUMENT_RULES["owner"].accepts(value, call.arguments)
        if isinstance(call.result, sqlite3.Connection):
            call.result.close()
        return
    assert isinstance(call.error, allowed_when_well_formed(call)), repr(call.error)
    if call.function == "redrive":
        assert call.arguments["job_id"] != DEAD_ID, "a dead job must be redriven"
    if isinstance(call.error, worker.Conflict | FileNotFoundError) or (
        isinstance(call.error, ValueError) and clock_reads(call.arguments) < 2
    ):
        assert read_rows(queue.con) == before


def check_call(call: Call, queue: Queue) -> None:
    """Run ``call`` on the reset queue and check the four promises."""
    reset(queue)
    before = read_rows(queue.con)
    prints = {name: fingerprint(value) for name, value in call.arguments.items()}
    bad = malformed(call.function, call.arguments)
    call.run()
    TALLY[call.function] += 1
    TALLY[f"{'malformed' if bad else 'well-formed'}:{type(call.error).__name__}"] += 1
    if bad:
        assert isinstance(call.error, ValueError), f"{bad} malformed, got {call.error!r}"
        assert read_rows(queue.con) == before, f"{bad} malformed, yet rows changed"
        assert hooks_called(call.arguments) == []
        assert sends_made(call.arguments) == 0, "a malformed call sent"
        # run_once reads the clock for claim, which is the one to check the connection.
        assert clock_reads(call.arguments) <= (1 if bad == ["con"] else 0)
    else:
        check_well_formed(call, queue, before)
    assert not queue.con.in_transaction, "a transaction was left open"
    assert queue.in_transaction.in_transaction, "the other connection's transaction was touched"
    after = {name: fingerprint(value) for name, value in call.arguments.items()}
    assert after == prints, "an argument was mutated"


def arguments_of(function: str, queue: Queue) -> st.SearchStrategy[dict[str, object]]:
    """All the arguments of one call: up to two of them spoiled, the rest well formed.

    Built once per function and kept (building strategies is not free).
    """
    if function not in queue.calls:
        names = SIGNATURES[function]
        valid = {name: well_formed(name, queue) for name in names}
        junk = {name: junk_for(name, queue) for name in names}
        queue.calls[function] = st.sets(st.sampled_from(names), max_size=2).flatmap(
            lambda spoil: st.fixed_dictionaries(
                {name: junk[name] if name in spoil else valid[name] for name in names}
            )
        )
    return queue.calls[function]


@pytest.mark.parametrize("function", sorted(SIGNATURES))
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_arbitrary_arguments_raise_only_the_contracts_errors_and_change_nothing(
    queue: Queue, function: str, data: st.DataObject
) -> None:
    drawn = data.draw(arguments_of(function, queue), label="arguments")
    check_call(Call(function, {name: drawn[name] for name in SIGNATURES[function]}), queue)


def test_every_public_function_is_exercised() -> None:
    assert sorted(SIGNATURES) == sorted(
        name for name in worker.__all__ if callable(getattr(worker, name)) and name.islower()
    )


# --- Disagreements this campaign found, now fixed and pinned ---------------------------------


class BrokenPathLike(os.PathLike[str]):
    """A PathLike whose ``__fspath__`` returns neither str nor bytes."""

    def __fspath__(self) -> Any:
        return 5


@pytest.mark.parametrize("jitter", [10**400, -(10**400)], ids=["10**400", "-10**400"])
def test_an_int_jitter_beyond_float_range_is_a_value_error(jitter: int) -> None:
    with pytest.raises(ValueError):
        worker.retry_delay(1, 1, 1, jitter)


@pytest.mark.parametrize("function", ["open_queue", "run_file"])
def test_a_pathlike_that_returns_no_path_is_a_value_error(function: str) -> None:
    call: Callable[..., object] = getattr(worker, function)
    arguments: list[object] = [BrokenPathLike()]
    if function == "run_file":
        arguments += ["c1", ScriptedClock(), RecordingSend(), 0.5]
    with pytest.raises(ValueError):
        call(*arguments)


# --- SQL is never built from values -------------------------------------------------------

SQL_MODULES: list[ModuleType] = [worker, pgworker, queueview, inbox, redrive, operator]
SQL_METHODS = frozenset({"execute", "executemany", "executescript"})
PLACEHOLDER = re.compile(r"\?|[:@$][A-Za-z_]")


def _is_constant(node: ast.AST, constants: set[str]) -> bool:
    """True if ``node`` is built only of literals and module constants (no values)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id in constants
    if isinstance(node, ast.JoinedStr):
        return all(_is_constant(part, constants) for part in node.values)
    if isinstance(node, ast.FormattedValue):
        return _is_constant(node.value, constants)
    if isinstance(node, ast.Tuple | ast.List):
        return all(_is_constant(item, constants) for item in node.elts)
    if isinstance(node, ast.Dict):
        parts = [*node.keys, *node.values]
        return all(part is not None and _is_constant(part, constants) for part in parts)
    if isinstance(node, ast.DictComp):  # {q: f"... {q} ..." for q in CONSTANT}
        loops = node.generators
        bound = [node for loop in loops for node in ast.walk(loop.target)]
        names = {node.id for node in bound if isinstance(node, ast.Name)}
        return all(_is_constant(loop.iter, constants) for loop in loops) and all(
            _is_constant(part, constants | names) for part in (node.key, node.value)
        )
    if isinstance(node, ast.Subscript):  # one of a constant collection's texts
        return _is_constant(node.value, constants)
    if isinstance(node, ast.IfExp):  # a choice between constants: the test picks no text
        return _is_constant(node.body, constants) and _is_constant(node.orelse, constants)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _is_constant(node.left, constants) and _is_constant(node.right, constants)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        joins_literal = node.func.attr == "join" and isinstance(node.func.value, ast.Constant)
        if joins_literal:
            return all(_is_constant(arg, constants) for arg in node.args)
        if node.func.attr == "items" and not node.args and not node.keywords:
            return _is_constant(node.func.value, constants)  # a constant dict's pairs
        # CONSTANT.replace("literal", "literal"): a constant text with a literal swapped
        swaps_literals = node.func.attr == "replace" and not node.keywords
        return (
            swaps_literals
            and _is_constant(node.func.value, constants)
            and all(isinstance(arg, ast.Constant) for arg in node.args)
        )
    return False


def _assignment(node: ast.stmt) -> tuple[str, ast.expr] | None:
    """``(name, value)`` of a module-level ``NAME = value`` (annotated or not), else None."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target, value = node.targets[0], node.value
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        target, value = node.target, node.value
    else:
        return None
    return (target.id, value) if isinstance(target, ast.Name) else None


def module_constants(tree: ast.Module) -> tuple[set[str], dict[str, ast.expr]]:
    """Module-level names bound once to a constant expression; and loop names over them.

    Returns the constant names and, for each loop name (``for sql in SCHEMA``), the
    constant it iterates over.
    """
    assignments = [pair for node in tree.body if (pair := _assignment(node)) is not None]
    bound = Counter(name for name, _ in assignments)
    constants: set[str] = set()
    for name, value in assignments:
        if bound[name] == 1 and _is_constant(value, constants):
            constants.add(name)
    loops: dict[str, ast.expr] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.For | ast.comprehension):
            continue
        if isinstance(node.target, ast.Name) and _is_constant(node.iter, constants):
            loops[node.target.id] = node.iter
    return constants | set(loops), loops


@dataclass(frozen=True)
class SqlSite:
    """One place a SQL string is handed over, and whether parameters go with it."""

    line: int
    sql: ast.expr
    has_parameters: bool


def _calls(node: ast.AST) -> Iterator[ast.Call]:
    return (child for child in ast.walk(node) if isinstance(child, ast.Call) and child.args)


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _enclosing_functions(tree: ast.Module) -> dict[int, ast.FunctionDef]:
    """For each call (by ``id``), the innermost ``def`` it is written in."""
    enclosing: dict[int, ast.FunctionDef] = {}
    for node in ast.walk(tree):  # outer functions come first, inner ones overwrite
        if isinstance(node, ast.FunctionDef):
            enclosing.update((id(call), node) for call in _calls(node))
    return enclosing


def _parameter_position(function: ast.FunctionDef | None, sql: ast.expr) -> int | None:
    """The call-site position of ``sql`` if it is a parameter of ``function`` (after self)."""
    if function is None or not isinstance(sql, ast.Name):
        return None
    names = [arg.arg for arg in function.args.args]
    if sql.id not in names:
        return None
    skip = 1 if names[0] in ("self", "cls") else 0
    return names.index(sql.id) - skip


def sql_sites(tree: ast.Module) -> list[SqlSite]:
    """Where SQL text comes from: every ``execute``-like call whose SQL is written there.

    When the SQL is a parameter of the function around the call (a pass-through such
    as ``_row(con, sql, params)``), the sites are that function's callers instead,
    and so on up the chain.
    """
    enclosing = _enclosing_functions(tree)
    positions = dict.fromkeys(SQL_METHODS, 0)
    for _ in range(len(enclosing) + 1):  # each round finds a new pass-through or ends
        sites, found = [], False
        for call in _calls(tree):
            position = positions.get(_called_name(call))
            if position is None or len(call.args) <= position:
                continue
            sql = call.args[position]
            function = enclosing.get(id(call))
            passed = _parameter_position(function, sql)
            if function is not None and passed is not None:
                found = found or function.name not in positions
                positions[function.name] = passed
                continue
            sites.append(SqlSite(call.lineno, sql, len(call.args) > position + 1))
        if not found:
            return sorted(sites, key=lambda site: site.line)
    raise AssertionError("unreachable: the pass-through chain is longer than the functions")


def sql_texts(sql: ast.expr, namespace: dict[str, Any]) -> list[str]:
    """The SQL text(s) a constant expression stands for (each element of a tuple;
    for ``STATEMENTS[key]``, every value of ``STATEMENTS``; for ``A if test else B``,
    both)."""
    if isinstance(sql, ast.IfExp):
        return sql_texts(sql.body, namespace) + sql_texts(sql.orelse, namespace)
    picked = isinstance(sql, ast.Subscript)
    container = sql.value if isinstance(sql, ast.Subscript) else sql
    value = eval(compile(ast.Expression(container), "<sql>", "eval"), namespace)
    if picked and isinstance(value, dict):
        value = tuple(value.values())
    return [str(text) for text in value] if isinstance(value, tuple) else [str(value)]


def sql_problems(source: str, namespace: dict[str, Any]) -> list[str]:
    """Every SQL site of ``source`` that is built from a value or lacks its parameters.

    ``namespace`` is the module's globals, to read the constant SQL texts.
    """
    tree = ast.parse(source)
    constants, loops = module_constants(tree)
    problems = []
    for site in sql_sites(tree):
        if not _is_constant(site.sql, constants):
            problems.append(f"line {site.line}: SQL built from a value")
            continue
        expression = (
            loops.get(site.sql.id, site.sql) if isinstance(site.sql, ast.Name) else site.sql
        )
        for text in sql_texts(expression, namespace):
            if PLACEHOLDER.search(text) and not site.has_parameters:
                problems.append(f"line {site.line}: placeholders but no parameters: {text!r}")
                break
    return problems


@pytest.mark.parametrize("module", SQL_MODULES, ids=[m.__name__ for m in SQL_MODULES])
def test_every_sql_statement_is_a_constant_and_takes_values_as_parameters(
    module: ModuleType,
) -> None:
    assert module.__file__ is not None
    source = Path(module.__file__).read_text(encoding="utf-8")
    assert sql_sites(ast.parse(source)), f"no SQL found in {module.__name__}"
    assert sql_problems(source, vars(module)) == []


UNSAFE_SOURCE = """
_BY_ID = "SELECT qty FROM jobs WHERE id = ?"
COLUMNS = ("id", "qty")
_ALL = f"SELECT {', '.join(COLUMNS)} FROM jobs"
_ONE = {column: f"SELECT {column} FROM jobs WHERE id = ?" for column in COLUMNS}
_FIRST = _ALL.replace("FROM jobs", "FROM jobs LIMIT 1")

def _row(con, sql, params):
    return con.execute(sql, params).fetchone()

def lookups(con, job_id, table):
    con.execute(_ALL)                                           # fine: constant, no values
    _row(con, _BY_ID, (job_id,))                                # fine: a parameter
    con.execute(f"SELECT qty FROM jobs WHERE id = '{job_id}'")  # 1: f-string of a value
    con.execute("SELECT qty FROM jobs WHERE id = '%s'" % job_id)  # 2: % formatting
    con.execute("SELECT * FROM {}".format(table))               # 3: str.format
    _row(con, "SELECT * FROM " + table, ())                     # 4: concatenation
    con.execute(_BY_ID)                                         # 5: placeholder, no values
    _row(con, _ONE[table], (job_id,))                           # fine: one of the constants
    _row(con, {"a": "SELECT " + table}[table], ())              # 6: a dict of a value
    con.execute(_ONE["id"])                                     # 7: placeholders, no values
    con.execute(_FIRST)                                         # fine: literals swapped
    con.execute(_ALL.replace("jobs", table))                    # 8: a value swapped in
    con.execute(_FIRST if job_id else _ALL)                     # fine: one of two constants
    con.execute(_FIRST if job_id else table)                    # 9: or a value
    _row(con, _PAIRS[table], (job_id,))                         # fine: one of the constants
    _row(con, {t: t for t, _ in vars().items()}[table], ())     # 10: items of a value

_PAIRS = {column: f"{sql} WHERE id = ?" for column, sql in {"id": _ALL}.items()}
"""


def test_the_sql_check_finds_sql_built_from_values() -> None:
    namespace: dict[str, Any] = {}
    exec(UNSAFE_SOURCE, namespace)
    problems = sql_problems(UNSAFE_SOURCE, namespace)
    assert [problem.split(":")[0] for problem in problems] == [
        "line 14",
        "line 15",
        "line 16",
        "line 17",
        "line 18",
        "line 20",
        "line 21",
        "line 23",
        "line 25",
        "line 27",
    ], problems
