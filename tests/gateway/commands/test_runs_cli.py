"""``herald spawn`` through a running gateway, ``herald runs list|show`` and
``herald config show`` (DESIGN §11), as real processes."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import orjson

from gateway.state import BatchRecord, SessionRecord, StateDB
from tests.gateway.daemon_process import HERALD, clean_env, free_port, herald, write_config
from tests.gateway.harness import TEST_SCRIPT
from tests.gateway.nested import record_nested_run, record_run

TOKEN = "cli-test-token-0123456789"


def config(tmp_path: Path, port: int) -> Path:
    script = tmp_path / "script.json"
    script.write_bytes(orjson.dumps(TEST_SCRIPT))
    return write_config(
        tmp_path / "herald.json",
        {
            "gateway": {
                "port": port,
                "stateDir": str(tmp_path / "state"),
                "auth": {"token": TOKEN},
            },
            "agent": {"model": "t/m"},
            "models": {
                "providers": {
                    "t": {
                        "api": "scripted",
                        "script": str(script),
                        "models": [{"id": "m", "cost": {"input": 1, "output": 2}}],
                    }
                }
            },
            "channels": {"webchat": {"enabled": False}},
        },
    )


async def cli(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *HERALD,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=clean_env(),
    )
    async with asyncio.timeout(60):
        out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_spawn_waits_for_the_announce_and_runs_show_it(tmp_path: Path) -> None:
    port = free_port()
    path = config(tmp_path, port)
    async with herald("run", "--config", str(path), port=port) as daemon:
        await daemon.wait_healthy()
        code, out, err = await cli(
            "spawn", "task: from the cli", "--label", "cli", "--wait", "--config", str(path)
        )
        assert code == 0, err
        first, status, *announce = out.splitlines()
        assert first.startswith("accepted run ")
        run_id = first.split()[2]
        assert status == "status: done"
        assert announce[0] == "ANNOUNCE: done: from the cli"
        assert announce[-1].startswith("Stats: runtime ")

        code, out, _ = await cli("runs", "list", "--config", str(path))
        assert code == 0
        assert run_id in out
        assert "done" in out
        code, out, _ = await cli("runs", "show", run_id[:8], "--config", str(path))
        assert code == 0
        assert f"run        {run_id}" in out
        assert "model      t/m" in out
        code, out, _ = await cli("runs", "show", run_id, "--json", "--config", str(path))
        shown = json.loads(out)
        assert (shown["runId"], shown["status"], shown["label"]) == (run_id, "done", "cli")
        code, _, err = await cli("runs", "show", "nope", "--config", str(path))
        assert code == 1
        assert "no run matches 'nope'" in err


async def test_spawn_errors_are_clear(tmp_path: Path) -> None:
    port = free_port()
    path = config(tmp_path, port)
    code, _, err = await cli("spawn", "task: x", "--config", str(path))
    assert code == 69  # nothing listens yet
    assert "cannot reach the gateway" in err
    async with herald("run", "--config", str(path), port=port) as daemon:
        await daemon.wait_healthy()
        code, _, err = await cli("spawn", "task: x", "--agent", "ghost", "--config", str(path))
        assert code == 1
        assert "unknown agent 'ghost'" in err


async def test_config_show_masks_secrets(tmp_path: Path) -> None:
    path = config(tmp_path, free_port())
    code, out, _ = await cli("config", "show", "--format", "json", "--config", str(path))
    assert code == 0
    assert TOKEN not in out
    assert json.loads(out)["gateway"]["auth"]["token"] == "********"


async def test_runs_list_shows_the_tree_with_batches_and_show_names_parent_and_children(
    tmp_path: Path,
) -> None:
    path = config(tmp_path, free_port())
    chat = "agent:main:webchat:c1"
    db = await StateDB.open(tmp_path / "state" / "herald.db")
    try:
        at = time.time() - 600
        await db.sessions.create(
            SessionRecord(
                key=chat,
                session_id="s-chat",
                agent_id="main",
                kind="chat",
                created_at=at,
                updated_at=at,
            )
        )
        tea = await record_run(db, chat, "tea", status="running", created_at=at + 1)
        coffee = await record_run(db, chat, "coffee", status="queued", created_at=at + 2)
        batch = await db.batches.form(
            BatchRecord(
                batch_id=str(uuid.uuid4()),
                session_key=chat,
                run_ids=(),
                first_spawn_at=at,
                created_at=at + 3,
                deadline_at=at + 3600,
            )
        )
        assert batch is not None
        notes = await record_nested_run(db, tea, "notes", created_at=at + 4)
        deep = await record_nested_run(db, notes, "sources", status="error", created_at=at + 5)
        alone = await record_run(db, chat, "alone", created_at=at + 6)
    finally:
        await db.close()
    short = batch.batch_id[:8]

    code, out, err = await cli("runs", "list", "--config", str(path))
    assert code == 0, err
    # run id, status, when (2026-01-31 14:55), then the name column, indented in the tree
    listed = [(line[:36], line[38:49].strip(), line[68:]) for line in out.splitlines()]
    assert listed == [
        (alone.run_id, "done", "alone"),
        (coffee.run_id, "queued", f"coffee  [batch {short}]"),
        (tea.run_id, "running", f"tea  [batch {short}]"),
        (notes.run_id, "done", "  ↳ notes"),
        (deep.run_id, "error", "    ↳ sources"),
    ]
    # A filter can leave out a run's parent: the run then says whose it is.
    code, out, _ = await cli("runs", "list", "--status", "error", "--config", str(path))
    assert out.splitlines()[0].endswith(f"  sources  [under {notes.run_id[:8]}]")
    code, out, _ = await cli("runs", "list", "--json", "--config", str(path))
    shown = {r["runId"]: (r["parentRunId"], r["depth"], r["batchId"]) for r in json.loads(out)}
    assert shown[deep.run_id] == (notes.run_id, 3, None)
    assert shown[tea.run_id] == (None, 1, batch.batch_id)

    code, out, _ = await cli("runs", "show", tea.run_id[:8], "--config", str(path))
    assert code == 0
    lines = out.splitlines()
    assert "depth      1" in lines
    assert f"batch      {batch.batch_id}" in lines
    assert f"children   {notes.run_id[:8]} done        notes" in lines
    code, out, _ = await cli("runs", "show", deep.run_id, "--config", str(path))
    assert f"depth      3 (spawned by run {notes.run_id})" in out.splitlines()
    code, out, _ = await cli("runs", "show", notes.run_id, "--json", "--config", str(path))
    detail = json.loads(out)
    assert (detail["parentRunId"], detail["depth"]) == (tea.run_id, 2)
    assert detail["children"] == [
        {"runId": deep.run_id, "label": "sources", "status": "error", "depth": 3}
    ]
