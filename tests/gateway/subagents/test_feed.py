"""What the origin chat hears of a run: its status, and its place in the tree of runs (the
run that spawned it, its depth, its batch, its session and when it was spawned), so a
surface such as the web chat can draw the tree and open the run's transcript."""

from __future__ import annotations

from pathlib import Path

from channels.memory import MemoryChannel
from gateway.metrics import Metrics
from gateway.state import Origin, SessionRecord, StateDB
from gateway.subagents import RunFeed
from tests.gateway.harness import running_gateway
from tests.gateway.nested import pair_script, record_nested_run, record_run

ORIGIN = Origin(channel="memory", account="default", chat_id="c1", chat_type="channel")


async def test_updates_name_the_run_s_session_spawn_time_depth_and_batch(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, script=pair_script()) as gw:
        await gw.say("pair")
        await gw.wait_sent(lambda m: m.kind == "reply" and m.text.startswith("both"))
        await gw.runs_idle()
        runs = await gw.db.runs.list(oldest_first=True)
        assert len(runs) == 2
        for run in runs:
            done = await gw.channel.wait_update(run.run_id, "done")
            assert (done.session_key, done.created_at) == (
                run.child_session_key,
                run.progress.created_at,
            )
            assert (done.parent_run_id, done.depth) == (None, 1)
            assert done.batch_id is not None
            assert done.batch_id == run.delivery.batch_id
            # What a run card shows: the task, the model and the runtime's ends.
            assert (done.task, done.model) == (run.request.task, run.request.model)
            assert done.model is not None
            assert (done.started_at, done.ended_at) == (
                run.progress.started_at,
                run.progress.ended_at,
            )
            assert done.started_at is not None
            assert done.ended_at is not None
            queued = await gw.channel.wait_update(run.run_id, "queued")
            assert queued.session_key == run.child_session_key
            assert queued.batch_id is None  # spawned before the yield formed the batch
            assert (queued.task, queued.started_at) == (run.request.task, None)


async def test_a_run_spawned_by_a_run_is_published_under_its_parent(db: StateDB) -> None:
    chat = "agent:main:memory:channel:c1"
    await db.sessions.create(
        SessionRecord(
            key=chat,
            session_id="s-chat",
            agent_id="main",
            kind="chat",
            created_at=0,
            updated_at=0,
            origin=ORIGIN,
        )
    )
    lead = await record_run(db, chat, "lead", status="running", origin=ORIGIN)
    child = await record_nested_run(db, lead, "helper", status="running")
    channel = MemoryChannel()
    feed = RunFeed(db.runs, {"memory": channel}, Metrics())
    try:
        await feed.changed(child.run_id)
        update = await channel.wait_update(child.run_id, "running")
    finally:
        await feed.close()
    assert (update.parent_run_id, update.depth) == (lead.run_id, 2)
    assert (update.chat_id, update.name) == ("c1", "helper")
    assert update.session_key == child.child_session_key
