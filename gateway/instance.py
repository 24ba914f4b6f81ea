"""One gateway per state directory (one per replica id in a cluster), and a port taken
before anything starts.

Two gateways on one state directory would both recover the same runs and announce them
twice, so ``herald run`` holds an exclusive ``flock`` on ``<stateDir>/herald.lock`` for its
whole life (the kernel drops it when the process dies, ``kill -9`` included; the file itself
is left behind harmlessly). A second start is refused with the holder's pid. Replicas of a
cluster share the state directory and coordinate through the database, so each locks
``<stateDir>/replicas/<replicaId>.lock`` instead: another replica id starts, the same one is
refused. (``flock`` reaches other hosts only on a filesystem that passes it on, as NFSv4
does.) The lock file says who holds it: the pid on its first line and the config file the
gateway runs on the second (empty for the embedded defaults), so ``herald status`` and the
other commands can find the config a running gateway uses (:func:`holder`). The listening
socket is bound before the app starts too, so a port in use is one readable line and no
run was recovered or started by a gateway that cannot serve.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gateway.files import DIR_MODE

LOCK_NAME: Final = "herald.lock"
#: Where replicas of a cluster keep their locks, one file per replica id.
REPLICAS_DIR: Final = "replicas"
#: A replica's lock file name: an id normalised by the caller (never a raw one in a path).
_REPLICA_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
#: Enough for a pid and a config path (PATH_MAX is 4096).
LOCK_TEXT_MAX: Final = 4200


class AlreadyRunningError(Exception):
    """Another gateway holds the state directory's lock (or this replica id's)."""

    def __init__(self, state_dir: Path, pid: int | None, replica: str | None = None) -> None:
        self.state_dir = state_dir
        self.pid = pid
        self.replica = replica
        held_by = f"pid {pid}" if pid is not None else "another process"
        what = "already running" if replica is None else f"replica {replica} already running"
        super().__init__(f"{what} ({held_by}) on state directory {state_dir}")


class PortInUseError(Exception):
    """The gateway's address cannot be bound."""

    def __init__(self, host: str, port: int, error: OSError) -> None:
        self.host = host
        self.port = port
        if error.errno == errno.EADDRINUSE:
            reason = "the port is in use (is another gateway or program listening?)"
        else:
            reason = error.strerror or str(error)
        super().__init__(f"cannot listen on {host}:{port}: {reason}")


class InstanceLock:
    """The held lock; :meth:`release` (or process exit) lets it go."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def __repr__(self) -> str:
        return f"<InstanceLock {self.path} held={self._fd is not None}>"

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def lock_path(state_dir: Path, replica: str | None = None) -> Path:
    """The lock file of the state directory, or of replica ``replica`` (a normalised id)."""
    if replica is None:
        return state_dir / LOCK_NAME
    if not _REPLICA_NAME.fullmatch(replica):
        raise ValueError(f"replica lock name {replica!r:.80} is not a normalised id")
    return state_dir / REPLICAS_DIR / f"{replica}.lock"


def acquire(
    state_dir: Path, replica: str | None = None, config: Path | None = None
) -> InstanceLock:
    """Lock ``state_dir`` for this process (creating it 0700 if needed), or with
    ``replica`` (a normalised replica id) that replica's lock in it; raise
    :class:`AlreadyRunningError` when another process holds it. ``config`` (the file the
    gateway runs on) is written beside the pid."""
    state_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    path = lock_path(state_dir, replica)
    path.parent.mkdir(mode=DIR_MODE, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_pid(fd)
        os.close(fd)
        raise AlreadyRunningError(state_dir, holder, replica) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    shown = str(config.resolve()) if config is not None else ""
    os.pwrite(fd, f"{os.getpid()}\n{shown}\n".encode(), 0)
    return InstanceLock(path, fd)


@dataclass(frozen=True)
class Holder:
    """The gateway holding a lock: its pid (-1 when the file does not say) and config file
    (None for the embedded defaults, or a lock written before the file said)."""

    pid: int
    config: Path | None


def _read_holder(fd: int) -> Holder | None:
    try:
        text = os.pread(fd, LOCK_TEXT_MAX, 0).decode("utf-8", "replace")
    except OSError:
        return None
    first, _, rest = text.partition("\n")
    config = rest.split("\n", 1)[0].strip()
    pid = int(first) if first.strip().isdigit() else -1
    return Holder(pid, Path(config) if config else None)


def _read_pid(fd: int) -> int | None:
    found = _read_holder(fd)
    return found.pid if found is not None and found.pid >= 0 else None


def holder(lock: Path) -> Holder | None:
    """The gateway holding the lock file ``lock`` (or, for a directory, the state
    directory's lock in it), or None when none runs."""
    path = lock / LOCK_NAME if lock.is_dir() else lock
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_holder(fd) or Holder(-1, None)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None  # nobody holds it: no gateway on this state directory
    finally:
        os.close(fd)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (raises :class:`PortInUseError`)."""
    try:
        return socket.create_server(
            (host, port),
            family=socket.AF_INET6 if ":" in host else socket.AF_INET,
            reuse_port=False,
        )
    except OSError as exc:
        raise PortInUseError(host, port, exc) from exc
