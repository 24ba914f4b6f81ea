"""Fan-in invariants of orchestration, over random orders of spawns, yields, completions,
waits, deliveries and restarts, on the real state database (seed 002's properties).

No session ever has more than ``maxChildrenPerSession`` runs not yet final (the limit is
checked in the spawn's own transaction). For every batch: pending + completed = N always,
pending only shrinks and completed only grows. Every final run's result reaches the
requester's model exactly once: its delivery goes ``live`` → ``pending`` → ``delivered`` or
→ ``consumed``, or ``live`` → ``batched`` → ``consumed``, never both, never back. A final
run never changes status, and a second completion of it is refused.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from gateway.state import (
    BatchRecord,
    ChildLimitError,
    RecordConflictError,
    RunRecord,
    SqliteStateDB,
    StateDB,
)
from gateway.state.postgres import PgStateDB
from tests import postgres
from tests.gateway.state.records import REQUESTER, requester_run, session_record

#: ``maxChildrenPerSession`` of the spawns here: small, so that random orders reach it.
MAX_CHILDREN = 4
T = TypeVar("T")
FINAL = ("done", "error", "timeout", "cancelled")


class Orchestration(RuleBasedStateMachine):
    """Drives :class:`gateway.state.BatchesTable` the way the gateway does, on SQLite (here)
    or PostgreSQL (:class:`PostgresOrchestration`)."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(tempfile.mkdtemp(prefix="herald-props-"))
        self.url = self.database_url()
        self.db = self.run(self.open())
        self.runs: list[str] = []
        self.final: dict[str, str] = {}  # run id → its final status, once final
        self.delivery: dict[str, str] = {}  # run id → its delivery state, as expected
        self.batches: dict[str, tuple[str, ...]] = {}
        self.pending_seen: dict[str, set[str]] = {}
        self.completed_seen: dict[str, set[str]] = {}
        self.empty_yields = 0

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def get(self, run_id: str) -> RunRecord:
        run = self.run(self.db.runs.get(run_id))
        assert run is not None
        return run

    def database_url(self) -> str | None:
        """Where the database lives: None for a SQLite file in ``self.dir``."""
        return None

    async def open(self) -> StateDB:
        if self.url is None:
            return await SqliteStateDB.open(self.dir / "herald.db")
        return await PgStateDB.connect(self.url, replica_id="props", state_dir=self.dir)

    def teardown(self) -> None:
        self.run(self.db.close())
        self.loop.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize()
    def requester(self) -> None:
        self.run(self.db.sessions.create(session_record(REQUESTER)))

    @rule()
    def spawn(self) -> None:
        n = len(self.runs)  # ids from a counter: hypothesis replays draws by value
        child = session_record(
            f"agent:main:subagent:{n:08d}",
            "subagent",
            session_id=f"child-{n}",
            parent_key=REQUESTER,
        )
        self.run(self.db.sessions.create(child))
        run = requester_run(child, f"run-{n:04d}", at=float(n))
        live = sum(1 for r in self.runs if r not in self.final)
        if live >= MAX_CHILDREN:
            with pytest.raises(ChildLimitError):
                self.run(self.db.runs.insert(run, max_live_siblings=MAX_CHILDREN))
            return
        self.run(self.db.runs.insert(run, max_live_siblings=MAX_CHILDREN))
        self.runs.append(run.run_id)
        self.delivery[run.run_id] = "live"

    @rule()
    def yield_batch(self) -> None:
        batch = BatchRecord(
            batch_id=f"batch-{len(self.batches) + self.empty_yields:04d}",
            session_key=REQUESTER,
            run_ids=(),
            first_spawn_at=0.0,
            created_at=0.0,
            deadline_at=1e9,
        )
        formed = self.run(self.db.batches.form(batch))
        live_free = [r for r in self.runs if r not in self.final and not self._in_batch(r)]
        if formed is None:
            assert live_free == []
            self.empty_yields += 1
            return
        assert sorted(formed.run_ids) == sorted(live_free)
        self.batches[formed.batch_id] = formed.run_ids
        self.pending_seen[formed.batch_id] = set(formed.run_ids)
        self.completed_seen[formed.batch_id] = set()

    def _in_batch(self, run_id: str) -> bool:
        return any(run_id in ids for ids in self.batches.values())

    @precondition(lambda self: bool(self.runs))
    @rule(data=st.data(), status=st.sampled_from(FINAL))
    def finish(self, data: st.DataObject, status: str) -> None:
        run_id = data.draw(st.sampled_from(self.runs))
        changes = {"status": status, "announce_text": "announce"}
        if run_id in self.final:
            with pytest.raises(RecordConflictError):
                self.run(self.db.ends.finish_run(run_id, changes, now=0.0))
            return
        run = self.run(self.db.ends.finish_run(run_id, changes, now=0.0))
        self.final[run_id] = status
        if self._in_batch(run_id):
            assert (run.delivery.state, run.delivery.announce_state) == ("batched", "consumed")
        else:
            assert (run.delivery.state, run.delivery.announce_state) == ("pending", "queued")
            item = self.run(self.db.outbox.get_by_run(run_id))
            assert item is not None
            assert item.text == "announce"
        self.delivery[run_id] = run.delivery.state

    @precondition(lambda self: bool(self.runs))
    @rule(data=st.data())
    def deliver(self, data: st.DataObject) -> None:
        run_id = data.draw(st.sampled_from(self.runs))
        delivered = self.run(self.db.ends.mark_delivered(run_id))
        assert delivered == (self.delivery[run_id] == "pending")
        if delivered:
            self.delivery[run_id] = "delivered"

    @precondition(lambda self: bool(self.runs))
    @rule(data=st.data())
    def wait(self, data: st.DataObject) -> None:
        ids = data.draw(st.lists(st.sampled_from(self.runs), min_size=1, max_size=4, unique=True))
        self.run(self.db.ends.hold(ids))
        for run_id in ids:
            if self.delivery[run_id] == "live":
                self.delivery[run_id] = "held"
            assert self.get(run_id).delivery.state == self.delivery[run_id]
        taken = self.run(self.db.ends.consume(ids))
        for run in taken:
            assert self.delivery[run.run_id] == "pending"
            self.delivery[run.run_id] = "consumed"
        released = self.run(self.db.ends.release(ids))
        assert released == []  # nothing ended while held: a wait here is one step
        for run_id in ids:
            if self.delivery[run_id] == "held":
                self.delivery[run_id] = "live"

    @precondition(lambda self: bool(self.batches))
    @rule(data=st.data())
    def follow_up(self, data: st.DataObject) -> None:
        batch_id = data.draw(st.sampled_from(sorted(self.batches)))
        ids = self.batches[batch_id]
        if not all(r in self.final for r in ids):
            return
        self.run(self.db.batches.finish(batch_id, "reply", 1.0, None))
        for run_id in ids:
            if self.delivery[run_id] == "batched":
                self.delivery[run_id] = "consumed"

    @rule()
    def restart(self) -> None:
        self.run(self.db.close())
        self.db = self.run(self.open())

    @invariant()
    def fan_in_is_conserved(self) -> None:
        for batch_id, ids in self.batches.items():
            runs = [self.get(r) for r in ids]
            completed = {r.run_id for r in runs if r.progress.finished}
            pending = {r.run_id for r in runs if not r.progress.finished}
            assert len(pending) + len(completed) == len(ids)
            assert pending <= self.pending_seen[batch_id]  # only shrinks
            assert completed >= self.completed_seen[batch_id]  # only grows
            self.pending_seen[batch_id] = pending
            self.completed_seen[batch_id] = completed

    @invariant()
    def no_session_exceeds_its_live_children(self) -> None:
        live = self.run(self.db.runs.live_children(REQUESTER))
        assert live == sum(1 for r in self.runs if r not in self.final)
        # The kept count is the count of the runs themselves.
        sql = (
            "SELECT COUNT(*) FROM runs WHERE parent_session_key = ?"
            " AND status IN ('queued', 'running', 'announcing')"
        )
        assert live == self.run(self.db.read(lambda c: c.execute(sql, (REQUESTER,)).fetchone()[0]))
        assert live <= MAX_CHILDREN

    @invariant()
    def completions_and_finals_are_as_recorded(self) -> None:
        for run_id in self.runs:
            run = self.get(run_id)
            if run_id in self.final:
                assert run.progress.status == self.final[run_id]  # a final run never changes
            else:
                assert run.delivery.state in ("live", "held")
            assert run.delivery.state == self.delivery[run_id]  # exactly one way in


class PostgresOrchestration(Orchestration):
    """The same machine on the session's PostgreSQL, a fresh schema per example."""

    def database_url(self) -> str | None:
        return postgres.running().fresh_url()


Orchestration.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestOrchestration = Orchestration.TestCase
# Half the examples on PostgreSQL: each needs a fresh schema, and the machine's logic is
# the same; what the backend adds (its dialect, its locking) shows in any example.
PostgresOrchestration.TestCase.settings = settings(Orchestration.TestCase.settings, max_examples=20)
TestPostgresOrchestration = pytest.mark.postgres(
    pytest.mark.usefixtures("postgres_server")(PostgresOrchestration.TestCase)
)
