"""Completions: a finished run's result reaches the model of the session that spawned it.

The model is the wire-level OpenAI fake answering by content, so what is checked is what the
gateway really sent to the provider.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from gateway.sessions import read_transcript
from gateway.subagents import COMPLETION_PREFIX
from tests.fakes.openai import FakeOpenAI, last_user_text, openai_server
from tests.fakes.provider_server import Step
from tests.gateway.harness import Harness, fake_model_config, running_gateway

CHAT_KEY = "agent:main:memory:channel:c1"
CHILD_RESULT = "The telegraph was patented in 1837 (child result 7f3a)."


def answer(model: FakeOpenAI) -> Any:
    """Replies by the latest user message: spawn on ``start``, the child's result for its
    task, an announce for the announce turn, and an echo of what the model saw otherwise."""

    def respond(body: Any) -> Step:
        text = last_user_text(body)
        last = body["messages"][-1]
        if text == "start" and last["role"] == "user":
            call = ("call-1", "sessions_spawn", {"task": "research the telegraph"})
            return Step(body=orjson.dumps(model.completion(content=None, tool_calls=[call])))
        if text == "start":
            return model.text_step("spawned")
        if text == "research the telegraph":
            return model.text_step(CHILD_RESULT)
        if text.startswith("[announce]"):
            return model.text_step("Telegraph research is done.")
        return model.text_step(f"seen {len(body['messages'])} messages")

    return respond


async def completion_lines(gw: Harness, key: str) -> list[dict[str, Any]]:
    session = await gw.store.require(key)
    records = read_transcript(gw.store.transcript_path(session)).records
    return [r for r in records if (r.get("meta") or {}).get("kind") == "subagent_completion"]


async def test_the_next_turn_sends_the_finished_runs_result_to_the_model(
    tmp_path: Path, database_url: str | None
) -> None:
    async with (
        openai_server() as model,
        running_gateway(tmp_path, database_url=database_url, config=fake_model_config(model)) as gw,
    ):
        model.responder = answer(model)
        await gw.say("start")
        assert (await gw.reply()).text == "spawned"
        (run,) = await gw.db.runs.list()
        await gw.finished(run.run_id)
        (announce,) = await gw.announce()
        assert announce.text.startswith("Telegraph research is done.")
        # The completion is written between turns; the next turn sends it to the model.
        await gw.runs_idle()
        await gw.say("now compare them")
        await gw.reply(count=2)
        request = model.requests[-1].body
        users = [m["content"] for m in request["messages"] if m["role"] == "user"]
        completions = [u for u in users if u.startswith(COMPLETION_PREFIX)]
        assert len(completions) == 1
        (completion,) = completions
        assert CHILD_RESULT in completion
        assert f"runId: {run.run_id}" in completion
        assert f"childSessionKey: {run.child_session_key}" in completion
        assert "status: done" in completion
        assert "Telegraph research is done." in completion  # the announce text
        # It sits after the spawning turn's reply and before the person's new message.
        assert users[-1] == "now compare them"
        (line,) = await completion_lines(gw, CHAT_KEY)
        assert line["meta"] == {"kind": "subagent_completion", "runId": run.run_id}
        final = await gw.db.runs.get(run.run_id)
        assert final is not None
        assert final.delivery.state == "delivered"


def set_pending(gw: Harness, run_id: str) -> Any:
    sql = "UPDATE runs SET delivery = 'pending' WHERE run_id = ?"
    return gw.db.write(lambda c: c.execute(sql, (run_id,)))


async def test_a_completion_left_pending_by_a_stop_is_written_once_at_the_next_start(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    state = tmp_path / "state"
    async with (
        openai_server() as model,
        running_gateway(
            tmp_path, database_url=database_url, config=fake_model_config(model), state_dir=state
        ) as gw,
    ):
        model.responder = answer(model)
        await gw.say("start")
        await gw.reply()
        (run,) = await gw.db.runs.list()
        await gw.finished(run.run_id)
        await gw.runs_idle()
        assert len(await completion_lines(gw, CHAT_KEY)) == 1
        # As if the process had stopped after writing the line but before recording it.
        await set_pending(gw, run.run_id)
        path = gw.store.transcript_path(await gw.store.require(CHAT_KEY))
    async with (
        openai_server() as model,
        running_gateway(
            tmp_path, database_url=database_url, config=fake_model_config(model), state_dir=state
        ) as gw,
    ):
        await gw.runs_idle()
        assert len(await completion_lines(gw, CHAT_KEY)) == 1  # found, not written again
        final = await gw.db.runs.get(run.run_id)
        assert final is not None
        assert final.delivery.state == "delivered"
        # As if the process had stopped before writing it at all.
        await set_pending(gw, run.run_id)
    kept = [
        line
        for line in path.read_bytes().splitlines(keepends=True)
        if b"subagent_completion" not in line
    ]
    path.write_bytes(b"".join(kept))
    async with (
        openai_server() as model,
        running_gateway(
            tmp_path, database_url=database_url, config=fake_model_config(model), state_dir=state
        ) as gw,
    ):
        await gw.runs_idle()
        (line,) = await completion_lines(gw, CHAT_KEY)
        assert CHILD_RESULT in line["message"]["content"]
        final = await gw.db.runs.get(run.run_id)
        assert final is not None
        assert final.delivery.state == "delivered"
