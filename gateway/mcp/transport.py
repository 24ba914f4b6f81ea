"""Opening one MCP client session over stdio or Streamable HTTP, with the official SDK's
``ClientSession`` (over Herald's stdio transport, :mod:`gateway.mcp.stdio`, or the SDK's
Streamable HTTP client), and listing a server's tools within bounds.

Shared by the gateway's long-lived connections (:mod:`gateway.mcp.connection`) and the
one-off probes of ``herald mcp probe`` and ``herald doctor`` (:mod:`gateway.mcp.probe`).
"""

from __future__ import annotations

import errno
import logging
import os
import sys
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self, TextIO

import anyio
from mcp import ClientSession, types
from mcp.client.session import MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.message import SessionMessage

from gateway.mcp.lines import MAX_MESSAGE_BYTES
from gateway.mcp.stdio import stdio_transport
from gateway.schema.mcp import McpServerConfig
from gateway.schema.sandbox import SandboxLimits
from gateway.tools.sandbox import (
    BWRAP,
    BWRAP_PACKAGE,
    Limits,
    bwrap_argv,
    find_bwrap,
    sandbox_environment,
)

#: What a stdio server gets of Herald's environment, besides the few neutral variables the
#: SDK's stdio client always passes (HOME, LOGNAME, PATH, SHELL, TERM, USER): never secrets.
PASSED_VARIABLES: Final = ("PATH", "HOME", "LANG", "TZ")
PASSED_PREFIXES: Final = ("LC_",)
CLIENT_INFO: Final = types.Implementation(name="herald", version="0.1.0")
#: Bounds on one ``tools/list``: a server that pages forever (a cursor that never ends)
#: grew memory by 40 MiB a second. 256 tools is more than any real server lists (GitHub's
#: has about 100), and more than a provider takes in one request (OpenAI: 128).
MAX_TOOLS: Final = 256
#: Pages of ``tools/list`` followed at most (a server paging 10 at a time reaches 256 tools).
MAX_TOOL_PAGES: Final = 64
#: Seconds one listing may take; at most half the server's ``startupTimeoutSeconds``, so
#: that a start ends with the tools found rather than a start timeout.
LIST_TOOLS_SECONDS: Final = 10.0

logger = logging.getLogger(__name__)


def stdio_environment(config: McpServerConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables Herald adds for a stdio server: ``PATH``, ``HOME``, ``LANG``, ``LC_*``
    and ``TZ`` from ``environ``, then the server's own ``env`` (which wins)."""
    env = {
        key: value
        for key, value in environ.items()
        if key in PASSED_VARIABLES or key.startswith(PASSED_PREFIXES)
    }
    env.update({key: value.get_secret_value() for key, value in config.env.items()})
    return env


def expand_home(path: str | None) -> str | None:
    """``path`` with a leading ``~`` expanded (no file system access)."""
    return os.path.expanduser(path) if path else None


def server_secrets(config: McpServerConfig) -> list[str]:
    """The values a message about this server must never show (env and header values)."""
    values = [*config.env.values(), *config.headers.values()]
    return [plain for v in values if (plain := v.get_secret_value())]


class WatchedReadStream:
    """The session's read stream, telling ``on_end`` once the transport has ended (a stdio
    server exited, an HTTP stream closed): the SDK's session itself says nothing of it."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end
        self.ended = False

    def _end(self) -> None:
        if not self.ended:
            self.ended = True
            self._on_end()

    async def receive(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._end()
            raise
        return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None


async def open_session(
    stack: AsyncExitStack,
    config: McpServerConfig,
    *,
    environ: Mapping[str, str] = os.environ,
    errlog: TextIO | None = None,
    on_end: Callable[[], None] = lambda: None,
    message_handler: MessageHandlerFnT | None = None,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
) -> ClientSession:
    """A client session with the server of ``config``, initialized, its contexts on ``stack``
    (closing the stack closes the session and stops a stdio server's process).

    ``errlog`` receives a stdio server's stderr (default: Herald's own); ``on_end`` is told
    when the transport ends; a stdio server's message keeping more than
    ``max_message_bytes`` is dropped (:mod:`gateway.mcp.lines`). Raises what the SDK
    raises: ``OSError`` for a command that cannot start, ``McpError`` and transport errors
    for a server that does not answer.
    """
    if config.command is not None:
        argv = [config.command, *config.args]
        env = stdio_environment(config, environ)
        cwd = expand_home(config.cwd)
        if config.sandbox is not None:
            argv, env = await _sandboxed(stack, argv, env, cwd, config.sandbox)
            cwd = None  # bubblewrap itself may start anywhere: the server's is --chdir's
        read, write = await stack.enter_async_context(
            stdio_transport(
                argv[0],
                argv[1:],
                env=env,
                cwd=cwd,
                errlog=errlog if errlog is not None else sys.stderr,
                max_message_bytes=max_message_bytes,
            )
        )
    else:
        headers = {key: value.get_secret_value() for key, value in config.headers.items()}
        client = await stack.enter_async_context(create_mcp_http_client(headers=headers))
        read, write = await stack.enter_async_context(
            streamable_http_client(config.url or "", http_client=client)
        )
    watched = WatchedReadStream(read, on_end)
    session = await stack.enter_async_context(
        ClientSession(watched, write, message_handler=message_handler, client_info=CLIENT_INFO)
    )
    await session.initialize()
    return session


async def _sandboxed(
    stack: AsyncExitStack,
    argv: list[str],
    env: dict[str, str],
    cwd: str | None,
    limits: SandboxLimits,
) -> tuple[list[str], dict[str, str]]:
    """``argv`` and ``env`` for the server under bubblewrap, its pids cgroup (if any) made
    now and removed by ``stack`` after the process ended."""
    bwrap = find_bwrap()
    if bwrap is None:
        raise FileNotFoundError(
            errno.ENOENT, f"the sandbox needs bubblewrap (Debian package {BWRAP_PACKAGE})", BWRAP
        )
    workdir = Path(cwd) if cwd else None
    group = Limits.open(limits)
    # Pushed before the process is started, so that it runs after the process ended.
    stack.push_async_callback(group.close)
    wrapped = group.wrap(bwrap_argv(argv, workdir=workdir, config=limits, bwrap=bwrap))
    return wrapped, sandbox_environment(env, workdir)


async def list_all_tools(
    session: ClientSession, server: str, *, seconds: float = LIST_TOOLS_SECONDS
) -> list[types.Tool]:
    """The tools the server lists, following its pages, within :data:`MAX_TOOLS`,
    :data:`MAX_TOOL_PAGES` and ``seconds``. Past a bound, the tools found so far are the
    server's tools (the first :data:`MAX_TOOLS` of them), and one warning names the server:
    a server with a paging bug keeps its useful tools, and failing would only restart it
    into the same listing."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    pages = 0
    bound = ""
    with anyio.move_on_after(seconds) as scope:
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            pages += 1
            tools.extend(page.tools[: MAX_TOOLS + 1 - len(tools)])
            cursor = page.next_cursor
            if not cursor and len(tools) <= MAX_TOOLS:
                return tools
            if len(tools) > MAX_TOOLS:
                bound = f"more than {MAX_TOOLS} tools"
                break
            if pages >= MAX_TOOL_PAGES:
                bound = f"more than {MAX_TOOL_PAGES} pages"
                break
    if scope.cancelled_caught:
        bound = f"still paging after {seconds:g}s"
    logger.warning(
        "mcp server's tool list is past a bound; using the tools listed so far",
        extra={
            "server": server,
            "bound": bound,
            "pages": pages,
            "tools": min(len(tools), MAX_TOOLS),
        },
    )
    return tools[:MAX_TOOLS]


def listing_seconds(config: McpServerConfig) -> float:
    """How long one ``tools/list`` of this server may take (see :data:`LIST_TOOLS_SECONDS`)."""
    return min(LIST_TOOLS_SECONDS, config.startup_timeout_seconds / 2)


def describe_failure(exc: BaseException, secrets: list[str]) -> str:
    """A one-line reason for ``exc`` (the first leaf of an exception group), with every
    secret of the server masked."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError):
        text = f"command not found: {exc.filename or exc}"
    elif isinstance(exc, TimeoutError):
        text = str(exc) or "timed out"
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    for secret in secrets:
        text = text.replace(secret, "********")
    return text.splitlines()[0] if text else type(exc).__name__
