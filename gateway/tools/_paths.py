"""Workspace confinement for the file tools (blocking helpers: call them in a thread).

A path from the model names something below the agent's workspace: NUL bytes and ``..``
components are refused outright, and an absolute path is accepted only when it starts with
the workspace's own path. The path is then opened without following a symlink anywhere on
it (:mod:`gateway.tools._beneath`): component by component below a descriptor of the
workspace, so what is opened is what was below the workspace at the moment it was opened,
whatever a sandboxed command swaps meanwhile. A symlink on the path is refused, whether it
points out of the workspace or within it: the file tools never follow one (``ls`` shows
them as entries). Writes make a temporary file in the parent folder's descriptor and rename
it there: a write replaces the directory entry, never writes through what was at the name.

Messages name the workspace-relative path only, never a host path.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

from gateway.tools._beneath import DIR_FLAGS, make_dirs_beneath, open_beneath
from gateway.tools.errors import PathEscapeError, ToolError

#: New workspaces are private to the gateway's user: agents may write secrets into them.
WORKSPACE_MODE: Final = 0o700
#: A regular file for reading: O_NONBLOCK keeps a FIFO from hanging the open.
_READ_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK
#: The temporary file of a write: new, never through a symlink, private until renamed.
_TEMP_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: How much of the target's name a temporary file's name keeps (names are ≤ 255 bytes).
_TEMP_NAME_CHARS: Final = 50
#: Tries at a fresh temporary name (one clash in 2^32 is already unlikely).
_TEMP_TRIES: Final = 8


def ensure_workspace(workspace: Path) -> Path:
    """Create the workspace (mode 0700) when missing; return its fully resolved path.

    Every directory made on the way (``<stateDir>/workspaces`` itself, say) is 0700 too:
    ``mkdir(parents=True)`` would give those the umask's default, usually 0755.
    """
    try:
        missing = [d for d in (workspace, *workspace.parents) if not d.exists()]
        for directory in reversed(missing):
            with contextlib.suppress(FileExistsError):
                directory.mkdir(mode=WORKSPACE_MODE)
                os.chmod(directory, WORKSPACE_MODE)  # mkdir's mode is also cut by the umask
        return workspace.resolve(strict=True)
    except OSError as exc:
        raise ToolError(f"workspace is not usable: {exc.strerror}") from None


@dataclass(frozen=True, slots=True)
class WorkspacePath:
    """A path the model named: the resolved workspace and the components below it."""

    root: Path
    parts: tuple[str, ...]

    @property
    def shown(self) -> str:
        """As shown to the model: relative to the workspace, ``.`` for the workspace."""
        return "/".join(self.parts) or "."

    @property
    def name(self) -> str:
        """The last component (``.`` for the workspace itself)."""
        return self.parts[-1] if self.parts else "."

    @property
    def parent(self) -> tuple[str, ...]:
        return self.parts[:-1]


def locate(workspace: Path, raw: str) -> WorkspacePath:
    """Where ``raw`` points in ``workspace`` (created when missing); nothing is opened yet.

    Raises :class:`PathEscapeError` for a NUL byte, a ``..`` component or an absolute path
    outside the workspace; :class:`ToolError` for an empty path.
    """
    if "\x00" in raw:
        raise PathEscapeError("path contains a NUL byte")
    if not raw.strip():
        raise ToolError("path is empty")
    pure = PurePosixPath(raw)
    if ".." in pure.parts:
        raise PathEscapeError(f"{raw!r}: '..' is not allowed; use paths inside the workspace")
    root = ensure_workspace(workspace)
    if not pure.is_absolute():
        return WorkspacePath(root, pure.parts)
    # The workspace as resolved, or as configured: a prefix by name, never by resolving.
    for base in (root, workspace.absolute()):
        if pure.is_relative_to(base):
            return WorkspacePath(root, pure.relative_to(base).parts)
    raise PathEscapeError(f"{raw!r} is outside the workspace")


def os_error(path: str, exc: OSError) -> ToolError:
    """A tool error for ``exc`` that names the workspace-relative path, never a host path.

    ``ELOOP`` from a no-follow open means a symlink on the path: that is a refusal.
    """
    if exc.errno == errno.ELOOP:
        return PathEscapeError(
            f"{path}: symlinks are not allowed in a path; the file tools do not follow them"
        )
    reason = exc.strerror or type(exc).__name__
    return ToolError(f"{path}: {reason}")


@contextlib.contextmanager
def folder(root: Path, parts: tuple[str, ...], *, create: bool = False) -> Iterator[int]:
    """A descriptor of the folder ``parts`` below the workspace ``root`` (``create``: making
    missing folders on the way), closed afterwards. OSError as the open raises it.

    ``root`` is resolved, so O_NOFOLLOW only refuses a symlink swapped in for the
    workspace itself."""
    root_fd = os.open(root, DIR_FLAGS)
    try:
        fd = (
            make_dirs_beneath(root_fd, parts) if create else open_beneath(root_fd, parts, DIR_FLAGS)
        )
    finally:
        os.close(root_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def open_regular(path: WorkspacePath) -> int:
    """An O_RDONLY descriptor of the regular file ``path`` names; ToolError for anything
    else (a symlink on the way, a folder, a FIFO, a missing file)."""
    try:
        root_fd = os.open(path.root, DIR_FLAGS)
    except OSError as exc:
        raise os_error(path.shown, exc) from None
    try:
        return _checked_regular(lambda: open_beneath(root_fd, path.parts, _READ_FLAGS), path.shown)
    finally:
        os.close(root_fd)


def open_regular_at(dir_fd: int, name: str, shown: str) -> int:
    """:func:`open_regular` for ``name`` in the folder ``dir_fd``."""
    return _checked_regular(lambda: open_beneath(dir_fd, (name,), _READ_FLAGS), shown)


def _checked_regular(opener: Callable[[], int], shown: str) -> int:
    try:
        fd = opener()
    except FileNotFoundError:
        raise ToolError(f"{shown}: no such file") from None
    except IsADirectoryError:
        raise ToolError(f"{shown} is a directory; use ls") from None
    except OSError as exc:
        raise os_error(shown, exc) from None
    try:
        st = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise os_error(shown, exc) from None
    if stat.S_ISDIR(st.st_mode):
        os.close(fd)
        raise ToolError(f"{shown} is a directory; use ls")
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ToolError(f"{shown} is not a regular file")
    return fd


def atomic_write(dir_fd: int, name: str, data: bytes, shown: str) -> None:
    """Replace ``name`` in the folder ``dir_fd`` with ``data``: a temporary file beside it,
    fsync, rename, fsync of the folder.

    The rename replaces the directory entry, so nothing is written through what was there
    (a hard link's other names keep the old content). An existing file's permission bits
    are kept; a new file gets 0666 less the umask. A symlink or a folder at ``name`` is
    refused. OSError as the calls raise it.
    """
    try:
        mode: int | None = _existing_mode(dir_fd, name, shown)
    except FileNotFoundError:
        mode = None
    tmp, fd = _temp_file(dir_fd, name, 0o666 if mode is None else 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    # Makes the rename durable; not every filesystem allows fsync on a directory.
    with contextlib.suppress(OSError):
        os.fsync(dir_fd)


def _existing_mode(dir_fd: int, name: str, shown: str) -> int:
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        raise os_error(shown, OSError(errno.ELOOP, os.strerror(errno.ELOOP)))
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{shown} is a directory")
    return st.st_mode & 0o7777


def _temp_file(dir_fd: int, name: str, mode: int) -> tuple[str, int]:
    """A new temporary file in ``dir_fd`` (its name, an open descriptor)."""
    for _ in range(_TEMP_TRIES):
        tmp = f".{name[:_TEMP_NAME_CHARS]}.{secrets.token_hex(4)}.tmp"
        try:
            return tmp, os.open(tmp, _TEMP_FLAGS, mode, dir_fd=dir_fd)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name")
