"""Issue 17: several ``herald run`` replicas on one PostgreSQL database — throughput as
replicas are added, the spawn accept path on PostgreSQL, and failover after ``kill -9``.

Run with ``python -m bench.cluster``. It starts a PostgreSQL server of its own (Debian's
``postgresql`` binaries, as the tests do: :mod:`tests.postgres`), with the server's
production defaults (``fsync`` and ``synchronous_commit`` on), and real ``herald run``
subprocesses through the test suite's cluster harness (:mod:`tests.cluster.replicas`:
Slack in HTTP mode against the wire-level fake Slack, the scripted model). Reused rather
than copied, since a second harness would only drift.

**Throughput.** 1, 2 and 3 replicas, each size on a fresh schema and state directory,
``agent.subagents.maxConcurrent`` 8 each, the model answering a run's task after
:data:`MODEL_SECONDS` (an announce turn's call answers at once). Each signed Slack event,
sent to a random replica as a load balancer would, is a mention whose chat turn spawns
``per_batch`` runs; each run is announced in the mention's thread. After a warm-up batch per
replica, ``batches`` mentions are sent at once; the figure is runs per second from the first
event sent to the last announce posted to Slack (each checked posted exactly once). The
baseline is one replica, so the ratio is the speed-up. Goal: ≥ 2.5× with 3 replicas. The
same mentions on one ``herald run`` on SQLite (the same harness, no ``cluster.databaseUrl``)
give the baseline of the cluster's CPU per run, replicas and PostgreSQL together. Goal: ≤ 3×.
For information, the state writes the replicas ran again (after a conflict with another
replica's, or because one condemned their group) against those they kept, from their
``/metrics``.
The same with the model answering after :data:`IO_MODEL_SECONDS` (1 s), 1 and 3 replicas of
width 8 each: bound by the model's latency, not by these 2 cores, so three replicas should
give nearly three times one. Goal: ≥ 2.7×.

**Spawn accept p99.** :func:`bench.spawn.accept_latencies` (``POST /v1/tools/invoke``
``sessions_spawn`` from a load client in another process, the ``subagent`` lane held so
every spawn queues) on a gateway with ``cluster.databaseUrl``, beside the same on SQLite in
the same run. Ratio PostgreSQL ÷ SQLite; goal for the p99: ≤ 2×.

**Failover.** Three replicas, Discord enabled against the wire-level fake Discord
(:mod:`tests.fakes.discord`), default timings (a worker heartbeat every 10 s, dead after
30 s, checked every 10 s; a standby tries Discord's lock every 5 s). Once every mention's
runs are recorded (a mention whose turn has not run yet would die with its replica) and
every worker has all its slots busy with runs of :data:`FAILOVER_RUN_SECONDS`, the replica
holding Discord's gateway connection (``/readyz`` ``channelStates``) is killed with
SIGKILL. Figures: seconds from the kill to the first ``resumed`` event in a transcript (a
run of the dead replica taken over and resumed by a survivor), and to the next IDENTIFY
Discord receives (a survivor connected). Every run must end ``done``, announced once, and
Discord be held by a survivor. These are absolute seconds; the baseline column is the
goal, so a ratio ≤ 1 meets it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import psycopg
from prometheus_client.parser import text_string_to_metric_families

from bench import spawn
from bench._common import Row, format_table, percentile, row
from gateway.constants import SUBAGENT_LANE
from tests import postgres
from tests.cluster.replicas import Cluster, announces, batch_script, running_cluster
from tests.fakes.discord import FakeDiscord
from tests.fakes.slack import FakeSlack

#: Replica counts of the throughput benchmark; the first is the baseline.
REPLICAS = (1, 2, 3)
BATCHES = 60
PER_BATCH = 10
WIDTH = 8
#: The scripted model's latency for a run's task (an announce is answered at once).
MODEL_SECONDS = 0.2
SPEEDUP_GOAL = 2.5
#: A cluster run's CPU (replicas and PostgreSQL) against the same run in one SQLite process.
CPU_GOAL = 3.0
#: The spawn's accept p99 on PostgreSQL against SQLite's.
ACCEPT_P99_GOAL = 2.0
#: The I/O-bound throughput: a model call of 1 s, 1 and 3 replicas; runs a multiple of the
#: 24 slots of three replicas (36 mentions of 8), so no replica idles at the end.
IO_MODEL_SECONDS = 1.0
IO_REPLICAS = (1, 3)
IO_BATCHES = 36
IO_PER_BATCH = 8
IO_SPEEDUP_GOAL = 2.7
CALLS = 10_000
CLIENTS = 64
#: Failover: mentions (of ``per_batch`` runs each), each run's model call, the goals.
FAILOVER_BATCHES = 6
FAILOVER_RUN_SECONDS = 5.0
RESUME_GOAL_SECONDS = 60.0
DISCORD_GOAL_SECONDS = 30.0
FAILOVER_REPLICAS = 3
QUICK: dict[str, Any] = {
    "replicas": (1, 2),
    "batches": 4,
    "per_batch": 4,
    "calls": 200,
    "clients": 8,
    # No failover part: it waits out the default stalled-worker timeout (30 s) and the
    # Discord lock's, whatever its size; tests/cluster/test_failover.py holds the promise.
    "failover_batches": 0,
    "io_replicas": (1, 2),
    "io_batches": 2,
    "io_per_batch": 4,
}
#: Guards against a hung benchmark; never statements about speed.
GUARD_SECONDS = 600.0
POLL_SECONDS = 0.02
#: Runs recorded, and runs a worker holds now, cluster-wide.
_COUNTS = (
    "SELECT (SELECT count(*) FROM runs),"
    " (SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing')"
)

T = TypeVar("T")


# -- throughput ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _fake_slack() -> AsyncIterator[FakeSlack]:
    slack = FakeSlack()
    await slack.start()
    try:
        yield slack
    finally:
        await slack.close()


def _check_once(slack: FakeSlack, runs: int) -> None:
    counts = announces(slack.posts)
    twice = [key for key, n in counts.items() if n > 1]
    if len(counts) != runs or twice:
        raise SystemExit(f"bench.cluster: {len(counts)} runs announced of {runs}; twice: {twice}")


def _cpu_seconds(pid: int, *, reaped: bool = False) -> float:
    """CPU seconds (user + system) process ``pid`` used so far, with those of its
    children it has waited for when ``reaped`` (Linux ``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    # Fields 14-17 of proc(5), counted here from field 3: utime, stime, cutime, cstime.
    ticks = sum(int(f) for f in fields[11 : 15 if reaped else 13])
    return ticks / os.sysconf("SC_CLK_TCK")


def _server_cpu_seconds(server: postgres.PostgresServer) -> float:
    """CPU seconds of the whole PostgreSQL server: the postmaster, the backends it reaped
    (connections that ended) and those alive now."""
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    total = _cpu_seconds(postmaster, reaped=True)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent == postmaster:
                total += _cpu_seconds(int(entry.name))
    return total


def _cluster_cpu_seconds(
    server: postgres.PostgresServer, cluster: Cluster, *, sqlite: bool = False
) -> float:
    replicas = sum(_cpu_seconds(cluster.daemon(i).process.pid) for i in range(len(cluster)))
    return replicas + (0.0 if sqlite else _server_cpu_seconds(server))


async def _runs_per_second(
    server: postgres.PostgresServer,
    replicas: int,
    batches: int,
    per_batch: int,
    model_seconds: float = MODEL_SECONDS,
    *,
    sqlite: bool = False,
) -> tuple[float, float, tuple[float, float]]:
    """Runs per second of ``batches`` mentions of ``per_batch`` spawns on ``replicas``, CPU
    ms per run of the replicas and PostgreSQL together, and the state writes run again and
    kept over the whole run (the replicas' ``/metrics``); with ``sqlite``, one process on
    SQLite instead (the same harness, no ``cluster.databaseUrl``)."""
    script = batch_script(replicas + batches, per_batch, job_seconds=model_seconds)
    # On SQLite the config's cluster section is overridden: no database URL at all.
    config = {"cluster": {"databaseUrl": None}} if sqlite else None
    with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
        async with (
            _fake_slack() as slack,
            running_cluster(
                Path(tmp),
                database_url=server.fresh_url(),
                slack=slack,
                script=script,
                replicas=replicas,
                width=WIDTH,
                config=config,
            ) as cluster,
        ):
            for index in range(replicas):  # warm-up: a batch on each replica
                await cluster.mention(f"batch {index:02d}", to=index)
            warm = replicas * per_batch
            await slack.wait_for(lambda: len(announces(slack.posts)) >= warm, within=GUARD_SECONDS)
            total = warm + batches * per_batch
            cpu = _cluster_cpu_seconds(server, cluster, sqlite=sqlite)
            started = time.perf_counter()
            await asyncio.gather(
                *(cluster.mention(f"batch {b:02d}") for b in range(replicas, replicas + batches))
            )
            await slack.wait_for(lambda: len(announces(slack.posts)) >= total, within=GUARD_SECONDS)
            elapsed = time.perf_counter() - started
            cpu = _cluster_cpu_seconds(server, cluster, sqlite=sqlite) - cpu
            await asyncio.sleep(1)  # an announce posted twice would show up now
            _check_once(slack, total)
            again = await _metric(cluster, "herald_state_writes_again_total")
            kept = await _metric(cluster, "herald_state_writes_total")
    runs = batches * per_batch
    return runs / elapsed, 1000 * cpu / runs, (again, kept)


async def _throughput(
    server: postgres.PostgresServer,
    replicas: tuple[int, ...],
    batches: int,
    per_batch: int,
    *,
    model_seconds: float = MODEL_SECONDS,
    goal: float = SPEEDUP_GOAL,
    cpu: bool = True,
) -> list[Row]:
    measured = {
        n: await _runs_per_second(server, n, batches, per_batch, model_seconds) for n in replicas
    }
    rates = {n: rate for n, (rate, _, _) in measured.items()}
    base, top = replicas[0], replicas[-1]
    label = f"{batches * per_batch:,} runs, model {model_seconds:g} s, width {WIDTH} each"
    rows = []
    for n in replicas[1:]:
        rows.append(
            row(
                f"runs/s, {n} replicas vs {base} ({label})",
                rates[n],
                rates[base],
                f"ratio >= {goal}" if n == 3 else "report",
                digits=1,
            )
        )
    if not cpu:
        return rows
    _, sqlite_cpu, _ = await _runs_per_second(server, 1, batches, per_batch, sqlite=True)
    rows.append(
        row(
            f"  CPU ms per run, replicas + PostgreSQL, {top} replicas vs {base}",
            measured[top][1],
            measured[base][1],
            "(information)",
            digits=2,
        )
    )
    rows.append(
        row(
            f"  CPU ms per run, {top} replicas + PostgreSQL vs one process on SQLite",
            measured[top][1],
            sqlite_cpu,
            f"ratio <= {CPU_GOAL:g}",
            digits=2,
        )
    )
    again, kept = measured[top][2]
    rows.append(
        row(
            f"  state writes run again (a conflict, a condemned group) vs kept, {top} replicas",
            again,
            kept,
            "(information)",
            digits=0,
        )
    )
    return rows


# -- spawn accept -------------------------------------------------------------------------


async def _accept(server: postgres.PostgresServer, calls: int, clients: int) -> list[Row]:
    sqlite, _ = await spawn.accept_latencies(calls, clients)
    cluster = {"databaseUrl": server.fresh_url(), "replicaId": "bench-accept"}
    pg, _ = await spawn.accept_latencies(calls, clients, cluster=cluster)
    label = f"{calls:,} calls, {clients} clients"
    ms = 1000.0
    return [
        row(
            f"spawn accept p50 ms, PostgreSQL vs SQLite ({label})",
            percentile(pg, 50) * ms,
            percentile(sqlite, 50) * ms,
            "report",
        ),
        row(
            f"spawn accept p99 ms, PostgreSQL vs SQLite ({label})",
            percentile(pg, 99) * ms,
            percentile(sqlite, 99) * ms,
            f"ratio <= {ACCEPT_P99_GOAL}",
        ),
    ]


# -- failover -----------------------------------------------------------------------------


async def _until(check: Callable[[], Awaitable[T | None]]) -> T:
    """Poll ``check`` until it returns something other than None."""
    async with asyncio.timeout(GUARD_SECONDS):
        while True:
            found = await check()
            if found is not None:
                return found
            await asyncio.sleep(POLL_SECONDS)


async def _get(url: str) -> str | None:
    """A replica's answer to ``GET url`` (None when it does not answer)."""
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http,
            http.get(url) as response,
        ):
            return await response.text()
    return None


async def _discord_holder(cluster: Cluster) -> int | None:
    """The replica whose ``/readyz`` says it holds Discord's connection, once exactly one
    does."""
    holders = []
    for index in cluster.live():
        body = await _get(f"{cluster.url(index)}/readyz")
        states = json.loads(body).get("channelStates", {}) if body else {}
        if states.get("discord") == "connected":
            holders.append(index)
    return holders[0] if len(holders) == 1 else None


async def _metric(cluster: Cluster, name: str, **labels: str) -> float:
    """The sum over the cluster's replicas of their samples of ``name`` with ``labels``."""
    total = 0.0
    for index in range(len(cluster)):
        text = await _get(f"{cluster.url(index)}/metrics") or ""
        total += sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == name and labels.items() <= sample.labels.items()
        )
    return total


async def _executing(cluster: Cluster, index: int) -> int:
    """Runs executing on replica ``index`` now (its ``herald_lane_active`` gauge)."""
    text = await _get(f"{cluster.url(index)}/metrics") or ""
    return int(
        sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "herald_lane_active" and sample.labels.get("lane") == SUBAGENT_LANE
        )
    )


async def _query(url: str, sql: str) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        return await (await conn.execute(sql)).fetchall()


def _first_resumed(state_dir: Path, since: float) -> float | None:
    """The earliest ``resumed`` event (epoch seconds) written at or after ``since``."""
    found: list[float] = []
    for path in (state_dir / "agents").glob("*/sessions/*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if record.get("type") == "event" and record.get("event") == "resumed":
                    at = dt.datetime.fromisoformat(record["timestamp"]).timestamp()
                    if at >= since - 0.001:  # transcript times are rounded to the ms
                        found.append(at)
    return min(found) if found else None


async def _failover(server: postgres.PostgresServer, batches: int, per_batch: int) -> list[Row]:
    url = server.fresh_url()
    runs = batches * per_batch
    script = batch_script(batches, per_batch, job_seconds=FAILOVER_RUN_SECONDS)
    with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
        async with _fake_slack() as slack, FakeDiscord() as discord:
            config = {
                "channels": {
                    "discord": {
                        "enabled": True,
                        "token": discord.token,
                        "apiBaseUrl": discord.api_base_url,
                        "gatewayUrl": discord.gateway_url,
                    }
                }
            }
            async with running_cluster(
                Path(tmp),
                database_url=url,
                slack=slack,
                script=script,
                replicas=FAILOVER_REPLICAS,
                width=WIDTH,
                config=config,
            ) as cluster:
                holder = await _until(lambda: _discord_holder(cluster))
                identified = len(discord.identifies)
                for batch in range(batches):
                    await cluster.mention(f"batch {batch:02d}")
                busy = min(runs, FAILOVER_REPLICAS * WIDTH)

                async def all_busy() -> bool | None:
                    # Every mention's runs recorded (a mention whose turn had not run yet
                    # would die with the replica: Slack had its 200), every slot busy.
                    counts = await _query(url, _COUNTS)
                    full = counts[0] == (runs, busy) and await _executing(cluster, holder) > 0
                    return True if full else None

                await _until(all_busy)
                killed_at, killed = time.time(), time.perf_counter()
                cluster.daemon(holder).process.send_signal(signal.SIGKILL)

                async def reconnected() -> float | None:
                    identifies = len(discord.identifies) > identified
                    return time.perf_counter() - killed if identifies else None

                async def resumed() -> float | None:
                    at = await asyncio.to_thread(_first_resumed, cluster.state_dir, killed_at)
                    return None if at is None else at - killed_at

                discord_seconds, resume_seconds = await asyncio.gather(
                    _until(reconnected), _until(resumed)
                )
                await cluster.kill(holder)
                new_holder = await _until(lambda: _discord_holder(cluster))
                await slack.wait_for(
                    lambda: len(announces(slack.posts)) >= runs, within=GUARD_SECONDS
                )
                await asyncio.sleep(1)  # an announce posted twice would show up now
                _check_once(slack, runs)
                statuses = await _query(url, "SELECT status, count(*) FROM runs GROUP BY status")
                if statuses != [("done", runs)] or new_holder == holder:
                    raise SystemExit(f"bench.cluster: runs {statuses}, Discord on {new_holder}")
    label = f"{FAILOVER_REPLICAS} replicas, {runs} runs of {FAILOVER_RUN_SECONDS:g} s"
    return [
        row(
            f"failover s, kill -9 to first run resumed on a survivor ({label}) vs goal",
            resume_seconds,
            RESUME_GOAL_SECONDS,
            f"herald <= {RESUME_GOAL_SECONDS:g}",
            digits=2,
        ),
        row(
            f"failover s, kill -9 of Discord's holder to a survivor's IDENTIFY ({label}) vs goal",
            discord_seconds,
            DISCORD_GOAL_SECONDS,
            f"herald <= {DISCORD_GOAL_SECONDS:g}",
            digits=2,
        ),
    ]


# -- running ------------------------------------------------------------------------------


def _server() -> postgres.PostgresServer:
    binaries = postgres.bin_dir()
    if binaries is None:
        raise SystemExit(f"bench.cluster: {postgres.missing_message()}")
    server = postgres.PostgresServer(binaries, durable=True)
    try:
        server.start()
    except Exception:
        server.stop()
        raise
    return server


async def _measure(
    replicas: tuple[int, ...],
    batches: int,
    per_batch: int,
    calls: int,
    clients: int,
    failover_batches: int,
    io: tuple[tuple[int, ...], int, int],
) -> list[Row]:
    server = await asyncio.to_thread(_server)
    try:
        rows = await _throughput(server, replicas, batches, per_batch)
        rows += await _accept(server, calls, clients)
        if failover_batches:
            rows += await _failover(server, failover_batches, per_batch)
        io_replicas, io_batches, io_per_batch = io
        rows += await _throughput(
            server,
            io_replicas,
            io_batches,
            io_per_batch,
            model_seconds=IO_MODEL_SECONDS,
            goal=IO_SPEEDUP_GOAL,
            cpu=False,
        )
    finally:
        await asyncio.to_thread(server.stop)
    return rows


def run(
    *,
    replicas: tuple[int, ...] = REPLICAS,
    batches: int = BATCHES,
    per_batch: int = PER_BATCH,
    calls: int = CALLS,
    clients: int = CLIENTS,
    failover_batches: int = FAILOVER_BATCHES,
    io_replicas: tuple[int, ...] = IO_REPLICAS,
    io_batches: int = IO_BATCHES,
    io_per_batch: int = IO_PER_BATCH,
) -> list[Row]:
    """Run the cluster benchmarks; one row per figure."""
    io = (io_replicas, io_batches, io_per_batch)
    return asyncio.run(_measure(replicas, batches, per_batch, calls, clients, failover_batches, io))


def main() -> None:
    """Print the benchmark's rows as a small table."""
    print(format_table(run()))


if __name__ == "__main__":
    main()
