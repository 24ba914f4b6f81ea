"""A session's conversation read from its transcript at the cost of what was added since the
last read.

A turn that does not find its session's history in memory rebuilds it from the transcript,
and in a cluster every turn does (another replica may have written the session since). A
transcript only grows, so :class:`ConversationReader` keeps, for the files it read last, the
conversation built so far (a :class:`~gateway.sessions.transcript.ConversationFold`) and the
offset it reached; the next read parses only the lines written after it. The result is the
one a whole read gives, by construction: the same fold over the same records.

A file that is not the one read before (another inode: renewed or archived and replaced,
see :mod:`~gateway.sessions.filecache`) or shorter than the offset (cut short) is read whole
again. Only complete lines are kept in the fold: an unterminated last line that is a whole
object (as a whole read takes it) is added to this read's answer alone, and read again next
time.
Everything here blocks; the store calls it in a worker thread.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final

import orjson

from gateway.llm import ChatMessage
from gateway.sessions.filecache import FileCache
from gateway.sessions.transcript import ConversationFold

log = logging.getLogger(__name__)

Record = dict[str, Any]

#: Transcripts whose conversation so far is kept (each holds what its next request sends,
#: bounded by the context window).
FOLDS_KEPT: Final = 64
#: Bytes parsed at a time when catching up.
CHUNK_BYTES: Final = 1024 * 1024


@dataclass
class _Fold:
    device: int
    inode: int
    #: Offset just past the last complete line fed.
    offset: int = 0
    conversation: ConversationFold = field(default_factory=ConversationFold)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def start_over(self) -> None:
        self.offset, self.conversation = 0, ConversationFold()


class ConversationReader:
    """Conversations of the last :data:`FOLDS_KEPT` transcripts read, kept up to date."""

    def __init__(self, kept: int = FOLDS_KEPT) -> None:
        self._kept = kept
        self._folds = FileCache(_Fold, kept)

    def __repr__(self) -> str:
        return f"<ConversationReader folds={len(self._folds)}/{self._kept}>"

    def read(self, path: Path) -> list[ChatMessage]:
        """The conversation of the transcript at ``path`` (``FileNotFoundError`` when there
        is none)."""
        with open(path, "rb") as file:
            stat = os.fstat(file.fileno())
            fold = self._folds.entry(path, stat)
            with fold.lock:
                if stat.st_size < fold.offset:  # cut short
                    fold.start_over()
                try:
                    tail = self._catch_up(path, fold, file, stat.st_size)
                except BaseException:
                    # Fed in part: the next read starts over rather than feed lines twice.
                    fold.start_over()
                    raise
                if not tail:
                    return fold.conversation.conversation()
                ending = fold.conversation.copy()
                ending.feed(tail)
                return ending.conversation()

    @staticmethod
    def _catch_up(path: Path, fold: _Fold, file: BinaryIO, size: int) -> list[Record]:
        """Feed the complete lines between the fold's offset and ``size``; the record of an
        unterminated last line that parses, if there is one."""
        file.seek(fold.offset)
        rest = b""
        while fold.offset + len(rest) < size:
            chunk = file.read(min(CHUNK_BYTES, size - fold.offset - len(rest)))
            if not chunk:
                break
            data = rest + chunk
            end = data.rfind(b"\n") + 1
            rest = data[end:]
            if end:
                fold.conversation.feed(_records(path, data[:end]))
                fold.offset += end
        return _records(path, rest, quiet=True) if rest.strip() else []


def _records(path: Path, data: bytes, *, quiet: bool = False) -> list[Record]:
    """The records of ``data``'s lines; a line that does not parse is skipped (and logged,
    unless ``quiet``: an unterminated last line may still be being written)."""
    records: list[Record] = []
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            if not quiet:
                log.warning("transcript %s: an unreadable line skipped", path)
            continue
        if isinstance(value, dict):
            records.append(value)
    return records
