"""Finding a session from a key, a session id, a run id or a transcript path — stale ones
(from before the archive renamed the file) included — in a real state directory."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gateway.llm import ChatMessage
from gateway.sessions import (
    SessionKey,
    SessionKeyError,
    SessionNotFoundError,
    SessionRefError,
    SessionStore,
    parse_ref,
)
from gateway.state import RunRecord, SessionRecord
from tests.gateway.sessions.support import opened_store
from tests.gateway.state.records import run_record


@dataclass
class Archived:
    store: SessionStore
    session: SessionRecord
    run: RunRecord
    live: Path
    archived: Path


@pytest.fixture
async def archived(tmp_path: Path) -> AsyncIterator[Archived]:
    """A sub-agent session with its run, archived: its transcript renamed."""
    async with opened_store(tmp_path / "state") as store:
        parent = await store.ensure("agent:main:main")
        child = await store.ensure(SessionKey.subagent("main"), parent_key=parent.key)
        await store.append_message(child, ChatMessage(role="user", content="the task"))
        live = store.transcript_path(child)
        run = await store.db.runs.insert(
            run_record(
                child,
                task="the task",
                created_at=time.time(),
                parent_session_key=parent.key,
                transcript_path=os.fspath(live),
            )
        )
        moved = await store.archive(child.key)
        assert moved is not None
        yield Archived(store, await store.require(child.key), run, live, moved)


async def test_every_reference_finds_the_archived_transcript(archived: Archived) -> None:
    store, session = archived.store, archived.session
    refs = [
        session.key,
        session.session_id,
        session.session_id.upper(),
        archived.run.run_id,
        os.fspath(archived.live),  # the path a stats line gave before the archive
        archived.live.name,
        os.fspath(archived.archived),
        archived.archived.name,
    ]
    for ref in refs:
        found = await store.locate(ref)
        assert found.session.key == session.key, ref
        assert found.path == archived.archived, ref
        assert str(found.archived_at).endswith("Z")
    assert (await store.locate(archived.run.run_id)).run_id == archived.run.run_id
    note = (await store.locate(os.fspath(archived.live))).note()
    assert note == (
        f"session {session.key} was archived at {(await store.locate(session.key)).archived_at}"
        f"; its transcript is now {archived.archived}"
    )


async def test_a_live_session_is_found_where_it_is(archived: Archived) -> None:
    main = await archived.store.require("agent:main:main")
    live = archived.store.transcript_path(main)
    for ref in (main.key, main.session_id, os.fspath(live)):
        found = await archived.store.locate(ref)
        assert (found.session.key, found.path, found.archived_at) == (main.key, live, None)
        assert found.note() is None


async def test_a_path_is_matched_by_its_session_id_never_opened_as_given(
    archived: Archived, tmp_path: Path
) -> None:
    store = archived.store
    # The very file name, elsewhere: refused, though the file exists and reads fine.
    elsewhere = tmp_path / "elsewhere" / archived.live.name
    elsewhere.parent.mkdir()
    elsewhere.write_text('{"type":"session"}\n')
    for ref in (
        os.fspath(elsewhere),
        f"{store.state_dir}/agents/main/sessions/../../../../elsewhere/{archived.live.name}",
        f"/etc/{archived.live.name}",
    ):
        with pytest.raises(SessionRefError, match="not a transcript of the state directory"):
            await store.locate(ref)
    # Inside the state directory, but not the session's own folder.
    with pytest.raises(SessionNotFoundError):
        await store.locate(f"{store.state_dir}/agents/other/sessions/{archived.live.name}")
    with pytest.raises(SessionNotFoundError):
        await store.locate(f"{store.state_dir}/{archived.live.name}")


async def test_unknown_and_malformed_references(archived: Archived) -> None:
    store = archived.store
    for unknown in (
        str(uuid.uuid4()),
        "agent:main:webchat:nobody",
        f"{uuid.uuid4()}.jsonl",
        f"{store.state_dir}/agents/main/sessions/{uuid.uuid4()}.jsonl",
    ):
        with pytest.raises(SessionNotFoundError):
            await store.locate(unknown)
    with pytest.raises(SessionKeyError):
        await store.locate("agent:main:../x")
    for junk in (
        "",
        "hello",
        "../../etc/passwd",
        "/etc/passwd",
        f"{archived.live.name}\x00",
        f"x/{archived.live.name}.bak",
        f"{archived.live.name}.deleted.yesterday",
    ):
        with pytest.raises(SessionRefError, match="not a session key"):
            parse_ref(junk)


async def test_a_symlinked_or_moved_state_directory_still_finds_the_archive(
    archived: Archived, tmp_path: Path
) -> None:
    await archived.store.flush()
    await archived.store.db.close()
    link = tmp_path / "link"
    link.symlink_to(archived.store.state_dir)
    # Configured through a symlink (a mount, say): a path naming the real folder is found.
    async with opened_store(link) as store:
        found = await store.locate(os.fspath(archived.live))
        assert found.path == link / archived.archived.relative_to(archived.store.state_dir)

    moved = tmp_path / "restored"
    shutil.copytree(archived.store.state_dir, moved)
    async with opened_store(moved) as store:
        found = await store.locate(archived.session.key)
        # The recorded path is the old directory's; the archive is found in this one.
        assert found.session.archived_path == os.fspath(archived.archived)
        assert found.path == moved / archived.archived.relative_to(archived.store.state_dir)
        assert found.path.is_file()
        assert [m["content"] for m in await store.history(archived.session.key)] == ["the task"]


async def test_an_archive_whose_file_was_already_gone(tmp_path: Path) -> None:
    async with opened_store(tmp_path / "state") as store:
        record = await store.ensure(SessionKey.subagent("main"))
        store.transcript_path(record).unlink()
        await store.archive(record.key)
        found = await store.locate(record.session_id)
        assert found.path is None
        assert found.note() == (
            f"session {record.key} was archived at {found.archived_at}; "
            "its transcript was already gone"
        )
