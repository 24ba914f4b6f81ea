"""Running the gateway: bind, serve, reload on SIGHUP, stop cleanly on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import signal
import socket
import sys
import time
from pathlib import Path

from aiohttp import web

from channels import ChannelStartError
from gateway.app import build_app
from gateway.constants import EXIT_CONFIG, EXIT_UNAVAILABLE, HTTP_STOP_SECONDS
from gateway.reload import SettingsHolder
from gateway.sdnotify import Notifier
from gateway.state import StateUnavailableError

logger = logging.getLogger(__name__)

#: Exit status when the listening socket cannot be bound (sysexits.h EX_UNAVAILABLE).


#: prctl(2) option: 0 makes /proc/<pid>/environ, /mem and core dumps root-only.
PR_SET_DUMPABLE = 4


def harden_process() -> None:
    """Keep the daemon's secrets out of its children's reach (Linux).

    An ``exec`` tool command runs as the gateway's user; without this it could read
    ``/proc/$PPID/environ`` (every secret of the environment file) and attach a debugger.
    A non-dumpable process's ``/proc`` entries belong to root, and no core dump is written.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            logger.warning("prctl(PR_SET_DUMPABLE) failed", extra={"errno": ctypes.get_errno()})
    except OSError as exc:  # no libc to load: nothing to harden with
        logger.warning("cannot harden the process", extra={"error": str(exc)})


async def serve(
    holder: SettingsHolder,
    *,
    config_dir: Path | None = None,
    notifier: Notifier | None = None,
    sock: socket.socket | None = None,
) -> int:
    """Run the gateway until SIGTERM or SIGINT; returns the process exit status. ``sock``
    is the listening socket when the caller bound it already (``herald run`` does, before
    anything starts); otherwise the configured address is bound once the app is up."""
    started = time.monotonic()
    harden_process()
    notifier = notifier or Notifier.from_env()
    settings = holder.current
    app = build_app(holder, config_dir=config_dir)
    runner = web.AppRunner(
        app, handle_signals=False, access_log=None, shutdown_timeout=HTTP_STOP_SECONDS
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def request_stop(signame: str) -> None:
        logger.info("stop requested", extra={"signal": signame})
        stop.set()

    def request_reload() -> None:
        notifier.reloading()
        holder.reload()
        notifier.ready("reloaded")

    logger.info(
        "gateway starting",
        extra={
            "host": settings.gateway.host,
            "port": settings.gateway.port,
            "config": holder.path or "embedded defaults",
        },
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, request_stop, signal.Signals(signum).name)
    loop.add_signal_handler(signal.SIGHUP, request_reload)
    watchdog: asyncio.Task[None] | None = None
    try:
        try:
            await runner.setup()
        except ChannelStartError as exc:
            # A bad token will not fix itself: exit 78 so systemd does not restart in a loop.
            # (A network fault is retried by the channel itself and never gets here.)
            logger.error("a channel cannot start", extra={"error": str(exc)})
            return EXIT_CONFIG
        except StateUnavailableError as exc:
            # PostgreSQL down or unreachable: a fault, not a mistake; systemd may restart.
            # The message names the database, its password masked.
            logger.error("the state database is unavailable", extra={"error": str(exc)})
            return EXIT_UNAVAILABLE
        site: web.BaseSite = (
            web.SockSite(runner, sock)
            if sock is not None
            else web.TCPSite(runner, settings.gateway.host, settings.gateway.port)
        )
        try:
            await site.start()
        except OSError as exc:
            logger.error(
                "cannot listen",
                extra={
                    "host": settings.gateway.host,
                    "port": settings.gateway.port,
                    "error": str(exc),
                },
            )
            return EXIT_UNAVAILABLE
        logger.info(
            "gateway serving",
            extra={
                "url": f"http://{settings.gateway.host}:{settings.gateway.port}/",
                "startup_seconds": round(time.monotonic() - started, 3),
            },
        )
        notifier.ready("serving")
        watchdog = asyncio.create_task(notifier.watchdog_loop(), name="sd-watchdog")
        await stop.wait()
        notifier.stopping()
        logger.info("gateway stopping")
        return 0
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(signum)
        if watchdog is not None:
            watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watchdog
        await runner.cleanup()
        logger.info("gateway stopped")
