"""Every path the gateway serves besides its MCP endpoint, in one place: the route table's
(:data:`~gateway.api.routes.ROUTES`), the web chat's page, assets and socket, and Slack's
events URL; which of them need no token; and whether a path chosen for the MCP endpoint
(``mcp.serve.path``) would share one of them.

The channels' routes are listed whether or not their channel is enabled: a path that is free
only while the web chat is off would be taken the day it is turned on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from channels.slack.constants import EVENTS_PATH
from channels.webchat.channel import PAGE_PATH, SOCKET_PATH, STATIC_PREFIX
from gateway.api.routes import ROUTES


@dataclass(frozen=True, slots=True)
class Served:
    """One path (or a tree of paths) the gateway serves itself."""

    path: str
    #: What people call it, for a message naming it.
    what: str
    #: Served without the bearer token (probes, the web chat's page and assets, Slack).
    public: bool
    #: Every path under ``path`` (which ends in ``/``) is served, not ``path`` alone.
    tree: bool = False

    @property
    def segment(self) -> str:
        """Its first path segment ("" for ``/``): a path sharing it is under this route."""
        return first_segment(self.path)


#: The channels' routes on the gateway's app (they add them themselves).
CHANNEL_PATHS: Final = (
    Served(PAGE_PATH, "the web chat's page", public=True),
    Served(STATIC_PREFIX, "the web chat's assets", public=True, tree=True),
    Served(SOCKET_PATH, "the web chat's socket", public=False),
    Served(EVENTS_PATH, "Slack's events URL", public=True),
)

SERVED: Final = (
    *(Served(r.path, r.operation_id, r.public) for r in ROUTES),
    *CHANNEL_PATHS,
)

PUBLIC_PATHS: Final = frozenset(s.path for s in SERVED if s.public and not s.tree)
PUBLIC_PREFIXES: Final = tuple(s.path for s in SERVED if s.public and s.tree)


def first_segment(path: str) -> str:
    """``/v1/runs`` → ``v1``; ``/`` → ``""``."""
    return path.removeprefix("/").partition("/")[0]


def is_public(path: str) -> bool:
    """Whether a request for ``path`` needs no token (the MCP endpoint always needs it)."""
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


def mcp_path_problem(path: str) -> str | None:
    """Why ``path`` cannot be the MCP endpoint's, or None: it must not share its first
    segment with a route of the gateway, so that neither can answer for the other (and no
    future route under ``/v1/`` or ``/static/`` can land on it)."""
    segment = first_segment(path)
    for served in SERVED:
        if served.segment == segment:
            return (
                f"{path!r} collides with the gateway's own route {served.path} "
                f"({served.what}): give the MCP endpoint a first path segment of its own, "
                "e.g. /mcp"
            )
    return None
