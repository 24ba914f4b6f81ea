"""Replica liveness: each replica's row in ``replicas``, its heartbeat, its clean stop."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.gateway.cluster._replicas import eventually, replica
from tests.gateway.harness import FAST_TIMING

pytestmark = pytest.mark.postgres


async def test_a_replica_beats_while_it_runs_and_is_marked_stopped_at_a_clean_stop(
    tmp_path: Path, pg_url: str
) -> None:
    async with replica(tmp_path, pg_url, "r1") as gw:
        (first,) = await gw.db.replicas.list()
        assert (first.replica_id, first.stopped_at) == ("r1", None)

        async def moved() -> bool:
            (now,) = await gw.db.replicas.list()
            return now.heartbeat_at > first.heartbeat_at

        await eventually(moved, "the heartbeat moved on")
        assert gw.cluster is not None
        assert first.alive(gw.cluster.heartbeat.cutoff())
    # Stopped: marked so, dead to every peer at once.
    async with replica(tmp_path, pg_url, "r2") as other:
        rows = await other.db.replicas.list()
    by_id = {row.replica_id: row for row in rows}
    assert by_id["r1"].stopped_at is not None
    assert not by_id["r1"].alive(time.time() - FAST_TIMING.replica_dead_seconds)


async def test_a_silent_replica_is_dead_after_the_cut_off(tmp_path: Path, pg_url: str) -> None:
    async with replica(tmp_path, pg_url, "r1") as gw:
        assert gw.cluster is not None
        silent_since = time.time() - FAST_TIMING.replica_dead_seconds - 1
        await gw.db.replicas.register("ghost", host="h", pid=1, now=silent_since)
        rows = {row.replica_id: row for row in await gw.db.replicas.list()}
        cutoff = gw.cluster.heartbeat.cutoff()
        assert rows["r1"].alive(cutoff)
        assert not rows["ghost"].alive(cutoff)
