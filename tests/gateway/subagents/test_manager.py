"""RunManager: abort is idempotent under concurrency, and settles a run exactly once.

However many aborts (API, ``/stop``, cascades) land on one run at once, exactly one stops
it; the rest are told it is already stopping or finished. The run ends ``cancelled`` with
one announce. An abort that lands once the run has left its child phase (it is recording
its end, or announcing) stops nothing and the run finishes as it would have.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any

from gateway.state import Origin, RunRecord
from gateway.subagents import RunFinishedError, SpawnRequest
from gateway.tools import ToolContext
from tests.fakes.openai import HeldReplies, last_user_text, openai_server
from tests.gateway.harness import (
    HANG_GUARD_SECONDS,
    Harness,
    fake_model_config,
    running_gateway,
)

CHAT_KEY = "agent:main:memory:channel:c1"
ORIGIN = Origin(channel="memory", account="default", chat_id="c1", chat_type="channel")
ABORTS = 50


def split(results: Sequence[object]) -> tuple[list[RunRecord], list[RunFinishedError]]:
    """The aborts that stopped the run and those refused; anything else fails the test."""
    won = [r for r in results if isinstance(r, RunRecord)]
    refused = [r for r in results if isinstance(r, RunFinishedError)]
    assert len(won) + len(refused) == len(results), results
    return won, refused


async def together(calls: Sequence[Awaitable[Any]]) -> list[object]:
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        return list(await asyncio.gather(*calls, return_exceptions=True))


async def announces_of(gw: Harness, run_id: str) -> list[str]:
    """What the chat was sent for ``run_id``, once its delivery settled."""
    assert (await gw.delivery(run_id)).state == "delivered"
    return [m.text for m in gw.channel.sent if m.kind == "announce" and m.run_id == run_id]


async def announce_events(gw: Harness, run: RunRecord) -> int:
    records = (await gw.store.read(run.child_session_key)).records
    return sum(1 for r in records if r.get("type") == "event" and r.get("event") == "announce")


async def chat_context(gw: Harness) -> ToolContext:
    """The tool context of chat ``c1``'s session, made as the router makes it."""
    session = await gw.store.ensure(CHAT_KEY, origin=ORIGIN)
    return gw.contexts.for_session(session)


async def spawn_from_chat(gw: Harness, text: str) -> str:
    """A run spawned by the agent of chat ``c1`` (scripted ``bg <task>``); its id."""
    await gw.say(f"bg {text}")
    replies = await gw.wait_sent(lambda m: m.kind == "reply" and m.text.startswith("accepted"))
    return replies[-1].text.split()[-1]


async def test_fifty_concurrent_aborts_of_a_running_run_stop_it_once(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        run_id = await spawn_from_chat(gw, "task-slow: x")
        await gw.status(run_id, "running")
        won, refused = split(await together([gw.runs.abort(run_id) for _ in range(ABORTS)]))
        run = await gw.finished(run_id)
        texts = await announces_of(gw, run_id)
        events = await announce_events(gw, run)
        # The others were told it is stopping, or (reading it later) that it has ended.
        assert (len(won), len(refused)) == (1, ABORTS - 1)
        assert run.progress.status == "cancelled"
        assert run.progress.started_at is not None
        assert len(texts) == 1
        assert texts[0].startswith('Sub-agent "bg" was cancelled after ')
        assert events == 1
        later, _ = split(await together([gw.runs.abort(run_id)]))
        assert later == []


async def test_fifty_concurrent_aborts_of_a_queued_run_stop_it_once(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        gate = asyncio.Event()
        blocker = gw.lanes.subagent.submit(gate.wait)
        run_id = await spawn_from_chat(gw, "task: never")
        won, refused = split(await together([gw.runs.abort(run_id) for _ in range(ABORTS)]))
        run = await gw.finished(run_id)
        texts = await announces_of(gw, run_id)
        gate.set()
        await blocker
        await gw.lanes.subagent.join()
        assert (len(won), len(refused)) == (1, ABORTS - 1)
        assert (run.progress.status, run.progress.started_at) == ("cancelled", None)
        assert len(texts) == 1
        assert texts[0].startswith('Sub-agent "bg" was cancelled')
        assert await announce_events(gw, run) == 1
        after = await gw.db.runs.get(run_id)  # the lane freed: it still never started
        assert after is not None
        assert (after.progress.status, after.progress.started_at) == ("cancelled", None)


async def test_stop_session_racing_aborts_stops_each_run_once(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        run_id = await spawn_from_chat(gw, "task-slow: x")
        await gw.status(run_id, "running")
        calls: list[Awaitable[Any]] = []
        for _ in range(ABORTS // 2):
            calls += [gw.runs.stop_session(CHAT_KEY), gw.runs.abort(run_id)]
        results = await together(calls)
        stops = [r for r in results if isinstance(r, int)]
        won, _ = split([r for r in results if not isinstance(r, int)])
        run = await gw.finished(run_id)
        texts = await announces_of(gw, run_id)
        assert sum(stops) + len(won) == 1, results
        assert run.progress.status == "cancelled"
        assert len(texts) == 1
        assert await announce_events(gw, run) == 1


def announcing(body: Any) -> bool:
    return last_user_text(body).startswith("[announce]")


def scripted_run(body: Any) -> str:
    return "the announce" if announcing(body) else f"worked on {last_user_text(body)}"


async def test_aborts_while_the_run_announces_stop_nothing_and_it_finishes(
    tmp_path: Path,
) -> None:
    async with openai_server() as model:
        held = HeldReplies(model, scripted_run, held=announcing)
        model.responder = held
        async with running_gateway(tmp_path, config=fake_model_config(model)) as gw:
            ctx = await chat_context(gw)
            spawned = await gw.spawn(ctx, SpawnRequest(task="job", label="job"))
            run_id = spawned["runId"]
            async with asyncio.timeout(HANG_GUARD_SECONDS):
                await held.arrived(2)  # the run's turn, then its announce turn (held)
            before = await gw.db.runs.get(run_id)
            won, refused = split(await together([gw.runs.abort(run_id) for _ in range(ABORTS)]))
            held.gate.set()
            run = await gw.finished(run_id)
            texts = await announces_of(gw, run_id)
            events = await announce_events(gw, run)
    assert before is not None
    assert before.progress.status == "announcing"
    assert (len(won), len(refused)) == (0, ABORTS)
    assert (run.progress.status, run.progress.result_text) == ("done", "worked on job")
    assert len(texts) == 1
    assert texts[0].startswith("the announce\n\nStats: ")
    assert events == 1


async def test_aborts_after_the_child_phase_before_announcing_is_recorded_stop_nothing(
    tmp_path: Path,
) -> None:
    """The window where the runner has left its child phase but the database still says
    ``running``: held open by keeping the database's writer busy, so the runner waits on
    its write of ``announcing`` while the aborts read ``running``. The runner says it is
    executing the run and no longer cancellable; nothing may cancel its status write."""
    async with openai_server() as model:
        # Unpriced and no tokens: the child saves no usage, so its phase ends without a write.
        held = HeldReplies(
            model,
            scripted_run,
            held=lambda body: not announcing(body),
            prompt_tokens=0,
            completion_tokens=0,
        )
        model.responder = held
        unpriced = {"models": {"providers": {"fake": {"models": [{"id": "gpt-4o-mini"}]}}}}
        async with running_gateway(tmp_path, config=fake_model_config(model, unpriced)) as gw:
            ctx = await chat_context(gw)
            spawned = await gw.spawn(ctx, SpawnRequest(task="job", label="job"))
            run_id, child_key = spawned["runId"], spawned["childSessionKey"]
            async with asyncio.timeout(HANG_GUARD_SECONDS):
                await held.arrived(1)
            release = threading.Event()
            writer_busy = asyncio.ensure_future(gw.db.write(lambda conn: release.wait()))
            try:
                await asyncio.sleep(0)  # the busy write is the writer's next job
                held.gate.set()
                await transcript_has(gw, child_key, "worked on job")
                for _ in range(50):  # the runner's few steps from its transcript to its write
                    await asyncio.sleep(0)
                before = await gw.db.runs.get(run_id)
                won, refused = split(await together([gw.runs.abort(run_id) for _ in range(ABORTS)]))
            finally:
                release.set()
                await writer_busy
            run = await gw.finished(run_id)
            texts = await announces_of(gw, run_id)
            events = await announce_events(gw, run)
    assert before is not None
    assert before.progress.status == "running"
    assert (len(won), len(refused)) == (0, ABORTS)
    assert all(e.stopping for e in refused)
    assert (run.progress.status, run.progress.result_text) == ("done", "worked on job")
    assert len(texts) == 1
    assert texts[0].startswith("the announce\n\nStats: ")
    assert events == 1


async def transcript_has(gw: Harness, key: str, text: str) -> None:
    """Wait until an assistant line with ``text`` is in ``key``'s transcript."""

    async def seen() -> bool:
        records = (await gw.store.read(key)).records
        return any(
            (r.get("message") or {}).get("role") == "assistant"
            and (r.get("message") or {}).get("content") == text
            for r in records
        )

    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while not await seen():  # each look reads the file: no busy loop
            pass
