"""The agent's ``schedule`` tool: a job created in one chat is aimed at that chat and thread
(or another thread of it, never another chat), another chat's jobs are invisible and cannot
be cancelled, ``maxPerChat`` bounds what agents create for a chat (its threads together),
hostile values are tool errors naming the field and never a host path, and sub-agents never
have the tool."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.catalog import build_tools
from gateway.parts.agent import TOOLS
from gateway.schedules.setup import SCHEDULES
from gateway.schedules.tool import ScheduleParams, ScheduleTool
from gateway.schema.schedules import JobSpec
from gateway.schema.targets import parse_target
from gateway.sessions import target_origin, target_session_key
from gateway.settings import HeraldSettings
from gateway.tools import (
    ToolContext,
    ToolError,
    ToolOutput,
    tools_for_agent,
    tools_for_subagent,
)
from tests.gateway.harness import Harness, running_gateway
from tests.gateway.slack_fake import slack_on_fake

CHAT_A = "slack:C0123456789/1700000000.000100"
CHAT_A_TOP = "slack:C0123456789"
CHAT_A_OTHER_THREAD = "slack:C0123456789/1700000000.000200"
CHAT_B = "slack:C0999999999"
#: What a host path in an error looks like (zoneinfo's errors name its files).
HOST_PATH_SIGNS = ("zoneinfo/", "site-packages", "/usr/", "Errno", "Is a directory")


@asynccontextmanager
async def gateway(
    tmp_path: Path, database_url: str | None = None, *, max_per_chat: int = 2
) -> AsyncIterator[Harness]:
    config = {"schedules": {"maxPerChat": max_per_chat}}
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
    session = await gw.store.ensure(
        target_session_key(target, "main"), origin=target_origin(target, "T1")
    )
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


async def test_the_tool_aims_only_at_its_own_chat_and_its_threads(
    tmp_path: Path, database_url: str | None
) -> None:
    async with gateway(tmp_path, database_url, max_per_chat=3) as gw:
        a, b = await chat(gw, CHAT_A), await chat(gw, CHAT_B)
        for elsewhere in (CHAT_B, f"  {CHAT_B}  ", "slack:C0123456788"):
            with pytest.raises(ToolError) as refused:
                await schedule(a, action="create", every="1h", task="task: x", to=elsewhere)
            assert str(refused.value).startswith("to: "), refused.value
            assert "is another chat" in str(refused.value)
        assert (await schedule(b, action="list"))["jobs"] == []
        # The chat itself and its threads, however the target is padded.
        for here in (CHAT_A_TOP, f"  {CHAT_A_OTHER_THREAD}\t", None):
            await schedule(a, action="create", every="1h", task="task: here", to=here)
        listed = await schedule(a, action="list")
        assert sorted(j["to"] for j in listed["jobs"]) == sorted(
            [CHAT_A_TOP, CHAT_A_OTHER_THREAD, CHAT_A]
        )
        # A chat's jobs are its threads' too: the channel's own session sees all three.
        top = await chat(gw, CHAT_A_TOP)
        assert len((await schedule(top, action="list"))["jobs"]) == 3
        assert (await schedule(b, action="list"))["jobs"] == []


async def test_max_per_chat_counts_the_chat_with_all_its_threads(tmp_path: Path) -> None:
    async with gateway(tmp_path) as gw:  # maxPerChat: 2
        in_thread, at_top = await chat(gw, CHAT_A), await chat(gw, CHAT_A_TOP)
        other_thread = await chat(gw, CHAT_A_OTHER_THREAD)
        await schedule(in_thread, action="create", every="1h", task="task: 1")
        await schedule(at_top, action="create", every="1h", task="task: 2")
        with pytest.raises(ToolError, match=r"already has 2 scheduled jobs .*maxPerChat is 2"):
            await schedule(other_thread, action="create", every="1h", task="task: 3")
        with pytest.raises(ToolError, match=r"maxPerChat is 2"):
            await schedule(at_top, action="create", every="1h", task="task: 3")
        count = await gw.db.read(
            lambda c: c.execute("SELECT COUNT(*) FROM schedule_jobs").fetchone()[0]
        )
        assert count == 2


async def model_sees(gw: Harness, ctx: ToolContext, **args: Any) -> ToolOutput:
    """The tool's answer as the model gets it: through the registry in force."""
    registry = gw.app[TOOLS].get()
    params = registry.validate("schedule", {"action": "create", "task": "task: x", **args})
    return await registry.execute("schedule", params, ctx)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ({"every": "3000000d"}, "every: '3000000d' is longer than 366d"),
        ({"at": "9999-12-31T23:59:59-14:00"}, "at: '9999-12-31T23:59:59-14:00' is out of the"),
        ({"at": "2999-01-01T00:00:00Z"}, "at: '2999-01-01T00:00:00Z' is more than 10 years"),
        ({"every": "1h", "timezone": "America"}, "timezone: unknown time zone 'America'"),
        ({"cron": "0 9 * * *", "timezone": "America/"}, "timezone: unknown time zone"),
        ({"every": "1h", "timezone": "Europe/" + "x" * 300}, "timezone: String should have at"),
        ({"every": "1h", "timezone": "../../../../etc/passwd"}, "timezone: unknown time zone"),
        ({"cron": "0 0 30 2 *"}, "cron: '0 0 30 2 *' never fires"),
    ],
)
async def test_hostile_values_are_tool_errors_without_a_host_path(
    tmp_path: Path, args: dict[str, Any], words: str
) -> None:
    async with gateway(tmp_path) as gw:
        output = await model_sees(gw, await chat(gw, CHAT_A), **args)
        assert output.is_error
        assert output.content.startswith(f"schedule: {words}"), output.content
        for sign in HOST_PATH_SIGNS:
            assert sign not in output.content
        count = await gw.db.read(
            lambda c: c.execute("SELECT COUNT(*) FROM schedule_jobs").fetchone()[0]
        )
        assert count == 0


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
