"""Prometheus metrics of one gateway, served at ``GET /metrics``.

Two kinds of figures:

- **Events**, counted as they happen through the hooks below (the runtime, the sub-agent
  manager, the outbox and the lanes call them): finished runs and their run time, model
  tokens and cost by model, announce deliveries by result, lane wait times.
- **State**, read at scrape time: runs by status and outbox items by state (one grouped
  query each, on the state database's read thread), lane depth, activity and width, and
  each channel's connection state. Nothing is polled between scrapes.

In a cluster (``cluster.databaseUrl`` set) every sample also carries
``replica="<cluster.replicaId>"``. ``runs`` and ``outbox_items`` count the shared database,
so every replica reports the same figures: aggregate them with ``max``, not ``sum``.

Each :class:`Metrics` owns a private ``CollectorRegistry``, never the process-wide one, so
several gateways (tests start many) never share or collide on a series.

Series (every name starts ``herald_``): ``runs{status}``, ``runs_finished_total{status,model}``,
``run_duration_seconds{status}``, ``model_calls_total{model}``,
``model_tokens_total{model,kind}`` (kind: input, output, cacheRead, cacheWrite; input counts
every prompt token, cache reads and writes included), ``model_cost_usd_total{model}``,
``announce_deliveries_total{result}``, ``outbox_items{state}``, ``lane_queued{lane}``,
``lane_active{lane}``, ``lane_max_concurrent{lane}``, ``lane_jobs_total{lane,result}``,
``schedule_occurrences_total{job,outcome}``,
``lane_wait_seconds{lane}``, ``channel_connected{channel}``, ``disk_full`` (1 while the state
directory's disk is full) and ``disk_full_refusals_total`` (writes it refused).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from channels import Channel
from gateway.llm import Usage
from gateway.state import RUN_STATUSES, OutboxRecord, RunRecord, StateDB, StateError
from gateway.state.connection import Connection
from lanes import Lane, LaneStats

logger = logging.getLogger(__name__)

METRICS_PATH: Final = "/metrics"
#: The classic text format: every Prometheus version (and most other scrapers) reads it.
CONTENT_TYPE: Final = CONTENT_TYPE_PLAIN_0_0_4
#: ``announce_delivery`` results; each starts at 0 so a rate() sees the first event.
ANNOUNCE_RESULTS: Final = ("delivered", "failed", "retry", "skipped", "no_origin")
OUTBOX_STATES: Final = ("pending", "sending", "delivered", "failed")
#: Sub-agent runs take seconds to hours.
RUN_BUCKETS: Final = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0)
#: Lane waits: ~0 when there is room, up to a long sub-agent run when the lane is full.
WAIT_BUCKETS: Final = (0.001, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)


class LaneSet(Protocol):
    """The lanes of a gateway (:class:`gateway.parts.lanes.Lanes`)."""

    def all(self) -> tuple[Lane, ...]: ...


class ScrapeSource(Protocol):
    """What a scrape reads: the state database, the lanes and the channels."""

    @property
    def db(self) -> StateDB: ...

    @property
    def lanes(self) -> LaneSet: ...

    @property
    def channels(self) -> Mapping[str, Channel]: ...


class MetricsHost(ScrapeSource, Protocol):
    """A scrape source that also holds the gateway's :class:`Metrics`."""

    @property
    def metrics(self) -> Metrics: ...


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """Scrape-time state, gathered before the text is generated."""

    runs: dict[str, int] | None
    outbox: dict[str, int] | None
    lanes: list[LaneStats] = field(default_factory=list)
    channels: dict[str, bool] = field(default_factory=dict)
    disk_full: bool = False
    disk_refusals: int = 0
    #: The state writer's commits, writes kept, writes run again after their group's
    #: transaction was lost, writes retried after a conflict (None: opened read-only).
    writer: tuple[int, int, int, int] | None = None


def _count_rows(conn: Connection) -> tuple[dict[str, int], dict[str, int]]:
    runs = conn.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall()
    outbox = conn.execute("SELECT state, count(*) FROM outbox GROUP BY state").fetchall()
    return {row[0]: row[1] for row in runs}, {row[0]: row[1] for row in outbox}


def _writer_counts(db: StateDB) -> tuple[int, int, int, int] | None:
    groups = db.write_groups
    if groups is None:
        return None
    return groups.commits, groups.writes, groups.rerun, db.write_conflicts


class _StateCollector:
    """Yields the scrape-time series from the snapshot :meth:`Metrics.render` just took."""

    def __init__(self) -> None:
        self.snapshot: _Snapshot | None = None

    def describe(self) -> list[Metric]:
        return []  # nothing to describe before a scrape: no registration-time collect()

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        if snap is None:
            return
        if snap.runs is not None:
            runs = GaugeMetricFamily(
                "herald_runs", "Sub-agent runs in the state database by status", labels=["status"]
            )
            for status in RUN_STATUSES:
                runs.add_metric([status], snap.runs.get(status, 0))
            yield runs
        if snap.outbox is not None:
            outbox = GaugeMetricFamily(
                "herald_outbox_items", "Announce outbox items by state", labels=["state"]
            )
            for state in OUTBOX_STATES:
                outbox.add_metric([state], snap.outbox.get(state, 0))
            yield outbox
        queued = GaugeMetricFamily("herald_lane_queued", "Jobs waiting on a lane", labels=["lane"])
        active = GaugeMetricFamily("herald_lane_active", "Jobs running on a lane", labels=["lane"])
        width = GaugeMetricFamily("herald_lane_max_concurrent", "A lane's width", labels=["lane"])
        jobs = CounterMetricFamily(
            "herald_lane_jobs", "Jobs that left a lane, by result", labels=["lane", "result"]
        )
        for stats in snap.lanes:
            queued.add_metric([stats.name], stats.queued)
            active.add_metric([stats.name], stats.active)
            width.add_metric([stats.name], stats.max_concurrent)
            jobs.add_metric([stats.name, "done"], stats.done)
            jobs.add_metric([stats.name, "failed"], stats.failed)
            jobs.add_metric([stats.name, "cancelled"], stats.cancelled)
        yield from (queued, active, width, jobs)
        connected = GaugeMetricFamily(
            "herald_channel_connected",
            "1 while a chat channel is connected, else 0",
            labels=["channel"],
        )
        for name, up in sorted(snap.channels.items()):
            connected.add_metric([name], 1 if up else 0)
        yield connected
        yield GaugeMetricFamily(
            "herald_disk_full",
            "1 while the state directory's disk is full (writes wait, chats get an apology)",
            value=1 if snap.disk_full else 0,
        )
        yield CounterMetricFamily(
            "herald_disk_full_refusals",
            "Writes the disk refused for want of space",
            value=snap.disk_refusals,
        )
        if snap.writer is not None:
            commits, writes, rerun, conflicts = snap.writer
            yield CounterMetricFamily(
                "herald_state_commits", "State transactions committed", value=commits
            )
            yield CounterMetricFamily(
                "herald_state_writes",
                "State writes committed (several share a commit)",
                value=writes,
            )
            again = CounterMetricFamily(
                "herald_state_writes_again",
                "State writes run again: after a conflict with another connection, or because"
                " the transaction of their group was lost (one conflict condemns a group)",
                labels=["reason"],
            )
            again.add_metric(["conflict"], conflicts)
            again.add_metric(["group"], rerun)
            yield again


class Metrics:
    """The gateway's metrics: event hooks, and :meth:`render` for a scrape."""

    def __init__(self, *, replica: str | None = None) -> None:
        self.registry = CollectorRegistry()
        #: In a cluster, every series carries ``replica="<cluster.replicaId>"``, so that one
        #: Prometheus scraping every replica keeps their series apart.
        self.replica = replica
        r = self.registry
        self._runs_finished = Counter(
            "herald_runs_finished",
            "Sub-agent runs that reached a final status",
            ["status", "model"],
            registry=r,
        )
        self._run_seconds = Histogram(
            "herald_run_duration_seconds",
            "Sub-agent run time, start to end (the announce turn not included)",
            ["status"],
            buckets=RUN_BUCKETS,
            registry=r,
        )
        self._calls = Counter("herald_model_calls", "Model calls", ["model"], registry=r)
        self._tokens = Counter(
            "herald_model_tokens", "Tokens by model and kind", ["model", "kind"], registry=r
        )
        self._cost = Counter(
            "herald_model_cost_usd", "Estimated USD spent by model", ["model"], registry=r
        )
        self._announces = Counter(
            "herald_announce_deliveries", "Announce outcomes by result", ["result"], registry=r
        )
        for result in ANNOUNCE_RESULTS:
            self._announces.labels(result)
        self._lane_wait = Histogram(
            "herald_lane_wait_seconds",
            "Time jobs waited on a lane before starting",
            ["lane"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self._mcp_up = Gauge(
            "herald_mcp_server_up", "1 while an MCP server is connected", ["server"], registry=r
        )
        self._mcp_calls = Counter(
            "herald_mcp_calls",
            "MCP tool calls by server and outcome (ok, error, timeout, failed)",
            ["server", "outcome"],
            registry=r,
        )
        self._occurrences = Counter(
            "herald_schedule_occurrences",
            "Scheduled occurrences by job and outcome (ran, missed, skipped)",
            ["job", "outcome"],
            registry=r,
        )
        self._state = _StateCollector()
        r.register(self._state)

    def __repr__(self) -> str:
        return f"<Metrics registry={id(self.registry):#x}>"

    # -- event hooks ----------------------------------------------------------------------

    def run_finished(self, status: str, model: str | None, runtime_seconds: float | None) -> None:
        """A sub-agent run reached its final ``status``; ``runtime_seconds`` is None for a
        run that never started (cancelled while queued)."""
        self._runs_finished.labels(status, model or "unknown").inc()
        if runtime_seconds is not None:
            self._run_seconds.labels(status).observe(max(0.0, runtime_seconds))

    def finished_run(self, run: RunRecord) -> None:
        """:meth:`run_finished` for a run record that has its final status."""
        runtime = (
            run.progress.ended_at - run.progress.started_at
            if run.progress.ended_at is not None and run.progress.started_at is not None
            else None
        )
        self.run_finished(run.progress.status, run.request.model, runtime)

    def model_usage(self, model: str, usage: Usage, cost_usd: float | None) -> None:
        """One model call's usage; ``model`` should be the configured ``<provider>/<id>``
        (bounded), not the provider's reported snapshot name."""
        self._calls.labels(model).inc()
        for kind, count in (
            ("input", usage.input),
            ("output", usage.output),
            ("cacheRead", usage.cache_read),
            ("cacheWrite", usage.cache_write),
        ):
            if count > 0:
                self._tokens.labels(model, kind).inc(count)
        if cost_usd is not None and cost_usd > 0:
            self._cost.labels(model).inc(cost_usd)

    def announce_delivery(self, result: str) -> None:
        """An announce was ``delivered``, ``failed`` for good, will ``retry``, was
        ``skipped`` (ANNOUNCE_SKIP) or had ``no_origin`` chat to go to."""
        self._announces.labels(result).inc()

    def lane_wait(self, lane: str, seconds: float) -> None:
        """A job started on ``lane`` after waiting ``seconds``."""
        self._lane_wait.labels(lane).observe(max(0.0, seconds))

    def mcp_server_up(self, server: str, up: bool) -> None:
        """MCP server ``server`` connected (``up``) or not."""
        self._mcp_up.labels(server).set(1 if up else 0)

    def mcp_call(self, server: str, outcome: str) -> None:
        """One MCP tool call ended: ``ok``, ``error`` (the tool said so), ``timeout``
        (cancelled) or ``failed`` (no answer: the server was down or broke)."""
        self._mcp_calls.labels(server, outcome).inc()

    def schedule_occurrence(self, job: str, outcome: str) -> None:
        """An occurrence of scheduled job ``job`` was recorded ``ran``, ``missed`` or
        ``skipped``."""
        self._occurrences.labels(job, outcome).inc()

    # -- wiring helpers -------------------------------------------------------------------

    def watch_lanes(self, lanes: Iterable[Lane]) -> None:
        """Feed each lane's wait times (its ``on_wait`` hook) into ``lane_wait_seconds``."""
        for lane in lanes:
            lane.on_wait = functools.partial(self.lane_wait, lane.name)

    def outbox_listener(self, item: OutboxRecord) -> None:
        """An :meth:`Outbox.subscribe` listener: counts items delivered or failed for good."""
        if item.state in ("delivered", "failed"):
            self.announce_delivery(item.state)

    # -- scraping -------------------------------------------------------------------------

    async def render(self, source: ScrapeSource) -> bytes:
        """The metrics in Prometheus text format, state series read from ``source`` now.

        The database counts are gathered first (awaiting the read thread); the text is then
        generated without awaiting, so concurrent scrapes cannot mix their snapshots. A
        closed or unreadable database leaves out only its own series.
        """
        runs: dict[str, int] | None = None
        outbox: dict[str, int] | None = None
        try:
            runs, outbox = await source.db.read(_count_rows)
        except StateError as exc:
            logger.warning("metrics: state database not readable: %s", exc)
        snapshot = _Snapshot(
            runs=runs,
            outbox=outbox,
            lanes=[lane.stats() for lane in source.lanes.all()],
            channels={name: channel.connected for name, channel in source.channels.items()},
            disk_full=source.db.space.full,
            disk_refusals=source.db.space.refusals,
            writer=_writer_counts(source.db),
        )
        self._state.snapshot = snapshot
        try:
            if self.replica is None:
                return generate_latest(self.registry)
            return generate_latest(_Labelled(self.registry, {"replica": self.replica}))
        finally:
            self._state.snapshot = None


#: The gateway's metrics, made with the app (every part counts into them).
METRICS = web.AppKey("metrics", Metrics)


class _Labelled:
    """A view of a registry whose every sample carries ``labels`` as well (what Prometheus
    calls constant labels, which prometheus_client has no direct way to set)."""

    def __init__(self, registry: CollectorRegistry, labels: Mapping[str, str]) -> None:
        self._registry = registry
        self._labels = dict(labels)

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            family.samples = [
                sample._replace(labels={**sample.labels, **self._labels})
                for sample in family.samples
            ]
            yield family
