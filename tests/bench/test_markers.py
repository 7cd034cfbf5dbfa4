"""Each generated section of a page replaces only what stands between its markers.

Rendered from the committed records (no run needed): ``write_page`` writes exactly the
section ``bench.report`` renders between the bench's own marker lines and keeps the
rest of the page; a page without the markers is refused with ``ValueError``, and each
bench refuses, before it measures anything, a page or a ``--json`` it could not write.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench import conform, perf, postgres, postgres_peers, report, slowpaths
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


@pytest.mark.parametrize(
    ("main", "arguments", "said"),
    [
        (postgres.main, ["--doc", "{missing}"], "no such file"),
        (postgres.main, ["--doc", "{plain}"], "section"),
        (postgres_peers.main, ["--doc", "{plain}"], "section"),
        (perf.main, ["--page", "{folderless}"], "there is no folder"),
        (postgres.main, ["--json", "{folderless}"], "there is no folder"),
        (conform.main, ["--json", "{folderless}"], "there is no folder"),
        (slowpaths.main, ["--json", "{folderless}"], "there is no folder"),
    ],
    ids=["no-page", "no-section", "peers-section", "perf-page", "json", "conform", "slowpaths"],
)
def test_an_output_that_could_not_be_written_is_refused_before_measuring(
    main: Callable[[list[str]], Any],
    arguments: list[str],
    said: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Not minutes of measuring that end in a traceback, the record lost: a usage error
    (exit status 2) at once, naming the output."""
    plain = tmp_path / "plain.md"
    plain.write_text("no markers here\n")
    paths = {"missing": tmp_path / "missing.md", "plain": plain}
    paths["folderless"] = tmp_path / "no-such-folder" / "out"
    given = [argument.format(**paths) for argument in arguments]
    with pytest.raises(SystemExit) as stopped:
        main(given)
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert said in error and given[-1] in error, error
    assert plain.read_text() == "no markers here\n" and not (tmp_path / "no-such-folder").exists()
