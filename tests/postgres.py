"""A real PostgreSQL server for the tests: Debian's ``postgresql`` binaries, a throwaway
cluster in a temporary directory, on a free loopback port, for one pytest session.

PostgreSQL refuses to run as root, so as root (CI) the cluster belongs to the ``postgres``
user the package creates (``nobody`` where there is none) and its programs run through
``setpriv``. Each test gets a schema of its own (:meth:`PostgresServer.fresh_url`), so tests
never see each other's rows and need no new database. Durability is off (``fsync``,
``synchronous_commit``, ``full_page_writes``): the server is thrown away at the end. A test
that crashes its own server (:func:`own_server`) asks for a durable one.

When the binaries are missing the tests that need them FAIL, never skip, with the command
that installs them (``make test`` installs them when it can).
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final
from urllib.parse import quote

import psycopg
import pytest

INSTALL: Final = "apt-get install postgresql"
#: Seconds pg_ctl waits for the server to accept connections.
START_SECONDS: Final = 60
DATABASE: Final = "herald_test"
USER: Final = "herald"

#: Parameters of a test or fixture that runs on each state backend; the PostgreSQL one
#: carries the ``postgres`` mark.
BACKENDS: Final = [pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)]

_schemas = itertools.count(1)
_running: PostgresServer | None = None


def bin_dir() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl``: on PATH, else Debian's newest
    ``/usr/lib/postgresql/<version>/bin`` (the package does not put them on PATH)."""
    found = shutil.which("initdb")
    if found is not None and shutil.which("pg_ctl") is not None:
        return Path(found).resolve().parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    return Path(candidates[-1]).parent if candidates else None


def missing_message() -> str:
    return (
        "PostgreSQL is not installed, and the PostgreSQL backend's tests need a real server: "
        f"install it with `{INSTALL}` (Debian; as root), or run `make test`, which installs "
        "it when it can."
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    """One throwaway cluster; :meth:`start` it, :meth:`stop` it (idempotent)."""

    def __init__(self, binaries: Path, *, durable: bool = False) -> None:
        self.binaries = binaries
        #: Durable: a commit the server acknowledged survives :meth:`halt` (the default
        #: trades that away for speed, and loses the last commits of an immediate stop).
        self.durable = durable
        # As root the server runs as another user, who must reach the directory: /tmp is
        # open to all, where $TMPDIR may be under /root.
        parent = "/tmp" if os.geteuid() == 0 else None
        self.root = Path(tempfile.mkdtemp(prefix="herald-pg-", dir=parent))
        self.data = self.root / "data"
        self.port = 0
        self._owner: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            self._owner = _unprivileged_user()
            os.chown(self.root, self._owner.pw_uid, self._owner.pw_gid)

    def __repr__(self) -> str:
        return f"<PostgresServer 127.0.0.1:{self.port} {self.data}>"

    def start(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", USER, "-A", "trust", "-E", "UTF8",
                  "--locale=C", "--locale-provider=icu", "--icu-locale=en-US", "-N")  # fmt: skip
        for attempt in range(3):  # a free port can be taken between the probe and the bind
            self.port = _free_port()
            try:
                self._pg_ctl_start()
                break
            except subprocess.CalledProcessError:
                if attempt == 2:
                    raise
        with psycopg.connect(self.admin_url("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")

    def halt(self) -> None:
        """Stop the server as a crash or an operator would (``immediate``: every client is cut
        off), keeping its data for :meth:`resume`."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def resume(self) -> None:
        """Start a :meth:`halt`-ed server again, on the same port, with the same data."""
        self._pg_ctl_start()

    def _pg_ctl_start(self) -> None:
        fast = ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        options = " ".join(
            [
                f"-p {self.port}",
                "-c listen_addresses=127.0.0.1",
                f"-k {self.root}",
                *([] if self.durable else fast),
                "-c max_connections=300",
            ]
        )
        log = str(self.root / "server.log")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w",
                  "-t", str(START_SECONDS), "start")  # fmt: skip

    def stop(self) -> None:
        if self.port and (self.data / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.CalledProcessError):
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def admin_url(self, database: str = DATABASE) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def fresh_url(self) -> str:
        """The URL of a new, empty schema of the test database (its search_path)."""
        schema = f"t{next(_schemas)}"
        with psycopg.connect(self.admin_url(), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        return f"{self.admin_url()}?options={quote(f'-csearch_path={schema}')}"

    def _run(self, program: str, *args: str) -> None:
        command: Sequence[str] = [str(self.binaries / program), *args]
        if self._owner is not None:
            command = [
                "setpriv",
                f"--reuid={self._owner.pw_uid}",
                f"--regid={self._owner.pw_gid}",
                "--clear-groups",
                *command,
            ]
        result = subprocess.run(command, capture_output=True, text=True, cwd=self.root)
        if result.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise subprocess.CalledProcessError(
                result.returncode, command, result.stdout, f"{result.stderr}\n{tail}"
            )


def _unprivileged_user() -> pwd.struct_passwd:
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    pytest.fail("no unprivileged user (postgres or nobody) to run PostgreSQL as", pytrace=False)


def start() -> PostgresServer:
    """Start the session's server (failing, never skipping, when PostgreSQL is missing)."""
    global _running
    _running = own_server()
    return _running


def own_server(*, durable: bool = False) -> PostgresServer:
    """A server of the calling test's own (which it may halt and resume), failing as
    :func:`start` does; the caller stops it."""
    binaries = bin_dir()
    if binaries is None:
        pytest.fail(missing_message(), pytrace=False)
    server = PostgresServer(binaries, durable=durable)
    try:
        server.start()
    except subprocess.CalledProcessError as exc:
        server.stop()
        pytest.fail(f"PostgreSQL did not start: {exc}\n{exc.stderr}", pytrace=False)
    return server


def stop() -> None:
    global _running
    if _running is not None:
        _running.stop()
        _running = None


def running() -> PostgresServer:
    """The session's server (for code that cannot take a fixture, as Hypothesis's state
    machines); the ``postgres_server`` fixture must have started it."""
    if _running is None:
        raise RuntimeError("the postgres_server fixture has not started PostgreSQL")
    return _running


#: What PostgreSQL says when a data file cannot grow (:func:`fill_disk` says it too).
DISK_FULL_MESSAGE: Final = 'could not extend file "base/16384/16385": No space left on device'


def _execute(url: str, sql: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql)


def fill_disk(url: str, *, at_commit: bool = False) -> None:
    """Make the server at ``url`` (its schema) refuse new ``sessions`` rows as a full disk
    does: SQLSTATE ``53100`` (``disk_full``) with PostgreSQL's own message, from a trigger
    (at ``COMMIT`` when ``at_commit``: a deferred constraint trigger). Updates of existing
    rows still go through, as they mostly do on a real full disk. :func:`free_disk` is the
    operator freeing space."""
    _execute(
        url,
        f"""
        CREATE OR REPLACE FUNCTION herald_test_disk_full() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION USING ERRCODE = 'disk_full', MESSAGE = '{DISK_FULL_MESSAGE}',
                HINT = 'Check free disk space.';
        END $$""",
    )
    trigger = (
        "CREATE CONSTRAINT TRIGGER herald_test_disk_full AFTER INSERT ON sessions"
        " DEFERRABLE INITIALLY DEFERRED"
        if at_commit
        else "CREATE TRIGGER herald_test_disk_full BEFORE INSERT ON sessions"
    )
    _execute(url, f"{trigger} FOR EACH ROW EXECUTE FUNCTION herald_test_disk_full()")


def free_disk(url: str) -> None:
    """Undo :func:`fill_disk`."""
    _execute(url, "DROP TRIGGER herald_test_disk_full ON sessions")


def cut_connection(
    url: str, name: str, *, table: str, event: str, when: str, times: int = 1
) -> None:
    """Make the first ``times`` writes (``event``: ``UPDATE``, ``DELETE``) of a ``table`` row
    matching ``when`` (a trigger's ``WHEN`` condition, on ``OLD`` and ``NEW``) lose their
    connection, as a server restarting under them does: the server ends the statement's own
    backend (``pg_terminate_backend``), so the client sees the connection drop mid-write and
    the write is not made. Later ones go through. :func:`cuts` says how many met it.

    Blocking, and its trigger waits for the table's lock: beside a gateway running in the
    test's event loop, call it in a thread (``asyncio.to_thread``), or a transaction of the
    gateway's holding that lock never commits, its loop blocked by this very wait."""
    _execute(url, f"CREATE SEQUENCE herald_test_{name}")
    _execute(
        url,
        f"""
        CREATE FUNCTION herald_test_{name}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            -- A sequence, not a row: it counts even in the transaction the cut aborts.
            IF nextval('herald_test_{name}') <= {times} THEN
                PERFORM pg_terminate_backend(pg_backend_pid());
                PERFORM pg_sleep(60);  -- the termination lands here
            END IF;
            IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
            RETURN NEW;
        END $$""",
    )
    _execute(
        url,
        f"CREATE TRIGGER herald_test_{name} BEFORE {event} ON {table} FOR EACH ROW"
        f" WHEN ({when}) EXECUTE FUNCTION herald_test_{name}()",
    )


def cuts(url: str, name: str) -> int:
    """How many writes met the fault :func:`cut_connection` armed as ``name``."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(f"SELECT last_value, is_called FROM herald_test_{name}").fetchone()
    assert row is not None
    return int(row[0]) if row[1] else 0
