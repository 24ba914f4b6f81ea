"""``herald doctor``: find what would stop the gateway from working, and say how to fix it.

Checks, in order: the configuration loads; tool policies name known tools; the state
directory exists (or can be created), is ours, private and writable, and its database opens
read-only with a schema this Herald knows; each model provider is usable (a scripted
provider's rules file loads; an HTTP provider has its key and answers one cheap, free
request: ``GET {baseUrl}/models`` for OpenAI-compatible APIs, ``GET /v1/models`` for
Anthropic); and each enabled chat accepts its token (Slack ``auth.test``, Discord
``GET /users/@me``). Web requests run concurrently, each bounded by ``--timeout``.

Each finding prints as ``ok``, ``warn`` or ``FAIL`` with what is wrong and how to fix it.
Exit status: 1 when anything FAILs (a configuration that does not load included), else 0;
warnings do not fail. Secrets are never printed: every message from a remote API is
scrubbed of the key it was sent with.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import stat
import sys
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import quote, urlsplit

import aiohttp
import orjson

from channels.config_base import secret_value
from channels.discord.config import DiscordConfig
from channels.slack.config import SlackConfig
from gateway.constants import STATE_DB_NAME
from gateway.errors import ConfigError
from gateway.settings import HeraldSettings, ProviderConfig

Level = Literal["ok", "warn", "FAIL"]

#: Seconds each remote check may take: long enough for a slow API, short for a person.
DEFAULT_TIMEOUT: Final = 5.0
#: Enough of an error body to recognise it.
EXCERPT_CHARS: Final = 200
OPENAI_DEFAULT_BASE: Final = "https://api.openai.com/v1"
OPENAI_HOST: Final = "api.openai.com"
ANTHROPIC_DEFAULT_BASE: Final = "https://api.anthropic.com"
ANTHROPIC_HOST: Final = "api.anthropic.com"
ANTHROPIC_VERSION: Final = "2023-06-01"
SLACK_DEFAULT_BASE: Final = "https://slack.com/api/"
DISCORD_DEFAULT_BASE: Final = "https://discord.com/api/v10"
_CONFIG_HELP = "config file (.json5, .json or .toml); default $HERALD_CONFIG"


@dataclass(frozen=True, slots=True)
class Finding:
    """One result: its level, what it is about, what was found, and how to fix it."""

    level: Level
    subject: str
    message: str
    fix: str | None = None

    def render(self) -> str:
        text = f"{self.level:<5} {self.subject}: {self.message}"
        return f"{text}\n      fix: {self.fix}" if self.fix else text


def add_commands(subparsers: Any) -> None:
    """Register ``doctor``."""
    parser = subparsers.add_parser(
        "doctor", help="check config, state dir, providers and chat tokens"
    )
    parser.add_argument("--config", "-c", help=_CONFIG_HELP)
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds per remote check (default {DEFAULT_TIMEOUT:g})",
    )
    parser.set_defaults(func=doctor_command)


def doctor_command(args: argparse.Namespace) -> int:
    """Run every check, print the findings; 1 if any FAILed, else 0."""
    findings = asyncio.run(diagnose(args.config, environ=os.environ, request_seconds=args.timeout))
    for finding in findings:
        print(finding.render())
    failed = sum(f.level == "FAIL" for f in findings)
    warned = sum(f.level == "warn" for f in findings)
    print(f"\n{failed} problem(s), {warned} warning(s)", file=sys.stderr)
    return 1 if failed else 0


async def diagnose(
    config: str | None, *, environ: Mapping[str, str], request_seconds: float = DEFAULT_TIMEOUT
) -> list[Finding]:
    """Every finding, in the order they print. Stops after the configuration when it does
    not load: the other checks need it."""
    from gateway.config import load_settings

    try:
        loaded = load_settings(config, environ=environ)
    except ConfigError as exc:
        return [
            Finding(
                "FAIL",
                "config",
                "\n      ".join(["does not load:", *(str(i) for i in exc.issues)]),
                "correct the entries above (`herald config check` repeats them)",
            )
        ]
    settings = loaded.settings
    source = str(loaded.path) if loaded.path else "no file: defaults and environment"
    findings = [Finding("ok", "config", f"loads ({source})")]
    findings += check_tools(settings)
    findings += check_state_dir(settings.gateway.resolved_state_dir())
    client_timeout = aiohttp.ClientTimeout(total=request_seconds)
    async with aiohttp.ClientSession(timeout=client_timeout) as session:
        remote: list[Awaitable[Finding]] = []
        used = _used_providers(settings)
        for name, provider in settings.models.providers.items():
            remote.append(check_provider(session, name, provider, loaded.config_dir, name in used))
        if settings.channels.slack.enabled:
            remote.append(check_slack(session, settings.channels.slack))
        if settings.channels.discord.enabled:
            remote.append(check_discord(session, settings.channels.discord))
        findings += await asyncio.gather(*remote)
    return findings


# -- local checks -----------------------------------------------------------------------------


def check_tools(settings: HeraldSettings) -> list[Finding]:
    """Unknown tool or group names in tool policies (ignored by the gateway: a typo?)."""
    from gateway.tools import default_registry, policy_issues

    issues = policy_issues(settings, default_registry(settings))
    if not issues:
        return [Finding("ok", "tools", "every tool policy names known tools")]
    return [
        Finding("warn", "tools", str(i), "correct the name, or remove it from the list")
        for i in issues
    ]


def check_state_dir(path: Path) -> list[Finding]:
    """The state directory: exists or can be made, ours, 0700, writable; then its database."""
    subject = f"state dir {path}"
    if not path.exists():
        parent = next((p for p in path.parents if p.exists()), None)
        if parent is None or not os.access(parent, os.W_OK | os.X_OK):
            return [
                Finding(
                    "FAIL",
                    subject,
                    f"does not exist and cannot be created ({parent} is not writable)",
                    f"create it: mkdir -m 700 -p {path}",
                )
            ]
        return [Finding("ok", subject, "does not exist yet; `herald run` creates it (0700)")]
    if not path.is_dir():
        return [Finding("FAIL", subject, "is not a directory", "point gateway.stateDir elsewhere")]
    info = path.stat()
    if info.st_uid != os.getuid():
        return [
            Finding(
                "FAIL",
                subject,
                f"is owned by uid {info.st_uid}, not by you (uid {os.getuid()})",
                f"run herald as its owner, or: chown -R {os.getuid()} {path}",
            )
        ]
    if not os.access(path, os.W_OK | os.X_OK):
        return [Finding("FAIL", subject, "is not writable", f"chmod 700 {path}")]
    mode = stat.S_IMODE(info.st_mode)
    directory = (
        Finding("ok", subject, "ours and writable, mode 0700")
        if mode & 0o077 == 0
        else Finding(
            "warn",
            subject,
            f"mode {mode:04o} lets others in (transcripts live here); `herald run` sets 0700",
            f"chmod 700 {path}",
        )
    )
    return [directory, check_state_db(path / STATE_DB_NAME)]


def check_state_db(path: Path) -> Finding:
    """The database opens read-only and its schema version is one this Herald knows."""
    from gateway.state.schema import LATEST_VERSION

    subject = f"state db {path.name}"
    if not path.exists():
        return Finding("ok", subject, "none yet; `herald run` creates it")
    mode = stat.S_IMODE(path.stat().st_mode)
    try:
        conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
        try:
            exists = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
            ).fetchone()
            row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
            version = int(row[0] or 0) if exists else 0
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return Finding(
            "FAIL",
            subject,
            f"cannot be read: {exc}",
            f"restore {path} from a backup, or move it away to start afresh",
        )
    if version > LATEST_VERSION:
        return Finding(
            "FAIL",
            subject,
            f"schema version {version} is newer than this Herald's ({LATEST_VERSION})",
            "upgrade Herald to the version that wrote it",
        )
    if version < LATEST_VERSION:
        return Finding(
            "warn",
            subject,
            f"schema version {version}; `herald run` migrates it to {LATEST_VERSION}",
        )
    if mode & 0o077:
        return Finding("warn", subject, f"mode {mode:04o}: readable by others", f"chmod 600 {path}")
    return Finding("ok", subject, f"opens read-only, schema version {version}")


def _used_providers(settings: HeraldSettings) -> set[str]:
    refs = [settings.agent.model, settings.agent.subagents.model]
    refs += [agent.model for agent in settings.routing.agents.values()]
    return {ref.partition("/")[0] for ref in refs if ref}


# -- remote checks ----------------------------------------------------------------------------


async def check_provider(
    session: aiohttp.ClientSession,
    name: str,
    config: ProviderConfig,
    config_dir: Path,
    used: bool,
) -> Finding:
    """One provider; problems of a provider no agent uses are warnings (a spawn may still
    name it as a model override)."""
    subject = f"provider {name}"
    finding = await _provider_finding(session, subject, name, config, config_dir)
    if finding.level == "FAIL" and not used:
        message = f"{finding.message}; no agent uses it, but a spawn's model override could"
        return Finding("warn", subject, message, finding.fix)
    return finding


async def _provider_finding(
    session: aiohttp.ClientSession,
    subject: str,
    name: str,
    config: ProviderConfig,
    config_dir: Path,
) -> Finding:
    if config.api == "scripted":
        return _scripted_finding(subject, config, config_dir)
    key = secret_value(config.api_key) or None
    key_name = f"models.providers.{name}.apiKey"
    if config.api == "openai-completions":
        base = (config.base_url or OPENAI_DEFAULT_BASE).rstrip("/")
        url, official = f"{base}/models", urlsplit(base).hostname == OPENAI_HOST
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        variable = "OPENAI_API_KEY"
    else:
        base = (config.base_url or ANTHROPIC_DEFAULT_BASE).rstrip("/").removesuffix("/v1")
        url, official = f"{base}/v1/models", urlsplit(base).hostname == ANTHROPIC_HOST
        headers = {"anthropic-version": ANTHROPIC_VERSION, **({"x-api-key": key} if key else {})}
        variable = "ANTHROPIC_API_KEY"
    if key is None and official:
        return Finding(
            "FAIL",
            subject,
            f"no API key ({key_name} is unset)",
            f'set {key_name}, e.g. apiKey: "${{{variable}}}", and export {variable}',
        )
    try:
        async with session.get(url, headers=headers) as response:
            status, raw = response.status, await response.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        return _unreachable(subject, url, exc, key, f"check models.providers.{name}.baseUrl")
    if status in (401, 403):
        return Finding(
            "FAIL",
            subject,
            f"the API key was refused (HTTP {status}: {_detail(raw, key)})",
            f"check {key_name}" + (f" ({variable})" if official else ""),
        )
    if status == 404:
        return Finding(
            "warn",
            subject,
            f"{url} answered 404: the server may not list models, or baseUrl is wrong",
            "OpenAI-compatible baseUrl ends in /v1" if config.api == "openai-completions" else None,
        )
    if status >= 300:
        return Finding(
            "warn", subject, f"reachable, but answered HTTP {status}: {_detail(raw, key)}"
        )
    missing = _unlisted_models(config, raw) if config.api == "openai-completions" else []
    if missing:
        return Finding(
            "warn",
            subject,
            f"key accepted, but {', '.join(missing)} not among the models it lists",
            f"check the model ids in models.providers.{name}.models",
        )
    return Finding("ok", subject, f"reachable at {base}, key accepted")


def _scripted_finding(subject: str, config: ProviderConfig, config_dir: Path) -> Finding:
    from gateway.providers import ScriptError, default_script_path, load_script

    path = (config_dir / config.script).expanduser() if config.script else default_script_path()
    try:
        load_script(path)
    except ScriptError as exc:
        return Finding(
            "FAIL",
            subject,
            "rules file does not load:\n      " + "\n      ".join(str(i) for i in exc.issues),
            "correct the rules file",
        )
    return Finding("ok", subject, f"scripted rules load ({path})")


def _unlisted_models(config: ProviderConfig, raw: bytes) -> list[str]:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    listed = data.get("data") if isinstance(data, dict) else None
    if not isinstance(listed, list):
        return []
    ids = {item.get("id") for item in listed if isinstance(item, dict)}
    return [model.id for model in config.models if model.id not in ids]


async def check_slack(session: aiohttp.ClientSession, config: SlackConfig) -> Finding:
    """``auth.test`` with the bot token."""
    subject = "slack"
    token = secret_value(config.bot_token)
    if not token:
        return Finding("FAIL", subject, "no bot token", "set channels.slack.botToken")
    base = config.api_base_url or SLACK_DEFAULT_BASE
    if not base.endswith("/"):
        # slack_sdk joins method names onto the root like a relative URL: without the slash
        # the last path segment is replaced ("…/api" + "auth.test" → "…/auth.test").
        return Finding(
            "FAIL",
            subject,
            f"apiBaseUrl {base} does not end with '/'",
            f"set channels.slack.apiBaseUrl to {base}/",
        )
    url = base + "auth.test"
    try:
        async with session.post(url, headers={"Authorization": f"Bearer {token}"}) as response:
            status, raw = response.status, await response.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        return _unreachable(subject, url, exc, token, "check channels.slack.apiBaseUrl")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        return Finding("FAIL", subject, f"auth.test answered HTTP {status}: {_detail(raw, token)}")
    if not data.get("ok"):
        error = _scrub(str(data.get("error") or f"HTTP {status}"), token)
        return Finding(
            "FAIL",
            subject,
            f"the bot token was refused ({error})",
            "check channels.slack.botToken (SLACK_BOT_TOKEN): the app's xoxb- token",
        )
    who = f"@{data.get('user', '?')} in {data.get('team', '?')}"
    if config.mode == "socket" and not (secret_value(config.app_token) or "").startswith("xapp-"):
        return Finding(
            "warn",
            subject,
            f"bot token accepted ({who}), but the app token does not look like xapp-…",
            "set channels.slack.appToken to the app-level token with connections:write",
        )
    return Finding("ok", subject, f"bot token accepted ({who})")


async def check_discord(session: aiohttp.ClientSession, config: DiscordConfig) -> Finding:
    """``GET /users/@me`` with the bot token."""
    subject = "discord"
    token = secret_value(config.token)
    if not token:
        return Finding("FAIL", subject, "no bot token", "set channels.discord.token")
    url = (config.api_base_url or DISCORD_DEFAULT_BASE) + "/users/@me"
    try:
        async with session.get(url, headers={"Authorization": f"Bot {token}"}) as response:
            status, raw = response.status, await response.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        return _unreachable(subject, url, exc, token, "check channels.discord.apiBaseUrl")
    if status in (401, 403):
        return Finding(
            "FAIL",
            subject,
            f"the bot token was refused (HTTP {status})",
            "check channels.discord.token (DISCORD_TOKEN): Developer Portal → Bot → token",
        )
    if status >= 300:
        return Finding("warn", subject, f"/users/@me answered HTTP {status}: {_detail(raw, token)}")
    try:
        user = orjson.loads(raw)
    except orjson.JSONDecodeError:
        user = {}
    name = user.get("username", "?") if isinstance(user, dict) else "?"
    return Finding("ok", subject, f"bot token accepted (@{_scrub(str(name), token)})")


# -- helpers ----------------------------------------------------------------------------------


def _scrub(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text


def _detail(raw: bytes, secret: str | None) -> str:
    """The error message of a JSON error body, or an excerpt of the body; secret masked."""
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        message = error.get("message") if isinstance(error, dict) else error or data.get("message")
        if isinstance(message, str) and message:
            text = message
    if len(text) > EXCERPT_CHARS:
        text = text[:EXCERPT_CHARS] + "…"
    return _scrub(text, secret) or "(empty body)"


def _unreachable(
    subject: str, url: str, exc: BaseException, secret: str | None, fix: str
) -> Finding:
    reason = (
        "no answer in time" if isinstance(exc, TimeoutError) else str(exc) or type(exc).__name__
    )
    return Finding(
        "FAIL",
        subject,
        f"cannot reach {url}: {_scrub(reason, secret)}",
        f"{fix}; check the network, proxy and firewall",
    )
