"""Chat targets resolved to sessions: the chat's own session — the one a person talking
there has — and the origin its announce goes to, so the agent of that chat sees the run's
completion on its next turn.

A target as data (parsed, checked, in its one written form) is
:mod:`gateway.schema.targets`, a leaf the config schema checks a job's ``to`` with; the
session keys a target resolves to are these:

- Slack and Discord channels: ``agent:<id>:<channel>:channel:<chatId>[:thread:<threadId>]``;
- a Slack DM (``D…``): ``agent:<id>:slack:dm:<D…>`` — DM sessions are kept per user, and a
  target names the DM, not the user, so the run's completion lands in a session of its own
  while the announce reaches the DM;
- web chat: ``agent:<id>:webchat:<clientId>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from channels import Channel
from gateway.schema.targets import ChatTarget, written_target
from gateway.sessions.keys import SessionKey
from gateway.state.rows import Origin

if TYPE_CHECKING:
    from gateway.sessions.store import SessionStore
    from gateway.settings import HeraldSettings
    from gateway.state.rows import SessionRecord


def target_session_key(target: ChatTarget, agent_id: str) -> SessionKey:
    """The chat's own session for ``agent_id`` (see the module doc)."""
    if target.channel == "webchat":
        return SessionKey.webchat(agent_id, target.chat_id)
    if target.channel == "slack" and target.chat_type == "dm":
        return SessionKey.dm(agent_id, target.channel, target.chat_id)
    return SessionKey.chat_channel(agent_id, target.channel, target.chat_id, target.thread_id)


def target_origin(target: ChatTarget, account: str) -> Origin:
    """Where the target's announce goes, for the channel's ``account``."""
    return Origin(
        channel=target.channel,
        account=account,
        chat_id=target.chat_id,
        thread_id=target.thread_id,
        chat_type=target.chat_type,
    )


def target_of_origin(origin: Origin | None) -> str | None:
    """The chat (and thread) a message came from, as a target in its written form; None
    outside a chat."""
    if origin is None:
        return None
    return written_target(origin.channel, origin.chat_id, origin.thread_id)


def accounts_of(channels: Mapping[str, Channel]) -> dict[str, str]:
    """The running channels by name, each with the account its announces are sent as: what
    :func:`~gateway.schema.targets.parse_target` takes as ``enabled``."""
    return {name: channel.account for name, channel in channels.items()}


async def chat_session(
    store: SessionStore, target: ChatTarget, account: str, agent_id: str
) -> SessionRecord:
    """The chat's own session for ``agent_id`` (made if new), its origin the target's, so
    an announce to it reaches that chat and thread."""
    origin = target_origin(target, account)
    session = await store.ensure(target_session_key(target, agent_id), origin=origin)
    if session.origin != origin:
        session = await store.set_origin(session.key, origin)
    return session


def agent_of_channel(settings: HeraldSettings, channel: str) -> str:
    """The agent whose session a target on ``channel`` resolves to (the channel's own)."""
    config = getattr(settings.channels, channel, None)
    agent = getattr(config, "agent", None)
    return agent if isinstance(agent, str) else settings.routing.default_agent
