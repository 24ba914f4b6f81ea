"""Notices between replicas carry their wire format's version, in the channel's name and in
each payload, so that during a rolling restart a replica can tell a notice it reads from
one of another release: a notice it cannot read is taken as a gap (every handler looks
everything up again), never guessed at, and the listener goes on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest

from gateway.cluster.notify import (
    CHANNEL,
    NOTICE_VERSION,
    Notice,
    PgNotices,
    Unreadable,
    decode_notice,
    encode_notice,
)
from tests.gateway.cluster._replicas import sql
from tests.gateway.cluster.replicas import POLL_SECONDS, until

TOPIC = "runs"


def test_a_notice_is_read_back_as_written_with_its_version() -> None:
    notice = Notice("s1", "replica-a", TOPIC, "run-1")
    payload = encode_notice(notice)
    assert orjson.loads(payload)["v"] == NOTICE_VERSION
    assert decode_notice(payload) == notice
    assert CHANNEL.endswith(f"_v{NOTICE_VERSION}")


def test_other_versions_are_unreadable_and_non_notices_are_nothing() -> None:
    newer = {"v": NOTICE_VERSION + 1, "s": "s1", "r": "b", "t": TOPIC, "k": ["run-1"]}
    assert decode_notice(orjson.dumps(newer).decode()) == Unreadable(NOTICE_VERSION + 1, "s1", "b")
    # The format before notices had a version: the same fields, no "v".
    unversioned = {"s": "s1", "r": "b", "t": TOPIC, "c": "run-1"}
    assert decode_notice(orjson.dumps(unversioned).decode()) == Unreadable(None, "s1", "b")
    # This version's, malformed: not guessed at either.
    broken = {"v": NOTICE_VERSION, "s": "s1", "r": "b", "t": TOPIC, "c": 7}
    assert decode_notice(orjson.dumps(broken).decode()) == Unreadable(NOTICE_VERSION, "s1", "b")
    for junk in ("", "not json", "[1, 2]", '"text"', "{"):
        assert decode_notice(junk) is None


@pytest.fixture
async def heard(pg_url: str) -> AsyncIterator[list[str | None]]:
    """What replica ``a``'s handler of :data:`TOPIC` heard (None: look everything up)."""
    notices = PgNotices(pg_url, "a", poll=POLL_SECONDS)
    refs: list[str | None] = []

    async def handler(ref: str | None) -> None:
        refs.append(ref)

    await notices.subscribe(TOPIC, handler)
    await notices.start()
    try:
        await until(lambda: notices.listening or None)
        await until(lambda: refs or None)  # listening: the first look-up
        refs.clear()
        yield refs
    finally:
        await notices.stop()


async def notify(url: str, *payloads: str) -> None:
    """NOTIFY each of ``payloads`` in one transaction: the listener gets them together, in
    order."""
    calls = ", ".join("pg_notify(%s, %s)" for _ in payloads)
    await sql(url, f"SELECT {calls}", *(a for p in payloads for a in (CHANNEL, p)))


@pytest.mark.postgres
async def test_an_unreadable_notice_makes_the_listener_look_again_and_go_on(
    pg_url: str, heard: list[str | None]
) -> None:
    ((schema,),) = await sql(pg_url, "SELECT current_schema()")
    newer = {"v": NOTICE_VERSION + 1, "s": schema, "r": "b", "t": TOPIC, "refs": ["run-1"]}
    await notify(
        pg_url,
        *[orjson.dumps(newer).decode()] * 3,  # a burst of them: one look-up for all
        "not json",  # nothing a replica sent: ignored
        encode_notice(Notice(schema, "b", TOPIC, "run-2")),
    )
    await until(lambda: len(heard) >= 2 or None)
    assert heard == ["run-2", None]

    # Another cluster's notice (another schema) and this replica's own are no business of
    # its handlers, whatever their version; a readable one after them still arrives.
    other = {**newer, "s": f"{schema}_other"}
    await notify(
        pg_url,
        orjson.dumps(other).decode(),
        encode_notice(Notice(f"{schema}_other", "b", TOPIC, "run-3")),
        orjson.dumps({**newer, "r": "a"}).decode(),
        encode_notice(Notice(schema, "b", TOPIC, "run-4")),
    )
    await until(lambda: len(heard) >= 3 or None)
    await asyncio.sleep(2 * POLL_SECONDS)  # a look-up those caused would come by now
    assert heard == ["run-2", None, "run-4"]
