"""``kill -9`` while a reply is being streamed into the web chat: the restarted gateway re-runs
the turn and the client's history holds one reply, in the place of the growing text.

``herald run`` (a subprocess, the real OpenAI provider against the fake model held
mid-stream, :mod:`tests.faults._midstream`) sends a page the first delta frames of the
reply; it is killed with SIGKILL. The restarted gateway runs the turn again; a page opened
on it (as the page reconnects) is given the final reply, whose id is the turn id the first
process's delta frames carried, so it takes the growing text's place; the client's history
holds that one reply.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from channels.webchat.history import HistoryFiles
from tests.fakes.openai import openai_server
from tests.faults._midstream import (
    STORY,
    gateway,
    gateway_config,
    hold_the_first_answer,
    turns_ended,
)
from tests.gateway.daemon_process import free_port, webchat_page

pytestmark = pytest.mark.slow

CLIENT_ID = "midstream-client"


def replies(frames: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(id, text) of each final reply message a page was sent."""
    return [
        (str(f["id"]), str(f["text"]))
        for f in frames
        if f.get("type") == "message" and f.get("kind") == "reply"
    ]


def deltas(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in frames if f.get("type") == "delta" and f.get("text")]


async def test_a_reply_cut_by_kill_9_mid_stream_ends_as_one_reply(tmp_path: Path) -> None:
    async with openai_server() as model, aiohttp.ClientSession() as http:
        port = free_port()
        config = gateway_config(tmp_path, port, model, {"webchat": {"enabled": True}})
        hold_the_first_answer(model)
        async with gateway(config, port) as first:
            async with webchat_page(http, first.url, CLIENT_ID) as page:
                await page.ws.send_json({"type": "message", "text": "tea?"})
                await page.wait(lambda fs: bool(deltas(fs)))
                shown = deltas(page.frames)
                turn_id = str(shown[0]["turnId"])
                assert STORY.startswith("".join(str(f["text"]) for f in shown))
                await first.kill()
            assert replies(page.frames) == []

        async with gateway(config, port) as second:
            async with webchat_page(http, second.url, CLIENT_ID) as page:
                await page.wait(lambda fs: bool(replies(fs)))
                again = page.frames
            await turns_ended(tmp_path)
        # The client's history (what every page is given) holds every reply it was sent.
        files = HistoryFiles(tmp_path / "state" / "webchat", history_size=50, runs_kept=1)
        history = replies([orjson.loads(frame) for frame in files.load(CLIENT_ID).messages])

    assert len(model.requests) == 2  # the turn ran again after the restart
    assert replies(again) == [(turn_id, STORY)]
    assert history == [(turn_id, STORY)]
    # Growing text the re-run showed this page took the same place (its turn id).
    assert {str(f["turnId"]) for f in deltas(again)} <= {turn_id}
