"""One JSON shape for every API error: ``{"error": {"code", "message", "field"?}}``.

``code`` is stable (clients branch on it); ``message`` is for people; ``field`` is the JSON
path of the offending input when there is one.
"""

from __future__ import annotations

from aiohttp import web


def json_error(status: int, code: str, message: str, *, field: str | None = None) -> web.Response:
    """An error response in the API's one shape."""
    body: dict[str, str] = {"code": code, "message": message}
    if field is not None:
        body["field"] = field
    return web.json_response({"error": body}, status=status)
