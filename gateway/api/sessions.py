"""``GET /v1/sessions``, ``GET /v1/sessions/{sessionKey}/history`` and ``…/transcript``.

``GET /v1/sessions`` answers the sessions most recently updated first, each in
:func:`gateway.sessions.session_view`'s shape. ``GET /v1/sessions/{sessionKey}/history``
answers the last ``limit`` messages, oldest first (see :meth:`SessionStore.history`);
archived sessions answer too, with ``archivedAt`` and ``transcriptPath`` where the
transcript is now. The segment may also be the session's id, a run's id or a transcript's
file name, live or archived (:meth:`SessionStore.locate`): a stats line copied before the
archive still finds the session. Session keys contain ``:``, which is legal in a path
segment; a percent-encoded key (``agent%3Amain%3Amain``) is decoded by the router.
``GET /v1/sessions/{sessionKey}/transcript`` answers the transcript's records as written
(header, messages with their tool calls, results and usage, events), a window of at most
``limit`` of them ending before ``before``. Archived sessions answer too; the file is the
one the session's row names, never a path made from the request. The window is read from
where it lies in the file and streamed a batch at a time (:mod:`gateway.sessions.reading`),
so a request costs what it returns however long the transcript; ``badLines`` (the
window's lines that did not parse, each an ``unknown`` record in place) comes last.

Requests arrive validated (:mod:`gateway.api.requests`): a bad query value is 400
``invalid_parameter``, a malformed key 400 ``invalid_session_key``; an unknown key is 404
``session_not_found`` here.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Iterable
from typing import Any

import orjson
from aiohttp import web
from pydantic import ValidationError

from gateway.api.errors import json_error
from gateway.api.requests import HistoryParams, SessionsQuery, TranscriptParams
from gateway.api.routing import reply
from gateway.parts.state import SESSION_STORE
from gateway.sessions import SessionNotFoundError, SessionRefError, session_view
from gateway.shapes import History, Message, SessionList, TranscriptRecord

logger = logging.getLogger(__name__)


async def list_sessions(request: web.Request, query: SessionsQuery) -> web.Response:
    store = request.app[SESSION_STORE]
    records = await store.list(
        include_subagents=query.include_subagents, include_archived=query.include_archived
    )
    # Each title reads the head of its transcript: off the event loop, all in one hop.
    views = await asyncio.to_thread(
        lambda: [session_view(r, store.current_path(r)) for r in records]
    )
    return reply(SessionList(sessions=views))


async def history(request: web.Request, params: HistoryParams) -> web.Response:
    store = request.app[SESSION_STORE]
    ref = params.session_key
    try:
        where = await store.locate(ref)
    except SessionNotFoundError:
        return json_error(404, "session_not_found", f"no session {ref}", field="sessionKey")
    except SessionRefError as exc:  # a path's folder outside the state directory
        return json_error(400, "invalid_session_key", exc.reason, field="sessionKey")
    record = where.session
    lines = await store.history(record.key, limit=params.limit, include_tools=params.include_tools)
    return reply(
        History(
            session_key=record.key,
            session_id=record.session_id,
            archived=record.archived,
            archived_at=where.archived_at,
            transcript_path=str(where.path) if where.path is not None else None,
            messages=list(_messages(record.key, lines)),
        )
    )


async def transcript(request: web.Request, params: TranscriptParams) -> web.StreamResponse:
    store = request.app[SESSION_STORE]
    key = str(params.session_key)
    record = await store.get(key)
    if record is None:
        return json_error(404, "session_not_found", f"no session {key}", field="sessionKey")
    await store.flush_quietly()
    encode = functools.partial(_encode_record, key)
    async with store.window(
        record, limit=params.limit, before=params.before, encode=encode
    ) as window:
        span = window.span
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        head = {
            "session": session_view(record, store.current_path(record)).wire(),
            "start": span.start,
            "total": span.total,
            "tornBytes": span.torn_bytes,
        }
        # The object is written as it is read: its head, each batch of records, the tail.
        await response.write(orjson.dumps(head)[:-1] + b',"records":[')
        separator = b""
        async for batch in window.batches():
            if batch:
                await response.write(separator + b",".join(batch))
                separator = b","
        await response.write(b'],"badLines":' + orjson.dumps(span.bad_lines) + b"}")
    await response.write_eof()
    return response


def _encode_record(key: str, line: dict[str, Any] | None, raw: bytes) -> bytes:
    # Runs in the reader's worker thread. Gateway-written lines always fit and go out as
    # written; one edited by hand that does not (no "type", a number for an id) is passed
    # on whole as an "unknown" record, and one that did not parse as an empty "unknown",
    # so the window keeps its indices and the reader sees the line rather than a gap.
    if line is None:
        return b'{"type":"unknown"}'
    try:
        TranscriptRecord.model_validate(line)
    except ValidationError:
        logger.warning("transcript: a line of an unknown shape", extra={"session_key": key})
        return TranscriptRecord(type="unknown", line=line).wire_json().encode()
    return raw


def _messages(key: str, lines: Iterable[dict[str, Any]]) -> Iterable[Message]:
    # Gateway-written lines always fit; one edited by hand may not, and is skipped like
    # a line that does not parse, rather than failing the whole history.
    for line in lines:
        try:
            yield Message.model_validate(line)
        except ValidationError as exc:
            logger.warning(
                "history: skipping a message that does not fit the API's shape",
                extra={"session_key": key, "error": str(exc)},
            )
