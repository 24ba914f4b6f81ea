"""``GET /v1/sessions`` and ``GET /v1/sessions/{sessionKey}/history`` (DESIGN §9).

``GET /v1/sessions?includeSubagents=&includeArchived=`` → ``{"sessions": [session, …]}``,
most recently updated first, each in :func:`gateway.sessions.describe_session`'s shape.

``GET /v1/sessions/{sessionKey}/history?limit=&includeTools=`` →
``{"sessionKey", "sessionId", "archived", "messages": [message, …]}`` with the last
``limit`` (1..1000, default 50) messages, oldest first (see
:meth:`SessionStore.history`); archived sessions answer too. Session keys contain ``:``,
which is legal in a path segment; a percent-encoded key (``agent%3Amain%3Amain``) is
decoded by the router. Booleans are ``true``/``false``/``1``/``0``. Errors use the API's
one shape: a bad query value → 400 ``invalid_parameter`` naming the field, a malformed key
→ 400 ``invalid_session_key``, an unknown key → 404 ``session_not_found``.
"""

from __future__ import annotations

from aiohttp import web

from gateway.api.errors import json_error
from gateway.api.keys import SESSION_STORE
from gateway.sessions import DEFAULT_HISTORY_LIMIT, MAX_HISTORY_LIMIT, SessionKey, SessionKeyError

_TRUE = frozenset({"true", "1"})
_FALSE = frozenset({"false", "0"})


class _BadParameterError(Exception):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


def _flag(request: web.Request, name: str, default: bool = False) -> bool:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise _BadParameterError(name, f"{name} must be true or false")


def _limit(request: web.Request) -> int:
    raw = request.query.get("limit")
    if raw is None or raw == "":
        return DEFAULT_HISTORY_LIMIT
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_HISTORY_LIMIT:
        raise _BadParameterError("limit", f"limit must be an integer from 1 to {MAX_HISTORY_LIMIT}")
    return value


def _bad(exc: _BadParameterError) -> web.Response:
    return json_error(400, "invalid_parameter", str(exc), field=exc.name)


def session_routes() -> list[web.RouteDef]:
    """The session routes; they read the store the app holds under ``SESSION_STORE``."""

    async def list_sessions(request: web.Request) -> web.Response:
        store = request.app[SESSION_STORE]
        try:
            include_subagents = _flag(request, "includeSubagents")
            include_archived = _flag(request, "includeArchived")
        except _BadParameterError as exc:
            return _bad(exc)
        records = await store.list(
            include_subagents=include_subagents, include_archived=include_archived
        )
        return web.json_response({"sessions": [store.describe(r) for r in records]})

    async def history(request: web.Request) -> web.Response:
        store = request.app[SESSION_STORE]
        raw_key = request.match_info["sessionKey"]
        try:
            key = str(SessionKey.parse(raw_key))
        except SessionKeyError as exc:
            return json_error(400, "invalid_session_key", exc.reason, field="sessionKey")
        try:
            limit = _limit(request)
            include_tools = _flag(request, "includeTools")
        except _BadParameterError as exc:
            return _bad(exc)
        record = await store.get(key)
        if record is None:
            return json_error(404, "session_not_found", f"no session {key}", field="sessionKey")
        messages = await store.history(key, limit=limit, include_tools=include_tools)
        return web.json_response(
            {
                "sessionKey": record.key,
                "sessionId": record.session_id,
                "archived": record.archived,
                "messages": messages,
            }
        )

    return [
        web.get("/v1/sessions", list_sessions),
        web.get("/v1/sessions/{sessionKey}/history", history),
    ]
