"""``herald spawn`` and ``herald runs abort`` through a running gateway, ``herald runs
list|show`` and ``herald config show``, as real processes."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from gateway.state import (
    FINISHED_STATUSES,
    BatchRecord,
    Origin,
    SessionRecord,
    SqliteStateDB,
)
from tests.gateway.commands._cli import TOKEN, cli, gateway_config, run_when
from tests.gateway.daemon_process import free_port, herald
from tests.gateway.nested import record_nested_run, record_run
from tests.gateway.sessions.support import opened_store


def config(tmp_path: Path, port: int) -> Path:
    return gateway_config(tmp_path, port, channels={"webchat": {"enabled": False}})


async def test_spawn_says_where_the_result_goes_and_wait_prints_it(tmp_path: Path) -> None:
    port = free_port()
    path = config(tmp_path, port)
    async with herald("run", "--config", str(path), port=port) as daemon:
        await daemon.wait_healthy()
        code, out, err = await cli(
            "spawn", "task: from the cli", "--label", "cli", "--cleanup", "delete", "--wait",
            "--config", str(path),
        )  # fmt: skip
        assert code == 0, err
        first, where, status, result = out.splitlines()
        assert first.startswith("accepted run ")
        run_id = first.split()[2]
        assert where == (
            "result: posted to no chat (no --session: the requester is agent:main:main, "
            "which has no chat); printed below when it ends"
        )
        assert status == "status: done"
        assert result == "done: from the cli"

        code, out, _ = await cli("runs", "list", "--config", str(path))
        assert code == 0
        assert run_id in out
        assert "done" in out

        # The run's session is archived after its announce: its transcript is renamed, and
        # the path on the (unchanged) stats line goes stale. Every reader still finds it.
        shown = await run_when(path, run_id, lambda run: run["archivedAt"] is not None)
        stats_path = shown["announce"]["text"].rsplit(" • transcript ", 1)[1]
        assert stats_path.endswith(f"{shown['childSessionId']}.jsonl")
        assert not Path(stats_path).exists()
        now = shown["transcriptPath"]
        assert now.startswith(f"{stats_path}.deleted.")
        assert Path(now).is_file()
        code, out, _ = await cli("runs", "show", run_id[:8], "--config", str(path))
        assert code == 0
        lines = out.splitlines()
        assert f"run        {run_id}" in lines
        assert "model      t/m" in lines
        assert "task       task: from the cli" in lines
        assert "origin     none: the announce goes to no chat" in lines
        assert "result     done: from the cli" in lines
        assert f"transcript {now}" in lines
        assert f"archived   at {shown['archivedAt']}" in lines
        refs = (stats_path, run_id, run_id[:8], shown["childSessionId"], shown["childSessionKey"])
        for ref in refs:
            code, out, err = await cli("transcripts", "show", ref, "--config", str(path))
            assert code == 0, (ref, err)
            assert "user: task: from the cli" in out
            assert err == (
                f"herald: session {shown['childSessionKey']} was archived at "
                f"{shown['archivedAt']}; its transcript is now {now}\n"
            )
        # `sessions show` takes a run id's first characters as `runs show` does.
        code, out, err = await cli("sessions", "show", run_id[:8], "--config", str(path))
        assert code == 0, err
        assert f"key          {shown['childSessionKey']}" in out.splitlines()
        code, out, _ = await cli("runs", "show", run_id, "--json", "--config", str(path))
        shown = json.loads(out)
        assert (shown["runId"], shown["status"], shown["label"]) == (run_id, "done", "cli")
        code, _, err = await cli("runs", "show", "nope", "--config", str(path))
        assert code == 1
        assert f"no run matches 'nope' in state directory {tmp_path / 'state'}" in err


async def test_spawn_from_a_chat_session_says_which_chat_gets_the_result(tmp_path: Path) -> None:
    port = free_port()
    path = config(tmp_path, port)
    chat = Origin(channel="webchat", account="default", chat_id="c7", chat_type="dm")
    async with opened_store(tmp_path / "state") as store:
        await store.ensure("agent:main:webchat:c7", origin=chat)
    async with herald("run", "--config", str(path), port=port) as daemon:
        await daemon.wait_healthy()
        code, out, err = await cli(
            "spawn", "task: for the chat", "--session", "agent:main:webchat:c7", "-c", str(path)
        )
        assert code == 0, err
        assert out.splitlines()[1] == (
            "result: announced to webchat chat c7 (session agent:main:webchat:c7)"
        )
        code, out, err = await cli(
            "spawn", "task: for nobody", "--session", "agent:main:main", "-c", str(path)
        )
        assert code == 0, err
        run_id = out.split()[2]
        assert out.splitlines()[1] == (
            "result: posted to no chat (session agent:main:main has no chat); "
            f"see `herald runs show {run_id}`"
        )
    code, out, _ = await cli("spawn", "--help")
    words = " ".join(out.split())
    assert (
        "--session SESSION_KEY requester session key: the result is announced to its chat" in words
    )
    assert (
        "without either the requester is the default agent's main session, which has no chat"
        in words
    )


async def test_spawn_to_a_chat_target_announces_there(tmp_path: Path) -> None:
    port = free_port()
    path = gateway_config(tmp_path, port, channels={"webchat": {"enabled": True}})
    async with herald("run", "--config", str(path), port=port) as daemon:
        await daemon.wait_healthy()
        code, out, err = await cli(
            "spawn", "task: for the page", "--to", "webchat:page-1", "--wait", "-c", str(path)
        )
        assert code == 0, err
        first, where, status, result = out.splitlines()
        run_id = first.split()[2]
        assert where == (
            "result: announced to webchat chat page-1 (session agent:main:webchat:page-1)"
        )
        assert (status, result) == ("status: done", "done: for the page")
        shown = await run_when(path, run_id, lambda run: run["announce"]["state"] != "queued")
        assert shown["announce"]["state"] == "delivered"
        # A target that cannot be used is named, and nothing is spawned.
        code, _, err = await cli("spawn", "task: x", "--to", "slack:C0123456789", "-c", str(path))
        assert code == 1
        assert "channel 'slack' is not enabled (enabled: webchat)" in err
        assert err.rstrip().endswith("(to)")
        code, out, _ = await cli("runs", "list", "--json", "-c", str(path))
        assert [run["runId"] for run in json.loads(out)] == [run_id]
    code, _, err = await cli(
        "spawn", "x", "--to", "webchat:a", "--session", "agent:main:main", "-c", str(path)
    )
    assert code == 2
    assert "not allowed with argument" in err


async def test_runs_abort_through_the_gateway(tmp_path: Path) -> None:
    port = free_port()
    path = config(tmp_path, port)
    async with herald("run", "--config", str(path), port=port) as daemon:
        await daemon.wait_healthy()
        code, out, err = await cli("spawn", "task-slow: forever", "-c", str(path))
        assert code == 0, err
        run_id = out.split()[2]

        code, out, err = await cli("runs", "abort", run_id[:8], "-c", str(path))
        assert code == 0, err
        assert out.startswith(f"aborted run {run_id} (")
        assert out.rstrip().endswith("the runs it spawned are stopped too")
        shown = await run_when(path, run_id, lambda run: run["status"] in FINISHED_STATUSES)
        assert shown["status"] == "cancelled"

        code, _, err = await cli("runs", "abort", run_id, "-c", str(path))
        assert code == 1
        assert err == f"herald: run {run_id} has already finished (cancelled); nothing to abort\n"
        ghost = str(uuid.uuid4())
        code, _, err = await cli("runs", "abort", ghost, "-c", str(path))
        assert code == 1
        assert f"has no run {ghost}" in err
        code, _, err = await cli("runs", "abort", "ffffffff", "-c", str(path))
        assert code == 1
        assert "no run matches 'ffffffff' in state directory" in err
    code, _, err = await cli("runs", "abort", run_id, "-c", str(path))
    assert code == 69
    assert "cannot reach the gateway" in err


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
    db = await SqliteStateDB.open(tmp_path / "state" / "herald.db")
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
    heading, header, *rows = out.splitlines()
    assert heading == f"state directory {tmp_path / 'state'} (config {path})"
    assert header.split() == ["RUN", "STATUS", "CREATED", "(UTC)", "NAME"]
    assert header.index("STATUS") == 38
    assert header.index("NAME") == 68
    # run id, status, when (2026-01-31 14:55), then the name column, indented in the tree
    listed = [(line[:36], line[38:49].strip(), line[68:]) for line in rows]
    assert listed == [
        (alone.run_id, "done", "alone"),
        (coffee.run_id, "queued", f"coffee  [batch {short}]"),
        (tea.run_id, "running", f"tea  [batch {short}]"),
        (notes.run_id, "done", "  ↳ notes"),
        (deep.run_id, "error", "    ↳ sources"),
    ]
    # A filter can leave out a run's parent: the run then says whose it is.
    code, out, _ = await cli("runs", "list", "--status", "error", "--config", str(path))
    assert out.splitlines()[2].endswith(f"  sources  [under {notes.run_id[:8]}]")
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


async def test_runs_show_gives_task_origin_result_and_error(tmp_path: Path) -> None:
    path = config(tmp_path, free_port())
    slack = Origin(
        channel="slack", account="T1", chat_id="C9", thread_id="17.5", chat_type="channel"
    )
    db = await SqliteStateDB.open(tmp_path / "state" / "herald.db")
    try:
        run = await record_run(
            db, "agent:main:slack:channel:c9", "survey", origin=slack, task="line one\nline two"
        )
        await db.runs.update(
            run.run_id, status="error", result_text="partial\nfindings", error="tool \x1b[31mfailed"
        )
    finally:
        await db.close()
    code, out, err = await cli("runs", "show", run.run_id, "-c", str(path))
    assert code == 0, err
    lines = out.splitlines()
    for expected in (
        "task       line one",
        "           line two",
        "requester  agent:main:slack:channel:c9",
        "origin     slack account=T1 chat=C9 thread=17.5 (channel)",
        "result     partial",
        "           findings",
        "error      tool \\x1b[31mfailed",  # escaped: a run's text cannot drive the terminal
    ):
        assert expected in lines, (expected, lines)


async def test_runs_list_refuses_an_unknown_status(tmp_path: Path) -> None:
    path = config(tmp_path, free_port())
    code, out, err = await cli("runs", "list", "--status", "done,finished", "-c", str(path))
    assert (code, out) == (2, "")
    assert err == (
        "herald: --status: unknown status 'finished'; valid: queued, running, announcing, "
        "done, error, timeout, cancelled, interrupted\n"
    )
