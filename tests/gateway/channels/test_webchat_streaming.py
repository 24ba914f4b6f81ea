"""Streamed replies in the web chat through the gateway's own app: the model's text reaches
the page before the model has finished, one final message takes its place, a tool round
shows a status line, a cut stream ends with what was said, and ``agent.streaming: false``
posts the reply whole as before."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
from aiohttp.test_utils import TestClient, TestServer

from gateway.agent.conversation import STREAM_BROKE_NOTE
from gateway.app import build_app
from gateway.reload import SettingsHolder
from gateway.settings import HeraldSettings
from tests.channels.webchat.conftest import Frame, Page
from tests.fakes.openai import FakeOpenAI, openai_server
from tests.gateway.harness import base_config, fake_model_config, merge

STORY = "Tea came to Europe in the seventeenth century, first as a medicine, then as a habit."
CLIENT = "streaming-client"


@asynccontextmanager
async def chat(tmp_path: Path, fake: FakeOpenAI, **agent: Any) -> AsyncIterator[Page]:
    script = tmp_path / "script.json5"
    script.write_bytes(orjson.dumps({"default": {"reply": "?"}}))
    data = merge(
        base_config(tmp_path / "state", script),
        merge(
            fake_model_config(fake), {"agent": agent, "channels": {"webchat": {"enabled": True}}}
        ),
    )
    app = build_app(SettingsHolder(HeraldSettings.model_validate(data)), config_dir=tmp_path)
    async with TestClient(TestServer(app)) as client:
        page = Page(await client.ws_connect("/webchat/ws"))
        await page.send({"type": "hello", "clientId": CLIENT})
        assert await page.next() == {"type": "ready", "clientId": CLIENT}
        yield page
        await page.close()


async def frames_until(page: Page, done: Callable[[Frame], bool]) -> list[Frame]:
    """Frames (typing left out) up to and including the first that ``done`` accepts."""
    seen: list[Frame] = []
    while True:
        frame = await page.next()
        if frame["type"] == "typing":
            continue
        seen.append(frame)
        if done(frame):
            return seen


def shown(deltas: list[Frame]) -> str:
    text = ""
    for frame in deltas:
        text = frame["text"] if frame.get("reset") else text + frame["text"]
    return text


def is_reply(frame: Frame) -> bool:
    return bool(frame["type"] == "message" and frame["kind"] == "reply")


async def test_text_shows_before_the_model_is_done_then_one_final_message(
    tmp_path: Path,
) -> None:
    async with openai_server() as fake, chat(tmp_path, fake) as page:
        gate = asyncio.Event()
        fake.reply_stream(STORY, hold=gate, hold_at=4)
        await page.send({"type": "message", "text": "tell me about tea"})
        first = await page.next_of("delta")
        # The model is held mid-stream: this text came while it was still writing.
        assert first["text"]
        assert STORY.startswith(first["text"])
        assert not gate.is_set()
        gate.set()
        rest = await frames_until(page, is_reply)
        deltas = [first] + [f for f in rest if f["type"] == "delta"]
        assert shown(deltas) == STORY
        final = rest[-1]
        assert final["text"] == STORY
        assert final["id"] == first["turnId"]
        assert fake.requests[0].body["stream"] is True
        # The final message took the growing text's place: no frame of the turn follows.
        fake.reply_text("Yes.")
        await page.send({"type": "message", "text": "thanks"})
        later = await frames_until(page, is_reply)
        assert [f for f in later if f.get("turnId") == first["turnId"]] == []
        assert later[-1]["text"] == "Yes."


async def test_a_tool_round_shows_a_status_line_and_the_next_text_follows(
    tmp_path: Path,
) -> None:
    async with openai_server() as fake, chat(tmp_path, fake) as page:
        fake.reply_tool_calls([("call_1", "sessions_list", {})], text="Let me check.")
        fake.reply_text("You have one session.")
        await page.send({"type": "message", "text": "what sessions?"})
        frames = await frames_until(page, is_reply)
        deltas = [f for f in frames if f["type"] == "delta"]
        resets = [f["text"] for f in deltas if f.get("reset")]
        assert resets == ["Using sessions_list…"]
        assert shown(deltas) == "Using sessions_list…\n\nYou have one session."
        assert frames[-1]["text"] == "You have one session."


async def test_a_stream_cut_midway_ends_with_what_was_said_and_one_error_line(
    tmp_path: Path,
) -> None:
    async with openai_server() as fake, chat(tmp_path, fake) as page:
        fake.reply_stream(STORY, cut_at=5)
        await page.send({"type": "message", "text": "tell me about tea"})
        frames = await frames_until(page, is_reply)
        said = shown([f for f in frames if f["type"] == "delta"])
        assert said
        assert STORY.startswith(said)
        said_text, error_line = frames[-1]["text"].rsplit("\n\n", 1)
        assert said_text == said.rstrip()
        assert error_line == STREAM_BROKE_NOTE
        assert len(fake.requests) == 1


async def test_streaming_off_posts_the_reply_whole(tmp_path: Path) -> None:
    async with openai_server() as fake, chat(tmp_path, fake, streaming=False) as page:
        fake.reply_text(STORY)
        await page.send({"type": "message", "text": "tell me about tea"})
        frames = await frames_until(page, is_reply)
        assert [f["type"] for f in frames] == ["message", "message"]  # the echo, the reply
        assert frames[-1]["text"] == STORY
        assert "stream" not in fake.requests[0].body
