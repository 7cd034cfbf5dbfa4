"""The browser the web tests drive leaves nothing behind in the temporary folder.

Left to themselves, chromedriver and Chromium leave a profile folder and a folder of
shared memory in ``/tmp`` for every session, which piled up by the dozen on a machine
that runs the suite often. ``Browser`` gives them a folder of their own and removes it.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from tests.web.webdriver import Browser


def _browser_leftovers(folder: Path) -> set[str]:
    return {
        entry.name
        for entry in folder.iterdir()
        if entry.name.startswith(("org.chromium.", ".org.chromium.", "lease-queue-browser-"))
    }


def test_a_closed_browser_leaves_nothing_in_the_temporary_folder(browser: Browser) -> None:
    # ``browser`` (the session's) makes sure the tools are there; this one is opened here.
    folder = Path(tempfile.gettempdir())
    before = _browser_leftovers(folder)
    driver, chromium = shutil.which("chromedriver"), shutil.which("chromium")
    assert driver is not None and chromium is not None
    opened = Browser(driver, chromium)
    try:
        opened.get("about:blank")
        assert Path(opened.temporary_folder).is_dir()
    finally:
        opened.close()
    assert not Path(opened.temporary_folder).exists()
    assert _browser_leftovers(folder) - before == set()
