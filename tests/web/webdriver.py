"""A minimal W3C WebDriver client over ``urllib``, enough to drive headless Chromium.

It speaks to Debian's ``chromedriver`` (package ``chromium-driver``) directly, so the
browser tests need no Python package of their own: start the driver on a free
loopback port, open one session with ``chromium --headless``, and use the few
commands a test needs (go to a URL, find elements by CSS, read text, type, click,
run a script, take a screenshot, and one DevTools command: the time zone).
Every request has a timeout; ``Browser.close`` ends the session and the driver.
The driver and the browser keep their temporary files (the browser's profile, its
shared memory) in a folder of their own (``TMPDIR``), which ``close`` removes: left
to themselves they leave two folders in ``/tmp`` a session.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference
REQUEST_TIMEOUT_S = 30.0
START_TIMEOUT_S = 20.0
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class WebDriverError(Exception):
    """The driver answered an error (its ``error`` and ``message``)."""


class Browser:
    """One headless Chromium session through ``chromedriver``."""

    def __init__(self, driver: str, chromium: str) -> None:
        port = _free_port()
        self._tmp = tempfile.mkdtemp(prefix="lease-queue-browser-")
        self._driver = subprocess.Popen(
            [driver, f"--port={port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "TMPDIR": self._tmp},
        )
        self._base = f"http://127.0.0.1:{port}"
        self._session: str | None = None
        try:
            self._wait_ready()
            options = {"binary": chromium, "args": CHROMIUM_ARGS}
            caps = {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}
            answer = self._call("POST", "/session", {"capabilities": caps})
            self._session = str(answer["sessionId"])
        except BaseException:
            self.close()
            raise

    def _wait_ready(self) -> None:
        until = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < until:
            if self._driver.poll() is not None:
                raise WebDriverError(f"chromedriver exited with {self._driver.returncode}")
            try:
                if self._call("GET", "/status").get("ready"):
                    return
            except (OSError, WebDriverError):
                pass
            time.sleep(0.05)
        raise WebDriverError("chromedriver did not get ready in time")

    def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(
            self._base + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as error:
            answer = json.loads(error.read() or b"{}")
            value = answer.get("value", {})
            raise WebDriverError(f"{value.get('error')}: {value.get('message')}") from None
        return answer.get("value", answer) if path != "/session" else answer.get("value")

    def _in_session(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        return self._call(method, f"/session/{self._session}{path}", payload)

    def get(self, url: str) -> None:
        """Load ``url`` and wait for it (the driver's page-load strategy: normal)."""
        self._in_session("POST", "/url", {"url": url})

    def find(self, css: str) -> str:
        """The element reference of the first match of ``css``."""
        found = self._in_session("POST", "/element", {"using": "css selector", "value": css})
        return str(found[ELEMENT])

    def find_all(self, css: str) -> list[str]:
        found = self._in_session("POST", "/elements", {"using": "css selector", "value": css})
        return [str(item[ELEMENT]) for item in found]

    def wait_for(self, css: str, timeout_s: float = 10.0) -> str:
        """The first match of ``css`` once the page has one (a click's navigation may
        still be under way when the click returns); ``WebDriverError`` after ``timeout_s``."""
        until = time.monotonic() + timeout_s
        while True:
            try:
                return self.find(css)
            except WebDriverError:
                if time.monotonic() >= until:
                    raise
            time.sleep(0.05)

    def text(self, css: str) -> str:
        return str(self._in_session("GET", f"/element/{self.find(css)}/text"))

    def type(self, css: str, text: str) -> None:
        self._in_session("POST", f"/element/{self.find(css)}/value", {"text": text})

    def click(self, css: str) -> None:
        self._in_session("POST", f"/element/{self.find(css)}/click", {})

    def current_url(self) -> str:
        return str(self._in_session("GET", "/url"))

    def execute(self, script: str, *args: Any) -> Any:
        """Run ``script`` (a function body; ``arguments`` are ``args``) in the page."""
        return self._in_session("POST", "/execute/sync", {"script": script, "args": list(args)})

    def screenshot(self, path: str) -> None:
        """Save what the page shows as a PNG at ``path``."""
        import base64

        data = self._in_session("GET", "/screenshot")
        with open(path, "wb") as file:
            file.write(base64.b64decode(data))

    def window_size(self, width: int, height: int) -> None:
        self._in_session("POST", "/window/rect", {"width": width, "height": height})

    def time_zone(self, zone: str) -> None:
        """Show the page as in the time zone ``zone`` (IANA name), through DevTools."""
        command = {"cmd": "Emulation.setTimezoneOverride", "params": {"timezoneId": zone}}
        self._in_session("POST", "/goog/cdp/execute", command)

    @property
    def temporary_folder(self) -> str:
        """The folder of the driver's and the browser's temporary files (``close``
        removes it)."""
        return self._tmp

    def close(self) -> None:
        """End the session and stop the driver (and with it the browser)."""
        if self._session is not None:
            with contextlib.suppress(OSError, WebDriverError):
                self._in_session("DELETE", "")
            self._session = None
        if self._driver.poll() is None:
            self._driver.terminate()
            try:
                self._driver.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._driver.kill()
                self._driver.wait(timeout=10)
        shutil.rmtree(self._tmp, ignore_errors=True)
