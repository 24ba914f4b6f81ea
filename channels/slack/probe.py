"""Probing Slack: ``auth.test`` with the bot token, through the Web API client the channel uses.

``auth.test`` is what :meth:`SlackChannel.start` calls first, so a probe that passes means
start-up gets past its token check. It goes through the same ``slack_sdk`` client built by
:func:`channels.slack.delivery.web_client` (same ``apiBaseUrl``, no retries), on a session of
its own that lives for the one call: probing opens no websocket and needs no app token.

How answers read: ``ok: false`` with a transient code (rate limits, Slack's own failures) or
an HTTP 5xx is ``unexpected`` (try again later); any other ``error`` code is ``refused``
(``invalid_auth``, ``token_revoked``…); an answer that is not the Web API's at all means
``apiBaseUrl`` points elsewhere, ``misconfigured``. The token never appears in a result.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import aiohttp
from slack_sdk.errors import SlackApiError

from channels.probe import ProbeResult, scrub
from channels.slack.config import SlackConfig
from channels.slack.constants import DEFAULT_API_BASE_URL, TRANSIENT_ERRORS
from channels.slack.delivery import web_client
from configbase import secret_value

_sdk_log = logging.getLogger(f"{__name__}.sdk")

TOKEN_SETTING: Final = "channels.slack.botToken"
URL_SETTING: Final = "channels.slack.apiBaseUrl"
REFUSED_FIX: Final = f"check {TOKEN_SETTING} (SLACK_BOT_TOKEN): the app's xoxb- token"


async def probe_auth(config: SlackConfig, *, timeout_seconds: float) -> ProbeResult:
    """``auth.test`` with ``config``'s bot token, answered within ``timeout_seconds``."""
    token = secret_value(config.bot_token)
    if token is None:
        return ProbeResult("missing", "no bot token", f"set {TOKEN_SETTING}")
    base = config.api_base_url or DEFAULT_API_BASE_URL
    if not base.endswith("/"):
        # slack_sdk joins method names onto the root like a relative URL: without the slash
        # the last path segment is replaced ("…/api" + "auth.test" → "…/auth.test").
        return ProbeResult(
            "misconfigured",
            f"apiBaseUrl {base} does not end with '/'",
            f"set {URL_SETTING} to {base}/",
        )
    url = base + "auth.test"
    try:
        timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            auth = await web_client(config, token, session, logger=_sdk_log).auth_test()
    except SlackApiError as exc:
        return _answered(exc.response, token)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        return ProbeResult.unreachable(url, exc, secret=token, setting=URL_SETTING)
    except AttributeError:
        # slack_sdk keeps a text/plain body as a str, then reads it as a dict ("str" object
        # has no attribute "get"): something answered, and it was not the Web API.
        return _not_the_web_api("auth.test answered in plain text")
    who = f"@{auth.get('user', '?')} in {auth.get('team', '?')}"
    return ProbeResult("ok", scrub(f"bot token accepted ({who})", token))


def _answered(response: Any, token: str) -> ProbeResult:
    """The result for an ``auth.test`` answer slack_sdk did not accept."""
    # A SlackResponse normally; the aiohttp response itself when the body was broken JSON.
    status = int(getattr(response, "status_code", 0) or getattr(response, "status", 0) or 0)
    data = getattr(response, "data", None)
    code = data.get("error") if isinstance(data, dict) else None
    if not isinstance(code, str) or not code:
        code = None
    if status == 429 or status >= 500 or code in TRANSIENT_ERRORS:
        detail = f"auth.test answered HTTP {status}: {code or 'a server error'}"
        return ProbeResult("unexpected", scrub(detail, token))
    if code is not None:
        detail = f"the bot token was refused ({code})"
        return ProbeResult("refused", scrub(detail, token), REFUSED_FIX)
    return _not_the_web_api(f"auth.test answered HTTP {status}")


def _not_the_web_api(answer: str) -> ProbeResult:
    return ProbeResult(
        "misconfigured", f"{answer}, not as the Slack Web API does", f"check {URL_SETTING}"
    )
