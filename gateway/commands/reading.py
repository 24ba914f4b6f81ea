"""What the read commands (``sessions``, ``transcripts``, ``runs``) share: the state
directory they read, read-only database access (the configured backend, through
:func:`gateway.state.open_state`), reference lookup and safe printing.

Every read command names the state directory it read (and, on PostgreSQL, the database):
listings in their first line, failures in their message. ``sudo herald sessions list``
reads root's ``~/.herald``, not the service's directory, and must not look like an empty
gateway.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import re
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from gateway.constants import STATE_DB_NAME
from gateway.sessions import (
    Location,
    SessionKeyError,
    SessionNotFoundError,
    SessionRefError,
    locate,
    parse_ref,
)
from gateway.settings import HeraldSettings
from gateway.state import Origin, StateDB, StateError, StateMissingError, open_state

T = TypeVar("T")
CONFIG_HELP = "config file (.json5, .json or .toml); default: the usual lookup"
#: Characters shown as escapes: C0 controls but newline and tab, DEL, and C1 controls.
_UNSAFE = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (9, 10)}


@dataclass(frozen=True)
class StateSource:
    """The state directory a command reads, the config file that named it, and the
    settings that say which state database holds its tables."""

    state_dir: Path
    config: Path | None
    settings: HeraldSettings

    @property
    def database(self) -> str | None:
        """The PostgreSQL database's URL, password masked; None for SQLite."""
        url = self.settings.cluster.database_url
        return url.masked() if url is not None else None

    @property
    def has_db(self) -> bool:
        # A PostgreSQL database is not looked for in advance: a failure to reach it says so.
        return self.database is not None or (self.state_dir / STATE_DB_NAME).exists()

    def heading(self) -> str:
        """``state directory /x (config /y/herald.json5)``: a listing's first line."""
        config = f"config {self.config}" if self.config else "no config file"
        database = f"; state database {self.database}" if self.database else ""
        missing = "; no state database there" if not self.has_db else ""
        return safe(f"state directory {self.state_dir} ({config}{database}{missing})")

    def where(self) -> str:
        """``in state directory /x``: the tail of a not-found message."""
        if self.database is not None:
            return f"in state database {self.database} (state directory {self.state_dir})"
        return f"in state directory {self.state_dir}"


def state_source(args: argparse.Namespace) -> StateSource:
    """The state directory of the configuration ``--config`` (or the usual lookup) names."""
    from gateway.config import load_settings

    loaded = load_settings(args.config, environ=os.environ)
    settings = loaded.settings
    return StateSource(settings.gateway.resolved_state_dir(), loaded.path, settings)


def with_db(source: StateSource, fn: Callable[[StateDB], Coroutine[Any, Any, T]]) -> T:
    """``fn`` run on the configured state database opened read-only (SQLite or PostgreSQL;
    safe while the daemon runs)."""

    async def run() -> T:
        db = await open_state(source.settings.state_config(), readonly=True)
        try:
            return await fn(db)
        finally:
            await db.close()

    return asyncio.run(run())


#: A run id's first characters, as ``runs show`` takes them (a whole id is a UUID).
_RUN_PREFIX = re.compile(r"[0-9a-f][0-9a-f-]{3,34}")


def locate_ref(source: StateSource, ref: str) -> Location | None:
    """The session ``ref`` names (key, session id, run id, a unique prefix of a run id, or
    transcript path), or None after saying on stderr why not."""

    async def runs_named(db: StateDB) -> list[str]:
        return [r.run_id for r in await db.runs.list() if r.run_id.startswith(ref.lower())]

    async def query(db: StateDB) -> Location:
        return await locate(source.state_dir, db, ref)

    try:
        if _RUN_PREFIX.fullmatch(ref.lower()):
            named = with_db(source, runs_named)
            if len(named) > 1:
                err(f"more than one run matches {ref!r} {source.where()}")
                return None
            if named:
                ref = named[0]
        parse_ref(ref)  # before the database: a malformed reference is told as such
        return with_db(source, query)
    except StateMissingError:
        err(f"no session {ref}: no state database {source.where()}")
    except SessionNotFoundError:
        err(f"no session {ref} {source.where()}")
    except (SessionKeyError, SessionRefError, StateError) as exc:
        err(str(exc))
    return None


def origin_text(origin: Origin | None) -> str:
    """A chat origin on one line (``-`` for none)."""
    if origin is None:
        return "-"
    return (
        f"{origin.channel} account={origin.account} chat={origin.chat_id} "
        f"thread={origin.thread_id or '-'} ({origin.chat_type or '?'})"
    )


def safe(text: str) -> str:
    """``text`` with control characters escaped: chat text cannot drive the terminal."""
    return text.translate(_UNSAFE)


def when(at: float | None) -> str:
    """Epoch seconds as ``2026-01-31 14:55`` (UTC), ``-`` for None."""
    if at is None:
        return "-"
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M")


def err(text: str) -> None:
    """``herald: <text>`` on stderr, escaped."""
    print(f"herald: {safe(text)}", file=sys.stderr)
