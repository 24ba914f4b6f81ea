"""Running a tool as if a session had called it (the API's ``/v1/tools/invoke``).

The API tests cover each error's status code; here: which session a call runs in, and
whose tool policy applies — a sub-agent session's tools are narrowed by the agent that
spawned it, not only by its own agent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.agent import SessionNotFoundError, ToolNotAllowedError
from gateway.sessions import SessionKey
from gateway.subagents import SpawnRequest
from tests.gateway.harness import Harness, running_gateway

#: The main agent may not list folders; its helper may.
POLICY = {"routing": {"agents": {"main": {"tools": {"deny": ["ls"]}}}}}


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[Harness]:
    async with running_gateway(tmp_path, config=POLICY) as harness:
        gate = asyncio.Event()  # spawned runs stay queued: their sessions are what matters
        blocker = harness.lanes.subagent.submit(gate.wait)
        yield harness
        gate.set()
        await blocker


async def helper_child_of_main(gw: Harness) -> SessionKey:
    ctx = await gw.context("agent:main:main")
    result = await gw.spawn(ctx, SpawnRequest(task="task: x", agent_id="helper"))
    return SessionKey.parse(result["childSessionKey"])


async def test_a_call_without_a_session_runs_in_the_default_agents_main_session(
    gw: Harness,
) -> None:
    assert gw.invoker.default_session_key() == "agent:main:main"


async def test_an_agents_main_session_exists_on_first_use_any_other_must_exist(
    gw: Harness,
) -> None:
    assert await gw.store.get("agent:helper:main") is None
    output = await gw.invoker.invoke(SessionKey.main("helper"), "ls", {"path": "."})
    assert not output.is_error
    assert await gw.store.get("agent:helper:main") is not None
    with pytest.raises(SessionNotFoundError):
        await gw.invoker.invoke(SessionKey.parse("agent:helper:webchat:nobody"), "ls", {})


async def test_a_sub_agent_session_gets_no_tool_its_spawning_agent_lacks(gw: Harness) -> None:
    child_key = await helper_child_of_main(gw)
    child = await gw.invoker.session(child_key)
    helper = await gw.invoker.session(SessionKey.main("helper"))
    assert "ls" in await gw.invoker.allowed(helper)
    assert "ls" not in await gw.invoker.allowed(child)
    with pytest.raises(ToolNotAllowedError) as refused:
        await gw.invoker.invoke(child_key, "ls", {"path": "."})
    assert refused.value.field == "tool"
    assert "agent:helper:subagent:" in str(refused.value)


async def test_submit_tools_run_in_sub_agent_sessions_only(gw: Harness) -> None:
    child_key = await helper_child_of_main(gw)
    submitted = await gw.invoker.invoke(child_key, "submit_result", {"result": "42"})
    assert (submitted.data, submitted.ends_run) == ({"result": "42"}, True)
    with pytest.raises(ToolNotAllowedError):
        await gw.invoker.invoke(SessionKey.main("helper"), "submit_result", {"result": "42"})
