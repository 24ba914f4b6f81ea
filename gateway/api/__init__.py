"""The HTTP API: the route table, its handlers, and the models of what goes over the wire.

Only the wire models are exported here: the presenters of runs and sessions build them, and
importing the package must not pull in the handlers (which import those presenters).
"""

from gateway.shapes import (
    ERROR_CODES,
    Announce,
    Error,
    ErrorBody,
    ErrorCode,
    Health,
    History,
    InvokeResult,
    Message,
    Origin,
    Readiness,
    Run,
    RunChild,
    RunDetail,
    RunList,
    Session,
    SessionList,
    ToolCall,
    Usage,
)

__all__ = [
    "ERROR_CODES",
    "Announce",
    "Error",
    "ErrorBody",
    "ErrorCode",
    "Health",
    "History",
    "InvokeResult",
    "Message",
    "Origin",
    "Readiness",
    "Run",
    "RunChild",
    "RunDetail",
    "RunList",
    "Session",
    "SessionList",
    "ToolCall",
    "Usage",
]
