"""Client frame validation and the server frames' documented shapes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from channels import RunUpdate
from channels.webchat import ChatJob
from channels.webchat.protocol import (
    MAX_TEXT_BYTES,
    RUN_TASK_CHARS,
    FrameError,
    Hello,
    ListJobs,
    Unschedule,
    UserText,
    error_frame,
    jobs_frame,
    message_frame,
    parse_client_frame,
    run_frame,
    typing_frame,
)

client_ids = st.from_regex(r"\A[A-Za-z0-9_-]{1,64}\Z")
texts = st.text(min_size=1, max_size=200).filter(lambda t: bool(t.strip()))


@given(client_ids)
def test_every_valid_client_id_is_accepted(client_id: str) -> None:
    assert parse_client_frame(json.dumps({"type": "hello", "clientId": client_id})) == Hello(
        client_id
    )


@given(texts)
def test_message_text_arrives_unchanged(text: str) -> None:
    frame = json.dumps({"type": "message", "text": text, "extra": 1})
    assert parse_client_frame(frame) == UserText(text)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        ("", "bad_json"),
        ('"hello"', "bad_frame"),
        ('{"type": "hello"}', "bad_client_id"),
        ('{"type": "hello", "clientId": "a.b"}', "bad_client_id"),
        ('{"type": "message"}', "bad_frame"),
        ('{"text": "hi"}', "bad_frame"),
        (json.dumps({"type": "message", "text": "x" * (MAX_TEXT_BYTES + 1)}), "too_long"),
        ('{"type": "message", "text": "\\t"}', "empty"),
        ('{"type": "unschedule"}', "bad_frame"),
        ('{"type": "unschedule", "jobId": ""}', "bad_frame"),
        ('{"type": "unschedule", "jobId": 7}', "bad_frame"),
        (json.dumps({"type": "unschedule", "jobId": "x" * 201}), "bad_frame"),
    ],
)
def test_invalid_frames_name_their_problem(data: str, code: str) -> None:
    with pytest.raises(FrameError) as caught:
        parse_client_frame(data)
    assert caught.value.code == code
    assert json.loads(caught.value.frame()) == {
        "type": "error",
        "code": code,
        "message": str(caught.value),
    }


def test_server_frames_have_the_documented_keys() -> None:
    assert json.loads(message_frame("announce", "t", message_id="b-1", ts=1.5, run_id="r")) == {
        "type": "message",
        "kind": "announce",
        "text": "t",
        "runId": "r",
        "id": "b-1",
        "ts": 1.5,
    }
    update = RunUpdate(
        run_id="r",
        name="tea",
        status="running",
        chat_id="c",
        parent_run_id="p",
        depth=2,
        batch_id="b",
        session_key="agent:main:subagent:x",
        created_at=1.0,
        task="Write a short history of tea",
        model="demo/scripted",
        started_at=1.25,
    )
    assert json.loads(run_frame(update, 2.0)) == {
        "type": "run",
        "runId": "r",
        "name": "tea",
        "status": "running",
        "ts": 2.0,
        "parentRunId": "p",
        "depth": 2,
        "batchId": "b",
        "sessionKey": "agent:main:subagent:x",
        "createdAt": 1.0,
        "task": "Write a short history of tea",
        "model": "demo/scripted",
        "startedAt": 1.25,
        "endedAt": None,
    }
    top = RunUpdate(run_id="r", name="tea", status="queued", chat_id="c")
    assert json.loads(run_frame(top, 2.0))["parentRunId"] is None
    assert json.loads(run_frame(top, 2.0))["depth"] == 1
    assert json.loads(run_frame(top, 2.0))["task"] is None
    assert json.loads(typing_frame(True)) == {"type": "typing", "on": True}
    assert json.loads(error_frame("empty", "m")) == {
        "type": "error",
        "code": "empty",
        "message": "m",
    }


def test_a_long_task_is_clipped_in_the_run_frame() -> None:
    update = RunUpdate(run_id="r", name="t", status="queued", chat_id="c", task="x" * 5000)
    task = json.loads(run_frame(update, 2.0))["task"]
    assert len(task) == RUN_TASK_CHARS
    assert task.endswith("…")


def test_job_frames_are_parsed() -> None:
    assert parse_client_frame('{"type": "jobs"}') == ListJobs()
    assert parse_client_frame('{"type": "unschedule", "jobId": "tea-1"}') == Unschedule("tea-1")


def test_the_jobs_frame_lists_soonest_first_with_the_documented_keys() -> None:
    later = ChatJob("later", None, "task: b", {"every": "1h"}, 200.0, False, False)
    sooner = ChatJob(
        "sooner", "brief", "t", {"cron": "0 9 * * *", "timezone": "UTC"}, 100.0, True, True
    )
    done = ChatJob(
        "done",
        None,
        "x" * (RUN_TASK_CHARS + 50),
        {"at": "2030-01-01T09:00:00+00:00"},
        None,
        False,
        False,
    )
    frame = json.loads(jobs_frame([done, later, sooner]))
    assert frame["type"] == "jobs"
    assert [job["jobId"] for job in frame["jobs"]] == ["sooner", "later", "done"]
    assert frame["jobs"][0] == {
        "jobId": "sooner",
        "label": "brief",
        "task": "t",
        "trigger": {"cron": "0 9 * * *", "timezone": "UTC"},
        "nextRunAt": 100.0,
        "paused": True,
        "declared": True,
    }
    assert len(frame["jobs"][2]["task"]) == RUN_TASK_CHARS
    refused = json.loads(error_frame("job_declared", "m", job_id="sooner"))
    assert refused == {"type": "error", "code": "job_declared", "message": "m", "jobId": "sooner"}
