"""The ``runs`` table: sub-agent runs. Small generic helpers; the sub-agent layer owns meaning.

Rows are :class:`gateway.state.rows.RunRecord`; ``update`` takes column names as keyword
arguments (checked against the table), e.g. ``update(run_id, status="running",
started_at=now)``.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Iterable
from typing import Any

from gateway.llm import Usage
from gateway.state._sql import (
    ADD_USAGE_SQL,
    Database,
    column_list,
    in_clause,
    insert_sql,
    returned_row,
    update_assignments,
    usage_values,
)
from gateway.state.connection import Connection
from gateway.state.errors import ChildLimitError, RecordNotFoundError
from gateway.state.lifecycle import WITHDRAWN
from gateway.state.rows import (
    FINISHED_STATUSES,
    SESSION_COLUMNS,
    SessionRecord,
    session_to_columns,
    to_column_value,
)
from gateway.state.runrows import RUN_COLUMNS, RunRecord, Spent, run_columns, run_from_row
from gateway.state.sessions import session_usage_sql

_COLUMNS = column_list(RUN_COLUMNS)
_SELECT = f"SELECT {_COLUMNS} FROM runs"
#: ``delivery`` moves only through the checked transitions of ``gateway.state.runends``.
_UPDATABLE = frozenset(RUN_COLUMNS) - {"run_id", "delivery"}
_FINAL_MARKS, _FINISHED = in_clause(sorted(FINISHED_STATUSES))
_RUN_INSERT = insert_sql("runs", RUN_COLUMNS)
_SESSION_INSERT = insert_sql("sessions", SESSION_COLUMNS)
#: Bound of a walk up the parent links: far past the deepest configurable tree, so a
#: corrupted link cycle ends instead of looping.
_MAX_CHAIN = 64


class RunsTable:
    """Data access for ``runs``."""

    def __init__(
        self, db: Database, *, session_changed: Callable[[str], None] = lambda key: None
    ) -> None:
        self._db = db
        #: Told the key of a session row a write here changed (the sessions cache drops it).
        self._session_changed = session_changed

    async def insert(self, run: RunRecord, *, max_live_siblings: int | None = None) -> RunRecord:
        """Insert a new run; a duplicate ``run_id`` raises :class:`RecordConflictError`, an
        unknown ``child_session_key`` or bad status :class:`InvalidUpdateError`. With
        ``max_live_siblings``, a requester session that already has that many runs not yet
        final raises :class:`ChildLimitError` instead (checked in the same transaction)."""
        write = _insert_run(run, max_live_siblings, returning=True)

        def run_insert(conn: Connection) -> RunRecord:
            row = write(conn)
            if row is None:  # pragma: no cover - RETURNING gives the row just inserted
                raise RecordNotFoundError("runs", run.run_id)
            return run_from_row(row)

        return await self._db.write(run_insert)

    async def insert_spawn(
        self,
        run: RunRecord,
        child_session: SessionRecord,
        *,
        max_live_siblings: int,
        also: Callable[[Connection], None] | None = None,
    ) -> None:
        """Record a spawn: the run's new session and the run, in one transaction (both rows
        or neither), as :meth:`insert` checks them; an existing session key raises
        :class:`RecordConflictError`. Nothing is read back: the caller holds both rows.
        ``also`` writes in the same transaction (a scheduled occurrence and its job's next
        fire time); what it raises rolls everything back."""
        columns = session_to_columns(child_session)
        session_values = [columns[name] for name in SESSION_COLUMNS]
        write = _insert_run(run, max_live_siblings)

        def spawn_insert(conn: Connection) -> None:
            # Sent with the live count's upsert, and the run's row with the COMMIT: on
            # PostgreSQL the spawn is two round trips (a duplicate key still raises).
            conn.queue(_SESSION_INSERT, session_values)
            write(conn)
            if also is not None:
                also(conn)

        await self._db.write(spawn_insert)

    async def get(self, run_id: str) -> RunRecord | None:
        """The run with ``run_id``, or None."""

        def run(conn: Connection) -> RunRecord | None:
            row = conn.execute(f"{_SELECT} WHERE run_id = ?", (run_id,)).fetchone()
            return run_from_row(row) if row is not None else None

        return await self._db.read(run)

    async def end_waiting(self, run_id: str, outcome: str, now: float) -> bool:
        """A ``running`` run that is not executing (it yielded) ends ``outcome``: it becomes
        ``announcing`` with that outcome; False when it is no longer ``running``."""

        def run(conn: Connection) -> bool:
            cursor = conn.last(
                "UPDATE runs SET status = 'announcing', outcome = ?, ended_at = ?"
                " WHERE run_id = ? AND status = 'running'",
                (outcome, now, run_id),
            )
            return cursor.rowcount == 1

        return await self._db.write(run)

    async def withdraw_queued(self, run_id: str, why: str) -> bool:
        """Mark a run that has not started to end without a post (its ``announce_state``
        :data:`~gateway.state.lifecycle.WITHDRAWN`, ``why`` its error), before it is
        stopped; False when it has started or ended (nothing is written)."""

        def run(conn: Connection) -> bool:
            cursor = conn.last(
                "UPDATE runs SET announce_state = ?, error = ?"
                " WHERE run_id = ? AND status = 'queued'",
                (WITHDRAWN, why, run_id),
            )
            return cursor.rowcount == 1

        return await self._db.write(run)

    async def begin(self, run_id: str, started_at: float) -> RunRecord | None:
        """Move a queued (or resumed ``running``) run to ``running``, started at
        ``started_at``; None when it was withdrawn before it started
        (:meth:`withdraw_queued`) or is no longer live. The database orders the two: a run
        withdrawn first never starts, a run started first is not withdrawn (it goes on and
        is announced like any run)."""

        def run(conn: Connection) -> RunRecord | None:
            rows = conn.last(
                "UPDATE runs SET status = 'running', started_at = ?"
                " WHERE run_id = ? AND status IN ('queued', 'running')"
                " AND NOT (status = 'queued' AND COALESCE(announce_state, '') = ?)"
                f" RETURNING {_COLUMNS}",
                (started_at, run_id, WITHDRAWN),
            ).fetchall()
            return run_from_row(rows[0]) if rows else None  # both live: no count moves

        return await self._db.write(run)

    async def update(
        self, run_id: str, /, *, spent: Spent | None = None, **changes: Any
    ) -> RunRecord:
        """Set columns of one run; return the updated row (or raise RecordNotFoundError).
        With ``spent``, a turn's usage is added to the run's totals and its child session's
        in the same write (a run's own turn, saved with the status it ends in)."""
        assignments, values = update_assignments("runs", changes, _UPDATABLE)
        if spent is not None and spent.empty:
            spent = None  # nothing to add
        if spent is not None:
            assignments = f"{assignments}, {ADD_USAGE_SQL}"
            values = [*values, *usage_values(*spent)]
        sql = f"UPDATE runs SET {assignments} WHERE run_id = ? RETURNING {_COLUMNS}"
        status = changes.get("status")
        # A live run moved to another live status (started, announcing) keeps its place in
        # its requester's count: tried first, with no read of the status it had.
        live_to_live = (
            f"UPDATE runs SET {assignments} WHERE run_id = ? AND status NOT IN {_FINAL_MARKS}"
            f" RETURNING {_COLUMNS}"
            if status is not None and is_live(str(status))
            else None
        )
        now = time.time()

        def add_to_session(conn: Connection, *, live: bool) -> None:
            # The child session's share goes first, on the same condition as the run's row,
            # so the run's statement can still travel with the COMMIT.
            if spent is not None:
                key = _child_of_run(live=live)
                marks = [*usage_values(*spent), now, run_id, *(_FINISHED if live else ())]
                conn.queue(session_usage_sql(self._db.dialect, key=key), marks)

        def live_only(conn: Connection) -> RunRecord | None:
            add_to_session(conn, live=True)
            rows = conn.last(live_to_live or sql, [*values, run_id, *_FINISHED]).fetchall()
            return run_from_row(rows[0]) if rows else None  # none: nothing was written

        def run(conn: Connection) -> RunRecord:
            if status is None:  # no count moves: one statement, sent with the COMMIT
                add_to_session(conn, live=False)
                rows = conn.last(sql, [*values, run_id]).fetchall()
                if len(rows) != 1:
                    raise RecordNotFoundError("runs", run_id)
                return run_from_row(rows[0])
            before = conn.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            add_to_session(conn, live=False)
            after = returned_run(conn, sql, [*values, run_id], run_id)
            if before is not None:
                delta = is_live(after.progress.status) - is_live(before[0])
                count_live(conn, after.request.parent_session_key, delta)
            return after

        updated: RunRecord | None = None
        if live_to_live is not None:
            # Almost always the case, in one round trip on PostgreSQL; a run already final
            # (or missing) writes nothing here and takes the general write.
            updated = await self._db.write(live_only)
        if updated is None:
            updated = await self._db.write(run)
        if spent is not None:
            self._session_changed(updated.child_session_key)
        return updated

    async def add_usage(
        self, run_id: str, usage: Usage, cost_usd: float | None = None
    ) -> RunRecord:
        """Add ``usage`` (and ``cost_usd`` when known) to the run's totals."""
        sql = f"UPDATE runs SET {ADD_USAGE_SQL} WHERE run_id = ? RETURNING {_COLUMNS}"
        params = usage_values(usage, cost_usd)

        def run(conn: Connection) -> RunRecord:
            rows = conn.last(sql, (*params, run_id)).fetchall()
            if len(rows) != 1:  # nothing was written
                raise RecordNotFoundError("runs", run_id)
            return run_from_row(rows[0])

        return await self._db.write(run)

    async def list(
        self,
        *,
        statuses: Iterable[str] | None = None,
        parent_session_key: str | None = None,
        child_session_key: str | None = None,
        parent_run_id: str | None = None,
        limit: int | None = None,
        oldest_first: bool = False,
    ) -> builtins.list[RunRecord]:
        """Runs matching every given filter, newest first unless ``oldest_first``."""
        where: builtins.list[str] = []
        params: builtins.list[Any] = []
        if statuses is not None:
            clause, items = in_clause(statuses)
            where.append(f"status IN {clause}")
            params.extend(items)
        if parent_session_key is not None:
            where.append("parent_session_key = ?")
            params.append(parent_session_key)
        if child_session_key is not None:
            where.append("child_session_key = ?")
            params.append(child_session_key)
        if parent_run_id is not None:
            where.append("parent_run_id = ?")
            params.append(parent_run_id)
        sql = _SELECT + (" WHERE " + " AND ".join(where) if where else "")
        order = "ASC" if oldest_first else "DESC"
        sql += f" ORDER BY created_at {order}, run_id {order}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(0, limit))

        def run(conn: Connection) -> builtins.list[RunRecord]:
            return [run_from_row(row) for row in conn.execute(sql, params)]

        return await self._db.read(run)

    async def session_tree(self, session_key: str) -> builtins.list[RunRecord]:
        """Every run ``session_key`` spawned and every run spawned under those, shallowest
        first."""
        return await self._tree("parent_session_key = ?", session_key)

    async def _tree(self, roots: str, value: str) -> builtins.list[RunRecord]:
        # UNION (not UNION ALL) drops repeats, so even a malformed cycle ends.
        sql = (
            "WITH RECURSIVE tree(run_id) AS ("
            f" SELECT run_id FROM runs WHERE {roots}"
            " UNION SELECT r.run_id FROM runs r JOIN tree t ON r.parent_run_id = t.run_id)"
            f" {_SELECT} WHERE run_id IN (SELECT run_id FROM tree)"
            " ORDER BY depth, created_at, run_id"
        )

        def run(conn: Connection) -> builtins.list[RunRecord]:
            return [run_from_row(row) for row in conn.execute(sql, (value,))]

        return await self._db.read(run)

    async def below(self, run_ids: Iterable[str], *, limit: int) -> builtins.list[RunRecord]:
        """The runs below ``run_ids`` (children, their children, …), oldest first, at most
        ``limit`` of them: what a tree view shows under the runs it lists."""
        roots = builtins.list(run_ids)
        if not roots:
            return []
        clause, items = in_clause(roots)
        sql = (
            "WITH RECURSIVE below(run_id) AS ("
            f" SELECT run_id FROM runs WHERE parent_run_id IN {clause}"
            " UNION SELECT r.run_id FROM runs r JOIN below b ON r.parent_run_id = b.run_id)"
            f" {_SELECT} WHERE run_id IN (SELECT run_id FROM below)"
            " ORDER BY created_at, run_id LIMIT ?"
        )

        def run(conn: Connection) -> builtins.list[RunRecord]:
            return [run_from_row(row) for row in conn.execute(sql, [*items, max(0, limit)])]

        return await self._db.read(run)

    async def live_children(self, parent_session_key: str) -> int:
        """How many runs ``parent_session_key`` spawned that are not final."""
        return await self._db.read(lambda conn: _live_children(conn, parent_session_key))

    async def lineage(self, run_id: str) -> builtins.list[RunRecord]:
        """The runs above ``run_id`` (its requester's run, and so on up), the one a
        person's session spawned first; empty for a run of depth 1."""
        sql = (
            "WITH RECURSIVE up(run_id, parent_run_id, n) AS ("
            " SELECT run_id, parent_run_id, 0 FROM runs WHERE run_id = ?"
            " UNION ALL SELECT r.run_id, r.parent_run_id, up.n + 1 FROM runs r"
            f" JOIN up ON r.run_id = up.parent_run_id WHERE up.n < {_MAX_CHAIN})"
            f" SELECT {column_list(RUN_COLUMNS, prefix='r.')} FROM up"
            " JOIN runs r ON r.run_id = up.run_id WHERE up.n > 0 ORDER BY up.n DESC"
        )

        def run(conn: Connection) -> builtins.list[RunRecord]:
            return [run_from_row(row) for row in conn.execute(sql, (run_id,))]

        return await self._db.read(run)

    async def live_descendants(self, run_id: str) -> builtins.list[RunRecord]:
        """Every run below ``run_id`` (its children, theirs, …) that is not final, the
        shallowest first."""
        marks, statuses = in_clause(sorted(FINISHED_STATUSES))
        sql = (
            "WITH RECURSIVE down(run_id) AS ("
            " SELECT run_id FROM runs WHERE parent_run_id = ?"
            " UNION SELECT r.run_id FROM runs r JOIN down ON r.parent_run_id = down.run_id)"
            f" {_SELECT} WHERE run_id IN (SELECT run_id FROM down)"
            f" AND status NOT IN {marks} ORDER BY depth, created_at, run_id"
        )

        def run(conn: Connection) -> builtins.list[RunRecord]:
            return [run_from_row(row) for row in conn.execute(sql, [run_id, *statuses])]

        return await self._db.read(run)

    async def unarchived_finished(self) -> builtins.list[RunRecord]:
        """Finished runs whose child session was neither archived nor scheduled for it (a
        crash between a run's final status and its archive step), oldest first."""
        clause, statuses = in_clause(FINISHED_STATUSES)
        sql = (
            f"SELECT {column_list(RUN_COLUMNS, prefix='r.')} FROM runs r"
            " JOIN sessions s ON s.key = r.child_session_key"
            f" WHERE r.status IN {clause} AND s.archived_at IS NULL"
            " AND s.archive_due_at IS NULL ORDER BY r.created_at, r.run_id"
        )

        def run(conn: Connection) -> builtins.list[RunRecord]:
            return [run_from_row(row) for row in conn.execute(sql, statuses)]

        return await self._db.read(run)


def _insert_run(
    run: RunRecord, max_live_siblings: int | None, *, returning: bool = False
) -> Callable[[Connection], Any]:
    """The write inserting ``run`` (and counting it live); with ``returning`` it gives the
    inserted row."""
    sql = insert_sql("runs", RUN_COLUMNS) + (f" RETURNING {_COLUMNS}" if returning else "")
    columns = run_columns(run)
    values = [to_column_value(columns[name]) for name in RUN_COLUMNS]
    parent = run.request.parent_session_key

    live = is_live(run.progress.status)

    def write(conn: Connection) -> Any:
        if parent is not None and live:
            # Counted first: the new count is the room check (the whole write rolls back
            # when it is refused), one statement instead of a read and an upsert.
            counted = conn.execute(_LIVE_COUNT_RETURNING_SQL, (parent, 1)).fetchall()
            if max_live_siblings is not None and int(counted[0][0]) > max_live_siblings:
                raise ChildLimitError(parent, max_live_siblings)
        elif max_live_siblings is not None and parent is not None:
            _require_room(conn, parent, max_live_siblings)
        if not returning:  # nothing to read: it goes with the COMMIT on PostgreSQL
            conn.queue(sql, values)
            return None
        rows = conn.execute(sql, values).fetchall()
        return rows[0] if rows else None

    return write


def _child_of_run(*, live: bool) -> str:
    """SQL of a run's child session key (bound: the run id, then, when ``live``, the final
    statuses): NULL — no session — when there is no such run, or when ``live`` and the run
    is final already."""
    unless_final = f" AND status NOT IN {_FINAL_MARKS}" if live else ""
    return f"(SELECT child_session_key FROM runs WHERE run_id = ?{unless_final})"


_LIVE_COUNT_SQL = (
    "INSERT INTO live_runs (parent_session_key, live) VALUES (?, ?)"
    " ON CONFLICT (parent_session_key) DO UPDATE SET live = live_runs.live + excluded.live"
)
_LIVE_COUNT_RETURNING_SQL = f"{_LIVE_COUNT_SQL} RETURNING live"


def is_live(status: str) -> bool:
    """Whether a run in ``status`` is not final yet (it counts against its requester)."""
    return status not in FINISHED_STATUSES


def count_live(conn: Connection, parent_session_key: str | None, delta: int) -> None:
    """Move ``parent_session_key``'s count of live runs by ``delta``, in the caller's
    transaction: every write that inserts a run or changes its status calls it."""
    if parent_session_key is not None and delta:
        conn.queue(_LIVE_COUNT_SQL, (parent_session_key, delta))


def _live_children(conn: Connection, parent_session_key: str) -> int:
    row = conn.execute(
        "SELECT live FROM live_runs WHERE parent_session_key = ?", (parent_session_key,)
    ).fetchone()
    return int(row[0]) if row is not None else 0


def _require_room(conn: Connection, parent_session_key: str, limit: int) -> None:
    if _live_children(conn, parent_session_key) >= limit:
        raise ChildLimitError(parent_session_key, limit)


def returned_run(conn: Connection, sql: str, params: Iterable[Any], run_id: str) -> RunRecord:
    """The run an ``UPDATE … RETURNING`` of one run gave (RecordNotFoundError if none)."""
    return run_from_row(returned_row(conn, sql, params, "runs", run_id))
