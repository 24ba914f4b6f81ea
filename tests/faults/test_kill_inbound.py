"""A mention Slack got its 200 for survives a ``kill -9`` before its turn ran.

``herald run`` is a subprocess with Slack in HTTP mode against the wire-level fake Slack and
the scripted model, which holds the turn a few seconds. The fake posts a signed mention to
the Request URL; once the gateway answers 200 (after which Slack never sends the event
again, and the gateway remembers it as seen, so a retry would be dropped too) the process is
killed with SIGKILL. Restarted on the same state, the gateway runs the mention's turn: Slack
receives the answer exactly once, the transcript holds the message once, and no message is
left waiting. Killed once the turn wrote the message to the transcript, the message is not
written twice. Killed after the answer was posted but before its message was cleared, the
restarted gateway finds the answer in the chat (its metadata names the message) and does
not post it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.constants import STATE_DB_NAME
from tests.fakes.slack import BOT_TOKEN, BOT_USER_ID, SIGNING_SECRET, FakeSlack
from tests.gateway.daemon_process import (
    HANG_GUARD_SECONDS,
    Daemon,
    clean_env,
    free_port,
    herald,
    write_config,
)

pytestmark = pytest.mark.slow

ANSWER = "the answer to the held question"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()


def gateway_config(tmp_path: Path, port: int, slack: FakeSlack) -> Path:
    script = tmp_path / "script.json"
    rule = {"match": "held question$", "reply": ANSWER, "delaySeconds": 2}
    script.write_text(json.dumps({"rules": [rule], "default": {"reply": "?"}}), "utf-8")
    data: dict[str, Any] = {
        "gateway": {"port": port, "stateDir": str(tmp_path / "state"), "shutdownDrainSeconds": 1},
        "agent": {"model": "t/m"},
        "models": {
            "providers": {"t": {"api": "scripted", "script": str(script), "models": [{"id": "m"}]}}
        },
        "channels": {
            "webchat": {"enabled": False},
            "slack": {
                "enabled": True,
                "mode": "http",
                "botToken": BOT_TOKEN,
                "signingSecret": SIGNING_SECRET,
                "apiBaseUrl": slack.api_base_url,
                "streaming": "off",  # posts are read whole; streaming has its own tests
            },
        },
    }
    return write_config(tmp_path / "herald.json", data)


async def started(daemon: Daemon) -> Daemon:
    await daemon.wait_log("gateway ready")
    return daemon


def user_lines(state_dir: Path, text: str) -> int:
    """User messages with ``text`` in every transcript under ``state_dir``."""
    found = 0
    for path in state_dir.rglob("*.jsonl"):
        for line in path.read_text("utf-8").splitlines():
            record = json.loads(line)
            message = record.get("message") or {}
            if message.get("role") == "user" and text in str(message.get("content")):
                found += 1
    return found


def recorded_rows(state_dir: Path) -> list[tuple[Any, ...]]:
    """The ``inbound`` rows as they are now (to put back, as a kill before their delete
    would have left them)."""
    with contextlib.closing(sqlite3.connect(state_dir / STATE_DB_NAME)) as conn:
        return conn.execute("SELECT * FROM inbound").fetchall()


def put_back(state_dir: Path, rows: list[tuple[Any, ...]]) -> None:
    with contextlib.closing(sqlite3.connect(state_dir / STATE_DB_NAME)) as conn, conn:
        marks = ", ".join("?" * len(rows[0]))
        conn.executemany(f"INSERT INTO inbound VALUES ({marks})", rows)


async def cleared(state_dir: Path) -> None:
    """Wait until no message is left waiting (the turn ended, just after its answer)."""
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while waiting(state_dir):  # noqa: ASYNC110 - no event to wait on
            await asyncio.sleep(0.02)


def waiting(state_dir: Path) -> int:
    """Messages recorded and not yet handled."""
    with contextlib.closing(sqlite3.connect(state_dir / STATE_DB_NAME)) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM inbound").fetchone()[0])


async def transcribed(state_dir: Path, text: str) -> None:
    """Wait until a transcript holds the user message ``text`` (its turn has begun)."""
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while not user_lines(state_dir, text):  # noqa: ASYNC110 - a file has no event to wait on
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("kill_at", ["acked", "transcribed", "answered"])
async def test_a_mention_acked_then_killed_is_answered_once_after_restart(
    tmp_path: Path, slack: FakeSlack, kill_at: str
) -> None:
    """Killed right after the 200 (the turn perhaps not begun), once the turn wrote the
    message to the transcript (then it is not written again: the turn goes on from there),
    or once the answer was posted (then it is not posted again)."""
    port = free_port()
    config = str(gateway_config(tmp_path, port, slack))
    env = clean_env()
    event = slack.message(f"<@{BOT_USER_ID}> the held question", channel="C1")
    async with herald("run", "--config", config, env=env, port=port) as first:
        await started(first)
        status = await slack.send_event(f"{first.url}/slack/events", event)
        assert status == 200
        if kill_at in ("transcribed", "answered"):
            await transcribed(tmp_path / "state", "the held question")
        if kill_at == "answered":
            rows = recorded_rows(tmp_path / "state")
            await cleared(tmp_path / "state")
            await first.kill()
            # What a kill between the answer's post and the row's delete leaves behind.
            put_back(tmp_path / "state", rows)
            assert len([p for p in slack.posts if ANSWER in p.text]) == 1
        else:
            await first.kill()  # the turn is held by the model: it has not answered
            assert not [p for p in slack.posts if ANSWER in p.text]

    async with herald("run", "--config", config, env=env, port=port) as second:
        await started(second)
        await slack.wait_for(
            lambda: any(ANSWER in p.text for p in slack.posts), within=HANG_GUARD_SECONDS
        )
        await cleared(tmp_path / "state")  # once the turn ended, after its answer
        await second.kill()

    answers = [p for p in slack.posts if ANSWER in p.text]
    assert len(answers) == 1
    assert answers[0].channel == "C1"
    assert answers[0].thread_ts == event["ts"]
    state_dir = tmp_path / "state"
    assert user_lines(state_dir, "the held question") == 1
