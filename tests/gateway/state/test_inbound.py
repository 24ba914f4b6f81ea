"""The inbound table: a recorded message stays until handled, whole; what a process left is
claimed once; in a cluster a survivor takes a dead replica's messages, never a live one's."""

from __future__ import annotations

import asyncio

from channels import InboundMessage, StreamedMessage
from gateway.state import StateDB


def message(text: str, *, thread: str | None = "1700000000.000100") -> InboundMessage:
    return InboundMessage(
        channel="slack",
        account="T1",
        chat_id="C1",
        thread_id=thread,
        sender_id="U1",
        text=text,
        sender_name="Ada",
        message_id="1700000000.000200",
        received_at=1_700_000_000.5,
    )


async def test_a_recorded_message_stays_whole_until_handled(db: StateDB) -> None:
    first = await db.inbound.record(message("one"))
    second = await db.inbound.record(message("two", thread=None))
    pending = await db.inbound.pending()
    assert [r.inbound_id for r in pending] == [first, second]
    assert [r.message for r in pending] == [message("one"), message("two", thread=None)]
    await db.inbound.handled(first)
    assert [r.inbound_id for r in await db.inbound.pending()] == [second]


async def test_one_process_claims_everything_left_once(db: StateDB) -> None:
    ids = [await db.inbound.record(message(f"m{n}")) for n in range(3)]
    claimed = await db.inbound.claim_left(None, None)
    assert [r.inbound_id for r in claimed] == ids
    # Still there until their turns end: a kill meanwhile runs them again.
    assert len(await db.inbound.pending()) == 3


async def test_a_survivor_takes_a_dead_replicas_messages_not_a_live_ones(db: StateDB) -> None:
    for replica, beat in (("dead", 10.0), ("alive", 100.0), ("me", 100.0)):
        await db.replicas.register(replica, host="h", pid=1, now=beat)
    dead = await db.inbound.record(message("from the dead"), replica_id="dead")
    alive = await db.inbound.record(message("from the living"), replica_id="alive")
    mine = await db.inbound.record(message("mine"), replica_id="me")
    taken = await db.inbound.take_over("me", cutoff=50.0)
    assert [r.inbound_id for r in taken] == [dead]
    assert await db.inbound.take_over("other", cutoff=50.0) == []  # now claimed by "me"
    claims = {r.inbound_id: r.claimed_by for r in await db.inbound.pending()}
    assert claims == {dead: "me", alive: "alive", mine: "me"}


async def test_a_restart_under_its_id_claims_its_own_and_the_deads(db: StateDB) -> None:
    await db.replicas.register("me", host="h", pid=1, now=100.0)
    await db.replicas.register("dead", host="h", pid=1, now=10.0)
    await db.replicas.register("alive", host="h", pid=1, now=100.0)
    mine = await db.inbound.record(message("mine"), replica_id="me")
    dead = await db.inbound.record(message("dead"), replica_id="dead")
    await db.inbound.record(message("alive"), replica_id="alive")
    claimed = await db.inbound.claim_left("me", cutoff=50.0)
    assert {r.inbound_id for r in claimed} == {mine, dead}


async def test_two_survivors_at_once_take_each_message_once(db: StateDB) -> None:
    await db.replicas.register("dead", host="h", pid=1, now=10.0)
    for survivor in ("a", "b"):
        await db.replicas.register(survivor, host="h", pid=1, now=100.0)
    ids = {await db.inbound.record(message(f"m{n}"), replica_id="dead") for n in range(5)}
    a, b = await asyncio.gather(
        db.inbound.take_over("a", cutoff=50.0), db.inbound.take_over("b", cutoff=50.0)
    )
    taken = [r.inbound_id for r in a + b]
    assert sorted(taken) == sorted(ids)


async def test_the_streamed_message_is_kept_with_the_message_until_handled(db: StateDB) -> None:
    kept = await db.inbound.record(message("streamed"))
    plain = await db.inbound.record(message("not streamed"))
    await db.inbound.streamed(kept, StreamedMessage("C1", "1700000000.000100", ("1.1",)))
    await db.inbound.streamed(kept, StreamedMessage("C1", None, ("1.1", "1.2")))  # a part more
    claimed = {r.inbound_id: r.streamed for r in await db.inbound.claim_left(None, None)}
    assert claimed == {kept: StreamedMessage("C1", None, ("1.1", "1.2")), plain: None}
    await db.inbound.handled(kept)
    assert [r.streamed for r in await db.inbound.pending()] == [None]
