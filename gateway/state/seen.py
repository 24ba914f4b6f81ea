"""The ``seen_keys`` table: keys of chat events already handled, each until it expires.

Channels name an event by its keys (Slack: the event id, the request's timestamp and
signature) and ask whether any was seen; the answer and the new keys are one transaction, so
two deliveries of one event at once cannot both be new. Expired rows are deleted as new
ones arrive, so the table holds about one window's worth of events.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from gateway.state._sql import Database, in_clause
from gateway.state.connection import Connection


class SeenTable:
    """Data access for ``seen_keys``; also a :class:`channels.replay.SeenKeys`."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def first_sighting(
        self, keys: Sequence[str], ttl_seconds: float, *, now: float | None = None
    ) -> bool:
        """Remember ``keys`` until ``ttl_seconds`` from now (never shortening an entry);
        True when none of them was remembered already."""
        unique = list(dict.fromkeys(keys))
        if not unique:
            return True

        def run(conn: Connection) -> bool:
            at = time.time() if now is None else now
            conn.queue("DELETE FROM seen_keys WHERE expires_at < ?", (at,))
            marks, values = in_clause(unique)
            seen = conn.execute(
                f"SELECT 1 FROM seen_keys WHERE key IN {marks} LIMIT 1", values
            ).fetchone()
            later = conn.dialect.larger("seen_keys.expires_at", "excluded.expires_at")
            upsert = (
                "INSERT INTO seen_keys (key, expires_at) VALUES (?, ?) ON CONFLICT (key)"
                f" DO UPDATE SET expires_at = {later}"
            )
            for key in unique:  # with the COMMIT, on PostgreSQL
                conn.queue(upsert, (key, at + ttl_seconds))
            return seen is None

        return await self._db.write(run)

    async def count(self) -> int:
        """Rows held, expired ones not yet deleted included."""

        def run(conn: Connection) -> int:
            return int(conn.execute("SELECT COUNT(*) FROM seen_keys").fetchone()[0])

        return await self._db.read(run)
