"""A running orchestrator on one replica gets the completion of a child that ran on another
(the replica that ended the child cannot tell the orchestrator's turn directly)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.state import RunRecord
from gateway.subagents import COMPLETION_PREFIX
from tests.fakes.openai import openai_server
from tests.gateway.cluster._replicas import eventually, two_replicas
from tests.gateway.harness import HANG_GUARD_SECONDS, Harness, merge
from tests.gateway.subagents.test_nesting import (
    LEAF_RESULT,
    Orchestration,
    completion_ids,
    wire_config,
)

pytestmark = pytest.mark.postgres


async def final(gw: Harness, run_id: str) -> RunRecord:
    """The run once final, wherever it ran (read from the shared database)."""
    found: list[RunRecord] = []

    async def ended() -> bool:
        run = await gw.db.runs.get(run_id)
        found[:] = [run] if run is not None and run.progress.finished else []
        return bool(found)

    await eventually(ended, f"run {run_id} final")
    return found[0]


async def test_an_orchestrator_takes_the_completion_of_a_child_another_replica_ran(
    tmp_path: Path, pg_url: str
) -> None:
    async with openai_server() as fake:
        # One run at a time per replica: the orchestrator holds its replica's place, so its
        # child runs on the other replica.
        config = merge(wire_config(fake), {"agent": {"subagents": {"maxConcurrent": 1}}})
        async with two_replicas(tmp_path, pg_url, config=config) as (a, b):
            answers = Orchestration(fake)
            fake.responder = answers
            await a.say("start")
            assert (await a.reply()).text == "started"
            async with asyncio.timeout(HANG_GUARD_SECONDS):
                await answers.held.wait()
            orchestrator, leaf = await a.db.runs.list(oldest_first=True)
            leaf = await final(a, leaf.run_id)  # while the orchestrator still runs
            assert (
                await a.db.runs.get(orchestrator.run_id) or orchestrator
            ).progress.status == "running"
            answers.gate.set()
            orchestrator = await final(a, orchestrator.run_id)
            # Each replica executed one of the two runs.
            assert [gw.lanes.subagent.stats().submitted for gw in (a, b)] == [1, 1]
            assert orchestrator.progress.result_text == f"orchestrator saw: {LEAF_RESULT}"
            assert COMPLETION_PREFIX in answers.bodies
            assert await completion_ids(a, orchestrator.child_session_key) == [leaf.run_id]
            leaf = await a.db.runs.get(leaf.run_id) or leaf
            assert (leaf.delivery.announce_state, leaf.delivery.state) == ("nested", "delivered")
