"""``herald status`` against a real running gateway, and with none running."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.gateway.daemon_process import daemon_config, free_port, herald

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
