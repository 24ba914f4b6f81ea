"""The chat channels the gateway runs: built with the app (they add their routes to it),
connected by the chat runtime once everything they deliver to is up."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from aiohttp import web

from channels import Channel, ChatCursor, ChatCursors, SeenKeys
from channels.reconnecting import Reconnecting
from channels.webchat.jobs import ChatJobs
from gateway.parts.cluster import ClusterLinks
from gateway.parts.state import STATE
from gateway.settings import HeraldSettings
from gateway.state import SessionRecord

CHANNELS = web.AppKey("channels", dict[str, Channel])


class TargetSessions(Protocol):
    """The chat's own session a chat target names (made if new, its origin the target's);
    :class:`~gateway.schema.targets.ChatTargetError` for a target that cannot be used now."""

    async def __call__(self, target: str) -> SessionRecord: ...


#: The spawn door's :meth:`~gateway.subagents.SpawnDoor.chat_session` (what the API resolves a
#: run's ``to`` with).
TARGET_SESSIONS = web.AppKey("target_sessions", TargetSessions)


def channels_of(app: web.Application) -> dict[str, Channel]:
    channels: dict[str, Channel] = app[CHANNELS]
    return channels


class StateSeenKeys:
    """The channels' memory of handled events (:class:`channels.replay.SeenKeys`), in the
    state database of ``app``. Channels are built before the database opens, so it is looked
    up at each call; channels receive only after it opened and stop before it closes."""

    def __init__(self, app: web.Application) -> None:
        self._app = app

    async def first_sighting(self, keys: Sequence[str], ttl_seconds: float) -> bool:
        return await self._app[STATE].seen.first_sighting(keys, ttl_seconds)


class StateCursors:
    """The channels' newest message taken per chat (:class:`channels.cursors.ChatCursors`),
    in the state database of ``app``, looked up at each call as :class:`StateSeenKeys`."""

    def __init__(self, app: web.Application) -> None:
        self._app = app

    async def advance(self, cursor: ChatCursor) -> None:
        await self._app[STATE].cursors.advance(cursor)

    async def recent(self, channel: str, account: str, since: float) -> list[ChatCursor]:
        return await self._app[STATE].cursors.recent(channel, account, since)


def build_channels(
    settings: HeraldSettings,
    *,
    seen: SeenKeys | None = None,
    cursors: ChatCursors | None = None,
    cluster: ClusterLinks | None = None,
    jobs: ChatJobs | None = None,
) -> dict[str, Channel]:
    """The enabled channels, not yet started (Slack and Discord retried in the background
    when the network fails them at start); ``seen`` remembers the events they handled,
    ``cursors`` the newest message taken per chat (for Discord's catch-up), ``cluster``
    links them to the other replicas, ``jobs`` shows the web chat its scheduled jobs."""
    channels: dict[str, Channel] = {}
    config = settings.channels
    if config.slack.enabled:
        from channels.slack import SlackChannel

        channels["slack"] = Reconnecting(SlackChannel(config.slack, seen=seen))
    if config.discord.enabled:
        from channels.discord import DiscordChannel

        leadership = cluster.leadership if cluster is not None else None
        channels["discord"] = Reconnecting(
            DiscordChannel(config.discord, leadership=leadership, seen=seen, cursors=cursors)
        )
    if config.webchat.enabled:
        from channels.webchat import WebchatChannel

        history = settings.gateway.resolved_state_dir() / "webchat"
        relay = cluster.relay if cluster is not None else None
        channels["webchat"] = WebchatChannel(
            config.webchat, history_dir=history, relay=relay, jobs=jobs
        )
    return channels
