"""One JSON shape for every API error: ``{"error": {"code", "message", "field"?}}``.

``code`` is stable (clients branch on it); ``message`` is for people; ``field`` is the JSON
path of the offending input when there is one.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler


def json_error(status: int, code: str, message: str, *, field: str | None = None) -> web.Response:
    """An error response in the API's one shape."""
    body: dict[str, str] = {"code": code, "message": message}
    if field is not None:
        body["field"] = field
    return web.json_response({"error": body}, status=status)


#: ``code`` of aiohttp's own answers (no route, wrong method, body too large).
HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn aiohttp's plain-text 4xx answers into the API's one error shape."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.status not in HTTP_CODES:
            raise
        response = json_error(exc.status, HTTP_CODES[exc.status], exc.reason)
        if "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]
        return response
