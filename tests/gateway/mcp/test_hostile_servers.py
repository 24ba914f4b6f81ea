"""What a hostile or broken MCP server sends is bounded: the restart backoff it is given is
the one the log says; a ``tools/list`` that pages forever; a 3 MiB result (cut while read, the
same cut in the transcript and in what the model reads); a line too large to keep; a 256 KiB
tool description; a ``__`` in a server's name; a child the server leaves behind. Against real
servers: a command that exits at once and the SDK-written :mod:`tests.fakes.mcp_hostile`."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from mcp import types

from gateway.cli import main
from gateway.config import load_settings
from gateway.constants import EXIT_CONFIG
from gateway.errors import ConfigError
from gateway.mcp.connection import McpCallError, ServerConnection, ServerState
from gateway.mcp.results import result_text
from gateway.mcp.setup import MCP
from gateway.mcp.tools import ANY_OBJECT, MAX_DESCRIPTION_CHARS
from gateway.mcp.transport import MAX_TOOL_PAGES, MAX_TOOLS
from gateway.schema.mcp import McpServerConfig
from tests.fakes.openai import openai_server
from tests.gateway.harness import fake_model_config, hang_guard, running_gateway
from tests.gateway.mcp.conftest import ROOT, until

#: A server that records its start in the file named by its argument, then exits at once.
EXITS_AT_ONCE = "import sys; open(sys.argv[1], 'a').write('start\\n'); sys.exit(1)"


def hostile(*args: str, **extra: Any) -> dict[str, Any]:
    """The config of :mod:`tests.fakes.mcp_hostile` over stdio."""
    return {
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_hostile", *args],
        "cwd": str(ROOT),
        **extra,
    }


class VirtualClock:
    """The restart backoff's clock: a wait moves time on at once by what it was asked, and
    the ``hold_at``-th wait is held (the connection stays quiet while the test looks)."""

    def __init__(self, hold_at: int) -> None:
        self.now = 0.0
        self.waits: list[float] = []
        self.hold_at = hold_at

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        if len(self.waits) >= self.hold_at:
            await asyncio.Event().wait()
        self.now += seconds


@asynccontextmanager
async def connection(
    config: dict[str, Any], **options: Any
) -> AsyncIterator[tuple[ServerConnection, list[list[str]]]]:
    """A started connection to ``config`` and every tool list it published; stopped after."""
    published: list[list[str]] = []

    def on_tools(_server: str, tools: Sequence[types.Tool]) -> None:
        published.append([tool.name for tool in tools])

    server = ServerConnection(
        "hostile", McpServerConfig.model_validate(config), on_tools=on_tools, **options
    )
    server.start()
    try:
        async with hang_guard("the server's first start"):
            await server.settled()
        yield server, published
    finally:
        await server.stop()


def restart_logs(caplog: pytest.LogCaptureFixture) -> list[float]:
    return [
        getattr(r, "retry_in", -1.0)
        for r in caplog.records
        if r.getMessage() == "mcp server down; restarting"
    ]


# -- 1. the backoff it logs is the backoff it waits --------------------------------------


async def test_a_server_that_exits_at_once_waits_the_logged_backoff_before_each_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    starts_file = tmp_path / "starts"
    clock = VirtualClock(hold_at=7)
    started_at: list[float] = []

    def on_state(_name: str, state: ServerState) -> None:
        if state is ServerState.STARTING:
            started_at.append(clock.now)

    config = {"command": sys.executable, "args": ["-c", EXITS_AT_ONCE, str(starts_file)]}
    with caplog.at_level(logging.WARNING, logger="gateway.mcp.connection"):
        async with connection(config, on_state=on_state, sleep=clock.sleep, clock=clock.time):
            await until(lambda: len(clock.waits) == 7, "seven restart waits")
    # Seven starts, each failure logged with the delay then waited, nothing else between.
    assert starts_file.read_text().count("start") == len(started_at) == 7
    assert restart_logs(caplog) == [round(wait, 2) for wait in clock.waits]
    gaps = [later - earlier for earlier, later in itertools.pairwise(started_at)]
    assert gaps == pytest.approx(clock.waits[:6])
    # Doubling from 1 s (jitter takes at most a fifth off): 6 restarts in the first minute,
    # where the old loop made 721.
    for n, wait in enumerate(clock.waits):
        assert 0.8 * min(60, 2**n) <= wait <= min(60, 2**n)
    assert sum(1 for t in started_at if t < 60) <= 7


async def test_a_server_that_exits_right_after_its_start_keeps_backing_off(
    tmp_path: Path,
) -> None:
    # Ready (its tools listed), then gone: the count of failures starts over only after a
    # server stayed up a minute, so this one is not restarted every second.
    clock = VirtualClock(hold_at=5)
    async with connection(hostile("--exit-after-list"), sleep=clock.sleep, clock=clock.time):
        await until(lambda: len(clock.waits) == 5, "five restart waits")
    for n, wait in enumerate(clock.waits):
        assert 0.8 * min(60, 2**n) <= wait <= min(60, 2**n)


# -- 2. tools/list paging is bounded -------------------------------------------------------


@pytest.mark.parametrize(
    ("page_size", "kept", "bound"),
    [("1", MAX_TOOL_PAGES, f"more than {MAX_TOOL_PAGES} pages"), ("100", MAX_TOOLS, None)],
)
async def test_endless_tool_pages_stop_at_a_bound_with_one_warning(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    page_size: str,
    kept: int,
    bound: str | None,
) -> None:
    args = ("--endless-pages", "--page-size", page_size, "--marks", str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="gateway.mcp.transport"):
        async with connection(hostile(*args)) as (server, published):
            assert server.state is ServerState.READY
            assert published[-1] == [f"t{n}" for n in range(kept)]
            pages = int((tmp_path / "pages").read_text())
    # The listing stopped at the bound: not one page more was asked for.
    assert pages == (MAX_TOOL_PAGES if bound else MAX_TOOLS // 100 + 1)
    warned = [r for r in caplog.records if "tool list is past a bound" in r.getMessage()]
    assert len(warned) == 1
    assert getattr(warned[0], "server", None) == "hostile"
    assert getattr(warned[0], "bound", None) == (bound or f"more than {MAX_TOOLS} tools")


async def test_slow_endless_tool_pages_stop_at_the_listing_time_with_the_tools_so_far(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A page a second, forever: 64 pages would outlast the start's 20 s; the listing stops
    # at half of it (10 s), the server ready with the tools it listed.
    config = hostile("--endless-pages", "--page-seconds", "1", startupTimeoutSeconds=20)
    with caplog.at_level(logging.WARNING, logger="gateway.mcp.transport"):
        async with connection(config) as (server, published):
            assert server.state is ServerState.READY
            listed = published[-1] if published else []
    assert listed == [f"t{n}" for n in range(len(listed))]
    (warned,) = [r for r in caplog.records if "tool list is past a bound" in r.getMessage()]
    assert getattr(warned, "bound", None) == "still paging after 10s"


# -- 3. a large result is read whole-free, cut once, and the same cut is kept -------------


async def test_a_3_mib_result_reaches_the_transcript_and_the_model_cut_the_same_way(
    tmp_path: Path,
) -> None:
    chars = 3 * 1024 * 1024
    async with openai_server() as model:
        model.reply_tool_calls([("call_1", "hostile__big", {"chars": chars})])
        model.reply_text("that was long")
        config = fake_model_config(model, {"mcp": {"servers": {"hostile": hostile()}}})
        async with running_gateway(tmp_path, config=config) as gw:
            async with hang_guard("the MCP server's start"):
                await gw.app[MCP].settled()
            await gw.say("make a big one")
            assert (await gw.reply()).text == "that was long"
            records = (await gw.store.read("agent:main:memory:channel:c1")).records
    limit = gw.settings.agent.tools.max_result_chars
    (stored,) = [
        r["message"]["content"]
        for r in records
        if r.get("type") == "message" and r["message"]["role"] == "tool"
    ]
    (sent,) = [m["content"] for m in model.requests[1].body["messages"] if m["role"] == "tool"]
    assert stored == sent
    assert len(stored) <= limit
    shown = stored.index("\n[cut:")
    assert stored[:shown] == "x" * shown
    assert stored[shown:] == f"\n[cut: {chars:,} chars, showing the first {shown:,}]"
    assert shown > limit - 100


async def test_a_line_too_large_to_keep_fails_its_call_and_the_session_goes_on(
    tmp_path: Path,
) -> None:
    # 40,000 blocks of 64 characters (about 3.6 MB of JSON) against a limit of 2 MiB: nothing
    # to cut in any one string, so the line is dropped while read and its call answered.
    async with connection(hostile(), max_message_bytes=2 * 1024 * 1024) as (server, _):
        with pytest.raises(McpCallError) as raised:
            await server.call("many", {"count": 40_000})
        assert "MCP server 'hostile'" in str(raised.value)
        assert "dropped unread" in str(raised.value)
        assert "more than 2,097,152 left" in str(raised.value)
        assert result_text(await server.call("x__y", {})) == "x__y here"
        # Under the limit, the same tool answers.
        assert len((await server.call("many", {"count": 10})).content) == 10


# -- 4. tool descriptions and schemas are bounded ------------------------------------------


async def test_a_256_kib_description_and_a_300_kib_schema_are_not_sent_whole(
    tmp_path: Path,
) -> None:
    async with openai_server() as model:
        model.reply_text("fine")
        config = fake_model_config(model, {"mcp": {"servers": {"hostile": hostile()}}})
        async with running_gateway(tmp_path, config=config) as gw:
            async with hang_guard("the MCP server's start"):
                await gw.app[MCP].settled()
            await gw.say("hello")
            await gw.reply()
    offered = {t["function"]["name"]: t["function"] for t in model.requests[0].body["tools"]}
    wordy = offered["hostile__wordy"]
    assert len(wordy["description"]) < MAX_DESCRIPTION_CHARS + 300
    assert wordy["description"].startswith("A tool that says far too much.")
    assert "[description cut: 262," in wordy["description"]
    assert "input schema was too large" in wordy["description"]
    assert wordy["parameters"] == ANY_OBJECT
    assert "chars" in offered["hostile__big"]["parameters"]["properties"]  # a small one stays


# -- 5. `__` in server names ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["n__x", "a_"])
def test_a_server_name_that_could_clash_is_a_config_error(tmp_path: Path, name: str) -> None:
    path = tmp_path / "herald.json5"
    path.write_text(
        "{\n"
        "  mcp: { servers: {\n"
        '    n: { command: "n-mcp" },\n'
        f'    "{name}": {{ command: "other-mcp" }},\n'
        "  } },\n"
        "}\n"
    )
    with pytest.raises(ConfigError) as raised:
        load_settings(path, environ={})
    assert main(["config", "check", "--config", str(path)]) == EXIT_CONFIG
    text = str(raised.value)
    assert f"{path}:4" in text
    assert f"mcp.servers.{name}" in text
    assert "must not contain '__' nor end in '_'" in text


async def test_a_tool_with_the_separator_maps_back_to_its_server_and_tool(
    tmp_path: Path,
) -> None:
    async with openai_server() as model:
        model.reply_tool_calls([("call_1", "n__x__y", {})])
        model.reply_text("done")
        config = fake_model_config(model, {"mcp": {"servers": {"n": hostile()}}})
        async with running_gateway(tmp_path, config=config) as gw:
            async with hang_guard("the MCP server's start"):
                await gw.app[MCP].settled()
            await gw.say("call it")
            await gw.reply()
    (sent,) = [m["content"] for m in model.requests[1].body["messages"] if m["role"] == "tool"]
    assert sent == "x__y here"


# -- 6. a server's children end with it ----------------------------------------------------


def _dead(pid: int) -> bool:
    """Whether ``pid`` is gone or a zombie (dead, not yet reaped by whoever adopted it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def test_a_grandchild_of_the_server_is_gone_after_stop(tmp_path: Path) -> None:
    pid = 0
    try:
        async with connection(hostile("--marks", str(tmp_path))) as (server, _):
            pid = int(result_text(await server.call("grandchild", {})))
            assert not _dead(pid)
        # stop() returned: the whole process group was ended, not just the server.
        assert _dead(pid)
    finally:
        if pid:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
