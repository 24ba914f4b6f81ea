"""The rules that turn Slack events and slash commands into InboundMessages."""

from __future__ import annotations

from typing import Any

from channels.slack.events import (
    EventContext,
    RecentKeys,
    chat_type_of,
    inbound_from_command,
    inbound_from_event,
    replay_keys,
)

BOT = "U0BOT"


def context(*, active: set[tuple[str, str]] | None = None, **overrides: Any) -> EventContext:
    values: dict[str, Any] = {
        "channel": "slack",
        "account": "T1",
        "bot_user_id": BOT,
        "require_mention": True,
        "reply_in_thread": True,
        "is_active_thread": lambda chat, ts: (chat, ts) in (active or set()),
    }
    values.update(overrides)
    return EventContext(**values)


def event(text: str, **fields: Any) -> dict[str, Any]:
    return {"type": "message", "channel": "C1", "user": "U1", "text": text, "ts": "10.1", **fields}


def test_legacy_mention_form_is_recognised_and_stripped() -> None:
    message = inbound_from_event(event(f"<@{BOT}|herald>  please   help "), context())
    assert message is not None
    assert message.text == "please   help"


def test_mentions_of_other_people_stay() -> None:
    message = inbound_from_event(event(f"<@{BOT}> ask <@U2> about it"), context())
    assert message is not None
    assert message.text == "ask <@U2> about it"


def test_malformed_events_are_ignored() -> None:
    ctx = context(require_mention=False)
    assert inbound_from_event({"type": "message", "text": "no channel", "ts": "1.1"}, ctx) is None
    assert inbound_from_event(event("no user", user=None), ctx) is None
    assert inbound_from_event(event("no ts", ts=None), ctx) is None
    assert inbound_from_event(event("", files=[]), ctx) is None


def test_group_dms_and_private_channels_are_channels() -> None:
    assert chat_type_of("G1", "mpim") == "channel"
    assert chat_type_of("C1", "group") == "channel"
    assert chat_type_of("D1", None) == "dm"
    assert chat_type_of("D1", "im") == "dm"
    ctx = context()
    assert inbound_from_event(event("hi all", channel="G1", channel_type="mpim"), ctx) is None


def test_active_thread_counts_without_a_mention() -> None:
    ctx = context(active={("C1", "9.9")})
    message = inbound_from_event(event("carry on", thread_ts="9.9"), ctx)
    assert message is not None
    assert message.thread_id == "9.9"
    assert inbound_from_event(event("elsewhere", thread_ts="8.8"), ctx) is None


def test_dm_threads_keep_their_thread_and_top_level_dms_have_none() -> None:
    ctx = context()
    top = inbound_from_event(event("hi", channel="D1", channel_type="im"), ctx)
    threaded = inbound_from_event(
        event("hi", channel="D1", channel_type="im", thread_ts="5.5"), ctx
    )
    assert top is not None
    assert threaded is not None
    assert (top.thread_id, threaded.thread_id) == (None, "5.5")


def test_sender_name_comes_from_the_profile() -> None:
    profile = {"display_name": "", "real_name": "Ada Lovelace"}
    message = inbound_from_event(event(f"<@{BOT}> hi", user_profile=profile), context())
    assert message is not None
    assert message.sender_name == "Ada Lovelace"


def test_slash_command_without_channel_is_ignored() -> None:
    assert inbound_from_command({"command": "/stop", "user_id": "U1"}, context()) is None
    message = inbound_from_command(
        {"command": "/stop", "text": "", "user_id": "U1", "channel_id": "C1"}, context()
    )
    assert message is not None
    assert message.text == "/stop"


def test_recent_keys_forget_the_oldest() -> None:
    keys = RecentKeys(2)
    assert keys.add("a")
    assert keys.add("b")
    assert not keys.add("a")  # a repeat; "a" is now the newest
    assert keys.add("c")  # evicts "b"
    assert "b" not in keys
    assert "a" in keys
    assert len(keys) == 2
    assert repr(keys) == "<RecentKeys 2/2>"


def test_replay_keys_name_the_signature_the_event_and_the_trigger() -> None:
    headers = {"x-slack-request-timestamp": ["1700000000"], "x-slack-signature": ["v0=ab"]}
    body = {"event_id": "Ev1", "type": "event_callback"}
    assert replay_keys(headers, body) == ["signature:1700000000:v0=ab", "event:Ev1"]
    assert replay_keys({}, {"trigger_id": "1.2", "command": "/spawn"}) == ["trigger:1.2"]
    assert replay_keys({"x-slack-signature": ["v0=ab"]}, {"event_id": 5}) == []
