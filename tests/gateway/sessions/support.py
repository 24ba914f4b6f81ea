"""Shared helpers for tests that need a state database and a session store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from gateway.constants import STATE_DB_NAME
from gateway.sessions import SessionStore
from gateway.state import SqliteStateDB


@asynccontextmanager
async def opened_store(state_dir: Path, **options: Any) -> AsyncIterator[SessionStore]:
    """A store on a fresh (or existing) state directory; closes store and database after."""
    db = await SqliteStateDB.open(state_dir / STATE_DB_NAME)
    store = SessionStore(state_dir, db, **options)
    try:
        yield store
    finally:
        await store.aclose()
        await db.close()
