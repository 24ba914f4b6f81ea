"""Open a path below a directory descriptor without following a symlink anywhere on it.

Resolving a path by name and then opening it is a race: between the two, a process that
can write the directory (a sandboxed ``exec`` command) can swap a folder for a symlink,
and the open follows it. Here nothing is resolved by name from the top: each component is
opened relative to the descriptor of the one before, and a symlink component fails with
``ELOOP`` instead of being followed. Whatever is swapped in or out meanwhile, the result is
a descriptor of something that was, at the moment it was opened, below ``dir_fd``.

Where the kernel has it (Linux 5.6+), one ``openat2`` call does the whole walk
(``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS``); Python has no binding
for it, so it goes through ``syscall(2)`` by ctypes. Where it is missing or filtered
(``ENOSYS``, or ``EPERM`` from a seccomp policy), or on another architecture, the same walk
is done one ``openat(O_NOFOLLOW)`` per component. Callers never pass ``..`` (refused
before), so both ways mean the same.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import stat
from collections.abc import Callable, Sequence
from typing import Any, Final

#: openat2's syscall number on the architectures that use it here (the same on both).
_SYS_OPENAT2: Final = {"x86_64": 437, "aarch64": 437}
# <linux/openat2.h>
_RESOLVE_NO_MAGICLINKS: Final = 0x02
_RESOLVE_NO_SYMLINKS: Final = 0x04
_RESOLVE_BENEATH: Final = 0x08
_RESOLVE: Final = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
#: openat2 says EAGAIN when a concurrent rename made it unsure; it asks for a retry.
_EAGAIN_RETRIES: Final = 3
#: Every directory on the way: a directory, not a symlink, not inherited by children.
DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


def _load_openat2() -> tuple[Callable[..., Any], int] | None:
    number = _SYS_OPENAT2.get(platform.machine())
    if number is None:
        return None
    try:
        syscall = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long
    return syscall, number


_openat2 = _load_openat2()


def openat2_in_use() -> bool:
    """Whether :func:`open_beneath` uses ``openat2`` (False after the kernel refused it)."""
    return _openat2 is not None


def _try_openat2(dir_fd: int, path: str, flags: int, mode: int) -> int | None:
    """The descriptor openat2 gives, or None where openat2 is not available (remembered)."""
    global _openat2
    if _openat2 is None:
        return None
    syscall, number = _openat2
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, _RESOLVE)
    encoded = os.fsencode(path)
    for _ in range(_EAGAIN_RETRIES):
        fd = int(
            syscall(
                ctypes.c_long(number),
                ctypes.c_int(dir_fd),
                ctypes.c_char_p(encoded),
                ctypes.byref(how),
                ctypes.c_size_t(ctypes.sizeof(how)),
            )
        )
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        if code in (errno.ENOSYS, errno.EPERM):
            _openat2 = None
            return None
        if code != errno.EAGAIN:
            raise OSError(code, os.strerror(code))
    return None  # still unsure after the retries: the walk decides


def open_beneath(dir_fd: int, parts: Sequence[str], flags: int, mode: int = 0o666) -> int:
    """A descriptor of ``parts`` (path components, no ``..``) below ``dir_fd``, opened with
    ``flags`` (O_NOFOLLOW and O_CLOEXEC are added); no symlink is followed on the way.

    OSError as ``open`` raises it; ``ELOOP`` when a component is a symlink. An empty
    ``parts`` opens ``dir_fd``'s directory itself.
    """
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = _try_openat2(dir_fd, "/".join(parts) or ".", flags, mode)
    except NotADirectoryError:
        fd = None  # a symlink where a folder is wanted says ENOTDIR: the walk tells which
    if fd is not None:
        return fd
    return _walk(dir_fd, parts, flags, mode)


def _walk(dir_fd: int, parts: Sequence[str], flags: int, mode: int) -> int:
    if not parts:
        return os.open(".", flags, mode, dir_fd=dir_fd)
    current = dir_fd
    try:
        for part in parts[:-1]:
            step = _open_at(current, part, DIR_FLAGS, 0)
            if current != dir_fd:
                os.close(current)
            current = step
        return _open_at(current, parts[-1], flags, mode)
    finally:
        if current != dir_fd:
            os.close(current)


def _open_at(dir_fd: int, name: str, flags: int, mode: int) -> int:
    """``openat`` of one component; ``ELOOP`` for a symlink, even where the kernel says
    ``ENOTDIR`` (O_DIRECTORY | O_NOFOLLOW on a symlink)."""
    try:
        return os.open(name, flags, mode, dir_fd=dir_fd)
    except NotADirectoryError:
        if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP)) from None
        raise


def make_dirs_beneath(dir_fd: int, parts: Sequence[str], mode: int = 0o777) -> int:
    """Like :func:`open_beneath` for a directory, creating each missing component (with
    ``mode``, cut by the umask) on the way; never through a symlink."""
    try:
        return open_beneath(dir_fd, parts, DIR_FLAGS)
    except FileNotFoundError:
        pass
    current = os.dup(dir_fd)
    try:
        for part in parts:
            try:
                step = _open_at(current, part, DIR_FLAGS, 0)
            except FileNotFoundError:
                # Made meanwhile by someone else (FileExistsError)? Opened, or refused, below.
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, mode, dir_fd=current)
                step = _open_at(current, part, DIR_FLAGS, 0)
            os.close(current)
            current = step
    except BaseException:
        os.close(current)
        raise
    return current
