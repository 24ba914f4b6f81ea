"""A sub-agent's session as a turn runs in it: its setup, its sink and its conversation.

Shared by the run itself (:mod:`gateway.subagents.runner`) and its announce turn
(:mod:`gateway.subagents.announce`): both run in the child session with the target agent's
system prompt plus the sub-agent suffix, the run's model, its depth and the sub-agent tool
set (intersected down the chain of sessions above it, see :meth:`ChildSessions.lineage`).
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

from gateway.agent import StoreSink, TurnFactory, TurnSetup, agents_above, resolve_agent
from gateway.llm import ChatMessage
from gateway.sessions import chat_messages_from_records
from gateway.state import RunRecord, SessionRecord
from gateway.tools import ToolRegistry, tools_for_subagent


def spawned_event(run: RunRecord, *, task: bool) -> tuple[str, dict[str, Any]]:
    """The ``spawned`` event of ``run``: in its requester's transcript, and (``task``)
    first after the header of the child's own."""
    data: dict[str, Any] = {
        "runId": run.run_id,
        "childSessionKey": run.child_session_key,
        "label": run.request.label,
    }
    if task:
        data["task"] = run.request.task
    return "spawned", data


@functools.cache
def _subagent_suffix() -> str:
    return resources.files("gateway.templates").joinpath("subagent.md").read_text("utf-8")


class ChildSessions:
    """Builds what a turn in a sub-agent's session runs with."""

    def __init__(self, turns: TurnFactory) -> None:
        self._turns = turns
        self._store = turns.store

    @property
    def tools(self) -> ToolRegistry:
        """The tool registry in force (rebuilt on reload)."""
        return self._turns.tools

    def setup(
        self, run: RunRecord, child: SessionRecord, *, lineage: tuple[str, ...] = ()
    ) -> tuple[TurnSetup, StoreSink]:
        """The turn setup and transcript sink of a turn in ``run``'s child session;
        ``lineage`` is :meth:`lineage` (needed for the tools of a run below depth 1)."""
        settings = self._turns.settings
        target = resolve_agent(settings, run.request.agent_id)
        return self._turns.prepare(
            child,
            model_ref=run.request.model or target.model_ref,
            system=target.system_prompt.rstrip() + "\n" + _subagent_suffix(),
            tools=tools_for_subagent(
                settings,
                run.request.requester_agent_id,
                run.request.agent_id,
                self._turns.tools,
                lineage=lineage,
            ),
            max_iterations=target.max_iterations,
            run_id=run.run_id,
            depth=run.request.depth,
        )

    async def lineage(self, run: RunRecord) -> tuple[str, ...]:
        """The agents of the sessions above ``run``'s requester (none at depth 1)."""
        if run.request.depth <= 1:
            return ()
        return agents_above(await self._store.db.runs.lineage(run.run_id))

    async def history(
        self, child: SessionRecord, run: RunRecord, *, resume: bool
    ) -> list[ChatMessage]:
        """The child's conversation: the task (after the requester's conversation, copied
        into the transcript at spawn, for ``context: "fork"``), or (resuming) its transcript
        with every tool call that lost its result answered as interrupted, in the file too."""
        if resume:
            records = (await self._store.read(child.key)).records
            raw_results = {
                (r.get("message") or {}).get("toolCallId")
                for r in records
                if r.get("type") == "message" and (r.get("message") or {}).get("role") == "tool"
            }
            history = chat_messages_from_records(records)
            for message in history:
                if message.role == "tool" and message.tool_call_id not in raw_results:
                    await self._store.append_message(child, message)
            if history:
                await self._store.append_event(child, "resumed", {"runId": run.run_id})
                return history
        forked = await self._store.chat_messages(child.key) if run.request.context == "fork" else []
        task = ChatMessage(role="user", content=run.request.task)
        await self._store.append_message(child, task)
        return [*forked, task]
