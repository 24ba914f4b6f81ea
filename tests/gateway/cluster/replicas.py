"""Replicas of a cluster in the test's loop: real apps (:func:`gateway.app.build_app`, every
resource, served on loopback) on one PostgreSQL schema and one state directory, each with
its own ``cluster.replicaId``, and the channels their configuration enables."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import orjson
import psycopg
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from channels import Channel
from gateway.app import AppParts, build_app
from gateway.cluster.connection import application_name
from gateway.parts.timing import Timing
from gateway.reload import SettingsHolder
from gateway.settings import HeraldSettings
from gateway.state import OutboxRecord
from tests.gateway.harness import FAST_TIMING, base_config, merge
from tests.postgres import running

#: Guard against a hung test; never an assertion about speed.
GUARD_SECONDS = 20.0
#: Lock tries, lock checks and LISTEN reconnects: quick, so takeovers are quick in tests.
POLL_SECONDS = 0.3
SCRIPT = {"rules": [{"match": r"^say (.+)$", "reply": "said $1"}], "default": {"reply": "?"}}

Client = TestClient[web.Request, web.Application]
T = TypeVar("T")


class Replica(AppParts):
    """A started replica: its app's parts, an HTTP client to it, what its outbox settled."""

    def __init__(
        self, app: web.Application, client: Client, replica_id: str, settled: list[OutboxRecord]
    ) -> None:
        super().__init__(app)
        self.client = client
        self.replica_id = replica_id
        self.settled = settled

    def __repr__(self) -> str:
        return f"<Replica {self.replica_id}>"

    def channel(self, name: str) -> Channel:
        return self.channels[name]

    async def delivered(self, run_id: str) -> OutboxRecord:
        """Wait until this replica's outbox settled the run's announce."""
        return await until(lambda: next((i for i in self.settled if i.run_id == run_id), None))


async def until(check: Callable[[], T | None]) -> T:
    """Wait until ``check()`` gives something (polls: replicas offer no event for it)."""
    async with asyncio.timeout(GUARD_SECONDS):
        while (found := check()) is None:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    return found


@asynccontextmanager
async def replica(
    tmp_path: Path,
    replica_id: str,
    *,
    database_url: str,
    channels: dict[str, Any],
    state_dir: Path | None = None,
) -> AsyncIterator[Replica]:
    """One replica on ``database_url`` and the shared state directory, serving on loopback."""
    script = tmp_path / "script.json5"
    script.write_bytes(orjson.dumps(SCRIPT))
    state = state_dir or tmp_path / "state"
    data = merge(
        base_config(state, script),
        {
            "gateway": {"shutdownDrainSeconds": 0},
            "cluster": {"databaseUrl": database_url, "replicaId": replica_id},
            "channels": {"webchat": {"enabled": False}, **channels},
        },
    )
    settled: list[OutboxRecord] = []
    timing = Timing(
        outbox_base_delay=FAST_TIMING.outbox_base_delay,
        provider_retry=FAST_TIMING.provider_retry,
        cluster_poll=POLL_SECONDS,
    )
    app = build_app(
        SettingsHolder(HeraldSettings.model_validate(data)),
        config_dir=tmp_path,
        timing=timing,
        delivery_listeners=[settled.append],
    )
    async with TestClient(TestServer(app)) as client:
        yield Replica(app, client, replica_id, settled)


def _admin() -> psycopg.Connection[tuple[Any, ...]]:
    # The server's own database: it stays open while the test database refuses connections.
    return psycopg.connect(running().admin_url("postgres"), autocommit=True)


def terminate(replica_id: str, role: str) -> int:
    """End the server side of a replica's connection for ``role`` (as when its host or the
    network dies); how many backends were ended."""
    name = application_name(replica_id, role)
    with _admin() as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (name,),
        ).fetchall()
    return len(rows)


def backends(replica_id: str, role: str) -> int:
    """Connections of a replica for ``role`` open now."""
    with _admin() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (application_name(replica_id, role),),
        ).fetchone()
    return int(row[0]) if row is not None else 0
