"""Chat targets as data: where work started outside a chat (an MCP client, a schedule, the
CLI) posts its result, written ``<channel>:<chatId>[/<threadId>]``.

``slack:C0123456789``, ``slack:C0123456789/1700000000.000100`` (a thread), ``slack:D0123…``
(a DM), ``discord:<channel id>`` (a Discord thread is its own channel id), ``webchat:<clientId>``.
A target is checked when it is given: an unknown or disabled channel, a malformed id or a
thread where the chat has none is a :class:`ChatTargetError` naming it.

A target has one written form, and :func:`normalize_target` is the one place that makes it:
surrounding whitespace dropped (around the whole and each part) and the channel in lower
case. Ids keep the case they are given in and must already be in the provider's: Slack's are
upper case (``slack:c0123…`` is refused, not raised: raised, a word such as ``general`` would
pass for the id ``GENERAL``), Discord's are digits, a web chat client id is case-sensitive.
Every target is stored and compared in that form — a job's ``to``, and the chat a command
or a tool is asked in (:func:`written_target`) — so a job aimed at a chat is found by that
chat however it was written. Its chat is the target without its thread (:func:`chat_of`).

A leaf of the configuration: the config schema checks a declared job's ``to`` with it, so it
knows nothing of sessions; which session and origin a target resolves to is
:mod:`gateway.sessions.targets`'.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from channels.webchat.protocol import CLIENT_ID_PATTERN
from gateway.errors import HeraldError

#: The channels a target may name, and the shape of their chat and thread ids.
_CHAT_IDS: Final[Mapping[str, re.Pattern[str]]] = {
    "slack": re.compile(r"^[CDG][A-Z0-9]{2,30}$"),
    "discord": re.compile(r"^[0-9]{15,25}$"),
    "webchat": CLIENT_ID_PATTERN,
}
_THREAD_IDS: Final[Mapping[str, re.Pattern[str]]] = {
    "slack": re.compile(r"^[0-9]{9,12}\.[0-9]{6}$"),
}
_EXAMPLES: Final = (
    "slack:C0123456789, slack:C0123456789/1700000000.000100, discord:<channel id>, "
    "webchat:<clientId>"
)


class ChatTargetError(HeraldError):
    """A chat target that cannot be used; the message names it and says why."""


@dataclass(frozen=True, slots=True)
class ChatTarget:
    """A parsed target, in its one written form (see the module docstring)."""

    channel: str
    chat_id: str
    thread_id: str | None = None

    def __str__(self) -> str:
        thread = f"/{self.thread_id}" if self.thread_id else ""
        return f"{self.channel}:{self.chat_id}{thread}"

    @property
    def chat_type(self) -> str:
        """As the channel reports it: the web chat and Slack's ``D…`` chats are DMs."""
        if self.channel == "webchat" or (self.channel == "slack" and self.chat_id[0] == "D"):
            return "dm"
        return "channel"


def _written(channel: str, chat_id: str, thread_id: str | None) -> ChatTarget:
    """The parts of a target in their one written form (the rule of the module docstring)."""
    thread = thread_id.strip() if thread_id is not None else None
    return ChatTarget(channel.strip().lower(), chat_id.strip(), thread)


def written_target(channel: str, chat_id: str, thread_id: str | None = None) -> str:
    """The chat (and thread) of a message, as a target in its written form."""
    return str(_written(channel, chat_id, thread_id or None))


def _form(text: str) -> ChatTarget:
    """``text`` as a target of a known channel with well-formed ids, in its written form
    (whether its channel runs is not asked here)."""
    channel, sep, rest = text.strip().partition(":")
    chat_id, slash, thread_id = rest.partition("/")
    target = _written(channel, chat_id, thread_id if slash else None)
    if not sep or not target.channel or not target.chat_id:
        raise ChatTargetError(f"chat target {text!r:.80} is not <channel>:<chatId>[/<threadId>]")
    if target.channel not in _CHAT_IDS:
        raise ChatTargetError(
            f"chat target {text!r:.80}: unknown channel {channel!r:.40} (targets: {_EXAMPLES})"
        )
    if not _CHAT_IDS[target.channel].fullmatch(target.chat_id):
        raise ChatTargetError(
            f"chat target {text!r:.80}: {chat_id!r:.80} is no {target.channel} chat id"
        )
    if target.thread_id is not None:
        pattern = _THREAD_IDS.get(target.channel)
        if pattern is None:
            raise ChatTargetError(
                f"chat target {text!r:.80}: {target.channel} has no threads in targets"
                + (
                    " (a Discord thread is its own channel id)"
                    if target.channel == "discord"
                    else ""
                )
            )
        if not pattern.fullmatch(target.thread_id):
            raise ChatTargetError(
                f"chat target {text!r:.80}: {thread_id!r:.40} is no {target.channel} thread id"
            )
    return target


def normalize_target(text: str) -> str:
    """``text`` in the one written form targets are stored and compared in; raises
    :class:`ChatTargetError` for one that is malformed or names no known channel."""
    return str(_form(text))


def parse_target(text: str, enabled: Mapping[str, str]) -> ChatTarget:
    """``text`` as a target among the ``enabled`` channels (name → account), in its
    written form.

    Raises :class:`ChatTargetError` for a malformed target, a channel that is not known or
    not enabled, or an id that channel never gives.
    """
    target = _form(text)
    if target.channel not in enabled:
        on = ", ".join(sorted(enabled)) or "none"
        raise ChatTargetError(
            f"chat target {text!r:.80}: channel {target.channel!r} is not enabled (enabled: {on})"
        )
    return target


def chat_of(target: str) -> str:
    """The chat of a target in its written form: the target without its thread."""
    return target.partition("/")[0]
