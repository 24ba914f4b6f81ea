"""The daemon, wired in one place.

Each resource is an aiohttp ``cleanup_ctx`` generator kept under a typed ``web.AppKey``, so
start-up runs in order and teardown runs in reverse by itself: state, providers, lanes,
runtime, channels. Routes are added before the app starts (aiohttp freezes the router).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from channels import Channel
from gateway.api.auth import auth_middleware
from gateway.api.errors import error_middleware
from gateway.api.health import health_routes
from gateway.api.origin import origin_middleware
from gateway.reload import SettingsHolder
from gateway.services import Services
from gateway.settings import HeraldSettings

logger = logging.getLogger(__name__)

SETTINGS = web.AppKey("settings", SettingsHolder)
CHANNELS = web.AppKey("channels", dict[str, Channel])
SERVICES_KEY = web.AppKey("services", Services)

#: A resource: an async generator that sets up before ``yield`` and tears down after.
Resource = Callable[[web.Application], AsyncIterator[None]]


def _token_getter(holder: SettingsHolder) -> Callable[[], str | None]:
    def get() -> str | None:
        token = holder.current.gateway.auth.token
        return token.get_secret_value() or None if token is not None else None

    return get


def build_app(
    holder: SettingsHolder, *, resources: list[Resource] | None = None
) -> web.Application:
    """The gateway's aiohttp application with every route and resource registered."""
    token = _token_getter(holder)
    app = web.Application(
        middlewares=[
            error_middleware,
            origin_middleware(lambda: holder.current.gateway.host, lambda: token() is not None),
            auth_middleware(token),
        ]
    )
    app[SETTINGS] = holder
    app[CHANNELS] = {}

    def readiness() -> dict[str, bool]:
        return {name: channel.connected for name, channel in app[CHANNELS].items()}

    app.add_routes(health_routes(readiness))
    for resource in resources or []:
        app.cleanup_ctx.append(resource)
    return app


def settings_of(app: web.Application) -> HeraldSettings:
    """The settings in force for ``app`` (reloads included)."""
    return app[SETTINGS].current
