"""A sub-agent stays in its box: it is never offered the session tools or
``exec`` (unless the policy's rules grant ``exec``), every call of one it was not offered
fails, file paths cannot leave its workspace, and it can never start a nested run — not
through the model, not through the HTTP API, not by calling the tool directly.

The model is the OpenAI fake: unlike the scripted provider, it calls whatever tools the test
scripts, offered or not, and it records the ``tools`` array of every request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
from aiohttp.test_utils import TestClient, TestServer

from gateway.subagents import SPAWN_FORBIDDEN_NESTED, SpawnRequest
from gateway.tools.policy import SESSION_TOOLS
from tests.fakes.openai import FakeOpenAI, openai_server
from tests.gateway.harness import Harness, api_app, running_gateway

MODEL = "gpt-4o-mini"
KEY = "sk-isolation-test-key"
ESCAPES = ["../../etc/passwd", "/etc/passwd", "../../../herald.db", "/proc/self/environ"]


def provider_config(fake: FakeOpenAI, **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "agent": {"model": f"oa/{MODEL}"},
        "models": {
            "providers": {
                "oa": {
                    "api": "openai-completions",
                    "baseUrl": fake.base_url,
                    "apiKey": KEY,
                    "maxRetries": 0,
                    "models": [{"id": MODEL}],
                }
            }
        },
    }
    for section, values in extra.items():
        config.setdefault(section, {}).update(values)
    return config


@asynccontextmanager
async def isolated(tmp_path: Path, **extra: Any) -> AsyncIterator[tuple[Harness, FakeOpenAI]]:
    tmp_path.mkdir(exist_ok=True)
    async with (
        openai_server(api_key=KEY, model=MODEL) as fake,
        running_gateway(tmp_path, config=provider_config(fake, **extra)) as gw,
    ):
        yield gw, fake


def offered(fake: FakeOpenAI, index: int) -> set[str]:
    body = fake.requests[index].body
    return {tool["function"]["name"] for tool in body.get("tools") or []}


async def spawn_child(gw: Harness, task: str) -> str:
    result = await gw.spawn(await gw.context(), SpawnRequest(task=task))
    assert result["status"] == "accepted", result
    run_id: str = result["runId"]
    return run_id


def tool_results(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {m["toolCallId"]: m for m in messages if m["role"] == "tool"}


async def test_a_subagent_is_offered_no_session_tool_and_each_call_fails(tmp_path: Path) -> None:
    async with isolated(tmp_path) as (gw, fake):
        marker = tmp_path / "exec-ran"
        calls: list[tuple[str, str, dict[str, Any]]] = [
            ("c_spawn", "sessions_spawn", {"task": "nested"}),
            ("c_list", "sessions_list", {"includeSubagents": True}),
            ("c_history", "sessions_history", {"sessionKey": "agent:main:main"}),
            ("c_send", "sessions_send", {"sessionKey": "agent:main:main", "message": "hi"}),
            ("c_agents", "agents_list", {}),
            ("c_exec", "exec", {"command": f"touch {marker}"}),
        ]
        calls += [(f"c_read{i}", "read", {"path": path}) for i, path in enumerate(ESCAPES)]
        calls += [("c_write", "write", {"path": "../../escaped.txt", "content": "x"})]
        fake.reply_tool_calls(calls)
        fake.reply_text("finished")
        fake.reply_text("announce: finished")
        run_id = await spawn_child(gw, "try every tool")
        run = await gw.finished(run_id)
        assert run.progress.status == "done"
        assert run.progress.result_text == "finished"

        assert len(fake.requests) == 3
        child_tools = offered(fake, 0)
        assert child_tools, "the sub-agent was offered no tools at all"
        assert child_tools & SESSION_TOOLS == set()
        assert "exec" not in child_tools
        assert {"read", "submit_result", "submit_error"} <= child_tools
        assert offered(fake, 1) == child_tools
        assert offered(fake, 2) == set()  # the announce turn has no tools

        history = await gw.store.history(run.child_session_key, include_tools=True)
        results = tool_results(history)
        assert set(results) == {call_id for call_id, _, _ in calls}
        for call_id, name, _ in calls:
            result = results[call_id]
            assert result["isError"] is True, result
            if name in SESSION_TOOLS or name == "exec":
                assert "tool not available here" in result["content"], result
        for i in range(len(ESCAPES)):
            content = results[f"c_read{i}"]["content"]
            assert "is not allowed" in content or "outside the workspace" in content, content
            assert "root:" not in content
        assert not marker.exists()
        assert not (tmp_path / "state" / "escaped.txt").exists()
        assert [r.run_id for r in await gw.db.runs.list()] == [run_id]
        subagents = [s for s in await gw.store.list(include_subagents=True)]
        assert [s.key for s in subagents if s.is_subagent] == [run.child_session_key]


async def test_exec_reaches_a_subagent_only_by_the_policy_rules(tmp_path: Path) -> None:
    # `*` alone never grants exec: neither the parent nor the sub-agent gets it.
    async with isolated(tmp_path / "star", agent={"tools": {"allow": ["*"]}}) as (gw, fake):
        fake.reply_text("done")
        fake.reply_text("announce")
        await gw.finished(await spawn_child(gw, "star"))
        assert "exec" not in offered(fake, 0)
    # Named in the agent's allow list: the sub-agent inherits it (subagents.tools is open).
    allow = {"tools": {"allow": ["*", "exec"]}}
    async with isolated(tmp_path / "named", agent=allow) as (gw, fake):
        fake.reply_text("done")
        fake.reply_text("announce")
        await gw.finished(await spawn_child(gw, "named"))
        assert "exec" in offered(fake, 0)
        assert offered(fake, 0) & SESSION_TOOLS == set()
    # agent.subagents.tools.deny takes it away again, and a call of it fails.
    denied = {**allow, "subagents": {"tools": {"deny": ["exec"]}}}
    async with isolated(tmp_path / "denied", agent=denied) as (gw, fake):
        marker = tmp_path / "denied-exec-ran"
        fake.reply_tool_calls([("c1", "exec", {"command": f"touch {marker}"})])
        fake.reply_text("done")
        fake.reply_text("announce")
        run = await gw.finished(await spawn_child(gw, "denied"))
        assert "exec" not in offered(fake, 0)
        (result,) = tool_results(
            await gw.store.history(run.child_session_key, include_tools=True)
        ).values()
        assert result["isError"] is True
        assert "tool not available here" in result["content"]
        assert not marker.exists()


async def test_no_door_lets_a_subagent_session_spawn(tmp_path: Path) -> None:
    async with isolated(tmp_path, agent={"tools": {"allow": ["*", "exec"]}}) as (gw, fake):
        fake.reply_text("done")
        fake.reply_text("announce")
        run = await gw.finished(await spawn_child(gw, "be spawned"))
        child = run.child_session_key
        app = api_app(gw)
        async with TestClient(TestServer(app)) as client:
            tools: list[tuple[str, dict[str, Any]]] = [
                ("sessions_spawn", {"task": "nested through the API"}),
                ("sessions_list", {}),
                ("sessions_history", {"sessionKey": "agent:main:main"}),
                ("sessions_send", {"sessionKey": "agent:main:main", "message": "hi"}),
                ("agents_list", {}),
            ]
            for tool, args in tools:
                response = await client.post(
                    "/v1/tools/invoke", json={"tool": tool, "args": args, "sessionKey": child}
                )
                body = await response.json()
                assert response.status == 403, (tool, body)
                assert body["error"]["code"] == "tool_not_allowed"
            # The sub-agent's own file tools still cannot leave its workspace.
            for path in ESCAPES:
                response = await client.post(
                    "/v1/tools/invoke",
                    json={"tool": "read", "args": {"path": path}, "sessionKey": child},
                )
                body = await response.json()
                assert (response.status, body["ok"]) == (200, False), body
                assert "root:" not in orjson.dumps(body).decode()
            # A message cannot be queued into a sub-agent session either.
            response = await client.post(
                "/v1/tools/invoke",
                json={"tool": "sessions_send", "args": {"sessionKey": child, "message": "spawn!"}},
            )
            assert (await response.json())["ok"] is False
        # Past the policy, the tool itself refuses in a sub-agent session.
        session = await gw.store.require(child)
        ctx = gw.contexts.for_session(session)
        assert ctx.is_subagent
        params = gw.tools.validate("sessions_spawn", {"task": "nested, directly"})
        output = await gw.tools.execute("sessions_spawn", params, ctx)
        assert output.is_error
        assert orjson.loads(output.content) == {
            "status": "forbidden",
            "error": SPAWN_FORBIDDEN_NESTED,
        }
        assert (await gw.spawn(ctx, SpawnRequest(task="nested")))["status"] == "forbidden"
        assert [r.run_id for r in await gw.db.runs.list()] == [run.run_id]
        assert len(fake.requests) == 2  # no nested run ever called the model
