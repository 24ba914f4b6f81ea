"""One gateway per state directory, and a port taken before anything starts.

Two gateways on one state directory would both recover the same runs and announce them
twice, so ``herald run`` holds an exclusive ``flock`` on ``<stateDir>/herald.lock`` for its
whole life (the kernel drops it when the process dies, ``kill -9`` included; the file itself
is left behind harmlessly). A second start is refused with the holder's pid. The listening
socket is bound before the app starts too, so a port in use is one readable line and no
run was recovered or started by a gateway that cannot serve.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
from pathlib import Path
from typing import Final

LOCK_NAME: Final = "herald.lock"
#: The state directory's mode when this creates it (owner only, as the sessions' folders).
DIR_MODE: Final = 0o700


class AlreadyRunningError(Exception):
    """Another gateway holds the state directory's lock."""

    def __init__(self, state_dir: Path, pid: int | None) -> None:
        self.state_dir = state_dir
        self.pid = pid
        held_by = f"pid {pid}" if pid is not None else "another process"
        super().__init__(f"already running ({held_by}) on state directory {state_dir}")


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


def acquire(state_dir: Path) -> InstanceLock:
    """Lock ``state_dir`` for this process (creating it 0700 if needed); raise
    :class:`AlreadyRunningError` when another process holds it."""
    state_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    path = state_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_pid(fd)
        os.close(fd)
        raise AlreadyRunningError(state_dir, holder) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return InstanceLock(path, fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


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
