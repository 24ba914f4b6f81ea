"""``herald mcp list|probe`` and the doctor's MCP checks, with no gateway running: the
reference server ``mcp-server-time``, a command that does not exist, an HTTP server that is
down (its header secret never shown); a sandboxed server labelled so."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gateway.cli import main
from gateway.commands.doctor import diagnose
from tests.gateway.mcp.conftest import free_port, time_stdio

SECRET = "Bearer sk-issues-42424242"


def write_config(tmp_path: Path) -> Path:
    servers: dict[str, Any] = {
        "time": time_stdio(),
        "broken": {"command": "herald-no-such-mcp-server"},
        "issues": {
            "url": f"http://127.0.0.1:{free_port()}/mcp",
            "headers": {"Authorization": SECRET},
            "startupTimeoutSeconds": 10,
        },
        "off": {"command": "herald-no-such-mcp-server", "enabled": False},
    }
    config = {"gateway": {"stateDir": str(tmp_path / "state")}, "mcp": {"servers": servers}}
    path = tmp_path / "herald.json"
    path.write_text(json.dumps(config))
    return path


def test_list_shows_each_server_with_its_state_and_tools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["mcp", "list", "--config", str(write_config(tmp_path))]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert "ready" in lines["time"]
    assert "get_current_time" in lines["time"]
    assert "failed: command not found: herald-no-such-mcp-server" in lines["broken"]
    assert "failed:" in lines["issues"]
    assert lines["off"].split()[1:] == ["stdio", "disabled"]
    assert "sk-issues" not in out


def test_probe_lists_the_tools_by_the_names_agents_see(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["mcp", "probe", "time", "--config", str(write_config(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "ready: 2 tools" in out
    assert "time__get_current_time" in out
    assert "time__convert_time" in out


@pytest.mark.parametrize("name", ["broken", "issues"])
def test_probe_of_a_failing_server_exits_1_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    assert main(["mcp", "probe", name, "--config", str(write_config(tmp_path))]) == 1
    captured = capsys.readouterr()
    assert "failed: " in captured.err
    assert "sk-issues" not in captured.out + captured.err


def test_probe_of_an_unknown_server_names_the_configured_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["mcp", "probe", "tiem", "--config", str(write_config(tmp_path))]) == 2
    assert "configured: broken, issues, off, time" in capsys.readouterr().err


async def test_doctor_probes_every_enabled_server(tmp_path: Path) -> None:
    findings = await diagnose(str(write_config(tmp_path)), environ=dict(os.environ))
    by_subject = {f.subject: f for f in findings}
    assert by_subject["mcp server time"].level == "ok"
    assert by_subject["mcp server time"].message == "stdio: 2 tools"
    broken = by_subject["mcp server broken"]
    assert broken.level == "FAIL"
    assert "command not found" in broken.message
    assert broken.fix is not None
    assert "herald mcp probe broken" in broken.fix
    assert by_subject["mcp server issues"].level == "FAIL"
    assert "mcp server off" not in by_subject
    assert all("sk-issues" not in f.render() for f in findings)


def test_both_commands_label_a_sandboxed_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The label comes from the config alone: `true`, which ends before it speaks MCP, is the
    # cheapest server to show it (bubblewrap still starts the sandboxed one).
    servers = {"plain": {"command": "true"}, "boxed": {"command": "true", "sandbox": True}}
    config = {"gateway": {"stateDir": str(tmp_path / "state")}, "mcp": {"servers": servers}}
    path = tmp_path / "herald.json"
    path.write_text(json.dumps(config))

    assert main(["mcp", "list", "--config", str(path)]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert rows["plain"].split()[1:3] == ["stdio", "failed:"]
    assert rows["boxed"].split()[1:4] == ["stdio,", "sandboxed", "failed:"]
    assert rows["plain"].index("failed:") == rows["boxed"].index("failed:")  # one column

    assert main(["doctor", "--config", str(path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  mcp server plain: stdio: " in out
    assert "FAIL  mcp server boxed: stdio, sandboxed: " in out
