"""``herald status`` against a real running gateway, and with none running."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from gateway.commands.status import EXIT_NO_TOKEN, TOKEN_HINT
from tests.gateway.daemon_process import clean_env, daemon_config, free_port, herald

pytestmark = pytest.mark.slow


async def test_status_reports_a_running_gateway_then_a_stopped_one(tmp_path: Path) -> None:
    port = free_port()
    config = daemon_config(tmp_path, port, channels={"webchat": {"enabled": True}})
    state = tmp_path / "state"
    async with herald("run", "--config", str(config), port=port) as gateway:
        await gateway.wait_healthy()
        async with herald("status", "--config", str(config)) as status:
            assert await status.wait_exit() == 0
        lines = status.raw
        assert lines[0] == f"herald: running (pid {gateway.process.pid}), ready"
        assert f"config     {config}" in lines
        assert f"state dir  {state}" in lines
        assert f"url        http://127.0.0.1:{port}/" in lines
        assert "channels   webchat connected" in lines
        lanes = next(line for line in lines if line.startswith("lanes"))
        assert "subagent 0 active / 0 queued" in lanes
        assert "main 0 active / 0 queued" in lanes
        assert any(
            line.startswith("runs       0 queued, 0 running, 0 announcing") for line in lines
        )
        async with herald("status", "--config", str(config), "--json") as as_json:
            assert await as_json.wait_exit() == 0
        data = json.loads("\n".join(as_json.raw))
        assert (data["running"], data["ready"], data["pid"]) == (True, True, gateway.process.pid)
        assert data["channels"] == {"webchat": True}
        gateway.process.send_signal(signal.SIGTERM)
        assert await gateway.wait_exit() == 0
    async with herald("status", "--config", str(config)) as stopped:
        assert await stopped.wait_exit() == 3
    assert stopped.raw[0] == "herald: not running"
    assert f"state dir  {state}" in stopped.raw


async def test_commands_without_a_config_take_the_running_gateway_s(tmp_path: Path) -> None:
    """``make run`` starts the gateway on the repository's example, which no lookup finds
    from elsewhere: ``herald status`` with no ``--config`` still names and uses that file
    (the gateway's lock records it), instead of the embedded defaults."""
    port = free_port()
    config = daemon_config(tmp_path, port, channels={"webchat": {"enabled": True}})
    state = tmp_path / "state"
    home = tmp_path / "home"
    env = clean_env(HOME=str(home), HERALD_GATEWAY__STATE_DIR=str(state))
    async with herald("run", "--config", str(config), port=port, env=env) as gateway:
        await gateway.wait_healthy()
        async with herald("status", env=env) as status:
            assert await status.wait_exit() == 0
        assert f"config     {config}" in status.raw
        assert f"url        http://127.0.0.1:{port}/" in status.raw  # the file's port
        async with herald("config", "check", env=env) as check:
            assert await check.wait_exit() == 0
        assert check.raw == [f"{config}: OK"]


async def test_status_without_the_gateway_s_token_says_how_to_give_it(tmp_path: Path) -> None:
    port = free_port()
    config = daemon_config(tmp_path, port, channels={"webchat": {"enabled": True}})
    token = {"HERALD_GATEWAY__AUTH__TOKEN": "s3cret-token"}
    async with herald("run", "--config", str(config), port=port, env=clean_env(**token)) as gw:
        await gw.wait_healthy()
        async with herald("status", "--config", str(config)) as status:
            assert await status.wait_exit() == EXIT_NO_TOKEN
        assert f"error      {TOKEN_HINT}" in status.raw
        assert not any("s3cret" in line for line in status.raw)
        async with herald("status", "--config", str(config), env=clean_env(**token)) as given:
            assert await given.wait_exit() == 0
