"""The commands of docs/cluster.md ("Running a cluster"), as written: the exports,
``herald db migrate`` and two ``herald run`` replicas on ``config/cluster.json5``. Two things
are replaced, as a reader replaces them: the database URL (the test's PostgreSQL) and the
ports (free ones)."""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.gateway.daemon_process import HANG_GUARD_SECONDS, clean_env, free_port

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_DOC = ROOT / "docs" / "cluster.md"
FENCE = re.compile(r"^```sh\n(.*?)^```$", re.MULTILINE | re.DOTALL)
HERALD = [sys.executable, "-m", "gateway"]


def cluster_lines() -> list[str]:
    text = CLUSTER_DOC.read_text(encoding="utf-8")
    assert text.startswith("# Running a cluster\n")
    block = FENCE.findall(text)[0]  # the start; the later one is a rolling restart's
    return [line.strip() for line in block.splitlines() if line.strip()]


async def ready(port: int, process: asyncio.subprocess.Process) -> None:
    async with asyncio.timeout(HANG_GUARD_SECONDS), aiohttp.ClientSession() as http:
        while True:
            assert process.returncode is None, "the replica exited"
            try:
                async with http.get(f"http://127.0.0.1:{port}/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)


Replica = tuple[int, list[str], dict[str, str]]


def follow(lines: list[str], env: dict[str, str], database_url: str) -> list[Replica]:
    """Carry out the exports (into ``env``) and ``herald db migrate`` (asserting it
    succeeds); the ``herald run`` lines, each with a free port: (port, args, variables)."""
    replicas: list[Replica] = []
    migrated = False
    for line in lines:
        words = shlex.split(line.rstrip("&").strip())
        if words[0] == "export":
            name, _, value = words[1].partition("=")
            if name == "HERALD_DATABASE_URL":
                value = database_url
            elif value.startswith("$("):
                command = line.split("=", 1)[1][2:-1]
                value = subprocess.run(
                    command, shell=True, capture_output=True, text=True, check=True
                ).stdout.strip()
            env[name] = value
            continue
        assignments = {}
        while "=" in words[0]:
            name, _, value = words.pop(0).partition("=")
            assignments[name] = value
        assert words[0] == "herald", line
        if words[1:3] == ["db", "migrate"]:
            done = subprocess.run(
                [*HERALD, *words[1:]], env=env, cwd=ROOT, capture_output=True, text=True
            )
            assert done.returncode == 0, done.stdout + done.stderr
            migrated = True
            continue
        assert words[1] == "run", line
        port = free_port()
        replicas.append((port, words[1:], {**assignments, "HERALD_GATEWAY__PORT": str(port)}))
    assert migrated, "the README migrates the database first"
    return replicas


async def test_the_readmes_cluster_commands_start_two_replicas(tmp_path: Path, pg_url: str) -> None:
    env = clean_env(HOME=str(tmp_path))
    replicas = await asyncio.to_thread(follow, cluster_lines(), env, pg_url)
    assert len(replicas) == 2

    processes = []
    try:
        for _, args, assignments in replicas:
            process = await asyncio.create_subprocess_exec(
                *HERALD, *args, env={**env, **assignments}, cwd=ROOT,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            processes.append(process)
        for (port, _, _), process in zip(replicas, processes, strict=True):
            await ready(port, process)
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
            await process.wait()
