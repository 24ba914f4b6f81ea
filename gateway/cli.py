"""The ``herald`` command line.

Each subcommand module in :mod:`gateway.commands` exposes ``add_commands(subparsers)`` and
sets ``func`` on its parsers: a callable taking the parsed arguments and returning the exit
status. Config errors exit 78 (EX_CONFIG) with one clear message, never a traceback; a
reader that closed stdout early (``herald runs list | head``) ends the command quietly with
status 1.

Ctrl-C ends any command with status 130 and no traceback, during start-up too. The CLI
installs Python's SIGINT handler itself: a process started as a shell's background job
inherits SIGINT ignored, and Python then installs none, so ``herald transcripts show
--follow &`` could never be interrupted (``herald run`` replaces it with its own).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Final

from gateway.constants import EXIT_CONFIG
from gateway.errors import ConfigError

COMMAND_MODULES = (
    "gateway.commands.run",
    "gateway.commands.config",
    "gateway.commands.sessions",
    "gateway.commands.runs",
    "gateway.commands.doctor",
    "gateway.commands.status",
    "gateway.commands.db",
    "gateway.commands.init",
    "gateway.commands.mcp",
    "gateway.commands.schedules",
)
#: The module of each command, so that ``herald <command> …`` imports that module alone:
#: each brings what its commands need (pydantic, aiohttp, the state database…), and a
#: command's start-up is most of its time. ``--help``, a bare ``herald`` and a mistyped
#: command build the whole parser. A test checks this against what the modules register.
COMMANDS: Final = {
    "run": "gateway.commands.run",
    "config": "gateway.commands.config",
    "sessions": "gateway.commands.sessions",
    "transcripts": "gateway.commands.sessions",
    "runs": "gateway.commands.runs",
    "spawn": "gateway.commands.runs",
    "doctor": "gateway.commands.doctor",
    "status": "gateway.commands.status",
    "db": "gateway.commands.db",
    "init": "gateway.commands.init",
    "mcp": "gateway.commands.mcp",
    "schedules": "gateway.commands.schedules",
}


def herald_version() -> str:
    """The installed distribution's version."""
    try:
        return version("herald-gateway")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0+unknown"


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser for ``argv``: with its command's module alone when its first word
    is a command (the one parser that can then apply), with none for ``--version``, else
    with every installed one."""
    import importlib

    first = argv[0] if argv else None
    parser = argparse.ArgumentParser(
        prog="herald", description="Chat gateway daemon for LLM agents."
    )
    parser.add_argument("--version", action="version", version=f"herald {herald_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    if first in COMMANDS:
        modules: Sequence[str] = (COMMANDS[first],)
    elif first == "--version":  # answered by the parser itself, before any command
        modules = ()
    else:
        modules = COMMAND_MODULES
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue  # a command group that is not built yet
        module.add_commands(subparsers)
    return parser


#: Commands that never take a running gateway's config: ``run`` starts one, ``init`` and
#: ``config path`` are about the lookup itself.
_OWN_LOOKUP = frozenset({"run", "init"})


def adopt_running_config(args: argparse.Namespace) -> None:
    """Give a command with no config of its own the running gateway's: when neither
    ``--config``, ``$HERALD_CONFIG`` nor the lookup names a file, and a gateway holds the
    default state directory, the file it runs on (recorded in its lock) is the one meant.
    So ``make run`` (the repository's example) and ``herald status`` agree."""
    from gateway import instance
    from gateway.config import find_config, load_settings

    if getattr(args, "command", None) in _OWN_LOOKUP or getattr(args, "config", "") is not None:
        return
    if getattr(args, "config_command", None) in ("path", "schema"):
        return
    if find_config(os.environ) is not None:
        return
    state_dir = load_settings(None, environ=os.environ).settings.gateway.resolved_state_dir()
    running = instance.holder(state_dir)
    if running is not None and running.config is not None and running.config.is_file():
        args.config = str(running.config)


def install_signal_handlers() -> None:
    """SIGINT raises ``KeyboardInterrupt``, whatever disposition the process inherited.
    Only the main thread may set handlers (tests call :func:`main` from others)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``herald`` console script."""
    install_signal_handlers()
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        parser = build_parser(words)
        args = parser.parse_args(words)
        func = getattr(args, "func", None)
        if func is None:
            parser.print_help()
            return 2
        adopt_running_config(args)
        status: int = func(args)
        # Flushed here, so that a reader that went away (``herald runs list | head``) is
        # met inside this try, not by the interpreter's own flush at exit.
        sys.stdout.flush()
    except BrokenPipeError:
        # As Python's documentation on SIGPIPE advises: point stdout at devnull, so the
        # flush at exit cannot raise again, and exit 1 without a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except ConfigError as exc:
        print(f"herald: configuration error:\n{exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())
