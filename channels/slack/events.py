"""Slack events and slash commands to :class:`InboundMessage`: which ones count, and how.

Rules:
- DMs always count. In channels a message counts when it mentions the bot, when
  ``requireMention`` is off, or when it is a reply in a thread the bot takes part in (one it
  was mentioned in or posted to), so a conversation in a thread needs no mention per message.
- Bots (this one included) and every subtype but a person's post (edits, deletions, joins…)
  are ignored, so two bots never talk in a loop. A message with files and no text is
  ignored (the agent cannot read files); files beside text are named in a note.
- Thread replies keep their thread (``thread_id`` = the thread's ts). With ``replyInThread``
  a top-level channel message gets ``thread_id`` = its own ts: the answer starts a thread
  and the session is that thread's, so replies in it continue the same session.
- Chat commands: a leading ``!spawn``/``!subagents``/``!stop`` is read as ``/spawn``…, since
  Slack's composer takes a leading "/" for its own slash commands (which are registered too:
  :func:`inbound_from_command`).
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from channels.base import ChatType, InboundMessage
from channels.slack.constants import ACCEPTED_SUBTYPES, COMMANDS, MAX_INBOUND_CHARS
from channels.slack.format import to_plain_text

log = logging.getLogger(__name__)

_BANG_COMMAND = re.compile(rf"^!({'|'.join(COMMANDS)})(?=\s|$)")


class RecentKeys:
    """A bounded set of recently seen keys (event ids, ``channel:ts``): oldest fall out."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._keys: OrderedDict[str, None] = OrderedDict()

    def __repr__(self) -> str:
        return f"<RecentKeys {len(self._keys)}/{self._capacity}>"

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: str) -> bool:
        """Remember ``key``; False when it was already there (a repeat)."""
        if key in self._keys:
            self._keys.move_to_end(key)
            return False
        self._keys[key] = None
        if len(self._keys) > self._capacity:
            self._keys.popitem(last=False)
        return True


def replay_keys(headers: Mapping[str, Sequence[str]], body: Mapping[str, Any]) -> list[str]:
    """The keys that make a request a repeat when seen before: its signature (timestamp and
    signature headers, HTTP mode), the event id Slack keeps across its retries, and a slash
    command's or interaction's trigger id."""
    keys: list[str] = []
    stamp = next(iter(headers.get("x-slack-request-timestamp") or ()), None)
    signature = next(iter(headers.get("x-slack-signature") or ()), None)
    if stamp and signature:
        keys.append(f"signature:{stamp}:{signature}")
    for field, prefix in (("event_id", "event"), ("trigger_id", "trigger")):
        value = body.get(field)
        if isinstance(value, str) and value:
            keys.append(f"{prefix}:{value}")
    return keys


@dataclass(frozen=True, slots=True)
class EventContext:
    """What the rules need to know about this bot and its configuration."""

    channel: str
    account: str
    bot_user_id: str
    require_mention: bool
    reply_in_thread: bool
    #: True when the bot takes part in thread ``(chat_id, thread_ts)``.
    is_active_thread: Callable[[str, str], bool]


def chat_type_of(channel_id: str, channel_type: str | None) -> ChatType:
    """``dm`` for a direct message with the bot (``im``, ids starting with D), else ``channel``."""
    if channel_type is not None:
        return "dm" if channel_type == "im" else "channel"
    return "dm" if channel_id.startswith("D") else "channel"


def inbound_from_event(event: Mapping[str, Any], ctx: EventContext) -> InboundMessage | None:
    """The :class:`InboundMessage` for a ``message`` or ``app_mention`` event, or None."""
    kind = event.get("type")
    subtype = event.get("subtype")
    channel_id = event.get("channel")
    user = event.get("user")
    ts = event.get("ts")
    if subtype is not None and subtype not in ACCEPTED_SUBTYPES:
        _ignore(event, f"subtype {subtype}")
        return None
    if event.get("bot_id") or event.get("bot_profile") or user == ctx.bot_user_id:
        _ignore(event, "a bot's message")
        return None
    if not isinstance(channel_id, str) or not isinstance(user, str) or not isinstance(ts, str):
        _ignore(event, "no channel, user or ts")
        return None
    chat_type = chat_type_of(channel_id, event.get("channel_type"))
    raw = event.get("text") or ""
    mention = re.compile(rf"<@{re.escape(ctx.bot_user_id)}(?:\|[^>]*)?>")
    mentioned = kind == "app_mention" or mention.search(raw) is not None
    thread_ts = event.get("thread_ts")
    if not isinstance(thread_ts, str):
        thread_ts = None
    if (
        chat_type == "channel"
        and ctx.require_mention
        and not mentioned
        and not (thread_ts and ctx.is_active_thread(channel_id, thread_ts))
    ):
        _ignore(event, "no mention")
        return None
    text = _clean_text(mention.sub(" ", raw))
    files = [f for f in event.get("files") or () if isinstance(f, Mapping)]
    if not text:
        _ignore(event, "files only" if files else "no text")
        return None
    if files:
        names = ", ".join(str(f.get("name") or f.get("title") or "file") for f in files)
        text += f"\n\n[attached files the agent cannot open: {names}]"
    if len(text) > MAX_INBOUND_CHARS:
        text = text[:MAX_INBOUND_CHARS] + "\n[message truncated]"
    if thread_ts is None and chat_type == "channel" and ctx.reply_in_thread:
        thread_ts = ts
    profile = event.get("user_profile")
    name = None
    if isinstance(profile, Mapping):
        name = profile.get("display_name") or profile.get("real_name") or None
    return InboundMessage(
        channel=ctx.channel,
        account=ctx.account,
        chat_id=channel_id,
        thread_id=thread_ts,
        sender_id=user,
        text=text,
        chat_type=chat_type,
        sender_name=name,
        message_id=ts,
    )


def inbound_from_command(command: Mapping[str, Any], ctx: EventContext) -> InboundMessage | None:
    """The :class:`InboundMessage` for a slash command payload: its text is the command line.

    Slack offers slash commands only at the top of a conversation, so the reply has no thread.
    """
    name = command.get("command")
    channel_id = command.get("channel_id")
    user = command.get("user_id")
    if not isinstance(name, str) or not isinstance(channel_id, str) or not isinstance(user, str):
        log.debug("slack: ignored a slash command without command, channel or user")
        return None
    args = str(command.get("text") or "").strip()
    chat_type: ChatType = (
        "dm"
        if channel_id.startswith("D") or command.get("channel_name") == "directmessage"
        else "channel"
    )
    return InboundMessage(
        channel=ctx.channel,
        account=ctx.account,
        chat_id=channel_id,
        thread_id=None,
        sender_id=user,
        text=f"{name} {to_plain_text(args)}".strip(),
        chat_type=chat_type,
        sender_name=command.get("user_name") or None,
        message_id=None,
    )


def _clean_text(text: str) -> str:
    text = to_plain_text(text).strip()
    return _BANG_COMMAND.sub(r"/\1", text)


def _ignore(event: Mapping[str, Any], reason: str) -> None:
    log.debug("slack: ignored %s event in %s: %s", event.get("type"), event.get("channel"), reason)
    return None
