"""``herald db status|migrate``: the state database's schema, for operators.

Both work on the configured backend: SQLite (``<stateDir>/herald.db``) or PostgreSQL
(``cluster.databaseUrl``, shown with its password masked). ``herald run`` migrates at start
by itself; ``migrate`` lets an operator do it beforehand (before starting replicas of a new
version, say), under the same advisory lock on PostgreSQL.

Exit status: 0 when the schema is current (after ``migrate``: when it is now), 1 when
migrations are pending or the database is newer than this Herald, 69 (EX_UNAVAILABLE) when
the database cannot be reached or read.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

import orjson

from gateway.constants import EXIT_UNAVAILABLE
from gateway.settings import HeraldSettings
from gateway.state import SchemaError, SchemaStatus, StateError, migrate_state, schema_status

_CONFIG_HELP = "config file (.json5, .json or .toml); default $HERALD_CONFIG"
EXIT_PENDING = 1


def add_commands(subparsers: Any) -> None:
    """Register ``db`` (status, migrate)."""
    parser = subparsers.add_parser("db", help="the state database's schema: status, migrate")
    sub = parser.add_subparsers(dest="db_command", metavar="SUBCOMMAND", required=True)
    status = sub.add_parser("status", help="which database, its schema version, what is pending")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.add_argument("--config", "-c", help=_CONFIG_HELP)
    status.set_defaults(func=db_status)
    migrate = sub.add_parser("migrate", help="apply pending schema migrations now")
    migrate.add_argument("--config", "-c", help=_CONFIG_HELP)
    migrate.set_defaults(func=db_migrate)


def db_status(args: argparse.Namespace) -> int:
    """``herald db status [--json]``."""
    settings = _settings(args)
    try:
        status = asyncio.run(schema_status(settings.state_config()))
    except StateError as exc:
        print(f"herald: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    if args.json:
        print(orjson.dumps(_json(status), option=orjson.OPT_INDENT_2).decode())
    else:
        print(render(status))
    return 0 if status.version == status.latest else EXIT_PENDING


def db_migrate(args: argparse.Namespace) -> int:
    """``herald db migrate``."""
    settings = _settings(args)
    try:
        before = asyncio.run(schema_status(settings.state_config()))
        after = asyncio.run(migrate_state(settings.state_config())) if before.pending else before
    except SchemaError as exc:
        print(f"herald: {exc}", file=sys.stderr)
        return EXIT_PENDING
    except StateError as exc:
        print(f"herald: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    if before.newer:
        print(render(before))
        return EXIT_PENDING
    if not before.pending:
        print(f"{before.location}: schema version {before.version}, nothing to migrate")
    else:
        print(
            f"{after.location}: migrated from schema version {before.version or 0} "
            f"to {after.version}"
        )
    return 0


def render(status: SchemaStatus) -> str:
    """The status as ``herald db status`` prints it."""
    if status.version is None:
        schema = f"none yet; `herald run` or `herald db migrate` creates version {status.latest}"
    elif status.newer:
        schema = f"version {status.version}, newer than this Herald ({status.latest}): upgrade"
    elif status.pending:
        pending = ", ".join(str(v) for v in status.pending)
        schema = f"version {status.version} of {status.latest}; pending: {pending}"
    else:
        schema = f"version {status.version} (current)"
    return "\n".join(
        [f"backend   {status.backend}", f"database  {status.location}", f"schema    {schema}"]
    )


def _json(status: SchemaStatus) -> dict[str, Any]:
    return {
        "backend": status.backend,
        "database": status.location,
        "version": status.version,
        "latest": status.latest,
        "pending": status.pending,
    }


def _settings(args: argparse.Namespace) -> HeraldSettings:
    from gateway.config import load_settings

    return load_settings(args.config, environ=os.environ).settings
