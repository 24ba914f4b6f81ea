"""The web chat channel over a real aiohttp server and real WebSocket clients."""

from __future__ import annotations

import dataclasses
import re

import aiohttp
import pytest
from aiohttp import WSCloseCode, WSMsgType

from channels.base import InboundMessage, OutboundKind, OutboundMessage, RunUpdate
from channels.errors import ChannelSendError
from channels.webchat import MAX_TEXT_BYTES
from channels.webchat.channel import MAX_PAGES_PER_CLIENT
from tests.channels.webchat.conftest import WAIT, MakeWebchat, Page, Webchat

ALICE = "2f1c7a52-8b0e-4c1e-9d7a-0c5b3e9f1a11"
BOB = "7d3e0c1a-1f2b-4a5c-8e9d-aa11bb22cc33"


def outbound(
    text: str, *, chat_id: str = ALICE, kind: OutboundKind = "reply", run_id: str | None = None
) -> OutboundMessage:
    return OutboundMessage(
        channel="webchat",
        account="local",
        chat_id=chat_id,
        thread_id=None,
        text=text,
        kind=kind,
        run_id=run_id,
    )


def inbound(chat_id: str = ALICE) -> InboundMessage:
    return InboundMessage(
        channel="webchat",
        account="local",
        chat_id=chat_id,
        thread_id=None,
        sender_id=chat_id,
        text="hi",
        chat_type="dm",
    )


# -- the page ------------------------------------------------------------------------------


async def test_page_is_served_at_root_with_its_elements(webchat: Webchat) -> None:
    response = await webchat.client.get("/")
    assert response.status == 200
    assert response.content_type == "text/html"
    html = await response.text()
    for element in ('id="messages"', 'id="input"', 'id="send"', 'id="runs"'):
        assert element in html
    assert "Sub-agent runs" in html
    assert re.search(r"Try:.*hello.*research the history of tea in the background", html, re.S)
    assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    # No CDN, no external fonts: everything the page loads comes from the gateway itself.
    assert re.findall(r'(?:src|href)="([^"]+)"', html) == [
        "data:,",
        "/static/webchat/style.css",
        "/static/webchat/dom.js",
        "/static/webchat/runs.js",
        "/static/webchat/jobs.js",
        "/static/webchat/sessions.js",
        "/static/webchat/app.js",
        "#input",
        "#",
        "#sessions",
        "#sessions",
    ]


@pytest.mark.parametrize(
    ("path", "content_type", "needle"),
    [
        ("/static/webchat/app.js", "text/javascript", "/webchat/ws"),
        ("/static/webchat/dom.js", "text/javascript", "HeraldDom"),
        ("/static/webchat/runs.js", "text/javascript", "/history"),
        ("/static/webchat/jobs.js", "text/javascript", '"unschedule"'),
        ("/static/webchat/sessions.js", "text/javascript", "/transcript"),
        ("/static/webchat/style.css", "text/css", '.run[data-status="running"]'),
    ],
)
async def test_assets_are_served(
    webchat: Webchat, path: str, content_type: str, needle: str
) -> None:
    response = await webchat.client.get(path)
    assert response.status == 200
    assert response.content_type == content_type
    assert needle in await response.text()


@pytest.mark.parametrize("name", ["app.js", "runs.js", "jobs.js"])
async def test_scripts_never_use_inner_html(webchat: Webchat, name: str) -> None:
    script = await (await webchat.client.get(f"/static/webchat/{name}")).text()
    assert "innerHTML" not in script
    assert "insertAdjacentHTML" not in script
    assert "textContent" in script


# -- hello, messages, the handler ----------------------------------------------------------


async def test_hello_is_answered_with_ready(webchat: Webchat) -> None:
    ws = await webchat.connect()
    await ws.send_json({"type": "hello", "clientId": ALICE})
    assert await ws.receive_json(timeout=WAIT) == {"type": "ready", "clientId": ALICE}


async def test_message_is_echoed_and_handed_to_the_handler(webchat: Webchat) -> None:
    page = await webchat.page(ALICE)
    await page.send({"type": "message", "text": "research tea"})
    echo = await page.next()
    assert echo["type"] == "message"
    assert echo["kind"] == "user"
    assert echo["text"] == "research tea"
    message = await webchat.inbox.next()
    assert message == InboundMessage(
        channel="webchat",
        account="local",
        chat_id=ALICE,
        thread_id=None,
        sender_id=ALICE,
        text="research tea",
        chat_type="dm",
        message_id=echo["id"],
        received_at=message.received_at,
    )


async def test_send_reaches_every_page_of_the_client_and_no_other(webchat: Webchat) -> None:
    tab1, tab2 = await webchat.page(ALICE), await webchat.page(ALICE)
    other = await webchat.page(BOB)
    sent = await webchat.channel.send(outbound("hello Alice"))
    await webchat.channel.send(outbound("hello Bob", chat_id=BOB))
    for tab in (tab1, tab2):
        frame = await tab.next()
        assert frame["type"] == "message"
        assert frame["kind"] == "reply"
        assert frame["text"] == "hello Alice"
        assert frame["id"] == sent.message_ids[0]
        assert frame["runId"] is None
        assert isinstance(frame["ts"], float)
    # Frames to one page keep their order, so Bob's first frame shows Alice's never came.
    assert (await other.next())["text"] == "hello Bob"
    assert sent.chat_id == ALICE


async def test_message_ids_are_unique(webchat: Webchat) -> None:
    ids = {(await webchat.channel.send(outbound(str(n)))).message_ids[0] for n in range(20)}
    assert len(ids) == 20


async def test_handler_failure_gives_an_error_frame_and_keeps_the_socket(webchat: Webchat) -> None:
    page = await webchat.page(ALICE)
    webchat.inbox.fail = True
    await page.send({"type": "message", "text": "one"})
    assert (await page.next_of("error"))["code"] == "unavailable"
    webchat.inbox.fail = False
    await page.send({"type": "message", "text": "two"})
    assert (await webchat.inbox.next()).text == "two"


# -- backlog and replay --------------------------------------------------------------------


async def test_announce_sent_while_disconnected_arrives_after_hello(webchat: Webchat) -> None:
    page = await webchat.page(ALICE)
    await page.close()
    sent = await webchat.channel.send(
        outbound("Tea came from China.\n\nStats: runtime 3s", kind="announce", run_id="run-1")
    )
    again = await webchat.page(ALICE)
    frame = await again.next()
    assert frame["kind"] == "announce"
    assert frame["runId"] == "run-1"
    assert frame["text"] == "Tea came from China.\n\nStats: runtime 3s"
    assert frame["id"] == sent.message_ids[0]


async def test_send_to_a_client_never_seen_is_kept_for_its_first_hello(webchat: Webchat) -> None:
    await webchat.channel.send(outbound("from before the restart"))
    page = await webchat.page(ALICE)
    assert (await page.next())["text"] == "from before the restart"


async def test_reload_replays_the_conversation_in_order(webchat: Webchat) -> None:
    page = await webchat.page(ALICE)
    await page.send({"type": "message", "text": "hello"})
    await webchat.inbox.next()
    await webchat.channel.send(outbound("hi there"))
    await page.close()
    reloaded = await webchat.page(ALICE)
    first, second = await reloaded.next(), await reloaded.next()
    assert [(first["kind"], first["text"]), (second["kind"], second["text"])] == [
        ("user", "hello"),
        ("reply", "hi there"),
    ]


async def test_an_announce_sent_again_is_shown_once_with_the_same_id(webchat: Webchat) -> None:
    page = await webchat.page(ALICE)
    item = dataclasses.replace(outbound("tides: done", kind="announce", run_id="r1"), outbox_id=7)
    other = dataclasses.replace(item, outbox_id=8, text="another")
    before = await webchat.channel.find_delivered(item, 0.0)
    first = await webchat.channel.send(item)
    again = await webchat.channel.send(item)  # resent after a crash, as the outbox would
    await webchat.channel.send(other)
    after = await webchat.channel.find_delivered(item, 0.0)

    assert first.message_ids == again.message_ids
    assert (before.outcome, after.outcome, after.message_ids) == (
        "not_found",
        "found",
        first.message_ids,
    )
    # The open page got it once (the next frame is the other announce), and so does a
    # page that connects now.
    assert [(await page.next())["text"] for _ in range(2)] == ["tides: done", "another"]
    replay = await webchat.page(ALICE)
    assert [(await replay.next())["text"] for _ in range(2)] == ["tides: done", "another"]


async def test_history_is_bounded(make_webchat: MakeWebchat) -> None:
    chat = await make_webchat(historySize=3)
    for n in range(5):
        await chat.channel.send(outbound(f"m{n}"))
    page = await chat.page(ALICE)
    assert [(await page.next())["text"] for _ in range(3)] == ["m2", "m3", "m4"]
    await chat.channel.send(outbound("marker"))
    assert (await page.next())["text"] == "marker"


async def test_clients_are_bounded_forgetting_the_least_recent_idle_one(
    make_webchat: MakeWebchat,
) -> None:
    chat = await make_webchat(maxClients=2)
    alice = await chat.page(ALICE)  # an open page keeps Alice remembered
    await chat.channel.send(outbound("for alice"))
    assert (await alice.next())["text"] == "for alice"
    await chat.channel.send(outbound("for bob", chat_id=BOB))
    await chat.channel.send(outbound("for carol", chat_id="carol"))  # Bob is forgotten
    await alice.close()
    again = await chat.page(ALICE)
    assert (await again.next())["text"] == "for alice"
    carol = await chat.page("carol")
    assert (await carol.next())["text"] == "for carol"
    bob = await chat.page(BOB)
    await chat.channel.send(outbound("after", chat_id=BOB))
    assert (await bob.next())["text"] == "after"


# -- runs and typing -----------------------------------------------------------------------


async def test_run_updates_are_pushed_and_the_latest_replayed(webchat: Webchat) -> None:
    page = await webchat.page(ALICE)
    other = await webchat.page(BOB)
    for status in ("queued", "running"):
        await webchat.channel.run_update(
            RunUpdate(run_id="run-1", name="tea", status=status, chat_id=ALICE)
        )
    for status in ("queued", "running"):
        frame = await page.next()
        assert {k: frame[k] for k in ("type", "runId", "name", "status")} == {
            "type": "run",
            "runId": "run-1",
            "name": "tea",
            "status": status,
        }
    await webchat.channel.send(outbound("marker", chat_id=BOB))
    assert (await other.next())["text"] == "marker"
    later = await webchat.page(ALICE)
    latest = await later.next()
    assert (latest["runId"], latest["status"]) == ("run-1", "running")
    await webchat.channel.send(outbound("after the runs"))
    assert (await later.next())["text"] == "after the runs"


async def test_run_update_for_an_invalid_client_is_ignored(webchat: Webchat) -> None:
    await webchat.channel.run_update(
        RunUpdate(run_id="r", name="x", status="done", chat_id="../etc")
    )
    page = await webchat.page(ALICE)
    await webchat.channel.send(outbound("marker"))
    assert (await page.next())["text"] == "marker"


async def test_working_shows_typing_and_replays_it(webchat: Webchat) -> None:
    page = await webchat.page(ALICE)
    async with webchat.channel.working(inbound()):
        assert await page.next() == {"type": "typing", "on": True}
        late = await webchat.page(ALICE)
        assert await late.next() == {"type": "typing", "on": True}
    assert await page.next() == {"type": "typing", "on": False}
    assert await late.next() == {"type": "typing", "on": False}


# -- invalid input -------------------------------------------------------------------------


async def test_invalid_frames_get_error_frames_and_the_socket_stays_usable(
    webchat: Webchat,
) -> None:
    page = Page(await webchat.connect())
    await page.ws.send_str("{not json")
    assert (await page.next())["code"] == "bad_json"
    await page.ws.send_str("[1, 2]")
    assert (await page.next())["code"] == "bad_frame"
    await page.send({"type": "shout", "text": "x"})
    assert (await page.next())["code"] == "bad_frame"
    await page.ws.send_bytes(b"\x00\x01")
    assert (await page.next())["code"] == "bad_frame"
    await page.send({"type": "message", "text": "too early"})
    assert (await page.next())["code"] == "hello_first"
    await page.send({"type": "hello", "clientId": ALICE})
    assert await page.next() == {"type": "ready", "clientId": ALICE}
    await page.send({"type": "hello", "clientId": BOB})
    assert (await page.next())["code"] == "already_hello"
    await page.send({"type": "message", "text": 42})
    assert (await page.next())["code"] == "bad_frame"
    await page.send({"type": "message", "text": "  \n "})
    assert (await page.next())["code"] == "empty"
    await page.send({"type": "message", "text": "finally"})
    assert (await webchat.inbox.next()).text == "finally"
    assert webchat.inbox.queue.empty()


@pytest.mark.parametrize(
    "client_id", ["", "../../etc/passwd", "a b", "é", "x" * 65, 7, None, ["a"]]
)
async def test_invalid_client_id_is_rejected(webchat: Webchat, client_id: object) -> None:
    page = Page(await webchat.connect())
    await page.send({"type": "hello", "clientId": client_id})
    frame = await page.next()
    assert frame["type"] == "error"
    assert frame["code"] == "bad_client_id"
    await page.send({"type": "hello", "clientId": "x" * 64})
    assert await page.next() == {"type": "ready", "clientId": "x" * 64}


async def test_oversize_text_is_rejected(webchat: Webchat) -> None:
    page = await webchat.page(ALICE)
    # Counted in UTF-8 bytes: this is half the limit in characters but over it in bytes.
    await page.send({"type": "message", "text": "é" * (MAX_TEXT_BYTES // 2) + "!"})
    frame = await page.next()
    assert (frame["type"], frame["code"]) == ("error", "too_long")
    await page.send({"type": "message", "text": "a" * MAX_TEXT_BYTES})
    assert len((await webchat.inbox.next()).text) == MAX_TEXT_BYTES
    assert webchat.inbox.queue.empty()


async def test_send_to_an_invalid_chat_id_fails_permanently(webchat: Webchat) -> None:
    with pytest.raises(ChannelSendError) as caught:
        await webchat.channel.send(outbound("x", chat_id="a/b"))
    assert caught.value.retryable is False


# -- lifecycle -----------------------------------------------------------------------------


async def test_stop_closes_every_socket_with_going_away(webchat: Webchat) -> None:
    pages = [await webchat.page(ALICE), await webchat.page(BOB), Page(await webchat.connect())]
    assert webchat.channel.connected
    await webchat.channel.stop()
    for page in pages:
        msg = await page.ws.receive(timeout=WAIT)
        assert msg.type is WSMsgType.CLOSE
        assert msg.data == WSCloseCode.GOING_AWAY
    assert not webchat.channel.connected
    await webchat.channel.stop()  # idempotent
    with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
        await webchat.connect()
    assert caught.value.status == 503


async def test_app_shutdown_closes_sockets(webchat: Webchat) -> None:
    page = await webchat.page(ALICE)
    await webchat.client.server.close()
    msg = await page.ws.receive(timeout=WAIT)
    assert msg.type is WSMsgType.CLOSE
    assert msg.data == WSCloseCode.GOING_AWAY


async def test_socket_before_start_is_refused(make_webchat: MakeWebchat) -> None:
    chat = await make_webchat(start=False)
    assert not chat.channel.connected
    with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
        await chat.connect()
    assert caught.value.status == 503
    assert (await chat.client.get("/")).status == 200


# -- the gateway's token -------------------------------------------------------------------


async def test_token_guards_the_socket_but_not_the_page(make_webchat: MakeWebchat) -> None:
    chat = await make_webchat(token="secret")
    for path in (
        "/",
        "/static/webchat/app.js",
        "/static/webchat/runs.js",
        "/static/webchat/style.css",
    ):
        assert (await chat.client.get(path)).status == 200, path
    for path in ("/webchat/ws", "/webchat/ws?token=wrong"):
        with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
            await chat.connect(path=path)
        assert caught.value.status == 401
    # The page's probe: a plain GET tells a refused token (401) from an accepted one (426).
    assert (await chat.client.get("/webchat/ws")).status == 401
    ok = await chat.client.get("/webchat/ws", headers={"Authorization": "Bearer secret"})
    assert ok.status == 426
    page = await chat.page(ALICE, path="/webchat/ws?token=secret")
    await page.send({"type": "message", "text": "through the token"})
    assert (await chat.inbox.next()).text == "through the token"


async def test_too_many_pages_of_one_client_are_refused(webchat: Webchat) -> None:
    pages = [await webchat.page(ALICE) for _ in range(MAX_PAGES_PER_CLIENT)]
    extra = Page(await webchat.connect())
    await extra.send({"type": "hello", "clientId": ALICE})
    assert (await extra.next())["code"] == "unavailable"
    msg = await extra.ws.receive(timeout=WAIT)
    assert (msg.type, msg.data) == (WSMsgType.CLOSE, WSCloseCode.POLICY_VIOLATION)
    await webchat.channel.send(outbound("still here"))
    assert all([(await page.next())["text"] == "still here" for page in pages])


async def test_a_page_too_far_behind_is_closed_and_catches_up_on_reconnect(
    make_webchat: MakeWebchat,
) -> None:
    chat = await make_webchat(historySize=1)
    page = await chat.page(ALICE)
    # send() queues without yielding to the loop, so the writer cannot keep up with this burst.
    for n in range(1000):
        await chat.channel.send(outbound(f"m{n}"))
    while (msg := await page.ws.receive(timeout=WAIT)).type is WSMsgType.TEXT:
        pass
    assert (msg.type, msg.data) == (WSMsgType.CLOSE, WSCloseCode.TRY_AGAIN_LATER)
    again = await chat.page(ALICE)
    assert (await again.next())["text"] == "m999"
