"""A web chat reply shown as it is written: delta frames to the client's open pages.

The stream's ``turnId`` is the id the final reply message will carry (made from the
recorded inbound message it answers), so a page replaces the growing text with that
message in place, without a flash. Pieces that arrive within one turn of the event loop go
out as one frame, so a fast model never floods a page's queue. A page that opens while a
turn is being written gets the text so far (:meth:`ClientState.attach` replays it), and one
where the turn ended without a reply of that id (stopped, or nothing to say) drops the
growing text at the ``end`` frame.
"""

from __future__ import annotations

import asyncio
import logging

from channels.streaming import ReplyStream
from channels.webchat.clients import ClientState
from channels.webchat.protocol import delta_frame

log = logging.getLogger(__name__)


class WebchatStream(ReplyStream):
    """One turn's streamed reply on one client's pages."""

    def __init__(self, client: ClientState, turn_id: str) -> None:
        self._client = client
        self.turn_id = turn_id
        self._pending = ""
        self._reset = False
        self._scheduled = False
        self._closed = False
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
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        if self._closed or (not self._pending and not self._reset):
            return
        text, reset = self._pending, self._reset
        self._pending, self._reset = "", False
        shown = text if reset else self._client.streams.get(self.turn_id, "") + text
        self._client.streams[self.turn_id] = shown
        self._client.broadcast(delta_frame(self.turn_id, text, reset=reset))

    async def close(self) -> None:
        if self._closed:
            return
        self._flush()
        self._closed = True
        self._client.streams.pop(self.turn_id, None)
        self._client.broadcast(delta_frame(self.turn_id, "", end=True))
