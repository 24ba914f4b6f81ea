"""The conversation a chat turn sends: the session's recent messages, kept between turns.

The chat runtime is the only writer of chat sessions' messages, so the history a turn ends
with is the history the next turn starts from; it stays in memory for the most recent
sessions and is read back from the transcript otherwise. A turn that fails drops its
session's entry: the transcript is the truth, and the next turn reloads it.
"""

from __future__ import annotations

from collections import OrderedDict

from gateway.llm import ChatMessage
from gateway.sessions import SessionStore

#: Messages of history sent with each turn: enough context, bounded cost and latency.
HISTORY_LIMIT = 200
#: Sessions whose history stays in memory between turns (the rest re-read their transcript).
HISTORY_CACHE_SESSIONS = 256


def trim_history(history: list[ChatMessage], limit: int = HISTORY_LIMIT) -> list[ChatMessage]:
    """The last ``limit`` messages, starting at a user message so no tool result is orphaned."""
    if len(history) <= limit:
        return history
    tail = history[-limit:]
    for index, message in enumerate(tail):
        if message.role == "user":
            return tail[index:]
    return tail[-1:]


class HistoryCache:
    """Recent sessions' histories, least recently used dropped first."""

    def __init__(self, store: SessionStore, *, sessions: int = HISTORY_CACHE_SESSIONS) -> None:
        self._store = store
        self._size = sessions
        self._entries: OrderedDict[str, list[ChatMessage]] = OrderedDict()

    def __repr__(self) -> str:
        return f"<HistoryCache sessions={len(self._entries)}/{self._size}>"

    def __len__(self) -> int:
        return len(self._entries)

    async def take(self, key: str) -> list[ChatMessage]:
        """The session's history for a new turn (the caller owns it until :meth:`keep`)."""
        cached = self._entries.pop(key, None)
        if cached is not None:
            return cached
        return trim_history(await self._store.chat_messages(key))

    def keep(self, key: str, history: list[ChatMessage]) -> None:
        """Remember the history a turn ended with."""
        self._entries[key] = trim_history(history)
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def append(self, key: str, message: ChatMessage) -> None:
        """Add a message written into the session between turns (a sub-agent completion)
        to its cached history; an uncached session reads it from the transcript."""
        cached = self._entries.get(key)
        if cached is not None:
            cached.append(message)

    def forget(self, key: str) -> None:
        """Drop ``key``: its next turn reads the transcript."""
        self._entries.pop(key, None)
