"""``/compact`` and ``/new`` from a chat, on a real gateway whose model is the wire-level
OpenAI fake: each runs on the session's lane and answers with a notice; the next request
shows what changed, and the transcripts keep every line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from channels import OutboundMessage
from tests.fakes.openai import FakeOpenAI, last_user_text, openai_server
from tests.fakes.provider_server import Step, prompt_tokens
from tests.gateway.harness import Harness, running_gateway

KEY = "agent:main:memory:channel:c1"
SUMMARY = "Summary: five messages, each echoed."


def answering(fake: FakeOpenAI) -> None:
    def respond(body: Any) -> Step:
        text = last_user_text(body)
        reply = SUMMARY if text.startswith("[compaction]") else f"echo: {text}"
        return fake.text_step(reply, prompt_tokens=prompt_tokens(body), completion_tokens=5)

    fake.responder = respond


def config(fake: FakeOpenAI) -> dict[str, Any]:
    return {
        "agent": {
            "model": "fake/gpt-4o-mini",
            "compaction": {"mode": "summary", "keepRecentTurns": 2},
        },
        "models": {
            "providers": {
                "fake": {
                    "api": "openai-completions",
                    "baseUrl": fake.base_url,
                    "apiKey": fake.api_key,
                    "maxRetries": 0,
                    "models": [{"id": "gpt-4o-mini"}],  # 128k tokens: nothing compacts itself
                }
            }
        },
    }


def notice(gw: Harness, count: int = 1) -> Any:
    return gw.wait_sent(lambda m: m.kind == "notice", count)


def texts(sent: list[OutboundMessage]) -> list[str]:
    return [m.text for m in sent]


async def chat(gw: Harness, *messages: str) -> None:
    for text in messages:
        before = len([m for m in gw.channel.sent if m.kind == "reply"])
        await gw.say(text)
        await gw.reply(count=before + 1)


def sent_messages(fake: FakeOpenAI) -> list[tuple[str, str]]:
    """(role, content) of the last chat request, its system prompt aside."""
    body = fake.requests[-1].body
    return [(m["role"], m["content"]) for m in body["messages"][1:]]


async def test_compact_summarises_the_older_turns_now(tmp_path: Path) -> None:
    async with openai_server() as fake:
        answering(fake)
        async with running_gateway(tmp_path, config=config(fake)) as gw:
            await chat(gw, "message 0")
            await gw.say("/compact")
            (short,) = texts(await notice(gw))
            await chat(gw, "message 1", "message 2", "message 3", "message 4")
            session = await gw.store.require(KEY)
            path = gw.store.transcript_path(session)
            before = path.read_bytes()
            await gw.say("/compact")
            done = texts(await notice(gw, 2))[1]
            await chat(gw, "and now?")
            after = path.read_bytes()
            records = (await gw.store.read(KEY)).records
    assert (
        short == "Nothing to compact: the conversation is not longer than the 2 turns kept whole."
    )
    assert done.startswith(
        "Compacted: 6 earlier messages became a summary; the last 4 messages are kept"
    )
    summary_call = last_user_text(fake.requests[-2].body)
    assert summary_call.startswith("[compaction]")
    assert "user: message 0" in summary_call
    assert "message 3" not in summary_call
    # The next request: the summary, the two turns kept whole, the new message.
    sent = sent_messages(fake)
    assert sent[0][0] == "user"
    assert SUMMARY in sent[0][1]
    assert sent[1:] == [
        ("user", "message 3"),
        ("assistant", "echo: message 3"),
        ("user", "message 4"),
        ("assistant", "echo: message 4"),
        ("user", "and now?"),
    ]
    # The transcript kept every line and gained the compaction's event and message.
    assert after.startswith(before)
    events = [r for r in records if r.get("type") == "event" and r["event"] == "compaction"]
    assert [e["data"]["reason"] for e in events] == ["command"]
    (line,) = [r for r in records if r.get("meta", {}).get("kind") == "compaction"]
    assert line["meta"] == {"kind": "compaction", "mode": "summary", "keep": 4}


async def test_new_starts_a_fresh_session_and_archives_the_old_one(tmp_path: Path) -> None:
    async with openai_server() as fake:
        answering(fake)
        async with running_gateway(tmp_path, config=config(fake)) as gw:
            await chat(gw, "message 0", "message 1")
            old = await gw.store.require(KEY)
            old_path = gw.store.transcript_path(old)
            old_bytes = old_path.read_bytes()
            await gw.say("/new")
            (answer,) = texts(await notice(gw))
            new = await gw.store.require(KEY)
            await chat(gw, "fresh start")
            new_path = gw.store.transcript_path(new)
            new_lines = [orjson.loads(line) for line in new_path.read_bytes().splitlines()]
            listed = [s.key for s in await gw.store.list()]
    assert answer == "Started a new conversation; the previous one is archived."
    assert (new.key, new.origin) == (old.key, old.origin)
    assert new.session_id != old.session_id
    assert not new.archived
    assert listed == [KEY]
    # The old transcript, renamed beside the new one, is unchanged.
    assert not old_path.exists()
    (archived,) = old_path.parent.glob(f"{old_path.name}.deleted.*")
    assert archived.read_bytes() == old_bytes
    # The new session starts from nothing.
    assert sent_messages(fake) == [("user", "fresh start")]
    assert new_lines[0]["type"] == "session"
    assert (new_lines[0]["id"], new_lines[0]["key"]) == (new.session_id, KEY)
    assert [line["message"]["content"] for line in new_lines[1:]] == [
        "fresh start",
        "echo: fresh start",
    ]
