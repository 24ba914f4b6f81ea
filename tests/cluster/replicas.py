"""Several real ``herald run`` replicas on loopback: one PostgreSQL database, one state
directory, Slack in HTTP mode against the wire-level fake Slack.

Each replica is a subprocess with its own port and ``cluster.replicaId`` (set through the
environment, as ``systemd/herald@.service`` sets them); the config file is shared. The fake
Slack posts each event, signed, to one replica's ``/slack/events`` — the test picks which, as
a load balancer would. The model is the scripted one, its jobs answering after a delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import signal
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from tests.fakes.slack import BOT_TOKEN, BOT_USER_ID, SIGNING_SECRET, FakeSlack, Post
from tests.gateway.daemon_process import HANG_GUARD_SECONDS, HERALD, Daemon, clean_env, free_port

#: The channel every batch is asked in (each top-level mention starts a thread: a session).
CHANNEL = "C1"
#: Where an announce names the run's child session.
CHILD_KEY = re.compile(r"sessionKey (agent:main:subagent:[0-9a-f-]{36})")
#: Slack gives up on a request after this long and retries it (the same event id).
SLACK_TIMEOUT_SECONDS = 3.0
#: What a job's answer (and so its announce) carries: batch and job number.
RESULT = re.compile(r"result (\d+)-(\d+)")


def batch_script(batches: int, per_batch: int, *, job_seconds: float) -> dict[str, Any]:
    """The scripted model: ``batch N`` spawns ``per_batch`` jobs ``job N-J``; each job
    answers ``result N-J`` after ``job_seconds``; an announce repeats the job's answer."""
    rules: list[dict[str, Any]] = [{"match": r"^\[announce\]", "reply": "ANNOUNCE {lastAssistant}"}]
    for batch in range(batches):
        rules.append(
            {
                "match": f"batch {batch:02d}$",
                "reply": "",
                "toolCalls": [
                    {"name": "sessions_spawn", "arguments": {"task": f"job {batch:02d}-{j}"}}
                    for j in range(per_batch)
                ],
                "afterTool": f"spawned batch {batch:02d}",
            }
        )
    rules.append(
        {
            "match": r"^job (?P<b>\d+)-(?P<j>\d+)$",
            "reply": "result ${b}-${j}",
            "delaySeconds": job_seconds,
        }
    )
    return {"rules": rules, "default": {"reply": "?"}}


class Cluster:
    """Replicas ``0..n-1`` of one gateway; start them with :meth:`start_all`. A replica keeps
    its port and replica id across a kill and a restart."""

    def __init__(
        self,
        tmp_path: Path,
        *,
        database_url: str,
        slack: FakeSlack,
        script: dict[str, Any],
        replicas: int = 3,
        width: int = 8,
        config: dict[str, Any] | None = None,
        command: Sequence[str] = HERALD,
    ) -> None:
        #: ``herald``'s command line: :data:`QUICK_HERALD` where a test waits for a takeover.
        self.command = list(command)
        self.slack = slack
        self.state_dir = tmp_path / "state"
        self.ports = [free_port() for _ in range(replicas)]
        self.daemons: list[Daemon | None] = [None] * replicas
        self.rng = random.Random(17)
        script_path = tmp_path / "script.json"
        script_path.write_text(json.dumps(script), encoding="utf-8")
        data: dict[str, Any] = {
            "gateway": {"stateDir": str(self.state_dir), "shutdownDrainSeconds": 1},
            "agent": {"model": "t/m", "subagents": {"maxConcurrent": width}},
            "models": {
                "providers": {
                    "t": {"api": "scripted", "script": str(script_path), "models": [{"id": "m"}]}
                }
            },
            "channels": {
                "webchat": {"enabled": False},
                "slack": {
                    "enabled": True,
                    "mode": "http",
                    "botToken": BOT_TOKEN,
                    "signingSecret": SIGNING_SECRET,
                    "apiBaseUrl": slack.api_base_url,
                    # Replies are counted as whole posts; streaming has its own tests.
                    "streaming": "off",
                },
            },
            "cluster": {"databaseUrl": database_url},
        }
        for key, value in (config or {}).items():
            data[key] = {**data.get(key, {}), **value}
        self.config = tmp_path / "herald.json"
        self.config.write_text(json.dumps(data), encoding="utf-8")

    def __len__(self) -> int:
        return len(self.ports)

    def replica_id(self, index: int) -> str:
        return f"replica-{index}"

    def url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.ports[index]}"

    def live(self) -> list[int]:
        return [
            i for i, d in enumerate(self.daemons) if d is not None and d.process.returncode is None
        ]

    def daemon(self, index: int) -> Daemon:
        daemon = self.daemons[index]
        assert daemon is not None, f"replica {index} was never started"
        return daemon

    async def start(self, index: int) -> Daemon:
        env = clean_env(
            HERALD_GATEWAY__PORT=str(self.ports[index]),
            HERALD_CLUSTER__REPLICA_ID=self.replica_id(index),
        )
        process = await asyncio.create_subprocess_exec(
            *self.command,
            "run",
            "--config",
            str(self.config),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            cwd=Path(__file__).resolve().parents[2],
        )
        daemon = Daemon(process, self.ports[index])
        self.daemons[index] = daemon
        await self.wait_ready(index)
        return daemon

    async def start_all(self) -> None:
        # Together, as replicas under systemd start: migrations run once, under a lock.
        await asyncio.gather(*(self.start(i) for i in range(len(self))))

    async def kill(self, index: int) -> None:
        """``kill -9``: no drain, no goodbye to the database."""
        await self.daemon(index).kill()

    async def terminate(self, index: int) -> int:
        """``SIGTERM``, as systemd stops a unit: the replica drains and exits; its status."""
        daemon = self.daemon(index)
        daemon.process.send_signal(signal.SIGTERM)
        try:
            return await daemon.wait_exit()
        except TimeoutError:
            tail = "\n".join(daemon.raw[-60:])
            raise AssertionError(f"replica {index} did not stop; its log ends:\n{tail}") from None

    async def close(self) -> None:
        for daemon in self.daemons:
            if daemon is not None:
                await daemon.kill()

    async def probe(self, index: int) -> tuple[int, dict[str, Any]]:
        """``GET /readyz``: its status and body; ``(0, {})`` when the replica does not answer."""
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
                http.get(f"{self.url(index)}/readyz") as response,
            ):
                return response.status, await response.json()
        return 0, {}

    async def channel_states(self, index: int) -> dict[str, str]:
        """``/readyz``'s ``channelStates`` of a replica (connected, standby, disconnected)."""
        _, body = await self.probe(index)
        return {str(k): str(v) for k, v in body.get("channelStates", {}).items()}

    async def holder_of(self, channel: str) -> int:
        """The live replica holding ``channel``'s one connection (waiting until one does)."""
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            while True:
                for index in self.live():
                    if (await self.channel_states(index)).get(channel) == "connected":
                        return index
                await asyncio.sleep(0.2)

    async def readyz(self, index: int) -> int:
        """``GET /readyz``'s status; 0 when the replica does not answer at all."""
        status, _ = await self.probe(index)
        return status

    async def wait_ready(self, index: int, *, status: int = 200) -> None:
        daemon = self.daemon(index)
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            while await self.readyz(index) != status:
                if daemon.process.returncode is not None and status == 200:
                    raise AssertionError(f"replica {index} exited:\n" + "\n".join(daemon.raw))
                await asyncio.sleep(0.1)

    async def mention(self, text: str, *, to: int | None = None) -> tuple[str, int]:
        """A top-level ``@herald <text>`` in :data:`CHANNEL`, sent to replica ``to`` (a random
        live one by default); returns the message's ts (its thread) and the replica."""
        index = self.rng.choice(self.live()) if to is None else to
        event = self.slack.message(f"<@{BOT_USER_ID}> {text}", channel=CHANNEL)
        status = await self.slack.send_event(f"{self.url(index)}/slack/events", event)
        assert status == 200, f"replica {index} answered {status}"
        return str(event["ts"]), index

    async def balanced(self, event: dict[str, Any], *, first: int | None = None) -> int:
        """Send the signed ``event`` as a load balancer in front of the replicas would: to a
        live replica picked at random (``first``, when given, is picked first: one the
        balancer does not know is stopping), and again to another (as Slack's retry of the
        same event id) when the one picked refuses the connection, answers an error or does
        not answer within Slack's timeout (it is stopping); the replica that answered 200."""
        event_id = f"Ev{uuid.uuid4().hex[:10].upper()}"
        tries = 0
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            while True:
                index = first if first is not None and not tries else self.rng.choice(self.live())
                url = f"{self.url(index)}/slack/events"
                retry = tries or None
                tries += 1
                try:
                    async with asyncio.timeout(SLACK_TIMEOUT_SECONDS):
                        status = await self.slack.send_event(
                            url, event, event_id=event_id, retry_num=retry
                        )
                except (aiohttp.ClientConnectionError, TimeoutError):
                    status = 0
                if status == 200:
                    return index
                await asyncio.sleep(0.05)

    async def reply_in_thread(self, thread_ts: str, text: str, *, to: int) -> None:
        event = self.slack.message(f"<@{BOT_USER_ID}> {text}", channel=CHANNEL, thread_ts=thread_ts)
        status = await self.slack.send_event(f"{self.url(to)}/slack/events", event)
        assert status == 200, f"replica {to} answered {status}"


def announces(posts: list[Post]) -> Counter[str]:
    """Announces Slack received, by the child session they name."""
    return Counter(m.group(1) for p in posts if (m := CHILD_KEY.search(p.text)))


def results_by_thread(posts: list[Post]) -> dict[tuple[int, int], list[str | None]]:
    """Each announced job (batch, job) → the threads its announces were posted in."""
    found: dict[tuple[int, int], list[str | None]] = {}
    for post in posts:
        if CHILD_KEY.search(post.text) and (m := RESULT.search(post.text)):
            found.setdefault((int(m.group(1)), int(m.group(2))), []).append(post.thread_ts)
    return found


@contextlib.asynccontextmanager
async def running_cluster(tmp_path: Path, **options: Any) -> AsyncIterator[Cluster]:
    cluster = Cluster(tmp_path, **options)
    try:
        await cluster.start_all()
        yield cluster
    finally:
        await cluster.close()
