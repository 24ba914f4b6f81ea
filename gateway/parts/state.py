"""The state database and the session store on it: the first part up, the last one down."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from aiohttp import web

from gateway.reload import settings_of
from gateway.sessions import SessionStore
from gateway.state import RunsTable, StateDB, backend_of, open_state

logger = logging.getLogger(__name__)

STATE = web.AppKey("state", StateDB)
SESSION_STORE = web.AppKey("session_store", SessionStore)
#: The runs table alone, for readers that need nothing else of the database (the API).
RUN_RECORDS = web.AppKey("run_records", RunsTable)


async def state_setup(app: web.Application) -> AsyncIterator[None]:
    """Open (and migrate) the configured database and the session store on it."""
    settings = settings_of(app)
    config = settings.state_config()
    db = await open_state(config)
    cluster = config.database_url is not None
    store = SessionStore(config.state_dir, db, replica_id=config.replica_id if cluster else None)
    app[STATE] = db
    app[SESSION_STORE] = store
    app[RUN_RECORDS] = db.runs
    # The schema version the start ended at (after any migrations it applied).
    extra = {
        "state_dir": str(config.state_dir),
        "database": backend_of(config),
        "schema_version": str(db.schema_version),
    }
    if cluster:
        extra["replica"] = config.replica_id
    logger.info("state ready", extra=extra)
    try:
        yield
    finally:
        await store.aclose()
        await db.close()
