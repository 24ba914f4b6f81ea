"""Turns in a session a person talks to: a message in, the agent's reply out.

A chat message, a batch's follow-up and a sub-agent completion written between turns all go
through :class:`Conversations`, which keeps each session's history between turns
(:class:`HistoryCache`) and turns every failure into a clear reply text; the transcript keeps
the rest. Callers run these on the session's lane, so a session has one turn at a time and
nothing is written between a tool call and its result.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from gateway.agent.factory import TurnFactory
from gateway.agent.history import HistoryCache
from gateway.agent.profile import resolve_agent
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


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What a turn gives back: the reply to post (None: nothing, a yield without a
    message), its usage and cost, and how it ended (None when it failed)."""

    text: str | None
    usage: Usage
    cost_usd: float | None
    ended_by: EndedBy | None


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
    ) -> TurnResult:
        """One turn of session ``key`` answering ``text`` (a message from ``origin``)."""
        return await self._run(key, ChatMessage(role="user", content=text), origin, meta)

    async def resume(self, key: str, *, origin: Origin | None = None) -> TurnResult:
        """Finish the turn the transcript ends with (cut off by a stop): its recorded reply
        if it has one, else the model goes on from there."""
        self.histories.forget(key)
        history = await self.store.chat_messages(key)
        if history and history[-1].role == "assistant" and not history[-1].tool_calls:
            return TurnResult(history[-1].content, Usage(), None, "reply")
        return await self._run(key, None, origin, None)

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

    async def _run(
        self,
        key: str,
        user: ChatMessage | None,
        origin: Origin | None,
        meta: dict[str, Any] | None,
    ) -> TurnResult:
        settings = self._factory.settings
        session = await self.store.require(key)
        profile = resolve_agent(settings, session.agent_id)
        sink: StoreSink | None = None
        finished = False

        def failed(reply: str) -> TurnResult:
            usage = sink.usage if sink is not None else Usage()
            return TurnResult(reply, usage, sink.cost_usd if sink else None, None)

        try:
            registry = self._factory.tools
            setup, sink = self._factory.prepare(
                session,
                model_ref=session.model or profile.model_ref,
                system=profile.system_prompt,
                tools=tools_for_agent(settings, session.agent_id, registry),
                max_iterations=profile.max_iterations,
                origin=origin,
            )
            history = await self.histories.take(key)
            if user is not None:
                history.append(user)
                await sink.message(user, meta=meta)
            async with asyncio.timeout(profile.timeout_seconds):
                outcome = await run_turn(setup, registry, history, sink)
            await sink.sync()
            self.histories.keep(key, history)
            finished = True
        except TimeoutError:
            await self._record(session, "error", {"error": "timeout"})
            return failed(
                f"Sorry, this took longer than {format_runtime(profile.timeout_seconds)}."
            )
        except ProviderError as exc:
            await self._record(session, "error", {"error": str(exc)})
            return failed(f"Sorry, the model call failed: {exc}")
        except SessionError as exc:
            logger.warning("turn refused", extra={"session": key, "error": str(exc)})
            return failed(f"Sorry, this conversation cannot continue: {exc}")
        except OSError as exc:  # the transcript could not be written (disk full, say)
            if not is_out_of_space(exc):  # a full disk is logged once, by its state
                logger.error("turn failed to record", extra={"session": key, "error": str(exc)})
            return failed(DISK_FULL_REPLY)
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
