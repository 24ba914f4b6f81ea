"""``herald init``: write a commented config and the demo model's script where the config
lookup will find them.

The folders are the lookup's own, in its order: the current directory, then
``$XDG_CONFIG_HOME/herald`` (``~/.config/herald``), then ``/etc/herald``; the first that is
writable (or can be created) gets ``herald.json5`` and ``demo-script.json5``. An existing
config is never overwritten without ``--force``. The files are the complete example config
and demo script shipped in the package (the same as ``config/`` in the repository).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from gateway.config import config_candidates, find_config

CONFIG_NAME = "herald.json5"
SCRIPT_NAME = "demo-script.json5"
#: The packaged copies (tests keep them identical to ``config/``).
TEMPLATES = {CONFIG_NAME: "herald.example.json5", SCRIPT_NAME: "demo-script.json5"}


def add_commands(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "init", help="write a commented herald.json5 (and the demo script) to start from"
    )
    parser.add_argument("--dir", help="write there instead of the first writable lookup folder")
    parser.add_argument("--force", action="store_true", help="overwrite an existing config")
    parser.set_defaults(func=init_command)


def lookup_folders(environ: dict[str, str] | os._Environ[str]) -> list[Path]:
    """The config lookup's folders, in its order, each once."""
    folders: list[Path] = []
    for candidate in config_candidates(environ):
        if candidate.parent not in folders:
            folders.append(candidate.parent)
    return folders


def writable(folder: Path) -> bool:
    """Whether ``folder`` exists and is writable, or could be created."""
    for path in (folder, *folder.parents):
        if path.exists():
            return path.is_dir() and os.access(path, os.W_OK | os.X_OK)
    return False


def template(name: str) -> bytes:
    return resources.files("gateway.templates").joinpath(TEMPLATES[name]).read_bytes()


def init_command(args: argparse.Namespace) -> int:
    if args.dir:
        folder = Path(args.dir).expanduser()
    else:
        found = next((f for f in lookup_folders(os.environ) if writable(f)), None)
        if found is None:
            print("herald: no writable folder for a config; pass --dir", file=sys.stderr)
            return 1
        folder = found
    config = folder / CONFIG_NAME
    if config.exists() and not args.force:
        print(f"herald: {config} exists; keep it, or pass --force to replace it", file=sys.stderr)
        return 1
    try:
        folder.mkdir(parents=True, exist_ok=True)
        config.write_bytes(template(CONFIG_NAME))
        script = folder / SCRIPT_NAME
        if not script.exists() or args.force:
            script.write_bytes(template(SCRIPT_NAME))
    except OSError as exc:
        print(f"herald: cannot write {folder}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"wrote {config} and {script}")
    # Without a flag only when the lookup finds this very file (an earlier folder's config,
    # or $HERALD_CONFIG, would shadow it).
    lookup = find_config(os.environ)
    looked_up = lookup is not None and Path(lookup).resolve() == config.resolve()
    flag = "" if looked_up else f" --config {shlex.quote(str(config))}"
    print(
        f"edit it (every key is commented), check it with `herald config check{flag}`,"
        f" then `herald run{flag}`"
    )
    return 0
