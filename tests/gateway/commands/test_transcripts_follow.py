"""``herald transcripts show --follow``: a real ``herald`` subprocess prints the lines a live
session writes as they come, stops when the session is archived, and ends on Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from gateway import cli
from gateway.cli import main
from gateway.commands.follow import GrowingLines
from gateway.llm import ChatMessage, Role, Usage
from gateway.sessions import SessionStore
from tests.gateway.daemon_process import HANG_GUARD_SECONDS, HERALD, clean_env
from tests.gateway.sessions.support import opened_store

REPO = Path(__file__).resolve().parents[3]
KEY = "agent:main:webchat:watcher"


class Follower:
    """A running ``herald transcripts show … --follow``, its output read as it comes."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lines: list[str] = []

    async def wait_line(self, text: str) -> str:
        """The first output line containing ``text``, waiting for it if need be."""
        assert self.process.stdout is not None
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            while True:
                for line in self.lines:
                    if text in line:
                        return line
                raw = await self.process.stdout.readline()
                assert raw, f"output ended without {text!r}:\n" + "\n".join(self.lines)
                self.lines.append(raw.decode().rstrip("\n"))

    async def finish(self) -> tuple[int, str, str]:
        """Exit status, the rest of stdout and all of stderr."""
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            out, err = await self.process.communicate()
        return self.process.returncode or 0, out.decode(), err.decode()


#: Runs a command with SIGINT ignored, as a shell starts a background job (``cmd &``).
SIGINT_IGNORED = ("/bin/sh", "-c", 'trap "" INT; exec "$0" "$@"')


@asynccontextmanager
async def following(*argv: str, sigint_ignored: bool = False) -> AsyncIterator[Follower]:
    """``herald transcripts show ARGV --follow``, with SIGINT ignored if asked (as in a
    background job); otherwise with whatever this process has. The CLI sets its own
    handler, so either way Ctrl-C ends it, however the tests were started."""
    prefix = SIGINT_IGNORED if sigint_ignored else ()
    process = await asyncio.create_subprocess_exec(
        *prefix,
        *HERALD,
        "transcripts",
        "show",
        *argv,
        "--follow",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=clean_env(),
        cwd=REPO,
    )
    try:
        yield Follower(process)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def write_config(tmp_path: Path) -> Path:
    config = tmp_path / "herald.json5"
    config.write_text(f"{{ gateway: {{ stateDir: {json.dumps(str(tmp_path / 'state'))} }} }}\n")
    return config


async def say(
    store: SessionStore,
    role: Role,
    text: str,
    *,
    model: str | None = None,
    usage: Usage | None = None,
) -> None:
    record = await store.require(KEY)
    message = ChatMessage(role=role, content=text)
    await store.append_message(record, message, model=model, usage=usage, wait=True)


async def test_follow_prints_new_lines_until_the_session_is_archived(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    async with opened_store(tmp_path / "state") as store:
        await store.ensure(KEY)
        await say(store, "user", "first")
        async with following(KEY, "-c", str(config)) as follower:
            assert (await follower.wait_line(f"session {KEY}")).startswith("session ")
            await follower.wait_line("user: first")
            # Written while it follows: shown as it comes, usage and all.
            await say(store, "assistant", "second", model="demo/scripted", usage=Usage(5, 2))
            await follower.wait_line("assistant [model demo/scripted, tokens in 5 / out 2]: second")
            await store.append_event(await store.require(KEY), "status", {"n": 1}, wait=True)
            await follower.wait_line('event status {"n":1}')
            # Archiving renames the file: following ends there, and says where it went.
            archived = await store.archive(KEY)
            status, rest, err = await follower.finish()
    assert status == 0
    assert archived is not None
    assert f"the session was archived; its transcript is now {archived}. Stopped following" in err
    assert "Traceback" not in err
    shown = follower.lines + rest.splitlines()
    assert sum("second" in line for line in shown) == 1


@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["foreground", "background-job"])
async def test_follow_json_by_path_prints_raw_lines_and_ends_on_ctrl_c(
    tmp_path: Path, sigint_ignored: bool
) -> None:
    async with opened_store(tmp_path / "state") as store:
        record = await store.ensure(KEY)
        await say(store, "user", "first")
        path = store.transcript_path(record)
        config = write_config(tmp_path)  # a path is found within the configured state dir
        async with following(
            str(path), "--json", "--config", str(config), sigint_ignored=sigint_ignored
        ) as follower:
            header = json.loads(await follower.wait_line('"type":"session"'))
            assert header["key"] == KEY
            await say(store, "assistant", "second")
            line = json.loads(await follower.wait_line('"content":"second"'))
            assert line["message"] == {"role": "assistant", "content": "second"}
            follower.process.send_signal(signal.SIGINT)
            status, _, err = await follower.finish()
    assert status == 130
    assert err == ""


def test_follow_of_an_archived_session_prints_it_and_ends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)

    async def archive() -> Path | None:
        async with opened_store(tmp_path / "state") as store:
            await store.ensure(KEY)
            await say(store, "user", "long ago")
            return await store.archive(KEY)

    archived = asyncio.run(archive())
    assert main(["transcripts", "show", KEY, "--follow", "-c", str(config)]) == 0
    out, err = capsys.readouterr()
    assert "user: long ago" in out
    assert f"{archived} is an archived transcript; nothing more is written to it" in err


def test_a_line_is_shown_once_its_newline_arrives_and_bad_lines_are_named() -> None:
    shown: list[dict[str, object]] = []
    warned: list[str] = []
    lines = GrowingLines(raw=None, show=shown.append, warn=warned.append)
    lines.feed(b'{"type":"event","event":"a"}\n{"type":"ev')
    assert shown == [{"type": "event", "event": "a"}]
    lines.feed(b'ent","event":"b"}\nnot json\n\n{"type":"event"')
    assert [r["event"] for r in shown] == ["a", "b"]
    assert warned == ["warning: line 3 is unreadable; skipped"]
    lines.feed(b',"event":"c"}')
    lines.finish()  # a whole object without its newline is shown
    assert [r["event"] for r in shown] == ["a", "b", "c"]
    lines.feed(b'{"type":"eve')
    lines.finish()
    assert warned[-1] == "warning: torn last line (12 bytes) not shown"


def test_ctrl_c_while_the_cli_starts_ends_it_with_130_and_no_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    # The commands are imported while the parser is built: the longest part of a start.
    monkeypatch.setattr(cli, "build_parser", interrupted)
    try:
        status = main(["transcripts", "show", "x"])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C during start-up escaped main(): a traceback for the person")
    assert status == 130
    assert capsys.readouterr().err == ""
