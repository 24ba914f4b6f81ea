"""The model providers, the tools in force and what an agent turn runs with: the tool
contexts of sessions, the tool invoker, the turn factory and the conversations."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from aiohttp import web

from gateway.agent import Conversations, ToolContexts, ToolInvoker, TurnFactory
from gateway.metrics import METRICS
from gateway.parts.state import SESSION_STORE, STATE
from gateway.parts.timing import TIMING
from gateway.providers import ProviderRegistry
from gateway.reload import CONFIG_DIR, SETTINGS, settings_of
from gateway.settings import HeraldSettings
from gateway.tools import ServiceKey, ToolRegistry


class ToolCatalog(Protocol):
    """Every tool Herald offers for ``settings``, in the order models are shown them."""

    def __call__(self, settings: HeraldSettings) -> ToolRegistry: ...


class ToolBox:
    """The tool registry in force: rebuilt from reloaded settings (limits live in tools).

    Tools that come from outside the settings (MCP servers' tools) are installed again in
    each rebuilt registry by the installers added with :meth:`add_installer`.
    """

    def __init__(self, settings: HeraldSettings, catalog: ToolCatalog) -> None:
        self._catalog = catalog
        self.current = catalog(settings)
        self._installers: list[Callable[[ToolRegistry], None]] = []

    def add_installer(self, install: Callable[[ToolRegistry], None]) -> None:
        """Have ``install`` register its tools in every rebuilt registry."""
        self._installers.append(install)

    def rebuild(self, settings: HeraldSettings) -> None:
        registry = self._catalog(settings)
        for install in self._installers:
            install(registry)
        self.current = registry

    def get(self) -> ToolRegistry:
        return self.current


PROVIDERS = web.AppKey("providers", ProviderRegistry)
#: Which tools exist: set by the app, which knows every capability's tools.
TOOL_CATALOG = web.AppKey("tool_catalog", ToolCatalog)
TOOLS = web.AppKey("tools", ToolBox)
#: The services session tools reach through their context; each capability adds its own.
TOOL_SERVICES = web.AppKey("tool_services", dict[ServiceKey[Any], object])
CONTEXTS = web.AppKey("contexts", ToolContexts)
TOOL_INVOKER = web.AppKey("tool_invoker", ToolInvoker)
TURN_FACTORY = web.AppKey("turn_factory", TurnFactory)
CONVERSATIONS = web.AppKey("conversations", Conversations)


def tool_services(app: web.Application) -> dict[ServiceKey[Any], object]:
    services: dict[ServiceKey[Any], object] = app[TOOL_SERVICES]
    return services


async def providers_setup(app: web.Application) -> AsyncIterator[None]:
    """The model providers; a reload that changes ``models`` reconfigures them."""
    registry = ProviderRegistry(
        settings_of(app).models.providers,
        config_dir=app[CONFIG_DIR],
        retry=app[TIMING].provider_retry,
    )
    app[PROVIDERS] = registry

    def reloaded(old: HeraldSettings, new: HeraldSettings) -> None:
        if old.models != new.models:
            registry.reconfigure(new.models.providers)

    app[SETTINGS].subscribe(reloaded)
    try:
        yield
    finally:
        app[SETTINGS].unsubscribe(reloaded)
        await registry.close()


async def agent_setup(app: web.Application) -> AsyncIterator[None]:
    """The tools in force (rebuilt on reload for what starts next) and what turns run with."""
    holder = app[SETTINGS]
    tools = app[TOOLS] = ToolBox(holder.current, app[TOOL_CATALOG])
    app[TOOL_SERVICES] = {}
    app[CONTEXTS] = ToolContexts(holder, tool_services(app))
    app[TOOL_INVOKER] = ToolInvoker(
        holder=holder,
        store=app[SESSION_STORE],
        runs=app[STATE].runs,
        tools=tools.get,
        contexts=app[CONTEXTS],
    )
    app[TURN_FACTORY] = TurnFactory(
        holder=holder,
        store=app[SESSION_STORE],
        providers=app[PROVIDERS],
        tools=tools.get,
        contexts=app[CONTEXTS],
        metrics=app[METRICS],
    )
    app[CONVERSATIONS] = Conversations(app[TURN_FACTORY])

    def reloaded(old: HeraldSettings, new: HeraldSettings) -> None:
        tools.rebuild(new)

    holder.subscribe(reloaded)
    try:
        yield
    finally:
        holder.unsubscribe(reloaded)
