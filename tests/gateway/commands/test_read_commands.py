"""The read commands as real processes: they name the state directory they read, read the
configured state database (SQLite or PostgreSQL), find archived transcripts from any
reference, and end quietly when their reader goes away."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

from configbase import redact_url
from gateway.config import load_settings
from gateway.constants import STATE_DB_NAME
from gateway.llm import ChatMessage
from gateway.sessions import SessionKey, SessionStore
from gateway.state import open_state
from tests.gateway.daemon_process import HERALD, clean_env
from tests.gateway.sessions.support import opened_store
from tests.gateway.state.records import run_record

#: Messages in the long transcript: far more output than a pipe holds (64 KiB on Linux),
#: so the command is still writing when the reader closes the pipe.
LONG_TRANSCRIPT_MESSAGES = 3000


async def run_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *HERALD,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env or clean_env(),
        cwd=cwd,
    )
    async with asyncio.timeout(60):
        out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def write_config(tmp_path: Path, database_url: str | None = None) -> Path:
    data: dict[str, object] = {"gateway": {"stateDir": str(tmp_path / "state")}}
    if database_url is not None:
        data["cluster"] = {"databaseUrl": database_url}
    config = tmp_path / "herald.json"
    config.write_text(json.dumps(data))
    return config


async def test_read_commands_read_the_configured_state_database(
    tmp_path: Path, database_url: str | None
) -> None:
    config = write_config(tmp_path, database_url)
    state = tmp_path / "state"
    settings = load_settings(config, environ=clean_env()).settings
    db = await open_state(settings.state_config())  # as `herald run` opens it
    store = SessionStore(state, db)
    try:
        parent = await store.ensure("agent:main:main")
        child = await store.ensure(SessionKey.subagent("main"), parent_key=parent.key)
        await store.append_message(child, ChatMessage(role="user", content="count the stars"))
        run = await db.runs.insert(
            run_record(
                child,
                task="count the stars",
                created_at=time.time(),
                status="done",
                parent_session_key=parent.key,
                transcript_path=os.fspath(store.transcript_path(child)),
            )
        )
    finally:
        await store.aclose()
        await db.close()
    # The tables are where the configuration says: no SQLite file beside PostgreSQL's.
    assert (state / STATE_DB_NAME).exists() == (database_url is None)

    code, out, err = await run_cli("sessions", "list", "--all", "-c", str(config))
    assert code == 0, err
    heading = out.splitlines()[0]
    if database_url is None:
        assert heading == f"state directory {state} (config {config})"
    else:
        assert heading == (
            f"state directory {state} (config {config}; state database {redact_url(database_url)})"
        )
    assert {parent.key, child.key} <= {line.split()[0] for line in out.splitlines()[2:]}
    code, out, err = await run_cli("sessions", "show", run.run_id, "-c", str(config))
    assert code == 0, err
    assert f"key          {child.key}" in out
    code, out, err = await run_cli("transcripts", "show", child.key, "-c", str(config))
    assert code == 0, err
    assert "user: count the stars" in out
    code, out, err = await run_cli("runs", "list", "-c", str(config))
    assert code == 0, err
    assert any(line.startswith(run.run_id) for line in out.splitlines())
    code, out, err = await run_cli("runs", "show", run.run_id[:8], "-c", str(config))
    assert code == 0, err
    assert "task       count the stars" in out.splitlines()
    code, _, err = await run_cli("runs", "show", "ffffffff", "-c", str(config))
    assert code == 1
    where = f"state directory {state}"
    if database_url is not None:
        where = f"state database {redact_url(database_url)} ({where})"
    assert err == f"herald: no run matches 'ffffffff' in {where}\n"


async def test_read_commands_name_the_state_directory_they_read(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    async with opened_store(tmp_path / "state") as store:
        await store.ensure("agent:main:main")
    state = tmp_path / "state"
    code, out, _ = await run_cli("sessions", "list", "-c", str(config))
    assert code == 0
    assert out.splitlines()[0] == f"state directory {state} (config {config})"
    assert out.splitlines()[1].split() == [
        "KEY",
        "KIND",
        "MODEL",
        "UPDATED",
        "TOKENS",
        "COST",
        "TITLE",
    ]
    assert out.splitlines()[2].endswith("Main session")
    for args in (
        ("sessions", "show", "agent:main:webchat:ghost"),
        ("transcripts", "show", "agent:main:webchat:ghost"),
    ):
        code, _, err = await run_cli(*args, "-c", str(config))
        assert code == 1
        assert err == f"herald: no session agent:main:webchat:ghost in state directory {state}\n"

    # As under sudo: no config found, another home. The directory read is said plainly.
    home = tmp_path / "home"
    home.mkdir()
    env = clean_env(HOME=str(home))
    for name in ("XDG_CONFIG_HOME", "STATE_DIRECTORY"):
        env.pop(name, None)
    code, out, _ = await run_cli("sessions", "list", env=env, cwd=home)
    assert code == 0
    heading, empty = out.splitlines()
    assert heading.startswith(f"state directory {home / '.herald'} (")
    assert heading.endswith("; no state database there)")
    assert empty == "No sessions."
    code, out, _ = await run_cli("runs", "list", env=env, cwd=home)
    assert out.splitlines() == [heading, "No sub-agent runs."]
    code, _, err = await run_cli("runs", "show", "abc", env=env, cwd=home)
    assert code == 1
    assert err == (
        f"herald: no run matches 'abc': no state database in state directory {home / '.herald'}\n"
    )


async def test_an_archived_run_is_found_from_any_reference(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    async with opened_store(tmp_path / "state") as store:
        parent = await store.ensure("agent:main:main")
        child = await store.ensure(SessionKey.subagent("main"), parent_key=parent.key)
        await store.append_message(child, ChatMessage(role="user", content="count the stars"))
        live = store.transcript_path(child)
        run = await store.db.runs.insert(
            run_record(
                child,
                task="count the stars",
                created_at=time.time(),
                status="done",
                parent_session_key=parent.key,
                transcript_path=os.fspath(live),
            )
        )
        archived = await store.archive(child.key)
        assert archived is not None
        archived_at = store.location(await store.require(child.key)).archived_at
    assert archived_at is not None

    code, out, _ = await run_cli("runs", "show", run.run_id, "-c", str(config))
    assert code == 0
    lines = out.splitlines()
    assert f"transcript {archived}" in lines  # where it is now, not the path recorded at spawn
    assert f"archived   at {archived_at}" in lines
    for args in (("runs", "show", run.run_id, "--json"), ("runs", "list", "--json")):
        code, out, _ = await run_cli(*args, "-c", str(config))
        shown = json.loads(out)
        shown = shown[0] if isinstance(shown, list) else shown
        assert (shown["transcriptPath"], shown["archivedAt"]) == (str(archived), archived_at)

    for ref in (os.fspath(live), run.run_id, child.session_id, archived.name):
        code, out, err = await run_cli("sessions", "show", ref, "-c", str(config))
        assert code == 0, err
        assert f"key          {child.key}" in out
        assert f"archived     at {archived_at}" in out
        assert f"transcript   {archived}" in out
        code, out, err = await run_cli("transcripts", "show", ref, "--json", "-c", str(config))
        assert code == 0, err
        assert out == archived.read_text()
        assert err == (
            f"herald: session {child.key} was archived at {archived_at}; "
            f"its transcript is now {archived}\n"
        )

    # A path is matched by the session id in its name, never opened as given.
    copy = tmp_path / live.name
    copy.write_text(live.name)
    code, out, err = await run_cli("transcripts", "show", str(copy), "-c", str(config))
    assert (code, out) == (1, "")
    assert "not a transcript of the state directory" in err


async def test_no_traceback_when_the_reader_goes_away(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    async with opened_store(tmp_path / "state") as store:
        record = await store.ensure("agent:main:main")
        for n in range(LONG_TRANSCRIPT_MESSAGES):
            await store.append_message(record, ChatMessage(role="user", content=f"line {n}"))
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        'set -o pipefail; "$@" | head -n 1',
        "pipeline",
        *HERALD,
        "transcripts",
        "show",
        "agent:main:main",
        "-c",
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=clean_env(),
    )
    async with asyncio.timeout(60):
        out, err = await process.communicate()
    assert out.decode().startswith("session agent:main:main ")
    assert len(out.splitlines()) == 1
    assert err.decode() == ""  # no BrokenPipeError traceback, no "Exception ignored"
    assert process.returncode == 1  # herald's own status, through pipefail
