"""A loopback TCP proxy in front of the tests' PostgreSQL that can lose one commit's answer.

:class:`AnswerCutter` forwards every connection byte for byte. Armed with a marker (a piece of
a statement's text), it lets the first query message carrying the marker through to the
server, and the ``COMMIT`` that follows it (in the same message or a later one); then it
swallows the server's answer to that commit and closes both sides. The write is kept, but
its client sees the connection drop: as when the network or the server dies between a
commit and its acknowledgement, a fault no server-side trigger can make (one that fires
aborts the commit).

A statement's text is looked for in what the client sends: a simple query (the state layer
binds parameters on the client) or the ``Parse`` of an extended one (procrastinate's, whose
pool then commits with a simple ``COMMIT``); each answer ends with ``ReadyForQuery``. The
tests' server never negotiates TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

#: A ReadyForQuery message ends the server's answer to each query message (its last byte,
#: the transaction status, varies).
READY_FOR_QUERY = b"Z\x00\x00\x00\x05"
CHUNK = 65536


class AnswerCutter:
    """See the module docstring; ``async with AnswerCutter(port) as proxy``."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream = upstream_port
        self._server: asyncio.Server | None = None
        self._marker: bytes | None = None
        self._pumps: set[asyncio.Task[None]] = set()
        #: Commits whose answer was lost.
        self.cuts = 0
        self.port = 0

    async def __aenter__(self) -> AnswerCutter:
        self._server = await asyncio.start_server(self._connected, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._server.close()
        for pump in list(self._pumps):
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)

    def url(self, url: str) -> str:
        """``url`` (the test server's) through this proxy."""
        parts = urlsplit(url)
        netloc = parts.netloc.rsplit(":", 1)[0] + f":{self.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    def arm(self, marker: bytes) -> None:
        """Lose the answer to the commit of the next query carrying ``marker`` (once)."""
        self._marker = marker

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream)
        cutting = asyncio.Event()  # the commit went up: swallow its answer, then close
        up = asyncio.ensure_future(self._up(reader, up_writer, cutting))
        down = asyncio.ensure_future(self._down(up_reader, writer, cutting))
        self._pumps.update((up, down))
        try:
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
            if cutting.is_set():
                await asyncio.wait({down})  # the commit's answer, swallowed whole
        finally:
            for pump in (up, down):
                pump.cancel()
                self._pumps.discard(pump)
            for each in (writer, up_writer):
                each.close()
                with contextlib.suppress(Exception):
                    await each.wait_closed()

    async def _up(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cutting: asyncio.Event
    ) -> None:
        carrying = False  # this connection sent the marker; its commit is next
        while chunk := await reader.read(CHUNK):
            marker = self._marker
            start = 0
            if marker is not None and not carrying and marker in chunk:
                self._marker = None
                carrying = True
                start = chunk.index(marker)
            if carrying and b"COMMIT" in chunk[start:]:
                cutting.set()  # before the commit goes up: its answer never comes down
            writer.write(chunk)
            await writer.drain()
            if cutting.is_set():
                return

    async def _down(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cutting: asyncio.Event
    ) -> None:
        while chunk := await reader.read(CHUNK):
            if cutting.is_set():
                if chunk[-6:-1] == READY_FOR_QUERY:  # the commit's answer, all of it: lost
                    self.cuts += 1
                    return
                continue
            writer.write(chunk)
            await writer.drain()
