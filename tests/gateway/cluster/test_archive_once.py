"""Each due archive once: every replica schedules the archives it knows of, and the one that
claims the session in the database renames its transcript; a claim whose rename was never
recorded (its replica died in between) is finished by a survivor, or by the claimant itself
when it starts again."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

import gateway.sessions.archiving as archiving_module
from gateway.sessions.paths import rename_to_archived
from gateway.state import StateDB
from tests.gateway.cluster._replicas import eventually, replica, two_replicas
from tests.gateway.harness import hang_guard, running_gateway
from tests.postgres import BACKENDS

KEY = "agent:main:main"
#: Auto-archive on (its delay is not what these tests use: they give due times).
ARCHIVING = {"agent": {"subagents": {"archiveAfterMinutes": 60}}}


@pytest.fixture
def renames(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The transcripts each rename sweep was asked to rename (a spy on the real rename)."""
    asked: Counter[str] = Counter()

    def spy(lives: Sequence[Path], at: float) -> list[Path | OSError | None]:
        asked.update(live.name for live in lives)
        return rename_to_archived(lives, at)

    monkeypatch.setattr(archiving_module, "rename_to_archived", spy)
    return asked


def archived_files(state: Path) -> list[Path]:
    return sorted((state / "agents" / "main" / "sessions").glob("*.jsonl.deleted.*"))


@pytest.mark.postgres
async def test_a_due_archive_scheduled_on_two_replicas_renames_once(
    tmp_path: Path, pg_url: str, renames: Counter[str]
) -> None:
    async with two_replicas(tmp_path, pg_url, config=ARCHIVING) as (a, b):
        session = await a.store.ensure(KEY)
        live = a.store.transcript_path(session)
        due = time.time() + 0.5
        await a.archive.schedule(KEY, due)
        await b.archive.schedule(KEY, due)

        async def both_fired() -> bool:
            return not a.archive.is_scheduled(KEY) and not b.archive.is_scheduled(KEY)

        await eventually(both_fired, "both replicas' archive jobs fired")
        async with hang_guard("the archives in progress"):
            await a.archive.shutdown()  # waits for the archive it is running, if any
            await b.archive.shutdown()
        record = await b.db.sessions.get(KEY)
    assert renames == Counter({live.name: 1})
    assert record is not None
    assert record.archived
    assert archived_files(tmp_path / "state") == [Path(str(record.archived_path))]
    assert not live.exists()


async def _claim(db: StateDB, key: str, replica_id: str) -> None:
    claimed = await db.sessions.claim_archive([key], replica_id, now=time.time())
    assert [r.key for r in claimed] == [key]


@pytest.mark.postgres
@pytest.mark.parametrize("renamed", [False, True], ids=["before-rename", "after-rename"])
async def test_a_dead_replicas_unfinished_archive_is_finished_by_a_survivor(
    tmp_path: Path, pg_url: str, renamed: bool
) -> None:
    async with replica(tmp_path, pg_url, "survivor", config=ARCHIVING) as survivor:
        session = await survivor.store.ensure(KEY)
        live = survivor.store.transcript_path(session)
        await survivor.store.sync(session)
        # "ghost" claimed the archive and died, before or after its rename.
        await survivor.db.replicas.register("ghost", host="h", pid=1, now=0.0)
        await _claim(survivor.db, KEY, "ghost")
        if renamed:
            (renamed_to,) = [p for p in rename_to_archived([live], time.time()) if p]
            assert isinstance(renamed_to, Path)

        async def archived() -> bool:
            record = await survivor.db.sessions.get(KEY)
            return record is not None and record.archived

        await eventually(archived, "the survivor finished the archive")
        record = await survivor.db.sessions.get(KEY)
    assert record is not None
    assert [Path(str(record.archived_path))] == archived_files(tmp_path / "state")
    assert not live.exists()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_replica_finishes_its_own_unfinished_archive_when_it_starts(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    url = str(request.getfixturevalue("pg_url")) if backend == "postgres" else None
    name = "r1" if url is not None else archiving_module.LOCAL_REPLICA
    config = {**ARCHIVING, "cluster": {"replicaId": "r1"}}
    state = tmp_path / "state"
    async with running_gateway(tmp_path, config=config, state_dir=state, database_url=url) as gw:
        session = await gw.store.ensure(KEY)
        live = gw.store.transcript_path(session)
        await gw.store.sync(session)
        await _claim(gw.db, KEY, name)  # and then the process dies before renaming
    async with running_gateway(tmp_path, config=config, state_dir=state, database_url=url) as gw:
        record = await gw.db.sessions.get(KEY)
    assert record is not None
    assert record.archived
    assert [Path(str(record.archived_path))] == archived_files(state)
    assert not live.exists()
