"""A web chat reply shown as it is written: delta frames to the client's open pages.

The stream's ``turnId`` is the id the final reply message will carry (made from the
recorded inbound message it answers), so a page replaces the growing text with that
message in place, without a flash. Pieces that arrive within one turn of the event loop go
out as one frame, and frames after the first go at most every :data:`FRAME_INTERVAL`
seconds: a fast model never floods a page's queue, and the page draws no more often than
the eye can follow. A page that opens while a
turn is being written gets the text so far (:meth:`ClientState.attach` replays it), and one
where the turn ended without a reply of that id (stopped, or nothing to say) drops the
growing text at the ``end`` frame. Once the final reply is on the pages it takes the growing
text's place by itself, so no ``end`` frame follows it (on a fast model that was a third of
a turn's frames, each a wake-up and a write for the server and the page alike).

In a cluster the client's pages may be open on other replicas too. The stream then also
publishes its text through the :class:`~channels.webchat.relay.Relay` (:class:`RelayFeed`),
at most once every :data:`RELAY_INTERVAL` seconds, each notice carrying only what is new
since the last (the text so far would outgrow a notice, and cost its square in bytes); the
replicas holding a page of the client show it (:meth:`WebchatChannel._on_delta`). Nothing
is relayed once the final reply is sent (it reaches those pages as every message does);
an ``end`` notice follows.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable

from channels.base import OutboundMessage, Reply, SentMessage
from channels.errors import ChannelSendError
from channels.webchat.clients import ClientState
from channels.webchat.protocol import delta_frame
from channels.webchat.relay import Relay, RelayedDelta

log = logging.getLogger(__name__)

#: Seconds between delta frames of one reply after its first (20 a second: smooth to the
#: eye, and a tenth of the frames of one per token for a fast model).
FRAME_INTERVAL = 0.05
#: Seconds between a reply's notices to the other replicas after its first (4 a second:
#: every notice is a database round trip and a wake-up of every replica).
RELAY_INTERVAL = 0.25


class RelayFeed:
    """One turn's text, relayed to the other replicas (see the module docstring): one task
    publishes in order, at most once an interval, what gathered meanwhile."""

    def __init__(
        self, relay: Relay, client_id: str, turn_id: str, tasks: set[asyncio.Task[None]]
    ) -> None:
        """``tasks``: the channel's, so that stopping it ends this feed's task."""
        self._relay = relay
        self._client_id = client_id
        self._turn_id = turn_id
        self._tasks = tasks
        self._pending = ""
        self._reset = False
        #: The length of the text the other replicas were told of.
        self._told = 0
        self._final = False
        self._ended = False
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.notices = 0

    def __repr__(self) -> str:
        return f"<RelayFeed {self._turn_id} notices={self.notices}>"

    def add(self, text: str, *, reset: bool) -> None:
        """More text (``reset``: in place of all before), relayed at the next turn."""
        if self._final:
            return
        if reset:
            self._pending, self._reset = text, True
        else:
            self._pending += text
        self._kick()

    def final(self) -> None:
        """The final reply is being sent: nothing more is relayed but the end."""
        self._final = True
        self._pending, self._reset = "", False

    def end(self) -> None:
        """The turn is over: tell the others (if they heard of it at all)."""
        self._final = self._ended = True
        self._pending, self._reset = "", False
        if self._task is not None:
            self._dirty.set()

    def _kick(self) -> None:
        self._dirty.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="webchat-relay-feed")
            self._tasks.add(self._task)
            self._task.add_done_callback(self._tasks.discard)

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            if self._pending or self._reset:
                text, reset = self._pending, self._reset
                self._pending, self._reset = "", False
                at = 0 if reset else self._told
                self._told = at + len(text)
                await self._publish(RelayedDelta(self._client_id, self._turn_id, at, text, reset))
            if self._ended:
                end = RelayedDelta(self._client_id, self._turn_id, self._told, "", end=True)
                await self._publish(end)
                return
            await asyncio.sleep(RELAY_INTERVAL)

    async def _publish(self, delta: RelayedDelta) -> None:
        try:
            await self._relay.publish_delta(delta)
            self.notices += 1
        except ChannelSendError as exc:  # a courtesy: the final reply reaches them anyway
            log.info("web chat: streamed text not relayed: %s", exc)


#: How the channel sends a final reply that replaces a stream's growing text.
Deliver = Callable[[OutboundMessage, "WebchatStream"], Awaitable[SentMessage]]


class WebchatStream(Reply):
    """One turn's streamed reply on one client's pages."""

    streams = True

    def __init__(
        self,
        client: ClientState,
        final: OutboundMessage,
        turn_id: str,
        deliver: Deliver,
        feed: RelayFeed | None = None,
    ) -> None:
        """``final`` is the reply this stream becomes (its text is not used), ``turn_id``
        its message id; ``deliver`` sends it; ``feed``: in a cluster, what relays the text
        to the other replicas' pages."""
        self._client = client
        self.final = final
        self._deliver = deliver
        self._feed = feed
        self.turn_id = turn_id
        self._pending = ""
        self._reset = False
        #: The call of :meth:`_flush` to come, if one is due.
        self._timer: asyncio.Handle | None = None
        self._closed = False
        self._replaced = False
        self._last_frame = -FRAME_INTERVAL
        self.frames = 0
        client.streams[turn_id] = ""

    def __repr__(self) -> str:
        shown = len(self._client.streams.get(self.turn_id, ""))
        state = " closed" if self._closed else ""
        return f"<WebchatStream {self.turn_id} chars={shown}{state}>"

    def append(self, text: str) -> None:
        if self._closed or self._replaced or not text:
            return
        self._pending += text
        self._schedule()

    def replace(self, text: str) -> None:
        if self._closed or self._replaced:
            return
        self._pending, self._reset = text, True
        self._schedule()

    def _schedule(self) -> None:
        if self._timer is not None:
            return
        loop = asyncio.get_running_loop()
        wait = self._last_frame + FRAME_INTERVAL - loop.time()
        if wait > 0:
            self._timer = loop.call_later(wait, self._flush)
        else:  # the first piece, or the first after a pause: at once
            self._timer = loop.call_soon(self._flush)

    def _flush(self) -> None:
        if self._timer is not None:
            # Flushed before its time (the final reply, or the close): the loop need not
            # wake for it.
            self._timer.cancel()
            self._timer = None
        self._last_frame = asyncio.get_running_loop().time()
        if self._closed or self._replaced or (not self._pending and not self._reset):
            return
        text, reset = self._pending, self._reset
        self._pending, self._reset = "", False
        shown = text if reset else self._client.streams.get(self.turn_id, "") + text
        self._client.streams[self.turn_id] = shown
        self.frames += 1
        self._client.broadcast(delta_frame(self.turn_id, text, reset=reset))
        if self._feed is not None:
            self._feed.add(text, reset=reset)

    def flush(self) -> None:
        """Show what is pending now: the final reply is about to follow it (and reaches
        other replicas' pages by itself: nothing more is relayed)."""
        self._flush()
        if self._feed is not None:
            self._feed.final()

    def replaced(self) -> None:
        """The final reply, with this turn's id, is in the client's history and on its
        pages: it has taken the growing text's place, so nothing more of it is shown."""
        self._replaced = True
        self._pending, self._reset = "", False
        self._client.streams.pop(self.turn_id, None)

    async def finish(self, text: str) -> SentMessage:
        return await self._deliver(dataclasses.replace(self.final, text=text), self)

    async def close(self) -> None:
        if self._closed:
            return
        self._flush()
        self._closed = True
        if not self._replaced:  # the pages still show growing text: drop it
            self._client.streams.pop(self.turn_id, None)
            self._client.broadcast(delta_frame(self.turn_id, "", end=True))
        if self._feed is not None:
            self._feed.end()
