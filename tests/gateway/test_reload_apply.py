"""What a reload (SIGHUP) changes in a running gateway: the model's provider for the next
turns, and the archive delay at once (turning auto-archive on schedules finished runs)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from gateway.subagents import SpawnRequest
from tests.gateway.harness import (
    HANG_GUARD_SECONDS,
    TEST_SCRIPT,
    Harness,
    base_config,
    merge,
    running_gateway,
)


def reload_with(gw: Harness, tmp_path: Path, change: dict[str, Any]) -> None:
    """Write the running config plus ``change`` to a file and reload from it."""
    data = merge(
        merge(
            base_config(tmp_path / "state", tmp_path / "script.json5"),
            {"gateway": {"shutdownDrainSeconds": 0}},
        ),
        change,
    )
    path = tmp_path / "reloaded.json"
    path.write_bytes(orjson.dumps(data))
    gw.holder.path = str(path)
    gw.holder.environ = {}
    assert gw.holder.reload()


async def test_turning_auto_archive_on_schedules_runs_that_finished_while_it_was_off(
    tmp_path: Path,
) -> None:
    off = {"agent": {"subagents": {"archiveAfterMinutes": 0}}}
    async with running_gateway(tmp_path, config=off) as gw:
        result = await gw.spawn(await gw.context(), SpawnRequest(task="task: x"))
        await gw.finished(result["runId"])
        child = result["childSessionKey"]
        assert not gw.archive.is_scheduled(child)
        reload_with(gw, tmp_path, {"agent": {"subagents": {"archiveAfterMinutes": 60}}})
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            while not gw.archive.is_scheduled(child):  # noqa: ASYNC110 - no event: a reload task schedules it
                await asyncio.sleep(0.01)
        record = await gw.store.require(child)
        assert record.archive_due_at is not None
        assert not record.archived


async def test_a_reloaded_model_script_answers_the_next_turn(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        await gw.say("hello")
        assert (await gw.reply()).text == "hi there"
        script = tmp_path / "other-script.json5"
        script.write_bytes(orjson.dumps({**TEST_SCRIPT, "rules": [], "default": {"reply": "v2"}}))
        models = {"test": {"script": str(script)}}
        reload_with(gw, tmp_path, {"models": {"providers": models}})
        await gw.say("hello")
        assert (await gw.reply(count=2)).text == "v2"
