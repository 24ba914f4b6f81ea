"""The :class:`ToolContext` of a call made from a session: who calls, from where, with what.

Chat turns, sub-agent runs and the HTTP API's ``/v1/tools/invoke`` all build their tool
contexts here, so a tool sees the same caller whichever way it was reached. ``services``
is the narrow set of gateway services that session tools use (a spawner, a turn queue,
the session store), each under its typed :class:`gateway.tools.ServiceKey`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.agent.profile import resolve_agent
from gateway.reload import SettingsHolder
from gateway.state import Origin, SessionRecord
from gateway.tools import ServiceKey, ToolContext


class ToolContexts:
    """Builds tool contexts from the settings in force and the tool services."""

    def __init__(self, holder: SettingsHolder, services: Mapping[ServiceKey[Any], object]) -> None:
        self._holder = holder
        self._services = services

    def __repr__(self) -> str:
        return f"<ToolContexts services={sorted(k.name for k in self._services)}>"

    def for_session(
        self,
        session: SessionRecord,
        *,
        run_id: str | None = None,
        origin: Origin | None = None,
        depth: int = 0,
    ) -> ToolContext:
        """The context of a call made from ``session`` (in sub-agent run ``run_id`` at
        ``depth``; in a chat turn answering a message from ``origin``)."""
        settings = self._holder.current
        profile = resolve_agent(settings, session.agent_id)
        return ToolContext(
            agent_id=session.agent_id,
            session_key=session.key,
            workspace=profile.workspace,
            settings=settings,
            session_id=session.session_id,
            is_subagent=session.is_subagent,
            run_id=run_id,
            origin=origin,
            depth=depth,
            services=self._services,
        )
