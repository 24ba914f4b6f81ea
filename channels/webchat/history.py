"""Per-client history files, so a page shows its conversation after a gateway restart.

One file per browser client, ``<dir>/<name>.jsonl``: every message frame and run-status
frame the client was sent, one JSON frame per line, as sent. Client ids are checked against
``CLIENT_ID_PATTERN`` (letters, digits, ``_`` and ``-``) before they get here; the name is
the id itself when it is lowercase (as the page makes them), else a lowercase head and a
hash of the id (:func:`file_name`), so ids that differ only in case never share a file, even
on a filesystem that ignores case. A lowercase id shaped like such a name (ending in ``-``
and 16 hex digits) is hashed too: no client can name another's file as its id. Loading keeps
the last ``history_size`` messages and the latest status of each run (a torn last line, from
a crash, is skipped). A file is rewritten with just that once it has grown to several times
the history size, so it stays bounded.

Appends are one short line each, written in the event loop: the web chat carries a few
frames per turn, and a local append of that size takes microseconds. Several gateway
replicas may share the directory (a cluster), so each append and each compaction holds an
exclusive ``flock`` on the directory's lock file, and a compaction keeps what the file
holds — every replica's lines — not what this process remembers.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import orjson

from channels.webchat.protocol import CLIENT_ID_PATTERN

log = logging.getLogger(__name__)

FILE_MODE: Final = 0o600
DIR_MODE: Final = 0o700
#: Rewrite a file once it holds this many times the lines that loading would keep.
COMPACT_FACTOR: Final = 4
#: Client ids used as file names as they are: lowercase, not starting with ``_`` or ``-``.
_PLAIN_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
#: Hex digits of SHA-256 in the name of any other id: 64 bits, no accidental collision.
_HASH_DIGITS: Final = 16
#: The tail of a hashed name (or a hashed name with no head): never a plain name.
_HASHED_SHAPE: Final = re.compile(r"(?:^|-)[0-9a-f]{16}\Z")
#: The lock file of the directory (no client's file: those never start with a dot).
LOCK_NAME: Final = ".lock"


def file_name(client_id: str) -> str:
    """The name (without ``.jsonl``) of ``client_id``'s history file."""
    if not CLIENT_ID_PATTERN.fullmatch(client_id):
        raise ValueError(f"not a web chat client id: {client_id!r:.80}")
    if _PLAIN_NAME.fullmatch(client_id) and not _HASHED_SHAPE.search(client_id):
        return client_id
    digest = hashlib.sha256(client_id.encode()).hexdigest()[:_HASH_DIGITS]
    head = client_id.lower().lstrip("_-")[: 63 - _HASH_DIGITS]
    return f"{head}-{digest}" if head else digest


@dataclass
class Loaded:
    """What a client's file holds: its last messages and each run's latest status frame."""

    messages: list[str] = field(default_factory=list)
    runs: OrderedDict[str, str] = field(default_factory=OrderedDict)


class HistoryFiles:
    """The history files of one web chat, in ``directory`` (created 0700 on first write)."""

    def __init__(self, directory: Path, *, history_size: int, runs_kept: int) -> None:
        self.directory = directory
        self._history_size = history_size
        self._runs_kept = runs_kept
        self._lines: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"<HistoryFiles {self.directory}>"

    def _path(self, client_id: str) -> Path:
        return self.directory / f"{file_name(client_id)}.jsonl"

    def load(self, client_id: str) -> Loaded:
        """The client's kept messages and run statuses (empty when it has no file)."""
        loaded = Loaded()
        try:
            data = self._path(client_id).read_bytes()
        except FileNotFoundError:
            return loaded
        except OSError as exc:
            log.warning(
                "web chat history unreadable", extra={"client": client_id, "error": str(exc)}
            )
            return loaded
        lines = data.splitlines()
        self._lines[client_id] = len(lines)
        for line in lines:
            try:
                frame = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a torn last line
            if not isinstance(frame, dict):
                continue
            text = line.decode()
            if frame.get("type") == "run" and isinstance(frame.get("runId"), str):
                loaded.runs[frame["runId"]] = text
                loaded.runs.move_to_end(frame["runId"])
            elif frame.get("type") == "message":
                loaded.messages.append(text)
        loaded.messages = loaded.messages[-self._history_size :]
        while len(loaded.runs) > self._runs_kept:
            loaded.runs.popitem(last=False)
        return loaded

    def append(self, client_id: str, frame: str) -> None:
        """Add one frame to the client's file; compact the file first when it has grown."""
        path = self._path(client_id)
        try:
            self.directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            with self._locked():
                count = self._lines.get(client_id, 0)
                if count >= COMPACT_FACTOR * (self._history_size + self._runs_kept):
                    kept = self.load(client_id)
                    self._rewrite(path, [*kept.messages, *kept.runs.values()])
                    count = len(kept.messages) + len(kept.runs)
                flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
                fd = os.open(path, flags, FILE_MODE)
                try:
                    os.write(fd, frame.encode() + b"\n")
                finally:
                    os.close(fd)
            self._lines[client_id] = count + 1
        except OSError as exc:  # the page still gets the frame; only the replay loses it
            log.warning(
                "web chat history not written", extra={"client": client_id, "error": str(exc)}
            )

    @contextmanager
    def _locked(self) -> Iterator[None]:
        # Held for one append (microseconds), so waiting for another replica's is brief.
        fd = os.open(self.directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    @staticmethod
    def _rewrite(path: Path, frames: list[str]) -> None:
        temp = path.with_suffix(".jsonl.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
        try:
            os.write(fd, "".join(f"{frame}\n" for frame in frames).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
