"""SQLite's group commit: the writes queued together run in one ``BEGIN IMMEDIATE``
transaction, each in a savepoint of its own (the queue and its rules are
:mod:`gateway.state._group`'s)."""

from __future__ import annotations

import sqlite3
from typing import Any, Final

from gateway.state._group import Outcome, Write
from gateway.state.sqlite.connection import SqliteConnection

_SAVEPOINT: Final = "herald_write"


class SqliteGroups:
    """SQLite's :class:`GroupRunner`: ``begin`` opens the transaction (``BEGIN IMMEDIATE``,
    so the write lock is taken before the group's first write runs), each write runs in a
    savepoint of its own (see the module docstring)."""

    def __init__(self, connection: sqlite3.Connection, *, begin: str = "BEGIN IMMEDIATE") -> None:
        self._connection = connection
        #: What the writes are given: the same connection, raising Herald's typed errors.
        self._tables = SqliteConnection(connection)
        self._begin = begin
        #: Transactions committed, writes run, writes run again (see GroupRunner).
        self.commits = 0
        self.writes = 0
        self.rerun = 0

    def __call__(self, todo: list[Write], outcomes: list[Outcome]) -> list[Write]:
        """Run ``todo`` in one transaction; returns the writes to run again (in a new one)."""
        conn = self._connection
        try:
            conn.execute(self._begin)
        except BaseException as exc:
            outcomes.extend((w, None, exc) for w in todo)
            return []
        done: list[tuple[Write, Any]] = []
        # A write alone in its transaction needs no savepoint: its failure rolls back all.
        alone = len(todo) == 1
        for index, write in enumerate(todo):
            try:
                if not alone:
                    conn.execute(f"SAVEPOINT {_SAVEPOINT}")
                result = write.fn(self._tables)
                if not alone:
                    conn.execute(f"RELEASE {_SAVEPOINT}")
            except BaseException as exc:
                outcomes.append((write, None, exc))
                if alone:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    return []
                if _undo_one(conn):
                    continue
                # The transaction is gone, and the writes before this one with it.
                again = [w for w, _ in done] + todo[index + 1 :]
                self.rerun += len(again)
                return again
            done.append((write, result))
        try:
            conn.execute("COMMIT")
        except BaseException as exc:
            # A COMMIT that failed may leave the transaction open; every later BEGIN
            # would fail with it.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            outcomes.extend((w, None, exc) for w, _ in done)
            return []
        self.commits += 1
        self.writes += len(done)
        outcomes.extend((w, result, None) for w, result in done)
        return []


def _undo_one(conn: sqlite3.Connection) -> bool:
    """Roll back to the failed write's savepoint; False when the transaction is gone."""
    if not conn.in_transaction:
        return False
    try:
        conn.execute(f"ROLLBACK TO {_SAVEPOINT}")
        conn.execute(f"RELEASE {_SAVEPOINT}")
    except sqlite3.Error:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        return False
    return True
