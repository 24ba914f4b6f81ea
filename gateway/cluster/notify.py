"""The web chat's relay between replicas: PostgreSQL LISTEN/NOTIFY
(:class:`PgWebchatRelay`, a :class:`channels.webchat.relay.Relay`).

A notice names the client whose history file grew, never the message: payloads are
limited to 8,000 bytes and a message is not, and the file (in the shared state directory)
holds it anyway. Each replica LISTENs on a dedicated connection; when that connection is
lost it is opened again (with backoff, at most ``poll`` seconds apart) and, once it
listens again, the channel reads every open client's file again, so a notice sent while it
was away is made good. Notices carry the schema, so clusters sharing a database in
different schemas ignore each other's, and the sending replica, which ignores its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

import orjson
import psycopg

from channels import ChannelSendError
from channels.webchat.relay import ChangeHandler
from gateway.backoff import backoff
from gateway.cluster.connection import connect, describe
from gateway.constants import CLUSTER_POLL_SECONDS

log = logging.getLogger(__name__)

#: The notification channel of every replica's web chat.
CHANNEL: Final = "herald_webchat"
#: First delay before opening a lost LISTEN connection again (then doubling, up to poll).
RECONNECT_FIRST_SECONDS: Final = 0.2

Connection = psycopg.AsyncConnection[tuple[object, ...]]


class PgWebchatRelay:
    """Web chat notices over LISTEN/NOTIFY; a connection to listen, one to notify."""

    def __init__(self, url: str, replica_id: str, *, poll: float = CLUSTER_POLL_SECONDS) -> None:
        self._url = url
        self._replica = replica_id
        self._poll = poll
        self._schema: str | None = None
        self._listener: asyncio.Task[None] | None = None
        self._sender: Connection | None = None
        self._sending = asyncio.Lock()
        #: True while the LISTEN connection is open (tests and logs).
        self.listening = False

    def __repr__(self) -> str:
        state = "listening" if self.listening else "running" if self._listener else "stopped"
        return f"<PgWebchatRelay {state} replica={self._replica}>"

    async def start(self, on_change: ChangeHandler) -> None:
        if self._listener is None:
            self._listener = asyncio.create_task(self._listen(on_change), name="webchat-listen")

    async def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)
        async with self._sending:
            sender, self._sender = self._sender, None
            if sender is not None:
                with contextlib.suppress(psycopg.Error, OSError):
                    await sender.close()

    async def publish(self, client_id: str) -> None:
        async with self._sending:
            try:
                conn = self._sender
                if conn is None or conn.closed or conn.broken:
                    conn = await connect(self._url, self._replica, "notify")
                    self._schema = await _schema(conn)
                    self._sender = conn
                note = {"s": self._schema, "r": self._replica, "c": client_id}
                payload = orjson.dumps(note)
                await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload.decode()))
            except (psycopg.Error, OSError) as exc:
                sender, self._sender = self._sender, None
                if sender is not None:
                    with contextlib.suppress(psycopg.Error, OSError):
                        await sender.close()
                raise ChannelSendError(
                    f"web chat: the other replicas could not be told: {describe(self._url, exc)}",
                    retryable=True,
                ) from exc

    async def _listen(self, on_change: ChangeHandler) -> None:
        failures = 0
        while True:
            conn: Connection | None = None
            try:
                conn = await connect(self._url, self._replica, "listen")
                await conn.execute(f"LISTEN {CHANNEL}")
                schema = await _schema(conn)
                self.listening = True
                if failures:
                    log.info("web chat relay listening again", extra={"replica": self._replica})
                failures = 0
                await _call(on_change, None)  # what was notified while nobody listened here
                while True:
                    async for note in conn.notifies(timeout=self._poll):
                        await self._heard(note.payload, schema, on_change)
                    async with asyncio.timeout(self._poll):  # a silent connection: still alive?
                        await conn.execute("SELECT 1")
            except (psycopg.Error, OSError, TimeoutError) as exc:
                self.listening = False
                failures += 1
                if failures == 1:
                    log.warning("web chat relay not listening: %s", describe(self._url, exc))
            finally:
                self.listening = False
                if conn is not None:
                    with contextlib.suppress(psycopg.Error, OSError):
                        await conn.close()
            await asyncio.sleep(backoff(failures, base=RECONNECT_FIRST_SECONDS, cap=self._poll))

    async def _heard(self, payload: str, schema: str, on_change: ChangeHandler) -> None:
        try:
            note = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        if not isinstance(note, dict) or note.get("s") != schema:
            return  # another cluster's notice (another schema of the database)
        client_id = note.get("c")
        if note.get("r") != self._replica and isinstance(client_id, str):
            await _call(on_change, client_id)


async def _schema(conn: Connection) -> str:
    row = await (await conn.execute("SELECT coalesce(current_schema(), '')")).fetchone()
    return str(row[0]) if row is not None else ""


async def _call(on_change: ChangeHandler, client_id: str | None) -> None:
    try:
        await on_change(client_id)
    except Exception:  # one client's failure must not stop the listener
        log.exception("web chat relay: applying a notice failed", extra={"client": client_id})
