"""The gateway's long-lived services, in one typed container.

Built once by :mod:`gateway.components` in start-up order; the chat runtime and the
sub-agent manager take it instead of a dozen constructor arguments. Things that change on
SIGHUP (settings, provider and tool registries) are read through it at the moment of use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from channels import Channel
from gateway.archive import ArchiveScheduler
from gateway.errors import HeraldError
from gateway.metrics import Metrics
from gateway.providers import ProviderRegistry
from gateway.reload import SettingsHolder
from gateway.sessions import SessionStore
from gateway.settings import HeraldSettings
from gateway.state import StateDB
from gateway.subagents.outbox import Outbox
from gateway.tools import ServiceKey, ToolRegistry
from lanes import Lane

if TYPE_CHECKING:
    from gateway.runtime.chat import ChatRuntime
    from gateway.subagents.manager import SubagentManager


@dataclass(slots=True)
class Lanes:
    """DESIGN §6: ``main`` (agent.maxConcurrent), ``subagent`` (agent.subagents.maxConcurrent)
    and the per-session lane, one job at a time per session key."""

    main: Lane
    subagent: Lane
    session: Lane

    @classmethod
    def from_settings(cls, settings: HeraldSettings) -> Lanes:
        # The session lane's width bounds how many sessions can hold a turn at once; each
        # key runs one at a time. Waiting for `main` happens inside it, so it must be wide.
        return cls(
            main=Lane("main", settings.agent.max_concurrent),
            subagent=Lane("subagent", settings.agent.subagents.max_concurrent),
            session=Lane("session", 1024),
        )

    def apply(self, settings: HeraldSettings) -> None:
        """Take new widths from reloaded settings."""
        self.main.max_concurrent = settings.agent.max_concurrent
        self.subagent.max_concurrent = settings.agent.subagents.max_concurrent

    def all(self) -> tuple[Lane, ...]:
        return (self.main, self.subagent, self.session)


@dataclass(slots=True)
class Services:
    holder: SettingsHolder
    config_dir: Path
    db: StateDB
    store: SessionStore
    providers: ProviderRegistry
    tools: ToolRegistry
    lanes: Lanes
    outbox: Outbox
    archive: ArchiveScheduler
    channels: dict[str, Channel] = field(default_factory=dict)
    metrics: Metrics = field(default_factory=Metrics)
    #: Set once built; tools reach them through :data:`SUBAGENTS` and :data:`CHAT`.
    subagents: SubagentManager | None = None
    chat: ChatRuntime | None = None

    @property
    def settings(self) -> HeraldSettings:
        return self.holder.current

    def require_chat(self) -> ChatRuntime:
        """The chat runtime (built by :func:`gateway.components.open_services`)."""
        if self.chat is None:
            raise HeraldError("the chat runtime is not built yet")
        return self.chat

    def tool_services(self) -> dict[ServiceKey[Any], object]:
        """What session tools can reach through their :class:`ToolContext`."""
        services: dict[ServiceKey[Any], object] = {SERVICES: self}
        return services


SERVICES: ServiceKey[Services] = ServiceKey("services")
