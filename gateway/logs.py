"""Logging set-up: one line per event, JSON lines when stdout is not a terminal.

Every record passes through :class:`SecretRedactor`, which replaces the configured secret
values wherever they appear, so a token that slips into an exception message or a library's
debug output still never reaches the log. :class:`RepeatLimiter` keeps a flood of identical
warnings (one client hammering a bad request, a database that stays locked) to a few lines
a minute, and says how many it held back. :class:`MalformedRequests` turns aiohttp's
traceback for a request it could not parse (a request line over 8 KiB, a bad header) into
one warning line: anyone who can reach the port can send one, before any authentication.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import IO, Any

import orjson

REDACTED = "********"
#: Secrets shorter than this are not redacted by substring: masking "a" would wreck every line.
MIN_SECRET_LENGTH = 6

_STANDARD_ATTRS = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys() | {"message", "asctime"}
)


class SecretRedactor(logging.Filter):
    """Masks known secret values in every record's message, arguments and extra fields."""

    def __init__(self) -> None:
        super().__init__()
        self._secrets: tuple[str, ...] = ()
        self._lock = threading.Lock()

    def set_secrets(self, secrets: Iterable[str]) -> None:
        """Replace the set of values to mask (called again on config reload)."""
        values = {s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH}
        with self._lock:
            # Longest first, so a secret that contains another is masked whole.
            self._secrets = tuple(sorted(values, key=len, reverse=True))

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._secrets:
            return True
        record.msg = self.redact(record.getMessage())
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = self.redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        for key, value in list(vars(record).items()):
            if key not in _STANDARD_ATTRS and isinstance(value, str):
                setattr(record, key, self.redact(value))
        return True


class RepeatLimiter(logging.Filter):
    """Lets through at most ``burst`` records of one (logger, level, message template) per
    ``window`` seconds; the first one after a quiet spell carries ``suppressed``: how many
    were held back. Errors and worse always pass (they are rare and each may matter)."""

    def __init__(
        self,
        *,
        burst: int = 5,
        window: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._burst = burst
        self._window = window
        self._clock = clock
        self._seen: dict[tuple[str, int, str], tuple[float, int, int]] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        key = (record.name, record.levelno, str(record.msg))
        now = self._clock()
        with self._lock:
            start, count, held = self._seen.get(key, (now, 0, 0))
            if now - start >= self._window:
                start, count = now, 0
            if count >= self._burst:
                self._seen[key] = (start, count, held + 1)
                return False
            self._seen[key] = (start, count + 1, 0)
            if len(self._seen) > MAX_TRACKED_MESSAGES:  # bounded: drop the oldest windows
                for old in sorted(self._seen, key=lambda k: self._seen[k][0])[
                    : len(self._seen) // 2
                ]:
                    del self._seen[old]
        if held:
            record.suppressed = held
        return True


class MalformedRequests(logging.Filter):
    """Demotes aiohttp's "Error handling request" for a request that did not parse to one
    warning without a traceback: the client's mistake, not the gateway's fault. The
    parser's message quotes the offending bytes; only their start is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "aiohttp.server":
            return True
        # Imported here: the CLI's commands log through this module and need no aiohttp.
        from aiohttp.http_exceptions import HttpProcessingError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            remote = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
            record.msg = "malformed HTTP request from %s: %d %s"
            record.args = (remote, exc.code, str(exc.message)[:MALFORMED_DETAIL_CHARS])
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info, record.exc_text = None, None
        return True


#: Characters of a malformed request's parser message kept in its log line.
MALFORMED_DETAIL_CHARS = 120

#: Distinct message templates the limiter remembers (templates, not formatted messages).
MAX_TRACKED_MESSAGES = 4096


def _extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS}


class JsonFormatter(logging.Formatter):
    """``{"ts","level","logger","msg",...extra}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        data.update(_extra_fields(record))
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            data["exc"] = record.exc_text
        return orjson.dumps(data, default=str).decode()


class TextFormatter(logging.Formatter):
    """Readable lines for a terminal: time, level, message, then ``key=value`` extras."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        extras = " ".join(f"{k}={v}" for k, v in _extra_fields(record).items())
        line = f"{stamp} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if extras:
            line += f"  {extras}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        elif record.exc_text:
            line += "\n" + record.exc_text
        return line


REDACTOR = SecretRedactor()


def setup_logging(level: str = "info", *, stream: IO[str] | None = None) -> None:
    """Route every logger to ``stream`` (stdout) with the redactor and the right format."""
    out = stream if stream is not None else sys.stdout
    handler = logging.StreamHandler(out)
    handler.addFilter(MalformedRequests())  # first: the limiter then counts it as a warning
    handler.addFilter(RepeatLimiter())
    handler.addFilter(REDACTOR)
    isatty = getattr(out, "isatty", None)
    handler.setFormatter(TextFormatter() if isatty and isatty() else JsonFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # aiohttp's access log would log every request; lifecycle steps are what operators need.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
