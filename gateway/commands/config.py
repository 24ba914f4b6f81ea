"""``herald config check|show|schema|path``."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def add_commands(subparsers: Any) -> None:
    parser = subparsers.add_parser("config", help="validate or print the configuration")
    sub = parser.add_subparsers(dest="config_command", metavar="SUBCOMMAND", required=True)
    check = sub.add_parser("check", help="validate the configuration and exit")
    check.add_argument("--config", "-c", help="config file (.json5, .json or .toml)")
    check.set_defaults(func=check_config)
    show = sub.add_parser("show", help="print the resolved configuration, secrets masked")
    show.add_argument("--config", "-c", help="config file (.json5, .json or .toml)")
    show.add_argument("--format", choices=("json5", "json", "toml"), default="json5")
    show.set_defaults(func=show_config)
    path = sub.add_parser(
        "path", help="print the config file the lookup finds (exit 1 when there is none)"
    )
    path.set_defaults(func=print_path)
    schema = sub.add_parser(
        "schema", help="print the configuration's JSON Schema (for editor completion)"
    )
    schema.set_defaults(func=print_schema)


def check_config(args: argparse.Namespace) -> int:
    from gateway.config import load_settings
    from gateway.preflight import preflight

    loaded = load_settings(args.config, environ=os.environ)
    preflight(loaded)  # every check `herald run` makes before it starts
    source = str(loaded.path) if loaded.path else "embedded defaults"
    print(f"{source}: OK")
    for key in sorted(loaded.unset_secrets):
        print(f"note: {key} is unset (its variable is missing; not needed by this config)")
    return 0


def show_config(args: argparse.Namespace) -> int:
    from gateway.config import load_settings, render_settings

    loaded = load_settings(args.config, environ=os.environ)
    text = render_settings(loaded, args.format)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def print_path(args: argparse.Namespace) -> int:
    """The file ``herald run`` would load with no ``--config``: what ``make run`` asks before
    it falls back to the repository's example."""
    from gateway.config import find_config

    found = find_config(os.environ)
    if found is None:
        print("herald: no config file found (the embedded defaults apply)", file=sys.stderr)
        return 1
    print(found)
    return 0


def print_schema(args: argparse.Namespace) -> int:
    """The JSON Schema of the config file's keys (camelCase, as files write them), for
    editors: ``"$schema"`` in a JSON file, or a YAML/TOML language server's settings."""
    import orjson

    from gateway.config.reference import json_schema

    sys.stdout.write(orjson.dumps(json_schema(), option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0
