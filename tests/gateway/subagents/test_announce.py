"""The announce of a finished run: its status line, message and prompt, and the Announcer
falling back to the system announce when the model cannot give one."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gateway.constants import ANNOUNCE_SKIP
from gateway.llm import Usage
from gateway.state import Origin, RunProgress, RunRecord, RunRequest
from gateway.subagents import SpawnRequest, compose_announce
from gateway.subagents.announce import announce_prompt, is_skip, status_line
from gateway.usage import format_stats_line
from tests.fakes.openai import FakeOpenAI, last_user_text, openai_server
from tests.gateway.harness import Harness, fake_model_config, running_gateway

ORIGIN = Origin(channel="memory", account="default", chat_id="c1", chat_type="channel")


def run(**fields: Any) -> RunRecord:
    return RunRecord(
        run_id="r1",
        child_session_key="agent:main:subagent:1",
        child_session_id="s1",
        request=RunRequest(
            requester_agent_id="main", agent_id="main", task="summarise the logs", label="logs"
        ),
        progress=RunProgress(created_at=0.0, usage=Usage(input=1200, output=300), cost_usd=0.0123),
    ).with_columns(**fields)


@pytest.mark.parametrize(
    ("status", "error", "runtime", "line"),
    [
        ("done", None, 5.0, None),
        ("timeout", None, 300.0, 'Sub-agent "logs" timed out after 5m0s.'),
        ("cancelled", None, 5.0, 'Sub-agent "logs" was cancelled after 5s.'),
        (
            "interrupted",
            None,
            61.0,
            'Sub-agent "logs" was interrupted by a gateway restart after 1m1s.',
        ),
        ("error", "disk full", 5.0, 'Sub-agent "logs" failed after 5s: disk full'),
        ("error", None, 5.0, 'Sub-agent "logs" failed after 5s.'),
        ("cancelled", None, None, 'Sub-agent "logs" was cancelled.'),
    ],
)
def test_status_lines(
    status: str, error: str | None, runtime: float | None, line: str | None
) -> None:
    assert status_line(run(error=error), status, runtime) == line


def test_a_run_without_a_label_is_named_by_its_task() -> None:
    assert status_line(run(label=None), "cancelled", None) == (
        'Sub-agent "summarise the logs" was cancelled.'
    )


def stats(record: RunRecord, runtime: float) -> str:
    return format_stats_line(
        runtime,
        record.progress.usage,
        record.progress.cost_usd,
        record.child_session_key,
        record.child_session_id,
        "/t.jsonl",
    )


def test_the_message_is_status_line_reply_blank_line_stats_line() -> None:
    record = run(error="quota exceeded")
    text = compose_announce(
        record,
        status="error",
        reply="  I could not finish.  \n",
        runtime_seconds=5.0,
        transcript_path="/t.jsonl",
    )
    assert text == (
        'Sub-agent "logs" failed after 5s: quota exceeded\n'
        "I could not finish.\n"
        "\n" + stats(record, 5.0)
    )


def test_a_done_run_leads_with_its_reply_or_says_it_finished() -> None:
    record = run()
    with_reply = compose_announce(
        record,
        status="done",
        reply="Found 3 errors.",
        runtime_seconds=9.0,
        transcript_path="/t.jsonl",
    )
    assert with_reply == "Found 3 errors.\n\n" + stats(record, 9.0)
    for empty in (None, "", "  \n"):
        text = compose_announce(
            record, status="done", reply=empty, runtime_seconds=9.0, transcript_path="/t.jsonl"
        )
        assert text == 'Sub-agent "logs" finished.\n\n' + stats(record, 9.0)


@pytest.mark.parametrize(
    ("reply", "skip"),
    [
        (ANNOUNCE_SKIP, True),
        (f"  {ANNOUNCE_SKIP}\n", True),
        (ANNOUNCE_SKIP.lower(), False),
        (f"{ANNOUNCE_SKIP} - nothing new", False),
        (f"Nothing new. {ANNOUNCE_SKIP}", False),
        ("", False),
    ],
)
def test_only_exactly_announce_skip_posts_nothing(reply: str, skip: bool) -> None:
    assert is_skip(reply) is skip


def test_the_announce_prompt_gives_the_status_and_the_error_before_the_result() -> None:
    errored = announce_prompt("error", "partial notes", "quota exceeded")
    assert errored.startswith("[announce] Your sub-agent run has ended with status: error.\n")
    assert "The run's error: quota exceeded" in errored
    assert "partial notes" not in errored
    done = announce_prompt("done", "3 errors found", None)
    assert "The run's result:\n3 errors found" in done
    assert "The run gave no result text." in announce_prompt("done", None, None)
    assert ANNOUNCE_SKIP in done
    assert done == done.strip()


def announce_fails(fake: FakeOpenAI) -> Any:
    def respond(body: Any) -> Any:
        if last_user_text(body).startswith("[announce]"):
            return fake.error_step(400, "context length exceeded", kind="invalid_request_error")
        return fake.text_step(f"worked on {last_user_text(body)}")

    return respond


async def spawned(gw: Harness, task: str) -> str:
    session = await gw.store.ensure("agent:main:memory:channel:c1", origin=ORIGIN)
    result = await gw.spawn(gw.contexts.for_session(session), SpawnRequest(task, label="job"))
    return str(result["runId"])


async def test_when_the_model_cannot_announce_the_system_announce_is_posted(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    async with openai_server() as model:
        model.responder = announce_fails(model)
        async with running_gateway(
            tmp_path, database_url=database_url, config=fake_model_config(model)
        ) as gw:
            run_id = await spawned(gw, "count the files")
            final = await gw.finished(run_id)
            item = await gw.delivery(run_id)
            child = await gw.store.read(final.child_session_key)
    assert (final.progress.status, final.progress.result_text) == (
        "done",
        "worked on count the files",
    )
    assert item.state == "delivered"
    assert item.text.startswith('Sub-agent "job" finished.\n\nStats: runtime ')
    failed = [r for r in child.records if r.get("event") == "announce_failed"]
    assert len(failed) == 1
    assert "context length exceeded" in failed[0]["data"]["error"]


async def test_an_empty_announce_reply_gets_the_system_announce(
    tmp_path: Path, database_url: str | None
) -> None:
    async with openai_server() as model:

        def respond(body: Any) -> Any:
            announcing = last_user_text(body).startswith("[announce]")
            return model.text_step("" if announcing else "result")

        model.responder = respond
        async with running_gateway(
            tmp_path, database_url=database_url, config=fake_model_config(model)
        ) as gw:
            run_id = await spawned(gw, "x")
            item = await gw.delivery(run_id)
    assert item.text.startswith('Sub-agent "job" finished.\n\nStats: ')


async def test_a_run_stopped_before_it_ran_is_announced_without_asking_the_model(
    tmp_path: Path,
    database_url: str | None,
) -> None:
    async with openai_server() as model:
        model.responder = announce_fails(model)
        async with running_gateway(
            tmp_path, database_url=database_url, config=fake_model_config(model)
        ) as gw:
            gate = asyncio.Event()
            blocker = gw.lanes.subagent.submit(gate.wait)
            run_id = await spawned(gw, "never")
            await gw.runs.abort(run_id)
            item = await gw.delivery(run_id)
            gate.set()
            await blocker
    assert item.text.startswith('Sub-agent "job" was cancelled after ')
    assert model.requests == []
