"""One MCP server's client session for the gateway's whole life: started, watched,
restarted with backoff, its tools published as they change.

Each connection runs in one task of its own that holds the SDK's contexts (they must be
entered and left in the same task) while any number of turns call tools on the session
concurrently. A server that fails to start, exits or breaks its connection is restarted
after a backoff; meanwhile its tools are withdrawn, so a turn sees the tools of the moment.
The backoff waited is the one the log gives (only a stop ends it early), and it grows until
the server has stayed ready for :data:`STABLE_SECONDS`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from enum import StrEnum
from typing import Any, Final, TextIO

from mcp import ClientSession, types
from mcp.client.session import IncomingMessage
from mcp.shared.exceptions import MCPError

from gateway.backoff import backoff
from gateway.mcp.lines import MAX_MESSAGE_BYTES
from gateway.mcp.transport import (
    describe_failure,
    list_all_tools,
    listing_seconds,
    open_session,
    server_secrets,
)
from gateway.schema.mcp import McpServerConfig

logger = logging.getLogger(__name__)

#: Restart delays: a crashing server is retried quickly at first, then once a minute.
RESTART_BASE_SECONDS: Final = 1.0
RESTART_CAP_SECONDS: Final = 60.0
#: A server must stay ready this long for its next failure to count as a first one again:
#: one that gets ready and exits at once would otherwise be restarted every second.
STABLE_SECONDS: Final = 60.0
#: How long a stopping connection may take to close its session before it is cancelled.
STOP_SECONDS: Final = 5.0
#: An idle session is pinged this often: an HTTP server that went away says nothing until
#: asked (a stdio server's exit is seen at once, on its closed stdout).
PING_SECONDS: Final = 30.0


class ServerState(StrEnum):
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    STOPPED = "stopped"


#: Where each state may go: a failed server is started again (or stopped), never made
#: ready without a new start.
TRANSITIONS: Final[dict[ServerState, frozenset[ServerState]]] = {
    ServerState.STOPPED: frozenset({ServerState.STARTING}),
    ServerState.STARTING: frozenset({ServerState.READY, ServerState.FAILED, ServerState.STOPPED}),
    ServerState.READY: frozenset({ServerState.FAILED, ServerState.STOPPED}),
    ServerState.FAILED: frozenset({ServerState.STARTING, ServerState.STOPPED}),
}


class McpCallError(Exception):
    """A tool call that got no result: the server is down, timed out or refused it.
    The message names the server and is fit for the model; ``outcome`` is ``timeout``
    (the call was cancelled) or ``failed``."""

    def __init__(self, message: str, *, outcome: str = "failed") -> None:
        super().__init__(message)
        self.outcome = outcome


#: Told of a server's tools each time they change (an empty list: withdrawn).
ToolsListener = Callable[[str, Sequence[types.Tool]], None]
#: Told of each state change (for ``/metrics``).
StateListener = Callable[[str, ServerState], None]


class ServerConnection:
    """The gateway's one client session with server ``name`` (see the module doc)."""

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        *,
        on_tools: ToolsListener,
        on_state: StateListener = lambda _name, _state: None,
        errlog: Callable[[], TextIO | None] = lambda: None,
        environ: Mapping[str, str] = os.environ,
        restart_base: float = RESTART_BASE_SECONDS,
        restart_cap: float = RESTART_CAP_SECONDS,
        ping_seconds: float = PING_SECONDS,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.config = config
        self._on_tools = on_tools
        self._on_state = on_state
        self._errlog = errlog
        self._environ = environ
        self._restart_base = restart_base
        self._restart_cap = restart_cap
        self._ping_seconds = ping_seconds
        self._max_message_bytes = max_message_bytes
        #: The restart backoff waits with these (a test gives a clock of its own).
        self._sleep = sleep
        self._clock = clock
        self.state = ServerState.STOPPED
        #: Why the server last failed ("" while it never did).
        self.error = ""
        self.tools: tuple[types.Tool, ...] = ()
        self.restarts = 0
        self._session: ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stopping = False
        self._stopped = asyncio.Event()  # set by stop(): ends a backoff's wait early
        self._ended = False
        self._broken = False
        self._refresh = False
        self._settled = asyncio.Event()  # the first attempt has succeeded or failed

    def __repr__(self) -> str:
        return f"<ServerConnection {self.name} {self.state} tools={len(self.tools)}>"

    def status(self) -> str:
        """``ready``, ``starting``, ``stopped`` or ``failed: <reason>`` (for ``/readyz``)."""
        if self.state is ServerState.FAILED:
            return f"failed: {self.error}"
        return str(self.state)

    def start(self) -> None:
        """Begin connecting in the background (idempotent)."""
        if self._task is None:
            self._stopping = False
            self._stopped.clear()
            self._task = asyncio.create_task(self._run(), name=f"mcp:{self.name}")

    async def settled(self) -> None:
        """Wait until the first attempt to connect has succeeded or failed."""
        await self._settled.wait()

    async def stop(self) -> None:
        """Close the session (a stdio server's process ends with it); idempotent."""
        self._stopping = True
        self._stopped.set()
        self._wake.set()
        task, self._task = self._task, None
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), STOP_SECONDS)
        except TimeoutError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        except asyncio.CancelledError:
            task.cancel()
            raise
        self._set_state(ServerState.STOPPED)

    async def call(
        self, tool: str, arguments: dict[str, Any], *, limit_seconds: float | None = None
    ) -> types.CallToolResult:
        """Call ``tool``; at most ``limit_seconds`` (default the server's
        ``timeoutSeconds``) seconds, then the request is cancelled the MCP way
        (``notifications/cancelled``).

        Raises :class:`McpCallError` when no result came.
        """
        session = self._session
        if session is None or self.state is not ServerState.READY:
            why = f" ({self.error})" if self.error else ""
            raise McpCallError(f"MCP server {self.name!r} is not connected: {self.state}{why}")
        limit = limit_seconds if limit_seconds is not None else self.config.timeout_seconds
        try:
            return await session.call_tool(tool, arguments, read_timeout_seconds=limit)
        except MCPError as exc:
            if exc.code == types.REQUEST_TIMEOUT:
                raise McpCallError(
                    f"MCP server {self.name!r}: {tool} took longer than {limit:g}s and was "
                    "cancelled",
                    outcome="timeout",
                ) from None
            if exc.code == types.CONNECTION_CLOSED:
                self._mark_broken()
                raise McpCallError(
                    f"MCP server {self.name!r} closed the connection during the call; "
                    "it is being restarted"
                ) from None
            raise McpCallError(f"MCP server {self.name!r}: {exc.message}") from None
        except (OSError, EOFError, RuntimeError) as exc:
            self._mark_broken()
            reason = describe_failure(exc, server_secrets(self.config))
            raise McpCallError(f"MCP server {self.name!r} failed: {reason}") from None

    # -- the connection's own task ------------------------------------------------------

    async def _run(self) -> None:
        attempt = 0
        while not self._stopping:
            self._set_state(ServerState.STARTING)
            ready_at: float | None = None
            try:
                ready_at = await self._attempt()
                reason = "the server closed the connection"
            except asyncio.CancelledError:
                self._withdraw()
                raise
            except BaseException as exc:  # anyio raises groups; all mean "not connected"
                if not isinstance(exc, Exception | BaseExceptionGroup):
                    raise
                reason = describe_failure(exc, server_secrets(self.config))
            self._withdraw()
            if self._stopping:
                break
            stable = ready_at is not None and self._clock() - ready_at >= STABLE_SECONDS
            attempt = 1 if stable else attempt + 1
            self.error = reason
            self.restarts += 1
            self._set_state(ServerState.FAILED)
            self._settled.set()
            delay = backoff(attempt, base=self._restart_base, cap=self._restart_cap)
            logger.warning(
                "mcp server down; restarting",
                extra={"server": self.name, "reason": reason, "retry_in": round(delay, 2)},
            )
            await self._pause(delay)
        self._set_state(ServerState.STOPPED)
        self._settled.set()

    async def _pause(self, delay: float) -> None:
        """Wait the ``delay`` the log just gave, or until the connection stops: nothing
        else (not the end of the session that just failed) shortens it."""
        sleeping = asyncio.ensure_future(self._sleep(delay))
        stopping = asyncio.ensure_future(self._stopped.wait())
        try:
            await asyncio.wait({sleeping, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in (sleeping, stopping):
                waiter.cancel()
            await asyncio.gather(sleeping, stopping, return_exceptions=True)

    async def _attempt(self) -> float:
        """Connect, serve until the connection ends; when it got ready (on ``clock``). A
        failure to get ready raises. The session lives
        in a task of its own, so a start that takes too long is cancelled whole."""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ended = self._broken = self._refresh = False
        self._wake.clear()
        task = asyncio.create_task(self._session_task(ready), name=f"mcp-session:{self.name}")
        try:
            await asyncio.wait(
                {task, ready},
                timeout=self.config.startup_timeout_seconds,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not ready.done():
                if task.done():
                    await task  # raises the failure
                    raise ConnectionError("the server ended before it listed its tools")
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                limit = self.config.startup_timeout_seconds
                raise TimeoutError(f"no answer within startupTimeoutSeconds ({limit:g}s)")
            self.error = ""
            ready_at = self._clock()
            self._set_state(ServerState.READY)
            self._settled.set()
            logger.info(
                "mcp server ready",
                extra={"server": self.name, "tools": len(self.tools)},
            )
            await task
            return ready_at
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def _session_task(self, ready: asyncio.Future[None]) -> None:
        async with AsyncExitStack() as stack:
            session = await open_session(
                stack,
                self.config,
                environ=self._environ,
                errlog=self._errlog(),
                on_end=self._mark_ended,
                message_handler=self._on_message,
                max_message_bytes=self._max_message_bytes,
            )
            self._publish(
                await list_all_tools(session, self.name, seconds=listing_seconds(self.config))
            )
            self._session = session
            ready.set_result(None)
            while True:
                try:
                    await asyncio.wait_for(self._wake.wait(), self._ping_seconds)
                except TimeoutError:
                    # No answer (or a transport error) ends the session: it is restarted.
                    limit = self.config.startup_timeout_seconds
                    await asyncio.wait_for(session.send_ping(), limit)
                    continue
                self._wake.clear()
                if self._stopping or self._ended or self._broken:
                    return
                if self._refresh:
                    self._refresh = False
                    self._publish(
                        await list_all_tools(
                            session, self.name, seconds=listing_seconds(self.config)
                        )
                    )
                    logger.info(
                        "mcp tools changed", extra={"server": self.name, "tools": len(self.tools)}
                    )

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._refresh = True
            self._wake.set()
        elif isinstance(message, Exception):
            reason = describe_failure(message, server_secrets(self.config))
            logger.debug("mcp transport error", extra={"server": self.name, "reason": reason})

    def _mark_ended(self) -> None:
        self._ended = True
        self._wake.set()

    def _mark_broken(self) -> None:
        self._broken = True
        self._wake.set()

    def _publish(self, tools: Sequence[types.Tool]) -> None:
        self.tools = tuple(tools)
        self._on_tools(self.name, self.tools)

    def _withdraw(self) -> None:
        self._session = None
        if self.tools:
            self._publish(())

    def _set_state(self, state: ServerState) -> None:
        if state is self.state:
            return
        if state not in TRANSITIONS[self.state]:
            raise ValueError(f"MCP server {self.name}: no transition {self.state} -> {state}")
        self.state = state
        self._on_state(self.name, state)
