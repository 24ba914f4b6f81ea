"""Secrets never reach logs, transcripts, the state database, chats or HTTP answers.

A real ``herald run`` (debug logging, so every library's chatter is in the log too) holds
distinctive secrets, passed the way an operator would, through the environment: the
gateway token, an OpenAI API key (the provider points at the OpenAI fake), the Slack bot
token and signing secret (HTTP mode, the Slack fake) and a Discord token (the Discord
fake). Chat turns go through the web chat (token in ``?token=``), Slack and Discord; the
provider fails twice by echoing the key back in its error body, as real providers do
("Incorrect API key provided: sk-…"); a sub-agent run fails that way and another
succeeds; the API is asked for everything and sent bad requests. Then every log line,
every byte under the state directory, every HTTP answer, every chat message and the
read-only CLI's output are searched for each secret and its first 12 characters.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.config import load_settings
from gateway.llm import ChatMessage, ModelRequest
from gateway.providers import ProviderError, ProviderRegistry
from tests.fakes.discord import FakeDiscord, user_payload
from tests.fakes.openai import FakeOpenAI, openai_server
from tests.fakes.slack import BOT_TOKEN, SIGNING_SECRET, FakeSlack
from tests.gateway.daemon_process import Daemon, clean_env, free_port, herald, write_config
from tests.security.support import SECRET_PREFIX_CHARS, find_secrets, state_files

GATEWAY_TOKEN = "hgw-3b9f1c7e52a84d06aa19"
OPENAI_KEY = "sk-hrld-7d2e9a4c1b8f6035e2f1"
DISCORD_TOKEN = "hdc.MTEwMDAwMDA.Gx7Yq2-9a61e0c9d4b3"
SECRETS = (GATEWAY_TOKEN, OPENAI_KEY, DISCORD_TOKEN, BOT_TOKEN, SIGNING_SECRET)
MODEL = "gpt-4o-mini"
DM_CHANNEL = "1300000000000000010"
ALICE = user_payload("1400000000000000001", "alice")
#: Guard against a hung test; never an assertion about speed.
GUARD_SECONDS = 30
ECHO = (
    f"Incorrect API key provided: {OPENAI_KEY}. You can find your API key at "
    "https://platform.openai.com/account/api-keys."
)


def config_data(
    port: int, state: Path, openai: FakeOpenAI, slack: FakeSlack, discord: FakeDiscord
) -> dict[str, Any]:
    return {
        "gateway": {
            "port": port,
            "stateDir": str(state),
            "shutdownDrainSeconds": 1,
            "logLevel": "debug",
            "auth": {"token": "${HERALD_TOKEN}"},
        },
        "agent": {"model": f"oa/{MODEL}"},
        "models": {
            "providers": {
                "oa": {
                    "api": "openai-completions",
                    "baseUrl": openai.base_url,
                    "apiKey": "${OPENAI_API_KEY}",
                    "maxRetries": 0,
                    "models": [{"id": MODEL, "cost": {"input": 0.15, "output": 0.6}}],
                }
            }
        },
        "channels": {
            "webchat": {"enabled": True},
            "slack": {
                "enabled": True,
                "mode": "http",
                "botToken": "${SLACK_BOT_TOKEN}",
                "signingSecret": "${SLACK_SIGNING_SECRET}",
                "apiBaseUrl": slack.api_base_url,
            },
            "discord": {
                "enabled": True,
                "token": "${DISCORD_TOKEN}",
                "apiBaseUrl": discord.api_base_url,
                "gatewayUrl": discord.gateway_url,
            },
        },
    }


def secret_env() -> dict[str, str]:
    return clean_env(
        HERALD_TOKEN=GATEWAY_TOKEN,
        OPENAI_API_KEY=OPENAI_KEY,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        DISCORD_TOKEN=DISCORD_TOKEN,
    )


class Collector:
    """Every HTTP answer and chat frame the test saw, by a name for the report."""

    def __init__(self, daemon: Daemon, http: aiohttp.ClientSession) -> None:
        self.daemon = daemon
        self.http = http
        self.seen: dict[str, bytes] = {}

    async def request(
        self, method: str, path: str, *, token: str | None = GATEWAY_TOKEN, **kwargs: Any
    ) -> tuple[int, bytes]:
        headers = dict(kwargs.pop("headers", {}))
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        async with self.http.request(
            method, self.daemon.url + path, headers=headers, **kwargs
        ) as r:
            body = await r.read()
        self.seen[f"http {method} {path} -> {r.status}"] = body
        return r.status, body


@contextlib.asynccontextmanager
async def fakes() -> AsyncIterator[tuple[FakeOpenAI, FakeSlack, FakeDiscord]]:
    slack = FakeSlack(channels={"D1"})
    await slack.start()
    try:
        async with (
            openai_server(api_key=OPENAI_KEY, model=MODEL) as openai,
            FakeDiscord(token=DISCORD_TOKEN) as discord,
        ):
            yield openai, slack, discord
    finally:
        await slack.close()


async def until(check: Any) -> None:
    async with asyncio.timeout(GUARD_SECONDS):
        while not check():  # noqa: ASYNC110 - the daemon is another process
            await asyncio.sleep(0.02)


async def next_message(
    ws: aiohttp.ClientWebSocketResponse, kind: str, frames: list[str]
) -> dict[str, Any]:
    async with asyncio.timeout(GUARD_SECONDS):
        while True:
            raw = await ws.receive_str()
            frames.append(raw)
            frame: dict[str, Any] = json.loads(raw)
            if frame.get("type") == "message" and frame.get("kind") == kind:
                return frame


async def slack_dm(col: Collector, slack: FakeSlack, text: str, event_id: str) -> None:
    event = slack.message(text, channel="D1", user="U1")
    body = json.dumps(slack.event_callback(event, event_id=event_id)).encode()
    headers = {"Content-Type": "application/json", **FakeSlack.sign(body)}
    status, _ = await col.request("POST", "/slack/events", token=None, data=body, headers=headers)
    assert status == 200


async def cli(*args: str, env: dict[str, str]) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    async with asyncio.timeout(GUARD_SECONDS):
        out, _ = await process.communicate()
    return out.decode(errors="replace")


async def test_no_secret_leaves_the_gateway(tmp_path: Path) -> None:
    state = tmp_path / "state"
    port = free_port()
    env = secret_env()
    frames: list[str] = []
    async with fakes() as (openai, slack, discord):
        config = write_config(
            tmp_path / "herald.json", config_data(port, state, openai, slack, discord)
        )
        async with (
            herald("run", "--config", str(config), port=port, env=env) as daemon,
            aiohttp.ClientSession() as http,
        ):
            await daemon.wait_healthy()
            col = Collector(daemon, http)
            await until(lambda: any(r.get("msg") == "gateway serving" for r in daemon.logs))
            assert (await col.request("GET", "/readyz", token=None))[0] == 200

            ws_url = daemon.url.replace("http", "ws") + f"/webchat/ws?token={GATEWAY_TOKEN}"
            async with http.ws_connect(ws_url) as ws:
                await ws.send_json({"type": "hello", "clientId": "secrets-client"})
                # 1. A web chat turn.
                openai.reply_text("hi from the model")
                await ws.send_json({"type": "message", "text": "hello"})
                assert (await next_message(ws, "reply", frames))["text"] == "hi from the model"
                # 2. A Slack turn, then one whose model call fails echoing the key.
                openai.reply_text("hi on slack")
                await slack_dm(col, slack, "hello slack", "EvS1")
                await slack.wait_posts(1)
                openai.reply_error(401, ECHO, kind="invalid_request_error", code="invalid_api_key")
                await slack_dm(col, slack, "fail now", "EvS2")
                posts = await slack.wait_posts(2)
                assert "model call failed" in posts[1].text
                # 3. A Discord turn.
                openai.reply_text("hi on discord")
                await discord.post_message(
                    channel_id=DM_CHANNEL, author=ALICE, content="hello discord"
                )
                await until(lambda: DM_CHANNEL in discord.posted)
                # 4. A spawn whose run and announce turn both fail with the key echoed back.
                openai.reply_error(401, ECHO, kind="invalid_request_error", code="invalid_api_key")
                openai.reply_raw(
                    f"upstream said: {ECHO}".encode(), status=500, content_type="text/plain"
                )
                key = "agent:main:webchat:secrets-client"
                spawn = {
                    "tool": "sessions_spawn",
                    "args": {"task": "fail", "label": "bad"},
                    "sessionKey": key,
                }
                status, body = await col.request("POST", "/v1/tools/invoke", json=spawn)
                assert status == 200, body
                failed_run = orjson.loads(body)["result"]["runId"]
                assert "Stats: runtime" in (await next_message(ws, "announce", frames))["text"]
                # 5. A spawn that succeeds.
                openai.reply_text("child result")
                openai.reply_text("announce: child result")
                spawn["args"] = {"task": "work", "label": "good"}
                status, body = await col.request("POST", "/v1/tools/invoke", json=spawn)
                assert status == 200, body
                assert "child result" in (await next_message(ws, "announce", frames))["text"]

            # 6. Everything the API tells, and its error answers.
            _, runs = await col.request("GET", "/v1/runs?limit=10")
            assert {r["status"] for r in orjson.loads(runs)["runs"]} == {"error", "done"}
            assert (await col.request("GET", f"/v1/runs/{failed_run}"))[0] == 200
            _, listed = await col.request("GET", "/v1/sessions?includeSubagents=true")
            for session in orjson.loads(listed)["sessions"]:
                await col.request(
                    "GET", f"/v1/sessions/{session['key']}/history?includeTools=true&limit=1000"
                )
                await col.request("GET", f"/v1/sessions/{session['key']}/transcript")
            for path in ("/openapi.json", "/metrics", "/v1/runs/nope", "/v1/sessions/bad/history"):
                await col.request("GET", path)
            for token in (None, "wrong", GATEWAY_TOKEN[:-1] + "x"):
                assert (await col.request("GET", "/v1/runs", token=token))[0] == 401
            await col.request("GET", f"/v1/runs?token={GATEWAY_TOKEN[:-1]}", token=None)
            await col.request("POST", "/v1/tools/invoke", data=b"{broken")
            await col.request(
                "POST", "/v1/tools/invoke", json={"tool": "read", "args": {"path": "/etc/passwd"}}
            )
            await col.request(
                "POST", "/v1/tools/invoke", json={"tool": "exec", "args": {"command": "env"}}
            )
            forged = b'{"type": "event_callback"}'
            await col.request(
                "POST",
                "/slack/events",
                token=None,
                data=forged,
                headers=FakeSlack.sign(forged, secret="x" * 20),
            )
            await col.request("POST", "/slack/events", token=None, data=forged)

            daemon.process.send_signal(signal.SIGTERM)
            assert await daemon.wait_exit() == 0

        outputs = {
            "herald config show": await cli("config", "show", "--config", str(config), env=env),
            "herald runs show": await cli(
                "runs", "show", failed_run, "--config", str(config), env=env
            ),
            "herald sessions list": await cli(
                "sessions", "list", "--all", "--json", "--config", str(config), env=env
            ),
        }
        chats: dict[str, bytes | str] = {
            "webchat frames": "\n".join(frames),
            "slack posts": "\n".join(p.text for p in slack.posts),
            "discord posts": orjson.dumps(discord.posted),
        }
    assert any("oa/gpt-4o-mini: HTTP 401" in line for line in daemon.raw)  # the failure was logged
    haystacks: dict[str, bytes | str] = {
        "daemon stdout": "\n".join(daemon.raw),
        **state_files(state),
        **col.seen,
        **chats,
        **outputs,
    }
    assert any(name.endswith(".jsonl") for name in haystacks)
    assert find_secrets(haystacks, SECRETS) == []


async def test_a_key_cut_by_the_error_excerpt_is_still_masked(tmp_path: Path) -> None:
    async with openai_server(api_key=OPENAI_KEY, model=MODEL) as fake:
        config = write_config(
            tmp_path / "herald.json",
            {
                "agent": {"model": f"oa/{MODEL}"},
                "models": {
                    "providers": {
                        "oa": {
                            "api": "openai-completions",
                            "baseUrl": fake.base_url,
                            "apiKey": OPENAI_KEY,
                            "maxRetries": 0,
                            "models": [{"id": MODEL}],
                        }
                    }
                },
            },
        )
        settings = load_settings(str(config), environ={}).settings
        registry = ProviderRegistry(settings.models.providers, config_dir=tmp_path)
        try:
            provider, _ = registry.resolve(f"oa/{MODEL}")
            head, tail = "<html><body><h1>502 Bad Gateway</h1><pre>", "Authorization: Bearer "
            # The key starts 12 characters before the 200-character excerpt ends.
            page = head + "." * (200 - SECRET_PREFIX_CHARS - len(head) - len(tail)) + tail
            fake.reply_raw(
                (page + OPENAI_KEY + "</pre></body></html>").encode(),
                status=502,
                content_type="text/html",
            )
            request = ModelRequest(
                model=MODEL, system="s", messages=(ChatMessage(role="user", content="hi"),)
            )
            with pytest.raises(ProviderError) as caught:
                await provider.complete(request)
        finally:
            await registry.close()
    assert len(page) < 200 < len(page) + len(OPENAI_KEY)  # the key straddles the cut
    assert OPENAI_KEY[:SECRET_PREFIX_CHARS] not in str(caught.value)


async def run_exec(daemon: Daemon, command: str) -> str:
    body = {"tool": "exec", "args": {"command": command}}
    headers = {"Authorization": f"Bearer {GATEWAY_TOKEN}"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{daemon.url}/v1/tools/invoke", json=body, headers=headers) as response,
    ):
        answer = await response.json()
    assert response.status == 200, answer
    output: str = answer["result"]["output"]
    return output


async def test_exec_gets_no_configured_secret_in_its_environment(tmp_path: Path) -> None:
    port = free_port()
    async with openai_server(api_key=OPENAI_KEY, model=MODEL) as openai:
        data = {
            "gateway": {
                "port": port,
                "stateDir": str(tmp_path / "state"),
                "auth": {"token": GATEWAY_TOKEN},
            },
            "agent": {"model": f"oa/{MODEL}", "tools": {"allow": ["*", "exec"]}},
            "models": {
                "providers": {
                    "oa": {
                        "api": "openai-completions",
                        "baseUrl": openai.base_url,
                        "apiKey": "${OPENAI_APIKEY}",
                        "models": [{"id": MODEL}],
                    }
                }
            },
            "channels": {"webchat": {"enabled": False}},
        }
        config = write_config(tmp_path / "herald.json", data)
        env = clean_env(OPENAI_APIKEY=OPENAI_KEY)
        async with herald("run", "--config", str(config), port=port, env=env) as daemon:
            await daemon.wait_healthy()
            output = await run_exec(daemon, "env")
    assert "PATH=" in output
    assert find_secrets({"exec env": output}, [OPENAI_KEY]) == []


async def exec_daemon_outputs(tmp_path: Path, *commands: str, sandbox: str = "auto") -> list[str]:
    """The outputs of ``commands`` run by ``exec`` in a daemon started with secrets in its
    environment (the way systemd's EnvironmentFile hands them over); ``{pid}`` in a command
    is the daemon's process id."""
    port = free_port()
    tmp_path.mkdir(exist_ok=True)
    data = {
        "gateway": {
            "port": port,
            "stateDir": str(tmp_path / "state"),
            "auth": {"token": "${HERALD_TOKEN}"},
        },
        "agent": {"tools": {"allow": ["*", "exec"], "exec": {"sandbox": {"mode": sandbox}}}},
        "channels": {"webchat": {"enabled": False}},
    }
    config = write_config(tmp_path / "herald.json", data)
    env = clean_env(HERALD_TOKEN=GATEWAY_TOKEN, OPENAI_API_KEY=OPENAI_KEY)
    async with herald("run", "--config", str(config), port=port, env=env) as daemon:
        await daemon.wait_healthy()
        pid = daemon.process.pid
        return [await run_exec(daemon, command.format(pid=pid)) for command in commands]


async def test_exec_gets_no_secret_of_the_daemons_environment(tmp_path: Path) -> None:
    (scrubbed,) = await exec_daemon_outputs(tmp_path, "env")
    assert "PATH=" in scrubbed
    assert find_secrets({"exec env": scrubbed}, [GATEWAY_TOKEN, OPENAI_KEY]) == []


#: The daemon's environment and command line, as a command would read them from /proc.
READ_PROC = "tr '\\0' '\\n' < /proc/{pid}/environ; echo; tr '\\0' ' ' < /proc/{pid}/cmdline"


async def test_exec_cannot_read_the_gateways_environment(tmp_path: Path) -> None:
    # The control, without the sandbox: the command reaches the daemon's /proc entry (its
    # command line), and as root, which reads every /proc entry, its secrets too.
    (unsandboxed,) = await exec_daemon_outputs(tmp_path / "off", READ_PROC, sandbox="off")
    assert "gateway run" in unsandboxed, unsandboxed
    leaked = find_secrets({"/proc/<pid>/environ": unsandboxed}, [GATEWAY_TOKEN, OPENAI_KEY])
    # Unprivileged, PR_SET_DUMPABLE=0 makes the daemon's environ root's to read.
    assert bool(leaked) == (os.geteuid() == 0), leaked

    (sandboxed,) = await exec_daemon_outputs(tmp_path / "on", READ_PROC)
    assert "gateway run" not in sandboxed, sandboxed  # its /proc has no such process
    assert find_secrets({"/proc/<pid>/environ": sandboxed}, [GATEWAY_TOKEN, OPENAI_KEY]) == []
