"""The web chat's streamed replies over real WebSockets: delta frames with the final reply's
id as their turn id, coalesced pieces, a status line that replaces, late pages caught up."""

from __future__ import annotations

import asyncio
import dataclasses

from channels.base import OutboundMessage
from channels.webchat.streams import WebchatStream
from tests.channels.webchat.conftest import Page, Webchat
from tests.channels.webchat.test_channel import ALICE, BOB, inbound

RECORDED = "inbound-row-17"


def final(text: str) -> OutboundMessage:
    return OutboundMessage(
        channel="webchat",
        account="local",
        chat_id=ALICE,
        thread_id=None,
        text=text,
        reply_to=RECORDED,
    )


def opened(webchat: Webchat, chat_id: str = ALICE) -> WebchatStream:
    stream = webchat.channel.open_reply(inbound(chat_id), RECORDED, stream=True)
    assert isinstance(stream, WebchatStream)
    return stream


async def text_of(page: Page, turn_id: str, until: str) -> str:
    """Follow the delta frames of ``turn_id`` until the shown text is ``until``."""
    shown = ""
    while shown != until:
        frame = await page.next_of("delta")
        assert frame["turnId"] == turn_id
        shown = frame["text"] if frame.get("reset") else shown + frame["text"]
    return shown


async def test_pieces_reach_the_page_then_the_final_reply_carries_the_turn_id(
    webchat: Webchat,
) -> None:
    page = await webchat.page(ALICE)
    other = await webchat.page(BOB)
    stream = opened(webchat)
    stream.append("Hello")
    stream.append(", wor")
    await asyncio.sleep(0)  # one turn of the loop: a frame may carry both pieces
    stream.append("ld.")
    assert await text_of(page, stream.turn_id, "Hello, world.") == "Hello, world."

    sent = await stream.finish("Hello, world.")
    assert sent.message_ids == (stream.turn_id,)
    message = await page.next_of("message")
    assert (message["id"], message["text"]) == (stream.turn_id, "Hello, world.")
    stream.append(" More?")  # nothing of the turn after its final reply
    await stream.close()
    # The final reply took the growing text's place: no more frames of the turn, no end.
    await webchat.channel.send(dataclasses.replace(final("later"), reply_to=None))
    assert (await page.next())["text"] == "later"
    # Another client's page saw none of it.
    await webchat.channel.send(dataclasses.replace(final("for bob"), chat_id=BOB, reply_to=None))
    assert (await other.next_of("message"))["text"] == "for bob"


async def test_pieces_of_one_loop_turn_are_one_frame(webchat: Webchat) -> None:
    page = await webchat.page(ALICE)
    stream = opened(webchat)
    for word in ("one ", "two ", "three"):
        stream.append(word)
    frame = await page.next_of("delta")
    assert frame == {"type": "delta", "turnId": stream.turn_id, "text": "one two three"}


async def test_a_status_line_replaces_the_text(webchat: Webchat) -> None:
    page = await webchat.page(ALICE)
    stream = opened(webchat)
    stream.append("Let me look that up.")
    await text_of(page, stream.turn_id, "Let me look that up.")
    stream.replace("Using web_fetch…")
    frame = await page.next_of("delta")
    assert frame == {
        "type": "delta",
        "turnId": stream.turn_id,
        "text": "Using web_fetch…",
        "reset": True,
    }


async def test_a_page_opened_mid_turn_gets_the_text_so_far(webchat: Webchat) -> None:
    page = await webchat.page(ALICE)
    stream = opened(webchat)
    stream.append("Half of the ")
    stream.append("answer")
    await text_of(page, stream.turn_id, "Half of the answer")
    late = await webchat.page(ALICE)
    frame = await late.next_of("delta")
    assert (frame["text"], frame.get("reset")) == ("Half of the answer", True)
    await stream.close()
    # Once over, a new page has nothing of it.
    newest = await webchat.page(ALICE)
    await webchat.channel.send(final("done"))
    assert (await newest.next())["type"] == "message"


async def test_no_stream_for_an_invalid_chat_id(webchat: Webchat) -> None:
    assert not webchat.channel.open_reply(inbound("a/b"), RECORDED, stream=True).streams
