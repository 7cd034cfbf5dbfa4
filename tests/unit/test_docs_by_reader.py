"""Docs by reader: the pages for users and contributors carry no dates and no "I".

A date of measurement, a clock time and first-person reasoning belong in the dated notes
of docs/dev/; a user or contributor page states the fact, and links the note where the
reader may want the story. Checked here: no ``20XX-XX-XX`` date anywhere on a page (a link
to a dated note, ``](dev/2026-...)``, is a link, not a date), and no "I" in its prose
(code blocks and code spans are left out: they quote output, not the page's voice). Every
page of docs/ has its line in the index, docs/README.md.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from courier.procs import project_root

ROOT = project_root()
DOCS = ROOT / "docs"
# Left out for now, each for its reason; remove a name once its page is clean, so the
# list only shrinks:
NOT_YET: dict[str, str] = {}
# docs/dev/ (dated notes: dates are their point) and docs/spec/ (the contract and its
# original, quoted as they were given) are not user or contributor pages at all.
PAGES = sorted(
    [page for page in DOCS.glob("*.md") if page.name not in NOT_YET]
    + [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md"]
)
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
LINK_TARGET = re.compile(r"\]\([^)\s]*\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
APOSTROPHES = "'\u2019"  # the typewriter one and the typographic one
FIRST_PERSON = re.compile(rf"(?<![\w{APOSTROPHES}-])I(?:[{APOSTROPHES}](?:m|ve|d|ll))?\s+[a-z]")


def dates(text: str) -> list[str]:
    """Each line of ``text`` with a date outside a link's target."""
    lines = LINK_TARGET.sub("](...)", text).splitlines()
    return [line.strip() for line in lines if DATE.search(line)]


def first_person(text: str) -> list[str]:
    """Each line of ``text``'s prose (code left out) that says "I"."""
    prose = CODE_SPAN.sub("``", FENCE.sub("", text))
    return [line.strip() for line in prose.splitlines() if FIRST_PERSON.search(line)]


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_a_page_for_readers_carries_no_date(page: Path) -> None:
    found = dates(page.read_text(encoding="utf-8"))
    assert not found, (
        f"{_name(page)} carries dates: {found}. State the fact without the date; the dated "
        "detail goes to a note in docs/dev/, linked from the page"
    )


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_a_page_for_readers_does_not_say_i(page: Path) -> None:
    found = first_person(page.read_text(encoding="utf-8"))
    assert not found, (
        f"{_name(page)} says 'I': {found}. A page states facts; reasoning in the first "
        "person belongs in a dated note in docs/dev/"
    )


def test_the_excluded_pages_exist_and_are_still_dated() -> None:
    """Once an excluded page is clean, it leaves ``NOT_YET`` (and is checked)."""
    for name in NOT_YET:
        text = (DOCS / name).read_text(encoding="utf-8")
        assert dates(text) or first_person(text), f"docs/{name} is clean: drop it from NOT_YET"


def test_the_checks_see_what_they_must_and_nothing_else() -> None:
    assert dates("Measured on 2026-12-02, idle.") == ["Measured on 2026-12-02, idle."]
    assert dates("run `make test` (2026-11-30 14:02)") != []
    assert dates("the [notes](dev/2026-12-01-claim-search.md) say why") == []
    assert dates("1796009662536 ms, 3 min 20 s, 10.43.0.1") == []
    assert first_person("Here I measured it twice.") == ["Here I measured it twice."]
    assert first_person("I've seen it.\nI'd say so.") == ["I've seen it.", "I'd say so."]
    assert first_person("I\u2019ll check") == ["I\u2019ll check"]
    assert first_person("`courier inbox I | head -1` stops quietly") == []
    assert first_person("```\nI am output\n```\nand prose") == []
    assert first_person("TCP/IP is fine; I/O waits; the I-th row; an I, a J") == []


def test_every_page_of_docs_is_in_the_index() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([^)#\s]+)", index))
    missing = [p.name for p in DOCS.glob("*.md") if p.name != "README.md" and p.name not in linked]
    assert not missing, f"docs/README.md has no line for {missing}: give each page its line"
    for target in ("../CONTRIBUTING.md", "../CHANGELOG.md", "spec/CONTRACT.md", "dev/"):
        assert target in linked, f"docs/README.md does not link {target}"
