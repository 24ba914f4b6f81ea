"""``POST /slack/events`` on the gateway's own app (Slack in HTTP mode, a gateway token set):
only requests signed with the signing secret, within five minutes, reach the agent.

Forged, tampered, stale, future, missing and malformed signatures get 401, and so does a
request that offers the gateway's bearer token instead of a signature. A signed request
replayed verbatim is acknowledged but never handled twice. Each bad request comes from
its own Slack user, so "the handler never received it" is checked as "no session of that
user exists" once a good request sent last has been answered.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer

from channels.reconnecting import Reconnecting
from channels.slack import SlackChannel
from gateway.app import build_app
from gateway.parts.channels import CHANNELS
from gateway.parts.state import SESSION_STORE, STATE
from gateway.reload import SettingsHolder
from gateway.sessions import SessionStore
from gateway.settings import HeraldSettings
from gateway.state import StateDB
from tests.fakes.slack import BOT_TOKEN, SIGNING_SECRET, FakeSlack
from tests.gateway.harness import TEST_SCRIPT, base_config, merge

TOKEN = "gateway-token-for-signature-tests"
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
TS = "X-Slack-Request-Timestamp"
#: Guard against a hung test; never an assertion about speed.
GUARD_SECONDS = 20


@dataclass
class SlackGateway:
    server: TestServer
    fake: FakeSlack
    app: web.Application
    channel: SlackChannel
    http: ClientSession

    @property
    def db(self) -> StateDB:
        return self.app[STATE]

    @property
    def store(self) -> SessionStore:
        return self.app[SESSION_STORE]

    async def post(
        self,
        body: bytes,
        *,
        signed: dict[str, str] | None = None,
        content_type: str = JSON,
        extra: dict[str, str] | None = None,
    ) -> int:
        headers = {"Content-Type": content_type, **(signed or {}), **(extra or {})}
        url = str(self.server.make_url("/slack/events"))
        async with self.http.post(url, data=body, headers=headers) as response:
            await response.read()
            return response.status

    def event(self, text: str, *, user: str, channel: str, event_id: str) -> bytes:
        message = self.fake.message(text, channel=channel, user=user)
        return json.dumps(self.fake.event_callback(message, event_id=event_id)).encode()

    async def settled(self, channel: str, count: int) -> None:
        """Wait for ``count`` posts in ``channel`` and for no inbound message in flight."""
        await self.fake.wait_for(
            lambda: len([p for p in self.fake.posts if p.channel == channel]) >= count
        )
        async with asyncio.timeout(GUARD_SECONDS):
            while self.channel.pending:  # noqa: ASYNC110 - the channel has no event for it
                await asyncio.sleep(0.01)

    async def users_with_sessions(self) -> set[str]:
        sessions = await self.store.list()
        return {s.key.rsplit(":", 1)[1] for s in sessions if ":slack:dm:" in s.key}


@asynccontextmanager
async def slack_http_gateway(tmp_path: Path) -> AsyncIterator[SlackGateway]:
    """The daemon's app (build_app + prepare_app + resources_for) with Slack in HTTP mode."""
    fake = FakeSlack(channels={"D1", "D2", "D3", "D4"})
    await fake.start()
    script = tmp_path / "script.json5"
    script.write_bytes(orjson.dumps(TEST_SCRIPT))
    data = merge(
        base_config(tmp_path / "state", script),
        {
            "gateway": {"auth": {"token": TOKEN}, "shutdownDrainSeconds": 0},
            "channels": {
                "slack": {
                    "enabled": True,
                    "mode": "http",
                    "botToken": BOT_TOKEN,
                    "signingSecret": SIGNING_SECRET,
                    "apiBaseUrl": fake.api_base_url,
                }
            },
        },
    )
    holder = SettingsHolder(HeraldSettings.model_validate(data))
    app = build_app(holder, config_dir=tmp_path)
    server = TestServer(app)
    try:
        await server.start_server()
        wrapper = app[CHANNELS]["slack"]
        assert isinstance(wrapper, Reconnecting)
        channel = wrapper.inner
        assert isinstance(channel, SlackChannel)
        async with ClientSession() as http:
            yield SlackGateway(server, fake, app, channel, http)
    finally:
        await server.close()
        await fake.close()


async def test_only_signed_fresh_requests_reach_the_agent(tmp_path: Path) -> None:
    async with slack_http_gateway(tmp_path) as gw:
        now = int(time.time())
        bad: list[tuple[str, bytes, dict[str, str]]] = []

        def case(name: str, build: Any) -> None:
            body = gw.event("hello", user=f"U{name.upper()}", channel="D1", event_id=f"Ev{name}")
            bad.append((name, *build(body)))

        case("forged", lambda b: (b, FakeSlack.sign(b, secret="not-the-signing-secret")))
        case("tampered", lambda b: (b.replace(b"hello", b"HELLO"), FakeSlack.sign(b)))
        case("stale", lambda b: (b, FakeSlack.sign(b, timestamp=now - 6 * 60)))
        case("future", lambda b: (b, FakeSlack.sign(b, timestamp=now + 6 * 60)))
        case("unsigned", lambda b: (b, {}))
        case(
            "nosig",
            lambda b: (
                b,
                {"X-Slack-Request-Timestamp": FakeSlack.sign(b)["X-Slack-Request-Timestamp"]},
            ),
        )
        case(
            "nostamp",
            lambda b: (b, {"X-Slack-Signature": FakeSlack.sign(b)["X-Slack-Signature"]}),
        )
        case(
            "empty",
            lambda b: (b, {**FakeSlack.sign(b), "X-Slack-Signature": "v0="}),
        )
        case(
            "version",
            lambda b: (
                b,
                {
                    **FakeSlack.sign(b),
                    "X-Slack-Signature": "v1=" + FakeSlack.sign(b)["X-Slack-Signature"][3:],
                },
            ),
        )
        case("bearer", lambda b: (b, {"Authorization": f"Bearer {TOKEN}"}))
        case(
            "restamped",  # a valid signature, moved to a fresh timestamp
            lambda b: (
                b,
                {
                    "X-Slack-Request-Timestamp": str(now + 1),
                    "X-Slack-Signature": FakeSlack.sign(b, timestamp=now)["X-Slack-Signature"],
                },
            ),
        )
        for name, body, headers in bad:
            assert await gw.post(body, signed=headers) == 401, name
        challenge = json.dumps({"type": "url_verification", "challenge": "c"}).encode()
        assert await gw.post(challenge, signed=FakeSlack.sign(challenge, secret="x" * 20)) == 401

        # A good request sent last: once it is answered, nothing earlier is still in flight.
        sentinel = gw.event("hello", user="USENTINEL", channel="D3", event_id="EvSentinel")
        assert await gw.post(sentinel, signed=FakeSlack.sign(sentinel)) == 200
        await gw.settled("D3", 1)
        assert await gw.users_with_sessions() == {"usentinel"}
        assert [p.channel for p in gw.fake.posts] == ["D3"]


async def test_a_replayed_event_is_handled_once(tmp_path: Path) -> None:
    async with slack_http_gateway(tmp_path) as gw:
        body = gw.event("hello", user="UREPLAY", channel="D2", event_id="EvReplay")
        signed = FakeSlack.sign(body)
        assert await gw.post(body, signed=signed) == 200
        await gw.settled("D2", 1)
        for _ in range(3):
            assert await gw.post(body, signed=signed) in (200, 401)
        sentinel = gw.event("hello", user="USENTINEL", channel="D3", event_id="EvSentinel")
        assert await gw.post(sentinel, signed=FakeSlack.sign(sentinel)) == 200
        await gw.settled("D3", 1)
        assert [p.channel for p in gw.fake.posts] == ["D2", "D3"]
        history = await gw.store.history("agent:main:slack:dm:ureplay")
        assert [m["content"] for m in history] == ["hello", "hi there"]


async def test_a_replayed_slash_command_is_handled_once(tmp_path: Path) -> None:
    async with slack_http_gateway(tmp_path) as gw:
        payload = gw.fake.command_payload(
            "/spawn", "task: replayed", channel_id="D4", user_id="UCMD"
        )
        body = urlencode(payload).encode()
        signed = FakeSlack.sign(body)
        assert await gw.post(body, signed=signed, content_type=FORM) == 200
        await gw.settled("D4", 1)
        assert await gw.post(body, signed=signed, content_type=FORM) in (200, 401)
        sentinel = gw.event("hello", user="USENTINEL", channel="D3", event_id="EvSentinel")
        assert await gw.post(sentinel, signed=FakeSlack.sign(sentinel)) == 200
        await gw.settled("D3", 1)
        runs = await gw.db.runs.list(parent_session_key="agent:main:slack:dm:ucmd")
        assert len(runs) == 1, [r.request.task for r in runs]


async def test_malformed_requests_get_a_400_or_401_never_a_500(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Anyone can reach /slack/events: a bad body or header is answered, not a traceback."""
    async with slack_http_gateway(tmp_path) as gw:
        good = gw.event("hello", user="UBAD", channel="D9", event_id="EvBad")
        cases: list[tuple[str, bytes, dict[str, str], tuple[int, ...]]] = [
            ("not json, signed", b"{not json", FakeSlack.sign(b"{not json"), (400,)),
            ("not utf-8", b'{"type": "\xff\xfe"}', FakeSlack.sign(b'{"type": "\xff\xfe"}'), (400,)),
            ("timestamp not an int", good, {**FakeSlack.sign(good), TS: "12.5e3"}, (401,)),
            ("timestamp text", good, {**FakeSlack.sign(good), TS: "yesterday"}, (401,)),
            ("no timestamp", good, {"X-Slack-Signature": "v0=00"}, (401,)),
        ]
        with caplog.at_level(logging.DEBUG):
            for name, body, headers, expected in cases:
                assert await gw.post(body, signed=headers) in expected, name
        assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
        assert gw.fake.posts == []
