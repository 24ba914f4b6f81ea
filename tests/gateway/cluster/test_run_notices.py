"""Orchestration controls across replicas: a steer given on one replica reaches the run
another executes, and waiting on one replica ends when the run ends on another. Two real
apps on one database and one state directory; the model is the wire-level OpenAI fake
(``tests.gateway.subagents.test_subagents_tool``'s script: a ``tooluser`` child calls a tool
first, so it asks the model twice; each child's calls wait for the test's gate)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest

from gateway.parts.timing import Timing
from tests.fakes.openai import openai_server
from tests.gateway.cluster._replicas import eventually, two_replicas
from tests.gateway.cluster.replicas import backends, terminate
from tests.gateway.cluster.test_notify import connections_refused
from tests.gateway.harness import FAST_TIMING, HANG_GUARD_SECONDS, Harness, fake_model_config
from tests.gateway.subagents.test_subagents_tool import CHAT, Model, call, spawn

pytestmark = pytest.mark.postgres

#: The replicas' slow look for what a lost notice would have said comes only after the hang
#: guard: within these tests only a notice can bring a steer or a run's end across.
NOTICES_ONLY = dataclasses.replace(FAST_TIMING, cluster_poll=HANG_GUARD_SECONDS * 2)
#: Quick LISTEN reconnects (the test that cuts the connection).
QUICK_RECONNECT = dataclasses.replace(FAST_TIMING, cluster_poll=0.3)


async def executing(a: Harness, b: Harness, run_id: str) -> tuple[Harness, Harness]:
    """The replica executing ``run_id`` (in its child phase there), then the other."""
    found: list[Harness] = []

    async def check() -> bool:
        found[:] = [gw for gw in (a, b) if gw.subagents.inbox.accepts(run_id)]
        return bool(found)

    await eventually(check, f"run {run_id} executing on a replica")
    (executor,) = found
    return executor, b if executor is a else a


async def told(executor: Harness, run_id: str) -> None:
    """Wait until the executing replica knows a steer waits for ``run_id``."""

    async def check() -> bool:
        return executor.subagents.inbox.looks_next(run_id)

    await eventually(check, f"replica told of a steer for {run_id}")


async def steered_run(timing: Timing, tmp_path: Path, pg_url: str, *, cut_listen: bool) -> None:
    """A ``tooluser`` run executing on one replica is steered through the other's
    ``subagents`` tool; its second model request holds the steer (and, with ``cut_listen``,
    the executing replica's LISTEN connection is down while the steer is given)."""
    async with (
        openai_server() as fake,
        two_replicas(tmp_path, pg_url, config=fake_model_config(fake), timing=timing) as (a, b),
    ):
        model = fake.responder = Model(fake)
        run_id = await spawn(a, "tooluser")
        await model.arrived("tooluser")  # its first model call is in flight
        executor, other = await executing(a, b, run_id)
        args = {"action": "steer", "runId": run_id, "message": "focus on prices"}
        if cut_listen:
            name = executor.cluster.replica_id if executor.cluster else ""
            with connections_refused():
                assert terminate(name, "listen") == 1

                async def down() -> bool:
                    return backends(name, "listen") == 0

                await eventually(down, "the executing replica's LISTEN connection closed")
                # Given here, on the other replica: no chat turn, which would need new
                # connections; its notice reaches no one on the executing replica.
                control = other.subagents.control
                result = await control.steer(CHAT, run_id, args["message"])
                assert executor.subagents.inbox.looks_next(run_id) is False
        else:
            result = json.loads(await call(other, args))
        assert result == {"status": "steered", "runId": run_id}
        await told(executor, run_id)
        model.gates["tooluser"].set()
        run = await other.finished(run_id)
        second = model.asked["tooluser"][1]["messages"]
        waiting = await other.db.steers.waiting(run_id)
    # After the tool's result, before the next model call; then the child answered it.
    assert [m["role"] for m in second[-3:]] == ["assistant", "tool", "user"]
    assert second[-1]["content"] == "focus on prices"
    assert run.progress.result_text == "result of tooluser; saw: focus on prices"
    assert waiting == []  # taken once, then forgotten


async def test_a_steer_through_one_replica_reaches_the_run_another_executes(
    tmp_path: Path, pg_url: str
) -> None:
    await steered_run(NOTICES_ONLY, tmp_path, pg_url, cut_listen=False)


async def test_a_steer_given_while_the_executing_replica_does_not_listen_still_arrives(
    tmp_path: Path, pg_url: str
) -> None:
    await steered_run(QUICK_RECONNECT, tmp_path, pg_url, cut_listen=True)


async def test_waits_on_one_replica_end_when_the_run_ends_on_another(
    tmp_path: Path, pg_url: str
) -> None:
    async with (
        openai_server() as fake,
        two_replicas(tmp_path, pg_url, config=fake_model_config(fake), timing=NOTICES_ONLY) as (
            a,
            b,
        ),
    ):
        model = fake.responder = Model(fake)
        run_id = await spawn(a, "solo")
        await model.arrived("solo")
        executor, other = await executing(a, b, run_id)
        # The subagents tool's wait (in a chat turn) and the run manager's wait (spawn
        # --wait's, the tests') on the replica that does not execute the run.
        tool_wait = asyncio.create_task(
            call(other, {"action": "wait", "runIds": [run_id], "timeoutSeconds": 25})
        )
        manager_wait = asyncio.create_task(other.runs.wait(run_id))

        async def held() -> bool:
            run = await other.db.runs.get(run_id)
            return run is not None and run.delivery.state == "held"

        await eventually(held, "the wait holds the run")
        model.gates["solo"].set()
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            waited = json.loads(await tool_wait)
            ended = await manager_wait
        assert executor.subagents.inbox.accepts(run_id) is False
    assert ended.progress.status == "done"
    assert waited["pending"] == []
    assert [(c["runId"], c["status"], c["result"]) for c in waited["completed"]] == [
        (run_id, "done", "result of solo")
    ]
