"""``herald doctor`` against real files, a real state database and wire-level fakes."""

from __future__ import annotations

import argparse
import os
import socket
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from gateway.commands.doctor import Finding, add_commands, diagnose
from gateway.constants import STATE_DB_NAME
from gateway.state import SqliteStateDB
from gateway.state.postgres import PgStateDB
from gateway.state.schema import LATEST_VERSION
from tests.fakes.discord import DEFAULT_TOKEN as DISCORD_TOKEN
from tests.fakes.discord import FakeDiscord
from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET, FakeSlack
from tests.gateway.harness import merge

OPENAI_KEY = "sk-doctor-openai-key-0123456789"
ANTHROPIC_KEY = "sk-ant-doctor-key-0123456789"
WRONG_KEY = "sk-wrong-key-that-must-not-print-42"


class ModelsAPI:
    """``GET /v1/models`` as OpenAI (under ``/openai``) and Anthropic (under ``/anthropic``)
    answer it, keys checked the way each does; the OpenAI 401 echoes the key it was given,
    the worst case for a doctor that must never print one."""

    def __init__(self, *, openai_models: tuple[str, ...] = ("gpt-4o-mini",)) -> None:
        self.openai_models = openai_models
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._runner: web.AppRunner | None = None
        self.root = ""

    async def _openai(self, request: web.Request) -> web.Response:
        self.requests.append((request.path, dict(request.headers)))
        auth = request.headers.get("Authorization", "")
        if auth != f"Bearer {OPENAI_KEY}":
            given = auth.removeprefix("Bearer ")
            error = {
                "message": f"Incorrect API key provided: {given}.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key",
            }
            return web.json_response({"error": error}, status=401)
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "x"} for m in self.openai_models
        ]
        return web.json_response({"object": "list", "data": data})

    async def _anthropic(self, request: web.Request) -> web.Response:
        self.requests.append((request.path, dict(request.headers)))
        if request.headers.get("x-api-key") != ANTHROPIC_KEY:
            error = {"type": "authentication_error", "message": "invalid x-api-key"}
            return web.json_response({"type": "error", "error": error}, status=401)
        if not request.headers.get("anthropic-version"):
            error = {"type": "invalid_request_error", "message": "anthropic-version required"}
            return web.json_response({"type": "error", "error": error}, status=400)
        model = {"type": "model", "id": "claude-sonnet-4-5", "display_name": "Claude"}
        return web.json_response({"data": [model], "has_more": False})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/openai/v1/models", self._openai)
        app.router.add_get("/anthropic/v1/models", self._anthropic)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.root = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@asynccontextmanager
async def models_api(**kwargs: Any) -> AsyncIterator[ModelsAPI]:
    api = ModelsAPI(**kwargs)
    await api.start()
    try:
        yield api
    finally:
        await api.close()


@asynccontextmanager
async def fake_slack() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()


def write_config(tmp_path: Path, extra: dict[str, Any] | None = None) -> Path:
    data: dict[str, Any] = {
        "gateway": {"stateDir": str(tmp_path / "state")},
        "channels": {"webchat": {"enabled": False}},
    }
    path = tmp_path / "herald.json"
    path.write_bytes(orjson.dumps(merge(data, extra or {})))
    return path


def providers(**entries: dict[str, Any]) -> dict[str, Any]:
    """A config whose agents use the first provider given (its first model)."""
    first, entry = next(iter(entries.items()))
    model = entry["models"][0]["id"]
    return {"agent": {"model": f"{first}/{model}"}, "models": {"providers": entries}}


async def run(tmp_path: Path, extra: dict[str, Any] | None = None) -> list[Finding]:
    return await diagnose(str(write_config(tmp_path, extra)), environ={}, request_seconds=5)


def about(findings: list[Finding], subject: str) -> Finding:
    (found,) = [f for f in findings if f.subject == subject]
    return found


def printed(findings: list[Finding]) -> str:
    return "\n".join(f.render() for f in findings)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def doctor(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="herald")
    add_commands(parser.add_subparsers())
    args = parser.parse_args(["doctor", *argv])
    status: int = args.func(args)
    return status


# -- the command --------------------------------------------------------------------------


def test_a_healthy_setup_prints_ok_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert doctor(["--config", str(write_config(tmp_path))]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("ok    config: loads (")
    assert all(line.startswith("ok ") for line in lines), out
    assert any(line.startswith("ok    provider demo: scripted rules load") for line in lines)
    assert any(line.startswith(f"ok    state dir {tmp_path / 'state'}") for line in lines)


def test_a_config_that_does_not_load_fails_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(tmp_path, {"agent": {"maxConcurent": 2}})
    assert doctor(["--config", str(path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL  config: does not load:")
    assert "agent.maxConcurent" in out
    assert "maxConcurrent" in out  # the did-you-mean
    assert "fix: " in out


# -- local checks -------------------------------------------------------------------------


async def test_unknown_tool_names_are_a_warning(tmp_path: Path) -> None:
    findings = await run(tmp_path, {"agent": {"tools": {"deny": ["exce"]}}})
    tools = about(findings, "tools")
    assert tools.level == "warn"
    assert "agent.tools" in tools.message
    assert "'exce'" in tools.message
    assert all(f.level != "FAIL" for f in findings)


async def test_a_state_dir_open_to_others_is_a_warning(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    finding = about(await run(tmp_path), f"state dir {state}")
    assert finding.level == "warn"
    assert "0755" in finding.message
    assert finding.fix == f"chmod 700 {state}"


async def test_a_state_dir_that_is_a_file_fails(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("not a directory")
    finding = about(await run(tmp_path), f"state dir {tmp_path / 'state'}")
    assert finding.level == "FAIL"
    assert "not a directory" in finding.message


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a directory away")
async def test_a_state_dir_owned_by_someone_else_fails(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.chown(state, 4242, -1)
    finding = about(await run(tmp_path), f"state dir {state}")
    assert finding.level == "FAIL"
    assert "uid 4242" in finding.message
    assert finding.fix is not None
    assert "chown" in finding.fix


async def test_the_state_database_schema_is_checked(tmp_path: Path) -> None:
    state = tmp_path / "state"
    db = await SqliteStateDB.open(state / STATE_DB_NAME)
    await db.close()
    subject = f"state db {STATE_DB_NAME}"
    ok = about(await run(tmp_path), subject)
    assert ok.level == "ok"
    assert f"schema version {LATEST_VERSION}" in ok.message

    with sqlite3.connect(state / STATE_DB_NAME) as conn:
        conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (99, 0)")
    conn.close()
    newer = about(await run(tmp_path), subject)
    assert newer.level == "FAIL"
    assert "schema version 99 is newer" in newer.message


async def test_a_database_that_is_not_sqlite_fails(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / STATE_DB_NAME).write_bytes(b"this is not a database file" * 100)
    finding = about(await run(tmp_path), f"state db {STATE_DB_NAME}")
    assert finding.level == "FAIL"
    assert "cannot be read" in finding.message


async def test_a_broken_rules_file_fails(tmp_path: Path) -> None:
    (tmp_path / "rules.json5").write_text("{rules: [{match: '('}]}")
    findings = await run(
        tmp_path,
        providers(demo={"api": "scripted", "script": "rules.json5", "models": [{"id": "m"}]}),
    )
    finding = about(findings, "provider demo")
    assert finding.level == "FAIL"
    assert "rules.json5" in finding.message


# -- providers ----------------------------------------------------------------------------


def openai(
    api: ModelsAPI, key: str | None, models: tuple[str, ...] = ("gpt-4o-mini",)
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "api": "openai-completions",
        "baseUrl": f"{api.root}/openai/v1",
        "models": [{"id": m} for m in models],
    }
    if key is not None:
        entry["apiKey"] = key
    return entry


def anthropic(api: ModelsAPI, key: str) -> dict[str, Any]:
    return {
        "api": "anthropic-messages",
        "baseUrl": f"{api.root}/anthropic",
        "apiKey": key,
        "models": [{"id": "claude-sonnet-4-5"}],
    }


async def test_providers_with_good_keys_are_ok(tmp_path: Path) -> None:
    async with models_api() as api:
        findings = await run(
            tmp_path,
            {
                "agent": {
                    "model": "oa/gpt-4o-mini",
                    "subagents": {"model": "an/claude-sonnet-4-5"},
                },
                "models": {
                    "providers": {
                        "oa": openai(api, OPENAI_KEY),
                        "an": anthropic(api, ANTHROPIC_KEY),
                    }
                },
            },
        )
    assert about(findings, "provider oa").level == "ok"
    assert about(findings, "provider an").level == "ok"
    paths = sorted(path for path, _ in api.requests)
    assert paths == ["/anthropic/v1/models", "/openai/v1/models"]
    (anthropic_headers,) = [h for p, h in api.requests if p.startswith("/anthropic")]
    assert anthropic_headers["anthropic-version"]


async def test_a_refused_key_fails_without_printing_it(tmp_path: Path) -> None:
    async with models_api() as api:
        findings = await run(
            tmp_path,
            {
                "agent": {
                    "model": "oa/gpt-4o-mini",
                    "subagents": {"model": "an/claude-sonnet-4-5"},
                },
                "models": {
                    "providers": {"oa": openai(api, WRONG_KEY), "an": anthropic(api, WRONG_KEY)}
                },
            },
        )
    for name in ("oa", "an"):
        finding = about(findings, f"provider {name}")
        assert finding.level == "FAIL"
        assert "API key was refused (HTTP 401" in finding.message
        assert finding.fix is not None
        assert f"models.providers.{name}.apiKey" in finding.fix
    assert "Incorrect API key provided: ***" in about(findings, "provider oa").message
    assert WRONG_KEY not in printed(findings)


async def test_the_official_api_without_a_key_fails_before_any_call(tmp_path: Path) -> None:
    findings = await run(
        tmp_path, providers(openai={"api": "openai-completions", "models": [{"id": "m"}]})
    )
    finding = about(findings, "provider openai")
    assert finding.level == "FAIL"
    assert "no API key" in finding.message
    assert finding.fix is not None
    assert "OPENAI_API_KEY" in finding.fix


async def test_an_unreachable_provider_fails(tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{free_port()}/v1"
    findings = await run(
        tmp_path,
        providers(local={"api": "openai-completions", "baseUrl": base, "models": [{"id": "m"}]}),
    )
    finding = about(findings, "provider local")
    assert finding.level == "FAIL"
    assert f"cannot reach {base}/models" in finding.message


async def test_a_model_the_provider_does_not_list_is_a_warning(tmp_path: Path) -> None:
    async with models_api() as api:
        findings = await run(
            tmp_path, providers(oa=openai(api, OPENAI_KEY, models=("m", "gpt-4o-mini")))
        )
    finding = about(findings, "provider oa")
    assert finding.level == "warn"
    assert "m not among the models" in finding.message


async def test_a_server_without_a_models_list_is_a_warning(tmp_path: Path) -> None:
    async with models_api() as api:
        entry = openai(api, None)
        entry["baseUrl"] = f"{api.root}/elsewhere/v1"
        findings = await run(tmp_path, providers(oa=entry))
    finding = about(findings, "provider oa")
    assert finding.level == "warn"
    assert "answered 404" in finding.message


async def test_a_provider_no_agent_uses_only_warns(tmp_path: Path) -> None:
    async with models_api() as api:
        demo = {"api": "scripted", "models": [{"id": "scripted"}]}
        findings = await run(
            tmp_path, {"models": {"providers": {"demo": demo, "spare": openai(api, WRONG_KEY)}}}
        )
    finding = about(findings, "provider spare")
    assert finding.level == "warn"
    assert "no agent uses it" in finding.message
    assert "API key was refused" in finding.message
    assert about(findings, "provider demo").level == "ok"
    assert WRONG_KEY not in printed(findings)


# -- chat tokens --------------------------------------------------------------------------


def slack(fake: FakeSlack, token: str) -> dict[str, Any]:
    return {
        "channels": {
            "slack": {
                "enabled": True,
                "botToken": token,
                "appToken": APP_TOKEN,
                "signingSecret": SIGNING_SECRET,
                "apiBaseUrl": fake.api_base_url,
            }
        }
    }


def discord(fake: FakeDiscord, token: str) -> dict[str, Any]:
    return {
        "channels": {"discord": {"enabled": True, "token": token, "apiBaseUrl": fake.api_base_url}}
    }


async def test_chat_tokens_are_checked_against_slack_and_discord(tmp_path: Path) -> None:
    async with fake_slack() as slack_api, FakeDiscord() as discord_api:
        findings = await run(
            tmp_path, merge(slack(slack_api, BOT_TOKEN), discord(discord_api, DISCORD_TOKEN))
        )
    assert [c.method for c in slack_api.calls] == ["auth.test"]
    assert [(r.method, r.path) for r in discord_api.requests] == [("GET", "/users/@me")]
    slack_finding = about(findings, "slack")
    assert slack_finding.level == "ok"
    assert "@herald in Fake" in slack_finding.message
    discord_finding = about(findings, "discord")
    assert discord_finding.level == "ok"
    assert "@herald" in discord_finding.message


async def test_refused_chat_tokens_fail_without_printing_them(tmp_path: Path) -> None:
    async with fake_slack() as slack_api, FakeDiscord() as discord_api:
        findings = await run(
            tmp_path, merge(slack(slack_api, WRONG_KEY), discord(discord_api, WRONG_KEY))
        )
    slack_finding = about(findings, "slack")
    assert slack_finding.level == "FAIL"
    assert "invalid_auth" in slack_finding.message
    discord_finding = about(findings, "discord")
    assert discord_finding.level == "FAIL"
    assert "HTTP 401" in discord_finding.message
    assert WRONG_KEY not in printed(findings)


async def test_a_slack_api_root_without_its_slash_fails_before_any_call(tmp_path: Path) -> None:
    async with fake_slack() as slack_api:
        config = slack(slack_api, BOT_TOKEN)
        config["channels"]["slack"]["apiBaseUrl"] = slack_api.api_base_url.rstrip("/")
        findings = await run(tmp_path, config)
    finding = about(findings, "slack")
    assert finding.level == "FAIL"
    assert "does not end with '/'" in finding.message
    assert slack_api.calls == []


async def test_a_chat_service_answering_without_a_verdict_only_warns(tmp_path: Path) -> None:
    async with fake_slack() as slack_api:
        slack_api.fail("auth.test", status=503)
        findings = await run(tmp_path, slack(slack_api, BOT_TOKEN))
    finding = about(findings, "slack")
    assert finding.level == "warn"
    assert "HTTP 503" in finding.message
    assert all(f.level != "FAIL" for f in findings)


@pytest.mark.postgres
async def test_the_postgresql_database_is_checked(tmp_path: Path, pg_url: str) -> None:
    cluster = {"cluster": {"databaseUrl": pg_url}}
    fresh = about(await run(tmp_path, cluster), "state database")
    assert fresh.level == "ok"
    assert "`herald run` creates the schema" in fresh.message
    db = await PgStateDB.connect(pg_url, replica_id="doctor", state_dir=tmp_path)
    await db.close()
    findings = await run(tmp_path, cluster)
    current = about(findings, "state database")
    assert (current.level, f"schema version {LATEST_VERSION}" in current.message) == ("ok", True)
    # The state lives in PostgreSQL: no SQLite file is looked for.
    assert not [f for f in findings if f.subject == f"state db {STATE_DB_NAME}"]


async def test_an_unreachable_postgresql_database_fails_without_its_password(
    tmp_path: Path,
) -> None:
    url = f"postgresql://herald:pw-doctor-secret@127.0.0.1:{free_port()}/herald"
    findings = await run(tmp_path, {"cluster": {"databaseUrl": url}})
    finding = about(findings, "state database")
    assert finding.level == "FAIL"
    assert "cannot be reached" in finding.message
    assert "pw-doctor-secret" not in printed(findings)


async def test_doctor_reports_the_sandbox_and_what_holds_each_limit() -> None:
    from gateway.commands.doctor import check_sandbox
    from gateway.settings import HeraldSettings

    allowed = HeraldSettings.model_validate({"agent": {"tools": {"allow": ["*", "exec"]}}})
    sandbox, limits = await check_sandbox(allowed)
    assert (sandbox.level, sandbox.subject) == ("ok", "sandbox")
    assert "bubblewrap runs commands; network: its own, loopback only" in sandbox.message
    assert "memory 1024 MiB by RLIMIT_AS" in limits.message
    assert "CPU 120 s by RLIMIT_CPU" in limits.message
    assert "files 1024 MiB by RLIMIT_FSIZE" in limits.message
    assert "(/tmp and /dev/shm together by their tmpfs sizes)" in limits.message
    assert "workspace 2048 MiB, checked before each command" in limits.message
    # Which one holds the process limit depends on the machine; it is named either way.
    mechanisms = ("pids cgroup", "RLIMIT_NPROC", "nothing: root ignores RLIMIT_NPROC")
    assert any(f"256 processes by {m}" in limits.message for m in mechanisms), limits
    assert (limits.level == "warn") == ("by nothing" in limits.message)

    unlimited = HeraldSettings.model_validate(
        {"agent": {"tools": {"allow": ["*", "exec"], "exec": {"sandbox": {"maxWorkspaceMb": 0}}}}}
    )
    _, limits = await check_sandbox(unlimited)
    assert "workspace: no limit" in limits.message

    off = HeraldSettings.model_validate(
        {"agent": {"tools": {"allow": ["*", "exec"], "exec": {"sandbox": {"mode": "off"}}}}}
    )
    (warning,) = await check_sandbox(off)
    assert warning.level == "warn"
    assert "can read the state database, the config file and every workspace" in warning.message
