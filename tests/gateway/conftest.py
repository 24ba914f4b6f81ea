"""Fixtures shared by the gateway's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gateway.state import SqliteStateDB, StateDB
from tests.postgres import BACKENDS

#: Writes a file under the test's temporary directory; returns its path.
WriteFile = Callable[[str, str | bytes], Path]


@pytest.fixture
def write(tmp_path: Path) -> WriteFile:
    def _write(name: str, content: str | bytes) -> Path:
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    return _write


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[StateDB]:
    """A fresh state database, closed afterwards."""
    database = await SqliteStateDB.open(tmp_path / "herald.db")
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest) -> str | None:
    """Each state backend in turn for a gateway test: None (SQLite in the state directory),
    then the URL of a fresh schema on the session's PostgreSQL (``cluster.databaseUrl``)."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return None
