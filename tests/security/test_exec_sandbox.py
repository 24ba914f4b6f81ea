"""A real ``herald run`` with ``exec`` allowed: through the HTTP API, a command in the sandbox
cannot read the state database or the config file, cannot reach the gateway's own port, and
a command a limit stops leaves the gateway serving. Each beside the same command where it is
allowed (the sandbox off, the network on).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from tests.gateway.daemon_process import Daemon, clean_env, free_port, herald, write_config

TOKEN = "hgw-sandbox-5e1d0c7a93b2"


@asynccontextmanager
async def gateway(tmp_path: Path, sandbox: dict[str, Any]) -> AsyncIterator[Daemon]:
    """A daemon whose agent may run ``exec`` in a sandbox configured as ``sandbox``."""
    port = free_port()
    tmp_path.mkdir(exist_ok=True)
    data = {
        "gateway": {"port": port, "stateDir": str(tmp_path / "state"), "auth": {"token": TOKEN}},
        "agent": {"tools": {"allow": ["*", "exec"], "exec": {"sandbox": sandbox}}},
        "channels": {"webchat": {"enabled": False}},
    }
    config = write_config(tmp_path / "herald.json", data)
    async with herald("run", "--config", str(config), port=port, env=clean_env()) as daemon:
        await daemon.wait_healthy()
        yield daemon


async def invoke(daemon: Daemon, command: str) -> dict[str, Any]:
    body = {"tool": "exec", "args": {"command": command}}
    async with (
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
        http.post(f"{daemon.url}/v1/tools/invoke", json=body) as response,
    ):
        answer: dict[str, Any] = await response.json()
    assert response.status == 200, answer
    result: dict[str, Any] = answer["result"]
    return result


#: Commands, given the state directory, the config file and the port.
READS: dict[str, Callable[[Path, int], str]] = {
    "state database": lambda root, _: f"head -c 16 {root}/state/herald.db",
    "config file": lambda root, _: f"cat {root}/herald.json",
    "gateway port": lambda _, port: (
        f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}; "
        'printf "GET /healthz HTTP/1.0\\r\\n\\r\\n" >&3; cat <&3\''
    ),
}
#: What each command prints where it is allowed.
SEEN = {"state database": "SQLite format 3", "config file": TOKEN, "gateway port": "200 OK"}


async def outputs(daemon: Daemon, root: Path) -> dict[str, str]:
    return {
        name: str((await invoke(daemon, make(root, daemon.port)))["output"])
        for name, make in READS.items()
    }


async def test_a_sandboxed_command_cannot_reach_herald(tmp_path: Path) -> None:
    async with gateway(tmp_path / "off", {"mode": "off"}) as daemon:
        unsandboxed = await outputs(daemon, tmp_path / "off")
    for name, seen in SEEN.items():
        assert seen in unsandboxed[name], (name, unsandboxed[name])  # the control

    async with gateway(tmp_path / "on", {"mode": "auto"}) as daemon:
        sandboxed = await outputs(daemon, tmp_path / "on")
    for name, seen in SEEN.items():
        assert seen not in sandboxed[name], (name, sandboxed[name])


async def test_the_gateway_port_with_the_network_on(tmp_path: Path) -> None:
    async with gateway(tmp_path, {"mode": "auto", "network": True}) as daemon:
        out = await invoke(daemon, READS["gateway port"](tmp_path, daemon.port))
    assert SEEN["gateway port"] in out["output"]


async def test_the_gateway_carries_on_after_a_command_hits_a_limit(tmp_path: Path) -> None:
    hog = "x=$(head -c 100000000 /dev/zero | tr '\\0' a); echo ${#x}"
    async with gateway(tmp_path, {"memoryMb": 64}) as daemon:
        stopped = await invoke(daemon, hog)
        assert stopped["exitCode"] != 0, stopped
        async with aiohttp.ClientSession() as http, http.get(f"{daemon.url}/healthz") as health:
            assert health.status == 200
        after = await invoke(daemon, "echo still here")
    assert after["output"] == "still here\n"
