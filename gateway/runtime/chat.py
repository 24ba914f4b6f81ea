"""Chat turns: an inbound message → its agent and session → a turn → the reply.

The router (DESIGN §3 step 1) picks the agent from the channel's config and the session key
from the chat (DESIGN §7). The turn is queued on the session's lane (one turn at a time per
session) and, inside it, waits for a ``main`` lane slot (bounded overall concurrency). The
channel's handler returns as soon as the turn is queued: Slack and Discord want fast acks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, defaultdict
from typing import Any

from channels import ChannelSendError, InboundMessage, OutboundMessage
from gateway.llm import ChatMessage
from gateway.providers import ProviderError
from gateway.runtime.agents import resolve_agent
from gateway.runtime.commands import HELP_TEXT, ChatCommand, CommandUsageError, parse_command
from gateway.runtime.sink import StoreSink
from gateway.runtime.turn import TurnSetup, run_turn
from gateway.services import Services
from gateway.sessions import SessionError, key_for_inbound
from gateway.state import Origin, RunRecord, SessionRecord
from gateway.subagents.announce import run_name
from gateway.subagents.manager import (
    RunFinishedError,
    RunNotFoundError,
    SpawnRequest,
    SubagentManager,
)
from gateway.subagents.outbox import send_reply
from gateway.tools import ToolContext, tools_for_agent
from gateway.usage import format_cost, format_runtime, format_tokens
from lanes import JobHandle, LaneClosed

logger = logging.getLogger(__name__)

#: Messages of history sent with each turn: enough context, bounded cost and latency.
HISTORY_LIMIT = 200
#: Sessions whose history stays in memory between turns (the rest re-read their transcript).
HISTORY_CACHE_SESSIONS = 256


def context_for_session(services: Services, session: SessionRecord) -> ToolContext:
    """The tool context of a call made from ``session`` (chat turns and the HTTP API)."""
    settings = services.settings
    profile = resolve_agent(settings, session.agent_id)
    return ToolContext(
        agent_id=session.agent_id,
        session_key=session.key,
        workspace=profile.workspace,
        settings=settings,
        session_id=session.session_id,
        is_subagent=session.is_subagent,
        services=services.tool_services(),
    )


def origin_of(message: InboundMessage) -> Origin:
    """Where ``message`` was written: its channel, account, chat and thread."""
    return Origin(
        channel=message.channel,
        account=message.account,
        chat_id=message.chat_id,
        thread_id=message.thread_id,
        chat_type=message.chat_type,
    )


def trim_history(history: list[ChatMessage], limit: int = HISTORY_LIMIT) -> list[ChatMessage]:
    """The last ``limit`` messages, starting at a user message so no tool result is orphaned."""
    if len(history) <= limit:
        return history
    tail = history[-limit:]
    for index, message in enumerate(tail):
        if message.role == "user":
            return tail[index:]
    return tail[-1:]


class ChatRuntime:
    """Runs chat turns and chat commands for every channel."""

    def __init__(self, services: Services, subagents: SubagentManager) -> None:
        self._s = services
        self._subagents = subagents
        self._turns: dict[str, set[JobHandle[None]]] = defaultdict(set)
        self._histories: OrderedDict[str, list[ChatMessage]] = OrderedDict()

    def __repr__(self) -> str:
        active = sum(len(handles) for handles in self._turns.values())
        return f"<ChatRuntime turns={active}>"

    def agent_for_channel(self, channel: str) -> str:
        settings = self._s.settings
        config = getattr(settings.channels, channel, None)
        agent = getattr(config, "agent", None)
        return agent if isinstance(agent, str) else settings.routing.default_agent

    async def handle_inbound(self, message: InboundMessage) -> None:
        """The channels' inbound handler: route, then queue the turn (or run a command)."""
        try:
            key = key_for_inbound(
                self.agent_for_channel(message.channel),
                message.channel,
                message.chat_type,
                message.chat_id,
                message.thread_id,
                message.sender_id,
            )
        except SessionError as exc:
            logger.warning("message dropped: no session key", extra={"error": str(exc)})
            return
        origin = origin_of(message)
        session = await self._s.store.ensure(key, origin=origin)
        if session.origin != origin:  # replies and announces follow the latest place
            session = await self._s.store.set_origin(session.key, origin)
        command = parse_command(message.text)
        if command is not None:
            text = await self._command(command, session)
            await self._reply(origin, text, kind="notice")
            return
        self.submit_turn(session, message.text, message)

    def submit_turn(
        self, session: SessionRecord, text: str, inbound: InboundMessage | None = None
    ) -> JobHandle[None]:
        """Queue a turn of ``session`` with ``text`` as the user's message."""
        handle = self._s.lanes.session.submit(
            lambda: self._turn(session.key, text, inbound), key=session.key
        )
        self._prune()
        self._turns[session.key].add(handle)
        return handle

    def _prune(self) -> None:
        """Forget finished turns (cheaper than a watcher task per turn)."""
        for key in [k for k, hs in self._turns.items() if all(h.done() for h in hs)]:
            del self._turns[key]

    async def _turn(self, key: str, text: str, inbound: InboundMessage | None) -> None:
        channel = self._s.channels.get(inbound.channel) if inbound else None
        async with self._s.lanes.main.slot():
            working = channel.working(inbound) if channel and inbound else None
            async with working or contextlib.nullcontext():
                try:
                    reply = await self.run_turn(key, text)
                except asyncio.CancelledError:
                    if (origin := await self._reply_to(key, inbound)) is not None:
                        await asyncio.shield(self._reply(origin, "Stopped.", "notice"))
                    raise
        if (origin := await self._reply_to(key, inbound)) is not None:
            await self._reply(origin, reply)

    async def _reply_to(self, key: str, inbound: InboundMessage | None) -> Origin | None:
        """Where a turn's answer goes: the chat and thread of the message it answers (the
        person may have moved on in the same session meanwhile), else the session's."""
        if inbound is not None:
            return origin_of(inbound)
        session = await self._s.store.get(key)
        return session.origin if session is not None else None

    async def run_turn(self, key: str, text: str) -> str:
        """One turn of session ``key``; returns the reply text (errors become a clear text)."""
        settings = self._s.settings
        session = await self._s.store.require(key)
        profile = resolve_agent(settings, session.agent_id)
        sink: StoreSink | None = None
        finished = False
        try:
            ref = session.model or profile.model_ref
            provider, model = self._s.providers.resolve(ref)
            sink = StoreSink(
                self._s.store, session, cost=model.cost, metrics=self._s.metrics, model_ref=ref
            )
            history = await self._history(key)
            user = ChatMessage(role="user", content=text)
            history.append(user)
            await sink.message(user)
            setup = TurnSetup(
                provider=provider,
                model_id=model.id,
                max_tokens=model.max_tokens,
                system=profile.system_prompt,
                tools=tools_for_agent(settings, session.agent_id, self._s.tools),
                max_iterations=profile.max_iterations,
                tool_context=context_for_session(self._s, session),
            )
            async with asyncio.timeout(profile.timeout_seconds):
                outcome = await run_turn(setup, self._s.tools, history, sink)
            await sink.sync()
            self._remember(key, history)
            finished = True
        except TimeoutError:
            reply = f"Sorry, this took longer than {format_runtime(profile.timeout_seconds)}."
            await self._record(session, "error", {"error": "timeout"})
            return reply
        except ProviderError as exc:
            await self._record(session, "error", {"error": str(exc)})
            return f"Sorry, the model call failed: {exc}"
        except SessionError as exc:
            logger.warning("turn refused", extra={"session": key, "error": str(exc)})
            return f"Sorry, this conversation cannot continue: {exc}"
        except OSError as exc:  # the transcript could not be written (disk full, say)
            logger.error("turn failed to record", extra={"session": key, "error": str(exc)})
            return "Sorry, I could not record this conversation (the gateway's disk may be full)."
        finally:
            if not finished:
                self._histories.pop(key, None)  # the transcript is the truth: reload next time
            if sink is not None:
                await asyncio.shield(sink.save_usage())
        if outcome.ended_by == "max_iterations":
            note = f"(stopped after {outcome.iterations} model calls without a final answer)"
            return f"{outcome.text}\n\n{note}" if outcome.text else note
        return outcome.text if outcome.text.strip() else "(the model gave an empty reply)"

    async def _history(self, key: str) -> list[ChatMessage]:
        """The session's recent conversation: kept in memory between turns (this runtime is
        the only writer of chat sessions' messages), read from the transcript otherwise."""
        cached = self._histories.pop(key, None)
        if cached is not None:
            return cached
        return trim_history(await self._s.store.chat_messages(key))

    def _remember(self, key: str, history: list[ChatMessage]) -> None:
        self._histories[key] = trim_history(history)
        self._histories.move_to_end(key)
        while len(self._histories) > HISTORY_CACHE_SESSIONS:
            self._histories.popitem(last=False)

    async def _record(self, session: SessionRecord, name: str, data: dict[str, Any]) -> None:
        with contextlib.suppress(SessionError):
            await self._s.store.append_event(session, name, data)

    async def _reply(self, origin: Origin, text: str, kind: str = "reply") -> None:
        channel = self._s.channels.get(origin.channel)
        if channel is None:
            logger.info("no channel for reply", extra={"channel": origin.channel})
            return
        message = OutboundMessage(
            channel=origin.channel,
            account=origin.account,
            chat_id=origin.chat_id,
            thread_id=origin.thread_id,
            text=text,
            kind="notice" if kind == "notice" else "reply",
        )
        try:
            await send_reply(channel, message)
        except ChannelSendError as exc:
            logger.error(
                "reply not delivered",
                extra={"channel": origin.channel, "chat_id": origin.chat_id, "error": str(exc)},
            )

    # -- stopping --------------------------------------------------------------------

    async def stop(self, key: str) -> tuple[int, int]:
        """``/stop``: cancel the session's turns and its sub-agent runs (the cascade)."""
        turns = 0
        for handle in list(self._turns.get(key, ())):
            if handle.cancel():
                turns += 1
        runs = await self._subagents.stop_session(key)
        return turns, runs

    # -- chat commands ---------------------------------------------------------------

    async def _command(
        self, command: ChatCommand | CommandUsageError, session: SessionRecord
    ) -> str:
        if isinstance(command, CommandUsageError):
            return command.message
        if command.name == "help":
            return HELP_TEXT
        if command.name == "stop":
            turns, runs = await self.stop(session.key)
            return f"Stopped {turns} reply(s) in progress and {runs} sub-agent run(s)."
        if command.name == "spawn":
            try:
                result = await self._subagents.spawn(
                    context_for_session(self._s, session), SpawnRequest(task=command.argument)
                )
            except LaneClosed:
                return "The gateway is shutting down; try again after it restarts."
            if result["status"] != "accepted":
                return f"Not started: {result.get('error', result['status'])}"
            return f"Started sub-agent run {result['runId'][:8]}; its result will be posted here."
        return await self._subagents_command(command, session)

    async def _subagents_command(self, command: ChatCommand, session: SessionRecord) -> str:
        runs = await self._s.db.runs.list(parent_session_key=session.key, limit=50)
        if command.action == "list":
            if not runs:
                return "No sub-agent runs in this conversation."
            return "\n".join(_run_line(run, self._clock()) for run in runs[:10])
        matches = [r for r in runs if r.run_id.startswith(command.argument.lower())]
        if len(matches) != 1:
            found = "no" if not matches else "more than one"
            return f"{found.capitalize()} run of this conversation matches {command.argument!r}."
        run = matches[0]
        if command.action == "info":
            return _run_info(run)
        if command.action == "log":
            lines = await self._s.store.history(run.child_session_key, limit=10)
            text = "\n".join(f"{m.get('role')}: {str(m.get('content'))[:300]}" for m in lines)
            return text or "The run's transcript is empty."
        try:
            await self._subagents.abort(run.run_id)
        except RunFinishedError as exc:
            return str(exc)
        except RunNotFoundError:
            return f"No run {run.run_id}."
        return f"Stopping sub-agent run {run.run_id[:8]}."

    @staticmethod
    def _clock() -> float:
        return time.time()


def _run_line(run: RunRecord, now: float) -> str:
    age = format_runtime(max(0.0, now - run.created_at))
    return f"{run.run_id[:8]} {run.status:<11} {age} ago  {run_name(run)}"


def _run_info(run: RunRecord) -> str:
    usage = run.usage
    cost = f" • est {format_cost(run.cost_usd)}" if run.cost_usd is not None else ""
    runtime = (
        format_runtime(run.ended_at - run.started_at)
        if run.ended_at is not None and run.started_at is not None
        else "n/a"
    )
    return (
        f"Run {run.run_id} ({run_name(run)}): {run.status}\n"
        f"agent {run.agent_id} • model {run.model} • runtime {runtime} • tokens "
        f"{format_tokens(usage.total)} (in {format_tokens(usage.input)} / out "
        f"{format_tokens(usage.output)}){cost}\n"
        f"announce: {run.announce_state or 'pending'}"
        + (f" ({run.announce_error})" if run.announce_error else "")
    )
