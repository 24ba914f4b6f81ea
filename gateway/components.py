"""The gateway's resources, in start-up order. Each is a ``cleanup_ctx`` generator."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator

from aiohttp import web

from gateway.app import Resource
from gateway.reload import SettingsHolder

logger = logging.getLogger(__name__)


def resources_for(holder: SettingsHolder) -> list[Resource]:
    """Every resource the daemon runs, in the order they start."""

    async def state_dir(app: web.Application) -> AsyncIterator[None]:
        path = holder.current.gateway.resolved_state_dir()
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path, 0o700)
        logger.info("state directory ready", extra={"path": str(path)})
        yield

    return [state_dir]
