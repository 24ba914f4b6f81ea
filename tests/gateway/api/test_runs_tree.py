"""The runs API shows where a run sits: ``parentRunId``, ``depth``, ``batchId``, and for one
run its ``children`` — over real HTTP against a running gateway, with a real
``sessions_yield`` batch and runs recorded as spawned by a run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from gateway.api.routes import openapi_document
from tests.gateway.harness import Harness, api_app, running_gateway
from tests.gateway.nested import pair_script, record_nested_run

CHAT_KEY = "agent:main:memory:channel:c1"


@asynccontextmanager
async def api(tmp_path: Path) -> AsyncIterator[tuple[Harness, TestClient[Any, Any]]]:
    async with (
        running_gateway(tmp_path, script=pair_script()) as gw,
        TestClient(TestServer(api_app(gw))) as client,
    ):
        yield gw, client


async def get(client: TestClient[Any, Any], path: str) -> Any:
    response = await client.get(path)
    assert response.status == 200, await response.text()
    return await response.json()


async def test_runs_of_a_batch_carry_its_id_and_their_depth(tmp_path: Path) -> None:
    async with api(tmp_path) as (gw, client):
        await gw.say("pair")
        await gw.wait_sent(lambda m: m.kind == "reply" and m.text.startswith("both"))
        await gw.runs_idle()
        listed = (await get(client, f"/v1/runs?sessionKey={CHAT_KEY}"))["runs"]
        assert [r["label"] for r in listed] == ["coffee", "tea"]  # newest first
        (batch_id,) = {r["batchId"] for r in listed}
        assert isinstance(batch_id, str)
        assert await gw.db.batches.get(batch_id) is not None
        for run in listed:
            assert (run["parentRunId"], run["depth"]) == (None, 1)
            assert "children" not in run  # only a single run lists its children
            # The follow-up spoke for the batch: no announce of the run's own.
            assert run["announce"]["state"] == "consumed"
        one = await get(client, f"/v1/runs/{listed[0]['runId']}")
        assert one["batchId"] == batch_id
        assert one["children"] == []


async def test_one_run_lists_its_children_oldest_first_and_a_child_names_its_parent(
    tmp_path: Path,
) -> None:
    async with api(tmp_path) as (gw, client):
        await gw.say("bg task: lead")
        await gw.reply()
        (lead,) = await gw.db.runs.list()
        lead = await gw.finished(lead.run_id)
        first = await record_nested_run(
            gw.db, lead, "first", created_at=lead.progress.created_at + 1
        )
        second = await record_nested_run(
            gw.db, lead, "second", status="running", created_at=lead.progress.created_at + 2
        )
        grandchild = await record_nested_run(gw.db, first, "deep", status="queued")

        shown = await get(client, f"/v1/runs/{lead.run_id}")
        assert (shown["parentRunId"], shown["depth"], shown["batchId"]) == (None, 1, None)
        assert shown["children"] == [
            {"runId": first.run_id, "label": "first", "status": "done", "depth": 2},
            {"runId": second.run_id, "label": "second", "status": "running", "depth": 2},
        ]
        child = await get(client, f"/v1/runs/{first.run_id}")
        assert (child["parentRunId"], child["depth"]) == (lead.run_id, 2)
        assert child["parentSessionKey"] == lead.child_session_key
        assert child["children"] == [
            {"runId": grandchild.run_id, "label": "deep", "status": "queued", "depth": 3}
        ]
        listed = (await get(client, "/v1/runs"))["runs"]
        depths = {r["runId"]: (r["parentRunId"], r["depth"]) for r in listed}
        assert depths[grandchild.run_id] == (first.run_id, 3)


def test_the_openapi_document_describes_the_tree_fields() -> None:
    schemas = openapi_document()["components"]["schemas"]
    run = schemas["Run"]
    for name in ("parentRunId", "depth", "batchId"):
        assert name in run["required"], name
    assert run["properties"]["depth"]["minimum"] == 1
    assert "children" not in run["properties"]
    detail = schemas["RunDetail"]
    assert "children" in detail["required"]
    child = detail["properties"]["children"]["items"]
    assert set(child["required"]) == {"runId", "label", "status", "depth"}
    assert child["additionalProperties"] is False
    one = openapi_document()["paths"]["/v1/runs/{runId}"]["get"]["responses"]["200"]
    assert one["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/RunDetail"
    }
    # A batch's runs are shown too: their announce was consumed by the follow-up.
    state = run["properties"]["announce"]["properties"]["state"]["anyOf"][0]["enum"]
    assert "consumed" in state
