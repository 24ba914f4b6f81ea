"""One door for runs started outside a chat: an MCP client's ``spawn``, a schedule's
occurrence, and ``POST /v1/tools/invoke`` with ``to`` (what ``herald spawn --to`` sends).

Each of them names a chat target (or none: the default agent's main session, which has no
chat) and asks for a run. :class:`SpawnDoor` does the way from there once:

1. the **target**, checked against the channels that run now (:meth:`SpawnDoor.target`:
   an unknown or disabled channel, a malformed id → :class:`~gateway.sessions.ChatTargetError`
   naming it);
2. its **session**: the chat's own session for the agent (the job's, else the channel's),
   made if new, its origin the target's — so the run's announce goes to that chat and
   thread, and the agent there sees its completion on its next turn;
3. the **context** of a call made from that session, and the **spawn** through the same
   :class:`~gateway.subagents.spawn.Spawner` a chat's ``sessions_spawn`` uses, so every
   origin gives a run of the same shape;
4. with an :class:`~gateway.subagents.spawn.Occurrence`, its job's records written in the
   spawn's own transaction; what that write raises (a due time another replica took) is
   the caller's, raised as it is rather than turned into a refusal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gateway.agent import ToolContexts
from gateway.reload import SettingsHolder
from gateway.schema.targets import ChatTarget, parse_target
from gateway.sessions import (
    SessionKey,
    SessionStore,
    agent_of_channel,
    chat_session,
)
from gateway.state import Connection, SessionRecord
from gateway.subagents.spawn import (
    Occurrence,
    Spawner,
    SpawnRequest,
    SpawnResult,
)


class SpawnDoor:
    """Target → session → context → spawn, for runs started outside a chat (see the
    module docstring)."""

    def __init__(
        self,
        *,
        holder: SettingsHolder,
        store: SessionStore,
        contexts: ToolContexts,
        spawner: Spawner,
        accounts: Callable[[], Mapping[str, str]],
    ) -> None:
        self._holder = holder
        self._store = store
        self._contexts = contexts
        self._spawner = spawner
        #: The running channels by name, each with the account its announces are sent as.
        self._accounts = accounts

    def __repr__(self) -> str:
        return f"<SpawnDoor {self._spawner!r}>"

    def target(self, text: str) -> ChatTarget:
        """``text`` as a chat target among the channels running now; raises
        :class:`~gateway.sessions.ChatTargetError` naming what is wrong."""
        return parse_target(text, self._accounts())

    async def session(
        self, target: ChatTarget | None, agent_id: str | None = None
    ) -> SessionRecord:
        """The session a run for ``target`` is asked from: the chat's own session for
        ``agent_id`` (default: the agent of the target's channel), made if new, its origin
        the target's; with no target, the default agent's main session."""
        settings = self._holder.current
        if target is None:
            return await self._store.ensure(SessionKey.main(settings.routing.default_agent))
        accounts = self._accounts()
        if target.channel not in accounts:  # it stopped since the target was checked
            target = parse_target(str(target), accounts)
        agent = agent_id or agent_of_channel(settings, target.channel)
        return await chat_session(self._store, target, accounts[target.channel], agent)

    async def chat_session(self, target: str) -> SessionRecord:
        """The chat's own session that chat target ``target`` names (its channel's agent)."""
        return await self.session(self.target(target))

    async def spawn(
        self,
        target: ChatTarget | None,
        request: SpawnRequest,
        *,
        agent_id: str | None = None,
        occurrence: Occurrence | None = None,
    ) -> SpawnResult:
        """Start a run for ``request`` whose announce goes to ``target`` (see the module
        docstring); returns at once. A target that cannot be used raises
        :class:`~gateway.sessions.ChatTargetError`; a refused spawn is a
        :class:`~gateway.subagents.spawn.SpawnRefused`."""
        session = await self.session(target, agent_id)
        context = self._contexts.for_session(session, origin=session.origin)
        failed: list[BaseException] = []
        if occurrence is not None:
            occurrence = _watched(occurrence, failed)
        result = await self._spawner.spawn(context, request, occurrence=occurrence)
        if failed:  # the occurrence's own write: its caller knows what that means
            raise failed[0]
        return result


def _watched(occurrence: Occurrence, failed: list[BaseException]) -> Occurrence:
    """``occurrence`` whose write, when it raises, leaves its exception in ``failed`` (the
    spawner reports a failed write as a refusal; the door gives the caller the cause)."""

    def write(conn: Connection, run_id: str) -> None:
        try:
            occurrence.write(conn, run_id)
        except Exception as exc:
            failed.clear()  # a write may run again (a group's retry): its last outcome counts
            failed.append(exc)
            raise
        failed.clear()

    return Occurrence(occurrence.job_id, occurrence.at, write)
