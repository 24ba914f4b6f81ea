"""A web chat reply shown as it is written: delta frames to the client's open pages.

The stream's ``turnId`` is the id the final reply message will carry (made from the
recorded inbound message it answers), so a page replaces the growing text with that
message in place, without a flash. Pieces that arrive within one turn of the event loop go
out as one frame, and frames after the first go at most every :data:`FRAME_INTERVAL`
seconds: a fast model never floods a page's queue, and the page draws no more often than
the eye can follow. A page that opens while a
turn is being written gets the text so far (:meth:`ClientState.attach` replays it), and one
where the turn ended without a reply of that id (stopped, or nothing to say) drops the
growing text at the ``end`` frame.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from channels.streaming import ReplyStream
from channels.webchat.clients import ClientState
from channels.webchat.protocol import delta_frame

log = logging.getLogger(__name__)

#: Seconds between delta frames of one reply after its first (20 a second: smooth to the
#: eye, and a tenth of the frames of one per token for a fast model).
FRAME_INTERVAL = 0.05


class WebchatStream(ReplyStream):
    """One turn's streamed reply on one client's pages."""

    def __init__(
        self, client: ClientState, turn_id: str, on_close: Callable[[WebchatStream], None]
    ) -> None:
        self._client = client
        self._on_close = on_close
        self.turn_id = turn_id
        self._pending = ""
        self._reset = False
        self._scheduled = False
        self._closed = False
        self._last_frame = -FRAME_INTERVAL
        self.frames = 0
        client.streams[turn_id] = ""

    def __repr__(self) -> str:
        shown = len(self._client.streams.get(self.turn_id, ""))
        state = " closed" if self._closed else ""
        return f"<WebchatStream {self.turn_id} chars={shown}{state}>"

    def append(self, text: str) -> None:
        if self._closed or not text:
            return
        self._pending += text
        self._schedule()

    def replace(self, text: str) -> None:
        if self._closed:
            return
        self._pending, self._reset = text, True
        self._schedule()

    def _schedule(self) -> None:
        if self._scheduled:
            return
        self._scheduled = True
        loop = asyncio.get_running_loop()
        wait = self._last_frame + FRAME_INTERVAL - loop.time()
        if wait > 0:
            loop.call_later(wait, self._flush)
        else:  # the first piece, or the first after a pause: at once
            loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        self._last_frame = asyncio.get_running_loop().time()
        if self._closed or (not self._pending and not self._reset):
            return
        text, reset = self._pending, self._reset
        self._pending, self._reset = "", False
        shown = text if reset else self._client.streams.get(self.turn_id, "") + text
        self._client.streams[self.turn_id] = shown
        self.frames += 1
        self._client.broadcast(delta_frame(self.turn_id, text, reset=reset))

    def flush(self) -> None:
        """Show what is pending now: the final reply is about to follow it."""
        self._flush()

    async def close(self) -> None:
        if self._closed:
            return
        self._flush()
        self._closed = True
        self._on_close(self)
        self._client.streams.pop(self.turn_id, None)
        self._client.broadcast(delta_frame(self.turn_id, "", end=True))
