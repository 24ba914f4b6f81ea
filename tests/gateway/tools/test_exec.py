"""exec: runs in the workspace, exit codes, timeout, output cap, scrubbed environment.

What holds with the sandbox on and off runs in both modes (``mode`` fixture); what depends on
host process ids runs with the sandbox off, today's behaviour (the sandbox's own tests, with
the real bubblewrap, are in test_sandbox.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gateway.llm import ToolCall
from gateway.schema.sandbox import SandboxConfig
from gateway.settings import ExecConfig
from gateway.tools import ToolOutput, ToolRegistry
from gateway.tools.exec import ExecTool, scrubbed_environment
from tests.gateway.tools.conftest import MakeCtx

OFF = SandboxConfig(mode="off")


@pytest.fixture(params=["off", "bwrap"])
def mode(request: pytest.FixtureRequest) -> SandboxConfig:
    """The sandbox off, then on (the real bubblewrap)."""
    return SandboxConfig(mode=request.param)


async def run_exec(make_ctx: MakeCtx, config: ExecConfig | None = None, **args: Any) -> ToolOutput:
    """``exec`` with ``args``; by default with a 10 s timeout and the sandbox off."""
    registry = ToolRegistry()
    registry.register(ExecTool(config or ExecConfig(timeout_seconds=10, sandbox=OFF)))
    return await registry.invoke(ToolCall("c", "exec", args), make_ctx(), registry.names())


def config_in(mode: SandboxConfig, **limits: Any) -> ExecConfig:
    return ExecConfig(**({"timeout_seconds": 10} | limits), sandbox=mode)


def resolved(path: Path) -> Path:
    return path.resolve()


def _exited(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def gone(pid: int) -> bool:
    """Whether ``pid`` has exited (dead, or a zombie awaiting its reaper) within 2 s."""
    for _ in range(200):
        if _exited(pid):
            return True
        await asyncio.sleep(0.01)
    return False


async def test_runs_in_the_workspace(
    make_ctx: MakeCtx, mode: SandboxConfig, tmp_path: Path
) -> None:
    out = await run_exec(make_ctx, config_in(mode), command="pwd; echo hi > made.txt")
    workspace = resolved(tmp_path) / "ws"
    assert not out.is_error
    assert out.content == f"{workspace}\n[exit code 0]"
    assert (workspace / "made.txt").read_text() == "hi\n"
    assert out.data == {
        "exitCode": 0,
        "timedOut": False,
        "output": f"{workspace}\n",
        "outputBytes": len(str(workspace)) + 1,
        "truncated": False,
    }


async def test_stderr_is_merged_and_exit_code_reported(
    make_ctx: MakeCtx, mode: SandboxConfig
) -> None:
    out = await run_exec(make_ctx, config_in(mode), command="echo out; echo err >&2; exit 3")
    assert out.is_error
    assert out.content == "out\nerr\n[exit code 3]"
    assert out.data is not None
    assert out.data["exitCode"] == 3


async def test_stdin_is_closed(make_ctx: MakeCtx, mode: SandboxConfig) -> None:
    out = await run_exec(make_ctx, config_in(mode), command="cat; echo done")
    assert out.content == "done\n[exit code 0]"


async def test_timeout_kills_the_process_group(make_ctx: MakeCtx, workspace: Path) -> None:
    out = await run_exec(
        make_ctx, command="sleep 60 & echo $! > bg.pid; sleep 60", timeoutSeconds=0.5
    )
    assert out.is_error
    assert "[timed out after 0.5s; the command was killed]" in out.content
    assert out.data is not None
    assert out.data["timedOut"] is True
    assert out.data["exitCode"] is None
    assert await gone(int((workspace / "bg.pid").read_text()))


async def test_timeout_is_capped_by_config(make_ctx: MakeCtx, mode: SandboxConfig) -> None:
    config = ExecConfig(timeout_seconds=0.3, sandbox=mode)
    out = await run_exec(make_ctx, config, command="sleep 60", timeoutSeconds=600)
    assert "timed out after 0.3s" in out.content


async def test_background_processes_do_not_outlive_the_call(
    make_ctx: MakeCtx, workspace: Path
) -> None:
    out = await run_exec(make_ctx, command="sleep 60 > /dev/null 2>&1 & echo $! > bg.pid")
    assert out.content == "[exit code 0]"
    assert await gone(int((workspace / "bg.pid").read_text()))


async def test_output_cap_keeps_head_and_tail(make_ctx: MakeCtx, mode: SandboxConfig) -> None:
    config = ExecConfig(timeout_seconds=10, max_output_bytes=1000, sandbox=mode)
    command = "printf START; head -c 100000 /dev/zero | tr '\\0' x; printf END"
    out = await run_exec(make_ctx, config, command=command)
    assert out.data is not None
    assert out.data["outputBytes"] == 100_008
    assert out.data["truncated"] is True
    assert out.data["output"].startswith("START" + "x" * 495)
    assert out.data["output"].endswith("x" * 497 + "END")
    assert "[... 99008 bytes of output omitted ...]" in out.content
    assert len(out.content) < 1300


async def test_cancel_kills_the_command(make_ctx: MakeCtx, workspace: Path) -> None:
    task = asyncio.create_task(run_exec(make_ctx, command="echo $$ > sh.pid; exec sleep 60"))
    pid_file = workspace / "sh.pid"
    for _ in range(500):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await gone(int(pid_file.read_text()))


async def test_environment_is_scrubbed(
    make_ctx: MakeCtx, mode: SandboxConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = {
        "HERALD_GATEWAY__AUTH__TOKEN": "s1",
        "OPENAI_API_KEY": "s2",
        "SLACK_SIGNING_SECRET": "s3",
        "DISCORD_TOKEN": "s4",
        "db_password": "s5",
    }
    for key, value in secrets.items():
        monkeypatch.setenv(key, f"secret-value-{value}")
    monkeypatch.setenv("HARMLESS_SETTING", "visible")
    out = await run_exec(make_ctx, config_in(mode), command="env")
    assert "HARMLESS_SETTING=visible" in out.content
    assert "secret-value" not in out.content


def test_scrubbed_environment() -> None:
    env = {"PATH": "/bin", "HERALD_CONFIG": "x", "GH_TOKEN": "t", "AWS_SECRET": "s", "KEY": "k"}
    assert scrubbed_environment(env) == {"PATH": "/bin", "KEY": "k"}


async def test_command_is_required(make_ctx: MakeCtx, mode: SandboxConfig) -> None:
    out = await run_exec(make_ctx, config_in(mode), command="")
    assert out.is_error
    assert "args.command" in out.content
