"""docs/operations.md's command reference is the live parser's, rendered (courier.reference).

The page's section between ``courier.reference.MARKS`` must be what ``render()`` makes of
``courier.cli.build_parser()`` now, so a new option, a changed default or help text fails
here until the page is written again. The rendering must not depend on the terminal's
width or on how the CLI was started, or the page would differ from one machine to another.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from courier import cli, reference
from courier.procs import project_root

PAGE = project_root() / "docs" / "operations.md"
REGENERATE = "make reference (python -m courier.reference --write docs/operations.md)"


def test_the_operations_page_carries_the_reference_of_the_live_parser() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert reference.replace_section(page, reference.render()) == page, (
        f"docs/operations.md's command reference differs from courier/cli.py's parser; "
        f"regenerate it: {REGENERATE}"
    )


def test_every_option_of_every_commands_help_is_in_its_reference() -> None:
    """argparse's own ``--help`` of each command is the oracle: every option it prints
    (``-h``/``--help`` aside) is in that command's part of the reference."""
    text, seen = reference.render(), 0
    for name, parser in reference.commands(cli.build_parser()).items():
        assert f"### `courier {name}`" in text
        section = text.split(f"### `courier {name}`", 1)[1].split("\n### ", 1)[0]
        flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", parser.format_help())) - {"--help"}
        seen += len(flags)
        missing = sorted(flag for flag in flags if f"`{flag}" not in section)
        assert not missing, f"{name}: {missing} in --help but not in the reference"
    assert seen > 40, f"only {seen} options found in the commands' --help: is the pattern right?"
    assert list(reference.commands(cli.build_parser())) == [c.name for c in cli.COMMANDS]


@pytest.mark.parametrize("columns", ["20", "80", "400"])
@pytest.mark.parametrize("argv0", ["courier", "/usr/lib/python3/courier/__main__.py"])
def test_the_rendering_depends_on_the_parser_alone(
    monkeypatch: pytest.MonkeyPatch, columns: str, argv0: str
) -> None:
    expected = reference.render()
    monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setattr("sys.argv", [argv0])
    assert reference.render() == expected


def test_usage_lines_wrap_between_arguments_at_the_set_width() -> None:
    parser = argparse.ArgumentParser()
    for n in range(20):
        parser.add_argument(f"--option-{n}", metavar="VALUE")
    lines = reference.usage("long", parser).splitlines()
    assert len(lines) > 1
    assert all(len(line) <= reference.USAGE_WIDTH for line in lines)
    assert all(line.startswith(" " * len("courier long ")) for line in lines[1:])
    assert " ".join(" ".join(lines).split()).count("[--option-") == 20


@pytest.mark.parametrize(
    "page",
    [
        "no markers at all\n",
        f"{reference.MARKS[0]}\nonly the first\n",
        f"{reference.MARKS[1]}\nthe end first\n{reference.MARKS[0]}\n",
        f"{reference.MARKS[0]}\n{reference.MARKS[0]}\n{reference.MARKS[1]}\n",
    ],
)
def test_a_page_without_one_pair_of_markers_is_refused(page: str) -> None:
    with pytest.raises(ValueError, match="cli-reference:begin"):
        reference.replace_section(page, "text\n")


def test_writing_the_section_twice_changes_nothing(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    stale = "the section as it was"
    page.write_text(f"before\n{reference.MARKS[0]}\n{stale}\n{reference.MARKS[1]}\nafter\n")
    assert reference.main(["--write", str(page)]) == 0
    once = page.read_text()
    assert once.startswith("before\n") and once.endswith(f"{reference.MARKS[1]}\nafter\n")
    assert stale not in once
    assert reference.main(["--write", str(page)]) == 0
    assert page.read_text() == once
