"""What a restart does with runs and announces another process left behind — with the state
in SQLite and in PostgreSQL (one replica)."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

from gateway.constants import STATE_DB_NAME
from gateway.delivery import UNCERTAIN
from gateway.llm import ChatMessage, ToolCall
from gateway.sessions.transcript import INTERRUPTED_TOOL_RESULT
from gateway.state import OutboxRecord
from gateway.state.postgres import PgStateDB
from gateway.subagents import SpawnRequest
from tests.gateway.harness import TEST_SCRIPT, running_gateway


def fast_slow_script() -> dict[str, Any]:
    """The test script with ``task-slow`` answering at once (the 'new version' after restart)."""
    script = copy.deepcopy(TEST_SCRIPT)
    for rule in script["rules"]:
        if rule["match"].startswith("^task-slow"):
            rule.pop("delaySeconds")
    return script


async def test_a_queued_run_runs_after_a_restart(tmp_path: Path, database_url: str | None) -> None:
    state = tmp_path / "state"
    async with running_gateway(tmp_path, database_url=database_url, state_dir=state) as gw:
        # The backend the parameter names holds the state (no SQLite file beside PostgreSQL).
        assert isinstance(gw.db, PgStateDB) == (database_url is not None)
        gw.lanes.subagent.submit(asyncio.Event().wait)  # never released
        await gw.say("bg task: later")
        run_id = (await gw.reply()).text.split()[-1]
    assert (state / STATE_DB_NAME).exists() == (database_url is None)
    async with running_gateway(tmp_path, database_url=database_url, state_dir=state) as gw:
        run = await gw.finished(run_id)
        assert run.progress.status == "done"
        assert (await gw.delivery(run_id)).state == "delivered"
        (announce,) = await gw.announce()
        assert announce.text.startswith("ANNOUNCE: done: later")


async def test_a_running_run_resumes_from_its_transcript(
    tmp_path: Path, database_url: str | None
) -> None:
    state = tmp_path / "state"
    async with running_gateway(tmp_path, database_url=database_url, state_dir=state) as gw:
        await gw.say("bg task-slow: resumable")
        run_id = (await gw.reply()).text.split()[-1]
        await gw.status(run_id, "running")
        run = await gw.db.runs.get(run_id)
        assert run is not None
        child = await gw.store.require(run.child_session_key)
        # As if the process died in the middle of a tool call.
        call = ToolCall(id="call-1", name="ls", arguments={"path": "."})
        await gw.store.append_message(
            child, ChatMessage(role="assistant", content="", tool_calls=(call,))
        )
    async with running_gateway(
        tmp_path, database_url=database_url, state_dir=state, script=fast_slow_script()
    ) as gw:
        run = await gw.finished(run_id)
        assert run.progress.status == "done"
        contents = await gw.store.read(run.child_session_key)
        tool_results = [r["message"] for r in contents.messages if r["message"]["role"] == "tool"]
        assert [t["content"] for t in tool_results] == [INTERRUPTED_TOOL_RESULT]
        assert any(r.get("event") == "resumed" for r in contents.records if r["type"] == "event")
        (announce,) = await gw.announce()
        assert announce.run_id == run_id


async def test_on_restart_fail_announces_running_runs_as_interrupted(
    tmp_path: Path, database_url: str | None
) -> None:
    state = tmp_path / "state"
    async with running_gateway(tmp_path, database_url=database_url, state_dir=state) as gw:
        await gw.say("bg task-slow: doomed")
        run_id = (await gw.reply()).text.split()[-1]
        await gw.status(run_id, "running")
    config = {"agent": {"subagents": {"onRestart": "fail"}}}
    async with running_gateway(
        tmp_path, database_url=database_url, state_dir=state, config=config
    ) as gw:
        run = await gw.finished(run_id)
        assert run.progress.status == "interrupted"
        (announce,) = await gw.announce()
        assert announce.text.startswith('Sub-agent "bg" was interrupted by a gateway restart')


async def test_pending_announces_are_delivered_and_cut_off_sends_are_not_repeated(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    state = tmp_path / "state"
    async with running_gateway(tmp_path, database_url=database_url, state_dir=state) as gw:
        gw.lanes.subagent.submit(asyncio.Event().wait)  # no run starts here
        ctx = await gw.context("agent:main:memory:channel:c1")
        ids = []
        for _ in range(2):
            result = await gw.spawn(ctx, SpawnRequest(task="task-slow: x"))
            ids.append(result["runId"])
        db = gw.db
        # This process never delivers them: closed before they exist, or its outbox could
        # claim the pending one first (PostgreSQL's outbox polls on its own).
        await gw.outbox.close()
        # Simulate what a crash leaves: one announce queued, one cut off mid-send.
        for run_id, state_name in zip(ids, ("pending", "sending"), strict=True):
            await db.outbox.insert_for_run(
                OutboxRecord(
                    channel="memory",
                    account="default",
                    chat_id="c1",
                    text=f"text {run_id}",
                    created_at=0.0,
                    run_id=run_id,
                    state=state_name,  # type: ignore[arg-type]
                ),
                {"status": "announcing", "outcome": "done", "announce_state": "queued"},
            )
    async with running_gateway(tmp_path, database_url=database_url, state_dir=state) as gw:
        delivered = await gw.delivery(ids[0])
        assert delivered.state == "delivered"
        # The memory chat cannot tell whether the cut-off send arrived: it stays unsent.
        uncertain = await gw.delivery(ids[1])
        assert uncertain.state == "failed"
        assert uncertain.last_error == UNCERTAIN
        cut_off = await gw.db.runs.get(ids[1])
        assert cut_off is not None
        assert (cut_off.delivery.announce_state, cut_off.delivery.announce_error) == (
            "uncertain",
            UNCERTAIN,
        )
        assert [m.text for m in gw.channel.sent if m.kind == "announce"] == [f"text {ids[0]}"]
        for run_id in ids:
            assert (await gw.finished(run_id)).progress.status == "done"
