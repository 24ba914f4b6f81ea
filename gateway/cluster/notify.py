"""Notices between replicas over PostgreSQL LISTEN/NOTIFY (:class:`PgNotices`): the web
chat's (:class:`PgWebchatRelay`, a :class:`channels.webchat.relay.Relay`), steers for a run
another replica executes, and runs that ended.

A notice names what changed (a topic and a reference: a web chat client, a run id), never
the change itself: payloads are limited to 8,000 bytes and a message is not, and what
changed is in the shared state directory or database anyway. The one exception is a web
chat reply being written (:data:`WEBCHAT_DELTA`): its new text is nowhere else, so it
travels in the notice, split to fit (:func:`delta_notices`). Each replica LISTENs on one
dedicated connection for every topic; when that connection is lost it is opened again
(with backoff, at most ``poll`` seconds apart) and, once it listens again, every topic's
handler is called with None (what was notified meanwhile is looked up again). Notices carry
the schema, so clusters sharing a database in different schemas ignore each other's, and
the sending replica, which ignores its own.

**Versions.** A rolling restart runs old and new releases side by side, so every notice says
which wire format it is in: :data:`NOTICE_VERSION`, in the channel's name and in each
payload (``"v"``). :func:`encode_notice` and :func:`decode_notice` are the one place that
knows the format. A payload of a version this replica does not read (a newer replica's) is
never guessed at: it is taken as a gap, and every handler looks everything up again (at most
once per ``poll``), as after a lost connection, so nothing it named is missed. A release that
changes the format raises the version; one whose notices older replicas must not hear at all
also listens on its predecessor's channel (:data:`CHANNELS`) while a restart may mix them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

import orjson
import psycopg

from channels import ChannelSendError
from channels.webchat.relay import ChangeHandler, DeltaHandler, RelayedDelta
from gateway.backoff import backoff
from gateway.cluster.connection import connect, describe
from gateway.constants import CLUSTER_POLL_SECONDS

log = logging.getLogger(__name__)

#: The notices' wire format (module docstring): in the channel's name and every payload.
NOTICE_VERSION: Final = 1
#: The notification channel this release sends on.
CHANNEL: Final = f"herald_notices_v{NOTICE_VERSION}"
#: The channels it listens on: its own (and, after a format change, its predecessor's).
CHANNELS: Final = (CHANNEL,)
#: First delay before opening a lost LISTEN connection again (then doubling, up to poll).
RECONNECT_FIRST_SECONDS: Final = 0.2
#: The web chat's topic: a client whose history file grew.
WEBCHAT: Final = "webchat"
#: The web chat's reply text as it is written (:class:`channels.webchat.relay.RelayedDelta`).
WEBCHAT_DELTA: Final = "webchat-delta"
#: The most bytes a delta notice's reference may take, JSON-escaped: PostgreSQL refuses
#: payloads of 8,000 bytes or more, and the rest of the notice (schema, replica id, topic)
#: takes a few hundred at most.
DELTA_REF_BYTES: Final = 7000

Connection = psycopg.AsyncConnection[tuple[object, ...]]
#: Hears a topic's reference from another replica, or None after a gap in the notices.
NoticeHandler = Callable[[str | None], Awaitable[None]]


class NoticeSendError(Exception):
    """The other replicas could not be told (the message names the database, masked)."""


@dataclass(frozen=True, slots=True)
class Notice:
    """One notice: ``ref`` changed under ``topic``, told by ``replica`` of the cluster in
    ``schema``."""

    schema: str
    replica: str
    topic: str
    ref: str


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A notice in a format this replica does not read (``version``: its ``"v"``, None when
    it has none), from ``replica`` of the cluster in ``schema`` where those could be read."""

    version: object
    schema: str | None
    replica: str | None


def encode_notice(notice: Notice) -> str:
    """The payload of ``notice`` in this release's format."""
    note = {
        "v": NOTICE_VERSION,
        "s": notice.schema,
        "r": notice.replica,
        "t": notice.topic,
        "c": notice.ref,
    }
    return orjson.dumps(note).decode()


def decode_notice(payload: str) -> Notice | Unreadable | None:
    """The notice in ``payload``: a :class:`Notice`, :class:`Unreadable` for a JSON object of
    another version (or a malformed one of this version), None for anything that is no
    notice at all."""
    try:
        note = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(note, dict):
        return None
    schema, replica = note.get("s"), note.get("r")
    fields = (schema, replica, note.get("t"), note.get("c"))
    if note.get("v") == NOTICE_VERSION and all(isinstance(f, str) for f in fields):
        return Notice(*(str(f) for f in fields))
    return Unreadable(
        note.get("v"),
        schema if isinstance(schema, str) else None,
        replica if isinstance(replica, str) else None,
    )


class PgNotices:
    """This replica's notices: a connection to listen, one to notify, handlers by topic."""

    def __init__(self, url: str, replica_id: str, *, poll: float = CLUSTER_POLL_SECONDS) -> None:
        self._url = url
        self._replica = replica_id
        self._poll = poll
        self._schema: str | None = None
        self._handlers: dict[str, NoticeHandler] = {}
        self._listener: asyncio.Task[None] | None = None
        self._sender: Connection | None = None
        self._sending = asyncio.Lock()
        #: An unreadable notice was heard: every handler looks everything up again.
        self._stale = False
        self._unreadable_logged: set[str] = set()
        #: True while the LISTEN connection is open (tests and logs).
        self.listening = False

    def __repr__(self) -> str:
        state = "listening" if self.listening else "running" if self._listener else "stopped"
        return f"<PgNotices {state} replica={self._replica} topics={sorted(self._handlers)}>"

    async def subscribe(self, topic: str, handler: NoticeHandler) -> None:
        """``handler`` hears ``topic``'s notices from now on (and None at once, as after
        a gap, when this replica listens already: nothing it missed stays missed)."""
        self._handlers[topic] = handler
        if self.listening:
            await _call(handler, None, topic)

    def unsubscribe(self, topic: str) -> None:
        self._handlers.pop(topic, None)

    async def start(self) -> None:
        """Begin listening (idempotent)."""
        if self._listener is None:
            self._listener = asyncio.create_task(self._listen(), name="notices-listen")

    async def stop(self) -> None:
        """Stop listening and close both connections. Idempotent."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)
        async with self._sending:
            sender, self._sender = self._sender, None
            if sender is not None:
                with contextlib.suppress(psycopg.Error, OSError):
                    await sender.close()

    async def publish(self, topic: str, ref: str) -> None:
        """Tell the other replicas ``ref`` changed under ``topic``; raises
        :class:`NoticeSendError` when the database could not be reached."""
        async with self._sending:
            try:
                conn, schema = self._sender, self._schema
                if conn is None or conn.closed or conn.broken or schema is None:
                    conn = self._sender = await connect(self._url, self._replica, "notify")
                    schema = self._schema = await _schema(conn)
                payload = encode_notice(Notice(schema, self._replica, topic, ref))
                await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
            except (psycopg.Error, OSError) as exc:
                sender, self._sender = self._sender, None
                if sender is not None:
                    with contextlib.suppress(psycopg.Error, OSError):
                        await sender.close()
                raise NoticeSendError(describe(self._url, exc)) from exc

    async def tell(self, topic: str, ref: str) -> None:
        """:meth:`publish`, a failure logged: for notices whose receivers also look for
        themselves now and then (steers, runs that ended)."""
        try:
            await self.publish(topic, ref)
        except NoticeSendError as exc:
            log.warning("the other replicas could not be told (%s): %s", topic, exc)

    async def _listen(self) -> None:
        failures = 0
        while True:
            conn: Connection | None = None
            try:
                conn = await connect(self._url, self._replica, "listen")
                for channel in CHANNELS:
                    await conn.execute(f"LISTEN {channel}")
                schema = await _schema(conn)
                self.listening = True
                if failures:
                    log.info("notices: listening again", extra={"replica": self._replica})
                failures = 0
                for topic, handler in list(self._handlers.items()):  # notified meanwhile
                    await _call(handler, None, topic)
                while True:
                    async for note in conn.notifies(timeout=self._poll):
                        await self._heard(note.payload, schema)
                    if self._stale:  # unreadable notices: at most one look-up per poll
                        self._stale = False
                        for topic, handler in list(self._handlers.items()):
                            await _call(handler, None, topic)
                    async with asyncio.timeout(self._poll):  # a silent connection: still alive?
                        await conn.execute("SELECT 1")
            except (psycopg.Error, OSError, TimeoutError) as exc:
                self.listening = False
                failures += 1
                if failures == 1:
                    log.warning("notices: not listening: %s", describe(self._url, exc))
            finally:
                self.listening = False
                if conn is not None:
                    with contextlib.suppress(psycopg.Error, OSError):
                        await conn.close()
            await asyncio.sleep(backoff(failures, base=RECONNECT_FIRST_SECONDS, cap=self._poll))

    async def _heard(self, payload: str, schema: str) -> None:
        note = decode_notice(payload)
        if note is None or note.schema not in (schema, None) or note.replica == self._replica:
            return  # no notice; another cluster's (another schema of the database); its own
        if isinstance(note, Unreadable):
            self._unreadable(note)
            return
        handler = self._handlers.get(note.topic)
        if handler is not None:
            await _call(handler, note.ref, note.topic)

    def _unreadable(self, note: Unreadable) -> None:
        """A notice this release cannot read (a newer replica's, during a rolling restart):
        what it named is looked up again, as after a gap."""
        self._stale = True
        version = repr(note.version)
        if version not in self._unreadable_logged:
            self._unreadable_logged.add(version)
            log.warning(
                "notices: a notice of version %s (this replica reads %d); looking up again",
                version,
                NOTICE_VERSION,
                extra={"replica": self._replica, "from": note.replica},
            )


class PgWebchatRelay:
    """The web chat's notices (a :class:`channels.webchat.relay.Relay`) on the replica's
    :class:`PgNotices`, which the gateway starts and stops."""

    def __init__(self, notices: PgNotices) -> None:
        self._notices = notices

    def __repr__(self) -> str:
        return f"<PgWebchatRelay on {self._notices!r}>"

    async def start(self, on_change: ChangeHandler, on_delta: DeltaHandler) -> None:
        async def heard(ref: str | None) -> None:
            delta = None if ref is None else decode_delta(ref)
            if delta is not None:  # None: a gap, made good by the final reply
                await on_delta(delta)

        await self._notices.subscribe(WEBCHAT, on_change)
        await self._notices.subscribe(WEBCHAT_DELTA, heard)
        await self._notices.start()

    async def stop(self) -> None:
        self._notices.unsubscribe(WEBCHAT)
        self._notices.unsubscribe(WEBCHAT_DELTA)

    async def publish_delta(self, delta: RelayedDelta) -> None:
        try:
            for ref in delta_notices(delta):
                await self._notices.publish(WEBCHAT_DELTA, ref)
        except NoticeSendError as exc:
            raise ChannelSendError(
                f"web chat: the other replicas could not be told: {exc}", retryable=True
            ) from exc

    async def publish(self, client_id: str) -> None:
        try:
            await self._notices.publish(WEBCHAT, client_id)
        except NoticeSendError as exc:
            raise ChannelSendError(
                f"web chat: the other replicas could not be told: {exc}", retryable=True
            ) from exc


def delta_notices(delta: RelayedDelta) -> list[str]:
    """The references of the notices carrying ``delta``: one, or its text split in halves
    until each fits :data:`DELTA_REF_BYTES` (a reply the model sent whole, unstreamed, can
    be longer than a notice), each piece with its own ``at``."""
    ref = _encode_delta(delta)
    if len(orjson.dumps(ref)) <= DELTA_REF_BYTES or len(delta.text) < 2:
        return [ref]
    half = len(delta.text) // 2
    first = RelayedDelta(
        delta.client_id, delta.turn_id, delta.at, delta.text[:half], reset=delta.reset
    )
    rest = RelayedDelta(
        delta.client_id,
        delta.turn_id,
        (0 if delta.reset else delta.at) + half,
        delta.text[half:],
        end=delta.end,
    )
    return delta_notices(first) + delta_notices(rest)


def _encode_delta(delta: RelayedDelta) -> str:
    note = {"c": delta.client_id, "u": delta.turn_id, "a": delta.at, "x": delta.text}
    if delta.reset:
        note["r"] = 1
    if delta.end:
        note["e"] = 1
    return orjson.dumps(note).decode()


def decode_delta(ref: str) -> RelayedDelta | None:
    """The delta a notice carries; None for one this version cannot read."""
    try:
        note = orjson.loads(ref)
        delta = RelayedDelta(
            client_id=note["c"],
            turn_id=note["u"],
            at=note["a"],
            text=note["x"],
            reset=bool(note.get("r")),
            end=bool(note.get("e")),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    fields = (delta.client_id, delta.turn_id, delta.text)
    if not all(isinstance(f, str) for f in fields) or not isinstance(delta.at, int):
        return None
    return delta


async def _schema(conn: Connection) -> str:
    row = await (await conn.execute("SELECT coalesce(current_schema(), '')")).fetchone()
    return str(row[0]) if row is not None else ""


async def _call(handler: NoticeHandler, ref: str | None, topic: str) -> None:
    try:
        await handler(ref)
    except Exception:  # one notice's failure must not stop the listener
        log.exception("notices: applying a notice failed", extra={"topic": topic, "ref": ref})
