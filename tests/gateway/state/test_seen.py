"""The seen_keys table: a key is new once per window, any known key makes a repeat, and
expired rows go."""

from __future__ import annotations

import asyncio

from gateway.state import StateDB
from tests.gateway.state.conftest import StateTarget


async def test_a_key_is_new_once_until_it_expires(db: StateDB) -> None:
    assert await db.seen.first_sighting(["a"], 10, now=100)
    assert not await db.seen.first_sighting(["a"], 10, now=105)
    # Seen again at 105: remembered until 115, not 110.
    assert not await db.seen.first_sighting(["a"], 10, now=112)
    assert await db.seen.first_sighting(["a"], 10, now=130)


async def test_any_known_key_makes_a_repeat_and_every_key_is_remembered(db: StateDB) -> None:
    assert await db.seen.first_sighting(["event:1", "signature:1"], 60, now=0)
    # A retry: the same event id under a new signature.
    assert not await db.seen.first_sighting(["event:1", "signature:2"], 60, now=1)
    assert not await db.seen.first_sighting(["signature:2"], 60, now=2)
    assert await db.seen.first_sighting(["event:2", "event:2"], 60, now=3)
    assert await db.seen.first_sighting([], 60, now=4)


async def test_expired_rows_are_deleted_as_new_ones_arrive(db: StateDB) -> None:
    for n in range(50):
        await db.seen.first_sighting([f"old:{n}"], 10, now=0)
    assert await db.seen.count() == 50
    await db.seen.first_sighting(["new"], 10, now=11)
    assert await db.seen.count() == 1


async def test_two_deliveries_at_once_make_one_new_event(db: StateDB) -> None:
    answers = await asyncio.gather(*(db.seen.first_sighting(["e"], 60) for _ in range(20)))
    assert sorted(answers) == [False] * 19 + [True]


async def test_keys_survive_reopening(state_target: StateTarget) -> None:
    first = await state_target.open()
    assert await first.seen.first_sighting(["event:1"], 600)
    await first.close()
    second = await state_target.open()
    assert not await second.seen.first_sighting(["event:1"], 600)
