"""Fixtures for every test: the session's PostgreSQL server (started only when a test asks)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import postgres


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[postgres.PostgresServer]:
    """A real PostgreSQL for this session; the tests that use it fail when it is missing."""
    server = postgres.start()
    try:
        yield server
    finally:
        postgres.stop()


@pytest.fixture
def pg_url(postgres_server: postgres.PostgresServer) -> str:
    """The URL of an empty schema of its own on the session's PostgreSQL."""
    return postgres_server.fresh_url()
