"""Slack HTTP mode through the gateway's own app and wiring: a signed event is handled once,
however often it is replayed inside Slack's signature window, after any number of other
events and across a restart (a new app on the same state directory)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from channels.slack.constants import DEDUPE_CAPACITY
from gateway.app import build_app
from gateway.reload import SettingsHolder
from gateway.settings import HeraldSettings
from gateway.state import SqliteStateDB
from tests.fakes.slack import BOT_TOKEN, SIGNING_SECRET, FakeSlack
from tests.gateway.harness import base_config, merge

Client = TestClient[web.Request, web.Application]
JSON = {"Content-Type": "application/json"}
DM_KEY = "agent:main:slack:dm:u1"
SCRIPT = {"rules": [{"match": r"^say (.+)$", "reply": "said $1"}], "default": {"reply": "?"}}


@asynccontextmanager
async def gateway(tmp_path: Path, fake: FakeSlack) -> AsyncIterator[Client]:
    """The daemon's app, Slack in HTTP mode as the only channel, served on loopback."""
    script = tmp_path / "script.json5"
    script.write_bytes(orjson.dumps(SCRIPT))
    slack = {
        "enabled": True,
        "mode": "http",
        "botToken": BOT_TOKEN,
        "signingSecret": SIGNING_SECRET,
        "apiBaseUrl": fake.api_base_url,
        "streaming": "off",  # posts are read whole; streaming has its own tests
    }
    data = merge(base_config(tmp_path / "state", script), {"channels": {"slack": slack}})
    app = build_app(SettingsHolder(HeraldSettings.model_validate(data)), config_dir=tmp_path)
    async with TestClient(TestServer(app)) as client:
        yield client


def signed_event(fake: FakeSlack, event: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(fake.event_callback(event)).encode()
    return body, {**JSON, **FakeSlack.sign(body)}


async def post(client: Client, body: bytes, headers: dict[str, str]) -> None:
    response = await client.post("/slack/events", data=body, headers=headers)
    assert response.status == 200, await response.text()


async def user_messages(state: Path) -> list[str]:
    db = await SqliteStateDB.open(state / "herald.db", readonly=True)
    try:
        session = await db.sessions.get(DM_KEY)
    finally:
        await db.close()
    assert session is not None
    path = state / "agents" / "main" / "sessions" / f"{session.session_id}.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [
        line["message"]["content"]
        for line in lines
        if line["type"] == "message" and line["message"]["role"] == "user"
    ]


async def test_a_replayed_event_is_handled_once_after_many_events_and_a_restart(
    tmp_path: Path,
) -> None:
    fake = FakeSlack()
    await fake.start()
    try:
        first, first_headers = signed_event(fake, fake.message("say one", channel="D1"))
        # A retry as Slack sends it: the same body (event id), signed anew.
        retry_headers = {**JSON, **FakeSlack.sign(first), "X-Slack-Retry-Num": "1"}
        async with gateway(tmp_path, fake) as client:
            await post(client, first, first_headers)
            await fake.wait_posts(1)
            await post(client, first, first_headers)  # the very same request, replayed
            await post(client, first, retry_headers)
            # More events than any in-memory memory of them holds (edits: acked, ignored).
            others = [
                signed_event(fake, fake.message("x", channel="D1", subtype="message_changed"))
                for _ in range(DEDUPE_CAPACITY + 1)
            ]
            for start in range(0, len(others), 100):
                batch = others[start : start + 100]
                await asyncio.gather(*(post(client, body, h) for body, h in batch))
            await post(client, first, first_headers)
            second, second_headers = signed_event(fake, fake.message("say two", channel="D1"))
            await post(client, second, second_headers)
            # Same chat, so a wrongly handled replay would have been answered first.
            assert [p.text for p in await fake.wait_posts(2)] == ["said one", "said two"]

        async with gateway(tmp_path, fake) as client:
            await post(client, first, first_headers)
            await post(client, second, second_headers)
            await post(client, second, {**JSON, **FakeSlack.sign(second)})
            third, third_headers = signed_event(fake, fake.message("say three", channel="D1"))
            await post(client, third, third_headers)
            texts = [p.text for p in await fake.wait_posts(3)]
            assert texts == ["said one", "said two", "said three"]
        assert len(fake.posts) == 3
        assert await user_messages(tmp_path / "state") == ["say one", "say two", "say three"]
    finally:
        await fake.close()
