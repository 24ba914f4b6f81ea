"""Fixtures shared by the gateway's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gateway.state import StateDB

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
    database = await StateDB.open(tmp_path / "herald.db")
    try:
        yield database
    finally:
        await database.close()
