"""Per-client history files, so a page shows its conversation after a gateway restart.

One file per browser client, ``<dir>/<clientId>.jsonl``: every message frame and run-status
frame the client was sent, one JSON frame per line, as sent. Client ids are checked against
``CLIENT_ID_PATTERN`` (letters, digits, ``_`` and ``-``) before they get here, so they are
safe file names. Loading keeps the last ``history_size`` messages and the latest status of
each run (a torn last line, from a crash, is skipped). A file is rewritten with just that
once it has grown to several times the history size, so it stays bounded.

Appends are one short line each, written in the event loop: the web chat carries a few
frames per turn, and a local append of that size takes microseconds.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Callable
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
        if not CLIENT_ID_PATTERN.fullmatch(client_id):
            raise ValueError(f"not a web chat client id: {client_id!r:.80}")
        return self.directory / f"{client_id}.jsonl"

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

    def append(self, client_id: str, frame: str, keep: Callable[[], Loaded]) -> None:
        """Add one frame to the client's file; compact it to ``keep()`` when it has grown."""
        path = self._path(client_id)
        try:
            self.directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            count = self._lines.get(client_id, 0)
            if count >= COMPACT_FACTOR * (self._history_size + self._runs_kept):
                kept = keep()
                self._rewrite(path, [*kept.messages, *kept.runs.values()])
                count = len(kept.messages) + len(kept.runs)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, FILE_MODE)
            try:
                os.write(fd, frame.encode() + b"\n")
            finally:
                os.close(fd)
            self._lines[client_id] = count + 1
        except OSError as exc:  # the page still gets the frame; only the replay loses it
            log.warning(
                "web chat history not written", extra={"client": client_id, "error": str(exc)}
            )

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
