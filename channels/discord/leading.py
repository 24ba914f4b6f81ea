"""The gateway connection of a Discord channel in a cluster: held only while leading.

Discord sends each event to every gateway connection of a bot, so in a cluster of replicas
exactly one may hold it. :func:`hold_gateway` runs on a logged-in client (REST works
without the gateway, so a standing-by replica still sends): it waits for the
:class:`~channels.leadership.Leadership` of the channel's name, connects, and drops the
connection at once when the lease is lost, then waits for the leadership again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Final

from channels.discord._sdk import discord
from channels.leadership import Leadership

log = logging.getLogger(__name__)

#: Seconds before leading again after the connection ended by itself (a failed connect):
#: long enough not to spin against a broken gateway, short against the 30 s takeover goal.
RELEAD_DELAY: Final = 5.0
#: Close code when giving the connection up: 1000 ends the session (no resume by anyone).
GIVE_UP_CODE: Final = 1000


async def hold_gateway(
    client: discord.Client,
    leadership: Leadership,
    name: str,
    *,
    on_leading: Callable[[bool], None],
    relead_delay: float = RELEAD_DELAY,
) -> None:
    """Hold ``client``'s gateway connection whenever this process leads ``name``, until
    the client is closed. ``on_leading`` hears each change of leadership."""
    while not client.is_closed():
        async with leadership.hold(name) as lease:
            if client.is_closed():
                return
            on_leading(True)
            log.info("%s: this replica holds the Discord gateway connection", name)
            connect = asyncio.create_task(client.connect(reconnect=True), name=f"{name}-connect")
            lost = asyncio.create_task(lease.lost(), name=f"{name}-lease")
            try:
                await asyncio.wait({connect, lost}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                on_leading(False)
                await _give_up(client, connect, lost)
            if lost.done() and not lost.cancelled():
                log.warning("%s: lost the lock of the Discord gateway connection; closed it", name)
                continue  # wait for the lock again at once: someone else may not take it
            error = None if connect.cancelled() else connect.exception()
            if error is not None:
                log.error("%s: the Discord gateway connection failed: %s", name, error)
        if not client.is_closed():
            await asyncio.sleep(relead_delay)


async def _give_up(
    client: discord.Client, connect: asyncio.Task[None], lost: asyncio.Task[None]
) -> None:
    for task in (connect, lost):
        task.cancel()
    await asyncio.gather(connect, lost, return_exceptions=True)
    ws = client.ws
    if ws is not None:
        with contextlib.suppress(Exception):
            await ws.close(code=GIVE_UP_CODE)
