"""The ``subagents`` tool: list, wait, cancel (cascading) and steer a session's runs.

The model is the wire-level OpenAI fake. A person's ``spawn <name>`` makes the agent spawn a
child on ``job <name>``; ``call <json>`` makes it call ``subagents`` with those arguments,
and its reply quotes the tool's result (``tool: …``) — so each test reads what the model
was given. A child's model calls wait on a gate the test opens, so each test decides when a
child runs and ends.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from gateway.constants import STATE_DB_NAME
from gateway.sessions import SessionKey, read_transcript
from gateway.state import RunRecord, SqliteStateDB
from gateway.state.rows import origin_columns
from gateway.subagents import COMPLETION_PREFIX
from gateway.tools import ToolArgumentsError
from tests.fakes.openai import FakeOpenAI, last_user_text, openai_server
from tests.fakes.provider_server import Step
from tests.gateway.daemon_process import free_port, herald, webchat_page, write_config
from tests.gateway.harness import (
    HANG_GUARD_SECONDS,
    Harness,
    api_app,
    fake_model_config,
    running_gateway,
)
from tests.gateway.state.records import run_record

CHAT = "agent:main:memory:channel:c1"
#: Several children at once, so a run and the run under it both run.
WIDE = {"agent": {"subagents": {"maxConcurrent": 4}}}


class Model:
    """The fake's answers by request content (module docstring); ``gates[name]`` holds
    child ``name``'s model calls until set, ``asked[name]`` are its requests so far."""

    def __init__(self, fake: FakeOpenAI) -> None:
        self.fake = fake
        self.gates: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.asked: dict[str, list[Any]] = defaultdict(list)
        self._came = asyncio.Condition()
        self._notes: set[asyncio.Future[None]] = set()

    def __call__(self, body: Any) -> Step:
        users = [m for m in body["messages"] if m["role"] == "user"]
        first = str(users[0]["content"]) if users else ""
        if first.startswith("job "):
            return self._child(first.removeprefix("job "), body)
        return self._person(body)

    def _person(self, body: Any) -> Step:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return self.fake.text_step(f"tool: {last['content']}")
        text = last_user_text(body)
        if text.startswith("spawn "):
            name = text.removeprefix("spawn ")
            return self._calls(("sessions_spawn", {"task": f"job {name}", "label": name}))
        if text.startswith("call "):
            return self._calls(("subagents", json.loads(text.removeprefix("call "))))
        return self.fake.text_step(f"echo {text}")

    def _child(self, name: str, body: Any) -> Step:
        gate = self.gates[name]
        latest = last_user_text(body)
        if latest.startswith("[announce]"):
            return self.fake.text_step(f"announced {name}")
        self.asked[name].append(body)
        note = asyncio.ensure_future(self._note())  # the responder is sync; waiters are not
        self._notes.add(note)
        note.add_done_callback(self._notes.discard)
        messages = body["messages"]
        if name.startswith("tooluser") and not any(m["role"] == "tool" for m in messages):
            return self._calls(("ls", {}), hold=gate)
        seen = "" if latest == f"job {name}" else f"; saw: {latest}"
        return self.fake.text_step(f"result of {name}{seen}", hold=gate)

    def _calls(self, *calls: tuple[str, Any], hold: asyncio.Event | None = None) -> Step:
        listed = [(f"call-{uuid.uuid4().hex[:8]}", name, args) for name, args in calls]
        body = orjson.dumps(self.fake.completion(content=None, tool_calls=listed))
        return Step(body=body, hold=hold)

    async def _note(self) -> None:
        async with self._came:
            self._came.notify_all()

    async def arrived(self, name: str, count: int = 1) -> None:
        """Wait until child ``name`` has asked the model ``count`` times."""
        async with asyncio.timeout(HANG_GUARD_SECONDS), self._came:
            await self._came.wait_for(lambda: len(self.asked[name]) >= count)


async def ask(gw: Harness, text: str, chat: str = "c1") -> str:
    """Say ``text`` in ``chat``; the agent's reply."""
    before = sum(1 for m in gw.channel.sent if m.kind == "reply" and m.chat_id == chat)
    await gw.say(text, chat_id=chat)
    return (await gw.reply(chat, count=before + 1)).text


async def call(gw: Harness, args: dict[str, Any], chat: str = "c1") -> str:
    """The ``subagents`` tool's result for ``args``, as the model was given it."""
    text = await ask(gw, "call " + json.dumps(args), chat)
    assert text.startswith("tool: "), text
    return text.removeprefix("tool: ")


async def spawn(gw: Harness, name: str, chat: str = "c1") -> str:
    text = await ask(gw, f"spawn {name}", chat)
    result = json.loads(text.removeprefix("tool: "))
    assert result["status"] == "accepted", result
    return str(result["runId"])


async def run_of(gw: Harness, run_id: str) -> RunRecord:
    run = await gw.db.runs.get(run_id)
    assert run is not None
    return run


async def until(check: Callable[[], Awaitable[bool]]) -> None:
    """Wait until ``check`` holds (each look reads the database: no busy loop)."""
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while not await check():
            pass


async def held(gw: Harness, run_id: str) -> None:
    """Wait until a ``wait`` holds ``run_id``."""

    async def check() -> bool:
        return (await run_of(gw, run_id)).delivery.state == "held"

    await until(check)


async def nested_run(gw: Harness, parent_id: str, name: str) -> str:
    """A run spawned by run ``parent_id``'s session, recorded as a nested spawn records it
    (``parent_run_id``, depth 2), queued on the lane; its id."""
    parent = await run_of(gw, parent_id)
    child = await gw.store.ensure(
        SessionKey.subagent("main"),
        parent_key=parent.child_session_key,
        label=name,
        model=parent.request.model,
        origin=parent.request.origin,
        fresh=True,
    )
    run = run_record(
        child,
        task=f"job {name}",
        created_at=time.time(),
        parent_session_key=parent.child_session_key,
        label=name,
        model=parent.request.model,
        **origin_columns(parent.request.origin),
        transcript_path=str(gw.store.transcript_path(child)),
        parent_run_id=parent_id,
        depth=2,
    )
    await gw.db.runs.insert(run)
    gw.runs.submit(run.run_id)
    return run.run_id


def announces(gw: Harness, run_id: str) -> list[str]:
    return [m.text for m in gw.channel.sent if m.kind == "announce" and m.run_id == run_id]


async def completion_lines(gw: Harness, key: str) -> list[dict[str, Any]]:
    records = read_transcript(gw.store.transcript_path(await gw.store.require(key))).records
    return [r for r in records if (r.get("meta") or {}).get("kind") == "subagent_completion"]


# -- list --------------------------------------------------------------------------------


async def test_list_shows_this_sessions_runs_newest_first(
    tmp_path: Path, database_url: str | None
) -> None:
    async with (
        openai_server() as fake,
        running_gateway(
            tmp_path, database_url=database_url, config=fake_model_config(fake, WIDE)
        ) as gw,
    ):
        model = fake.responder = Model(fake)
        first = await spawn(gw, "alpha")
        second = await spawn(gw, "beta")
        await spawn(gw, "theirs", chat="c2")
        await model.arrived("alpha")
        model.gates["alpha"].set()
        await gw.finished(first)
        await model.arrived("beta")
        listed = json.loads(await call(gw, {"action": "list"}))["runs"]
        first_run, second_run = [await run_of(gw, i) for i in (first, second)]
    assert [r["runId"] for r in listed] == [second, first]  # not chat c2's run
    beta, alpha = listed
    assert set(alpha) == {"runId", "label", "status", "runtime", "childSessionKey", "depth"}
    assert (alpha["label"], alpha["status"], alpha["depth"]) == ("alpha", "done", 1)
    assert alpha["runtime"].endswith("s")
    assert alpha["childSessionKey"] == first_run.child_session_key
    assert (beta["label"], beta["status"], beta["depth"]) == ("beta", "running", 1)
    assert beta["childSessionKey"] == second_run.child_session_key


async def test_list_shows_at_most_fifty_runs(tmp_path: Path, database_url: str | None) -> None:
    many = {"agent": {"subagents": {"maxChildrenPerSession": 60}}}
    async with (
        openai_server() as fake,
        running_gateway(
            tmp_path, database_url=database_url, config=fake_model_config(fake, many)
        ) as gw,
    ):
        fake.responder = Model(fake)
        gate = asyncio.Event()
        blocker = gw.lanes.subagent.submit(gate.wait)  # every run stays queued
        ids = [await spawn(gw, f"n{i}") for i in range(51)]
        listed = json.loads(await call(gw, {"action": "list"}))["runs"]
        gate.set()
        await blocker
    assert [r["runId"] for r in listed] == ids[::-1][:50]
    assert listed[0]["runtime"] == "n/a"  # never started


# -- wait ----------------------------------------------------------------------------------


async def test_wait_returns_the_result_and_the_run_posts_nothing_nor_reaches_history_later(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    async with (
        openai_server() as fake,
        running_gateway(tmp_path, database_url=database_url, config=fake_model_config(fake)) as gw,
    ):
        model = fake.responder = Model(fake)
        run_id = await spawn(gw, "alpha")
        waiting = asyncio.ensure_future(
            call(gw, {"action": "wait", "runIds": [run_id], "timeoutSeconds": 60})
        )
        await held(gw, run_id)  # the wait began while the child still works
        model.gates["alpha"].set()
        result = json.loads(await waiting)
        await gw.runs_idle()
        await gw.outbox.flush(5)
        run = await run_of(gw, run_id)
        # The next turn's request holds no completion of the run: the wait had it.
        assert await ask(gw, "anything new?") == "echo anything new?"
        request = fake.requests[-1].body
        lines = await completion_lines(gw, CHAT)
    assert result == {
        "completed": [
            {
                "runId": run_id,
                "label": "alpha",
                "status": "done",
                "childSessionKey": run.child_session_key,
                "result": "result of alpha",
            }
        ],
        "pending": [],
    }
    assert announces(gw, run_id) == []
    assert (run.progress.status, run.delivery.announce_state, run.delivery.state) == (
        "done",
        "consumed",
        "consumed",
    )
    users = [m["content"] for m in request["messages"] if m["role"] == "user"]
    assert not [u for u in users if u.startswith(COMPLETION_PREFIX)]
    assert lines == []


async def test_a_wait_that_times_out_returns_pending_and_the_run_announces_later(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    async with (
        openai_server() as fake,
        running_gateway(tmp_path, database_url=database_url, config=fake_model_config(fake)) as gw,
    ):
        model = fake.responder = Model(fake)
        run_id = await spawn(gw, "alpha")
        await model.arrived("alpha")
        result = json.loads(
            await call(gw, {"action": "wait", "runIds": [run_id], "timeoutSeconds": 0})
        )
        released = await run_of(gw, run_id)
        model.gates["alpha"].set()
        (announce,) = await gw.announce()
        await gw.runs_idle()
        run = await run_of(gw, run_id)
        lines = await completion_lines(gw, CHAT)
    assert result == {"completed": [], "pending": [run_id]}
    assert released.delivery.state != "held"
    assert announce.run_id == run_id
    assert announce.text.startswith("announced alpha\n\nStats: ")
    assert run.delivery.state == "delivered"  # into the conversation, as with no wait
    assert [line["meta"]["runId"] for line in lines] == [run_id]


async def test_a_wait_on_a_run_whose_result_is_in_history_does_not_give_it_again(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    async with (
        openai_server() as fake,
        running_gateway(tmp_path, database_url=database_url, config=fake_model_config(fake)) as gw,
    ):
        model = fake.responder = Model(fake)
        model.gates["alpha"].set()
        run_id = await spawn(gw, "alpha")
        await gw.finished(run_id)
        await gw.runs_idle()  # its completion is written into the conversation
        again = json.loads(await call(gw, {"action": "wait", "runIds": [run_id]}))
        lines = await completion_lines(gw, CHAT)
    assert [line["meta"]["runId"] for line in lines] == [run_id]
    (entry,) = again["completed"]
    assert entry["note"] == "its result was given to you earlier"
    assert "result" not in entry
    assert again["pending"] == []


async def test_wait_refuses_other_sessions_runs_unknown_ids_and_bad_bounds(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    async with (
        openai_server() as fake,
        running_gateway(
            tmp_path, database_url=database_url, config=fake_model_config(fake, WIDE)
        ) as gw,
    ):
        fake.responder = Model(fake)
        mine = await spawn(gw, "mine")
        theirs = await spawn(gw, "theirs", chat="c2")
        refused = await call(gw, {"action": "wait", "runIds": [mine, theirs, "no-such-run"]})
        only_theirs = await call(gw, {"action": "wait", "runIds": [theirs]})
        too_many = await call(gw, {"action": "wait", "runIds": [mine] * 33})
        too_long = await call(gw, {"action": "wait", "runIds": [mine], "timeoutSeconds": 61})
        no_ids = await call(gw, {"action": "wait"})
        held_after = [(await run_of(gw, i)).delivery.state == "held" for i in (mine, theirs)]
        with pytest.raises(ToolArgumentsError) as through_api:
            await gw.invoker.invoke(
                SessionKey.parse(CHAT), "subagents", {"action": "wait", "runIds": [mine] * 33}
            )
    assert refused == (
        f"subagents: unknown run id(s): {theirs}, no-such-run "
        "(not runs this session spawned; see subagents list)"
    )
    assert only_theirs.startswith(f"subagents: unknown run id(s): {theirs} ")
    assert held_after == [False, False]  # a refused wait holds nothing
    assert too_many.startswith("invalid arguments for subagents: args.runIds: ")
    assert "at most 32" in too_many
    assert too_long.startswith("invalid arguments for subagents: args.timeoutSeconds: ")
    assert "60" in too_long
    assert (
        no_ids == "invalid arguments for subagents: args: Value error, action 'wait' needs runIds"
    )
    assert through_api.value.path == "args.runIds"


# -- steer ---------------------------------------------------------------------------------


async def test_steer_reaches_the_running_child_before_its_next_model_call(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    async with (
        openai_server() as fake,
        running_gateway(tmp_path, database_url=database_url, config=fake_model_config(fake)) as gw,
    ):
        model = fake.responder = Model(fake)
        run_id = await spawn(gw, "tooluser")
        await model.arrived("tooluser")  # its first model call is in flight
        steered = json.loads(
            await call(gw, {"action": "steer", "runId": run_id, "message": "focus on prices"})
        )
        model.gates["tooluser"].set()
        run = await gw.finished(run_id)
        second = model.asked["tooluser"][1]["messages"]
        after = await call(gw, {"action": "steer", "runId": run_id, "message": "more"})
        child = await gw.store.require(run.child_session_key)
        records = read_transcript(gw.store.transcript_path(child)).records
    assert steered == {"status": "steered", "runId": run_id}
    # After the tool's result, before the next model call; then the child answered it.
    assert [m["role"] for m in second[-3:]] == ["assistant", "tool", "user"]
    assert second[-1]["content"] == "focus on prices"
    assert run.progress.result_text == "result of tooluser; saw: focus on prices"
    steers = [r for r in records if (r.get("meta") or {}).get("kind") == "steer"]
    assert [(r["message"]["role"], r["message"]["content"]) for r in steers] == [
        ("user", "focus on prices")
    ]
    assert set(steers[0]["meta"]) == {"kind", "steerId"}  # the id: written once, after a stop too
    assert isinstance(steers[0]["meta"]["steerId"], int)
    assert after == (f"subagents: run {run_id} is done, not running: only a running run is steered")


async def test_a_steer_the_run_had_not_read_when_the_gateway_stopped_reaches_it_after(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    state = tmp_path / "state"
    async with (
        openai_server() as fake,
        running_gateway(
            tmp_path, database_url=database_url, config=fake_model_config(fake), state_dir=state
        ) as gw,
    ):
        model = fake.responder = Model(fake)
        run_id = await spawn(gw, "tooluser")
        await model.arrived("tooluser")  # its first model call is in flight: it stops there
        steered = json.loads(
            await call(gw, {"action": "steer", "runId": run_id, "message": "focus on prices"})
        )
    async with (
        openai_server() as fake,
        running_gateway(
            tmp_path, database_url=database_url, config=fake_model_config(fake), state_dir=state
        ) as gw,
    ):
        model = fake.responder = Model(fake)
        model.gates["tooluser"].set()
        run = await gw.finished(run_id)
        resumed = model.asked["tooluser"][0]["messages"]
        child = await gw.store.require(run.child_session_key)
        records = read_transcript(gw.store.transcript_path(child)).records
    assert steered == {"status": "steered", "runId": run_id}
    # The resumed run's first model call holds it, once.
    assert [(m["role"], m["content"]) for m in resumed[-2:]] == [
        ("user", "job tooluser"),
        ("user", "focus on prices"),
    ]
    assert run.progress.result_text == "result of tooluser; saw: focus on prices"
    steers = [r for r in records if (r.get("meta") or {}).get("kind") == "steer"]
    assert [r["message"]["content"] for r in steers] == ["focus on prices"]


async def test_steer_refuses_a_queued_run_another_sessions_run_and_a_long_message(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    async with (
        openai_server() as fake,
        running_gateway(tmp_path, database_url=database_url, config=fake_model_config(fake)) as gw,
    ):
        model = fake.responder = Model(fake)
        busy = await spawn(gw, "busy")
        queued = await spawn(gw, "later")  # the lane (width 1) is taken by "busy"
        await model.arrived("busy")
        theirs = await spawn(gw, "theirs", chat="c2")
        on_queued = await call(gw, {"action": "steer", "runId": queued, "message": "hi"})
        on_theirs = await call(gw, {"action": "steer", "runId": theirs, "message": "hi"})
        too_long = await call(gw, {"action": "steer", "runId": busy, "message": "x" * 4001})
        no_message = await call(gw, {"action": "steer", "runId": busy})
    assert on_queued == (
        f"subagents: run {queued} is queued, not running: only a running run is steered"
    )
    assert on_theirs.startswith(f"subagents: unknown run id(s): {theirs} ")
    assert too_long.startswith("invalid arguments for subagents: args.message: ")
    assert "4000" in too_long
    assert no_message.endswith("action 'steer' needs message")


# -- cancel --------------------------------------------------------------------------------


async def running_tree(gw: Harness, model: Model, name: str) -> tuple[str, str]:
    """A running run ``name`` and a running run spawned under it; their ids."""
    parent = await spawn(gw, name)
    await model.arrived(name)
    nested = await nested_run(gw, parent, f"{name}-nested")
    await model.arrived(f"{name}-nested")
    return parent, nested


async def test_cancel_stops_a_run_and_every_run_under_it(
    tmp_path: Path, database_url: str | None
) -> None:
    async with (
        openai_server() as fake,
        running_gateway(
            tmp_path, database_url=database_url, config=fake_model_config(fake, WIDE)
        ) as gw,
    ):
        model = fake.responder = Model(fake)
        parent, nested = await running_tree(gw, model, "alpha")
        result = json.loads(await call(gw, {"action": "cancel", "runId": parent}))
        finals = [(await gw.finished(i)).progress.status for i in (parent, nested)]
        again = await call(gw, {"action": "cancel", "runId": parent})
        # "all": every live run of the session, with what runs under it.
        other, other_nested = await running_tree(gw, model, "beta")
        everything = json.loads(await call(gw, {"action": "cancel", "runId": "all"}))
        others = [(await gw.finished(i)).progress.status for i in (other, other_nested)]
    assert result == {"status": "cancelled", "runId": parent, "cancelled": [parent, nested]}
    assert finals == ["cancelled", "cancelled"]
    assert again == f"subagents: run {parent} already finished (cancelled)"
    assert everything == {"status": "cancelled", "cancelled": [other, other_nested]}
    assert others == ["cancelled", "cancelled"]


async def test_stop_in_the_chat_stops_the_runs_under_the_sessions_runs(
    tmp_path: Path, database_url: str | None
) -> None:
    async with (
        openai_server() as fake,
        running_gateway(
            tmp_path, database_url=database_url, config=fake_model_config(fake, WIDE)
        ) as gw,
    ):
        model = fake.responder = Model(fake)
        parent, nested = await running_tree(gw, model, "alpha")
        await gw.say("/stop")
        (answer,) = await gw.wait_sent(lambda m: m.kind == "notice")
        model.gates["alpha-nested"].set()  # had the stop missed it, it would end done
        finals = [(await gw.finished(i)).progress.status for i in (parent, nested)]
    assert answer.text == "Stopped 2 sub-agents."
    assert finals == ["cancelled", "cancelled"]


async def test_the_api_abort_stops_the_runs_under_the_run_once(
    tmp_path: Path, database_url: str | None
) -> None:
    async with (
        openai_server() as fake,
        running_gateway(
            tmp_path, database_url=database_url, config=fake_model_config(fake, WIDE)
        ) as gw,
        TestClient(TestServer(api_app(gw))) as client,
    ):
        model = fake.responder = Model(fake)
        parent, nested = await running_tree(gw, model, "alpha")
        first, second = await asyncio.gather(
            client.post(f"/v1/runs/{parent}/abort"), client.post(f"/v1/runs/{parent}/abort")
        )
        model.gates["alpha-nested"].set()  # had the abort missed it, it would end done
        finals = [(await gw.finished(i)).progress.status for i in (parent, nested)]
        later = await client.post(f"/v1/runs/{nested}/abort")
    assert sorted([first.status, second.status]) == [202, 409]
    assert finals == ["cancelled", "cancelled"]
    assert later.status == 409


# -- restarts ------------------------------------------------------------------------------


async def test_an_announce_held_by_a_wait_a_stop_cut_off_is_posted_after_the_restart(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    state = tmp_path / "state"
    async with (
        openai_server() as fake,
        running_gateway(
            tmp_path, database_url=database_url, config=fake_model_config(fake), state_dir=state
        ) as gw,
    ):
        model = fake.responder = Model(fake)
        run_id = await spawn(gw, "alpha")
        await model.arrived("alpha")
        # What a wait records as it begins; the process then stops before it returns.
        await gw.db.ends.hold([run_id])
        model.gates["alpha"].set()
        await gw.finished(run_id)
        await gw.outbox.flush(5)
        before = await run_of(gw, run_id)
        posted_before = announces(gw, run_id)
    async with (
        openai_server() as fake,
        running_gateway(
            tmp_path, database_url=database_url, config=fake_model_config(fake), state_dir=state
        ) as gw,
    ):
        fake.responder = Model(fake)
        (announce,) = await gw.announce()
        await gw.runs_idle()
        after = await run_of(gw, run_id)
        lines = await completion_lines(gw, CHAT)
    assert (before.progress.status, before.delivery.announce_state, before.delivery.state) == (
        "done",
        None,
        "held",
    )
    assert posted_before == []
    assert announce.run_id == run_id
    assert announce.text.startswith("announced alpha\n\nStats: ")
    assert (after.delivery.announce_state, after.delivery.state) == ("delivered", "delivered")
    assert [line["meta"]["runId"] for line in lines] == [run_id]


#: The scripted model of the subprocess: spawn with ``bg``, wait with ``wait <runId>``.
KILL_SCRIPT = {
    "rules": [
        {"match": r"^\[announce\]", "reply": "ANNOUNCE {lastAssistant}"},
        {
            "match": r"^bg (?P<task>.+)$",
            "reply": "",
            "toolCalls": [{"name": "sessions_spawn", "arguments": {"task": "${task}"}}],
            "afterTool": "accepted {result.runId}",
        },
        {
            "match": r"^wait (?P<id>\S+)$",
            "reply": "",
            "toolCalls": [
                {
                    "name": "subagents",
                    "arguments": {"action": "wait", "runIds": ["${id}"], "timeoutSeconds": 60},
                }
            ],
            "afterTool": "waited {result}",
        },
        # Long enough that the kill lands while the run works (the test waits for no timer).
        {"match": r"^task-slow: (.+)$", "reply": "slow $1", "delaySeconds": 4},
    ],
    "default": {"reply": "?"},
}


@pytest.mark.slow
async def test_a_wait_killed_mid_way_gives_the_run_its_announce_after_the_restart(
    tmp_path: Path,
) -> None:
    port = free_port()
    script = tmp_path / "script.json"
    script.write_text(json.dumps(KILL_SCRIPT), encoding="utf-8")
    path = write_config(
        tmp_path / "herald.json",
        {
            "gateway": {"port": port, "stateDir": str(tmp_path / "state")},
            "agent": {"model": "t/m"},
            "models": {
                "providers": {
                    "t": {"api": "scripted", "script": str(script), "models": [{"id": "m"}]}
                }
            },
        },
    )

    def replies(frames: list[dict[str, Any]]) -> list[str]:
        return [str(f["text"]) for f in frames if f.get("kind") == "reply"]

    async with aiohttp.ClientSession() as http:
        async with herald("run", "--config", str(path), port=port) as first:
            await first.wait_healthy()
            async with webchat_page(http, first.url, "waiter") as client:
                await client.ws.send_json({"type": "message", "text": "bg task-slow: x"})
                await client.wait(lambda fs: len(replies(fs)) == 1)
                run_id = replies(client.frames)[0].removeprefix("accepted ")
                await client.ws.send_json({"type": "message", "text": f"wait {run_id}"})
                await first.wait_log("waiting for sub-agent runs")
                first.process.send_signal(signal.SIGKILL)
                assert await first.wait_exit() == -signal.SIGKILL
                assert client.announced() == []
        async with herald("run", "--config", str(path), port=port) as second:
            await second.wait_healthy()
            async with webchat_page(http, second.url, "waiter") as client:
                await client.wait(lambda fs: run_id in client.announced())
            second.process.send_signal(signal.SIGTERM)
            assert await second.wait_exit() == 0
    db = await SqliteStateDB.open(tmp_path / "state" / STATE_DB_NAME, readonly=True)
    try:
        run = await db.runs.get(run_id)
    finally:
        await db.close()
    assert run is not None
    assert (run.progress.status, run.delivery.announce_state) == ("done", "delivered")
    # Not consumed: the wait that held it never returned, so the result still reaches the
    # conversation (written before the stop, or at the next start).
    assert run.delivery.state in ("delivered", "pending")
