"""``herald sessions list|show`` and ``herald transcripts show``, run in-process."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.llm import ChatMessage, ToolCall, Usage
from gateway.sessions import SessionKey
from tests.gateway.sessions.support import opened_store


@dataclass
class Populated:
    config: Path
    state: Path
    main_key: str
    child_key: str
    main_path: Path
    archived_key: str
    archived_path: Path
    archived_live_path: Path


def _write_config(tmp_path: Path, state: Path) -> Path:
    config = tmp_path / "herald.json5"
    config.write_text(f"{{ gateway: {{ stateDir: {json.dumps(str(state))} }} }}\n")
    return config


@pytest.fixture
def populated(tmp_path: Path) -> Populated:
    state = tmp_path / "state"

    async def fill() -> Populated:
        async with opened_store(state) as store:
            main_record = await store.ensure("agent:main:main", model="demo/scripted")
            call = ToolCall(id="c1", name="ls", arguments={"path": "."})
            for message in (
                ChatMessage(role="user", content="hello\x1b[31m there"),
                ChatMessage(role="assistant", content="", tool_calls=(call,)),
                ChatMessage(role="tool", content="a.txt", tool_call_id="c1", tool_name="ls"),
            ):
                await store.append_message(main_record, message)
            await store.append_message(
                main_record,
                ChatMessage(role="assistant", content="one file"),
                model="demo/scripted",
                usage=Usage(1200, 34),
            )
            await store.add_usage(main_record.key, Usage(1200, 34), 0.0123)
            child = await store.ensure(SessionKey.subagent("main"), parent_key=main_record.key)
            await store.append_event(child, "spawned", {"runId": "r1"})
            done = await store.ensure(SessionKey.subagent("main"), parent_key=main_record.key)
            await store.append_message(done, ChatMessage(role="user", content="old task"))
            done_live = store.transcript_path(done)
            archived = await store.archive(done.key)
            assert archived is not None
            return Populated(
                config=_write_config(tmp_path, state),
                state=state,
                main_key=main_record.key,
                child_key=child.key,
                main_path=store.transcript_path(main_record),
                archived_key=done.key,
                archived_path=archived,
                archived_live_path=done_live,
            )

    return asyncio.run(fill())


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_sessions_list_hides_subagents_unless_all(
    populated: Populated, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = _run(capsys, "sessions", "list", "--config", str(populated.config))
    assert status == 0
    assert populated.main_key in out
    assert populated.child_key not in out
    assert "1.2k" in out
    assert "$0.01" in out
    status, out, _ = _run(capsys, "sessions", "list", "--all", "-c", str(populated.config))
    assert populated.child_key in out
    assert populated.archived_key not in out
    status, out, _ = _run(
        capsys, "sessions", "list", "--all", "--archived", "-c", str(populated.config)
    )
    assert populated.archived_key in out
    assert "ARCHIVED" in out


def test_sessions_list_json(populated: Populated, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(
        capsys, "sessions", "list", "--json", "--all", "-c", str(populated.config)
    )
    assert status == 0
    sessions = json.loads(out)["sessions"]
    assert {s["key"] for s in sessions} == {populated.main_key, populated.child_key}


def test_sessions_list_without_a_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _write_config(tmp_path, tmp_path / "empty-state")
    status, out, _ = _run(capsys, "sessions", "list", "-c", str(config))
    assert status == 0
    assert out.splitlines() == [
        f"state directory {tmp_path / 'empty-state'} (config {config}; no state database there)",
        "No sessions.",
    ]
    assert not (tmp_path / "empty-state").exists()


def test_sessions_show(populated: Populated, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(
        capsys, "sessions", "show", populated.main_key, "-c", str(populated.config)
    )
    assert status == 0
    assert f"key          {populated.main_key}" in out
    assert "in 1200 / out 34 (total 1234)" in out
    assert str(populated.main_path) in out
    status, out, _ = _run(
        capsys, "sessions", "show", populated.archived_key, "--json", "-c", str(populated.config)
    )
    info = json.loads(out)
    assert info["archived"] is True
    assert info["transcriptPath"] == str(populated.archived_path)


def test_sessions_show_unknown_or_bad_key(
    populated: Populated, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = _run(
        capsys, "sessions", "show", "agent:main:webchat:ghost", "-c", str(populated.config)
    )
    assert status == 1
    assert "no session agent:main:webchat:ghost" in err
    status, _, err = _run(
        capsys, "sessions", "show", "agent:main:../x", "-c", str(populated.config)
    )
    assert status == 1
    assert "invalid session key" in err


def test_transcripts_show_by_key_renders_readably(
    populated: Populated, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = _run(
        capsys, "transcripts", "show", populated.main_key, "-c", str(populated.config)
    )
    assert status == 0
    assert out.startswith(f"session {populated.main_key}")
    assert "user: hello\\x1b[31m there" in out  # escape sequences are shown, not obeyed
    assert "\x1b" not in out
    assert '→ ls(c1) {"path":"."}' in out
    assert "tool ls (c1): a.txt" in out
    assert "assistant [model demo/scripted, tokens in 1200 / out 34]: one file" in out


def test_transcripts_show_json_prints_the_raw_lines(
    populated: Populated, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = _run(
        capsys, "transcripts", "show", populated.main_key, "--json", "-c", str(populated.config)
    )
    assert status == 0
    assert out == populated.main_path.read_text()


def test_transcripts_show_archived_by_key_and_by_path(
    populated: Populated, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = _run(
        capsys, "transcripts", "show", populated.archived_key, "-c", str(populated.config)
    )
    assert status == 0
    assert "user: old task" in out
    for ref in (populated.archived_path, populated.archived_live_path):
        status, out_by_path, err = _run(
            capsys, "transcripts", "show", str(ref), "-c", str(populated.config)
        )
        assert status == 0
        assert out_by_path == out
        assert "was archived at 20" in err
        assert f"its transcript is now {populated.archived_path}" in err


def test_transcripts_show_warns_about_a_torn_last_line(
    populated: Populated, capsys: pytest.CaptureFixture[str]
) -> None:
    with populated.main_path.open("ab") as file:
        file.write(b'{"type":"message","id":"x","mess')
    status, out, err = _run(
        capsys,
        "transcripts",
        "show",
        str(populated.main_path),
        "--json",
        "-c",
        str(populated.config),
    )
    assert status == 0
    assert len(out.splitlines()) == 5
    assert "torn last line" in err


def test_transcripts_show_of_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = _run(capsys, "transcripts", "show", str(tmp_path / "absent.jsonl"))
    assert status == 1
    assert "not a session key (agent:…), a session id, a run id or a transcript path" in err
