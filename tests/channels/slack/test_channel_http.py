"""SlackChannel in HTTP mode: ``POST /slack/events`` on the gateway's app, signed like Slack."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlencode

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from channels.errors import ChannelStartError
from channels.slack import SlackChannel
from tests.channels.slack.conftest import AiohttpClient, Inbox, slack_config
from tests.fakes.slack import BOT_USER_ID, FakeSlack

Client = TestClient[web.Request, web.Application]
HttpChannel = tuple[SlackChannel, Inbox, Client]
JSON = {"Content-Type": "application/json"}


async def post(
    client: Client,
    body: bytes,
    *,
    headers: dict[str, str] | None = None,
    content_type: str = "application/json",
    timestamp: int | None = None,
    secret: str | None = None,
) -> tuple[int, str]:
    signed = FakeSlack.sign(body, timestamp=timestamp, **({"secret": secret} if secret else {}))
    response = await client.post(
        "/slack/events",
        data=body,
        headers={"Content-Type": content_type, **signed, **(headers or {})},
    )
    return response.status, await response.text()


def event_body(fake: FakeSlack, event: dict[str, Any], *, event_id: str = "EvH1") -> bytes:
    return json.dumps(fake.event_callback(event, event_id=event_id)).encode()


async def test_url_verification_is_answered(http_channel: HttpChannel) -> None:
    _, _, client = http_channel
    body = json.dumps({"token": "t", "challenge": "c-123", "type": "url_verification"}).encode()
    status, text = await post(client, body)
    assert status == 200
    assert json.loads(text) == {"challenge": "c-123"}


async def test_a_signed_event_reaches_the_handler_and_a_retry_is_acked_once(
    fake_slack: FakeSlack, http_channel: HttpChannel
) -> None:
    channel, inbox, client = http_channel
    assert channel.connected
    event = fake_slack.message(f"<@{BOT_USER_ID}> hello over http", channel="C1")
    body = event_body(fake_slack, event)
    assert (await post(client, body))[0] == 200
    message = await inbox.next()
    assert (message.text, message.chat_id, message.thread_id) == (
        "hello over http",
        "C1",
        event["ts"],
    )

    retry = {"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}
    assert (await post(client, body, headers=retry))[0] == 200
    sentinel = event_body(fake_slack, fake_slack.message("sentinel", channel="D1"), event_id="EvH2")
    assert (await post(client, sentinel))[0] == 200
    assert (await inbox.next()).text == "sentinel"


async def test_forged_and_stale_signatures_get_401(
    fake_slack: FakeSlack, http_channel: HttpChannel
) -> None:
    _, inbox, client = http_channel
    body = event_body(fake_slack, fake_slack.message("forged", channel="D1"))
    assert (await post(client, body, secret="not-the-secret"))[0] == 401
    stale = int(time.time()) - 10 * 60
    assert (await post(client, body, timestamp=stale))[0] == 401
    tampered = body.replace(b"forged", b"FORGED")
    signed = FakeSlack.sign(body)
    response = await client.post("/slack/events", data=tampered, headers={**JSON, **signed})
    assert response.status == 401
    unsigned = await client.post("/slack/events", data=body, headers=JSON)
    assert unsigned.status == 401
    challenge = json.dumps({"challenge": "x", "type": "url_verification"}).encode()
    assert (await post(client, challenge, secret="not-the-secret"))[0] == 401
    assert inbox.queue.empty()


async def test_slash_command_over_http(fake_slack: FakeSlack, http_channel: HttpChannel) -> None:
    _, inbox, client = http_channel
    payload = fake_slack.command_payload("/spawn", "check the build", channel_id="C2")
    body = urlencode(payload).encode()
    status, _ = await post(client, body, content_type="application/x-www-form-urlencoded")
    assert status == 200
    message = await inbox.next()
    assert (message.text, message.chat_id, message.thread_id) == (
        "/spawn check the build",
        "C2",
        None,
    )


async def test_requests_before_start_get_503(
    fake_slack: FakeSlack, aiohttp_client: AiohttpClient
) -> None:
    channel = SlackChannel(slack_config(fake_slack, mode="http"))
    app = web.Application()
    channel.add_routes(app)
    client = await aiohttp_client(app)
    assert not channel.connected
    body = event_body(fake_slack, fake_slack.message("early", channel="D1"))
    assert (await post(client, body))[0] == 503


async def test_http_mode_needs_its_routes_and_secret(fake_slack: FakeSlack) -> None:
    channel = SlackChannel(slack_config(fake_slack, mode="http"))
    with pytest.raises(ChannelStartError, match="add_routes"):
        await channel.start(Inbox())
    no_secret = SlackChannel(slack_config(fake_slack, mode="http", signingSecret=None))
    no_secret.add_routes(web.Application())
    with pytest.raises(ChannelStartError, match="signingSecret"):
        await no_secret.start(Inbox())
    assert fake_slack.calls == []
