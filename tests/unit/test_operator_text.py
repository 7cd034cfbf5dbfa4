"""What the operator side prints: escaped text from outside, folded log lines, the words.

``LogLines`` takes its clocks as arguments, so the folding of an unchanged failure is
checked here on a scripted timeline; the same log in a real courier is checked in
``tests/processes/test_operator_side.py``.
"""

from __future__ import annotations

import inspect

import pytest

from courier import queueview
from courier.commands.output import in_words, relative_when
from courier.log_lines import LogLines, stamp
from courier.printable import printable
from model import job
from model.lifecycle import EFFECTS


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[2Jcleared", "\\x1b[2Jcleared"),
        ("abc\u202edef", "abc\\u202edef"),
        ("bell\x07 del\x7f c1\x85", "bell\\x07 del\\x7f c1\\x85"),
        ("tab\there\rcr", "tab\\there\\rcr"),
        ("\u2066isolate\u2069 \u200fmark", "\\u2066isolate\\u2069 \\u200fmark"),
        ("plain text, ünïcode, 日本", "plain text, ünïcode, 日本"),
    ],
)
def test_control_and_bidirectional_characters_are_shown_escaped(raw: str, shown: str) -> None:
    assert printable(raw) == shown


def test_a_newline_is_kept_only_where_the_caller_means_one() -> None:
    assert printable("one\ntwo") == "one\ntwo"
    assert printable("one\ntwo", newlines=False) == "one\\ntwo"


class Timeline:
    """The log's two clocks, moved by hand."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wall_ms(self) -> int:
        return 1_796_000_000_000 + int(self.seconds * 1000)

    def monotonic(self) -> float:
        return self.seconds


def test_an_unchanged_failure_is_written_every_few_seconds_with_its_count() -> None:
    clock, written = Timeline(), list[str]()
    log = LogLines(written.append, clock.wall_ms, clock.monotonic, repeat_every_s=5)
    for _ in range(50):  # 10 s of a failure every 0.2 s
        log("c1: queue unreachable (connection refused); backing off")
        clock.seconds += 0.2
    log("c1: a token=2 -> done")
    log.close()
    texts = [line.split(" ", 1)[1] for line in written]
    assert texts == [
        "c1: queue unreachable (connection refused); backing off",
        "c1: queue unreachable (connection refused); backing off (again: 25 times in 5 s)",
        "(the line before came 24 more times in 5 s)",
        "c1: a token=2 -> done",
    ]
    assert all(line.startswith(stamp(clock.wall_ms())[:11]) for line in written)


def test_a_log_line_is_one_line_stamped_and_escaped() -> None:
    clock, written = Timeline(), list[str]()
    log = LogLines(written.append, clock.wall_ms, clock.monotonic)
    log("GET /\x1b[2J 404\nhint: \u202eelsewhere")
    assert written == [f"{stamp(clock.wall_ms())} GET /\\x1b[2J 404 / hint: \\u202eelsewhere"]
    assert stamp(0) == "1970-01-01T00:00:00.000Z"


def test_durations_in_words() -> None:
    assert [in_words(ms) for ms in (850, 3_250, 245_000, 7_800_000, 273_600_000)] == [
        "850 ms",
        "3.2 s",
        "4 min 5 s",
        "2 h 10 min",
        "3 d 4 h",
    ]
    assert relative_when(1_000, 4_000).endswith(", 3 s ago)")


def test_the_reasons_are_the_models() -> None:
    """Every reason the model's effects write, and no other, is one the CLI accepts."""
    marked = {
        inspect.getdoc(getattr(job.Job, name)).split("'")[1]  # type: ignore[union-attr]
        for names in EFFECTS.values()
        for name in names
        if name.startswith("mark_")
    }
    assert set(queueview.REASONS) == marked
    dead = {
        inspect.getdoc(getattr(job.Job, name)).split("'")[1]  # type: ignore[union-attr]
        for trigger, names in EFFECTS.items()
        for name in names
        if name.startswith("mark_") and trigger != "finish_retry"
    }
    assert set(queueview.DEAD_REASONS) == dead
