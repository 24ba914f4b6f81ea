"""Chat turns: one person's message → one agent turn → the reply, on bounded lanes.

A turn is queued on its session's lane (one turn at a time per session) and, inside it,
waits for a ``main`` lane slot (bounded overall concurrency). Both lanes bound their queues:
a chat whose turn cannot be queued is told the gateway is busy, and nothing is dropped
silently. Errors of every kind become a clear reply text; the transcript keeps the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from channels import Channel, InboundMessage
from gateway.agent import StoreSink, TurnFactory, resolve_agent, run_turn
from gateway.delivery import Replier
from gateway.llm import ChatMessage
from gateway.providers import ProviderError
from gateway.runtime.history import HistoryCache
from gateway.sessions import SessionError
from gateway.state import Origin, SessionRecord, is_out_of_space
from gateway.tools import tools_for_agent
from gateway.usage import format_runtime
from lanes import JobHandle, Lane, LaneClosed, LaneFullError

logger = logging.getLogger(__name__)

BUSY_REPLY = "Sorry, I am busy with too many conversations right now; please try again shortly."
#: The apology of a turn that could not be recorded: the gateway's disk is full (or failing).
DISK_FULL_REPLY = "Sorry, I could not record this conversation (the gateway's disk may be full)."


def origin_of(message: InboundMessage) -> Origin:
    """Where ``message`` was written: its channel, account, chat and thread."""
    return Origin(
        channel=message.channel,
        account=message.account,
        chat_id=message.chat_id,
        thread_id=message.thread_id,
        chat_type=message.chat_type,
    )


class ChatTurns:
    """Queues and runs chat turns; also the :class:`gateway.subagents.TurnQueue`."""

    def __init__(
        self,
        *,
        factory: TurnFactory,
        session_lane: Lane,
        main_lane: Lane,
        channels: Mapping[str, Channel],
        replier: Replier,
    ) -> None:
        self._factory = factory
        self._store = factory.store
        self._session_lane = session_lane
        self._main_lane = main_lane
        self._channels = channels
        self._replier = replier
        self._histories = HistoryCache(factory.store)
        self._turns: dict[str, set[JobHandle[None]]] = defaultdict(set)

    def __repr__(self) -> str:
        active = sum(len(handles) for handles in self._turns.values())
        return f"<ChatTurns turns={active} {self._session_lane!r}>"

    def submit_turn(
        self, session: SessionRecord, text: str, inbound: InboundMessage | None = None
    ) -> JobHandle[None]:
        """Queue a turn of ``session`` with ``text`` as the user's message.

        Raises ``LaneFullError`` when too many turns wait and ``LaneClosed`` once the
        gateway is stopping: the caller tells the person.
        """
        handle = self._session_lane.submit(
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
        channel = self._channels.get(inbound.channel) if inbound else None
        try:
            async with self._main_lane.slot():
                working = channel.working(inbound) if channel and inbound else None
                async with working or contextlib.nullcontext():
                    try:
                        reply = await self.run_turn(key, text)
                    except asyncio.CancelledError:
                        if (origin := await self._reply_to(key, inbound)) is not None:
                            await asyncio.shield(self._replier.reply(origin, "Stopped.", "notice"))
                        raise
        except (LaneFullError, LaneClosed):
            reply = BUSY_REPLY
        if (origin := await self._reply_to(key, inbound)) is not None:
            await self._replier.reply(origin, reply)

    async def _reply_to(self, key: str, inbound: InboundMessage | None) -> Origin | None:
        """Where a turn's answer goes: the chat and thread of the message it answers (the
        person may have moved on in the same session meanwhile), else the session's."""
        if inbound is not None:
            return origin_of(inbound)
        session = await self._store.get(key)
        return session.origin if session is not None else None

    async def run_turn(self, key: str, text: str) -> str:
        """One turn of session ``key``; returns the reply text (errors become a clear text)."""
        settings = self._factory.settings
        session = await self._store.require(key)
        profile = resolve_agent(settings, session.agent_id)
        sink: StoreSink | None = None
        finished = False
        try:
            registry = self._factory.tools
            setup, sink = self._factory.prepare(
                session,
                model_ref=session.model or profile.model_ref,
                system=profile.system_prompt,
                tools=tools_for_agent(settings, session.agent_id, registry),
                max_iterations=profile.max_iterations,
            )
            history = await self._histories.take(key)
            user = ChatMessage(role="user", content=text)
            history.append(user)
            await sink.message(user)
            async with asyncio.timeout(profile.timeout_seconds):
                outcome = await run_turn(setup, registry, history, sink)
            await sink.sync()
            self._histories.keep(key, history)
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
            if not is_out_of_space(exc):  # a full disk is logged once, by its state
                logger.error("turn failed to record", extra={"session": key, "error": str(exc)})
            return DISK_FULL_REPLY
        finally:
            if not finished:
                self._histories.forget(key)  # the transcript is the truth: reload next time
            if sink is not None:
                await asyncio.shield(sink.save_usage())
        if outcome.ended_by == "max_iterations":
            note = f"(stopped after {outcome.iterations} model calls without a final answer)"
            return f"{outcome.text}\n\n{note}" if outcome.text else note
        return outcome.text if outcome.text.strip() else "(the model gave an empty reply)"

    async def _record(self, session: SessionRecord, name: str, data: dict[str, Any]) -> None:
        with contextlib.suppress(SessionError):
            await self._store.append_event(session, name, data)

    def stop(self, key: str) -> int:
        """Cancel the session's queued and running turns; returns how many."""
        return sum(1 for handle in list(self._turns.get(key, ())) if handle.cancel())

    async def close(self, drain_seconds: float) -> None:
        """Refuse new turns; let running turns finish for ``drain_seconds``, then cancel."""
        for lane in (self._session_lane, self._main_lane):
            await lane.shutdown(drain_seconds)
