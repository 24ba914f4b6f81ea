"""``herald doctor``: find what would stop the gateway from working, and say how to fix it.

Checks, in order: the configuration loads; tool policies name known tools; the exec
sandbox starts, and what holds each of its limits; the state
directory exists (or can be created), is ours, private and writable, and its database opens
read-only with a schema this Herald knows (with ``cluster.databaseUrl``: PostgreSQL answers,
with such a schema); each model provider is usable (a scripted
provider's rules file loads; an HTTP provider passes its own probe, one free request for
its model list) and lists the configured models where its list can tell; and each enabled
chat channel passes its own probe (Slack ``auth.test``, Discord ``GET /users/@me``), run on
a channel that is never started; each enabled MCP server starts (or answers) and lists its
tools within its ``startupTimeoutSeconds``; each scheduled job (the file's and the state
database's) aims at a chat whose channel is enabled and passes its check. Remote checks run
concurrently, each bounded by ``--timeout``.

Each finding prints as ``ok``, ``warn`` or ``FAIL`` with what is wrong and how to fix it.
Exit status: 1 when anything FAILs (a configuration that does not load included), else 0;
warnings (a remote answer with no verdict, a model the provider does not list) do not fail.
Secrets are never printed: the probes mask the key they sent in everything they report.
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
from urllib.parse import quote

from channels.discord.config import DiscordConfig
from channels.probe import ProbeOutcome, ProbeResult
from channels.slack.config import SlackConfig
from configbase import secret_value
from gateway.constants import STATE_DB_NAME
from gateway.errors import ConfigError
from gateway.preflight import used_providers
from gateway.schema.mcp import McpServerConfig
from gateway.settings import HeraldSettings, ProviderConfig

Level = Literal["ok", "warn", "FAIL"]

#: Seconds each remote check may take: long enough for a slow API, short for a person.
DEFAULT_TIMEOUT: Final = 5.0
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
    findings += await check_sandbox(settings)
    on_postgresql = settings.cluster.database_url is not None
    findings += check_state_dir(
        settings.gateway.resolved_state_dir(), sqlite_file=not on_postgresql
    )
    used = used_providers(settings)
    remote: list[Awaitable[Finding]] = [
        check_provider(name, provider, loaded.config_dir, name in used, request_seconds)
        for name, provider in settings.models.providers.items()
    ]
    if on_postgresql:
        remote.insert(0, check_database(settings, request_seconds))
    if settings.channels.slack.enabled:
        remote.append(check_slack(settings.channels.slack, request_seconds))
    if settings.channels.discord.enabled:
        remote.append(check_discord(settings.channels.discord, request_seconds))
    remote += [check_mcp_server(n, s) for n, s in settings.mcp.enabled_servers().items()]
    checked = await asyncio.gather(*remote)
    findings += checked
    failing = {f.subject for f in checked if f.level == "FAIL"}
    findings += await check_schedules(settings, failing)
    return findings


async def check_schedules(settings: HeraldSettings, failing: set[str]) -> list[Finding]:
    """Scheduled jobs aimed at a chat the gateway cannot reach (a FAIL each)."""
    from gateway.schedules.reach import job_targets, unreachable

    enabled = [n for n in ("webchat", "slack", "discord") if getattr(settings.channels, n).enabled]
    # A channel's check is named after it (``slack``, ``discord``).
    broken = {name for name in enabled if name in failing}
    targets = await job_targets(settings)
    found = [
        Finding(
            "FAIL",
            f"schedule {u.job_id}",
            f"its chat {u.target} cannot be reached: {u.why}",
            "enable that channel, or change the job's `to` (declared jobs: in the config file;"
            f" others: `herald schedules rm {u.job_id}`, then add it again)",
        )
        for u in unreachable(targets, enabled, broken)
    ]
    if targets and not found:
        found.append(Finding("ok", "schedules", f"{len(targets)} job(s), each chat reachable"))
    return found


async def check_mcp_server(name: str, server: McpServerConfig) -> Finding:
    """Connect to an MCP server as the gateway would (within its startupTimeoutSeconds) and
    list its tools."""
    from gateway.mcp.probe import probe

    report = await probe(name, server)
    subject = f"mcp server {name}"
    if report.ok:
        return Finding("ok", subject, f"{server.shown_transport}: {len(report.tools)} tools")
    where = "command, args and cwd" if server.transport == "stdio" else "url and headers"
    if server.sandbox is not None:
        where = "command, args, cwd and sandbox.readOnly (what its sandbox shows)"
    return Finding(
        "FAIL",
        subject,
        f"{server.shown_transport}: {report.error}",
        f"check mcp.servers.{name}'s {where}; `herald mcp probe {name}` tries again "
        "(the gateway runs without this server's tools meanwhile)",
    )


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


async def check_sandbox(settings: HeraldSettings) -> list[Finding]:
    """The exec sandbox: whether commands need it, whether bubblewrap runs one here, and
    what holds each of its limits."""
    from gateway.preflight import exec_allowed
    from gateway.tools.sandbox import BWRAP_PACKAGE, SANDBOX_FIX, find_bwrap, probe, process_limit

    config = settings.agent.tools.exec.sandbox
    allowed = exec_allowed(settings)
    if not config.enabled:
        if not allowed:
            return [Finding("ok", "sandbox", "off (exec is not allowed)")]
        return [
            Finding(
                "warn",
                "sandbox",
                "off: exec commands run as this user and can read the state database, the "
                "config file and every workspace",
                'set agent.tools.exec.sandbox.mode to "auto"',
            )
        ]
    if find_bwrap() is None:
        level: Level = "FAIL" if allowed else "warn"
        fix = f"apt-get install {BWRAP_PACKAGE}"
        return [Finding(level, "sandbox", "bubblewrap (bwrap) is not installed", fix)]
    complaint = await asyncio.to_thread(probe, config)
    if complaint is not None:
        return [
            Finding(
                "FAIL" if allowed else "warn",
                "sandbox",
                f"bubblewrap cannot start a sandbox here: {complaint}",
                SANDBOX_FIX,
            )
        ]
    network = "its own, loopback only" if not config.network else "the host's"
    processes = process_limit()
    workspace = (
        f"workspace {config.max_workspace_mb} MiB, checked before each command"
        if config.max_workspace_mb
        else "workspace: no limit"
    )
    limits = (
        f"memory {config.memory_mb} MiB by RLIMIT_AS (/tmp and /dev/shm together by their "
        f"tmpfs sizes), CPU {config.cpu_seconds} s by RLIMIT_CPU, files "
        f"{config.max_file_mb} MiB by RLIMIT_FSIZE, {workspace}, "
        f"{config.max_processes} processes by {processes}"
    )
    usage = "" if allowed else " (exec is not allowed: unused)"
    findings = [
        Finding("ok", "sandbox", f"bubblewrap runs commands; network: {network}{usage}"),
        Finding("ok", "sandbox limits", limits),
    ]
    if processes.startswith("nothing"):
        findings[-1] = Finding(
            "warn",
            "sandbox limits",
            limits,
            "run Herald as a non-root user, or give it a pids cgroup (Delegate=yes)",
        )
    return findings


def check_state_dir(path: Path, *, sqlite_file: bool = True) -> list[Finding]:
    """The state directory: exists or can be made, ours, 0700, writable; then its database
    file (unless the state is in PostgreSQL)."""
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
    return [directory, check_state_db(path / STATE_DB_NAME)] if sqlite_file else [directory]


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


async def check_database(settings: HeraldSettings, seconds: float) -> Finding:
    """The PostgreSQL state database (``cluster.databaseUrl``): it answers, and its schema is
    one this Herald knows."""
    from gateway.state import StateError, schema_status

    subject = "state database"
    try:
        async with asyncio.timeout(seconds):
            status = await schema_status(settings.state_config())
    except (StateError, TimeoutError) as exc:
        reason = str(exc) or f"no answer within {seconds:g}s"
        return Finding(
            "FAIL",
            subject,
            f"cannot be reached: {reason}",
            "check cluster.databaseUrl, that PostgreSQL runs, and that it lets this user in "
            "(pg_hba.conf)",
        )
    where = status.location
    if status.newer:
        return Finding(
            "FAIL",
            subject,
            f"{where}: schema version {status.version} is newer than this Herald's "
            f"({status.latest})",
            "upgrade Herald to the version the other replicas run",
        )
    if not status.version:
        return Finding("ok", subject, f"{where} answers; `herald run` creates the schema")
    if status.pending:
        return Finding(
            "warn",
            subject,
            f"{where}: schema version {status.version}; `herald run` (or `herald db "
            f"migrate`) migrates it to {status.latest}",
        )
    return Finding("ok", subject, f"{where} answers, schema version {status.version}")


# -- remote checks: each provider's and channel's own probe ----------------------------------

#: How a probe's outcome reads as a finding: an answer with no verdict on the credentials (a
#: server error, a rate limit, no model list) may pass next time, so it only warns.
_LEVELS: Final[dict[ProbeOutcome, Level]] = {
    "ok": "ok",
    "missing": "FAIL",
    "misconfigured": "FAIL",
    "unreachable": "FAIL",
    "refused": "FAIL",
    "unexpected": "warn",
}


def _finding(subject: str, probe: ProbeResult) -> Finding:
    return Finding(_LEVELS[probe.outcome], subject, probe.detail, probe.fix)


async def check_provider(
    name: str, config: ProviderConfig, config_dir: Path, used: bool, seconds: float
) -> Finding:
    """One provider; problems of a provider no agent uses are warnings (a spawn may still
    name it as a model override)."""
    subject = f"provider {name}"
    finding = await _provider_finding(subject, name, config, config_dir, seconds)
    if finding.level == "FAIL" and not used:
        message = f"{finding.message}; no agent uses it, but a spawn's model override could"
        return Finding("warn", subject, message, finding.fix)
    return finding


async def _provider_finding(
    subject: str, name: str, config: ProviderConfig, config_dir: Path, seconds: float
) -> Finding:
    from gateway.providers import ScriptError, build_provider

    try:
        provider = build_provider(name, config, config_dir=config_dir)
    except ScriptError as exc:  # a scripted provider reads its rules file when built
        return Finding(
            "FAIL",
            subject,
            "rules file does not load:\n      " + "\n      ".join(str(i) for i in exc.issues),
            "correct the rules file",
        )
    try:
        probe = await provider.probe(timeout_seconds=seconds)
    finally:
        await provider.close()
    listed = probe.models if probe.ok else None
    missing = [m.id for m in config.models if listed is not None and m.id not in listed]
    if missing:
        return Finding(
            "warn",
            subject,
            f"key accepted, but {', '.join(missing)} not among the models it lists",
            f"check the model ids in models.providers.{name}.models",
        )
    return _finding(subject, probe)


async def check_slack(config: SlackConfig, seconds: float) -> Finding:
    """The Slack channel's probe (``auth.test``); in Socket Mode, the app token's shape."""
    from channels.slack import SlackChannel

    probe = await SlackChannel(config).probe(timeout_seconds=seconds)
    # The probe tries the bot token only; of the app token, Socket Mode needs an xapp- one.
    app_token = secret_value(config.app_token) or ""
    if probe.ok and config.mode == "socket" and not app_token.startswith("xapp-"):
        return Finding(
            "warn",
            "slack",
            f"{probe.detail}, but the app token does not look like xapp-…",
            "set channels.slack.appToken to the app-level token with connections:write",
        )
    return _finding("slack", probe)


async def check_discord(config: DiscordConfig, seconds: float) -> Finding:
    """The Discord channel's probe (``GET /users/@me``)."""
    from channels.discord import DiscordChannel

    return _finding("discord", await DiscordChannel(config).probe(timeout_seconds=seconds))
