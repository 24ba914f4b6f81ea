"""The state-layer tests run on both backends: SQLite (a file) and PostgreSQL (a schema of
its own on the session's real server)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from gateway.state import BatchRecord, SqliteStateDB, StateDB
from gateway.state.postgres import PgStateDB
from tests.gateway.state.records import REQUESTER, child_session, requester_run, session_record
from tests.postgres import BACKENDS

Backend = Literal["sqlite", "postgres"]


@dataclass
class StateTarget:
    """One test's state database on one backend; open it (again) as often as the test needs.
    Everything opened is closed after the test."""

    backend: Backend
    path: Path
    url: str | None
    opened: list[StateDB] = field(default_factory=list)

    async def open(self, *, readonly: bool = False) -> StateDB:
        db: StateDB
        if self.url is None:
            db = await SqliteStateDB.open(self.path, readonly=readonly)
        else:
            db = await PgStateDB.connect(
                self.url, readonly=readonly, replica_id="test", state_dir=self.path.parent
            )
        self.opened.append(db)
        return db

    async def tables(self, db: StateDB) -> set[str]:
        """The names of the database's tables."""
        sql = (
            "SELECT name FROM sqlite_master WHERE type = 'table'"
            if self.url is None
            else "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = current_schema()"
        )
        return {row[0] for row in await db.read(lambda c: c.execute(sql).fetchall())}


@pytest.fixture(params=BACKENDS)
async def state_target(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[StateTarget]:
    url = request.getfixturevalue("pg_url") if request.param == "postgres" else None
    target = StateTarget(request.param, tmp_path / "herald.db", url)
    try:
        yield target
    finally:
        for db in target.opened:
            await db.close()


@pytest.fixture
async def db(state_target: StateTarget) -> StateDB:
    """A fresh state database on each backend, closed afterwards."""
    return await state_target.open()


class Requester:
    """A chat session (:data:`REQUESTER`) in a test's database and the live sub-agent runs it
    spawns."""

    def __init__(self, db: StateDB) -> None:
        self._db = db

    async def create(self) -> None:
        await self._db.sessions.create(session_record(REQUESTER))

    async def spawn(self, runs: int, *, prefix: str = "run", origin: bool = True) -> list[str]:
        """The ids of ``runs`` more live runs (``<prefix>-<n>``), spawned after the ones
        before; ``origin``: with the chat they were spawned from."""
        ids = []
        spawned = len(await self._db.runs.list(limit=1000))
        for n in range(runs):
            child = await child_session(self._db, REQUESTER)
            run = requester_run(child, f"{prefix}-{n}", at=float(spawned + n), origin=origin)
            await self._db.runs.insert(run)
            ids.append(run.run_id)
        return ids

    @staticmethod
    def batch(batch_id: str) -> BatchRecord:
        """A batch of the requester to form (it takes the runs that are live then)."""
        return BatchRecord(
            batch_id=batch_id,
            session_key=REQUESTER,
            run_ids=(),
            first_spawn_at=0.0,
            created_at=0.0,
            deadline_at=100.0,
        )


@pytest.fixture
async def requester(db: StateDB) -> Requester:
    """The requester's chat session, made in :func:`db`; it spawns runs when asked."""
    made = Requester(db)
    await made.create()
    return made
