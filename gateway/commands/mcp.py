"""``herald mcp list`` and ``herald mcp probe <name>``: the configured MCP servers, each
connected once (no running gateway needed), with their state and tools."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from gateway.settings import HeraldSettings

_CONFIG_HELP = "config file (.json5, .json or .toml); default $HERALD_CONFIG"


def add_commands(subparsers: Any) -> None:
    """Register ``mcp list`` and ``mcp probe``."""
    parser = subparsers.add_parser("mcp", help="MCP servers: list them, probe one")
    commands = parser.add_subparsers(dest="mcp_command", metavar="ACTION", required=True)
    listing = commands.add_parser("list", help="every configured server: state and tools")
    listing.add_argument("--config", "-c", help=_CONFIG_HELP)
    listing.set_defaults(func=list_command)
    probing = commands.add_parser(
        "probe", help="connect to one server and list its tools (exit 1 when it fails)"
    )
    probing.add_argument("name", help="the server's name under mcp.servers")
    probing.add_argument("--config", "-c", help=_CONFIG_HELP)
    probing.add_argument(
        "--timeout", type=float, default=None, help="seconds (default its startupTimeoutSeconds)"
    )
    probing.set_defaults(func=probe_command)


def _settings(args: argparse.Namespace) -> HeraldSettings:
    from gateway.config import load_settings

    return load_settings(args.config, environ=os.environ).settings


def list_command(args: argparse.Namespace) -> int:
    """One line per server: name, transport, state, tools; disabled ones are not probed."""
    from gateway.mcp.probe import ProbeReport, probe

    servers = _settings(args).mcp.servers
    if not servers:
        print("no MCP servers configured (mcp.servers)", file=sys.stderr)
        return 0
    enabled = {name: s for name, s in servers.items() if s.enabled}

    async def probe_all() -> list[ProbeReport]:
        return await asyncio.gather(*(probe(n, s) for n, s in enabled.items()))

    reports = {r.server: r for r in asyncio.run(probe_all())}
    width = max(len(name) for name in servers)
    # As wide as the longest label ("stdio, sandboxed"): the states start in one column.
    transports = max(len(server.shown_transport) for server in servers.values())
    for name, server in servers.items():
        report = reports.get(name)
        if report is None:
            state = "disabled"
        elif report.ok:
            state = f"ready    {len(report.tools)} tools: " + ", ".join(
                t.name for t in report.tools
            )
        else:
            state = f"failed: {report.error}"
        print(f"{name:<{width}}  {server.shown_transport:<{transports}}  {state}")
    return 0


def probe_command(args: argparse.Namespace) -> int:
    """Connect to server ``args.name``, print its tools; 1 when it fails, 2 when unknown."""
    from gateway.mcp.probe import probe
    from gateway.mcp.results import tool_name

    servers = _settings(args).mcp.servers
    server = servers.get(args.name)
    if server is None:
        known = ", ".join(sorted(servers)) or "none"
        print(f"herald: no MCP server {args.name!r} (configured: {known})", file=sys.stderr)
        return 2
    print(f"{args.name}: {server.shown_transport} {server.describe()}")
    report = asyncio.run(probe(args.name, server, seconds=args.timeout))
    if not report.ok:
        print(f"failed: {report.error}", file=sys.stderr)
        return 1
    print(f"ready: {len(report.tools)} tools")
    for tool in report.tools:
        summary = tool.description.splitlines()[0] if tool.description else ""
        print(f"  {tool_name(args.name, tool.name)}  {summary}".rstrip())
    return 0
