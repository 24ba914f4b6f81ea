"""What the ``kill -9`` mid-stream tests share: a ``herald run`` subprocess whose model (the
fake OpenAI server) holds its first answer mid-stream, killed there and started again.

Each chat's test starts its fake chat, sends a message with the first gateway, waits until
the chat shows the first words of the reply, kills the gateway (:meth:`Daemon.kill`:
SIGKILL) and starts a second on the same state: it runs the turn again, and the model gives
the re-run the whole answer (:data:`STORY`). The chat's fake then must hold one reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from gateway.constants import STATE_DB_NAME
from tests.fakes.openai import FakeOpenAI
from tests.gateway.daemon_process import HANG_GUARD_SECONDS, Daemon, herald, write_config

STORY = "Tea reached Europe in the seventeenth century, first as a medicine, then as a habit."


def hold_the_first_answer(model: FakeOpenAI) -> None:
    """The first answer streams its first pieces and never ends (the gateway dies first);
    the re-run's answer is the whole :data:`STORY`."""
    never = asyncio.Event()
    model.reply_stream(STORY, hold=never, hold_at=4)
    model.reply_text(STORY)  # streamed too: the re-run asks for a stream


def gateway_config(tmp_path: Path, port: int, model: FakeOpenAI, channels: dict[str, Any]) -> Path:
    """A gateway on ``port`` with ``model`` as its only model and ``channels`` (the web
    chat is off unless ``channels`` turns it on)."""
    return write_config(
        tmp_path / "herald.json",
        {
            "gateway": {"port": port, "stateDir": str(tmp_path / "state")},
            "agent": {"model": "fake/gpt-4o-mini"},
            "models": {
                "providers": {
                    "fake": {
                        "api": "openai-completions",
                        "baseUrl": model.base_url,
                        "apiKey": model.api_key,
                        "maxRetries": 0,
                        "models": [{"id": "gpt-4o-mini"}],
                    }
                }
            },
            "channels": {"webchat": {"enabled": False}, **channels},
        },
    )


@contextlib.asynccontextmanager
async def gateway(config: Path, port: int) -> AsyncIterator[Daemon]:
    """``herald run`` on ``config``, once ready; killed on exit if still running."""
    async with herald("run", "--config", str(config), port=port) as daemon:
        await daemon.wait_log("gateway ready")
        yield daemon


async def streamed_recorded(tmp_path: Path) -> None:
    """Wait until the gateway recorded the message it streams the reply in (a kill before
    that is the window the record cannot cover)."""
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while not _count(tmp_path, " WHERE streamed IS NOT NULL"):  # noqa: ASYNC110 - a file
            await asyncio.sleep(0.02)


def _count(tmp_path: Path, where: str) -> int:
    """Rows of ``inbound`` (``where``: a fixed condition) in the gateway's state database."""
    with contextlib.closing(sqlite3.connect(tmp_path / "state" / STATE_DB_NAME)) as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM inbound{where}").fetchone()[0])


async def turns_ended(tmp_path: Path) -> None:
    """Wait until no chat message is left waiting for its turn (the re-run ended, after its
    final reply)."""
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while _count(tmp_path, ""):  # noqa: ASYNC110 - a file has no event to wait on
            await asyncio.sleep(0.02)
