"""The browser for the web page's tests: Debian's ``chromium`` and ``chromium-driver``.

Where they are missing and the tests run as root with ``apt-get`` (a fresh CI
machine), the session installs them once, bounded in time; anywhere else the
browser tests are skipped with a message that says what to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from courier.procs import Children
from tests.web.webdriver import Browser

INSTALL_TIMEOUT_S = 600
PACKAGES = ["chromium", "chromium-driver"]


def _tools() -> tuple[str | None, str | None]:
    return shutil.which("chromedriver"), shutil.which("chromium")


def _install() -> str:
    """Install the packages with apt as root; '' on success, else why not."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "not root with apt-get"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
            subprocess.run(
                argv, env=env, capture_output=True, timeout=INSTALL_TIMEOUT_S, check=True
            )
    except (subprocess.SubprocessError, OSError) as error:
        return f"apt-get failed: {error}"
    return ""


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """One headless Chromium for the session (installed first if missing and possible)."""
    driver, chromium = _tools()
    if driver is None or chromium is None:
        why = _install()
        driver, chromium = _tools()
        if driver is None or chromium is None:
            pytest.skip(f"no headless Chromium: install Debian's {' and '.join(PACKAGES)} ({why})")
    session = Browser(driver, chromium)
    try:
        yield session
    finally:
        session.close()


@pytest.fixture
def children() -> Iterator[Children]:
    """``python -m courier ...`` children, killed and reaped at teardown."""
    with Children() as started:
        yield started
