"""What the CLI's process tests share: a scripted gateway's config file, ``herald …`` run as
a real process, and a wait on a run's state as ``herald runs show`` reports it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from tests.gateway.daemon_process import HANG_GUARD_SECONDS, HERALD, clean_env, write_config
from tests.gateway.harness import TEST_SCRIPT

TOKEN = "cli-test-token-0123456789"


def gateway_config(tmp_path: Path, port: int, **sections: Any) -> Path:
    """A config file for a gateway on ``port`` behind :data:`TOKEN`, its model the test
    script (priced, so costs show); ``sections`` are further top-level keys."""
    script = tmp_path / "script.json"
    script.write_bytes(orjson.dumps(TEST_SCRIPT))
    model = {"id": "m", "cost": {"input": 1, "output": 2}}
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
                "providers": {"t": {"api": "scripted", "script": str(script), "models": [model]}}
            },
            **sections,
        },
    )


async def cli(*args: str) -> tuple[int, str, str]:
    """``herald *args`` as a process of its own: exit code, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        *HERALD,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=clean_env(),
    )
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def cli_json(*args: str) -> Any:
    code, out, err = await cli(*args)
    assert code == 0, err
    return json.loads(out)


async def run_when(
    path: Path, run_id: str, ready: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """``runs show --json`` of the run, once ``ready`` says it is in the state awaited.

    The wait asks the gateway's API (``GET /v1/runs/{id}``: the same view of the run) rather
    than starting a process per look. ``ready`` is a state the run does not leave (final,
    archived), so ``runs show``, run once after, must report it too."""
    port = json.loads(path.read_text(encoding="utf-8"))["gateway"]["port"]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        asyncio.timeout(HANG_GUARD_SECONDS),
        aiohttp.ClientSession(headers=headers) as http,
    ):
        while True:
            async with http.get(f"http://127.0.0.1:{port}/v1/runs/{run_id}") as response:
                if response.status == 200 and ready(await response.json()):
                    break
            await asyncio.sleep(0.05)
    shown: dict[str, Any] = await cli_json("runs", "show", run_id, "--json", "-c", str(path))
    assert ready(shown), shown
    return shown
