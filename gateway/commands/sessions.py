"""``herald sessions list|show`` and ``herald transcripts show``.

They read the configured state database read-only (SQLite's ``<stateDir>/herald.db``, WAL:
safe while the daemon runs; or PostgreSQL) and the transcript files, and print readable
text, or JSON with ``--json``. ``sessions show`` and ``transcripts show`` take any reference
to a session — its key, its id, a run's id or a transcript path, stale or not — and find it
in the state directory, archived sessions included (:func:`gateway.sessions.locate`); an
archived one is noted on stderr with when it was archived and where its transcript is now.
A path is matched by the session id in its file name, never opened as given. Text from
chats is printed with control characters escaped, so a transcript cannot drive the
operator's terminal. With ``--follow`` ``transcripts show`` keeps printing the lines a live
session writes (:mod:`gateway.commands.follow`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from gateway.commands.follow import follow
from gateway.commands.reading import (
    CONFIG_HELP,
    StateSource,
    err,
    locate_ref,
    origin_text,
    safe,
    state_source,
    when,
    with_db,
)
from gateway.sessions import (
    REF_FORMS,
    Location,
    current_transcript_path,
    describe_session,
    parse_transcript,
)
from gateway.sessions.titles import read_head, session_title
from gateway.state import SessionRecord, StateDB, StateError, StateMissingError


def add_commands(subparsers: Any) -> None:
    """Register ``sessions`` (list, show) and ``transcripts`` (show)."""
    sessions = subparsers.add_parser("sessions", help="list and inspect sessions")
    sub = sessions.add_subparsers(dest="sessions_command", metavar="SUBCOMMAND", required=True)
    listing = sub.add_parser("list", help="list sessions (sub-agent sessions with --all)")
    listing.add_argument("--all", action="store_true", help="include sub-agent sessions")
    listing.add_argument("--archived", action="store_true", help="include archived sessions")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.add_argument("--config", "-c", help=CONFIG_HELP)
    listing.set_defaults(func=sessions_list)
    show = sub.add_parser("show", help="show one session")
    show.add_argument("ref", metavar="SESSION", help=f"{REF_FORMS}, e.g. agent:main:main")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.add_argument("--config", "-c", help=CONFIG_HELP)
    show.set_defaults(func=sessions_show)

    transcripts = subparsers.add_parser("transcripts", help="read transcripts")
    tsub = transcripts.add_subparsers(
        dest="transcripts_command", metavar="SUBCOMMAND", required=True
    )
    tshow = tsub.add_parser(
        "show", help="print a session's transcript, found in the state directory"
    )
    tshow.add_argument(
        "target", metavar="SESSION", help=f"{REF_FORMS} (archived or not: it is found)"
    )
    tshow.add_argument("--json", action="store_true", help="print the raw JSON lines")
    tshow.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="then print lines as they are written, until the session is archived or Ctrl-C",
    )
    tshow.add_argument("--config", "-c", help=CONFIG_HELP)
    tshow.set_defaults(func=transcripts_show)


# -- commands ---------------------------------------------------------------------------------


def sessions_list(args: argparse.Namespace) -> int:
    """``herald sessions list [--all] [--archived] [--json]``."""
    source = state_source(args)

    async def query(db: StateDB) -> list[SessionRecord]:
        return await db.sessions.list(include_subagents=args.all, include_archived=args.archived)

    try:
        records = with_db(source, query)
    except StateMissingError:
        records = []
    except StateError as exc:
        err(str(exc))
        return 1
    if args.json:
        items = [describe_session(r, current_transcript_path(source.state_dir, r)) for r in records]
        _out(orjson.dumps({"sessions": items}, option=orjson.OPT_INDENT_2).decode())
        return 0
    _out(source.heading())
    if not records:
        _out("No sessions.")
        return 0
    # The title last: it has spaces and any length, the columns before it line up.
    rows = [["KEY", "KIND", "MODEL", "UPDATED", "TOKENS", "COST"]]
    if args.archived:
        rows[0].append("ARCHIVED")
    rows[0].append("TITLE")
    for r in records:
        head = read_head(current_transcript_path(source.state_dir, r))
        title = session_title(r, head)
        model = r.model or head.model or "-"
        row = [r.key, r.kind, model, when(r.updated_at), _tokens(r.usage.total)]
        row.append(_cost(r.cost_usd))
        if args.archived:
            row.append(when(r.archived_at) if r.archived_at else "-")
        row.append(title)
        rows.append(row)
    widths = [max(len(safe(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        _out("  ".join(safe(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def sessions_show(args: argparse.Namespace) -> int:
    """``herald sessions show <session> [--json]``."""
    source = state_source(args)
    found = locate_ref(source, args.ref)
    if found is None:
        return 1
    record = found.session
    info = describe_session(record, found.path)
    if args.json:
        _out(orjson.dumps(info, option=orjson.OPT_INDENT_2).decode())
        return 0
    usage = record.usage
    fields = [
        ("title", info["title"]),
        ("key", record.key),
        ("session id", record.session_id),
        ("agent", record.agent_id),
        ("kind", record.kind),
        ("parent", record.parent_key or "-"),
        ("label", record.label or "-"),
        ("model", info["model"] or "-"),
        ("origin", origin_text(record.origin)),
        ("created", info["createdAt"]),
        ("updated", info["updatedAt"]),
        (
            "usage",
            f"in {usage.input} / out {usage.output} (total {usage.total}); "
            f"cache read {usage.cache_read}, cache write {usage.cache_write}",
        ),
        ("cost", _cost(record.cost_usd)),
        ("archive due", info["archiveDueAt"] or "-"),
        ("archived", f"at {found.archived_at}" if found.archived_at else "no"),
        ("transcript", info["transcriptPath"] or "(gone)"),
    ]
    for name, value in fields:
        _out(f"{name:<12} {safe(str(value))}")
    return 0


def transcripts_show(args: argparse.Namespace) -> int:
    """``herald transcripts show <session> [--json] [--follow]``."""
    found = _transcript(state_source(args), args.target)
    if found is None or found.path is None:
        return 1
    path = found.path
    if args.follow:
        return follow(path, raw=_raw if args.json else None, show=_render, warn=err, flush=_flush)
    try:
        data = path.read_bytes()
    except OSError as exc:
        err(f"cannot read {path}: {exc.strerror or exc}")
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
        err(f"warning: {path}: unreadable lines skipped: {list(contents.bad_lines)}")
    if contents.torn_bytes:
        err(f"warning: {path}: torn last line ({contents.torn_bytes} bytes) not shown")
    return 0


# -- helpers ----------------------------------------------------------------------------------


def _transcript(source: StateSource, ref: str) -> Location | None:
    """The located session of ``ref`` with a transcript to read; says on stderr when it was
    archived (stdout stays the transcript alone) or why there is nothing to read."""
    found = locate_ref(source, ref)
    if found is None:
        return None
    note = found.note()
    if note is not None:
        err(note)
    return found


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
            _out(f"{'':24}  → {call.get('name')}({call.get('id')}) {safe(args)}")


def _indented(text: str) -> str:
    return safe(text).replace("\n", "\n" + " " * 26)


def _is_object(line: bytes) -> bool:
    try:
        return isinstance(orjson.loads(line), dict)
    except orjson.JSONDecodeError:
        return False


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
