"""How much disk an agent's workspace holds, and the limit on it that stops ``exec``.

A sandboxed command writes only to its workspace (on disk) and its memory-backed ``/tmp``
(sized by the sandbox). :func:`check_workspace` refuses the next command while the
workspace holds more than ``agent.tools.exec.sandbox.maxWorkspaceMb``: it is a check between
commands, not a quota (one command may still write until the disk is full; each file is
bounded by ``maxFileMb``).

The workspace is hostile input, written by the commands themselves, so :func:`measure`:

- counts allocated blocks (``st_blocks``, as ``du`` does: a sparse file counts what it
  holds), each hard-linked inode once;
- follows no symbolic link: entries are examined with ``lstat`` relative to the folder's
  descriptor, and a folder is opened with ``O_NOFOLLOW`` and must be the very inode its
  parent listed (a folder swapped for a link between the listing and the open is left out);
- is bounded: at most :data:`MAX_ENTRIES` entries, and paths no longer than the kernel
  takes; a workspace it cannot measure within that, or with a folder it cannot read,
  counts as over the limit (a limit an unreadable folder could hide from would not hold);
- never crashes on what it finds: FIFOs, sockets and devices are never opened, names need
  not be UTF-8, and entries that vanish while it walks are skipped.

It measures before every command, with no cache: any command may have grown the workspace
by gigabytes, and a cached size would let the next one run. The walk costs a few
microseconds an entry, in a worker thread.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gateway.tools._beneath import DIR_FLAGS
from gateway.tools.errors import WorkspaceOverLimitError

MIB: Final = 1024 * 1024
#: ``st_blocks`` is in 512-byte units whatever the file system's block size.
BLOCK_BYTES: Final = 512
#: Entries (files, folders, links) a measurement examines at most: ~0.5 s of CPU for
#: 200,000 on a small machine (measured), so the check never costs a command much more.
MAX_ENTRIES: Final = 200_000


@dataclass(frozen=True, slots=True)
class Usage:
    """What a measurement found: the bytes counted, and why it could not finish (None: it
    did, and ``bytes`` is the workspace's size)."""

    bytes: int
    unmeasured: str | None = None


def measure(root: Path, *, max_entries: int = MAX_ENTRIES) -> Usage:
    """The disk space the tree at ``root`` holds (``root`` itself must not be a link)."""
    top = os.open(root, DIR_FLAGS)
    try:
        return _Walk(top, max_entries).run()
    finally:
        os.close(top)


class _Walk:
    def __init__(self, top: int, max_entries: int) -> None:
        self.top = top
        self.max_entries = max_entries
        self.entries = 0
        self.total = 0
        self.linked: set[tuple[int, int]] = set()

    def run(self) -> Usage:
        here = os.fstat(self.top)
        self.total = here.st_blocks * BLOCK_BYTES
        # Folders still to list: path relative to the top, and the inode their parent saw.
        pending: list[tuple[str, int, int]] = [("", here.st_dev, here.st_ino)]
        while pending:
            relative, device, inode = pending.pop()
            try:
                fd = self.top if not relative else open_folder(self.top, relative, device, inode)
            except PermissionError:
                return Usage(self.total, f"the folder {relative!r} cannot be read")
            except OSError as exc:
                if exc.errno == errno.ENAMETOOLONG:
                    return Usage(self.total, "its folders are nested too deep to measure")
                continue  # gone, or replaced by something else, since it was listed
            if fd is None:
                continue
            try:
                problem = self._list(fd, relative, pending)
            finally:
                if fd != self.top:
                    os.close(fd)
            if problem is not None:
                return Usage(self.total, problem)
        return Usage(self.total)

    def _list(self, fd: int, relative: str, pending: list[tuple[str, int, int]]) -> str | None:
        try:
            listing = os.scandir(fd)
        except PermissionError:
            return f"the folder {relative or '.'!r} cannot be read"
        with listing:
            for entry in listing:
                self.entries += 1
                if self.entries > self.max_entries:
                    return f"it holds more than {self.max_entries} files and folders"
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # vanished while listed
                except OSError:  # a folder that may be listed but not searched (r, no x)
                    return f"the folder {relative or '.'!r} cannot be read"
                if stat.S_ISDIR(info.st_mode):
                    name = os.path.join(relative, entry.name)
                    pending.append((name, info.st_dev, info.st_ino))
                elif info.st_nlink > 1:
                    key = (info.st_dev, info.st_ino)
                    if key in self.linked:
                        continue
                    self.linked.add(key)
                self.total += info.st_blocks * BLOCK_BYTES
        return None


def open_folder(top: int, relative: str, device: int, inode: int) -> int | None:
    """A descriptor of the folder at ``relative`` under ``top``, if it is still the inode
    ``(device, inode)`` that was listed; None if something else is there now (a link
    swapped in above it would have led the open elsewhere: the inode tells)."""
    fd = os.open(relative, DIR_FLAGS, dir_fd=top)
    found = os.fstat(fd)
    if (found.st_dev, found.st_ino) == (device, inode):
        return fd
    os.close(fd)
    return None


def check_workspace(root: Path, limit_mb: int) -> None:
    """Raise :class:`WorkspaceOverLimitError` when the workspace at ``root`` holds more than
    ``limit_mb`` MiB, or cannot be measured (0: no limit, nothing is measured)."""
    if limit_mb == 0:
        return
    try:
        usage = measure(root)
    except OSError as exc:  # the workspace itself (resolved by the caller) went away
        usage = Usage(0, exc.strerror or "it cannot be opened")
    if usage.unmeasured is not None:
        raise WorkspaceOverLimitError(
            f"commands are refused: the workspace cannot be measured against its limit of "
            f"{limit_mb} MiB ({usage.unmeasured}). {_WHAT_TO_DO}"
        )
    if usage.bytes > limit_mb * MIB:
        tenths = -(-usage.bytes * 10 // MIB)  # rounded up: never "2048.0, over 2048"
        raise WorkspaceOverLimitError(
            f"commands are refused: the workspace holds {tenths / 10:.1f} MiB, over its limit of "
            f"{limit_mb} MiB. {_WHAT_TO_DO}"
        )


_WHAT_TO_DO: Final = (
    "Empty files with the write tool until it is under the limit, or ask an operator to "
    "free space or raise agent.tools.exec.sandbox.maxWorkspaceMb."
)
