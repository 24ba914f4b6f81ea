"""Controls of sub-agent runs: abort, /stop, chat commands, forbidden spawns, overrides."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from channels import ChannelSendError, OutboundMessage
from gateway.subagents import RunFinishedError, RunNotFoundError, SpawnRequest
from tests.gateway.harness import running_gateway


async def test_aborting_a_queued_run_announces_it_cancelled_and_it_never_starts(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        gate = asyncio.Event()
        blocker = gw.lanes.subagent.submit(gate.wait)
        await gw.say("bg task: never")
        run_id = (await gw.reply()).text.split()[-1]
        await gw.runs.abort(run_id)
        run = await gw.finished(run_id)
        assert run.progress.status == "cancelled"
        assert run.progress.started_at is None
        (announce,) = await gw.announce()
        assert announce.text.startswith('Sub-agent "bg" was cancelled')
        gate.set()
        await blocker
        child = await gw.store.read(run.child_session_key)
        assert not any(r["type"] == "message" for r in child.records)


async def test_aborting_a_running_run_cancels_it(tmp_path: Path, database_url: str | None) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        await gw.say("bg task-slow: x")
        run_id = (await gw.reply()).text.split()[-1]
        await gw.status(run_id, "running")
        await gw.runs.abort(run_id)
        run = await gw.finished(run_id)
        assert run.progress.status == "cancelled"
        assert run.progress.started_at is not None


async def test_abort_errors(tmp_path: Path, database_url: str | None) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        with pytest.raises(RunNotFoundError):
            await gw.runs.abort("no-such-run")
        result = await gw.spawn(await gw.context(), SpawnRequest(task="task: x"))
        await gw.finished(result["runId"])
        with pytest.raises(RunFinishedError):
            await gw.runs.abort(result["runId"])


async def test_spawn_from_a_subagent_session_is_forbidden(
    tmp_path: Path, database_url: str | None
) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        result = await gw.spawn(await gw.context(), SpawnRequest(task="task: x"))
        run = await gw.finished(result["runId"])
        child_ctx = await gw.context(run.child_session_key)
        assert child_ctx.is_subagent
        nested = await gw.spawn(child_ctx, SpawnRequest(task="task: y"))
        assert nested == {
            "status": "forbidden",
            "error": "sessions_spawn is not allowed from sub-agent sessions",
        }


async def test_target_agents_are_checked(tmp_path: Path, database_url: str | None) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        ctx = await gw.context()
        forbidden = await gw.spawn(ctx, SpawnRequest(task="x", agent_id="other"))
        assert forbidden["status"] == "forbidden"
        assert "helper" in forbidden["error"]
        assert "main" in forbidden["error"]
        unknown = await gw.spawn(ctx, SpawnRequest(task="x", agent_id="nobody"))
        assert unknown["status"] == "error"
        assert "nobody" in unknown["error"]
        allowed = await gw.spawn(ctx, SpawnRequest(task="task: h", agent_id="helper"))
        assert allowed["status"] == "accepted"
        assert allowed["childSessionKey"].startswith("agent:helper:subagent:")
        assert (await gw.finished(allowed["runId"])).request.agent_id == "helper"
        assert await gw.db.runs.list(statuses=["queued"]) == []


async def test_model_override_unknown_runs_on_the_default_with_a_warning(
    tmp_path: Path, database_url: str | None
) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        ctx = await gw.context()
        result = await gw.spawn(ctx, SpawnRequest(task="task: x", model="nope/zzz"))
        assert result["status"] == "accepted"
        assert result["modelApplied"] is False
        assert "nope" in result["warning"]
        assert (await gw.finished(result["runId"])).request.model == "test/m1"
        applied = await gw.spawn(ctx, SpawnRequest(task="task: x", model="test/m2"))
        assert applied["modelApplied"] is True
        assert "warning" not in applied
        run = await gw.finished(applied["runId"])
        assert run.request.model == "test/m2"
        child = await gw.store.read(run.child_session_key)
        models = {
            r["message"].get("model") for r in child.messages if r["message"]["role"] == "assistant"
        }
        assert models == {"m2"}
        assert run.progress.cost_usd is None
        assert run.delivery.announce_text is not None
        assert "est $" not in run.delivery.announce_text  # m2 has no price


async def test_chat_commands(tmp_path: Path, database_url: str | None) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:

        async def notices(count: int) -> list[OutboundMessage]:
            return await gw.wait_sent(lambda m: m.kind == "notice", count)

        await gw.say("/spawn task: via command")
        (started,) = await notices(1)
        match = re.fullmatch(r"Started sub-agent run ([0-9a-f]{8}); .*", started.text)
        assert match, started.text
        runs = await gw.db.runs.list()
        run = await gw.finished(runs[0].run_id)
        await gw.say("/subagents list")
        listing = (await notices(2))[-1]
        assert match.group(1) in listing.text
        assert "done" in listing.text
        await gw.say(f"/subagents info {match.group(1)}")
        info = (await notices(3))[-1]
        assert run.run_id in info.text
        assert "model test/m1" in info.text
        await gw.say(f"/subagents log {match.group(1)}")
        log = (await notices(4))[-1]
        assert "user: task: via command" in log.text
        await gw.say("/subagents stop zzz")
        assert "matches" in (await notices(5))[-1].text
        await gw.say("/spawn")
        assert (await notices(6))[-1].text == "usage: /spawn <task>"


async def test_stop_cascades_to_the_sessions_subagents(
    tmp_path: Path, database_url: str | None
) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        gate = asyncio.Event()
        blocker = gw.lanes.subagent.submit(gate.wait)
        await gw.say("bg task: a")
        await gw.reply()
        await gw.say("bg task: b")
        await gw.reply(count=2)
        await gw.say("/stop")
        (notice,) = await gw.wait_sent(lambda m: m.kind == "notice")
        assert notice.text.endswith(" 2 sub-agents.")
        for run in await gw.db.runs.list():
            assert (await gw.finished(run.run_id)).progress.status == "cancelled"
        gate.set()
        await blocker


async def test_transient_delivery_failures_are_retried_and_delivered_once(
    tmp_path: Path, database_url: str | None
) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        gate = asyncio.Event()
        blocker = gw.lanes.subagent.submit(gate.wait)
        await gw.say("bg task: retry")
        run_id = (await gw.reply()).text.split()[-1]
        gw.channel.fail_next(
            [
                ChannelSendError("HTTP 500", retryable=True),
                ChannelSendError("rate limited", retryable=True, retry_after=0.01),
            ]
        )
        gate.set()
        await blocker
        delivered = await gw.delivery(run_id)
        assert delivered.state == "delivered"
        assert delivered.attempts == 3
        assert len([m for m in gw.channel.sent if m.kind == "announce"]) == 1


async def test_a_vanished_chat_is_a_permanent_failure_recorded_on_the_run(
    tmp_path: Path, database_url: str | None
) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        await gw.say("bg task: gone", chat_id="doomed")
        run_id = (await gw.reply("doomed")).text.split()[-1]
        gw.channel.vanished.add("doomed")
        item = await gw.delivery(run_id)
        assert item.state == "failed"
        assert item.attempts == 1
        run = await gw.db.runs.get(run_id)
        assert run is not None
        assert run.delivery.announce_state == "failed"
        assert run.delivery.announce_error == "chat doomed not found"
        assert run.progress.status == "done"


async def test_cleanup_delete_archives_the_child_after_the_announce(
    tmp_path: Path, database_url: str | None
) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        result = await gw.spawn(await gw.context(), SpawnRequest(task="task: x", cleanup="delete"))
        run = await gw.finished(result["runId"])
        child = await gw.store.require(run.child_session_key)
        assert child.archived
        assert child.archived_path is not None
        assert re.search(
            r"\.jsonl\.deleted\.\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}Z$", child.archived_path
        )
        assert Path(child.archived_path).exists()
        assert not Path(run.progress.transcript_path or "").exists()
        listed = await gw.store.list(include_subagents=True)
        assert child.key not in {s.key for s in listed}


async def test_without_cleanup_the_child_is_scheduled_for_archive(
    tmp_path: Path, database_url: str | None
) -> None:
    async with running_gateway(tmp_path, database_url=database_url) as gw:
        result = await gw.spawn(await gw.context(), SpawnRequest(task="task: x"))
        run = await gw.finished(result["runId"])
        child = await gw.store.require(run.child_session_key)
        assert child.archive_due_at == pytest.approx(run.progress.created_at + 3600)
        assert gw.archive.is_scheduled(child.key)
