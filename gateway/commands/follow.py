"""``herald transcripts show --follow``: print a transcript, then each line as it is written.

The file is read through one open descriptor from start to end, so a rename while following
(the session archived) loses nothing: the lines written before it are read to the end, the
archived file's name is said, and following stops — an archived session gets no more lines.
A line still being written is printed once its newline arrives; a line that does not parse
is reported by its number and skipped. Ctrl-C ends it (exit status 130, from the CLI).

Polling rather than inotify: a quarter of a second is prompt for a person watching, and it
works on every filesystem a state directory may live on (a cluster's shared one included)
with nothing beyond the standard library.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, Final

import orjson

from gateway.constants import ARCHIVE_MARKER
from gateway.sessions import find_archived

#: Seconds between looks at a transcript that has not grown.
POLL_SECONDS: Final = 0.25

Show = Callable[[dict[str, Any]], None]
Say = Callable[[str], None]


class GrowingLines:
    """Turns the bytes of a growing transcript into whole lines, printed as they complete."""

    def __init__(self, *, raw: Callable[[bytes], None] | None, show: Show, warn: Say) -> None:
        self._raw = raw
        self._show = show
        self._warn = warn
        self._pending = b""
        self._number = 0

    def feed(self, data: bytes) -> None:
        complete, newline, rest = (self._pending + data).rpartition(b"\n")
        if not newline:
            self._pending = rest
            return
        self._pending = rest
        for line in complete.split(b"\n"):
            self._number += 1
            if not line.strip():
                continue
            record = _object(line)
            if record is None:
                self._warn(f"warning: line {self._number} is unreadable; skipped")
            elif self._raw is not None:
                self._raw(line + b"\n")
            else:
                self._show(record)

    def finish(self) -> None:
        """The file will not grow: a last line without its newline is whole or torn."""
        tail, self._pending = self._pending, b""
        if not tail.strip():
            return
        if _object(tail) is None:
            self._warn(f"warning: torn last line ({len(tail)} bytes) not shown")
        else:
            self.feed(tail + b"\n")


def _object(line: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _still_there(path: Path, file: BinaryIO) -> bool:
    """True while ``path`` still names the file being read (not renamed away)."""
    try:
        return os.stat(path).st_ino == os.fstat(file.fileno()).st_ino
    except FileNotFoundError:
        return False


def follow(
    path: Path,
    *,
    raw: Callable[[bytes], None] | None,
    show: Show,
    warn: Say,
    flush: Callable[[], None],
    poll_seconds: float = POLL_SECONDS,
) -> int:
    """Print the transcript at ``path`` and then its new lines until it is archived.

    ``raw`` prints a line as written (``--json``); without it, ``show`` renders each record.
    ``warn`` says what was skipped and why following stopped; ``flush`` pushes printed lines
    out (stdout may be a pipe). Returns the exit status.
    """
    try:
        file = path.open("rb")
    except OSError as exc:
        warn(f"cannot read {path}: {exc.strerror or exc}")
        return 1
    lines = GrowingLines(raw=raw, show=show, warn=warn)
    with file:
        lines.feed(file.read())
        if ARCHIVE_MARKER in path.name:
            lines.finish()
            flush()
            warn(f"{path} is an archived transcript; nothing more is written to it")
            return 0
        while True:
            flush()
            chunk = file.read()
            if chunk:
                lines.feed(chunk)
                continue
            if not _still_there(path, file):
                lines.feed(file.read())
                lines.finish()
                flush()
                moved = find_archived(path)
                where = f"; its transcript is now {moved}" if moved else ""
                warn(f"the session was archived{where}. Stopped following")
                return 0
            time.sleep(poll_seconds)
