"""Turns in a session a person talks to: a message in, the agent's reply out.

A chat message, a batch's follow-up and a sub-agent completion written between turns all go
through :class:`Conversations`, which keeps each session's history between turns
(:class:`HistoryCache`) and turns every failure into a clear reply text; the transcript keeps
the rest. ``/compact`` and ``/new`` act on a session here too. Callers run these on the
session's lane, so a session has one turn at a time and nothing is written between a tool
call and its result.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from gateway.agent.compaction import Compaction, compact
from gateway.agent.factory import TurnFactory
from gateway.agent.history import HistoryCache
from gateway.agent.profile import AgentProfile, resolve_agent
from gateway.agent.setup import TurnListener, TurnSetup
from gateway.agent.sink import StoreSink
from gateway.agent.turn import EndedBy, run_turn
from gateway.llm import ChatMessage, Usage
from gateway.providers import ProviderError
from gateway.sessions import SessionError
from gateway.state import Origin, SessionRecord, is_out_of_space
from gateway.tools import tools_for_agent
from gateway.usage import format_runtime

logger = logging.getLogger(__name__)

#: The apology of a turn that could not be recorded (the chat router sends it too).
DISK_FULL_REPLY = "Sorry, I could not record this conversation (the gateway's disk may be full)."
#: The line that ends a reply whose model stream broke after some of it was shown. Herald's
#: own words: the client's error text (``<TransferEncodingError …>``, which Slack shows as
#: HTML entities) means nothing to the person; the detail is logged by the provider.
STREAM_BROKE_NOTE = (
    "(Sorry, the answer broke off here: the model stopped sending it. Please ask again.)"
)


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What a turn gives back: the reply to post (None: nothing, a yield without a
    message), its usage and cost, and how it ended (None when it failed)."""

    text: str | None
    usage: Usage
    cost_usd: float | None
    ended_by: EndedBy | None
    #: The reply was read from the transcript (a resumed turn had one): an earlier process
    #: may have posted it already.
    recorded: bool = False


class Conversations:
    """Runs turns of person-facing sessions; see the module docstring."""

    def __init__(self, factory: TurnFactory) -> None:
        self._factory = factory
        self.store = factory.store
        self.histories = HistoryCache(factory.store)

    def __repr__(self) -> str:
        return f"<Conversations {self.histories!r}>"

    async def turn(
        self,
        key: str,
        text: str,
        *,
        origin: Origin | None = None,
        meta: dict[str, Any] | None = None,
        listener: TurnListener | None = None,
    ) -> TurnResult:
        """One turn of session ``key`` answering ``text`` (a message from ``origin``);
        ``listener`` hears it as it is written (it goes in the turn's setup)."""
        user = ChatMessage(role="user", content=text)
        return await self._run(key, user, origin, meta, listener)

    async def resume(
        self, key: str, *, origin: Origin | None = None, listener: TurnListener | None = None
    ) -> TurnResult:
        """Finish the turn the transcript ends with (cut off by a stop): its recorded reply
        if it has one, else the model goes on from there."""
        self.histories.forget(key)
        history = await self.store.chat_messages(key)
        if history and history[-1].role == "assistant" and not history[-1].tool_calls:
            return TurnResult(history[-1].content, Usage(), None, "reply", recorded=True)
        return await self._run(key, None, origin, None, listener)

    @property
    def streaming(self) -> bool:
        """Whether chat turns show their reply as it is written (``agent.streaming``)."""
        return self._factory.settings.agent.streaming

    async def write_in(self, key: str, text: str, meta: dict[str, Any]) -> bool:
        """Write a user-role message into ``key`` between turns (a sub-agent completion);
        False when the session is gone or archived."""
        session = await self.store.get(key)
        if session is None or session.archived:
            return False
        message = ChatMessage(role="user", content=text)
        await self.store.append_message(session, message, meta=meta)
        await self.store.sync(session)
        self.histories.append(key, message)
        return True

    async def compact(self, key: str) -> str:
        """``/compact``: compact the session's conversation now (everything before the turns
        kept whole); the text to answer with."""
        session = await self.store.require(key)
        profile = resolve_agent(self._factory.settings, session.agent_id)
        sink: StoreSink | None = None
        done: Compaction | None = None
        finished = False
        try:
            setup, sink = self._prepare(session, profile, None)
            history, meter = await self.histories.take(key)
            async with asyncio.timeout(profile.timeout_seconds):
                done = await compact(
                    setup,
                    self._factory.tools,
                    history,
                    sink,
                    meter,
                    reason="command",
                    budget=setup.context.budget(setup.max_tokens),
                )
            await sink.sync()
            self.histories.keep(key, history, meter)
            finished = True
        except (TimeoutError, ProviderError, SessionError, OSError) as exc:
            return await self._failure(session, profile, exc)
        finally:
            if not finished:
                self.histories.forget(key)
            if sink is not None:
                await asyncio.shield(sink.save_usage())
        if done is None:
            turns = setup.context.keep_recent_turns
            return (
                f"Nothing to compact: the conversation is not longer than the {turns} "
                "turns kept whole."
            )
        what = "a summary" if done.mode == "summary" else "a note that they were left out"
        return (
            f"Compacted: {done.replaced} earlier messages became {what}; the last "
            f"{done.kept} messages are kept as they were (about {done.tokens_before:,} → "
            f"{done.tokens_after:,} tokens)."
        )

    async def renew(self, key: str) -> str:
        """``/new``: a fresh session for ``key``'s chat, the old transcript archived by
        rename; the text to answer with."""
        self.histories.forget(key)
        try:
            previous = await self.store.renew(key)
        except (SessionError, OSError) as exc:
            logger.error("new session refused", extra={"session": key, "error": str(exc)})
            return f"Sorry, a new conversation could not be started: {exc}"
        finally:
            self.histories.forget(key)
        if previous is None:
            return "Started a new conversation."
        return "Started a new conversation; the previous one is archived."

    def _prepare(
        self,
        session: SessionRecord,
        profile: AgentProfile,
        origin: Origin | None,
        listener: TurnListener | None = None,
    ) -> tuple[TurnSetup, StoreSink]:
        settings = self._factory.settings
        return self._factory.prepare(
            session,
            model_ref=session.model or profile.model_ref,
            system=profile.system_prompt,
            tools=tools_for_agent(settings, session.agent_id, self._factory.tools),
            max_iterations=profile.max_iterations,
            origin=origin,
            listener=listener,
        )

    async def _run(
        self,
        key: str,
        user: ChatMessage | None,
        origin: Origin | None,
        meta: dict[str, Any] | None,
        listener: TurnListener | None = None,
    ) -> TurnResult:
        session = await self.store.require(key)
        profile = resolve_agent(self._factory.settings, session.agent_id)
        sink: StoreSink | None = None
        finished = False

        def failed(reply: str) -> TurnResult:
            usage = sink.usage if sink is not None else Usage()
            return TurnResult(reply, usage, sink.cost_usd if sink else None, None)

        try:
            setup, sink = self._prepare(session, profile, origin, listener)
            history, meter = await self.histories.take(key)
            if user is not None:
                history.append(user)
                await sink.message(user, meta=meta)
            with self._factory.turns.turn(key):
                async with asyncio.timeout(profile.timeout_seconds):
                    outcome = await run_turn(setup, self._factory.tools, history, sink, meter=meter)
            await sink.sync()
            self.histories.keep(key, history, meter)
            finished = True
        except (TimeoutError, ProviderError, SessionError, OSError) as exc:
            return failed(await self._failure(session, profile, exc))
        finally:
            if not finished:
                self.histories.forget(key)  # the transcript is the truth: reload next time
            if sink is not None:
                await asyncio.shield(sink.save_usage())
        return TurnResult(
            _reply_text(outcome.ended_by, outcome.text, outcome.iterations),
            sink.usage,
            sink.cost_usd,
            outcome.ended_by,
        )

    async def _failure(self, session: SessionRecord, profile: AgentProfile, exc: Exception) -> str:
        """The reply for a turn (or ``/compact``) that failed with ``exc``."""
        key = session.key
        if isinstance(exc, TimeoutError):
            await self._record(session, "error", {"error": "timeout"})
            return f"Sorry, this took longer than {format_runtime(profile.timeout_seconds)}."
        if isinstance(exc, ProviderError):
            await self._record(session, "error", {"error": str(exc)})
            if exc.partial.strip():  # a stream broke: keep what was said, then one line
                return f"{exc.partial.rstrip()}\n\n{STREAM_BROKE_NOTE}"
            return f"Sorry, the model call failed: {exc}"
        if isinstance(exc, SessionError):
            logger.warning("turn refused", extra={"session": key, "error": str(exc)})
            return f"Sorry, this conversation cannot continue: {exc}"
        # The transcript could not be written (disk full, say).
        if not is_out_of_space(exc):  # a full disk is logged once, by its state
            logger.error("turn failed to record", extra={"session": key, "error": str(exc)})
        return DISK_FULL_REPLY

    async def _record(self, session: SessionRecord, name: str, data: dict[str, Any]) -> None:
        with contextlib.suppress(SessionError):
            await self.store.append_event(session, name, data)


def _reply_text(ended_by: EndedBy, text: str, iterations: int) -> str | None:
    if ended_by == "yield":
        return text if text.strip() else None
    if ended_by == "max_iterations":
        note = f"(stopped after {iterations} model calls without a final answer)"
        return f"{text}\n\n{note}" if text else note
    return text if text.strip() else "(the model gave an empty reply)"
