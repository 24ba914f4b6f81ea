"""A fresh state database per test, closed afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.state import StateDB


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[StateDB]:
    database = await StateDB.open(tmp_path / "herald.db")
    try:
        yield database
    finally:
        await database.close()
