"""The ``sessions`` table: the index of every session, its usage totals and archive state.

Listings leave out archived sessions and (unless asked) sub-agent sessions; ``get`` and
``get_by_id`` find every session, archived ones included, so usage stays queryable.

Archiving is claimed first (:meth:`SessionsTable.claim_archive`, one transaction): of
several replicas archiving one session at once, exactly one gets the claim and renames the
transcript; :meth:`SessionsTable.mark_archived` records the rename and ends the claim. A
claim whose rename was never recorded (its replica died in between) is found by
:meth:`SessionsTable.take_stale_archive_claims` and the archive done again.
"""

from __future__ import annotations

import builtins
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any, Final

from gateway.llm import Usage
from gateway.state._sql import ADD_USAGE_SQL, Database, column_list, insert_sql, usage_values
from gateway.state.connection import Connection, Dialect
from gateway.state.errors import RecordNotFoundError
from gateway.state.replicas import LIVE_REPLICAS_SQL
from gateway.state.rows import (
    SESSION_COLUMNS,
    Origin,
    SessionRecord,
    origin_columns,
    session_from_row,
    session_to_columns,
)

#: A sub-agent turn's usage on its run, in the write that adds it to the run's session.
_RUN_USAGE_SQL = f"UPDATE runs SET {ADD_USAGE_SQL} WHERE run_id = ?"
_SELECT = f"SELECT {column_list(SESSION_COLUMNS)} FROM sessions"


def session_usage_sql(dialect: Dialect, *, key: str = "?") -> str:
    """The statement adding a turn's usage to a session (bound: :func:`usage_values`, then
    the time, then ``key``'s marks); the session counts as updated then. ``key`` is the SQL
    of the session's key: a bound key, or a subquery finding it."""
    later = dialect.larger("updated_at", "?")
    return f"UPDATE sessions SET {ADD_USAGE_SQL}, updated_at = {later} WHERE key = {key}"


#: Keys per ``IN (…)`` query: well under SQLite's bound-parameter limit.
_CHUNK = 500
#: Sessions kept in memory (~1 KiB each): more than are active at once on a busy gateway;
#: a miss costs one read. Kept small so memory levels off early (the soak's goal).
CACHE_SIZE: Final = 2048


class SessionsTable:
    """Data access for ``sessions``; every method is a coroutine run on the DB threads.

    Rows read or written through this table are kept in a bounded write-through cache:
    the gateway process is the only writer of its database, and a chat turn looks its
    session up several times, each otherwise a hop to the reader thread. Batch updates that
    do not return rows (``mark_archived``) drop the keys they touch once they are done. A
    read that was in flight while a write changed the cache is returned, never cached: it
    may be older than the write, and cached it would outlive it.
    """

    def __init__(self, db: Database) -> None:
        self._db = db
        #: ``updated_at`` moved to a time, never back (both NOT NULL: see Dialect.larger).
        self._later = db.dialect.larger("updated_at", "?")
        self._cache: OrderedDict[str, SessionRecord] = OrderedDict()
        #: Cache changes made by writes (a read in flight across one is not cached).
        self._changes = 0

    def remember(self, record: SessionRecord) -> SessionRecord:
        """Cache ``record``, a row just committed by a write outside this table (a spawn
        inserts its run's session with the run)."""
        return self._remember(record)

    def _remember(self, record: SessionRecord) -> SessionRecord:
        self._cache[record.key] = record
        self._cache.move_to_end(record.key)
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return record

    def _written(self, record: SessionRecord) -> SessionRecord:
        self._changes += 1
        return self._remember(record)

    def _forget(self, keys: Iterable[str]) -> None:
        self._changes += 1
        for key in keys:
            self._cache.pop(key, None)

    async def create(self, record: SessionRecord) -> tuple[SessionRecord, bool]:
        """Insert ``record`` unless its key exists; return the stored row and whether it is new.

        A different session with the same ``session_id`` raises :class:`RecordConflictError`.
        """
        values = session_to_columns(record)
        sql = insert_sql("sessions", values) + " ON CONFLICT (key) DO NOTHING"

        def run(conn: Connection) -> tuple[SessionRecord, bool]:
            created = conn.execute(sql, list(values.values())).rowcount == 1
            row = conn.execute(f"{_SELECT} WHERE key = ?", (record.key,)).fetchone()
            return session_from_row(row), created

        stored, created = await self._db.write(run)
        return self._written(stored), created

    async def get(self, key: str) -> SessionRecord | None:
        """The session with ``key`` (archived or not), or None."""
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        changes = self._changes
        record = await self._db.read(lambda conn: _one(conn, "key", key))
        if record is None:
            return None
        if self._changes != changes:  # a write finished meanwhile: its record is newer
            return self._cache.get(key) or record
        return self._remember(record)

    async def get_by_id(self, session_id: str) -> SessionRecord | None:
        """The session with ``session_id`` (archived or not), or None."""
        return await self._db.read(lambda conn: _one(conn, "session_id", session_id))

    async def get_many(self, keys: Sequence[str]) -> dict[str, SessionRecord]:
        """The sessions among ``keys`` that exist, by key (one read, in chunks)."""

        def run(conn: Connection) -> dict[str, SessionRecord]:
            found: dict[str, SessionRecord] = {}
            for start in range(0, len(keys), _CHUNK):
                chunk = keys[start : start + _CHUNK]
                marks = ", ".join("?" for _ in chunk)
                for row in conn.execute(f"{_SELECT} WHERE key IN ({marks})", chunk):
                    record = session_from_row(row)
                    found[record.key] = record
            return found

        return await self._db.read(run)

    async def list(
        self,
        *,
        include_subagents: bool = False,
        include_archived: bool = False,
        agent_id: str | None = None,
        parent_key: str | None = None,
        limit: int | None = None,
    ) -> builtins.list[SessionRecord]:
        """Sessions, most recently updated first, filtered as asked."""
        where: builtins.list[str] = []
        params: builtins.list[Any] = []
        if not include_subagents:
            where.append("kind != 'subagent'")
        if not include_archived:
            where.append("archived_at IS NULL")
        if agent_id is not None:
            where.append("agent_id = ?")
            params.append(agent_id)
        if parent_key is not None:
            where.append("parent_key = ?")
            params.append(parent_key)
        sql = _SELECT
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY updated_at DESC, key"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(0, limit))

        def run(conn: Connection) -> builtins.list[SessionRecord]:
            return [session_from_row(row) for row in conn.execute(sql, params)]

        return await self._db.read(run)

    async def add_usage(
        self,
        key: str,
        usage: Usage,
        cost_usd: float | None = None,
        *,
        at: float | None = None,
        run_id: str | None = None,
    ) -> SessionRecord:
        """Add ``usage`` (and ``cost_usd`` when known) to the session's totals; touch it.
        With ``run_id``, add it to that run's totals too, in the same transaction (a
        sub-agent's turn: one write for both); an unknown run raises
        :class:`RecordNotFoundError` once the session's totals are saved."""
        now = time.time() if at is None else at
        sql = session_usage_sql(self._db.dialect)
        params = (*usage_values(usage, cost_usd), now, key)
        if run_id is None:
            return await self._update_returning(key, sql, params)
        returning = f"{sql} RETURNING {column_list(SESSION_COLUMNS)}"
        run_params = (*usage_values(usage, cost_usd), run_id)

        def run(conn: Connection) -> tuple[SessionRecord, bool]:
            rows = conn.execute(returning, params).fetchall()
            if len(rows) != 1:
                raise RecordNotFoundError("sessions", key)
            found = conn.last(_RUN_USAGE_SQL, run_params).rowcount == 1
            return session_from_row(rows[0]), found

        record, found = await self._db.write(run)
        self._written(record)
        if not found:
            raise RecordNotFoundError("runs", run_id)
        return record

    async def set_origin(
        self, key: str, origin: Origin | None, *, at: float | None = None
    ) -> SessionRecord:
        """Record where the session's chat is (the last inbound message's origin)."""
        columns = origin_columns(origin)
        assignments = ", ".join(f"{name} = ?" for name in columns)
        sql = f"UPDATE sessions SET {assignments}, updated_at = {self._later} WHERE key = ?"
        now = time.time() if at is None else at
        return await self._update_returning(key, sql, (*columns.values(), now, key))

    async def renew(self, key: str, session_id: str, *, at: float) -> SessionRecord:
        """Give the live session ``key`` a new ``session_id``, created ``at`` (a chat's
        ``/new``); its key, origin and usage totals stay. Raises :class:`RecordNotFoundError`
        for an unknown or archived key."""
        sql = (
            f"UPDATE sessions SET session_id = ?, created_at = ?, updated_at = {self._later},"
            " archive_due_at = NULL WHERE key = ? AND archived_at IS NULL"
        )
        return await self._update_returning(key, sql, (session_id, at, at, key))

    async def set_model(self, key: str, model: str | None) -> SessionRecord:
        """Record the model the session uses."""
        return await self._update_returning(
            key, "UPDATE sessions SET model = ? WHERE key = ?", (model, key)
        )

    async def set_label(self, key: str, label: str | None) -> SessionRecord:
        """Record the session's label."""
        return await self._update_returning(
            key, "UPDATE sessions SET label = ? WHERE key = ?", (label, key)
        )

    async def touch(self, key: str, *, at: float | None = None) -> SessionRecord:
        """Move ``updated_at`` forward to ``at`` (default now)."""
        now = time.time() if at is None else at
        return await self._update_returning(
            key, f"UPDATE sessions SET updated_at = {self._later} WHERE key = ?", (now, key)
        )

    async def set_archive_due(self, key: str, due_at: float | None) -> SessionRecord:
        """Set (or with None clear) the time the session is to be archived."""
        return await self._update_returning(
            key, "UPDATE sessions SET archive_due_at = ? WHERE key = ?", (due_at, key)
        )

    def forget(self, key: str) -> None:
        """Drop ``key`` from the cache: another process may have changed its row (a
        replica's turn, ``/new`` or archive), so the next read goes to the database."""
        self._forget([key])

    async def claim_archive(
        self, keys: Sequence[str], replica_id: str, *, now: float
    ) -> builtins.list[SessionRecord]:
        """Claim the archive of each of ``keys`` not archived and not claimed by anyone, for
        ``replica_id``, in one transaction; the rows claimed (only their transcripts are
        this replica's to rename)."""
        if not keys:
            return []

        def run(conn: Connection) -> builtins.list[SessionRecord]:
            claimed: builtins.list[SessionRecord] = []
            for start in range(0, len(keys), _CHUNK):
                chunk = keys[start : start + _CHUNK]
                marks = ", ".join("?" for _ in chunk)
                rows = conn.execute(
                    "UPDATE sessions SET archive_claimed_by = ?, archive_claimed_at = ?"
                    f" WHERE key IN ({marks}) AND archived_at IS NULL"
                    f" AND archive_claimed_by IS NULL RETURNING {column_list(SESSION_COLUMNS)}",
                    (replica_id, now, *chunk),
                ).fetchall()
                claimed.extend(session_from_row(row) for row in rows)
            return claimed

        try:
            return await self._db.write(run)
        finally:
            self._forget(keys)

    async def release_archive_claims(self, keys: Sequence[str], replica_id: str) -> None:
        """End ``replica_id``'s archive claims on ``keys`` whose rename failed."""
        if not keys:
            return
        params = [(key, replica_id) for key in keys]

        def run(conn: Connection) -> None:
            conn.executemany(
                "UPDATE sessions SET archive_claimed_by = NULL, archive_claimed_at = NULL"
                " WHERE key = ? AND archive_claimed_by = ? AND archived_at IS NULL",
                params,
            )

        try:
            await self._db.write(run)
        finally:
            self._forget(keys)

    async def take_stale_archive_claims(
        self, *, replica_id: str | None = None, cutoff: float | None = None
    ) -> builtins.list[str]:
        """End archive claims whose rename was never recorded, and return their keys (to be
        archived again): ``replica_id``'s own (its previous life), those of replicas dead
        at ``cutoff`` (no heartbeat since), or, with neither, every one (one process)."""
        where: builtins.list[str] = []
        params: builtins.list[Any] = []
        if replica_id is not None:
            where.append("archive_claimed_by = ?")
            params.append(replica_id)
        if cutoff is not None:
            where.append(f"archive_claimed_by NOT IN ({LIVE_REPLICAS_SQL})")
            params.append(cutoff)
        which = f" AND ({' OR '.join(where)})" if where else ""

        def run(conn: Connection) -> builtins.list[str]:
            rows = conn.execute(
                "UPDATE sessions SET archive_claimed_by = NULL, archive_claimed_at = NULL"
                " WHERE archive_claimed_by IS NOT NULL AND archived_at IS NULL"
                f"{which} RETURNING key",
                params,
            ).fetchall()
            return sorted(str(row[0]) for row in rows)

        keys = await self._db.write(run)
        self._forget(keys)
        return keys

    async def mark_archived(self, entries: Sequence[tuple[str, float, str | None]]) -> int:
        """Record sessions as archived: (key, archived_at, archived_path) each, in one
        transaction, ending their archive claims. Sessions already archived keep their first
        record. Returns rows changed.
        """
        if not entries:
            return 0
        sql = (
            "UPDATE sessions SET archived_at = ?, archived_path = ?, archive_due_at = NULL,"
            " archive_claimed_by = NULL, archive_claimed_at = NULL"
            " WHERE key = ? AND archived_at IS NULL"
        )
        params = [(at, path, key) for key, at, path in entries]

        def run(conn: Connection) -> int:
            return conn.executemany(sql, params).rowcount

        try:
            return await self._db.write(run)
        finally:
            self._forget(key for key, _, _ in entries)

    async def archive_schedule(
        self, *, after: float | None = None
    ) -> builtins.list[tuple[str, float]]:
        """(key, due time) of unarchived sessions with a due time (later than ``after``,
        when given), soonest first."""
        sql = (
            "SELECT key, archive_due_at FROM sessions"
            " WHERE archived_at IS NULL AND archive_due_at IS NOT NULL"
        )
        params: builtins.list[float] = []
        if after is not None:
            sql += " AND archive_due_at > ?"
            params.append(after)
        sql += " ORDER BY archive_due_at"

        def run(conn: Connection) -> builtins.list[tuple[str, float]]:
            return [(row[0], row[1]) for row in conn.execute(sql, params)]

        return await self._db.read(run)

    async def due_for_archive(self, now: float) -> builtins.list[SessionRecord]:
        """Unarchived sessions whose archive time is ``now`` or earlier, soonest first."""
        sql = (
            f"{_SELECT} WHERE archived_at IS NULL AND archive_due_at IS NOT NULL"
            " AND archive_due_at <= ? ORDER BY archive_due_at"
        )

        def run(conn: Connection) -> builtins.list[SessionRecord]:
            return [session_from_row(row) for row in conn.execute(sql, (now,))]

        return await self._db.read(run)

    async def _update_returning(self, key: str, sql: str, params: Sequence[Any]) -> SessionRecord:
        """Run ``sql`` on the session ``key`` and return its row as written (read back in
        the same statement)."""
        returning = f"{sql} RETURNING {column_list(SESSION_COLUMNS)}"

        def run(conn: Connection) -> SessionRecord:
            rows = conn.last(returning, params).fetchall()  # none: nothing was written
            if len(rows) != 1:
                raise RecordNotFoundError("sessions", key)
            return session_from_row(rows[0])

        return self._written(await self._db.write(run))


def _one(conn: Connection, column: str, value: str) -> SessionRecord | None:
    row = conn.execute(f"{_SELECT} WHERE {column} = ?", (value,)).fetchone()
    return session_from_row(row) if row is not None else None
