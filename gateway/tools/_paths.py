"""Workspace confinement for the file tools (blocking helpers: call them in a thread).

A path from the model is accepted only when, with every symlink of it resolved, it names
the workspace or something inside it. ``..`` components and NUL bytes are refused outright;
absolute paths are accepted only when they land inside the workspace. Because the resolved
path is what gets opened (and writes replace the resolved target by rename), no read or
write ever goes through a symlink that points outside.

Residual risk, accepted: a process that can write the workspace (``exec``, when allowed)
could swap a directory for a symlink between the check and the open.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path, PurePosixPath

from gateway.tools.errors import PathEscapeError, ToolError

#: New workspaces are private to the gateway's user: agents may write secrets into them.
WORKSPACE_MODE = 0o700


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


def resolve_in_workspace(workspace: Path, raw: str) -> tuple[Path, Path]:
    """``(root, real)``: the resolved workspace and the resolved path ``raw`` names in it.

    Raises :class:`PathEscapeError` for a NUL byte, a ``..`` component, or a path that
    resolves (symlinks followed) outside the workspace; :class:`ToolError` for an empty path.
    """
    if "\x00" in raw:
        raise PathEscapeError("path contains a NUL byte")
    if not raw.strip():
        raise ToolError("path is empty")
    pure = PurePosixPath(raw)
    if ".." in pure.parts:
        raise PathEscapeError(f"{raw!r}: '..' is not allowed; use paths inside the workspace")
    root = ensure_workspace(workspace)
    candidate = Path(pure) if pure.is_absolute() else root / pure
    # realpath (non-strict) follows every symlink that exists, the last component included,
    # so a dangling link to /etc/x resolves to /etc/x and is refused below.
    real = Path(os.path.realpath(candidate))
    if real != root and root not in real.parents:
        raise PathEscapeError(f"{raw!r} is outside the workspace")
    return root, real


def display(root: Path, real: Path) -> str:
    """``real`` relative to the workspace, as shown to the model (``.`` for the root)."""
    rel = real.relative_to(root)
    return rel.as_posix() if rel.parts else "."


def os_error(path: str, exc: OSError) -> ToolError:
    """A tool error for ``exc`` that names the workspace-relative path, never a host path."""
    reason = exc.strerror or type(exc).__name__
    return ToolError(f"{path}: {reason}")


def atomic_write(target: Path, data: bytes) -> None:
    """Replace ``target`` with ``data``: temp file in the same folder, fsync, rename.

    The rename replaces the directory entry itself, so a symlink at ``target`` would be
    replaced, never written through (callers pass resolved paths anyway). An existing
    file's permission bits are kept.
    """
    try:
        mode: int | None = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = None
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:50]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)


def _fsync_dir(folder: Path) -> None:
    # Makes the rename durable; not every filesystem allows fsync on a directory.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def open_regular(real: Path, shown: str) -> int:
    """An O_RDONLY descriptor of the regular file at ``real``; ToolError for anything else.

    O_NONBLOCK keeps a FIFO from hanging the open; O_NOFOLLOW refuses a symlink swapped in
    after the check.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(real, flags)
    except IsADirectoryError:
        raise ToolError(f"{shown} is a directory; use ls") from None
    except FileNotFoundError:
        raise ToolError(f"{shown}: no such file") from None
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
