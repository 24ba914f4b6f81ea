"""Which sessions a session's tools may see: ``agent.sessionTools.visibility``.

- ``"tree"`` (default): the session itself and the sub-agent sessions it spawned, down the
  tree — a person's chat never reads or writes another person's;
- ``"agent"``: every session of the same agent;
- ``"all"``: every session.

A key out of scope answers exactly as an unknown one, so a tool cannot even learn that a
session exists. The session tools and the orchestration tools all ask :class:`SessionScope`.
"""

from __future__ import annotations

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

    async def listing(self, *, include_subagents: bool, limit: int) -> list[SessionRecord]:
        """The sessions in scope, most recently updated first (``sessions_list``).

        "tree" walks down from the calling session by parent links (one query per session
        of the tree), never through every session of the gateway.
        """
        if self.visibility != "tree":
            agent_id = self.agent_id if self.visibility == "agent" else None
            return await self._store.list(
                include_subagents=include_subagents, agent_id=agent_id, limit=limit
            )
        origin = await self._store.get(self.origin_key)
        if origin is None or origin.archived:
            return []
        found = [origin] if include_subagents or not origin.is_subagent else []
        frontier = [origin.key] if include_subagents else []
        while frontier:
            children = await self._store.list(include_subagents=True, parent_key=frontier.pop())
            found += children
            frontier += [child.key for child in children]
        found.sort(key=lambda record: record.updated_at, reverse=True)
        return found[:limit]
