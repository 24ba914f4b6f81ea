"""One open page: a server-side WebSocket with a bounded outgoing queue and its writer task.

Frames are queued without waiting and written by one task per socket, so ``send()`` never
blocks on a slow browser and frames to one socket never interleave. A page that falls
``queue_size`` frames behind is closed (1013, try again later); it reconnects and gets the
replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from aiohttp import WSCloseCode, web

log = logging.getLogger(__name__)

#: Seconds a graceful close waits for queued frames to reach the browser before closing.
FLUSH_TIMEOUT = 1.0


class Connection:
    """A page's socket; ``client_id`` is set once the page has said hello."""

    def __init__(self, ws: web.WebSocketResponse, *, queue_size: int) -> None:
        self.ws = ws
        self.client_id: str | None = None
        self._queue: asyncio.Queue[str | None] = asyncio.Queue(maxsize=queue_size)
        self._closing = False
        self._writer = asyncio.create_task(self._write_loop(), name="webchat-writer")
        self._closer: asyncio.Task[bool] | None = None

    def __repr__(self) -> str:
        return (
            f"<Connection client={self.client_id} queued={self._queue.qsize()} "
            f"closing={self._closing}>"
        )

    @property
    def closing(self) -> bool:
        return self._closing or self.ws.closed

    def push(self, frame: str) -> None:
        """Queue ``frame`` for the browser; a page too far behind is closed instead."""
        if self.closing:
            return
        try:
            self._queue.put_nowait(frame)
        except asyncio.QueueFull:
            log.warning("web chat page too slow, closing it", extra={"client": self.client_id})
            self._closing = True
            self._writer.cancel()
            self._closer = asyncio.create_task(
                self.ws.close(code=WSCloseCode.TRY_AGAIN_LATER, message=b"too slow")
            )

    async def _write_loop(self) -> None:
        while (frame := await self._queue.get()) is not None:
            try:
                await self.ws.send_str(frame)
            except ConnectionError:
                return  # the browser went away; the read loop sees the close

    async def close(self, code: int, message: bytes) -> None:
        """Flush what is queued (briefly), then close the socket with ``code``."""
        if not self._closing:
            self._closing = True
            with contextlib.suppress(asyncio.QueueFull):
                self._queue.put_nowait(None)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._writer), FLUSH_TIMEOUT)
        await self.ws.close(code=code, message=message)
        await self.release()

    async def release(self) -> None:
        """Stop the writer and wait for it and any pending close (the socket is done)."""
        self._closing = True
        self._writer.cancel()
        tasks: list[asyncio.Task[Any]] = [self._writer]
        if self._closer is not None:
            tasks.append(self._closer)
        await asyncio.gather(*tasks, return_exceptions=True)
