"""What a reader keeps per transcript between reads, for the files read last, each entry
bound to one file.

A transcript only grows, so a reader may keep what it learnt from a file (a line index, the
conversation folded so far) and next time read only what was added. That holds while the
path names the same file: an entry remembers the file's device and inode, and a path whose
file was replaced (renewed, or archived and written again) gets a fresh entry. A file cut
short is the same file: its entry's owner notices that under the entry's own lock.
Thread-safe; everything here blocks (callers run in a worker thread).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Generic, Protocol, TypeVar


class FileEntry(Protocol):
    """What a cache entry knows of its file: which one it is."""

    @property
    def device(self) -> int: ...

    @property
    def inode(self) -> int: ...


E = TypeVar("E", bound=FileEntry)


class FileCache(Generic[E]):
    """The entries of the last ``kept`` files read (least recently read out first), each
    made by ``new(device, inode)``."""

    def __init__(self, new: Callable[[int, int], E], kept: int) -> None:
        self._new = new
        self._kept = kept
        self._entries: OrderedDict[Path, E] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, path: Path, stat: os.stat_result) -> E:
        """The entry of the file at ``path`` (``stat``: of the file the caller has open),
        a fresh one when there was none or the file is another; now the most recent."""
        with self._lock:
            entry = self._entries.pop(path, None)
            if entry is None or (entry.device, entry.inode) != (stat.st_dev, stat.st_ino):
                entry = self._new(stat.st_dev, stat.st_ino)
            self._entries[path] = entry
            while len(self._entries) > self._kept:
                self._entries.popitem(last=False)
            return entry
