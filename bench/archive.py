"""Archive at start-up: 10,000 overdue sessions, against 10,000 bare ``os.rename`` calls.

Run with ``python -m bench.archive``. The state directory holds 10,000 sub-agent sessions
(rows in ``herald.db``, one transcript each) whose archive time has passed, as after a
long downtime. Herald's figure is ``ArchiveScheduler.start()``: read the schedule, rename
every transcript to its ``.deleted.<timestamp>`` name and record all of it in the database.
The baseline renames 10,000 files of the same layout to the same kind of names with a
bare ``os.rename`` loop. Setup is not timed; each timing is the best of a few alternating
rounds.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench._common import format_table, row
from gateway.archive import ArchiveScheduler
from gateway.constants import STATE_DB_NAME
from gateway.sessions import SessionStore, archived_path, encode_line, header_record, sessions_dir
from gateway.state import SessionRecord, SqliteStateDB
from gateway.state.rows import SESSION_COLUMNS, session_to_columns

SESSIONS = 10_000
ROUNDS = 3


def _files(directory: Path, ids: list[str], header: bool) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for session_id in ids:
        path = directory / f"{session_id}.jsonl"
        line = (
            encode_line(
                header_record(
                    session_id=session_id,
                    key=f"agent:main:subagent:{session_id}",
                    agent_id="main",
                    parent_key="agent:main:main",
                )
            )
            if header
            else b"{}\n"
        )
        path.write_bytes(line)
        paths.append(path)
    return paths


async def _setup(state: Path) -> None:
    ids = [str(uuid.uuid4()) for _ in range(SESSIONS)]
    _files(sessions_dir(state, "main"), ids, header=True)
    due = time.time() - 3600
    rows = [
        session_to_columns(
            SessionRecord(
                key=f"agent:main:subagent:{session_id}",
                session_id=session_id,
                agent_id="main",
                kind="subagent",
                created_at=due - 60,
                updated_at=due - 60,
                parent_key="agent:main:main",
                archive_due_at=due,
            )
        )
        for session_id in ids
    ]
    sql = (
        f"INSERT INTO sessions ({', '.join(SESSION_COLUMNS)}) "
        f"VALUES ({', '.join('?' for _ in SESSION_COLUMNS)})"
    )
    db = await SqliteStateDB.open(state / STATE_DB_NAME)
    try:
        await db.write(lambda c: c.executemany(sql, [list(r.values()) for r in rows]))
    finally:
        await db.close()


async def _herald(state: Path) -> float:
    db = await SqliteStateDB.open(state / STATE_DB_NAME)
    store = SessionStore(state, db)
    scheduler = ArchiveScheduler(store, archive_after_minutes=60)
    try:
        start = time.perf_counter()
        archived = await scheduler.start()
        elapsed = time.perf_counter() - start
        left = await db.sessions.archive_schedule()
    finally:
        await scheduler.shutdown()
        await store.aclose()
        await db.close()
    if archived != SESSIONS or left:
        raise SystemExit(f"bench.archive: archived {archived}, {len(left)} left")
    return elapsed


def _baseline(directory: Path) -> float:
    paths = _files(directory, [str(uuid.uuid4()) for _ in range(SESSIONS)], header=False)
    targets = [archived_path(p, dt.datetime.now(dt.UTC)) for p in paths]
    start = time.perf_counter()
    for path, target in zip(paths, targets, strict=True):
        os.rename(path, target)
    return time.perf_counter() - start


async def _measure() -> list[dict[str, Any]]:
    herald: list[float] = []
    bare: list[float] = []
    for _ in range(ROUNDS):
        with tempfile.TemporaryDirectory(prefix="herald-bench-") as tmp:
            root = Path(tmp)
            await _setup(root / "state")
            herald.append(await _herald(root / "state"))
            bare.append(_baseline(root / "bare"))
    best, base = min(herald), min(bare)
    return [
        row(
            f"s, archive {SESSIONS:,} overdue sessions at start",
            best,
            base,
            "(report: seconds and ratio)",
        )
    ]


def run() -> list[dict[str, Any]]:
    """Run the start-up archive benchmark and its os.rename baseline; one row per figure."""
    return asyncio.run(_measure())


def main() -> None:
    """Print the benchmark's rows as a small table."""
    print(format_table(run()))


if __name__ == "__main__":
    main()
