"""The conversation a chat turn sends: the session's messages, kept between turns.

The chat runtime is the only writer of chat sessions' messages, so the history a turn ends
with is the history the next turn starts from; it stays in memory for the most recent
sessions, with the prompt size the model last reported for it, and is read back from the
transcript otherwise (compactions applied, so both give the same request). The turn keeps
it within the model's context window (:mod:`gateway.agent.compaction`). A turn that fails
drops its session's entry: the transcript is the truth, and the next turn reloads it.
"""

from __future__ import annotations

from collections import OrderedDict

from gateway.agent.context_window import PromptMeter
from gateway.llm import ChatMessage
from gateway.sessions import SessionStore

#: Sessions whose history stays in memory between turns (the rest re-read their transcript).
HISTORY_CACHE_SESSIONS = 256


class HistoryCache:
    """Recent sessions' histories, least recently used dropped first."""

    def __init__(self, store: SessionStore, *, sessions: int = HISTORY_CACHE_SESSIONS) -> None:
        self._store = store
        self._size = sessions
        self._entries: OrderedDict[str, tuple[list[ChatMessage], PromptMeter]] = OrderedDict()

    def __repr__(self) -> str:
        return f"<HistoryCache sessions={len(self._entries)}/{self._size}>"

    def __len__(self) -> int:
        return len(self._entries)

    async def take(self, key: str) -> tuple[list[ChatMessage], PromptMeter]:
        """The session's history for a new turn, and its prompt meter (the caller owns
        both until :meth:`keep`)."""
        cached = self._entries.pop(key, None)
        if cached is not None:
            return cached
        return await self._store.chat_messages(key), PromptMeter()

    def keep(self, key: str, history: list[ChatMessage], meter: PromptMeter) -> None:
        """Remember the history a turn ended with."""
        self._entries[key] = (history, meter)
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def append(self, key: str, message: ChatMessage) -> None:
        """Add a message written into the session between turns (a sub-agent completion)
        to its cached history; an uncached session reads it from the transcript."""
        cached = self._entries.get(key)
        if cached is not None:
            cached[0].append(message)

    def forget(self, key: str) -> None:
        """Drop ``key``: its next turn reads the transcript."""
        self._entries.pop(key, None)
