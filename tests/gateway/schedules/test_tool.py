"""The agent's ``schedule`` tool: a job created in one chat is aimed at that chat and thread,
another chat's jobs are invisible and cannot be cancelled, ``maxPerChat`` bounds what an
agent creates, and sub-agents never have the tool."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.api.keys import SCHEDULES
from gateway.schedules.config import JobSpec
from gateway.schedules.tool import ScheduleParams, ScheduleTool
from gateway.sessions import parse_target
from gateway.settings import HeraldSettings
from gateway.tools import ToolContext, ToolError, tools_for_agent, tools_for_subagent
from gateway.wiring import build_tools
from tests.gateway.harness import Harness, running_gateway
from tests.gateway.slack_fake import slack_on_fake

CHAT_A = "slack:C0123456789/1700000000.000100"
CHAT_B = "slack:C0999999999"


@asynccontextmanager
async def gateway(tmp_path: Path, database_url: str | None = None) -> AsyncIterator[Harness]:
    config = {"schedules": {"maxPerChat": 2}}
    async with (
        slack_on_fake({"C0123456789", "C0999999999"}) as (_, slack),
        running_gateway(
            tmp_path, config=config, channels={"slack": slack}, database_url=database_url
        ) as gw,
    ):
        yield gw


async def chat(gw: Harness, target_text: str) -> ToolContext:
    """The tool context of a turn in the chat ``target_text`` names."""
    target = parse_target(target_text, {"slack": "T1"})
    session = await gw.store.ensure(target.session_key("main"), origin=target.origin("T1"))
    return gw.contexts.for_session(session, origin=session.origin)


async def schedule(ctx: ToolContext, **args: Any) -> dict[str, Any]:
    output = await ScheduleTool().run(ScheduleParams.model_validate(args), ctx)
    data: dict[str, Any] = orjson.loads(output.content)
    return data


async def test_jobs_belong_to_their_chat(tmp_path: Path) -> None:
    async with gateway(tmp_path) as gw:
        a, b = await chat(gw, CHAT_A), await chat(gw, CHAT_B)
        created = await schedule(a, action="create", every="1h", task="task: check deploy")
        job_id = created["jobId"]
        assert created["nextRunAt"] is not None
        listed = await schedule(a, action="list")
        assert [(j["jobId"], j["to"]) for j in listed["jobs"]] == [(job_id, CHAT_A)]
        assert (await schedule(b, action="list"))["jobs"] == []
        with pytest.raises(ToolError, match="this chat has no job"):
            await schedule(b, action="cancel", job_id=job_id)
        assert (
            await gw.db.read(
                lambda c: c.execute("SELECT COUNT(*) FROM schedule_jobs").fetchone()[0]
            )
            == 1
        )
        assert (await schedule(a, action="cancel", job_id=job_id)) == {"cancelled": job_id}
        assert (await schedule(a, action="list"))["jobs"] == []


async def test_a_job_aimed_at_another_chat_is_of_both_chats(
    tmp_path: Path, database_url: str | None
) -> None:
    async with gateway(tmp_path, database_url) as gw:
        a, b = await chat(gw, CHAT_A), await chat(gw, CHAT_B)
        created = await schedule(a, action="create", every="1h", task="task: x", to=CHAT_B)
        for ctx in (a, b):  # created in one, aimed at the other
            listed = await schedule(ctx, action="list")
            assert [j["jobId"] for j in listed["jobs"]] == [created["jobId"]]


async def test_an_agent_creates_at_most_max_per_chat_jobs(tmp_path: Path) -> None:
    async with gateway(tmp_path) as gw:
        a, b = await chat(gw, CHAT_A), await chat(gw, CHAT_B)
        for n in range(2):
            await schedule(a, action="create", every="1h", task=f"task: {n}")
        with pytest.raises(ToolError, match=r"schedules\.maxPerChat is 2"):
            await schedule(a, action="create", every="1h", task="task: one too many")
        # Another chat has its own allowance.
        await schedule(b, action="create", every="1h", task="task: b")


async def test_bad_input_is_a_tool_error_naming_the_field(tmp_path: Path) -> None:
    async with gateway(tmp_path) as gw:
        a = await chat(gw, CHAT_A)
        for args, words in [
            ({"cron": "0 9 * *"}, "cron: "),
            ({"every": "5s"}, "every: "),
            ({"every": "1h", "cron": "0 9 * * *"}, "cron: a job has exactly one"),
            ({"every": "1h", "to": "discord:123456789012345678"}, "to: "),
        ]:
            with pytest.raises(ToolError, match=words):
                await schedule(a, action="create", task="task: x", **args)


def test_sub_agents_never_have_the_tool() -> None:
    settings = HeraldSettings.model_validate(
        {
            "agent": {
                "tools": {"allow": ["*"]},
                "subagents": {"tools": {"allow": ["*", "group:schedule"]}},
            }
        }
    )
    registry = build_tools(settings)
    assert "schedule" in tools_for_agent(settings, "main", registry)
    assert "schedule" not in tools_for_subagent(settings, "main", "main", registry)


async def test_chat_commands_list_and_cancel_only_this_chats_jobs(tmp_path: Path) -> None:
    async with (
        slack_on_fake({"D0123456789", "C0999999999"}) as (fake, slack),
        running_gateway(tmp_path, channels={"slack": slack}) as gw,
    ):
        await fake.wait_connected()
        service = gw.app[SCHEDULES]
        here = await service.create(
            JobSpec(every="1h", task="task: here", to="slack:D0123456789", id="here")
        )
        await service.create(
            JobSpec(every="1h", task="task: there", to="slack:C0999999999", id="there")
        )

        async def command(text: str, count: int) -> str:
            await fake.push_event(fake.message(text, channel="D0123456789"))
            posts = await fake.wait_posts(count)
            return posts[count - 1].text

        listed = await command("/schedules", 1)
        assert listed.startswith("Scheduled jobs:")
        assert "here — every 1h → slack:D0123456789" in listed
        assert "there" not in listed
        refused = await command("/unschedule there", 2)
        assert refused == "Not cancelled: this chat has no job 'there'"
        assert await service.get("there")
        done = await command(f"/unschedule {here.job_id}", 3)
        assert done == "Cancelled scheduled job here."
        assert (await command("/schedules", 4)) == "No scheduled jobs in this chat."
