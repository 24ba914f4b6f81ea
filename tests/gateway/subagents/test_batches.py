"""The batch coordinator's follow-up: it answers from the conversation the session already
holds, and reads the transcript back only to resume a follow-up a stop cut off."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gateway.llm import ChatMessage
from gateway.sessions import read_transcript
from tests.gateway.harness import TEST_SCRIPT, Harness, running_gateway

CHAT_KEY = "agent:main:memory:channel:c1:thread:t1"
COMBINED = "combined done: tea | done: coffee"


def script() -> dict[str, Any]:
    """``fan`` spawns two children and yields; the follow-up quotes both results."""
    rules: list[dict[str, Any]] = [
        {
            "match": r"^fan$",
            "reply": "",
            "toolCalls": [
                {"name": "sessions_spawn", "arguments": {"task": "task: tea", "label": "tea"}},
                {"name": "sessions_spawn", "arguments": {"task": "task: coffee", "label": "co"}},
                {"name": "sessions_yield", "arguments": {}},
            ],
        },
        {
            "match": (
                r"^\[sub-agent completion\] The sub-agents you waited for[\s\S]*?"
                r"result:\n(?P<r1>[^\n]+)[\s\S]*?result:\n(?P<r2>[^\n]+)"
            ),
            "reply": "combined ${r1} | ${r2}",
        },
    ]
    data = copy.deepcopy(TEST_SCRIPT)
    data["rules"] = rules + data["rules"]
    return data


async def followup(gw: Harness) -> str:
    (message,) = await gw.wait_sent(lambda m: "Stats: 2 sub-agents" in m.text)
    assert message.thread_id == "t1"
    return message.text.partition("\n\n")[0]


def followup_lines(path: Path) -> list[dict[str, Any]]:
    records = read_transcript(path).records
    return [r for r in records if r.get("meta", {}).get("kind") == "subagent_followup"]


async def test_a_followup_does_not_read_the_conversation_back_from_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database_url: str | None
) -> None:
    async with running_gateway(tmp_path, database_url=database_url, script=script()) as gw:
        await gw.say("hello", thread_id="t1")  # the conversation is loaded for this turn
        await gw.reply()
        real_load = gw.store.chat_messages
        read: list[str] = []

        async def counted_load(key: str) -> list[ChatMessage]:
            read.append(key)
            return await real_load(key)

        monkeypatch.setattr(gw.store, "chat_messages", counted_load)
        await gw.say("fan", thread_id="t1")
        assert await followup(gw) == COMBINED
        # Loading the conversation from the transcript costs a read; the follow-up has no
        # need for it: the conversation is held between turns. In a cluster each turn
        # (the yielding one, the follow-up) loads it once under the session's lock, as
        # another replica may have written it since; the follow-up adds no read of its own.
        assert read.count(CHAT_KEY) == (2 if database_url is not None else 0)


async def test_a_followup_cut_off_by_a_stop_is_finished_at_the_next_start_and_posted_once(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    state = tmp_path / "state"
    async with running_gateway(
        tmp_path, database_url=database_url, script=script(), state_dir=state
    ) as gw:
        await gw.say("fan", thread_id="t1")
        assert await followup(gw) == COMBINED
        await gw.runs_idle()
        (batch_id,) = {run.delivery.batch_id for run in await gw.db.runs.list()}
        assert batch_id is not None
        path = gw.store.transcript_path(await gw.store.require(CHAT_KEY))

        # As if the process had stopped after the follow-up turn was recorded, before the
        # batch was closed and its reply queued (one transaction).
        def undo_finish(conn: Any) -> None:
            conn.execute(
                "UPDATE batches SET state = 'following', reply_text = NULL, ended_at = NULL"
                " WHERE batch_id = ?",
                (batch_id,),
            )
            conn.execute("DELETE FROM outbox WHERE batch_id = ?", (batch_id,))
            conn.execute("UPDATE runs SET completion = 'pending' WHERE batch_id = ?", (batch_id,))

        await gw.db.write(undo_finish)
    async with running_gateway(
        tmp_path, database_url=database_url, script=script(), state_dir=state
    ) as gw:
        assert await followup(gw) == COMBINED
        await gw.runs_idle()
        batch = await gw.db.batches.get(batch_id)
        assert batch is not None
        assert batch.state == "done"
        assert len(gw.channel.sent) == 1
    assert len(followup_lines(path)) == 1  # its user message was not written again
