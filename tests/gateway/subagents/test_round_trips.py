"""What one sub-agent run costs the state database: a bound on its write transactions.

Each write of the state database is a savepoint or a transaction of its own, on either
database (serializable on PostgreSQL, the costly part of a run in a cluster). A run from its
spawn to its delivered announce and its completion written into the requester's chat
makes these writes: the spawn; its start; its ``announcing`` outcome (with its turn's usage,
added to the run and its child session); its final status (with its live count, its
announce queued, its child's archive time and the announce turn's usage); its completion
marked delivered; the outbox's claim, ``sending`` mark and delivered mark. Eight; it was
thirteen when a turn's usage took two writes and the archive time one more, ten while the
announce turn's usage was a write of its own, nine while the run's own turn's was. On
PostgreSQL a bound on the round trips of those writes and of the run's reads is pinned too,
and a run that spawns nothing never looks for completions routed to it or a batch of its own.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest

from gateway.state import Origin
from gateway.state.connection import Connection
from gateway.subagents import SpawnRequest
from tests.gateway.harness import FAST_TIMING, Harness, running_gateway

T = TypeVar("T")

CHAT_KEY = "agent:main:memory:channel:c1"
ORIGIN = Origin(channel="memory", account="default", chat_id="c1", chat_type="channel")
#: Write transactions of one run, spawn to delivered announce and written completion.
MAX_WRITES_PER_RUN = 8
#: Messages from the state layer to PostgreSQL per run, reads and writes together: 20 when
#: measured (its eight writes each end with their COMMIT travelling with a statement; no
#: look for completions routed to a run that spawned nothing, nor for a batch it yielded
#: to), 23 when it looked, 24
#: with the run's own turn's usage a write of its own, 27 with the announce turn's too (and
#: the run read again after it), 41 when every COMMIT and every unread statement was a
#: round trip of its own.
MAX_ROUND_TRIPS_PER_RUN = 21
RUNS = 3
#: No heartbeat (and no outbox poll) while runs are counted: in a cluster they write on
#: their own schedule, not a run's.
QUIET = dataclasses.replace(
    FAST_TIMING,
    replica_heartbeat_seconds=3600.0,
    replica_dead_seconds=7200.0,
    outbox_poll_seconds=3600.0,
)


class WriteCounter:
    """Counts the writes of a real state database, by the function each write runs."""

    def __init__(self) -> None:
        self.writes: Counter[str] = Counter()
        self.counting = False

    def wrap(self, write: Callable[[Callable[[Connection], T]], Any]) -> Any:
        async def counted(fn: Callable[[Connection], T]) -> T:
            if self.counting:
                self.writes[fn.__qualname__.removesuffix(".<locals>.run")] += 1
            result: T = await write(fn)
            return result

        return counted


async def run_once(gw: Harness, task: str) -> None:
    session = await gw.store.ensure(CHAT_KEY, origin=ORIGIN)
    accepted = await gw.spawn(gw.contexts.for_session(session), SpawnRequest(task=task))
    run_id = accepted["runId"]
    assert (await gw.delivery(run_id)).state == "delivered"
    await gw.runs_idle()  # its completion is written into the chat's session
    run = await gw.db.runs.get(run_id)
    assert run is not None
    assert (run.progress.status, run.delivery.announce_state, run.delivery.state) == (
        "done",
        "delivered",
        "delivered",
    )
    child = await gw.db.sessions.get(run.child_session_key)
    assert child is not None
    assert child.archive_due_at is not None  # written with the final status


async def test_a_run_costs_at_most_eight_write_transactions(
    tmp_path: Path, database_url: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = WriteCounter()
    async with running_gateway(tmp_path, database_url=database_url, timing=QUIET) as gw:
        monkeypatch.setattr(gw.db, "write", counter.wrap(gw.db.write))
        await run_once(gw, "task: warm-up")  # what a first run begins (sessions, caches)
        counter.counting = True
        for n in range(RUNS):
            await run_once(gw, f"task: n{n}")
        counter.counting = False
    total = sum(counter.writes.values())
    assert total <= MAX_WRITES_PER_RUN * RUNS, counter.writes
    # A run's end is one write: its final status, its announce, its child's archive time and
    # the announce turn's usage; its own turn's usage went with its `announcing` write.
    assert counter.writes["RunEndsTable.finish_run"] == RUNS, counter.writes
    assert "SessionsTable.add_usage" not in counter.writes, counter.writes
    assert "SessionsTable._update_returning" not in counter.writes, counter.writes


@pytest.mark.postgres
async def test_a_run_costs_few_round_trips_to_postgresql(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every message the state layer sends PostgreSQL is one ClientCursor.execute (reads
    # and writes; a write's BEGIN, queued statements and COMMIT travel with others).
    sent = Counter[str]()
    execute = psycopg.ClientCursor.execute

    def counted(cursor: psycopg.ClientCursor[Any], query: Any, *args: Any, **kw: Any) -> Any:
        sent[" ".join(str(query).split()[:3])] += 1
        return execute(cursor, query, *args, **kw)

    async with running_gateway(tmp_path, database_url=pg_url, timing=QUIET) as gw:
        await run_once(gw, "task: warm-up")
        monkeypatch.setattr(psycopg.ClientCursor, "execute", counted)
        for n in range(RUNS):
            await run_once(gw, f"task: n{n}")
        monkeypatch.undo()
    assert sum(sent.values()) <= MAX_ROUND_TRIPS_PER_RUN * RUNS, sent


async def test_a_run_that_spawns_nothing_never_looks_for_its_completions_or_batch(
    tmp_path: Path, database_url: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No completion can be routed to a run whose turn spawned nothing, and it yielded to no
    # batch: neither its turn (which in a cluster looks before every model call) nor its end
    # looks for either.
    looked: Counter[str] = Counter()
    async with running_gateway(tmp_path, database_url=database_url, timing=QUIET) as gw:
        routed, batch = gw.db.ends.routed_completions, gw.db.batches.open_for_run

        async def counted(session_key: str) -> Any:
            looked[session_key] += 1
            return await routed(session_key)

        async def batch_counted(run_id: str) -> Any:
            looked[run_id] += 1
            return await batch(run_id)

        monkeypatch.setattr(gw.db.ends, "routed_completions", counted)
        monkeypatch.setattr(gw.db.batches, "open_for_run", batch_counted)
        session = await gw.store.ensure(CHAT_KEY, origin=ORIGIN)
        accepted = await gw.spawn(gw.contexts.for_session(session), SpawnRequest(task="task: x"))
        run = await gw.finished(accepted["runId"])
        await gw.runs_idle()
    assert looked[run.child_session_key] == looked[run.run_id] == 0, looked
