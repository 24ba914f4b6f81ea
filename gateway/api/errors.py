"""One JSON shape for every API error: ``{"error": {"code", "message", "field"?}}``.

``code`` is stable (clients branch on it; :data:`gateway.shapes.ErrorCode` lists every
one); ``message`` is for people; ``field`` is the JSON path of the offending input when
there is one.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler

from gateway.shapes import Error, ErrorBody, ErrorCode


def json_error(
    status: int, code: ErrorCode, message: str, *, field: str | None = None
) -> web.Response:
    """An error response in the API's one shape."""
    # ``field`` is left out, not null, when no input is to blame: set it only when given.
    located = {} if field is None else {"field": field}
    body = ErrorBody(code=code, message=message, **located)
    return web.Response(
        text=Error(error=body).wire_json(), status=status, content_type="application/json"
    )


#: ``code`` of aiohttp's own answers (no route, wrong method, body too large).
HTTP_CODES: Final[dict[int, ErrorCode]] = {
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
}


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
