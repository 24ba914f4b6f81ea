"""The live configuration and its reload on SIGHUP.

Components read ``holder.current`` when they act, and subscribe for the changes they must
push somewhere (lane widths). A bad new configuration is refused with a logged error and the
old one stays in force.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from gateway.errors import ConfigError
from gateway.logs import REDACTOR
from gateway.settings import HeraldSettings

logger = logging.getLogger(__name__)

ReloadListener = Callable[[HeraldSettings, HeraldSettings], None]

#: Keys whose change needs a restart: they are bound at start-up (sockets, connections).
#: ``mcp.serve``: the endpoint is mounted on the app's routes at start (and its path was
#: checked against theirs then).
RESTART_KEYS = ("gateway.host", "gateway.port", "gateway.stateDir", "channels", "mcp.serve")


def _pick(settings: HeraldSettings, dotted: str) -> object:
    data: object = settings.model_dump(by_alias=True, mode="json")
    for part in dotted.split("."):
        data = data[part] if isinstance(data, dict) else None
    return data


@dataclass
class SettingsHolder:
    """Holds the settings in force; ``reload()`` swaps them when the file is valid."""

    current: HeraldSettings
    path: str | None = None
    environ: Mapping[str, str] | None = None
    overrides: Mapping[str, object] | None = None
    _listeners: list[ReloadListener] = field(default_factory=list)

    def __post_init__(self) -> None:
        REDACTOR.set_secrets(self.current.secret_values())

    def subscribe(self, listener: ReloadListener) -> None:
        """Call ``listener(old, new)`` after every successful reload."""
        self._listeners.append(listener)

    def unsubscribe(self, listener: ReloadListener) -> None:
        """Stop calling ``listener`` (a no-op when it is not subscribed)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def reload(self) -> bool:
        """Load the config file again; apply it when valid. Returns whether it was applied."""
        from gateway.config import load_settings

        try:
            loaded = load_settings(
                self.path,
                environ=self.environ if self.environ is not None else os.environ,
                overrides=self.overrides,
            )
        except ConfigError as exc:
            logger.error(
                "config reload refused; keeping the running configuration",
                extra={"issues": [str(issue) for issue in exc.issues]},
            )
            return False
        old, new = self.current, loaded.settings
        needs_restart = [k for k in RESTART_KEYS if _pick(old, k) != _pick(new, k)]
        if needs_restart:
            logger.warning(
                "config reload: these keys change only on restart",
                extra={"keys": needs_restart},
            )
        self.current = new
        REDACTOR.set_secrets(new.secret_values())
        for listener in self._listeners:
            try:
                listener(old, new)
            except Exception:  # one broken listener must not stop the others
                logger.exception("config reload listener failed")
        logger.info("config reloaded", extra={"path": self.path})
        return True


#: The settings in force for an app, reloads included.
SETTINGS = web.AppKey("settings", SettingsHolder)
#: The folder of the config file: relative paths in the settings (a provider's script) start
#: here.
CONFIG_DIR = web.AppKey("config_dir", Path)


def settings_of(app: web.Application) -> HeraldSettings:
    """The settings in force for ``app`` (reloads included)."""
    return app[SETTINGS].current
