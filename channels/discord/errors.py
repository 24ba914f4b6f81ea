"""Turning discord.py's exceptions into Herald's channel errors.

Send failures: an unknown or deleted channel (404), missing access (403) and a rejected
body (other 4xx) are permanent; server errors, connection errors and rate limits are worth
retrying. Start failures get a message that says what to fix; none contains the token.
"""

from __future__ import annotations

import asyncio

import aiohttp

from channels.discord._sdk import discord
from channels.errors import ChannelSendError, ChannelStartError

#: Gateway close codes (Discord's documentation) and what they mean to an operator.
CLOSE_CODES: dict[int, str] = {
    4000: "unknown error",
    4001: "unknown opcode",
    4002: "decode error",
    4003: "not authenticated",
    4004: "authentication failed: the bot token was rejected; check channels.discord.token",
    4005: "already authenticated",
    4007: "invalid sequence number",
    4008: "rate limited",
    4009: "session timed out",
    4010: "invalid shard",
    4011: "sharding required",
    4012: "invalid API version",
    4013: "invalid intents",
    4014: (
        "disallowed intents: enable the Message Content intent for the bot in the "
        "Discord Developer Portal (Bot > Privileged Gateway Intents)"
    ),
}


def _retry_after_header(exc: discord.HTTPException) -> float | None:
    header = getattr(exc.response, "headers", {}).get("Retry-After")
    try:
        return float(header) if header is not None else None
    except ValueError:
        return None


def send_error(exc: BaseException) -> ChannelSendError | None:
    """The :class:`ChannelSendError` for a failed send, or ``None`` if ``exc`` is not one."""
    if isinstance(exc, discord.RateLimited):
        return ChannelSendError(
            f"Discord rate limit: retry after {exc.retry_after:g} s",
            retryable=True,
            retry_after=exc.retry_after,
        )
    if isinstance(exc, discord.HTTPException):
        detail = f"Discord answered {exc.status}: {exc.text or 'no message'}"
        if exc.code:
            detail += f" (code {exc.code})"
        if exc.status == 429:  # a 429 discord.py does not retry (e.g. from a proxy)
            return ChannelSendError(detail, retryable=True, retry_after=_retry_after_header(exc))
        return ChannelSendError(detail, retryable=exc.status >= 500)
    if isinstance(exc, aiohttp.ClientError | OSError | asyncio.TimeoutError):
        return ChannelSendError(
            f"cannot reach Discord: {type(exc).__name__}: {exc}", retryable=True
        )
    return None


_START_FAILURES = (
    discord.LoginFailure,
    discord.PrivilegedIntentsRequired,
    discord.ConnectionClosed,
    discord.HTTPException,
    aiohttp.ClientError,
    OSError,
    asyncio.TimeoutError,
)


def _root_failure(exc: BaseException) -> BaseException:
    """The first failure Herald can explain in ``exc``'s cause/context chain, else ``exc``.

    discord.py 2.7 can fail while handling a failed first gateway connection (it reads the
    websocket it never got), so the useful error is then the context of the one raised.
    """
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            break
        if isinstance(seen, _START_FAILURES):
            return seen
        seen = seen.__cause__ or seen.__context__
    return exc


def start_error(exc: BaseException, where: str) -> ChannelStartError:
    """The :class:`ChannelStartError` explaining why the client could not start or stopped.

    ``where`` names what the client was talking to ("the Discord gateway at wss://…").
    """
    exc = _root_failure(exc)
    if isinstance(exc, discord.LoginFailure):
        return ChannelStartError(
            "Discord rejected the bot token (401 on GET /users/@me); check channels.discord.token"
        )
    if isinstance(exc, discord.PrivilegedIntentsRequired):
        return ChannelStartError(f"Discord gateway closed with 4014: {CLOSE_CODES[4014]}")
    if isinstance(exc, discord.ConnectionClosed):
        meaning = CLOSE_CODES.get(exc.code, "not a code Discord documents")
        return ChannelStartError(f"Discord gateway closed with {exc.code}: {meaning}")
    if isinstance(exc, discord.HTTPException):
        return ChannelStartError(
            f"Discord API answered {exc.status} at start-up: {exc.text or 'no message'}",
            fault=exc.status >= 500 or exc.status == 429,
        )
    if isinstance(exc, aiohttp.ClientError | OSError | asyncio.TimeoutError):
        return ChannelStartError(f"cannot reach {where}: {type(exc).__name__}: {exc}", fault=True)
    return ChannelStartError(f"Discord client failed: {type(exc).__name__}: {exc}")
