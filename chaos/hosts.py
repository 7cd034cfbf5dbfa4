"""Simulated hosts: one Linux network namespace per courier, each with its own address.

A run's hosts share a prefix ``lqs<pid>`` (the supervisor's pid) in every name
they create, so that two runs on one machine never touch each other's, and so
that a run can delete what a dead run left behind (``remove_leftovers``: the
names whose pid is no longer a live process). The layout, for host ``n`` of a
run whose second address octet is ``B``:

- namespace ``lqs<pid>h<n>``, joined to the root namespace by a veth pair whose
  root side is ``lqs<pid>v<n>`` (``10.B.n.1/24``) and whose namespace side holds
  ``10.B.n.2/24`` with a default route through the root side;
- one hub address ``10.B.0.1/32`` on the root namespace's loopback (label
  ``lo:lqs<pid>``), where the PostgreSQL server and the receiver listen, so
  that every host reaches both through its own link and nothing listens on
  the machine's real interfaces.

``cut(n)`` sets the root side of host ``n``'s link down: its packets go nowhere
and its TCP connections hang until their own timeouts; ``heal(n)`` sets it up
again. ``Hosts`` is a context manager that deletes every namespace, link and
address it made, however the block ends. Nothing here runs without root and
iproute2; ``unavailable()`` says why it cannot, in one sentence.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from types import TracebackType

from courier.procs import pid_alive

__all__ = ["Hosts", "remove_leftovers", "unavailable"]

PREFIX = "lqs"
IP_TIMEOUT_S = 10.0
MAX_HOSTS = 64
_NAME = re.compile(rf"^{PREFIX}(\d+)[hv](\d+)$")
_LABEL = re.compile(rf"^lo:{PREFIX}(\d+)$")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``ip ARGS...``; raise ``RuntimeError`` with its stderr if it fails and ``check``."""
    done = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done


def unavailable() -> str | None:
    """Why simulated hosts cannot be made here (one sentence), or ``None`` if they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (this process is not root)"
    if shutil.which("ip") is None:
        return "network namespaces need iproute2 ('ip' is not on PATH)"
    probe = f"{PREFIX}{os.getpid()}probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"'ip netns add' failed: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def remove_leftovers() -> list[str]:
    """Delete the namespaces, links and hub addresses of runs whose process is gone.

    Returns the names removed. A run that is still alive keeps its own.
    """
    removed: list[str] = []
    for name in _ip("netns", "list", check=False).stdout.split():
        match = _NAME.match(name)
        if match and not pid_alive(int(match.group(1))):
            _ip("netns", "del", name, check=False)
            removed.append(name)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":", 2)
        name = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
        match = _NAME.match(name)
        if match and not pid_alive(int(match.group(1))):
            _ip("link", "del", name, check=False)
            removed.append(name)
    for line in _ip("-o", "-4", "addr", "show", "dev", "lo", check=False).stdout.splitlines():
        fields = line.replace("\\", " ").split()
        labels = [m for m in map(_LABEL.match, fields) if m is not None]
        if labels and not pid_alive(int(labels[0].group(1))) and "inet" in fields:
            _ip("addr", "del", fields[fields.index("inet") + 1], "dev", "lo", check=False)
            removed.append(labels[0].group(0))
    return removed


def _free_octet(tag: int) -> int:
    """A second octet ``B`` such that no address of this machine is in ``10.B.0.0/16``."""
    taken = _ip("-o", "-4", "addr", "show", check=False).stdout
    for step in range(200):
        octet = 20 + (tag + step) % 200
        if f" 10.{octet}." not in taken:
            return octet
    raise RuntimeError("no free 10.B.0.0/16 subnet for the simulated hosts")


class Hosts:
    """``count`` simulated hosts, made on ``__enter__`` and deleted on ``__exit__``."""

    def __init__(self, count: int) -> None:
        if type(count) is not int or not 1 <= count <= MAX_HOSTS:
            raise ValueError(f"'count' must be an int in 1..{MAX_HOSTS}, got {count!r}")
        self.count = count
        self.tag = f"{PREFIX}{os.getpid()}"
        self.octet = _free_octet(os.getpid())
        self.hub = f"10.{self.octet}.0.1"
        self.subnet = str(ipaddress.ip_network(f"10.{self.octet}.0.0/16"))
        self.down: set[int] = set()
        self._made: list[tuple[str, str]] = []  # (kind, name), undone in reverse

    def namespace(self, n: int) -> str:
        """The namespace of host ``n`` (1-based)."""
        return f"{self.tag}h{n}"

    def link(self, n: int) -> str:
        """The root side of host ``n``'s veth pair."""
        return f"{self.tag}v{n}"

    def address(self, n: int) -> str:
        """Host ``n``'s own address."""
        return f"10.{self.octet}.{n}.2"

    def command(self, n: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside host ``n``."""
        return ["ip", "netns", "exec", self.namespace(n), *argv]

    def __enter__(self) -> Hosts:
        try:
            _ip("addr", "add", f"{self.hub}/32", "dev", "lo", "label", f"lo:{self.tag}")
            self._made.append(("hub", self.hub))
            for n in range(1, self.count + 1):
                self._make(n)
        except BaseException:
            self.close()
            raise
        return self

    def _make(self, n: int) -> None:
        ns, link, peer = self.namespace(n), self.link(n), f"{self.tag}p{n}"
        _ip("netns", "add", ns)
        self._made.append(("netns", ns))
        _ip("link", "add", link, "type", "veth", "peer", "name", peer, "netns", ns)
        self._made.append(("link", link))
        _ip("addr", "add", f"10.{self.octet}.{n}.1/24", "dev", link)
        _ip("link", "set", link, "up")
        inside = ("ip", "-n", ns)
        for args in (
            ("link", "set", "lo", "up"),
            ("addr", "add", f"{self.address(n)}/24", "dev", peer),
            ("link", "set", peer, "up"),
            ("route", "add", "default", "via", f"10.{self.octet}.{n}.1"),
        ):
            _ip(*inside[1:], *args)

    def cut(self, n: int) -> None:
        """Take host ``n``'s link down: nothing it sends arrives, nothing reaches it."""
        _ip("link", "set", self.link(n), "down")
        self.down.add(n)

    def heal(self, n: int) -> None:
        """Bring host ``n``'s link back up."""
        _ip("link", "set", self.link(n), "up")
        self.down.discard(n)

    def close(self) -> None:
        """Delete everything this run made (each step tried, whatever failed before)."""
        for kind, name in reversed(self._made):
            if kind == "netns":
                _ip("netns", "del", name, check=False)
            elif kind == "link":
                _ip("link", "del", name, check=False)
            else:
                _ip("addr", "del", f"{name}/32", "dev", "lo", check=False)
        self._made.clear()
        self.down.clear()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        with contextlib.suppress(Exception):
            self.close()
