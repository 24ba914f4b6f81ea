"""Sessions: the state database's index and the transcript files, kept in step.

:class:`SessionStore` is what the runtime, the tools and the API use. A session is created
on first use (:meth:`SessionStore.ensure`): the transcript header is written first, then
the row is inserted, so a crash in between leaves at most an orphan file. Concurrent
``ensure`` calls for one key in this process share one creation. A sub-agent's session is
the exception: its row is written with its run (one transaction, the spawn's durable
record) and taken in with :meth:`SessionStore.adopt`; its transcript begins later, with its
first line. Whatever the session, no line is written before its header: the first append
of a session not known to have begun writes the header first if the file is missing.

Appends go through the process's :class:`TranscriptWriter` and return once queued (see
its module for the guarantees); readers here (:meth:`history`, :meth:`read`) first wait
for lines already queued, so they see their own writes. The database's ``updated_at``
moves with :meth:`add_usage`, :meth:`set_origin` and :meth:`touch`, not with every line.

Archiving and renewing live in :mod:`gateway.sessions.archiving`, windows and last
messages in :mod:`gateway.sessions.reading`; this class is their one door, so callers hold
one object and the row, the file and the refused appends stay in step.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Final, TypeVar

import orjson

from gateway.llm import ChatMessage, Usage
from gateway.sessions.archiving import Archiver, RetiredSessions
from gateway.sessions.conversations import ConversationReader
from gateway.sessions.errors import InvalidIdError, SessionArchivedError, SessionNotFoundError
from gateway.sessions.keys import SessionKey, SessionKind, new_session_id
from gateway.sessions.locate import Location, locate, location_of
from gateway.sessions.paths import transcript_path
from gateway.sessions.reading import Record, TranscriptReader, WindowStream
from gateway.sessions.transcript import (
    TranscriptContents,
    aread_transcript,
    encode_line,
    event_record,
    header_record,
    message_record,
)
from gateway.sessions.views import current_transcript_path, describe_session
from gateway.sessions.writer import TranscriptWriter
from gateway.state import Origin, SessionRecord, StateDB

log = logging.getLogger(__name__)
E = TypeVar("E")

#: Transcript paths remembered by session id: the active sessions' (each stat-free to rebuild).
_PATH_CACHE_SIZE: Final = 1024
#: Sessions remembered as begun (or adopted), each: more than are active at once; one that
#: falls out costs a stat at its next first line.
_BEGUN_KEPT: Final = 4096
#: Bytes read of a transcript's first line to tell whether it has begun (a header is ~250).
_FIRST_LINE_MAX: Final = 64 * 1024
DEFAULT_HISTORY_LIMIT: Final = 50
MAX_HISTORY_LIMIT: Final = 1000


class SessionStore:
    """Sessions of one state directory: index rows in ``db`` and transcripts on disk.

    ``writer`` defaults to a new :class:`TranscriptWriter` that :meth:`aclose` closes; a
    writer passed in belongs to the caller. ``replica_id`` names this process in the archive
    claims it makes (None: it is alone on its database). ``clock`` returns epoch seconds.
    """

    def __init__(
        self,
        state_dir: Path,
        db: StateDB,
        *,
        writer: TranscriptWriter | None = None,
        replica_id: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.db = db
        self.replica_id = replica_id
        self.writer = writer if writer is not None else TranscriptWriter(on_out_of_space=self._full)
        self._owns_writer = writer is None
        self._clock = clock
        self._creating: dict[str, asyncio.Task[SessionRecord]] = {}
        self._retired = RetiredSessions()
        self._paths: dict[str, Path] = {}
        # Session ids whose transcript has its header (this process wrote it or saw it), and
        # ids taken in by adopt() whose file is yet to be begun. Bounded: a session that
        # falls out is checked again (one stat) at its next first append.
        self._begun: OrderedDict[str, None] = OrderedDict()
        self._unwritten: OrderedDict[str, None] = OrderedDict()
        self._beginning: dict[str, asyncio.Task[None]] = {}
        self.reader = TranscriptReader()
        self.conversations = ConversationReader()
        self._archiver = Archiver(
            self.state_dir,
            db,
            self.writer,
            live_path=self.transcript_path,
            begun=lambda session_id: self._mark(self._begun, session_id),
            retired=self._retired,
            replica_id=replica_id,
            clock=clock,
        )

    def __repr__(self) -> str:
        return f"<SessionStore {self.state_dir} creating={len(self._creating)}>"

    def _full(self, error: OSError) -> None:
        # Transcripts live beside the database: one disk-full state for both.
        self.db.space.refused_threadsafe("transcript writer", error)

    # -- sessions ---------------------------------------------------------------------------

    async def ensure(
        self,
        key: str | SessionKey,
        *,
        agent_id: str | None = None,
        kind: SessionKind | None = None,
        parent_key: str | None = None,
        label: str | None = None,
        model: str | None = None,
        origin: Origin | None = None,
        fresh: bool = False,
    ) -> SessionRecord:
        """The session for ``key``, created (row and transcript header) on first use.

        ``fresh`` says the key was just made from a new UUID (a sub-agent's spawn): there is
        nothing to look up. The header is always waited for: a session whose first line
        failed (a full disk) must not exist, or later lines would form a headless file.

        ``agent_id`` and ``kind`` are taken from the key; when given they must agree with
        it. The other arguments only apply when the session is created. Raises
        :class:`SessionKeyError` for a malformed key.
        """
        parsed = key if isinstance(key, SessionKey) else SessionKey.parse(key)
        if agent_id is not None and agent_id != parsed.agent_id:
            raise InvalidIdError(f"agent id {agent_id!r} does not match key {parsed}")
        if kind is not None and kind != parsed.session_kind:
            raise InvalidIdError(f"kind {kind!r} does not match key {parsed}")
        if parent_key is not None:
            SessionKey.parse(parent_key)
        text = str(parsed)
        task = self._creating.get(text)
        if task is None and not fresh:
            record = await self.db.sessions.get(text)
            if record is not None:
                return record
            task = self._creating.get(text)  # another caller may have started meanwhile
        if task is None:
            task = asyncio.create_task(
                self._create(
                    parsed,
                    parent_key=parent_key,
                    label=label,
                    model=model,
                    origin=origin,
                    fresh=fresh,
                )
            )
            self._creating[text] = task
            task.add_done_callback(lambda t: self._creation_done(text, t))
        return await asyncio.shield(task)

    def _creation_done(self, key: str, task: asyncio.Task[SessionRecord]) -> None:
        self._creating.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved here, so a failure nobody awaited is not logged twice

    async def _create(
        self,
        key: SessionKey,
        *,
        parent_key: str | None,
        label: str | None,
        model: str | None,
        origin: Origin | None,
        fresh: bool,
    ) -> SessionRecord:
        if not fresh:
            # A caller whose lookup missed may get here just after another caller's creation
            # finished and left ``_creating``: look again now that no creation is in flight.
            existing = await self.db.sessions.get(str(key))
            if existing is not None:
                return existing
        record = self.new_record(
            key, parent_key=parent_key, label=label, model=model, origin=origin
        )
        path = self.transcript_path(record)
        await self.writer.append(path, self._header(record), wait=True)
        self._mark(self._begun, record.session_id)
        stored, created = await self.db.sessions.create(record)
        if created:
            log.info("session %s created (%s)", stored.key, stored.session_id)
        else:  # another process created it first; our header file is an orphan
            log.warning("session %s existed already; transcript %s removed", stored.key, path)
            await self.writer.release([path])
            path.unlink(missing_ok=True)
        return stored

    def new_record(
        self,
        key: SessionKey,
        *,
        parent_key: str | None = None,
        label: str | None = None,
        model: str | None = None,
        origin: Origin | None = None,
    ) -> SessionRecord:
        """A new session for ``key`` that nothing has recorded yet (no I/O): its row is the
        caller's to write (a spawn writes it with its run), then :meth:`adopt` it."""
        now = self._clock()
        return SessionRecord(
            key=str(key),
            session_id=new_session_id(),
            agent_id=key.agent_id,
            kind=key.session_kind,
            created_at=now,
            updated_at=now,
            parent_key=parent_key,
            label=label,
            model=model,
            origin=origin,
        )

    def adopt(self, record: SessionRecord) -> None:
        """Take in a session whose row the caller just committed (a spawn writes its run's
        session with the run). No I/O: its transcript begins with its first line or with
        :meth:`ensure_transcript`, off the caller's path."""
        self.db.sessions.remember(record)
        self._mark(self._unwritten, record.session_id)

    async def ensure_transcript(
        self, record: SessionRecord, *first: tuple[str, Mapping[str, Any]]
    ) -> None:
        """Begin ``record``'s transcript unless it has begun: a missing or empty file gets
        its header and then the ``first`` events (the header of a session :meth:`adopt`
        took in, or one a crash kept from the file). Waits for the header; raises the
        ``OSError`` of a write the disk refused. Every append calls it first, so no line
        is ever written before the header. Raises :class:`SessionArchivedError` for an
        archived session."""
        if record.session_id in self._begun:
            return
        if record.archived or record.session_id in self._retired:
            raise SessionArchivedError(record.key)  # no file may appear under its old name
        task = self._beginning.get(record.session_id)
        if task is None:
            task = asyncio.create_task(self._begin(record, first))
            self._beginning[record.session_id] = task
            task.add_done_callback(lambda _: self._beginning.pop(record.session_id, None))
        await asyncio.shield(task)

    async def _begin(
        self, record: SessionRecord, first: Sequence[tuple[str, Mapping[str, Any]]]
    ) -> None:
        path = self.transcript_path(record)
        known_new = self._unwritten.pop(record.session_id, False) is None
        if known_new or not await asyncio.to_thread(_has_first_line, path):
            # One chunk, one write(): the header never fails apart from the lines after it,
            # and none of this session's lines is queued before it is written.
            lines = [self._header(record)]
            lines += [event_record(name, data, at=record.created_at) for name, data in first]
            await self.writer.write(path, b"".join(encode_line(line) for line in lines), wait=True)
        self._mark(self._begun, record.session_id)

    def _mark(self, marks: OrderedDict[str, None], session_id: str) -> None:
        marks[session_id] = None
        while len(marks) > _BEGUN_KEPT:
            marks.popitem(last=False)

    def _header(self, record: SessionRecord) -> dict[str, Any]:
        return header_record(
            session_id=record.session_id,
            key=record.key,
            agent_id=record.agent_id,
            parent_key=record.parent_key,
            at=record.created_at,
        )

    async def get(self, key: str) -> SessionRecord | None:
        """The session with ``key`` (archived ones included), or None."""
        return await self.db.sessions.get(key)

    async def require(self, key: str) -> SessionRecord:
        """The session with ``key``, or :class:`SessionNotFoundError`."""
        record = await self.db.sessions.get(key)
        if record is None:
            raise SessionNotFoundError(key)
        return record

    async def get_by_id(self, session_id: str) -> SessionRecord | None:
        """The session with ``session_id`` (archived ones included), or None."""
        return await self.db.sessions.get_by_id(session_id)

    async def list(
        self,
        *,
        include_subagents: bool = False,
        include_archived: bool = False,
        agent_id: str | None = None,
        parent_key: str | None = None,
        limit: int | None = None,
    ) -> builtins.list[SessionRecord]:
        """Sessions, most recently updated first; sub-agent and archived ones only if asked."""
        return await self.db.sessions.list(
            include_subagents=include_subagents,
            include_archived=include_archived,
            agent_id=agent_id,
            parent_key=parent_key,
            limit=limit,
        )

    async def add_usage(
        self, key: str, usage: Usage, cost_usd: float | None = None, *, run_id: str | None = None
    ) -> SessionRecord:
        """Add a model call's usage (and cost, when priced) to the session's totals, and to
        those of the run ``run_id`` (the session's sub-agent run) in the same write."""
        return await self.db.sessions.add_usage(
            key, usage, cost_usd, at=self._clock(), run_id=run_id
        )

    async def set_origin(self, key: str, origin: Origin | None) -> SessionRecord:
        """Record the chat, channel and thread the session's replies go to."""
        return await self.db.sessions.set_origin(key, origin, at=self._clock())

    async def touch(self, key: str) -> SessionRecord:
        """Mark the session active now."""
        return await self.db.sessions.touch(key, at=self._clock())

    # -- transcripts ------------------------------------------------------------------------

    def transcript_path(self, record: SessionRecord) -> Path:
        """The live transcript path of ``record`` (where it is until archived)."""
        path = self._paths.get(record.session_id)
        if path is None:
            if len(self._paths) >= _PATH_CACHE_SIZE:
                self._paths.clear()
            path = transcript_path(self.state_dir, record.agent_id, record.session_id)
            self._paths[record.session_id] = path
        return path

    def current_path(self, record: SessionRecord) -> Path | None:
        """Where the transcript is now: the archived file, the live one, or None if gone."""
        return current_transcript_path(self.state_dir, record)

    async def locate(self, ref: str) -> Location:
        """The session a key, session id, run id or transcript path names, and where its
        transcript is now (see :func:`gateway.sessions.locate.locate`)."""
        return await locate(self.state_dir, self.db, ref)

    def location(self, record: SessionRecord, run_id: str | None = None) -> Location:
        """The :class:`Location` of a session already in hand."""
        return location_of(self.state_dir, record, run_id)

    async def append_message(
        self,
        session: SessionRecord,
        message: ChatMessage,
        *,
        model: str | None = None,
        usage: Usage | None = None,
        meta: Mapping[str, Any] | None = None,
        wait: bool = False,
    ) -> str:
        """Append a message line; returns its line id. ``model``/``usage`` annotate a reply,
        ``meta`` (e.g. ``{"kind": "subagent_completion", "runId": …}``) a written-in message.

        Usage totals are not touched here: call :meth:`add_usage` once per model call.
        """
        record = message_record(message, model=model, usage=usage, at=self._clock(), meta=meta)
        await self._append(session, record, wait)
        return str(record["id"])

    async def append_event(
        self,
        session: SessionRecord,
        name: str,
        data: Mapping[str, Any] | None = None,
        *,
        wait: bool = False,
    ) -> str:
        """Append an event line (``spawned``, ``announce``, ``status``, …); returns its id."""
        record = event_record(name, data, at=self._clock())
        await self._append(session, record, wait)
        return str(record["id"])

    async def _append(self, session: SessionRecord, record: dict[str, Any], wait: bool) -> None:
        if session.archived or session.session_id in self._retired:
            raise SessionArchivedError(session.key)
        if session.session_id not in self._begun:
            await self.ensure_transcript(session)
        await self.writer.append(self.transcript_path(session), record, wait=wait)

    async def sync(self, session: SessionRecord) -> None:
        """Wait for the lines queued for ``session``; raise the ``OSError`` of a failed one."""
        await self.writer.sync(self.transcript_path(session))

    async def flush(self) -> None:
        """Wait for every queued line; raise :class:`TranscriptWriteError` for failed ones."""
        await self.writer.flush()

    async def read(self, key: str) -> TranscriptContents:
        """The whole transcript of ``key`` (archived or live). A missing file reads empty."""
        record = await self.require(key)
        path = self.current_path(record)
        await self.writer.flush(report=False)
        if path is None:
            return TranscriptContents([])
        try:
            return await aread_transcript(path)
        except FileNotFoundError:
            return TranscriptContents([])

    async def history(
        self, key: str, *, limit: int = DEFAULT_HISTORY_LIMIT, include_tools: bool = False
    ) -> builtins.list[dict[str, Any]]:
        """The last ``limit`` messages of a session, oldest first, as JSON objects.

        Each is ``{"id","timestamp","role","content",…}`` with the message's optional keys.
        A compaction's summary is no message anyone wrote, so it is left out. Without
        ``include_tools``, tool results are left out, tool calls are stripped from
        assistant messages, and assistant messages that only called tools are dropped.
        """
        if not 1 <= limit <= MAX_HISTORY_LIMIT:
            raise ValueError(f"limit must be between 1 and {MAX_HISTORY_LIMIT}")
        record = await self.require(key)
        path = self.current_path(record)
        await self.writer.flush(report=False)
        if path is None:
            return []
        return await self.reader.last_messages(path, limit=limit, include_tools=include_tools)

    def window(
        self,
        record: SessionRecord,
        *,
        limit: int,
        before: int | None = None,
        encode: Callable[[Record | None, bytes], E],
    ) -> AbstractAsyncContextManager[WindowStream[E]]:
        """Records of ``record``'s transcript (archived or live), read from where they are:
        the last ``limit`` before record ``before`` (default: the end), each passed through
        ``encode`` (with its bytes) in a worker thread, in batches (see
        :mod:`gateway.sessions.reading`). Call :meth:`flush_quietly` first to see lines
        still queued."""
        path = self.current_path(record) or self.transcript_path(record)
        return self.reader.open_window(path, limit=limit, before=before, encode=encode)

    async def flush_quietly(self) -> None:
        """Wait for every queued line, failed ones not raised (a reader's wait)."""
        await self.writer.flush(report=False)

    async def chat_messages(self, key: str) -> builtins.list[ChatMessage]:
        """The session's conversation for the model (dangling tool calls closed), read from
        its transcript at the cost of what was written since the last read of it."""
        record = await self.require(key)
        path = self.current_path(record)
        await self.writer.flush(report=False)
        if path is None:
            return []
        try:
            return await asyncio.to_thread(self.conversations.read, path)
        except FileNotFoundError:
            return []

    # -- archive (see gateway.sessions.archiving) -----------------------------------------

    async def archive(self, key: str) -> Path | None:
        """Archive one session; return the archived path (None if the file was gone).

        Safe to call twice. Raises :class:`SessionNotFoundError` for an unknown key and the
        ``OSError`` of a rename that failed for another reason than a missing file.
        """
        return await self._archiver.archive(await self.require(key))

    async def archive_many(self, keys: Iterable[str]) -> dict[str, Path | None]:
        """Archive many sessions in one pass (one rename sweep, one transaction).

        Returns the archived path (or None) of every key now archived; unknown keys and
        failed renames are logged and left out.
        """
        return await self._archiver.archive_many(keys)

    async def archive_due(self, now: float | None = None) -> dict[str, Path | None]:
        """Archive every session whose archive time has come (one pass, as
        :meth:`archive_many`); returns the archived path (or None) by key."""
        return await self._archiver.archive_due(now)

    async def heal_archive_claims(
        self, *, own: bool = True, cutoff: float | None = None
    ) -> dict[str, Path | None]:
        """Archive again the sessions whose archive was claimed but never recorded: with
        ``own``, this replica's claims (at start: from before it), with ``cutoff``, those of
        replicas dead at it; alone on the database (no ``replica_id``), every claim. A
        rename that did happen is found beside the live name and recorded. Returns what it
        archived."""
        return await self._archiver.heal_archive_claims(own=own, cutoff=cutoff)

    async def renew(self, key: str) -> Path | None:
        """A fresh session for ``key`` (``/new``): a new session id and transcript, the old
        transcript archived by rename. Returns the archived path (None if the old file was
        gone or could not be renamed: it is logged and left in place).

        The new header is written first and the row switched next, so a crash leaves the old
        session whole, or the new one beside an old file not yet renamed: nothing is lost.
        Lines already queued for the old session are written before the rename; appends
        through a record from before the switch are refused once it happens. The row keeps
        the chat's key, origin and usage totals. Raises :class:`SessionNotFoundError` and
        :class:`SessionArchivedError`.
        """
        return await self._archiver.renew(await self.require(key))

    # -- views ------------------------------------------------------------------------------

    def describe(self, record: SessionRecord) -> dict[str, Any]:
        """The JSON shape of a session for the API, the CLI and the session tools."""
        return describe_session(record, self.current_path(record))

    async def aclose(self) -> None:
        """Write everything queued; close the writer if this store made it. Idempotent."""
        if self._owns_writer:
            await self.writer.aclose()


def _has_first_line(path: Path) -> bool:
    """Whether ``path`` has a whole first line (a missing file, an empty one or a torn first
    line — which the writer cuts before its next write — have none)."""
    try:
        with path.open("rb") as file:
            head = file.readline(_FIRST_LINE_MAX)
    except FileNotFoundError:
        return False
    if head.endswith(b"\n") or len(head) >= _FIRST_LINE_MAX:
        return True
    try:  # a whole object without its newline: the writer's repair keeps it
        return isinstance(orjson.loads(head), dict)
    except orjson.JSONDecodeError:
        return False
