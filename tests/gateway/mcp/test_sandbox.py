"""A stdio MCP server in the sandbox (``mcp.servers.<name>.sandbox``), under the real
bubblewrap: it cannot read Herald's state, config or home, nor reach the network unless
allowed; the official reference server still works there; mistakes are config errors."""

from __future__ import annotations

import json
import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.constants import EXIT_CONFIG
from gateway.mcp.probe import probe
from gateway.mcp.results import result_text
from gateway.schema.mcp import McpServerConfig
from tests.gateway.mcp.conftest import fake_stdio
from tests.gateway.mcp.test_connection import connected
from tests.gateway.test_preflight import config, herald

#: What the fake server's interpreter needs besides its cwd (the checkout, which holds the
#: virtual environment): the Python installation the environment was made from.
INTERPRETER = [sys.base_prefix]


def sandboxed(**sandbox: Any) -> dict[str, Any]:
    """The fake server over stdio, in a sandbox (its cwd, the checkout, read-write)."""
    return fake_stdio(sandbox={"readOnly": INTERPRETER, **sandbox})


@pytest.fixture
def herald_files(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """Stand-ins for what a server must not read: a state database, a config file and a
    file in Herald's home (removed after the test)."""
    state = tmp_path / "state"
    state.mkdir()
    files = {
        "state": state / "herald.db",
        "config": tmp_path / "herald.json5",
        "home": Path.home() / f".herald-test-{tmp_path.name}",
    }
    for name, path in files.items():
        path.write_text(f"the {name} of herald")
    try:
        yield files
    finally:
        files["home"].unlink()


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port listening on the host's loopback (as the gateway's own port does)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


async def test_a_sandboxed_server_cannot_read_herald_s_files_or_home(
    herald_files: dict[str, Path],
) -> None:
    async with connected(sandboxed()) as (server, _):
        for path in [*herald_files.values(), Path("/etc/shadow")]:
            result = await server.call("read", {"path": str(path)})
            assert result.is_error
            assert "No such file or directory" in result_text(result)
        # It still reads what the sandbox shows: the system's files, its readOnly paths.
        assert "root:" in result_text(await server.call("read", {"path": "/etc/passwd"}))
        seen = json.loads(result_text(await server.call("environment", {})))
    assert seen["HOME"] == "/tmp"


async def test_the_same_server_unsandboxed_reads_them(herald_files: dict[str, Path]) -> None:
    # The control: what the sandbox holds back is there to read.
    async with connected(fake_stdio()) as (server, _):
        for name, path in herald_files.items():
            text = result_text(await server.call("read", {"path": str(path)}))
            assert text == f"the {name} of herald"


async def test_a_sandboxed_server_reaches_no_port_unless_network_is_allowed(
    listener: int,
) -> None:
    async with connected(sandboxed()) as (server, _):
        refused = await server.call("connect", {"port": listener})
        assert refused.is_error
        assert "cannot connect" in result_text(refused)
    async with connected(sandboxed(network=True)) as (server, _):
        assert result_text(await server.call("connect", {"port": listener})) == "connected"


async def test_the_official_time_server_works_in_the_sandbox() -> None:
    # No cwd: the server starts in its private /tmp; its environment and the interpreter
    # are what it needs to see.
    config = McpServerConfig.model_validate(
        {
            "command": sys.executable,
            "args": ["-m", "mcp_server_time"],
            "sandbox": {"readOnly": [sys.prefix, *INTERPRETER]},
        }
    )
    report = await probe("time", config, seconds=60)
    assert report.ok, report.error
    assert "get_current_time" in {tool.name for tool in report.tools}


def check(tmp_path: Path, servers: dict[str, Any]) -> str:
    """``herald config check`` of a config with ``servers``: its output (it must exit 78)."""
    path = config(tmp_path, tmp_path / "state", mcp={"servers": servers})
    done = herald("config", "check", "--config", str(path))
    output = done.stdout + done.stderr
    assert done.returncode == EXIT_CONFIG, output
    assert "Traceback" not in output
    return output


def test_sandbox_mistakes_are_config_errors_naming_the_key(tmp_path: Path) -> None:
    outside = tmp_path / "bin" / "server"
    outside.parent.mkdir()
    outside.write_text("#!/bin/sh\n")
    outside.chmod(0o755)
    output = check(
        tmp_path,
        {
            "missing": {"command": "true", "sandbox": {"readOnly": [str(tmp_path / "nope")]}},
            "shows": {"command": "true", "sandbox": {"readOnly": [str(tmp_path)]}},
            "outside": {"command": str(outside), "sandbox": True},
        },
    )
    assert "mcp.servers.missing.sandbox.readOnly" in output
    assert f"{tmp_path / 'nope'} does not exist" in output
    assert f"{tmp_path} holds the state directory" in output
    # At the key's line in the file, as every config error is.
    assert re.search(r"herald\.json:\d+:\d+: mcp\.servers\.outside\.command: ", output), output
    assert f"add {outside.parent} to mcp.servers.outside.sandbox.readOnly" in output
    # A sandbox is for a program Herald starts: an HTTP server has none.
    output = check(tmp_path, {"remote": {"url": "http://127.0.0.1:1/mcp", "sandbox": True}})
    assert "mcp.servers.remote" in output
    assert "not both" in output
