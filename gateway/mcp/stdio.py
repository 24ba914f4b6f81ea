"""Herald's stdio transport for MCP: the server's process, its output read as messages in
linear time and bounded memory, and its whole process group ended on stop.

It replaces the SDK's ``stdio_client`` (same streams, same ``ClientSession`` on top) for two
reasons: that client assembles a line by joining everything held again for each chunk read
(quadratic: a 40 MiB result took 33 s and held the event loop), and it ends the server's
process group only when the server itself outlives its grace, so a server that exits at once
leaves its own children running. Here:

- lines come from :class:`~gateway.mcp.lines.LineReader` (linear, long strings cut, a line
  too large dropped while it is read, the request it answered told so);
- the server starts in a session of its own (``start_new_session``), and stop ends that
  whole process group: stdin closed, a grace for the server to exit, then ``SIGTERM`` to the
  group, then ``SIGKILL`` to whatever is left after :data:`KILL_GRACE_SECONDS`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Final, TextIO

import anyio
import anyio.lowlevel
import orjson
from anyio.abc import Process
from mcp import types
from mcp.client._transport import TransportStreams
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from gateway.mcp.lines import MAX_MESSAGE_BYTES, DroppedLine, LineReader

logger = logging.getLogger(__name__)

#: How long a server may take to exit on its own once its stdin is closed (the MCP way).
EXIT_GRACE_SECONDS: Final = 2.0
#: How long the group has after SIGTERM before SIGKILL.
KILL_GRACE_SECONDS: Final = 2.0
#: How often a group's end is checked while waiting for it.
_POLL_SECONDS: Final = 0.02
#: A read from the server's stdout takes at most this much (anyio's own default).
_READ_BYTES: Final = 65536

_ID: Final = rb'(-?\d+|"(?:[^"\\]|\\.)*")'
#: A response's ``id`` at a dropped line's start (``{"jsonrpc":"2.0","id":3,"result":…``,
#: the Python SDK's order) or at its end (``…,"jsonrpc":"2.0","id":3}``, the TypeScript one's).
_HEAD_ID: Final = re.compile(
    rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*' + _ID + rb'\s*,\s*"result"\s*:'
)
_TAIL_ID: Final = re.compile(
    rb'"id"\s*:\s*' + _ID + rb'\s*(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?\}\s*$'
)
_RESULT_FIRST: Final = re.compile(rb'^\s*\{\s*"result"\s*:')


def dropped_message(line: DroppedLine, limit: int) -> SessionMessage | Exception:
    """What the session is told of a line too large to keep: an error answer to the request
    it answered when its ``id`` can be read at its edges, otherwise an exception (the
    request then runs into its own timeout)."""
    why = (
        f"the server's answer was {line.size:,} bytes with more than {limit:,} left after "
        "cutting its long strings, and was dropped unread"
    )
    found = _HEAD_ID.match(line.head)
    if found is None and _RESULT_FIRST.match(line.head):
        found = _TAIL_ID.search(line.tail)
    if found is None:
        return ValueError(why)
    request_id = orjson.loads(found.group(1))
    error = types.ErrorData(code=types.INTERNAL_ERROR, message=why)
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


def parse_line(line: bytes) -> SessionMessage | Exception:
    """One line as a message, or the reason it is not one (the session logs it)."""
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except (ValidationError, ValueError) as exc:
        return exc
    return SessionMessage(message)


@asynccontextmanager
async def stdio_transport(
    command: str,
    args: list[str],
    *,
    env: Mapping[str, str],
    cwd: str | None,
    errlog: TextIO | None,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
) -> AsyncIterator[TransportStreams]:
    """Start ``command`` and yield the session's (read, write) streams; on exit end its
    process group (see the module doc). ``env`` comes on top of the SDK's neutral variables.

    Raises ``OSError`` for a command that cannot start.
    """
    process = await anyio.open_process(
        [command, *args],
        env={**get_default_environment(), **env},
        cwd=cwd,
        stderr=errlog,
        start_new_session=True,  # its own process group: stop reaches its children too
    )
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    reader = LineReader(max_line_bytes=max_message_bytes)

    async def read_stdout() -> None:
        assert process.stdout is not None
        async with to_session:
            with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, OSError):
                while True:
                    chunk = await process.stdout.receive(_READ_BYTES)
                    for line in reader.feed(chunk):
                        if isinstance(line, DroppedLine):
                            item = dropped_message(line, max_message_bytes)
                            logger.warning(
                                "mcp server message too large; dropped", extra={"bytes": line.size}
                            )
                        else:
                            item = parse_line(line)
                        try:
                            await to_session.send(item)
                        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                            return  # the session is gone

    async def write_stdin() -> None:
        assert process.stdin is not None
        try:
            async with from_session:
                async for message in from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await to_session.aclose()  # the server stopped reading: the session ends too

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read_stdout)
        tasks.start_soon(write_stdin)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):  # the process must end, even when cancelled
                await read_stream.aclose()
                await write_stream.aclose()
                await stop_process(process)
            tasks.cancel_scope.cancel()


async def stop_process(process: Process) -> None:
    """End the server and its process group: stdin closed, :data:`EXIT_GRACE_SECONDS` for
    it to exit, then the group's ``SIGTERM`` and, :data:`KILL_GRACE_SECONDS` later, its
    ``SIGKILL``. The group is ended even when the server exited on its own: what it started
    must not outlive it."""
    group = process.pid  # the leader's pid is the group's id (start_new_session)
    if process.stdin is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    await _exited(process, EXIT_GRACE_SECONDS)
    if _signal_group(group, signal.SIGTERM):
        with anyio.move_on_after(KILL_GRACE_SECONDS):
            while _group_alive(group, process):  # noqa: ASYNC110 (no event for a group's end)
                await anyio.sleep(_POLL_SECONDS)
        if _group_alive(group, process):
            _signal_group(group, signal.SIGKILL)
            logger.warning(
                "mcp server's process group outlived SIGTERM; killed", extra={"pid": group}
            )
    await _exited(process, KILL_GRACE_SECONDS)
    if process.stdout is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdout.aclose()


async def _exited(process: Process, seconds: float) -> bool:
    """Whether the server exited within ``seconds``. Not ``process.wait()``: on asyncio that
    also waits for the end of its pipes, which a child of the server may hold open."""
    with anyio.move_on_after(seconds):
        while process.returncode is None:  # noqa: ASYNC110 (see above)
            await anyio.sleep(_POLL_SECONDS)
        return True
    return False


def _signal_group(group: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to the group; whether any of it was there."""
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a member we may not signal: nothing more to do than wait
    return True


def _group_alive(group: int, process: Process) -> bool:
    """Whether a member of the group is left (a zombie counts until it is reaped)."""
    _ = process.returncode  # lets the event loop's child watcher reap the leader
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
