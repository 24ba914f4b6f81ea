"""What a tool is: its parameters model, its context, its output.

A tool declares its parameters once, as a :class:`ToolParams` pydantic model; the registry
derives the JSON Schema the providers need from it and validates arguments against it
before :meth:`Tool.run` is called, so ``run`` always gets a valid, typed ``params``.

Gateway services (session store, spawner, …) reach tools through
:attr:`ToolContext.services`, a mapping keyed by typed :class:`ServiceKey` objects (the
pattern of aiohttp's ``web.AppKey``): the tool layer needs no import of those services, and
``ctx.service(KEY)`` returns the service with its static type.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

import orjson
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from gateway.settings import HeraldSettings
from gateway.state import Origin
from gateway.tools.errors import ServiceUnavailableError

T = TypeVar("T")
P = TypeVar("P", bound=BaseModel)


class ToolParams(BaseModel):
    """Base of every tool's parameters: camelCase on the wire, unknown keys rejected.

    Python code may also construct them by field name (``ReadParams(path="a")``). Numbers
    must be finite: Python's JSON reader turns ``1e999`` into infinity (and reads ``NaN``),
    which no JSON answer or stored run could carry.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
    )


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool's result.

    ``content`` is what the model sees; ``data`` is the structured result the HTTP API
    returns (``None``: the API returns ``{"content": content}``); ``is_error`` marks a
    failed call; ``ends_run`` asks the runtime to end the (sub-agent) run after this call.
    """

    content: str
    data: dict[str, Any] | None = None
    is_error: bool = False
    ends_run: bool = False

    @classmethod
    def error(cls, message: str, data: dict[str, Any] | None = None) -> ToolOutput:
        """An error result whose content is ``message``."""
        return cls(content=message, data=data, is_error=True)

    @classmethod
    def json(cls, data: dict[str, Any], *, is_error: bool = False) -> ToolOutput:
        """A result whose content is ``data`` as compact JSON (for JSON-shaped tools)."""
        return cls(content=orjson.dumps(data).decode(), data=data, is_error=is_error)

    def result_json(self) -> dict[str, Any]:
        """The structured result for the HTTP API."""
        return self.data if self.data is not None else {"content": self.content}


class ServiceKey(Generic[T]):
    """A typed key of :attr:`ToolContext.services`: ``SPAWNER = ServiceKey[Spawner]("spawner")``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<ServiceKey {self.name}>"


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Who is calling a tool, and from where; passed to every :meth:`Tool.run`.

    ``workspace`` is the agent's working directory (created by the fs tools when missing);
    ``is_subagent`` is true in ``agent:<id>:subagent:<uuid>`` sessions; ``services`` holds
    the gateway services that some tools need (see :class:`ServiceKey`).
    """

    agent_id: str
    session_key: str
    workspace: Path
    settings: HeraldSettings
    session_id: str | None = None
    is_subagent: bool = False
    #: The sub-agent run this session belongs to, when there is one.
    run_id: str | None = None
    #: The chat and thread of the message this turn answers (None outside chat turns).
    origin: Origin | None = None
    #: 0 in a session a person talks to, d + 1 in a sub-agent spawned at depth d.
    depth: int = 0
    services: Mapping[ServiceKey[Any], object] = field(default_factory=dict)

    def service(self, key: ServiceKey[T]) -> T:
        """The service registered under ``key``; :class:`ServiceUnavailableError` if absent."""
        try:
            return cast(T, self.services[key])
        except KeyError:
            raise ServiceUnavailableError(key.name) from None


class Tool(ABC, Generic[P]):
    """A tool the model can call.

    Subclasses set ``name``, ``description``, ``group`` (``fs``, ``web``, ``runtime``,
    ``sessions``, ``subagent``, …: the ``group:<name>`` of tool policies) and ``params``
    (a :class:`ToolParams` subclass), and implement :meth:`run`. ``run`` raises
    :class:`~gateway.tools.errors.ToolError` for expected failures; anything else it raises
    is reported to the model as ``tool <name> failed: …`` and logged.
    """

    name: str
    description: str
    group: str
    params: type[P]
    #: Further policy groups the tool belongs to, named as policies write them
    #: (``mcp:<server>`` for an MCP server's tools).
    extra_groups: tuple[str, ...] = ()

    def input_schema(self) -> dict[str, Any] | None:
        """The parameters' JSON Schema when it is not derived from ``params`` (a tool of an
        MCP server brings its own); None: the registry derives it."""
        return None

    @abstractmethod
    async def run(self, params: P, ctx: ToolContext) -> ToolOutput:
        """Carry out one call with validated ``params``."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} group={self.group}>"
