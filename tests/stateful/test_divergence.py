"""``tests/divergence.py``: a disagreement reads as a diff, by name, first; nothing huge is
printed whole. Constructed cases, one per shape of difference the lockstep meets."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.divergence import (
    WIDTH,
    abbreviated,
    clipped,
    result_divergence,
    rows_divergence,
    short_repr,
)
from tests.support import JOB_COLUMNS


def job_row(**changes: Any) -> tuple[Any, ...]:
    """A jobs row of job 'a' (pending, leased once) with ``changes`` by column name."""
    row = dict(
        seq=1,
        id="a",
        qty=1,
        status="pending",
        attempts=0,
        max_attempts=3,
        token=1,
        available_at=0,
        deadline=2,
        owner=None,
        lease_until=None,
        reason=None,
    )
    row.update(changes)
    return tuple(row[column] for column in JOB_COLUMNS)


def first_line(text: str) -> str:
    return text.splitlines()[0]


# --- results ------------------------------------------------------------------------


def test_a_different_return_value_is_named_first() -> None:
    message = result_divergence("finish", ("returned", "done"), ("returned", False))
    assert message.splitlines() == [
        "finish returned 'done' on worker.py, False on the model",
        "  worker.py: ('returned', 'done')",
        "  model:     ('returned', False)",
    ]


def test_tickets_that_differ_name_the_fields_that_differ_and_no_other() -> None:
    real = {"id": "a", "qty": 1, "owner": "c1", "token": 2, "attempt": 1, "lease_until": 1}
    spec = real | {"token": 1, "lease_until": 1000}
    message = result_divergence("claim", ("returned", real), ("returned", spec))
    assert first_line(message) == (
        "claim returned different values: token: worker.py 2, model 1; "
        "lease_until: worker.py 1, model 1000"
    )


def test_batches_name_the_item_that_differs_and_a_missing_one() -> None:
    message = result_divergence(
        "finish_many", ("returned", [True, "done"]), ("returned", [True, False, "dead"])
    )
    assert first_line(message) == (
        "finish_many returned different values: [1]: worker.py 'done', model False; "
        "[2]: worker.py nothing, model 'dead'"
    )


def test_a_raise_against_a_return_says_both() -> None:
    message = result_divergence(
        "redrive", ("raised", "ValueError", "no job 'a' to redrive"), ("returned", True)
    )
    assert (
        first_line(message) == "redrive raised ValueError on worker.py, returned True on the model"
    )
    assert "no job 'a' to redrive" in message


def test_two_exception_types_are_named() -> None:
    message = result_divergence("claim", ("raised", "InjectedFault"), ("raised", "ValueError", "x"))
    assert (
        first_line(message)
        == "claim raised InjectedFault on worker.py, raised ValueError on the model"
    )


def test_two_messages_are_shown_where_they_first_differ() -> None:
    tail = " must be an int from 0 to 60000 (got -1 that is a 'int')"
    message = result_divergence(
        "enqueue.ttl_ms",
        ("raised", "ValueError", "'now_ms'" + tail),
        ("raised", "ValueError", "'ttl_ms'" + tail),
    )
    assert first_line(message).startswith(
        "enqueue.ttl_ms raised ValueError on both, with other messages: from character 1: "
        "worker.py \"'now_ms' must"
    )
    assert "model \"'ttl_ms' must" in first_line(message)


def test_the_other_sides_are_named_as_the_caller_says() -> None:
    message = result_divergence("claim", ("returned", None), ("returned", 1), "pgworker.py")
    assert first_line(message) == "claim returned None on pgworker.py, 1 on the model"


# --- rows ---------------------------------------------------------------------------


def test_rows_name_the_job_and_the_column_that_differ() -> None:
    real = {"jobs": [job_row(deadline=1)], "redrives": []}
    spec = {"jobs": [job_row(deadline=2)], "redrives": []}
    message = rows_divergence(real, spec)
    assert first_line(message) == "rows differ: job 'a' deadline: worker.py 1, model 2"
    assert "token" not in first_line(message)
    # Then both sides whole, one row a line, the columns named once.
    assert f"    {job_row(deadline=1)!r}" in message.splitlines()
    assert f"    {job_row(deadline=2)!r}" in message.splitlines()
    assert any(line.startswith("  jobs (seq, id, qty, status,") for line in message.splitlines())


def test_rows_are_matched_by_id_not_by_place() -> None:
    b = job_row(seq=2, id="b")
    real = {"jobs": [job_row(), b]}
    spec = {"jobs": [b, job_row(status="dead", reason="deadline")]}
    assert first_line(rows_divergence(real, spec)) == (
        "rows differ: job 'a' status: worker.py 'pending', model 'dead', "
        "reason: worker.py None, model 'deadline'"
    )


def test_missing_and_extra_rows_are_named_then_shown_by_column() -> None:
    real = {"jobs": [job_row(), job_row(seq=2, id="c")], "redrives": [(1, "a", 1, 5, "ops")]}
    spec = {"jobs": [job_row(), job_row(seq=2, id="d")], "redrives": [(1, "a", 0, 5, "ops")]}
    lines = rows_divergence(real, spec).splitlines()
    assert lines[0] == (
        "rows differ: job 'c' only on worker.py; job 'd' only on the model; "
        "redrive seq 1 (job 'a') token: worker.py 1, model 0"
    )
    assert lines[1].startswith("  job 'c' only on worker.py: seq=2 id='c' qty=1 status='pending'")
    assert lines[2].startswith("  job 'd' only on the model: seq=2 id='d'")


def test_many_differences_are_counted_on_the_first_line_and_listed_below() -> None:
    real = {"jobs": [job_row(id=name, token=5) for name in "abcde"]}
    spec = {"jobs": [job_row(id=name, token=6) for name in "abcde"]}
    lines = rows_divergence(real, spec).splitlines()
    assert lines[0].endswith("; and 2 more")
    assert lines[1:6] == [f"  job {name!r} token: worker.py 5, model 6" for name in "abcde"]


def test_rows_of_another_pair_of_sides_and_of_an_unknown_table() -> None:
    message = rows_divergence(
        {"jobs": [], "t": [(1,)]}, {"jobs": [job_row()], "t": [(2,)]}, "the file"
    )
    assert first_line(message) == (
        "rows differ: job 'a' only on the model; t row 0: the file (1,), model (2,)"
    )
    assert "the file's rows:" in message.splitlines()


# --- abbreviation -------------------------------------------------------------------


def test_a_long_list_keeps_its_first_three_items_and_counts_the_rest() -> None:
    assert short_repr([True, True, False, *[True] * 997]) == "[True, True, False, ... 997 more]"
    assert short_repr(tuple(range(13))) == "(0, 1, 2, ... 10 more)"
    assert short_repr({str(n): n for n in range(20)}) == "{'0': 0, '1': 1, '2': 2, ... 17 more}"


def test_a_row_of_twelve_columns_and_short_values_are_printed_whole() -> None:
    row = job_row()
    assert short_repr(row) == repr(row)
    assert short_repr(("a",)) == "('a',)"
    value = {"id": "a", "events": [{"id": "b", "qty": 1}] * 3}
    assert abbreviated(value) == repr(value)


def test_a_long_str_keeps_its_head_and_tail() -> None:
    text = "h" * 100 + "m" * 500 + "t" * 40
    assert short_repr(text) == f"{'h' * 100!r} ... 500 more characters ... {'t' * 40!r}"


def test_a_huge_batch_inside_a_result_is_cut() -> None:
    message = result_divergence(
        "finish_many", ("returned", [False] * 1000), ("returned", [False] * 999 + ["done"])
    )
    assert message.splitlines() == [
        "finish_many returned different values: [999]: worker.py False, model 'done'",
        "  worker.py: ('returned', [False, False, False, ... 997 more])",
        "  model:     ('returned', [False, False, False, ... 997 more])",
    ]


def test_a_wide_list_is_printed_one_item_a_line() -> None:
    ticket = {"id": "a", "qty": 1, "owner": "c1", "token": 1, "attempt": 1, "lease_until": 1}
    items = [{"ticket": ticket, "outcome": "ok", "delay_ms": n} for n in range(6)]
    lines = abbreviated(items).splitlines()
    assert lines[0] == "["
    assert lines[1:7] == [f"  {item!r}," for item in items]
    assert lines[7] == "]"


def test_clipped_cuts_a_wide_line_and_says_how_much() -> None:
    line = clipped("x" * 1000)
    assert len(line) <= WIDTH
    assert line.endswith(" ... 740 more characters")
    assert clipped("short") == "short"


VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=400),
    lambda inner: (
        st.lists(inner, max_size=40)
        | st.dictionaries(st.text(max_size=5), inner, max_size=20)
        | st.lists(inner, max_size=20).map(tuple)
    ),
    max_leaves=200,
)


@settings(max_examples=100, derandomize=True, database=None)
@given(real=VALUES, spec=VALUES)
def test_no_line_printed_is_wider_than_width(real: object, spec: object) -> None:
    message = result_divergence("call", ("returned", real), ("returned", spec))
    assert all(len(line) <= WIDTH for line in message.splitlines())
    assert all(len(line) <= WIDTH for line in abbreviated(real).splitlines())
