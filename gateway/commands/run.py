"""``herald run``: start the daemon."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING, Any

from gateway.constants import EXIT_TEMPFAIL, EXIT_UNAVAILABLE

if TYPE_CHECKING:
    from gateway.settings import HeraldSettings


def add_commands(subparsers: Any) -> None:
    parser = subparsers.add_parser("run", help="start the gateway daemon")
    parser.add_argument("--config", "-c", help="config file (.json5, .json or .toml)")
    parser.add_argument("--host", help="override gateway.host")
    parser.add_argument("--port", type=int, help="override gateway.port")
    parser.set_defaults(func=run)


def cli_overrides(args: argparse.Namespace) -> dict[str, object]:
    """CLI flags as a nested override dict (highest precedence)."""
    gateway: dict[str, object] = {}
    if getattr(args, "host", None):
        gateway["host"] = args.host
    if getattr(args, "port", None) is not None:
        gateway["port"] = args.port
    return {"gateway": gateway} if gateway else {}


def replica_lock_name(settings: HeraldSettings) -> str | None:
    """In a cluster, this replica's lock name (its id, normalised for a file name: distinct
    ids stay distinct); None for a gateway alone on its state directory."""
    from gateway.sessions.keys import normalize_id

    if settings.cluster.database_url is None:
        return None
    return normalize_id(settings.cluster.resolved_replica_id(), exact=True)


def run(args: argparse.Namespace) -> int:
    # Imported here, as in every command: ``herald <other command>`` and ``--help`` build
    # this parser too, and should not pay for the daemon's modules.
    from gateway import instance
    from gateway.config import load_settings
    from gateway.daemon import serve
    from gateway.logs import setup_logging
    from gateway.preflight import preflight
    from gateway.reload import SettingsHolder

    overrides = cli_overrides(args)
    loaded = load_settings(args.config, environ=os.environ, overrides=overrides)
    preflight(loaded)  # before anything is created: a config error exits 78 here
    gateway = loaded.settings.gateway
    try:
        lock = instance.acquire(
            gateway.resolved_state_dir(), replica_lock_name(loaded.settings), loaded.path
        )
    except instance.AlreadyRunningError as exc:
        print(f"herald: {exc}", file=sys.stderr)
        return EXIT_TEMPFAIL
    try:
        try:
            sock = instance.bind(gateway.host, gateway.port)
        except instance.PortInUseError as exc:
            print(f"herald: {exc}", file=sys.stderr)
            return EXIT_UNAVAILABLE
        setup_logging(gateway.log_level)
        holder = SettingsHolder(
            loaded.settings,
            path=str(loaded.path) if loaded.path else None,
            overrides=overrides,
        )
        return asyncio.run(serve(holder, config_dir=loaded.config_dir, sock=sock))
    finally:
        lock.release()
