"""The order the gateway's parts start in: one aiohttp ``cleanup_ctx`` setup each, owned by
the part or capability it builds (which also owns the part's key); teardown runs in
reverse by itself::

    state (database, sessions) → cluster (session locks, heartbeat; in a cluster only)
      → providers → tools and agent turns → MCP servers → lanes → archive → outbox
      → sub-agents → chat → channels (connect; then deliveries and recovery start)
      → schedules

A reload reaches each part through its own subscription, made in its setup. A clean stop is
:func:`gateway.runtime.setup.drain`, an ``on_shutdown`` hook that runs before any teardown
while every channel is still connected.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from gateway.mcp.setup import mcp_setup
from gateway.parts.agent import agent_setup, providers_setup
from gateway.parts.cluster import cluster_setup
from gateway.parts.delivery import archive_setup, outbox_setup
from gateway.parts.lanes import lanes_setup
from gateway.parts.state import state_setup
from gateway.runtime.setup import channels_setup, chat_setup
from gateway.schedules.setup import bookkeeping_setup, schedules_setup
from gateway.subagents.setup import subagents_setup

#: A resource: an async generator that sets up before ``yield`` and tears down after.
Resource = Callable[[web.Application], AsyncIterator[None]]


async def _frozen_heap(app: web.Application) -> AsyncIterator[None]:
    """Exempt what start-up built from the collector while the gateway runs.

    Modules, settings, schemas, routes and every resource live as long as the process, yet
    each full collection would walk them again; with thousands of runs queued such a
    collection paused the event loop for tens of milliseconds (the spawn benchmark's p99).
    Unfrozen at teardown, so a process that builds many apps (the tests) leaks nothing.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


#: Every resource, in start-up order.
RESOURCES: tuple[Resource, ...] = (
    state_setup,
    cluster_setup,
    providers_setup,
    agent_setup,
    mcp_setup,
    lanes_setup,
    archive_setup,
    outbox_setup,
    bookkeeping_setup,
    subagents_setup,
    chat_setup,
    channels_setup,
    schedules_setup,
    _frozen_heap,
)
