"""Nesting: sub-agents below ``maxSpawnDepth`` orchestrate their own sub-agents, whose results
come back to them (never to the chat); ``maxChildrenPerSession``; ``context: "fork"``.

Most tests use the scripted model (rules in a script dict): each sub-agent answers by its
task, so what a model was given shows in what it answered. The tests that must see the exact
requests (the tools offered, the moment a completion is given) use the OpenAI wire fake.
"""

from __future__ import annotations

import asyncio
import copy
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from channels import OutboundMessage
from gateway.constants import EXIT_CONFIG
from gateway.sessions import read_transcript
from gateway.state import RunRecord
from gateway.subagents import COMPLETION_PREFIX, SPAWN_FORBIDDEN_NESTED, SpawnRequest
from gateway.tools import NESTING_TOOLS, SESSION_TOOLS, SUBAGENT_ONLY_TOOLS
from tests.fakes.openai import FakeOpenAI, Step, last_user_text, openai_server
from tests.gateway.daemon_process import HERALD, clean_env, write_config
from tests.gateway.harness import (
    HANG_GUARD_SECONDS,
    TEST_SCRIPT,
    Harness,
    api_app,
    fake_model_config,
    merge,
    running_gateway,
)

CHAT_KEY = "agent:main:memory:channel:c1"


def spawn(task: str, label: str | None = None, **extra: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {"task": task, **extra}
    if label is not None:
        arguments["label"] = label
    return {"name": "sessions_spawn", "arguments": arguments}


def yield_call() -> dict[str, Any]:
    return {"name": "sessions_yield", "arguments": {}}


def script() -> dict[str, Any]:
    rules: list[dict[str, Any]] = [
        # An orchestrator that spawns one child and ends at once.
        {
            "match": r"^orchestrate: (?P<x>\S+)$",
            "reply": "",
            "toolCalls": [spawn("task: ${x}", "${x}")],
            "afterTool": "spawned {result.runId}",
            "afterToolError": "refused: {result.error}",
        },
        # An orchestrator that spawns two and waits for both.
        {
            "match": r"^orchestrate-fan (?P<a>\S+) (?P<b>\S+)$",
            "reply": "",
            "toolCalls": [spawn("task: ${a}", "${a}"), spawn("task: ${b}", "${b}"), yield_call()],
        },
        # An orchestrator whose child outlives the orchestrator's own timeout.
        {
            "match": r"^orchestrate-slow (?P<x>\S+)$",
            "reply": "",
            "toolCalls": [spawn("task-slow: ${x}", "${x}"), yield_call()],
        },
        {
            "match": (
                r"^\[sub-agent completion\] The sub-agents you waited for[\s\S]*?"
                r"result:\n(?P<r1>[^\n]+)[\s\S]*?result:\n(?P<r2>[^\n]+)"
            ),
            "reply": "combined ${r1} | ${r2}",
        },
        {
            "match": r"^bgt (?P<task>.+)$",
            "reply": "",
            "toolCalls": [spawn("${task}", "orch", runTimeoutSeconds=2)],
            "afterTool": "accepted {result.runId}",
        },
        {
            "match": r"^slowmany$",
            "reply": "",
            "toolCalls": [spawn(f"task-slow: s{i}", f"s{i}") for i in range(4)],
            "afterTool": "spawned some",
        },
        {"match": r"^remember: (?P<x>.+)$", "reply": "noted ${x}"},
        {
            "match": r"^(?P<how>fork|isolated) (?P<task>.+)$",
            "reply": "",
            "toolCalls": [spawn("${task}", "${how}", context="${how}")],
            "afterTool": "spawned {result.runId}",
            "afterToolError": "refused: {result.error}",
        },
        {"match": r"^child-task: ", "reply": "child saw: {lastAssistant}"},
    ]
    data = copy.deepcopy(TEST_SCRIPT)
    data["rules"] = rules + data["rules"]
    return data


def nesting(depth: int, width: int = 1, **subagents: Any) -> dict[str, Any]:
    return {
        "agent": {
            "subagents": {"maxSpawnDepth": depth, "maxConcurrent": width, **subagents},
        }
    }


def announces(gw: Harness) -> list[OutboundMessage]:
    return [m for m in gw.channel.sent if m.kind == "announce"]


async def runs_by_depth(gw: Harness) -> dict[int, list[RunRecord]]:
    out: dict[int, list[RunRecord]] = {}
    for run in await gw.db.runs.list(oldest_first=True):
        out.setdefault(run.request.depth, []).append(run)
    return out


async def completion_ids(gw: Harness, key: str) -> list[str]:
    session = await gw.store.require(key)
    records = read_transcript(gw.store.transcript_path(session)).records
    return [
        r["meta"]["runId"]
        for r in records
        if (r.get("meta") or {}).get("kind") == "subagent_completion"
    ]


async def completions_written(gw: Harness, key: str, count: int) -> list[str]:
    """:func:`completion_ids` once ``count`` are written (a hang guard, no speed limit)."""
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while len(ids := await completion_ids(gw, key)) < count:  # noqa: ASYNC110 - a file
            await asyncio.sleep(0.02)
    return ids


# -- the depth cap ----------------------------------------------------------------------------


async def test_at_the_default_cap_of_1_a_subagent_cannot_spawn_as_in_v1(
    tmp_path: Path, database_url: str | None
) -> None:
    async with running_gateway(
        tmp_path, database_url=database_url, config=nesting(1), script=script()
    ) as gw:
        await gw.say("bg orchestrate: leaf")
        await gw.reply()
        (run,) = await gw.db.runs.list()
        run = await gw.finished(run.run_id)
        assert (run.request.depth, run.request.parent_run_id) == (1, None)
        # Its model was not offered sessions_spawn (the script answers as if it had run).
        assert run.progress.result_text == "spawned n/a"
        # And the tool itself, called from its session, answers with the v1 text.
        child = await gw.store.require(run.child_session_key)
        ctx = gw.contexts.for_session(child, run_id=run.run_id, depth=1)
        output = await gw.tools.execute(
            "sessions_spawn", gw.tools.validate("sessions_spawn", {"task": "x"}), ctx
        )
        assert orjson.loads(output.content) == {
            "status": "forbidden",
            "error": SPAWN_FORBIDDEN_NESTED,
        }
        refused = await gw.spawn(ctx, SpawnRequest(task="nested"))
        assert refused == {"status": "forbidden", "error": SPAWN_FORBIDDEN_NESTED}
        assert [r.run_id for r in await gw.db.runs.list()] == [run.run_id]


async def test_below_the_cap_an_orchestrator_yields_and_its_announce_carries_the_combined_result(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    # One lane slot: the orchestrator must give it up while its children run.
    async with running_gateway(
        tmp_path, database_url=database_url, config=nesting(2, width=1), script=script()
    ) as gw:
        await gw.say("bg orchestrate-fan a b")
        await gw.reply()
        (announce,) = await gw.announce()
        by_depth = await runs_by_depth(gw)
        (orchestrator,) = by_depth[1]
        assert announce.run_id == orchestrator.run_id
        assert announce.text.startswith("ANNOUNCE: combined done: a | done: b\n\n")
        orchestrator = await gw.finished(orchestrator.run_id)
        assert (orchestrator.progress.status, orchestrator.progress.result_text) == (
            "done",
            "combined done: a | done: b",
        )
        leaves = by_depth[2]
        assert [leaf.request.label for leaf in leaves] == ["a", "b"]
        for leaf in leaves:
            final = await gw.finished(leaf.run_id)
            assert final.request.parent_run_id == orchestrator.run_id
            assert final.request.parent_session_key == orchestrator.child_session_key
            assert (final.progress.status, final.delivery.announce_state, final.delivery.state) == (
                "done",
                "consumed",
                "consumed",
            )
        (batch_id,) = {leaf.delivery.batch_id for leaf in leaves}
        batch = await gw.db.batches.get(batch_id or "")
        assert batch is not None
        assert (batch.run_id, batch.state) == (orchestrator.run_id, "done")
        await gw.runs_idle()
        # Its tokens: the turn before its yield (saved as it yielded), the follow-up (saved
        # with its end) and its announce, each counted once in its run and its session.
        contents = await gw.store.read(orchestrator.child_session_key)
        outputs = [
            m["message"]["usage"]["output"] for m in contents.messages if m["message"].get("usage")
        ]
        assert len(outputs) >= 3
        orchestrator = await gw.finished(orchestrator.run_id)
        session = await gw.store.require(orchestrator.child_session_key)
        assert orchestrator.progress.usage.output == sum(outputs) == session.usage.output
        # Only the orchestrator spoke to the chat; the person's session got its completion.
        assert [m.run_id for m in announces(gw)] == [orchestrator.run_id]
        assert await completion_ids(gw, CHAT_KEY) == [orchestrator.run_id]
        assert await gw.db.batches.open_batches() == []


async def test_a_grandchild_that_ends_after_its_orchestrator_reaches_the_persons_session(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    # One lane slot: the child runs only once the orchestrator has ended.
    async with running_gateway(
        tmp_path, database_url=database_url, config=nesting(2, width=1), script=script()
    ) as gw:
        await gw.say("bg orchestrate: leaf")
        await gw.reply()
        (announce,) = await gw.announce()
        by_depth = await runs_by_depth(gw)
        (orchestrator,) = by_depth[1]
        (leaf,) = by_depth[2]
        assert announce.run_id == orchestrator.run_id
        assert announce.text.startswith(f"ANNOUNCE: spawned {leaf.run_id}")
        leaf = await gw.finished(leaf.run_id)
        assert (leaf.progress.status, leaf.progress.result_text, leaf.delivery.announce_state) == (
            "done",
            "done: leaf",
            "nested",
        )
        await gw.runs_idle()
        leaf = await gw.finished(leaf.run_id)
        assert leaf.delivery.state == "delivered"
        assert await completion_ids(gw, CHAT_KEY) == [orchestrator.run_id, leaf.run_id]
        assert await completion_ids(gw, orchestrator.child_session_key) == []
        assert [m.run_id for m in announces(gw)] == [orchestrator.run_id]


async def test_a_timed_out_orchestrator_cancels_its_children(
    tmp_path: Path, database_url: str | None
) -> None:
    # The orchestrator waits on a child slower than its own 2 s run timeout.
    async with running_gateway(
        tmp_path, database_url=database_url, config=nesting(2, width=1), script=script()
    ) as gw:
        await gw.say("bgt orchestrate-slow leaf")
        await gw.reply()
        (announce,) = await gw.announce()
        by_depth = await runs_by_depth(gw)
        (orchestrator,) = by_depth[1]
        (leaf,) = by_depth[2]
        assert announce.run_id == orchestrator.run_id
        assert 'Sub-agent "orch" timed out' in announce.text
        assert (await gw.finished(orchestrator.run_id)).progress.status == "timeout"
        leaf = await gw.finished(leaf.run_id)
        assert (leaf.progress.status, leaf.delivery.announce_state) == ("cancelled", "nested")
        await gw.runs_idle()
        # The child's result still goes up, to the person's session. A stopped run's end
        # may go through the cluster's urgent queue, outside the lanes runs_idle joins.
        assert sorted(await completions_written(gw, CHAT_KEY, 2)) == sorted(
            [orchestrator.run_id, leaf.run_id]
        )
        assert [m.run_id for m in announces(gw)] == [orchestrator.run_id]
        assert await gw.db.batches.open_batches() == []


async def test_stopping_a_waiting_orchestrator_stops_its_children_and_loses_no_result(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    async with running_gateway(
        tmp_path, database_url=database_url, config=nesting(2, width=1), script=script()
    ) as gw:
        await gw.say("bg orchestrate-slow leaf")
        await gw.reply()
        async with asyncio.timeout(HANG_GUARD_SECONDS):  # it runs once the orchestrator yields
            await gw.channel.wait_run(lambda u: u.name == "leaf" and u.status == "running")
        by_depth = await runs_by_depth(gw)
        (orchestrator,) = by_depth[1]
        (leaf,) = by_depth[2]
        assert (
            await gw.db.runs.get(orchestrator.run_id) or orchestrator
        ).progress.status == "running"
        await gw.runs.abort(orchestrator.run_id)
        assert (await gw.finished(orchestrator.run_id)).progress.status == "cancelled"
        assert (await gw.finished(leaf.run_id)).progress.status == "cancelled"
        await gw.runs_idle()
        (batch_id,) = {leaf.delivery.batch_id}
        batch = await gw.db.batches.get(batch_id or "")
        assert batch is not None
        assert batch.state == "done"  # dissolved: its result went on up
        # A stopped run's end is announced outside the lanes runs_idle joins.
        assert sorted(await completions_written(gw, CHAT_KEY, 2)) == sorted(
            [orchestrator.run_id, leaf.run_id]
        )
        assert [m.run_id for m in announces(gw)] == [orchestrator.run_id]


# -- limits and context -------------------------------------------------------------------------


async def test_past_max_children_per_session_spawn_answers_error(
    tmp_path: Path, database_url: str | None
) -> None:
    config = nesting(1, maxChildrenPerSession=2)
    async with running_gateway(
        tmp_path, database_url=database_url, config=config, script=script()
    ) as gw:
        await gw.say("slowmany")
        await gw.reply()
        messages = await gw.store.history(CHAT_KEY, include_tools=True)
        results = [orjson.loads(m["content"]) for m in messages if m["role"] == "tool"]
        assert [r["status"] for r in results] == ["accepted", "accepted", "error", "error"]
        assert "agent.subagents.maxChildrenPerSession" in results[2]["error"]
        runs = await gw.db.runs.list(oldest_first=True)
        assert [r.request.label for r in runs] == ["s0", "s1"]
        # Once one has ended, there is room again.
        await gw.runs.abort(runs[0].run_id)
        await gw.finished(runs[0].run_id)
        ctx = await gw.context(CHAT_KEY)
        assert (await gw.spawn(ctx, SpawnRequest(task="task: later")))["status"] == "accepted"
        assert (await gw.spawn(ctx, SpawnRequest(task="task: more")))["status"] == "error"


async def test_a_forked_child_starts_with_the_requesters_conversation(
    tmp_path: Path, database_url: str | None
) -> None:
    async with running_gateway(tmp_path, database_url=database_url, script=script()) as gw:
        await gw.say("remember: the code word is heron")
        assert (await gw.reply()).text == "noted the code word is heron"
        await gw.say("fork child-task: what is the code word")
        await gw.reply(count=2)
        await gw.say("isolated child-task: what is the code word")
        await gw.reply(count=3)
        forked, isolated = await gw.db.runs.list(oldest_first=True)
        forked = await gw.finished(forked.run_id)
        isolated = await gw.finished(isolated.run_id)
        # What each child's model was given shows in its answer.
        assert forked.progress.result_text == "child saw: noted the code word is heron"
        assert isolated.progress.result_text == "child saw: "
        history = await gw.store.history(forked.child_session_key, include_tools=True)
        assert [(m["role"], m["content"]) for m in history[:3]] == [
            ("user", "remember: the code word is heron"),
            ("assistant", "noted the code word is heron"),
            ("user", "fork child-task: what is the code word"),
        ]
        spawn_call, open_result, task = history[3:6]
        assert [c["name"] for c in spawn_call["toolCalls"]] == ["sessions_spawn"]
        assert open_result["role"] == "tool"
        assert open_result["toolCallId"] == spawn_call["toolCalls"][0]["id"]
        assert "forked" in open_result["content"]
        assert (task["role"], task["content"]) == ("user", "child-task: what is the code word")
        isolated_history = await gw.store.history(isolated.child_session_key)
        assert isolated_history[0]["content"] == "child-task: what is the code word"


async def test_fork_from_an_empty_session_is_a_clear_error(
    tmp_path: Path, database_url: str | None
) -> None:
    async with running_gateway(tmp_path, database_url=database_url, script=script()) as gw:
        ctx = await gw.context("agent:main:main")
        result = await gw.spawn(ctx, SpawnRequest(task="task: x", context="fork"))
        assert result["status"] == "error"
        assert "context 'fork'" in result["error"]
        assert "no messages" in result["error"]
        params = gw.tools.validate("sessions_spawn", {"task": "task: y", "context": "fork"})
        output = await gw.tools.execute("sessions_spawn", params, ctx)
        assert output.is_error
        assert orjson.loads(output.content)["status"] == "error"
        assert await gw.db.runs.list() == []
        sessions = await gw.store.list(include_subagents=True)
        assert [s.key for s in sessions if s.is_subagent] == []


# -- what reaches an orchestrator's model, and the tools down the chain (wire fake) ------------

LEAF_RESULT = "The leaf found 42 (leaf result 9c1d)."


def offered(body: Any) -> set[str]:
    return {tool["function"]["name"] for tool in body.get("tools") or []}


class Orchestration:
    """The wire fake's answers: the person's agent spawns ``orchestrate`` (as ``helper``);
    the orchestrator spawns ``leaf work`` and then calls ``agents_list`` — held until the
    test opens :attr:`gate`, so the leaf is final before the orchestrator's next model call;
    the leaf answers :data:`LEAF_RESULT`; the orchestrator's last answer quotes what it was
    given."""

    def __init__(self, fake: FakeOpenAI, *, ends_when_released: bool = False) -> None:
        self.fake = fake
        #: The held answer ends the orchestrator (text) instead of calling ``agents_list``.
        self.ends_when_released = ends_when_released
        self.gate = asyncio.Event()
        self.held = asyncio.Event()
        self.bodies: dict[str, list[Any]] = {}

    def tool_step(self, name: str, arguments: dict[str, Any], **step: Any) -> Step:
        call = (f"call-{name}", name, arguments)
        body = orjson.dumps(self.fake.completion(content=None, tool_calls=[call]))
        return Step(body=body, **step)

    def __call__(self, body: Any) -> Step:
        text = last_user_text(body)
        last = body["messages"][-1]
        self.bodies.setdefault(text.split("\n")[0], []).append(body)
        if text == "start":
            if last["role"] == "user":
                return self.tool_step(
                    "sessions_spawn", {"task": "orchestrate", "agentId": "helper"}
                )
            return self.fake.text_step("started")
        if text == "orchestrate":
            if last["role"] == "user":
                return self.tool_step("sessions_spawn", {"task": "leaf work", "label": "leaf"})
            self.held.set()
            if self.ends_when_released:
                return self.fake.text_step("orchestrator done", hold=self.gate)
            return self.tool_step("agents_list", {}, hold=self.gate)
        if text == "leaf work":
            # Held until the orchestrator has asked again: the leaf ends in between.
            return self.fake.text_step(LEAF_RESULT, hold=self.held)
        if text.startswith("[announce]"):
            return self.fake.text_step("announced")
        if text.startswith(COMPLETION_PREFIX):
            result = text.split("result:\n")[1].split("\n")[0]
            return self.fake.text_step(f"orchestrator saw: {result}")
        return self.fake.text_step("ok")


def wire_config(fake: FakeOpenAI) -> dict[str, Any]:
    # The person's agent may not fetch the web; the helper it spawns may, by its own policy.
    extra = merge(
        nesting(2, width=2),
        {
            "routing": {
                "agents": {
                    "main": {"tools": {"deny": ["web_fetch"]}},
                    "helper": {"tools": {"allow": ["*"]}},
                }
            }
        },
    )
    return fake_model_config(fake, extra)


async def run_orchestration(gw: Harness, answers: Orchestration) -> tuple[RunRecord, RunRecord]:
    """The orchestrator and its leaf, both final."""
    await gw.say("start")
    assert (await gw.reply()).text == "started"
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        await answers.held.wait()
    # Asked again only after the leaf was spawned: both runs are recorded.
    orchestrator, leaf = await gw.db.runs.list(oldest_first=True)
    leaf = await gw.finished(leaf.run_id)  # final while the orchestrator is still running
    assert (await gw.db.runs.get(orchestrator.run_id) or orchestrator).progress.status == "running"
    answers.gate.set()
    return await gw.finished(orchestrator.run_id), leaf


async def test_a_nested_completion_is_given_to_the_running_orchestrator_not_the_chat(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    async with (
        openai_server() as fake,
        running_gateway(tmp_path, database_url=database_url, config=wire_config(fake)) as gw,
    ):
        answers = Orchestration(fake)
        fake.responder = answers
        orchestrator, leaf = await run_orchestration(gw, answers)
        leaf = await gw.db.runs.get(leaf.run_id) or leaf  # as the orchestrator left it
        assert (leaf.request.depth, leaf.request.parent_run_id) == (2, orchestrator.run_id)
        assert (leaf.delivery.announce_state, leaf.delivery.state) == ("nested", "delivered")
        # The orchestrator's next model call had the completion, after the tool result.
        last = answers.bodies[COMPLETION_PREFIX][0]["messages"]
        assert last[-2]["role"] == "tool"
        assert last[-1]["role"] == "user"
        assert last[-1]["content"].startswith(COMPLETION_PREFIX)
        assert f"runId: {leaf.run_id}" in last[-1]["content"]
        assert LEAF_RESULT in last[-1]["content"]
        assert orchestrator.progress.result_text == f"orchestrator saw: {LEAF_RESULT}"
        assert await completion_ids(gw, orchestrator.child_session_key) == [leaf.run_id]
        # The chat heard from the orchestrator only; the person's session got its result only.
        (announce,) = await gw.announce()
        assert announce.run_id == orchestrator.run_id
        await gw.runs_idle()
        assert [m.run_id for m in announces(gw)] == [orchestrator.run_id]
        assert await completion_ids(gw, CHAT_KEY) == [orchestrator.run_id]


async def test_a_completion_waiting_for_an_orchestrator_that_ends_goes_up_to_the_person(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    async with (
        openai_server() as fake,
        running_gateway(tmp_path, database_url=database_url, config=wire_config(fake)) as gw,
    ):
        # The leaf ends while the orchestrator is in its last model call: the orchestrator
        # never takes the completion, so its end hands it on.
        answers = Orchestration(fake, ends_when_released=True)
        fake.responder = answers
        orchestrator, leaf = await run_orchestration(gw, answers)
        assert orchestrator.progress.result_text == "orchestrator done"
        await gw.runs_idle()
        leaf = await gw.db.runs.get(leaf.run_id) or leaf
        assert (leaf.delivery.announce_state, leaf.delivery.state) == ("nested", "delivered")
        assert COMPLETION_PREFIX not in answers.bodies
        assert await completion_ids(gw, orchestrator.child_session_key) == []
        assert await completion_ids(gw, CHAT_KEY) == [orchestrator.run_id, leaf.run_id]
        assert [m.run_id for m in announces(gw)] == [orchestrator.run_id]


async def test_tools_narrow_down_the_chain_and_the_spawn_tools_stop_at_the_cap(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    async with (
        openai_server() as fake,
        running_gateway(tmp_path, database_url=database_url, config=wire_config(fake)) as gw,
    ):
        answers = Orchestration(fake)
        fake.responder = answers
        _, leaf = await run_orchestration(gw, answers)
        person = offered(answers.bodies["start"][0])
        middle = offered(answers.bodies["orchestrate"][0])
        bottom = offered(answers.bodies["leaf work"][0])
        assert "web_fetch" not in person
        # Depth 1 of 2: the orchestration tools, no other session tool; nothing the person's
        # agent lacks, though the helper's own policy allows everything.
        assert middle & SESSION_TOOLS == NESTING_TOOLS & person
        assert {"sessions_spawn", "sessions_yield", "agents_list"} <= middle
        assert middle <= person | SUBAGENT_ONLY_TOOLS
        # Depth 2, the cap: no session tool at all, and still nothing its parent lacks.
        assert bottom & SESSION_TOOLS == set()
        assert bottom <= middle
        assert "read" in bottom
        assert "web_fetch" not in bottom
        # The HTTP API applies the same chain to the leaf's session.
        async with TestClient(TestServer(api_app(gw))) as client:
            for tool, args in [
                ("web_fetch", {"url": "https://example.com/"}),
                ("sessions_spawn", {"task": "deeper"}),
            ]:
                response = await client.post(
                    "/v1/tools/invoke",
                    json={"tool": tool, "args": args, "sessionKey": leaf.child_session_key},
                )
                assert response.status == 403, (tool, await response.json())
        # Past the policy, the tool itself refuses at the cap.
        ctx = gw.contexts.for_session(
            await gw.store.require(leaf.child_session_key), run_id=leaf.run_id, depth=2
        )
        refused = await gw.spawn(ctx, SpawnRequest(task="deeper"))
        assert refused["status"] == "forbidden"
        assert "depth 2" in refused["error"]
        assert "maxSpawnDepth" in refused["error"]
        assert len(await gw.db.runs.list()) == 2


# -- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [("maxSpawnDepth", 0), ("maxSpawnDepth", 6), ("maxChildrenPerSession", 0)],
)
def test_out_of_range_limits_exit_78_naming_the_key(tmp_path: Path, key: str, value: int) -> None:
    path = write_config(
        tmp_path / "herald.json",
        {
            "gateway": {"stateDir": str(tmp_path / "state")},
            "agent": {"subagents": {key: value}},
            "channels": {"webchat": {"enabled": False}},
        },
    )
    done = subprocess.run(
        [*HERALD, "config", "check", "--config", str(path)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=Path(__file__).resolve().parents[3],
    )
    output = done.stdout + done.stderr
    assert done.returncode == EXIT_CONFIG, output
    assert f"agent.subagents.{key}" in output
    assert f"(got {value})" in output
