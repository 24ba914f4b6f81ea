"""Chat targets: parsed and checked when given; each resolves to the chat's own session and
the origin its announce goes to."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from channels import Channel
from channels.discord import DiscordChannel, DiscordConfig
from channels.memory import MemoryChannel
from channels.reconnecting import Reconnecting
from channels.slack import SlackChannel, SlackConfig
from channels.webchat import WebchatChannel, WebchatConfig
from gateway.schema.targets import ChatTargetError, chat_of, normalize_target, parse_target
from gateway.sessions import (
    accounts_of,
    target_of_origin,
    target_origin,
    target_session_key,
)
from gateway.state import Origin

ENABLED = {"slack": "T0001", "discord": "bot-1", "webchat": "local"}


@pytest.mark.parametrize(
    ("text", "key", "chat_type", "thread"),
    [
        ("slack:C0123456789", "agent:main:slack:channel:c0123456789", "channel", None),
        (
            "slack:C0123456789/1700000000.000100",
            "agent:main:slack:channel:c0123456789:thread:1700000000_000100",
            "channel",
            "1700000000.000100",
        ),
        ("slack:D0123456789", "agent:main:slack:dm:d0123456789", "dm", None),
        (
            "discord:123456789012345678",
            "agent:main:discord:channel:123456789012345678",
            "channel",
            None,
        ),
        ("webchat:Browser_1", "agent:main:webchat:browser_1-", "dm", None),
    ],
)
def test_targets_resolve_to_the_chats_own_session(
    text: str, key: str, chat_type: str, thread: str | None
) -> None:
    target = parse_target(text, ENABLED)
    assert str(target) == text
    if text.startswith("webchat:"):  # client ids keep their case apart: a hash is added
        assert str(target_session_key(target, "main")).startswith(key)
    else:
        assert str(target_session_key(target, "main")) == key
    origin = target_origin(target, ENABLED[target.channel])
    assert (origin.chat_id, origin.thread_id, origin.chat_type) == (
        text.split(":", 1)[1].split("/")[0],
        thread,
        chat_type,
    )
    assert origin.account == ENABLED[target.channel]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("slack", "is not <channel>:<chatId>[/<threadId>]"),
        ("teams:19abc", "unknown channel 'teams'"),
        ("slack:general", "'general' is no slack chat id"),
        ("slack:C0123456789/yesterday", "'yesterday' is no slack thread id"),
        ("discord:42", "'42' is no discord chat id"),
        ("discord:123456789012345678/1", "discord has no threads in targets"),
        ("webchat:../../etc", "is no webchat chat id"),
    ],
)
def test_malformed_targets_are_errors_naming_them(text: str, reason: str) -> None:
    with pytest.raises(ChatTargetError) as raised:
        parse_target(text, ENABLED)
    assert reason in str(raised.value)
    assert text[:20] in str(raised.value)


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ("  slack:C0123456789  ", "slack:C0123456789"),
        ("\tslack:C0123456789\u00a0\n", "slack:C0123456789"),
        ("Slack:C0123456789", "slack:C0123456789"),
        (" slack : C0123456789 / 1700000000.000100 ", "slack:C0123456789/1700000000.000100"),
        ("DISCORD:123456789012345678 ", "discord:123456789012345678"),
        (" webchat:Browser_1", "webchat:Browser_1"),  # a client id keeps its case
    ],
)
def test_a_target_has_one_written_form(text: str, written: str) -> None:
    assert normalize_target(text) == written
    assert str(parse_target(text, ENABLED)) == written
    target = parse_target(text, ENABLED)
    origin = target_origin(target, ENABLED[target.channel])
    assert target_of_origin(origin) == written  # a chat's own target, by the same rule
    assert chat_of(written) == written.split("/")[0]


@pytest.mark.parametrize("text", ["slack:c0123456789", "slack:general", "slack:C01\u200b23"])
def test_an_id_is_not_changed_to_fit(text: str) -> None:
    with pytest.raises(ChatTargetError, match="is no slack chat id"):
        normalize_target(text)


def test_a_chat_outside_the_target_channels_is_written_the_same_way() -> None:
    origin = Origin(channel="Memory", account="a", chat_id="c1 ", thread_id="t1")
    assert target_of_origin(origin) == "memory:c1/t1"
    assert target_of_origin(None) is None


def test_a_disabled_channel_is_named() -> None:
    with pytest.raises(
        ChatTargetError, match=r"channel 'discord' is not enabled \(enabled: slack\)"
    ):
        parse_target("discord:123456789012345678", {"slack": "T0001"})


def test_each_channel_names_the_account_its_announces_are_sent_as(tmp_path: Path) -> None:
    channels: dict[str, Channel] = {
        "memory": MemoryChannel(account="acme"),
        "webchat": WebchatChannel(WebchatConfig(), history_dir=tmp_path),
        # Wrapped while it reconnects: still the wrapped channel's account.
        "other": Reconnecting(MemoryChannel("other", account="T0002")),
        # Not started yet: Slack has no team id and Discord no bot user to go by.
        "slack": SlackChannel(SlackConfig.model_validate({"enabled": True, "mode": "socket"})),
        "discord": DiscordChannel(DiscordConfig(enabled=True, token=SecretStr("t"))),
    }
    assert accounts_of(channels) == {
        "memory": "acme",
        "webchat": "local",
        "other": "T0002",
        "slack": "default",
        "discord": "default",
    }
