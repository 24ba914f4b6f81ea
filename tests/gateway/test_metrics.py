"""Metrics: the event hooks, the scrape-time state of a real gateway, and ``GET /metrics``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from channels import Channel
from channels.memory import MemoryChannel
from gateway.api.keys import SCRAPE
from gateway.api.routes import route_defs
from gateway.llm import Usage
from gateway.metrics import CONTENT_TYPE, LaneSet, Metrics
from gateway.state import OutboxRecord, RunProgress, RunRecord, RunRequest, StateDB
from gateway.subagents import SpawnRequest
from tests.gateway.harness import Harness, running_gateway

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: bytes | str) -> Samples:
    """Every sample of a scrape by (name, labels)."""
    raw = text.decode() if isinstance(text, bytes) else text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(raw)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


@dataclass
class Host:
    """What a ``/metrics`` scrape reads: the services' parts and a Metrics."""

    metrics: Metrics
    db: StateDB
    lanes: LaneSet
    channels: dict[str, Channel]


def host_of(gw: Harness, metrics: Metrics) -> Host:
    return Host(metrics, gw.db, gw.lanes, gw.channels)


def finished(status: str, *, started: float | None, ended: float | None) -> RunRecord:
    return RunRecord(
        run_id="r1",
        child_session_key="agent:main:subagent:x",
        child_session_id="x",
        request=RunRequest(requester_agent_id="main", agent_id="main", task="t", model="test/m1"),
        progress=RunProgress(
            created_at=100.0,
            status=status,  # type: ignore[arg-type]
            started_at=started,
            ended_at=ended,
        ),
    )


async def test_hooks_count_runs_tokens_cost_announces_and_waits() -> None:
    metrics = Metrics()
    metrics.run_finished("done", "test/m1", 42.0)
    metrics.finished_run(finished("timeout", started=100.0, ended=130.0))
    metrics.finished_run(finished("cancelled", started=None, ended=101.0))  # never started
    metrics.model_usage("test/m1", Usage(input=100, output=20, cache_read=30), 0.25)
    metrics.model_usage("test/m1", Usage(input=10, output=5), None)
    metrics.announce_delivery("skipped")
    metrics.outbox_listener(
        OutboxRecord(
            channel="c", account="a", chat_id="x", text="t", created_at=0.0, state="failed"
        )
    )
    metrics.lane_wait("subagent", 0.2)
    metrics.lane_wait("subagent", 7.0)

    s = parse(generate(metrics))
    assert value(s, "herald_runs_finished_total", status="done", model="test/m1") == 1
    assert value(s, "herald_runs_finished_total", status="timeout", model="test/m1") == 1
    assert value(s, "herald_runs_finished_total", status="cancelled", model="test/m1") == 1
    assert value(s, "herald_run_duration_seconds_count", status="done") == 1
    assert value(s, "herald_run_duration_seconds_sum", status="timeout") == 30
    assert value(s, "herald_run_duration_seconds_count", status="cancelled") is None
    assert value(s, "herald_run_duration_seconds_bucket", status="done", le="60.0") == 1
    assert value(s, "herald_run_duration_seconds_bucket", status="done", le="30.0") == 0
    assert value(s, "herald_model_calls_total", model="test/m1") == 2
    assert value(s, "herald_model_tokens_total", model="test/m1", kind="input") == 110
    assert value(s, "herald_model_tokens_total", model="test/m1", kind="output") == 25
    assert value(s, "herald_model_tokens_total", model="test/m1", kind="cacheRead") == 30
    assert value(s, "herald_model_cost_usd_total", model="test/m1") == 0.25
    assert value(s, "herald_announce_deliveries_total", result="skipped") == 1
    assert value(s, "herald_announce_deliveries_total", result="failed") == 1
    assert value(s, "herald_announce_deliveries_total", result="delivered") == 0  # from 0
    assert value(s, "herald_lane_wait_seconds_count", lane="subagent") == 2
    assert value(s, "herald_lane_wait_seconds_bucket", lane="subagent", le="1.0") == 1


def generate(metrics: Metrics) -> bytes:
    return generate_latest(metrics.registry)


def test_each_gateway_has_its_own_registry() -> None:
    first, second = Metrics(), Metrics()
    first.announce_delivery("delivered")
    assert value(parse(generate(first)), "herald_announce_deliveries_total", result="delivered")
    assert (
        value(parse(generate(second)), "herald_announce_deliveries_total", result="delivered") == 0
    )
    assert not any(name.startswith("herald_") for name in REGISTRY._names_to_collectors)


async def test_a_scrape_reads_runs_lanes_outbox_and_channels_of_a_gateway(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        metrics = Metrics()
        metrics.watch_lanes(gw.lanes.all())
        gw.outbox.subscribe(metrics.outbox_listener)
        await gw.say("bg task: count me")
        run_id = (await gw.announce())[0].run_id
        assert run_id is not None
        await gw.delivery(run_id)
        await gw.runs_idle()  # the run's completion is written into the chat session too
        await asyncio.sleep(0)  # let the listener's bookkeeping run
        s = parse(await metrics.render(host_of(gw, metrics)))

    assert value(s, "herald_runs", status="done") == 1
    assert value(s, "herald_runs", status="queued") == 0
    assert value(s, "herald_outbox_items", state="delivered") == 1
    assert value(s, "herald_announce_deliveries_total", result="delivered") == 1
    assert value(s, "herald_channel_connected", channel="memory") == 1
    for lane in ("main", "subagent", "session"):
        assert value(s, "herald_lane_queued", lane=lane) == 0
        assert value(s, "herald_lane_active", lane=lane) == 0
    assert value(s, "herald_lane_max_concurrent", lane="subagent") == 1
    assert value(s, "herald_lane_max_concurrent", lane="main") == 4
    assert value(s, "herald_lane_jobs_total", lane="subagent", result="done") == 1
    assert value(s, "herald_lane_wait_seconds_count", lane="subagent") == 1
    # The state writer: the run's writes (and the chat's) were kept, none run again.
    commits = value(s, "herald_state_commits_total")
    writes = value(s, "herald_state_writes_total")
    assert commits is not None
    assert writes is not None
    assert writes >= commits >= 8  # a run alone makes eight
    assert value(s, "herald_state_writes_again_total", reason="conflict") == 0
    assert value(s, "herald_state_writes_again_total", reason="group") == 0


async def test_a_scrape_shows_work_in_flight(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        metrics = Metrics()
        await gw.say("hello")  # a chat session, so run updates reach the channel
        await gw.reply()
        context = await gw.context("agent:main:memory:channel:c1")
        slow = await gw.spawn(context, SpawnRequest(task="task-slow: a"))
        queued = await gw.spawn(context, SpawnRequest(task="task: b"))
        await gw.status(slow["runId"], "running")
        gw.channels["idle"] = MemoryChannel("idle")  # enabled, never started
        s = parse(await metrics.render(host_of(gw, metrics)))
        assert value(s, "herald_runs", status="running") == 1
        assert value(s, "herald_runs", status="queued") == 1
        assert value(s, "herald_lane_active", lane="subagent") == 1
        assert value(s, "herald_lane_queued", lane="subagent") == 1
        assert value(s, "herald_channel_connected", channel="memory") == 1
        assert value(s, "herald_channel_connected", channel="idle") == 0
        await gw.runs.abort(slow["runId"])
        await gw.runs.abort(queued["runId"])
        await gw.finished(slow["runId"])
        await gw.finished(queued["runId"])


async def test_a_closed_database_leaves_out_only_its_series(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        metrics = Metrics()
        await gw.db.close()
        s = parse(await metrics.render(host_of(gw, metrics)))
    assert value(s, "herald_runs", status="done") is None
    assert value(s, "herald_lane_max_concurrent", lane="main") == 4


async def test_metrics_route_serves_prometheus_text(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        metrics = Metrics()
        app = web.Application()
        app[SCRAPE] = lambda: host_of(gw, metrics)
        app.add_routes(route_defs("/metrics"))
        async with TestClient(TestServer(app)) as client:
            response = await client.get("/metrics")
            assert response.status == 200
            assert response.headers["Content-Type"] == CONTENT_TYPE
            s = parse(await response.text())
    assert value(s, "herald_channel_connected", channel="memory") == 1
    assert value(s, "herald_runs", status="done") == 0


async def test_the_wired_gateway_counts_a_run_end_to_end(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        await gw.say("bg task: wired")
        run_id = (await gw.announce())[0].run_id
        assert run_id is not None
        await gw.delivery(run_id)
        run = await gw.finished(run_id)
        await gw.runs_idle()  # the run's job counts it once its end is fully recorded
        metrics: Metrics = gw.metrics
        s = parse(await metrics.render(host_of(gw, metrics)))
    assert value(s, "herald_runs_finished_total", status="done", model="test/m1") == 1
    assert value(s, "herald_run_duration_seconds_count", status="done") == 1
    # The chat turn's calls count too: at least the run's own.
    usage = run.progress.usage
    tokens_out = value(s, "herald_model_tokens_total", model="test/m1", kind="output")
    assert tokens_out is not None
    assert tokens_out >= usage.output > 0
    cost = value(s, "herald_model_cost_usd_total", model="test/m1")
    assert cost is not None
    assert run.progress.cost_usd is not None
    assert cost >= run.progress.cost_usd > 0
    assert value(s, "herald_announce_deliveries_total", result="delivered") == 1
    assert value(s, "herald_lane_wait_seconds_count", lane="subagent") == 1
    assert value(s, "herald_lane_wait_seconds_count", lane="main") == 1


@pytest.mark.postgres
async def test_a_cluster_replica_labels_every_series_with_its_id(
    tmp_path: Path, pg_url: str
) -> None:
    config = {"cluster": {"replicaId": "replica-a"}}
    async with running_gateway(tmp_path, config=config, database_url=pg_url) as gw:
        samples = parse(await gw.metrics.render(host_of(gw, gw.metrics)))
    assert samples, "the scrape is empty"
    unlabelled = [name for name, labels in samples if ("replica", "replica-a") not in labels]
    assert unlabelled == []
    assert value(samples, "herald_runs", status="done", replica="replica-a") == 0
    assert value(samples, "herald_channel_connected", channel="memory", replica="replica-a") == 1


async def test_a_single_gateway_adds_no_replica_label(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        samples = parse(await gw.metrics.render(host_of(gw, gw.metrics)))
    assert not [name for name, labels in samples if any(k == "replica" for k, _ in labels)]
