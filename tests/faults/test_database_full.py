"""The state database's disk fills up under running runs and chats, then space is freed.

How the disk fills: ``PRAGMA max_page_count`` on the gateway's own writer connection makes
SQLite answer ``SQLITE_FULL`` ("database or disk is full") for every write that needs a page
past it — what SQLite answers when the volume has no room. SQLite never lowers the limit
below the pages in use, so ``max_page_count = 1`` caps the database at its current size;
raising it again is the operator freeing space. No root and no tiny mount are needed.

As on a real full disk, writes that fit in pages the database already has still go through.
The runs here answer with more than a page of text, so recording a run's end needs new
pages: every run in flight is stranded for as long as the disk is full. A new chat needs a
row for its session; :func:`fill_last_page` creates sessions until SQLite refuses one, and a
chat whose row is larger cannot fit after it.

The promises checked: one log line when the disk fills and one when space is back, no
tracebacks meanwhile; the WAL truncated when space is back; stranded runs final and
announced once, live and across a restart; a new chat answered with the apology while full
and normally after.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

import gateway.state.diskfull as disk_state
import gateway.subagents.manager as run_manager
from gateway.agent import DISK_FULL_REPLY
from gateway.api.keys import DATABASE, DISK_FULL, READINESS, SCRAPE
from gateway.api.routes import route_defs
from gateway.constants import STATE_DB_NAME
from gateway.state import DiskFullError, Origin, RunRecord, SqliteStateDB
from gateway.state.connection import Connection
from gateway.state.sqlite import SqliteConnection
from tests import postgres
from tests.faults._support import chat_context, duplicates, spawn_runs, wait_final
from tests.gateway.harness import TEST_SCRIPT, Harness, running_gateway
from tests.gateway.test_metrics import parse, value

ORIGIN = Origin(channel="memory", account="default", chat_id="c1", chat_type="channel")
#: Guard against a hung gateway; never an assertion about speed.
GUARD_SECONDS = 20.0
#: A run's answer: more than a 4 KB page, so recording it needs new pages.
ANSWER_BYTES = 6000
RUNS = 6
CONFIG = {"agent": {"subagents": {"maxConcurrent": 4}}}
#: Sessions made to fill the last page of the table: far more than one page holds.
MAX_FILLERS = 200


def script() -> dict[str, Any]:
    """The harness script plus ``job <x>`` tasks answering ``did <x>`` and a long tail."""
    rules = copy.deepcopy(TEST_SCRIPT)
    answer = "did $1 " + "x" * ANSWER_BYTES
    rules["rules"].insert(0, {"match": r"^job (.+)$", "reply": answer, "delaySeconds": 0.05})
    return rules


def _limit(conn: Connection, pages: int) -> None:
    conn.execute(f"PRAGMA max_page_count = {pages}")


async def fill_disk(gw: Harness) -> None:
    await gw.db.write(lambda conn: _limit(conn, 1))


async def free_space(gw: Harness) -> None:
    await gw.db.write(lambda conn: _limit(conn, 1_000_000_000))


def wal_size(state: Path) -> int:
    wal = state / f"{STATE_DB_NAME}-wal"
    return wal.stat().st_size if wal.exists() else 0


async def strand_runs(gw: Harness, count: int) -> list[str]:
    """Spawn ``count`` runs and fill the disk under them; return once each was refused.

    The sub-agent lane going idle means every run's job has returned: with the disk full
    none can have recorded its end, so each is waiting for space (asserted here).
    """
    ctx = await chat_context(gw, ORIGIN)
    run_ids = await spawn_runs(gw, ctx, [f"job {n}" for n in range(count)])
    await fill_disk(gw)
    await stranded(gw, run_ids)
    return run_ids


async def stranded(gw: Harness, run_ids: list[str]) -> None:
    async with asyncio.timeout(GUARD_SECONDS):  # a hang guard
        await gw.lanes.subagent.join()
    runs = [await gw.db.runs.get(run_id) for run_id in run_ids]
    assert [r.progress.status if r else None for r in runs] == ["running"] * len(run_ids), runs
    assert gw.db.space.full


async def fill_last_page(gw: Harness) -> None:
    """Create sessions (as chats ``f0``, ``f1`` … would) until SQLite refuses one."""
    for n in range(MAX_FILLERS):
        origin = Origin(channel="memory", account="default", chat_id=f"f{n}", chat_type="channel")
        try:
            await gw.store.ensure(f"agent:main:memory:channel:f{n}", origin=origin)
        except DiskFullError:
            return
    raise AssertionError(f"{MAX_FILLERS} sessions fitted in a full database")


async def settled(gw: Harness, run_ids: list[str]) -> list[RunRecord]:
    """The runs once final and their announces settled."""
    await wait_final(gw, run_ids, GUARD_SECONDS)
    for run_id in run_ids:
        await gw.delivery(run_id)
    return [r for r in [await gw.db.runs.get(run_id) for run_id in run_ids] if r is not None]


def state_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Levels of the disk-full state's log lines (entering, leaving)."""
    return [
        r.levelname
        for r in caplog.records
        if r.name == disk_state.__name__ and r.levelno > logging.DEBUG
    ]


def noise(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Log lines an operator would have to wade through: errors and tracebacks."""
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.fixture
def log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO)
    return caplog


@pytest.fixture
def distant_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's own retry after a refused write comes only after an hour: what finishes the
    runs here is the gateway noticing that space is back."""
    monkeypatch.setattr(run_manager, "RETRY_FIRST_SECONDS", 3600.0)
    monkeypatch.setattr(run_manager, "RETRY_MAX_SECONDS", 3600.0)


@pytest.mark.usefixtures("distant_retries")
async def test_runs_stranded_by_a_full_disk_finish_once_space_is_freed(
    tmp_path: Path, log: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    async with running_gateway(tmp_path, config=CONFIG, script=script(), state_dir=state) as gw:
        run_ids = await strand_runs(gw, RUNS)
        peak = wal_size(state)
        wal_when_back: list[int] = []
        gw.db.space.subscribe(lambda: wal_when_back.append(wal_size(state)))
        await free_space(gw)  # no restart: the gateway notices by itself
        runs = await settled(gw, run_ids)
        announces = Counter(m.run_id for m in gw.channel.sent if m.kind == "announce")

    assert [run.progress.status for run in runs] == ["done"] * RUNS, runs
    assert [run.delivery.announce_state for run in runs] == ["delivered"] * RUNS, runs
    assert duplicates(announces) == {}
    assert set(announces) == set(run_ids)
    # One line when the disk filled, one when space was back; nothing per refused write.
    assert state_lines(log) == ["WARNING", "INFO"]
    assert noise(log) == []
    # The WAL file only ever grows unless a TRUNCATE checkpoint shrinks it.
    assert len(wal_when_back) == 1
    assert wal_when_back[0] < peak, (wal_when_back, peak)


@pytest.mark.usefixtures("distant_retries")
async def test_runs_stranded_by_a_full_disk_finish_after_a_restart(
    tmp_path: Path, log: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    async with running_gateway(tmp_path, config=CONFIG, script=script(), state_dir=state) as gw:
        run_ids = await strand_runs(gw, RUNS)
        first = Counter(m.run_id for m in gw.channel.sent if m.kind == "announce")
    assert state_lines(log) == ["WARNING"]  # stopped while still full

    # The disk is still full when the gateway starts again: its new connection is capped
    # as it opens, before the recovered runs try to record anything.
    open_writer = SqliteStateDB._open_writer

    def full_writer(self: SqliteStateDB) -> sqlite3.Connection:
        conn = open_writer(self)
        _limit(SqliteConnection(conn), 1)
        return conn

    monkeypatch.setattr(SqliteStateDB, "_open_writer", full_writer)
    async with running_gateway(tmp_path, config=CONFIG, script=script(), state_dir=state) as gw:
        await stranded(gw, run_ids)  # recovered, and refused again
        await free_space(gw)
        runs = await settled(gw, run_ids)
        second = Counter(m.run_id for m in gw.channel.sent if m.kind == "announce")

    assert first == Counter()
    assert [run.progress.status for run in runs] == ["done"] * RUNS, runs
    assert duplicates(second) == {}
    assert set(second) == set(run_ids)
    assert state_lines(log) == ["WARNING", "WARNING", "INFO"]
    assert noise(log) == []


async def readiness(gw: Harness) -> tuple[int, dict[str, Any]]:
    """``GET /readyz`` over HTTP, answered from ``gw``'s state."""
    app = web.Application()
    app[READINESS] = gw.app[READINESS]
    app[DISK_FULL] = gw.app[DISK_FULL]
    app[DATABASE] = gw.app[DATABASE]
    app.add_routes(route_defs("/readyz"))
    client: TestClient[Any, Any]
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/readyz")
        return response.status, await response.json()


async def disk_metrics(gw: Harness) -> tuple[float | None, float | None]:
    samples = parse(await gw.metrics.render(gw.app[SCRAPE]()))
    # On PostgreSQL (a cluster of one) every series names its replica.
    labels = {} if gw.metrics.replica is None else {"replica": gw.metrics.replica}
    return (
        value(samples, "herald_disk_full", **labels),
        value(samples, "herald_disk_full_refusals_total", **labels),
    )


async def test_a_new_chat_gets_the_apology_while_the_disk_is_full_and_a_reply_after(
    tmp_path: Path, log: pytest.LogCaptureFixture
) -> None:
    async with running_gateway(tmp_path) as gw:
        await fill_disk(gw)
        await fill_last_page(gw)
        await gw.say("hello", chat_id="newcomer")
        apology = await gw.reply("newcomer")
        ready_full = await readiness(gw)
        metrics_full = await disk_metrics(gw)
        await free_space(gw)
        assert await gw.db.space.wait_for_space(GUARD_SECONDS)
        await gw.say("hello", chat_id="newcomer")
        answer = await gw.reply("newcomer", count=2)
        ready_after = await readiness(gw)
        metrics_after = await disk_metrics(gw)

    assert apology.text == DISK_FULL_REPLY
    assert answer.text == "hi there"
    # Still in service while full (it answers), and says why it may not record.
    memory = {"channels": {"memory": True}, "channelStates": {"memory": "connected"}}
    assert ready_full == (200, {"status": "ready", **memory, "storage": "full"})
    assert ready_after[1]["storage"] == "ok"
    assert metrics_full == (1, 2)  # the filler refused, then the newcomer's session
    assert metrics_after == (0, 2)
    assert state_lines(log) == ["WARNING", "INFO"]
    assert noise(log) == []


@pytest.mark.postgres
async def test_on_postgresql_a_new_chat_gets_the_apology_while_the_servers_disk_is_full(
    tmp_path: Path, pg_url: str, log: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server refuses the newcomer's session row with SQLSTATE 53100
    # (tests.postgres.fill_disk). The state directory, which the probe measures, is made to
    # lack headroom too (more asked for than its volume has), so the state lasts until the
    # operator has freed both.
    monkeypatch.setattr(disk_state, "HEADROOM_BYTES", 2**62)
    async with running_gateway(tmp_path, database_url=pg_url) as gw:
        await asyncio.to_thread(postgres.fill_disk, pg_url)
        await gw.say("hello", chat_id="newcomer")
        apology = await gw.reply("newcomer")
        ready_full = await readiness(gw)
        metrics_full = await disk_metrics(gw)
        await asyncio.to_thread(postgres.free_disk, pg_url)
        monkeypatch.setattr(disk_state, "HEADROOM_BYTES", 4 * 1024 * 1024)
        assert await gw.db.space.wait_for_space(GUARD_SECONDS)
        await gw.say("hello", chat_id="newcomer")
        answer = await gw.reply("newcomer", count=2)
        ready_after = await readiness(gw)

    assert apology.text == DISK_FULL_REPLY
    assert answer.text == "hi there"
    assert ready_full == (
        200,
        {
            "status": "ready",
            "channels": {"memory": True},
            "channelStates": {"memory": "connected"},
            "storage": "full",
            "database": "ok",
        },
    )
    assert ready_after[1]["storage"] == "ok"
    assert metrics_full == (1, 1)
    assert state_lines(log) == ["WARNING", "INFO"]
    assert noise(log) == []


@pytest.mark.usefixtures("distant_retries")
async def test_a_run_refused_by_an_attempt_that_outlived_the_full_disk_is_retried_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Space comes back while a run's attempt is still under way; the attempt then fails
    with the refusal it met before. The runs waiting for space were resumed already, without
    it: it must not sit out its (here hour-long) backoff."""
    async with running_gateway(tmp_path, config=CONFIG, script=script()) as gw:
        runner = gw.runs._runner
        real_execute = runner.execute
        back = asyncio.Event()
        gw.db.space.subscribe(back.set)
        attempts: list[str] = []

        async def execute(run_id: str) -> None:
            attempts.append(run_id)
            if len(attempts) == 1:
                gw.db.space.refused("state database", OSError("no room"))
                await back.wait()  # the disk-full state ends during this attempt
                raise DiskFullError("database or disk is full")
            await real_execute(run_id)

        monkeypatch.setattr(runner, "execute", execute)
        ctx = await chat_context(gw, ORIGIN)
        (run_id,) = await spawn_runs(gw, ctx, ["job late"])
        (run,) = await wait_final(gw, [run_id], GUARD_SECONDS)
        settled_item = await gw.delivery(run_id)

    assert attempts == [run_id, run_id]
    assert run.progress.status == "done"
    assert settled_item.state == "delivered"
