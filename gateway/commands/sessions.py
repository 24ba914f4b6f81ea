"""``herald sessions list|show`` and ``herald transcripts show`` (DESIGN §11).

They read ``<stateDir>/herald.db`` read-only (WAL: safe while the daemon runs) and the
transcript files, and print readable text, or JSON with ``--json``. ``transcripts show``
takes a session key (resolved through the database, archived sessions included) or a
transcript file path (no configuration needed); with ``--follow`` it keeps printing the lines
a live session writes (:mod:`gateway.commands.follow`). Text from chats is printed with control
characters escaped, so a transcript cannot drive the operator's terminal.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import orjson

from gateway.commands.follow import follow
from gateway.constants import STATE_DB_NAME
from gateway.sessions import (
    SessionKey,
    SessionKeyError,
    current_transcript_path,
    describe_session,
    parse_transcript,
)
from gateway.state import SessionRecord, StateDB, StateError, StateMissingError

T = TypeVar("T")
_CONFIG_HELP = "config file (.json5, .json or .toml); default $HERALD_CONFIG"
#: Characters shown as escapes: C0 controls but newline and tab, DEL, and C1 controls.
_UNSAFE = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (9, 10)}


def add_commands(subparsers: Any) -> None:
    """Register ``sessions`` (list, show) and ``transcripts`` (show)."""
    sessions = subparsers.add_parser("sessions", help="list and inspect sessions")
    sub = sessions.add_subparsers(dest="sessions_command", metavar="SUBCOMMAND", required=True)
    listing = sub.add_parser("list", help="list sessions (sub-agent sessions with --all)")
    listing.add_argument("--all", action="store_true", help="include sub-agent sessions")
    listing.add_argument("--archived", action="store_true", help="include archived sessions")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.add_argument("--config", "-c", help=_CONFIG_HELP)
    listing.set_defaults(func=sessions_list)
    show = sub.add_parser("show", help="show one session")
    show.add_argument("key", help="session key, e.g. agent:main:main")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.add_argument("--config", "-c", help=_CONFIG_HELP)
    show.set_defaults(func=sessions_show)

    transcripts = subparsers.add_parser("transcripts", help="read transcripts")
    tsub = transcripts.add_subparsers(
        dest="transcripts_command", metavar="SUBCOMMAND", required=True
    )
    tshow = tsub.add_parser("show", help="print a transcript (by session key or file path)")
    tshow.add_argument("target", help="session key or transcript file")
    tshow.add_argument("--json", action="store_true", help="print the raw JSON lines")
    tshow.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="then print lines as they are written, until the session is archived or Ctrl-C",
    )
    tshow.add_argument("--config", "-c", help=_CONFIG_HELP)
    tshow.set_defaults(func=transcripts_show)


# -- commands ---------------------------------------------------------------------------------


def sessions_list(args: argparse.Namespace) -> int:
    """``herald sessions list [--all] [--archived] [--json]``."""
    state_dir = _state_dir(args)

    async def query(db: StateDB) -> list[SessionRecord]:
        return await db.sessions.list(include_subagents=args.all, include_archived=args.archived)

    try:
        records = _with_db(state_dir, query)
    except StateMissingError:
        records = []
    except StateError as exc:
        _err(str(exc))
        return 1
    if args.json:
        items = [describe_session(r, current_transcript_path(state_dir, r)) for r in records]
        _out(orjson.dumps({"sessions": items}, option=orjson.OPT_INDENT_2).decode())
        return 0
    if not records:
        _out("No sessions.")
        return 0
    rows = [["KEY", "KIND", "MODEL", "UPDATED", "TOKENS", "COST"]]
    if args.archived:
        rows[0].append("ARCHIVED")
    for r in records:
        row = [r.key, r.kind, r.model or "-", _when(r.updated_at), _tokens(r.usage.total)]
        row.append(_cost(r.cost_usd))
        if args.archived:
            row.append(_when(r.archived_at) if r.archived_at else "-")
        rows.append(row)
    widths = [max(len(_safe(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        _out("  ".join(_safe(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def sessions_show(args: argparse.Namespace) -> int:
    """``herald sessions show <key> [--json]``."""
    key = _parse_key(args.key)
    if key is None:
        return 1
    state_dir = _state_dir(args)
    record = _find(state_dir, key)
    if record is None:
        return 1
    info = describe_session(record, current_transcript_path(state_dir, record))
    if args.json:
        _out(orjson.dumps(info, option=orjson.OPT_INDENT_2).decode())
        return 0
    origin = record.origin
    usage = record.usage
    fields = [
        ("key", record.key),
        ("session id", record.session_id),
        ("agent", record.agent_id),
        ("kind", record.kind),
        ("parent", record.parent_key or "-"),
        ("label", record.label or "-"),
        ("model", record.model or "-"),
        (
            "origin",
            f"{origin.channel} account={origin.account} chat={origin.chat_id} "
            f"thread={origin.thread_id or '-'} ({origin.chat_type or '?'})"
            if origin
            else "-",
        ),
        ("created", info["createdAt"]),
        ("updated", info["updatedAt"]),
        (
            "usage",
            f"in {usage.input} / out {usage.output} (total {usage.total}); "
            f"cache read {usage.cache_read}, cache write {usage.cache_write}",
        ),
        ("cost", _cost(record.cost_usd)),
        ("archive due", info["archiveDueAt"] or "-"),
        ("archived", info["archivedAt"] or "no"),
        ("transcript", info["transcriptPath"] or "(gone)"),
    ]
    for name, value in fields:
        _out(f"{name:<12} {_safe(str(value))}")
    return 0


def transcripts_show(args: argparse.Namespace) -> int:
    """``herald transcripts show <key|path> [--json] [--follow]``."""
    path = _resolve_transcript(args)
    if path is None:
        return 1
    if args.follow:
        return follow(path, raw=_raw if args.json else None, show=_render, warn=_err, flush=_flush)
    try:
        data = path.read_bytes()
    except OSError as exc:
        _err(f"cannot read {path}: {exc.strerror or exc}")
        return 1
    contents = parse_transcript(data)
    if args.json:
        for line in data.split(b"\n"):
            if line.strip() and _is_object(line):
                sys.stdout.buffer.write(line + b"\n")
        sys.stdout.flush()
    else:
        for record in contents.records:
            _render(record)
    if contents.bad_lines:
        _err(f"warning: {path}: unreadable lines skipped: {list(contents.bad_lines)}")
    if contents.torn_bytes:
        _err(f"warning: {path}: torn last line ({contents.torn_bytes} bytes) not shown")
    return 0


# -- helpers ----------------------------------------------------------------------------------


def _state_dir(args: argparse.Namespace) -> Path:
    from gateway.config import load_settings

    loaded = load_settings(args.config, environ=os.environ)
    return loaded.settings.gateway.resolved_state_dir()


def _with_db(state_dir: Path, fn: Callable[[StateDB], Coroutine[Any, Any, T]]) -> T:
    async def run() -> T:
        db = await StateDB.open(state_dir / STATE_DB_NAME, readonly=True)
        try:
            return await fn(db)
        finally:
            await db.close()

    return asyncio.run(run())


def _parse_key(raw: str) -> str | None:
    try:
        return str(SessionKey.parse(raw))
    except SessionKeyError as exc:
        _err(str(exc))
        return None


def _find(state_dir: Path, key: str) -> SessionRecord | None:
    async def query(db: StateDB) -> SessionRecord | None:
        return await db.sessions.get(key)

    try:
        record = _with_db(state_dir, query)
    except StateMissingError:
        record = None
    except StateError as exc:
        _err(str(exc))
        return None
    if record is None:
        _err(f"no session {key}")
    return record


def _resolve_transcript(args: argparse.Namespace) -> Path | None:
    target: str = args.target
    candidate = Path(target).expanduser()
    if target.startswith("agent:") and not candidate.exists():
        key = _parse_key(target)
        if key is None:
            return None
        state_dir = _state_dir(args)
        record = _find(state_dir, key)
        if record is None:
            return None
        path = current_transcript_path(state_dir, record)
        if path is None:
            _err(f"session {key} was archived but its transcript was already gone")
        return path
    if not candidate.is_file():
        _err(f"no such transcript file: {target} (nor a session key)")
        return None
    return candidate


def _render(record: dict[str, Any]) -> None:
    kind = record.get("type")
    stamp = str(record.get("timestamp", ""))
    if kind == "session":
        parent = record.get("parentSessionKey") or "-"
        _out(
            f"session {record.get('key')}  id {record.get('id')}  agent {record.get('agentId')}"
            f"  parent {parent}  started {stamp}"
        )
    elif kind == "message":
        _render_message(stamp, record.get("message") or {})
    elif kind == "event":
        data = orjson.dumps(record.get("data") or {}).decode()
        _out(f"{stamp}  event {record.get('event')} {data}")
    else:
        _out(f"{stamp}  {orjson.dumps(record).decode()}")


def _render_message(stamp: str, body: dict[str, Any]) -> None:
    role = str(body.get("role", "?"))
    content = body.get("content")
    text = content if isinstance(content, str) else orjson.dumps(content).decode()
    notes = []
    if body.get("model"):
        notes.append(f"model {body['model']}")
    usage = body.get("usage")
    if isinstance(usage, dict):
        notes.append(f"tokens in {usage.get('input', 0)} / out {usage.get('output', 0)}")
    if role == "tool":
        name = body.get("toolName") or "tool"
        status = " error" if body.get("isError") else ""
        head = f"tool {name} ({body.get('toolCallId')}){status}"
    else:
        head = role
    if notes:
        head += f" [{', '.join(notes)}]"
    _out(f"{stamp}  {_indented(f'{head}: {text}')}")
    for call in body.get("toolCalls") or ():
        if isinstance(call, dict):
            args = orjson.dumps(call.get("arguments", {})).decode()
            _out(f"{'':24}  → {call.get('name')}({call.get('id')}) {_safe(args)}")


def _indented(text: str) -> str:
    return _safe(text).replace("\n", "\n" + " " * 26)


def _safe(text: str) -> str:
    return text.translate(_UNSAFE)


def _is_object(line: bytes) -> bool:
    try:
        return isinstance(orjson.loads(line), dict)
    except orjson.JSONDecodeError:
        return False


def _when(at: float | None) -> str:
    if at is None:
        return "-"
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M")


def _tokens(count: int) -> str:
    if count >= 1_000_000:
        return f"{count / 1_000_000:.1f}m"
    if count >= 1000:
        return f"{count / 1000:.1f}k"
    return str(count)


def _cost(cost: float | None) -> str:
    if cost is None:
        return "n/a"
    return f"${cost:.2f}" if cost >= 0.01 else f"${cost:.4f}"


def _out(text: str) -> None:
    print(text)


def _raw(line: bytes) -> None:
    sys.stdout.buffer.write(line)


def _flush() -> None:
    sys.stdout.flush()


def _err(text: str) -> None:
    print(f"herald: {_safe(text)}", file=sys.stderr)
