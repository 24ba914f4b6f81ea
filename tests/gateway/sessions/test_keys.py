"""Session keys: every form builds and parses; hostile input never yields an unsafe id."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.constants import ID_PATTERN
from gateway.sessions import (
    InvalidIdError,
    SessionKey,
    SessionKeyError,
    UnsafePathError,
    is_subagent_key,
    key_for_inbound,
    normalize_id,
    transcript_path,
)

STATE = Path("/srv/herald-state")
CHILD = "1b4e28ba-2fa1-4d2b-883f-0016d3cca427"


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (SessionKey.main("main"), "agent:main:main"),
        (
            SessionKey.chat_channel("main", "slack", "C012AB3CD"),
            "agent:main:slack:channel:c012ab3cd",
        ),
        (
            SessionKey.chat_channel("main", "slack", "C012AB3CD", "1712345678.123456"),
            "agent:main:slack:channel:c012ab3cd:thread:1712345678_123456",
        ),
        (SessionKey.dm("main", "slack", "U0G9QF9C6"), "agent:main:slack:dm:u0g9qf9c6"),
        (
            SessionKey.chat_channel("ops", "discord", "1234567890123"),
            "agent:ops:discord:channel:1234567890123",
        ),
        (SessionKey.dm("ops", "discord", "987654321"), "agent:ops:discord:dm:987654321"),
        (SessionKey.webchat("main", "tab-7f3a"), "agent:main:webchat:tab-7f3a"),
        (SessionKey.subagent("main", CHILD), f"agent:main:subagent:{CHILD}"),
    ],
)
def test_every_form_builds_and_parses_back(key: SessionKey, expected: str) -> None:
    assert str(key) == expected
    assert SessionKey.parse(expected) == key


def test_kinds() -> None:
    assert SessionKey.main("main").session_kind == "main"
    assert SessionKey.subagent("main").session_kind == "subagent"
    assert SessionKey.subagent("main").is_subagent
    assert SessionKey.webchat("main", "x").session_kind == "chat"
    assert SessionKey.dm("main", "slack", "U1").session_kind == "chat"
    assert not SessionKey.main("main").is_subagent


def test_new_subagent_keys_get_distinct_uuid4s() -> None:
    a, b = SessionKey.subagent("main"), SessionKey.subagent("main")
    assert a != b
    assert a.subject is not None
    assert uuid.UUID(a.subject).version == 4


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "agent",
        "agent:main",
        "agent:main:",
        "session:main:main",
        "agent:Main:main",
        "agent:main:main\n",
        "agent:main:main:extra",
        "agent:..:main",
        "agent:main:webchat:../../etc/passwd",
        "agent:main:webchat:a/b",
        "agent:main:webchat:a\x00b",
        "agent:mäin:main",
        "agent:main:subagent:not-a-uuid",
        f"agent:main:subagent:{CHILD.upper()}",
        "agent:main:slack:dm:u1:thread:x",
        "agent:main:main:dm:x",
        "agent:main:subagent:channel:x",
        "agent:main:slack:group:x",
        "agent:main:slack:channel:c1:thread:",
        "agent:main:webchat:" + "a" * 65,
        "agent:main:webchat:" + "a" * 400,
        "agent:main:webchat:_x",
    ],
)
def test_parse_rejects_malformed_and_hostile_keys(raw: str) -> None:
    with pytest.raises(SessionKeyError) as info:
        SessionKey.parse(raw)
    assert info.value.key == raw
    assert len(str(info.value)) < 300  # a huge key is not echoed whole


def test_is_subagent_key() -> None:
    assert is_subagent_key(f"agent:main:subagent:{CHILD}")
    assert not is_subagent_key("agent:main:main")
    assert not is_subagent_key("agent:main:subagent:../x")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("main", "main"),
        ("C012AB3CD", "c012ab3cd"),
        ("1712345678.123456", "1712345678_123456"),
        ("a-b_c", "a-b_c"),
    ],
)
def test_normalize_keeps_readable_ids_readable(raw: str, expected: str) -> None:
    assert normalize_id(raw) == expected


@pytest.mark.parametrize(
    "raw", ["../", "../../etc/passwd", "a\x00b", "x" * 10_000, "café", "日本語", "_lead", "-x", " "]
)
def test_normalize_makes_hostile_ids_safe(raw: str) -> None:
    out = normalize_id(raw)
    assert ID_PATTERN.fullmatch(out)
    assert "/" not in out
    assert "." not in out
    assert "\x00" not in out


def test_normalize_keeps_lossy_ids_distinct() -> None:
    assert normalize_id("café") != normalize_id("cafè")
    assert normalize_id("a/b") != normalize_id("a\\b")
    long_a, long_b = "x" * 200 + "a", "x" * 200 + "b"
    assert normalize_id(long_a) != normalize_id(long_b)
    assert len(normalize_id(long_a)) <= 64


@pytest.mark.parametrize("raw", ["C012AB3CD", "1712345678.123456", "a-b_c", "x" * 200])
def test_exact_normalising_keeps_normalised_ids_and_the_hashes_of_the_rest(raw: str) -> None:
    exact = normalize_id(raw, exact=True)
    assert ID_PATTERN.fullmatch(exact)
    if normalize_id(raw) == raw:
        assert exact == raw
        assert normalize_id(exact, exact=True) == exact


@pytest.mark.parametrize("raw", ["VictimBrowserId42", "a.b", "x" * 200, "Ab-0123456789abcdef"])
def test_no_raw_client_id_equals_another_ids_exact_normalisation(raw: str) -> None:
    # Raw ids kept as they are and hashed ids are disjoint: the hashed id, sent as a raw
    # id, is hashed again rather than naming the first client's session.
    hashed = normalize_id(raw, exact=True)
    assert hashed != raw
    again = normalize_id(hashed, exact=True)
    assert again != hashed
    assert ID_PATTERN.fullmatch(again)
    assert SessionKey.webchat("main", hashed) != SessionKey.webchat("main", raw)


def test_web_chat_client_ids_differing_only_in_case_or_dot_are_different_sessions() -> None:
    # A web chat client chooses its id freely: "Ab" and "aB" are two browsers.
    clients = ["ab", "Ab", "aB", "AB", "a_b", "a.b", "A_b"]
    keys = {SessionKey.webchat("main", client) for client in clients}
    assert len(keys) == len(clients)
    assert str(SessionKey.webchat("main", "ab")) == "agent:main:webchat:ab"
    for key in keys:
        assert SessionKey.parse(str(key)) == key
    # Chat providers' ids keep their case-folding: Slack's C1 and c1 are one channel.
    assert SessionKey.dm("main", "slack", "U7") == SessionKey.dm("main", "slack", "u7")


def test_normalize_rejects_empty() -> None:
    with pytest.raises(InvalidIdError):
        normalize_id("")


@given(st.text(min_size=1, max_size=300))
def test_normalized_ids_always_match_and_are_fixed_points(raw: str) -> None:
    out = normalize_id(raw)
    assert ID_PATTERN.fullmatch(out)
    assert normalize_id(out) == out


@given(
    agent=st.text(min_size=1, max_size=80),
    chat=st.text(min_size=1, max_size=300),
    thread=st.none() | st.text(min_size=1, max_size=80),
    sender=st.text(min_size=1, max_size=80),
    channel=st.sampled_from(["slack", "discord", "webchat"]),
    chat_type=st.sampled_from(["dm", "channel"]),
)
def test_inbound_keys_from_any_ids_parse_and_stay_under_the_state_dir(
    agent: str, chat: str, thread: str | None, sender: str, channel: str, chat_type: str
) -> None:
    agent_id = normalize_id(agent)
    key = key_for_inbound(agent_id, channel, chat_type, chat, thread, sender)
    assert SessionKey.parse(str(key)) == key
    path = transcript_path(STATE, key.agent_id, str(uuid.uuid4()))
    assert os.path.commonpath([STATE, path]) == str(STATE)
    assert path.parent == STATE / "agents" / agent_id / "sessions"


def test_key_for_inbound_routes_by_channel_and_chat_type() -> None:
    assert str(key_for_inbound("main", "webchat", "dm", "client-1", None, "u")) == (
        "agent:main:webchat:client-1"
    )
    assert str(key_for_inbound("main", "slack", "dm", "D1", "171.2", "U7")) == (
        "agent:main:slack:dm:u7"
    )
    assert str(key_for_inbound("main", "slack", "channel", "C1", "171.2", "U7")) == (
        "agent:main:slack:channel:c1:thread:171_2"
    )
    assert str(key_for_inbound("main", "discord", "channel", "42", None, "U7")) == (
        "agent:main:discord:channel:42"
    )
    with pytest.raises(InvalidIdError):
        key_for_inbound("main", "slack", "group", "C1", None, "U7")
    with pytest.raises(InvalidIdError):
        key_for_inbound("Main", "slack", "channel", "C1", None, "U7")


@pytest.mark.parametrize(
    ("agent_id", "session_id"),
    [
        ("../x", CHILD),
        ("main", "../../etc/passwd"),
        ("main", CHILD.upper()),
        ("main", CHILD + "\n"),
        ("Main", CHILD),
        ("", CHILD),
    ],
)
def test_transcript_path_refuses_unsafe_parts(agent_id: str, session_id: str) -> None:
    with pytest.raises((InvalidIdError, UnsafePathError)):
        transcript_path(STATE, agent_id, session_id)


def test_transcript_path_layout() -> None:
    assert transcript_path(STATE, "main", CHILD) == (
        STATE / "agents" / "main" / "sessions" / f"{CHILD}.jsonl"
    )
