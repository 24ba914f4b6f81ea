"""``herald spawn`` through a running gateway, ``herald runs list|show`` and
``herald config show`` (DESIGN §11), as real processes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import orjson

from tests.gateway.daemon_process import HERALD, clean_env, free_port, herald, write_config
from tests.gateway.harness import TEST_SCRIPT

TOKEN = "cli-test-token-0123456789"


def config(tmp_path: Path, port: int) -> Path:
    script = tmp_path / "script.json"
    script.write_bytes(orjson.dumps(TEST_SCRIPT))
    return write_config(
        tmp_path / "herald.json",
        {
            "gateway": {
                "port": port,
                "stateDir": str(tmp_path / "state"),
                "auth": {"token": TOKEN},
            },
            "agent": {"model": "t/m"},
            "models": {
                "providers": {
                    "t": {
                        "api": "scripted",
                        "script": str(script),
                        "models": [{"id": "m", "cost": {"input": 1, "output": 2}}],
                    }
                }
            },
            "channels": {"webchat": {"enabled": False}},
        },
    )


async def cli(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *HERALD,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=clean_env(),
    )
    async with asyncio.timeout(60):
        out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_spawn_waits_for_the_announce_and_runs_show_it(tmp_path: Path) -> None:
    port = free_port()
    path = config(tmp_path, port)
    async with herald("run", "--config", str(path), port=port) as daemon:
        await daemon.wait_healthy()
        code, out, err = await cli(
            "spawn", "task: from the cli", "--label", "cli", "--wait", "--config", str(path)
        )
        assert code == 0, err
        first, status, *announce = out.splitlines()
        assert first.startswith("accepted run ")
        run_id = first.split()[2]
        assert status == "status: done"
        assert announce[0] == "ANNOUNCE: done: from the cli"
        assert announce[-1].startswith("Stats: runtime ")

        code, out, _ = await cli("runs", "list", "--config", str(path))
        assert code == 0
        assert run_id in out
        assert "done" in out
        code, out, _ = await cli("runs", "show", run_id[:8], "--config", str(path))
        assert code == 0
        assert f"run        {run_id}" in out
        assert "model      t/m" in out
        code, out, _ = await cli("runs", "show", run_id, "--json", "--config", str(path))
        shown = json.loads(out)
        assert (shown["runId"], shown["status"], shown["label"]) == (run_id, "done", "cli")
        code, _, err = await cli("runs", "show", "nope", "--config", str(path))
        assert code == 1
        assert "no run matches 'nope'" in err


async def test_spawn_errors_are_clear(tmp_path: Path) -> None:
    port = free_port()
    path = config(tmp_path, port)
    code, _, err = await cli("spawn", "task: x", "--config", str(path))
    assert code == 69  # nothing listens yet
    assert "cannot reach the gateway" in err
    async with herald("run", "--config", str(path), port=port) as daemon:
        await daemon.wait_healthy()
        code, _, err = await cli("spawn", "task: x", "--agent", "ghost", "--config", str(path))
        assert code == 1
        assert "unknown agent 'ghost'" in err


async def test_config_show_masks_secrets(tmp_path: Path) -> None:
    path = config(tmp_path, free_port())
    code, out, _ = await cli("config", "show", "--format", "json", "--config", str(path))
    assert code == 0
    assert TOKEN not in out
    assert json.loads(out)["gateway"]["auth"]["token"] == "********"
