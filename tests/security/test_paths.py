"""Path traversal: nothing from a chat, a session key, a label, an agent id or an HTTP path
becomes part of a file path unnormalised.

One gateway takes hostile ids from every door: inbound messages on channels named like
the real ones (chat ids, Slack-style thread ts, DM user ids, web chat client ids),
``sessions_spawn`` labels, agent ids and model names, the session tools' keys, and the
HTTP routes' keys and run ids with encoded traversal. Afterwards every file the gateway
made is under the state directory, in the pinned layout, with the pinned modes, and no
file appeared anywhere else.
"""

from __future__ import annotations

import asyncio
import os
import stat
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pytest
from aiohttp.test_utils import TestServer

from channels.memory import MemoryChannel
from gateway import cli
from gateway.config import load_settings
from gateway.errors import ConfigError
from gateway.sessions import SessionKey, read_transcript
from tests.gateway.harness import Harness, api_app, base_config, running_gateway
from tests.gateway.sessions.support import opened_store
from tests.security.support import TRANSCRIPT_RE, raw_request, tree, unexpected_state_files

#: Every hostile name carries this, so a file made from one can be found anywhere.
MARK = "heraldpwn"
HOSTILE_IDS = [
    f"../../{MARK}",
    f"..%2f..%2f{MARK}",
    f"..\\..\\{MARK}",
    f"/tmp/{MARK}",
    f"a/../../../{MARK}",
    f"{MARK}\x00.jsonl",
    f"\x00{MARK}",
    f"{MARK}\n",
    f" {MARK} ",
    f"ü/../Ω-{MARK}",
    f"🙂{MARK}",
    f"~/{MARK}",
    f"$HOME/{MARK}",
    f"agent:../../x:{MARK}",
    f"{MARK}." * 1000,
    "..",
    ".",
    "/",
    "-",
]
AGENTS = ("main", "helper", "other")


def hostile_keys() -> list[str]:
    return [
        "../../etc/passwd",
        "/etc/passwd",
        "agent:../../x:main",
        "agent:main:webchat:../../x",
        f"agent:main:subagent:../../{MARK}",
        "agent:main:slack:channel:c1:thread:../..",
        f"agent:main:webchat:{MARK}\x00",
        f"agent:main:webchat:{MARK}\n",
        "agent:MAIN:main",
        "agent:main:main:../../x",
        "agent:" + "a" * 400 + ":main",
        "agent:ü:main",
        "agent:main:main\x00",
    ]


def outside_marks(root: Path) -> list[str]:
    """Paths under ``root`` (not following symlinks) whose name carries :data:`MARK`."""
    return [
        os.path.join(folder, name)
        for folder, dirs, files in os.walk(root)
        for name in [*dirs, *files]
        if MARK in name
    ]


@asynccontextmanager
async def api_server(gw: Harness) -> AsyncIterator[TestServer]:
    app = api_app(gw)
    server = TestServer(app)
    await server.start_server()
    try:
        yield server
    finally:
        await server.close()


async def invoke(port: int, body: dict[str, Any]) -> tuple[int, Any]:
    response = await raw_request(
        port,
        "POST",
        "/v1/tools/invoke",
        headers={"Content-Type": "application/json"},
        body=orjson.dumps(body),
    )
    return response.status, orjson.loads(response.body)


async def chat_through_every_channel(gw: Harness) -> None:
    """Hostile ids in every part of an inbound message that reaches a session key."""
    chat = gw.router
    channels = {name: MemoryChannel(name) for name in ("slack", "discord", "webchat")}
    for name, channel in channels.items():
        gw.channels[name] = channel
        await channel.start(chat.handle_inbound)
    sent: dict[str, int] = {"memory": 0, "slack": 0, "discord": 0, "webchat": 0}
    for raw in ["", *HOSTILE_IDS]:
        # A channel chat id, a Slack thread ts, a DM user id and a web chat client id.
        if raw:
            await gw.channel.receive(gw.channel.inbound("hello", chat_id=raw))
            sent["memory"] += 1
        thread = f"1712345678.000100/{raw}" if raw else None
        await channels["slack"].receive(
            channels["slack"].inbound("hello \x1b]0;owned\x07", chat_id="C1", thread_id=thread)
        )
        sent["slack"] += 1
        if raw:
            await channels["discord"].receive(
                channels["discord"].inbound("hello", chat_id="D1", sender_id=raw, chat_type="dm")
            )
            await channels["webchat"].receive(channels["webchat"].inbound("hello", chat_id=raw))
            sent["discord"] += 1
            sent["webchat"] += 1
    all_channels = {"memory": gw.channel, **channels}
    async with asyncio.timeout(30):
        for name, count in sent.items():
            await all_channels[name].wait_for(lambda m: m.kind == "reply", count=count)


async def spawn_with_hostile_fields(port: int, gw: Harness) -> None:
    run_ids: list[str] = []
    for raw in HOSTILE_IDS:
        status, body = await invoke(
            port,
            {"tool": "sessions_spawn", "args": {"task": "task: x", "label": raw[:200]}},
        )
        assert status == 200, body
        assert body["result"]["status"] == "accepted"
        run_ids.append(body["result"]["runId"])
        status, body = await invoke(
            port, {"tool": "sessions_spawn", "args": {"task": "task: y", "agentId": raw}}
        )
        assert status == 200, body
        assert body["ok"] is False
        assert body["result"]["status"] == "error"
        status, body = await invoke(
            port, {"tool": "sessions_spawn", "args": {"task": "task: z", "model": raw}}
        )
        assert status == 200, body
        assert body["result"].get("modelApplied") is False
        run_ids.append(body["result"]["runId"])
    for run_id in run_ids:
        run = await gw.finished(run_id)
        assert run.progress.status == "done"
        assert SessionKey.parse(run.child_session_key).agent_id == "main"


async def session_tools_with_hostile_keys(port: int) -> None:
    for key in hostile_keys() + HOSTILE_IDS:
        status, body = await invoke(
            port, {"tool": "sessions_history", "args": {"sessionKey": key[:512]}}
        )
        assert (status, body["ok"]) == (200, False), (key, body)
        status, body = await invoke(
            port, {"tool": "sessions_send", "args": {"sessionKey": key[:512], "message": "hi"}}
        )
        assert (status, body["ok"]) == (200, False), (key, body)
        status, body = await invoke(port, {"tool": "sessions_list", "sessionKey": key})
        assert status in (400, 404), (key, body)
        assert body["error"]["code"] in ("invalid_session_key", "agent_not_found")


async def http_paths_with_encoded_traversal(port: int) -> None:
    targets: list[str] = []
    for key in hostile_keys():
        targets.append(f"/v1/sessions/{quote(key, safe='')}/history")
        targets.append(f"/v1/sessions/{quote(key, safe='')}/transcript")
        targets.append(f"/v1/runs/{quote(key, safe='')}")
    targets += [
        "/v1/sessions/..%2F..%2Fetc%2Fpasswd/history",
        "/v1/sessions/%2e%2e%2f%2e%2e%2fherald.db/history",
        "/v1/sessions/agent%3Amain%3A..%2F..%2Fx/history",
        "/v1/sessions/agent:main:main%00/history",
        "/v1/sessions/agent:main:webchat:%2e%2e/history",
        "/v1/sessions/..%5C..%5Cwin/history",
        "/v1/sessions/..%2F..%2Fetc%2Fpasswd/transcript",
        "/v1/sessions/agent:main:webchat:%2e%2e/transcript?before=0",
        "/v1/runs/..%2F..%2Fherald.db",
        "/v1/runs/%2e%2e",
        f"/v1/runs?sessionKey=..%2F..%2F{MARK}",
        f"/v1/runs/x/abort?{MARK}=../../x",
    ]
    for target in targets:
        method = "POST" if target.startswith("/v1/runs/x/abort") else "GET"
        response = await raw_request(port, method, target)
        assert response.status in (200, 400, 404), (target, response)
        if response.status == 200:
            # Only the listing filter can answer: and it finds nothing for such a key.
            assert orjson.loads(response.body) == {"runs": []}, target


def check_state_dir(state: Path) -> None:
    unexpected = unexpected_state_files(state, AGENTS)
    assert unexpected == [], unexpected
    for folder, dirs, files in os.walk(state):
        for name in dirs:
            mode = stat.S_IMODE(Path(folder, name).lstat().st_mode)
            assert mode == 0o700, (folder, name, oct(mode))
        for name in files:
            path = Path(folder, name)
            assert stat.S_ISREG(path.lstat().st_mode), path
            assert stat.S_IMODE(path.lstat().st_mode) == 0o600, (path, oct(path.lstat().st_mode))
            match = TRANSCRIPT_RE.fullmatch(path.relative_to(state).as_posix())
            if match is None:
                continue
            header = read_transcript(path).header
            assert header is not None, path
            key = SessionKey.parse(header["key"])  # well-formed, or this raises
            assert (key.agent_id, header["agentId"]) == (match["agent"], match["agent"])
            assert header["id"] == match["sid"]


async def test_hostile_ids_never_leave_the_state_dir(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("untouched", encoding="utf-8")
    neighbours = sorted(p.name for p in tmp_path.parent.iterdir())
    # Every hostile label is its own run, all from one session: room for all of them.
    room = {"agent": {"subagents": {"maxChildrenPerSession": 4 * len(HOSTILE_IDS)}}}
    async with running_gateway(tmp_path, config=room) as gw:
        before = {k: v for k, v in tree(tmp_path).items() if not k.startswith("state")}
        async with api_server(gw) as server:
            port = server.port
            assert port is not None
            await chat_through_every_channel(gw)
            await spawn_with_hostile_fields(port, gw)
            await session_tools_with_hostile_keys(port)
            await http_paths_with_encoded_traversal(port)
        await gw.store.flush()
        keys = [s.key for s in await gw.store.list(include_subagents=True)]
        for key in keys:
            SessionKey.parse(key)  # every key the gateway made is well-formed
        assert len(keys) > 4 * len(HOSTILE_IDS)
    after = {k: v for k, v in tree(tmp_path).items() if not k.startswith("state")}
    assert after == before
    assert sorted(p.name for p in tmp_path.parent.iterdir()) == neighbours
    for root in (tmp_path.parent, Path("/tmp"), Path.cwd()):
        top = [str(p) for p in root.iterdir() if MARK in p.name]
        assert top == [], top
    assert outside_marks(tmp_path) == []
    check_state_dir(tmp_path / "state")


ODD_AGENT_IDS = [
    "../x",
    "main/../x",
    "/abs",
    ".",
    "..",
    "Main",
    "ma in",
    "main\x00",
    "main\n",
    "ü",
    "a" * 65,
    "-main",
    "_main",
    "",
]


@pytest.mark.parametrize("agent_id", ODD_AGENT_IDS, ids=repr)
def test_config_refuses_odd_agent_ids(tmp_path: Path, agent_id: str) -> None:
    data = base_config(tmp_path / "state", tmp_path / "script.json5")
    data["routing"]["agents"][agent_id] = {"name": "odd"}
    config = tmp_path / "herald.json"
    config.write_text(orjson.dumps(data).decode(), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(str(config), environ={})
    assert "routing.agents" in str(caught.value)


def test_transcripts_show_never_reads_beyond_what_it_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``herald transcripts show`` resolves keys inside the state directory only, prints
    chat text with its control characters escaped, and opens no path as given: a path is
    matched by the session id in its file name against the state directory's sessions."""

    async def make_state() -> str:
        async with running_gateway(tmp_path) as gw:
            await gw.say("hello \x1b[2J\x1b]0;owned\x07 there", chat_id=f"../../{MARK}")
            await gw.reply(f"../../{MARK}")
            (session,) = await gw.store.list()
            await gw.store.flush()
            return session.key

    key = asyncio.run(make_state())
    config = tmp_path / "herald.json"
    config.write_text(orjson.dumps({"gateway": {"stateDir": str(tmp_path / "state")}}).decode())
    assert cli.main(["transcripts", "show", key, "--config", str(config)]) == 0
    shown = capsys.readouterr()
    assert "\\x1b[2J\\x1b]0;owned\\x07" in shown.out
    assert "\x1b" not in shown.out + shown.err
    # A key that tries to climb out is refused before any file is opened.
    for bad in ["agent:main:../../../../etc/passwd", "agent:main:webchat:..%2f..%2fpasswd"]:
        assert cli.main(["transcripts", "show", bad, "--config", str(config)]) == 1
        shown = capsys.readouterr()
        assert "root:" not in shown.out + shown.err
    # A file that is not a transcript, named as one or not, inside the state directory or
    # not: nothing of it is read.
    other = tmp_path / "notes.txt"
    other.write_text(f"root:x:0:0:{MARK}-secret-line\n\x1b[2Jplain text\n", encoding="utf-8")
    session_id = asyncio.run(_session_id(tmp_path / "state", key))
    disguised = tmp_path / f"{session_id}.jsonl"
    disguised.symlink_to(other)
    planted = tmp_path / "state" / f"{uuid.uuid4()}.jsonl"
    planted.symlink_to(other)
    for target in (other, tmp_path / "link.jsonl", disguised, planted):
        assert cli.main(["transcripts", "show", str(target), "--config", str(config)]) == 1
        shown = capsys.readouterr()
        assert shown.out == ""
        assert f"{MARK}-secret-line" not in shown.err
        assert "\x1b" not in shown.err


async def _session_id(state: Path, key: str) -> str:
    async with opened_store(state) as store:
        return (await store.require(key)).session_id
