"""systemd's notify protocol (sd_notify(3)) for ``Type=notify`` units, without python-systemd.

The service manager passes ``$NOTIFY_SOCKET``: a filesystem path, or ``@name`` for a Linux
abstract socket. Each notification is one datagram of newline-separated ``KEY=VALUE`` lines.
Outside systemd the variable is unset and every call is a no-op, so the daemon can call the
notifier unconditionally.

A notification must never take the daemon down: sends are non-blocking, errors are logged
once per run of failures and reported as ``False``, never raised.

Watchdog: when ``$WATCHDOG_USEC`` is set (and ``$WATCHDOG_PID``, if set, is our pid),
:meth:`Notifier.watchdog_loop` sends ``WATCHDOG=1`` every half period, as sd_watchdog_enabled(3)
advises. The loop runs on the daemon's event loop, so a blocked loop stops the pings by itself
and systemd restarts the service. For the subtler case, a loop that runs while the daemon is
unhealthy, pass ``check``: a ping is withheld whenever it returns ``False`` (or raises).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)

#: Returns whether the daemon is healthy enough to pet the watchdog; called once per ping.
WatchdogCheck = Callable[[], bool]

# systemd reads a notification into a PIPE_BUF (4096 byte) buffer; 1000 characters of up to
# four UTF-8 bytes each leave room for the other fields.
_MAX_STATUS_CHARS = 1000


class Notifier:
    """Sends sd_notify(3) datagrams to the service manager.

    Build it with :meth:`from_env`. ``address`` is the ``$NOTIFY_SOCKET`` value (``/path`` or
    ``@abstract``), or ``None`` for a notifier that does nothing; ``watchdog_usec`` is the
    watchdog period in microseconds, or ``None`` when the watchdog is off.
    """

    __slots__ = ("_address", "_failing", "_label", "_watchdog_usec")

    def __init__(self, address: str | None = None, watchdog_usec: int | None = None) -> None:
        self._label = address
        self._address = _socket_address(address) if address is not None else None
        self._watchdog_usec = watchdog_usec if self._address is not None else None
        self._failing = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Notifier:
        """A notifier for ``$NOTIFY_SOCKET``, ``$WATCHDOG_USEC`` and ``$WATCHDOG_PID``.

        Returns a no-op notifier when ``NOTIFY_SOCKET`` is unset, empty or of a kind this
        module does not speak (``vsock:``, a relative path); the last is logged as a warning.
        A malformed watchdog variable disables the watchdog with a warning; a ``WATCHDOG_PID``
        naming another process disables it silently, as the variables were meant for that one.
        """
        address = environ.get("NOTIFY_SOCKET") or None
        if address is not None and not address.startswith(("/", "@")):
            log.warning("NOTIFY_SOCKET=%r is not a unix socket path; not notifying", address)
            address = None
        return cls(address, _watchdog_usec(environ))

    @property
    def enabled(self) -> bool:
        """Whether notifications go anywhere."""
        return self._address is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between watchdog pings (half of ``WATCHDOG_USEC``), or ``None`` if off."""
        if self._watchdog_usec is None:
            return None
        return self._watchdog_usec / 2 / 1_000_000

    def notify(self, fields: Mapping[str, str]) -> bool:
        """Send one datagram of ``KEY=VALUE`` lines; ``True`` when the kernel accepted it.

        Returns ``False`` without sending when disabled. A send error (socket gone, the
        manager's queue full) is logged at warning level the first time after a success and
        at debug level after that; it is never raised.
        """
        if self._address is None:
            return False
        payload = "\n".join(f"{key}={value}" for key, value in fields.items()).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                # A busy manager must not stall the event loop: drop the datagram instead.
                sock.setblocking(False)
                sock.sendto(payload, self._address)
        except OSError as exc:
            level = logging.DEBUG if self._failing else logging.WARNING
            log.log(level, "systemd notification to %s failed: %s", self._label, exc)
            self._failing = True
            return False
        if self._failing:
            log.info("systemd notifications to %s work again", self._label)
            self._failing = False
        return True

    def ready(self, status: str | None = None) -> bool:
        """Tell systemd the daemon is serving (``READY=1``), optionally with a status line."""
        return self.notify(_with_status({"READY": "1"}, status))

    def reloading(self) -> bool:
        """Announce a config reload (``RELOADING=1`` with ``MONOTONIC_USEC``).

        Call :meth:`ready` once the reload is done. systemd ≥ 253 needs the timestamp to
        match the reload to its request (``Type=notify-reload``); under ``Type=notify``
        the pair only shows the unit as reloading for a moment.
        """
        now_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify({"RELOADING": "1", "MONOTONIC_USEC": str(now_usec)})

    def stopping(self, status: str | None = None) -> bool:
        """Tell systemd the daemon has begun shutting down (``STOPPING=1``)."""
        return self.notify(_with_status({"STOPPING": "1"}, status))

    def status(self, text: str) -> bool:
        """Set the free-form status line that ``systemctl status`` shows (``STATUS=…``)."""
        return self.notify(_with_status({}, text))

    def watchdog(self) -> bool:
        """Pet the watchdog once (``WATCHDOG=1``)."""
        return self.notify({"WATCHDOG": "1"})

    async def watchdog_loop(self, check: WatchdogCheck | None = None) -> None:
        """Send ``WATCHDOG=1`` every half watchdog period until cancelled.

        Returns at once when the watchdog is off, so the caller can start it as a task
        unconditionally. The first ping goes out immediately. When ``check`` is given it is
        called before each ping; ``False`` or an exception withholds that ping (logged once
        per unhealthy spell), so systemd restarts a daemon that stays unhealthy for a whole
        ``WatchdogSec``.
        """
        interval = self.watchdog_interval
        if interval is None:
            return
        unhealthy = False
        while True:
            healthy = _healthy(check, already_reported=unhealthy)
            if healthy:
                if unhealthy:
                    log.info("healthy again; resuming systemd watchdog pings")
                self.watchdog()
            elif not unhealthy:
                log.warning("daemon unhealthy; withholding systemd watchdog pings")
            unhealthy = not healthy
            await asyncio.sleep(interval)

    def __repr__(self) -> str:
        if self._address is None:
            return "<Notifier disabled>"
        watchdog = f"{self.watchdog_interval:g}s" if self._watchdog_usec else "off"
        return f"<Notifier socket={self._label!r} watchdog={watchdog}>"


def _socket_address(value: str) -> bytes:
    """The ``sendto`` address for a ``$NOTIFY_SOCKET`` value; ``@`` means abstract."""
    if value.startswith("@"):
        return b"\0" + os.fsencode(value[1:])
    return os.fsencode(value)


def _watchdog_usec(environ: Mapping[str, str]) -> int | None:
    """The watchdog period meant for this process, in microseconds, or ``None``."""
    raw_usec = environ.get("WATCHDOG_USEC")
    if not raw_usec:
        return None
    raw_pid = environ.get("WATCHDOG_PID")
    try:
        usec = int(raw_usec)
        pid = int(raw_pid) if raw_pid else None
    except ValueError:
        log.warning("malformed WATCHDOG_USEC/WATCHDOG_PID; systemd watchdog disabled")
        return None
    if usec <= 0:
        log.warning("WATCHDOG_USEC=%d is not positive; systemd watchdog disabled", usec)
        return None
    if pid is not None and pid != os.getpid():
        return None
    return usec


def _with_status(fields: dict[str, str], status: str | None) -> dict[str, str]:
    if status is not None:
        # A newline would start a new assignment; NUL would end systemd's string early.
        clean = status.replace("\n", " ").replace("\0", " ")
        if len(clean) > _MAX_STATUS_CHARS:
            clean = clean[: _MAX_STATUS_CHARS - 1] + "…"
        fields["STATUS"] = clean
    return fields


def _healthy(check: WatchdogCheck | None, *, already_reported: bool) -> bool:
    if check is None:
        return True
    try:
        return bool(check())
    except Exception:
        if not already_reported:
            log.exception("watchdog health check raised; treating the daemon as unhealthy")
        return False
