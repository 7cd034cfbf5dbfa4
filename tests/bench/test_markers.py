"""Each generated section of a page replaces only what stands between its markers.

Rendered from the committed records (no run needed): ``write_page`` writes exactly the
section ``bench.report`` renders between the bench's own marker lines and keeps the
rest of the page; a page without the markers is refused with ``ValueError``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench import report
from bench.measure import write_page
from courier.procs import project_root

DOCS = project_root() / "docs"


@pytest.mark.parametrize(
    ("render", "markers", "record_name"),
    [
        (report.postgres, report.POSTGRES_MARKS, "postgres.json"),
        (report.peers, report.PEERS_MARKS, "postgres-peers.json"),
    ],
    ids=["postgres", "postgres_peers"],
)
def test_a_section_replaces_only_what_stands_between_its_markers(
    render: Callable[[dict[str, Any]], str],
    markers: tuple[str, str],
    record_name: str,
    tmp_path: Path,
) -> None:
    record = json.loads((DOCS / record_name).read_text(encoding="utf-8"))
    begin, end = markers
    page = tmp_path / "page.md"
    page.write_text(f"before\n{begin}\nold\n{end}\nafter\n")
    write_page(page, render(record), markers)
    assert page.read_text() == f"before\n{begin}\n{render(record)}{end}\nafter\n"
    plain = tmp_path / "plain.md"
    plain.write_text("no markers here\n")
    with pytest.raises(ValueError, match="section"):
        write_page(plain, render(record), markers)
