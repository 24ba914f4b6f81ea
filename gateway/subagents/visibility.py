"""Which sessions a session's tools may see: ``agent.sessionTools.visibility``.

- ``"tree"`` (default): the session itself and the sub-agent sessions it spawned, down the
  tree — a person's chat never reads or writes another person's;
- ``"agent"``: every session of the same agent;
- ``"all"``: every session.

A key out of scope answers exactly as an unknown one, so a tool cannot even learn that a
session exists. The session tools and the orchestration tools all ask :class:`SessionScope`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from gateway.sessions import SessionNotFoundError, SessionStore
from gateway.state import SessionRecord
from gateway.tools import ToolContext

Visibility = Literal["tree", "agent", "all"]
#: Parent links followed up from a session before giving up (far past any spawn depth).
MAX_TREE_HEIGHT = 32


class SessionScope:
    """The sessions visible from one calling session."""

    def __init__(self, store: SessionStore, ctx: ToolContext) -> None:
        self._store = store
        self.origin_key = ctx.session_key
        self.agent_id = ctx.agent_id
        self.visibility: Visibility = ctx.settings.agent.session_tools.visibility

    def __repr__(self) -> str:
        return f"<SessionScope {self.visibility} from {self.origin_key}>"

    async def sees(self, record: SessionRecord) -> bool:
        """Whether ``record`` is in scope."""
        if self.visibility == "all":
            return True
        if self.visibility == "agent":
            return record.agent_id == self.agent_id
        current: SessionRecord | None = record
        for _ in range(MAX_TREE_HEIGHT):
            if current is None:
                return False
            if current.key == self.origin_key:
                return True
            if current.parent_key is None:
                return False
            current = await self._store.get(current.parent_key)
        return False

    async def require(self, key: str) -> SessionRecord:
        """The session ``key``; :class:`SessionNotFoundError` when unknown or out of scope."""
        record = await self._store.get(key)
        if record is None or not await self.sees(record):
            raise SessionNotFoundError(key)
        return record

    async def only_visible(self, records: Iterable[SessionRecord]) -> list[SessionRecord]:
        """``records`` in scope, in their order."""
        return [record for record in records if await self.sees(record)]
