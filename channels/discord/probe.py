"""Probing Discord: ``GET /users/@me`` with the bot token, at the configured ``apiBaseUrl``.

That is the first request of discord.py's login, so a probe that passes means
:meth:`DiscordChannel.start` gets past its token check. The probe sends it with aiohttp
rather than through discord.py, the same way discord.py does (``Authorization: Bot …``, its
``User-Agent``): discord.py keeps its REST root process-wide (:mod:`.endpoints`), which a
probe must not move under a running client, and it retries server errors and waits out
rate limits, where a probe reports the first answer.

How answers read: 401 or 403 is ``refused``; any other error status is ``unexpected`` (a
Discord outage, a rate limit, a wrong API version in ``apiBaseUrl``); a success whose body
is not a user object did not come from Discord's API, ``misconfigured``. The token never
appears in a result.
"""

from __future__ import annotations

import sys
from typing import Final

import aiohttp
import orjson

from channels.discord._sdk import discord
from channels.discord.config import DiscordConfig
from channels.discord.endpoints import DEFAULT_API_BASE_URL
from channels.probe import MASK, ProbeResult, scrub
from configbase import secret_value

TOKEN_SETTING: Final = "channels.discord.token"
URL_SETTING: Final = "channels.discord.apiBaseUrl"
REFUSED_FIX: Final = f"check {TOKEN_SETTING} (DISCORD_TOKEN): Developer Portal → Bot → token"
#: discord.py's own User-Agent; Discord asks every bot to name its library this way.
USER_AGENT: Final = (
    f"DiscordBot (https://github.com/Rapptz/discord.py {discord.__version__}) "
    f"Python/{sys.version_info[0]}.{sys.version_info[1]} aiohttp/{aiohttp.__version__}"
)
#: Enough of an error body to recognise it.
EXCERPT_CHARS: Final = 200


async def probe_login(config: DiscordConfig, *, timeout_seconds: float) -> ProbeResult:
    """``GET /users/@me`` with ``config``'s token, answered within ``timeout_seconds``."""
    token = secret_value(config.token)
    if token is None:
        return ProbeResult("missing", "no bot token", f"set {TOKEN_SETTING}")
    url = (config.api_base_url or DEFAULT_API_BASE_URL) + "/users/@me"
    headers = {"Authorization": f"Bot {token}", "User-Agent": USER_AGENT}
    try:
        timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, headers=headers) as response,
        ):
            status, raw = response.status, await response.read()
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        return ProbeResult.unreachable(url, exc, secret=token, setting=URL_SETTING)
    # Mask before reading anything out of the body: a token cut short would escape the mask.
    raw = raw.replace(token.encode(), MASK.encode())
    if status in (401, 403):
        return ProbeResult("refused", f"the bot token was refused (HTTP {status})", REFUSED_FIX)
    if status >= 300:
        return ProbeResult("unexpected", f"/users/@me answered HTTP {status}: {_message(raw)}")
    user = _json(raw)
    if not isinstance(user, dict) or not isinstance(user.get("id"), str):
        return ProbeResult(
            "misconfigured",
            f"/users/@me answered HTTP {status}, not as the Discord API does",
            f"check {URL_SETTING}",
        )
    name = scrub(str(user.get("username") or "?"), token)
    return ProbeResult("ok", f"bot token accepted (@{name})")


def _json(raw: bytes) -> object:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def _message(raw: bytes) -> str:
    """The ``message`` of a Discord error body, else an excerpt of the body."""
    data = _json(raw)
    message = data.get("message") if isinstance(data, dict) else None
    text = message if isinstance(message, str) and message else raw.decode(errors="replace")
    text = text.strip()
    if len(text) > EXCERPT_CHARS:
        text = text[:EXCERPT_CHARS] + "…"
    return text or "(empty body)"
