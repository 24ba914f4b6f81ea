"""``herald run`` as a real process: health, signals, reload, exit statuses, systemd notify."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
from pathlib import Path

import aiohttp
import pytest

from gateway.constants import EXIT_CONFIG, EXIT_TEMPFAIL, EXIT_UNAVAILABLE, STATE_DB_NAME
from gateway.state.schema import LATEST_VERSION
from tests.gateway.daemon_process import (
    HERALD,
    clean_env,
    daemon_config,
    free_port,
    herald,
    write_config,
)


def test_version() -> None:
    out = subprocess.run([*HERALD, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("herald ")


async def test_serves_health_reloads_on_sighup_and_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    config = daemon_config(tmp_path, port)
    async with herald("run", "--config", str(config), port=port) as daemon:
        await daemon.wait_healthy()
        async with aiohttp.ClientSession() as http, http.get(f"{daemon.url}/readyz") as ready:
            assert ready.status == 200
        # The start-up log names the schema version the state database ended at.
        state = await daemon.wait_log("state ready")
        assert state["schema_version"] == str(LATEST_VERSION)
        # A valid change: lane widths take effect.
        data = json.loads(config.read_text())
        data["agent"] = {"maxConcurrent": 7, "subagents": {"maxConcurrent": 3}}
        write_config(config, data)
        daemon.process.send_signal(signal.SIGHUP)
        applied = await daemon.wait_log("config applied")
        assert (applied["main_lane"], applied["subagent_lane"]) == (7, 3)
        # A broken change is refused and the old config stays.
        config.write_text("{ agent: { maxConcurrent: -1 ", encoding="utf-8")
        daemon.process.send_signal(signal.SIGHUP)
        refused = await daemon.wait_log("config reload refused; keeping the running configuration")
        assert refused["level"] == "error"
        assert str(config) in refused["issues"][0]
        daemon.process.send_signal(signal.SIGTERM)
        assert await daemon.wait_exit() == 0
        assert any(r.get("msg") == "gateway stopped" for r in daemon.logs)
        assert all("Traceback" not in line for line in daemon.raw)


@pytest.mark.parametrize("token", [None, "", "   ", "\t\n"])
async def test_refuses_a_public_address_without_a_token(tmp_path: Path, token: str | None) -> None:
    """No token, an empty one or a blank one: a public bind is refused before it starts."""
    gateway: dict[str, object] = {"host": "0.0.0.0", "port": 9}
    if token is not None:
        gateway["auth"] = {"token": token}
    config = daemon_config(tmp_path, free_port(), gateway=gateway)
    async with herald("run", "--config", str(config)) as daemon:
        assert await daemon.wait_exit() == EXIT_CONFIG
    output = "\n".join(daemon.raw)
    assert "gateway.auth.token" in output
    assert "Traceback" not in output


async def test_a_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = daemon_config(tmp_path, port)
        async with herald("run", "--config", str(config)) as daemon:
            assert await daemon.wait_exit() == EXIT_UNAVAILABLE
        output = "\n".join(daemon.raw)
        assert f"herald: cannot listen on 127.0.0.1:{port}: the port is in use" in output
        assert "Traceback" not in output
        # Found before anything started: no database, so no run was recovered or started.
        assert not (tmp_path / "state" / STATE_DB_NAME).exists()


async def test_a_second_gateway_on_the_same_state_directory_is_refused(tmp_path: Path) -> None:
    port = free_port()
    config = daemon_config(tmp_path, port)
    async with herald("run", "--config", str(config), port=port) as first:
        await first.wait_healthy()
        (tmp_path / "second").mkdir()
        other = daemon_config(tmp_path / "second", free_port())
        data = json.loads(other.read_text())
        data["gateway"]["stateDir"] = str(tmp_path / "state")  # the first one's
        other.write_text(json.dumps(data))
        async with herald("run", "--config", str(other)) as second:
            assert await second.wait_exit() == EXIT_TEMPFAIL
        output = "\n".join(second.raw)
        state = tmp_path / "state"
        assert (
            f"herald: already running (pid {first.process.pid}) on state directory {state}"
            in output
        )
        assert "Traceback" not in output
        # The first gateway was not disturbed.
        first.process.send_signal(signal.SIGTERM)
        assert await first.wait_exit() == 0
    # Its lock died with it: the state directory can be used again.
    async with herald("run", "--config", str(config), port=port) as again:
        await again.wait_healthy()


async def test_notifies_systemd_ready_and_stopping(tmp_path: Path) -> None:
    port = free_port()
    address = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(str(address))
        listener.setblocking(False)
        env = clean_env(NOTIFY_SOCKET=str(address))
        config = daemon_config(tmp_path, port)
        async with herald("run", "--config", str(config), env=env, port=port) as daemon:
            await daemon.wait_healthy()
            loop = asyncio.get_running_loop()
            async with asyncio.timeout(30):
                ready = (await loop.sock_recv(listener, 4096)).decode()
            assert "READY=1" in ready.splitlines()
            daemon.process.send_signal(signal.SIGTERM)
            assert await daemon.wait_exit() == 0
            async with asyncio.timeout(30):
                stopping = (await loop.sock_recv(listener, 4096)).decode()
            assert "STOPPING=1" in stopping.splitlines()


def test_config_check_exits_78_with_one_clear_message(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json5"
    bad.write_text("{ gateway: { port: 70000 } }", encoding="utf-8")
    out = subprocess.run(
        [*HERALD, "config", "check", "--config", str(bad)],
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    assert out.returncode == EXIT_CONFIG
    assert f"{bad}:1:" in out.stderr
    assert "gateway.port" in out.stderr
    assert "Traceback" not in out.stderr
