"""The seen_keys table: a key is new once per window, any known key makes a repeat, and
expired rows go."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.state import StateDB
from gateway.state.postgres import PgStateDB
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


@pytest.mark.postgres
async def test_two_replicas_delivering_one_event_at_once_make_one_new_event(
    pg_url: str, tmp_path: Path
) -> None:
    """Two processes on one PostgreSQL database (each its own writer connection): for each
    event, racing sightings from both, exactly one is new (serializable writes, retried)."""
    replicas = [
        await PgStateDB.connect(pg_url, replica_id=name, state_dir=tmp_path) for name in ("a", "b")
    ]
    try:
        events = [f"event:{n}" for n in range(40)]
        answers = await asyncio.gather(
            *(db.seen.first_sighting([event], 60) for event in events for db in replicas)
        )
        news = [answers[2 * n] + answers[2 * n + 1] for n in range(len(events))]
        assert news == [1] * len(events)
    finally:
        for db in replicas:
            await db.close()
