"""POST /v1/tools/invoke and the /v1/runs routes, over real HTTP against real services."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
from aiohttp.test_utils import TestClient, TestServer

from tests.gateway.daemon_process import HANG_GUARD_SECONDS
from tests.gateway.harness import Harness, api_app, running_gateway


@asynccontextmanager
async def api(
    tmp_path: Path, config: dict[str, Any] | None = None
) -> AsyncIterator[tuple[Harness, TestClient[Any, Any]]]:
    async with running_gateway(tmp_path, config=config) as gw:
        app = api_app(gw)
        async with TestClient(TestServer(app)) as client:
            yield gw, client


async def invoke(client: TestClient[Any, Any], body: Any) -> tuple[int, Any]:
    response = await client.post("/v1/tools/invoke", json=body)
    return response.status, await response.json()


async def test_spawn_through_the_api_is_accepted_and_recorded(tmp_path: Path) -> None:
    async with api(tmp_path) as (gw, client):
        status, body = await invoke(
            client, {"tool": "sessions_spawn", "args": {"task": "task: api"}}
        )
        assert status == 200
        assert body["ok"] is True
        assert body["result"]["status"] == "accepted"
        run_id = body["result"]["runId"]
        await gw.finished(run_id)
        response = await client.get(f"/v1/runs/{run_id}")
        run = await response.json()
        assert response.status == 200
        assert run["status"] == "done"
        assert run["parentSessionKey"] == "agent:main:main"
        assert run["usage"]["total"] > 0
        assert run["costUsd"] > 0
        assert run["announce"]["state"] == "no_origin"  # the main session has no chat
        assert run["announce"]["text"].startswith("ANNOUNCE: done: api\n\nStats: runtime ")
        assert Path(run["transcriptPath"]).is_absolute()
        listed = await (await client.get("/v1/runs?status=done")).json()
        assert [r["runId"] for r in listed["runs"]] == [run_id]


async def test_a_spawn_from_a_chat_session_announces_to_that_chat(tmp_path: Path) -> None:
    async with api(tmp_path) as (gw, client):
        await gw.say("hello", chat_id="room", thread_id="th")
        await gw.reply("room")
        key = "agent:main:memory:channel:room:thread:th"
        status, body = await invoke(
            client, {"tool": "sessions_spawn", "args": {"task": "task: x"}, "sessionKey": key}
        )
        assert status == 200
        (announce,) = await gw.announce()
        assert (announce.chat_id, announce.thread_id) == ("room", "th")
        assert announce.run_id == body["result"]["runId"]


async def test_invoke_errors_name_the_field(tmp_path: Path) -> None:
    async with api(tmp_path) as (_, client):
        cases: list[tuple[Any, int, str, str | None]] = [
            ({"tool": "nope"}, 404, "unknown_tool", "tool"),
            ({"tool": "sessions_spawn", "args": {}}, 400, "invalid_args", "args.task"),
            ({"tool": "sessions_spawn", "args": {"task": ""}}, 400, "invalid_args", "args.task"),
            (
                {"tool": "sessions_spawn", "args": {"task": "x", "runTimeoutSeconds": -1}},
                400,
                "invalid_args",
                "args.runTimeoutSeconds",
            ),
            (
                {"tool": "sessions_spawn", "args": {"task": "x", "bogus": 1}},
                400,
                "invalid_args",
                "args.bogus",
            ),
            ({"tool": "sessions_spawn", "args": []}, 400, "invalid_field", "args"),
            ({"tool": 5}, 400, "invalid_field", "tool"),
            ({"tool": "ls", "extra": 1}, 400, "unknown_field", "extra"),
            ([1, 2], 400, "invalid_body", ""),
            ({"tool": "ls", "sessionKey": "../../etc"}, 400, "invalid_session_key", "sessionKey"),
            (
                {"tool": "ls", "sessionKey": "agent:main:webchat:nobody"},
                404,
                "session_not_found",
                "sessionKey",
            ),
            (
                {"tool": "ls", "sessionKey": "agent:ghost:main"},
                404,
                "agent_not_found",
                "sessionKey",
            ),
            ({"tool": "exec", "args": {"command": "true"}}, 403, "tool_not_allowed", "tool"),
            ({"tool": "ls", "to": "slack:C0123456789"}, 400, "invalid_field", "to"),
            ({"tool": "ls", "to": "irc:#herald"}, 400, "invalid_field", "to"),
            ({"tool": "ls", "to": ""}, 400, "invalid_field", "to"),
            (
                {"tool": "ls", "to": "webchat:a", "sessionKey": "agent:main:main"},
                400,
                "invalid_field",
                "to",
            ),
        ]
        for body, status, code, field in cases:
            got_status, got = await invoke(client, body)
            assert (got_status, got["error"]["code"], got["error"].get("field")) == (
                status,
                code,
                field,
            ), body
        response = await client.post(
            "/v1/tools/invoke", data=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert response.status == 400
        assert (await response.json())["error"]["code"] == "invalid_json"
        plain = await client.post("/v1/tools/invoke", data=b'{"tool": "ls"}')
        assert plain.status == 415
        assert (await plain.json())["error"]["code"] == "unsupported_media_type"


async def test_a_huge_task_is_refused(tmp_path: Path) -> None:
    async with api(tmp_path) as (_, client):
        status, body = await invoke(
            client, {"tool": "sessions_spawn", "args": {"task": "x" * 50_001}}
        )
        assert status == 400
        assert body["error"]["field"] == "args.task"


async def test_abort_through_the_api(tmp_path: Path) -> None:
    async with api(tmp_path) as (gw, client):
        gate = asyncio.Event()
        blocker = gw.lanes.subagent.submit(gate.wait)
        _, body = await invoke(client, {"tool": "sessions_spawn", "args": {"task": "task: q"}})
        run_id = body["result"]["runId"]
        response = await client.post(f"/v1/runs/{run_id}/abort")
        assert response.status == 202
        assert (await gw.finished(run_id)).progress.status == "cancelled"
        again = await client.post(f"/v1/runs/{run_id}/abort")
        assert again.status == 409
        assert (await again.json())["error"]["code"] == "run_finished"
        missing = await client.post("/v1/runs/nope/abort")
        assert missing.status == 404
        assert (await client.get("/v1/runs/nope")).status == 404
        gate.set()
        await blocker


async def test_run_list_parameters_are_checked(tmp_path: Path) -> None:
    async with api(tmp_path) as (_, client):
        for query, field in [
            ("status=bogus", "status"),
            ("limit=0", "limit"),
            ("limit=x", "limit"),
        ]:
            response = await client.get(f"/v1/runs?{query}")
            assert response.status == 400
            assert (await response.json())["error"]["field"] == field


async def test_session_tools_through_the_api(tmp_path: Path) -> None:
    """With ``visibility: "agent"`` the main session reads and writes the agent's chats."""
    config = {"agent": {"sessionTools": {"visibility": "agent"}}}
    async with api(tmp_path, config) as (gw, client):
        await gw.say("hello", chat_id="r1")
        await gw.reply("r1")
        _, agents = await invoke(client, {"tool": "agents_list"})
        assert [a["id"] for a in agents["result"]["agents"]] == ["helper", "main"]
        _, sessions = await invoke(client, {"tool": "sessions_list"})
        keys = [s["key"] for s in sessions["result"]["sessions"]]
        assert "agent:main:memory:channel:r1" in keys
        _, history = await invoke(
            client,
            {"tool": "sessions_history", "args": {"sessionKey": "agent:main:memory:channel:r1"}},
        )
        assert [m["content"] for m in history["result"]["messages"]] == ["hello", "hi there"]
        _, sent = await invoke(
            client,
            {
                "tool": "sessions_send",
                "args": {"sessionKey": "agent:main:memory:channel:r1", "message": "hello again"},
            },
        )
        assert sent["result"] == {"status": "queued", "sessionKey": "agent:main:memory:channel:r1"}
        second = await gw.reply("r1", count=2)
        assert second.text == "hi there"


async def test_session_tools_see_only_their_own_tree_by_default(tmp_path: Path) -> None:
    """One person's chat cannot list, read or write another's; its own sub-agents it can."""
    async with api(tmp_path) as (gw, client):
        await gw.say("hello", chat_id="alice")
        await gw.reply("alice")
        await gw.say("hello", chat_id="bob")
        await gw.reply("bob")
        alice, bob = "agent:main:memory:channel:alice", "agent:main:memory:channel:bob"
        _, spawned = await invoke(
            client, {"tool": "sessions_spawn", "args": {"task": "task: mine"}, "sessionKey": alice}
        )
        child = spawned["result"]["childSessionKey"]
        await gw.finished(spawned["result"]["runId"])
        _, listed = await invoke(
            client,
            {"tool": "sessions_list", "args": {"includeSubagents": True}, "sessionKey": alice},
        )
        assert {s["key"] for s in listed["result"]["sessions"]} == {alice, child}
        _, own = await invoke(
            client, {"tool": "sessions_history", "args": {"sessionKey": child}, "sessionKey": alice}
        )
        assert own["ok"] is True
        assert own["result"]["messages"][0]["content"] == "task: mine"
        _, other = await invoke(
            client, {"tool": "sessions_history", "args": {"sessionKey": bob}, "sessionKey": alice}
        )
        _, unknown = await invoke(
            client,
            {
                "tool": "sessions_history",
                "args": {"sessionKey": "agent:main:memory:channel:nobody"},
                "sessionKey": alice,
            },
        )
        assert other["ok"] is False
        assert other["result"]["content"] == f"sessions_history: no session {bob!r}"
        # Out of scope answers exactly as unknown: nothing tells that bob's chat exists.
        assert unknown["result"]["content"].replace("nobody", "bob") == other["result"]["content"]
        _, sent = await invoke(
            client,
            {
                "tool": "sessions_send",
                "args": {"sessionKey": bob, "message": "from alice"},
                "sessionKey": alice,
            },
        )
        assert sent["ok"] is False
        assert sent["result"]["content"] == f"sessions_send: no session {bob!r}"
        assert [m.text for m in gw.channel.sent if m.chat_id == "bob"] == ["hi there"]


#: Numbers Python's JSON reader accepts but JSON cannot carry back: 1e999 reads as infinity.
NON_FINITE = (b"1e999", b"-1e999", b"Infinity", b"NaN")


async def test_a_non_finite_timeout_is_refused_and_runs_stay_valid_json(tmp_path: Path) -> None:
    async with api(tmp_path) as (_, client):
        for number in NON_FINITE:
            response = await client.post(
                "/v1/tools/invoke",
                data=b'{"tool": "sessions_spawn", "args": {"task": "task: x", '
                b'"runTimeoutSeconds": ' + number + b"}}",
                headers={"Content-Type": "application/json"},
            )
            assert response.status == 400, number
            error = (await response.json())["error"]
            assert (error["code"], error["field"]) == ("invalid_args", "args.runTimeoutSeconds")
        listed = await client.get("/v1/runs")
        assert listed.status == 200
        # orjson reads strict JSON only: Infinity or NaN in the answer would fail here.
        assert orjson.loads(await listed.read()) == {"runs": []}


async def test_a_stored_non_finite_number_is_answered_as_null(tmp_path: Path) -> None:
    async with api(tmp_path) as (gw, client):
        _, body = await invoke(client, {"tool": "sessions_spawn", "args": {"task": "task: x"}})
        run_id = body["result"]["runId"]
        await gw.finished(run_id)
        await gw.runs_idle()  # its completion written: the row no longer moves
        # A row written before inputs had to be finite (or by hand).
        await gw.db.runs.update(run_id, run_timeout_seconds=math.inf, cost_usd=math.inf)
        listed = orjson.loads(await (await client.get("/v1/runs")).read())
        run = orjson.loads(await (await client.get(f"/v1/runs/{run_id}")).read())
        assert run.pop("children") == []
        assert listed["runs"] == [run]
        assert (run["runTimeoutSeconds"], run["costUsd"]) == (None, None)


async def test_invoke_reports_unknown_keys_first_and_refuses_a_null_session_key(
    tmp_path: Path,
) -> None:
    async with api(tmp_path) as (_, client):
        cases: list[tuple[Any, str, str]] = [
            ({"tool": 5, "zeta": 1, "alpha": 2}, "unknown_field", "alpha"),
            ({"tool": "", "args": []}, "invalid_field", "tool"),
            ({"tool": "ls", "sessionKey": None}, "invalid_field", "sessionKey"),
            ({"tool": "ls", "args": None}, "invalid_field", "args"),
        ]
        for body, code, field in cases:
            status, got = await invoke(client, body)
            assert (status, got["error"]["code"], got["error"]["field"]) == (400, code, field)


async def test_visibility_agent_stops_at_the_agent_and_all_sees_every_session(
    tmp_path: Path,
) -> None:
    """ "agent": the main agent's chat lists its agent's sessions but not another agent's;
    "all": it sees them too."""
    for visibility, sees_other in (("agent", False), ("all", True)):
        config = {"agent": {"sessionTools": {"visibility": visibility}}}
        (tmp_path / visibility).mkdir()
        async with api(tmp_path / visibility, config) as (gw, client):
            await gw.say("hello", chat_id="alice")
            await gw.reply("alice")
            other = (await gw.store.ensure("agent:other:main")).key
            alice = "agent:main:memory:channel:alice"
            _, listed = await invoke(client, {"tool": "sessions_list", "sessionKey": alice})
            keys = {s["key"] for s in listed["result"]["sessions"]}
            assert alice in keys
            assert (other in keys) is sees_other, visibility
            _, history = await invoke(
                client,
                {"tool": "sessions_history", "args": {"sessionKey": other}, "sessionKey": alice},
            )
            assert history["ok"] is sees_other, visibility


async def test_an_archived_run_is_found_by_every_reference(tmp_path: Path) -> None:
    """After ``cleanup: "delete"`` renames the run's transcript, the runs answer where it is
    now, and the history route and ``sessions_history`` find it from the stale path too."""
    async with api(tmp_path) as (gw, client):
        _, body = await invoke(
            client,
            {"tool": "sessions_spawn", "args": {"task": "task: gone", "cleanup": "delete"}},
        )
        run_id, child_key = body["result"]["runId"], body["result"]["childSessionKey"]
        await gw.finished(run_id)
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            while True:
                child = await gw.store.require(child_key)
                if child.archived:
                    break
                await asyncio.sleep(0.01)
        stale = gw.store.transcript_path(child)  # the path on the announce's stats line
        now = str(gw.store.current_path(child))
        run = await (await client.get(f"/v1/runs/{run_id}")).json()
        assert stale.name in run["announce"]["text"]  # the stats line stays as it was
        assert run["transcriptPath"] == now
        assert now.startswith(f"{stale}.deleted.")
        assert run["archivedAt"].endswith("Z")
        listed = await (await client.get("/v1/runs")).json()
        assert (listed["runs"][0]["transcriptPath"], listed["runs"][0]["archivedAt"]) == (
            now,
            run["archivedAt"],
        )

        for ref in (child_key, child.session_id, run_id, stale.name, Path(now).name):
            response = await client.get(f"/v1/sessions/{quote(ref, safe='')}/history")
            assert response.status == 200, ref
            history = await response.json()
            assert (history["sessionKey"], history["archived"]) == (child_key, True)
            assert (history["archivedAt"], history["transcriptPath"]) == (run["archivedAt"], now)
            assert [m["content"] for m in history["messages"][:2]] == ["task: gone", "done: gone"]

        _, found = await invoke(
            client, {"tool": "sessions_history", "args": {"sessionKey": str(stale)}}
        )
        assert found["ok"] is True
        assert found["result"]["sessionKey"] == child_key
        assert found["result"]["archivedAt"] == run["archivedAt"]
        assert found["result"]["note"] == (
            f"session {child_key} was archived at {run['archivedAt']}; its transcript is now {now}"
        )
        messages = found["result"]["messages"]
        assert [m["content"] for m in messages[:2]] == ["task: gone", "done: gone"]
        # Another chat's session sees none of it: the run id answers as an unknown one.
        await gw.say("hello", chat_id="other")
        await gw.reply("other")
        _, hidden = await invoke(
            client,
            {
                "tool": "sessions_history",
                "args": {"sessionKey": run_id},
                "sessionKey": "agent:main:memory:channel:other",
            },
        )
        assert hidden["ok"] is False
        assert hidden["result"]["content"] == f"sessions_history: no session {run_id!r}"
