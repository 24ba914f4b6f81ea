"""The ``mcp`` section: MCP servers whose tools agents get, and Herald's own MCP endpoint.

Kept free of the SDK and of the rest of :mod:`gateway.mcp`, because :mod:`gateway.settings`
composes it (as it composes each channel's config model).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Annotated, Final

from pydantic import Field, SecretStr, field_validator, model_validator

from configbase import ConfigModel
from gateway.schema.sandbox import SandboxLimits

#: A server's name: it prefixes its tools' names, so it stays short and plain.
SERVER_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
#: Between the server and the tool in an MCP tool's name (``time__get_current_time``); a
#: server name never contains it nor ends in ``_``, so the name's server is the part before
#: its first ``__``.
TOOL_SEPARATOR: Final = "__"
STDIO_FIELDS: Final = ("command", "args", "env", "cwd", "sandbox")
HTTP_FIELDS: Final = ("url", "headers")


class McpServerConfig(ConfigModel):
    """One MCP server: stdio (`command`, …) or Streamable HTTP (`url`, …), never both."""

    command: Annotated[str, Field(min_length=1)] | None = None
    """stdio: the program Herald starts; it speaks MCP on its stdin and stdout."""
    args: list[str] = []
    """stdio: the program's arguments."""
    env: dict[str, SecretStr] = {}
    """stdio: variables the program gets besides `PATH`, `HOME`, `LANG`, `LC_*` and `TZ`
    (it never sees Herald's other variables). Values are secrets: masked in `config show`
    and logs."""
    cwd: str | None = None
    """stdio: the program's working directory; null: Herald's own (in a sandbox: its
    private `/tmp`)."""
    sandbox: SandboxLimits | None = None
    """stdio: run the program under bubblewrap, as `exec` commands run: it sees the
    system's programs, its `readOnly` paths and its `cwd` (read-write), never Herald's
    state, config or home. `true` takes the defaults; an object sets `network` (false:
    loopback only), `memoryMb`, `maxProcesses`, `maxFileMb` and `readOnly` (the program
    and its interpreter must be in `/usr` or there). No CPU-time limit: the server lives as
    long as the gateway."""
    url: Annotated[str, Field(pattern=r"^https?://")] | None = None
    """Streamable HTTP: the server's endpoint (`https://mcp.example.com/mcp`)."""
    headers: dict[str, SecretStr] = {}
    """Streamable HTTP: headers sent with every request (`Authorization`); values are
    secrets."""
    enabled: bool = True
    """Whether Herald connects to this server."""
    timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 60
    """Seconds one tool call may take; then it is cancelled and the model gets an error."""
    startup_timeout_seconds: Annotated[float, Field(gt=0, le=600)] = 30
    """Seconds the server may take to start and list its tools."""

    @model_validator(mode="before")
    @classmethod
    def _one_transport(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        keys = {_snake(k) for k in data}
        stdio = sorted(k for k in keys if k in STDIO_FIELDS)
        http = sorted(k for k in keys if k in HTTP_FIELDS)
        if stdio and http:
            raise ValueError(
                f"a server is stdio ({', '.join(STDIO_FIELDS)}) or HTTP "
                f"({', '.join(HTTP_FIELDS)}), not both: remove {', '.join(http)} "
                f"or {', '.join(stdio)}"
            )
        if "command" not in keys and "url" not in keys:
            raise ValueError("needs `command` (a stdio server) or `url` (a Streamable HTTP one)")
        return data

    @field_validator("sandbox", mode="before")
    @classmethod
    def _sandbox_switch(cls, value: object) -> object:
        # `true` is the defaults, `false` none: the switch is the short way to write both.
        if value is True:
            return {}
        if value is False:
            return None
        return value

    @property
    def transport(self) -> str:
        """``"stdio"`` or ``"http"``."""
        return "stdio" if self.command is not None else "http"

    @property
    def shown_transport(self) -> str:
        """The transport as people read it: ``stdio``, ``stdio, sandboxed`` or ``http``."""
        return "stdio, sandboxed" if self.sandbox is not None else self.transport

    def describe(self) -> str:
        """Where the server is, without secrets: the command line or the URL."""
        if self.command is not None:
            return " ".join([self.command, *self.args])
        return self.url or ""


class McpServeConfig(ConfigModel):
    enabled: bool = False
    """Serve Herald's own MCP endpoint (Streamable HTTP) on the gateway's port, behind
    `gateway.auth.token`: an MCP client can spawn runs and read their results."""
    path: Annotated[str, Field(pattern=r"^/[A-Za-z0-9/_-]*$")] = "/mcp"
    """The endpoint's path. Its first segment must be its own: a path under a route of the
    gateway (`/`, `/healthz`, `/readyz`, `/metrics`, `/v1/…`, `/static/…`, `/webchat/…`,
    `/slack/…`) is a config error."""


class McpConfig(ConfigModel):
    servers: dict[str, McpServerConfig] = {}
    """MCP servers, by name (lowercase letters, digits, `_` and `-`, at most 32; no `__`
    and no `_` at the end): their tools reach agents as `<server>__<tool>`."""
    serve: McpServeConfig = McpServeConfig()
    """Herald as an MCP server."""

    @field_validator("servers")
    @classmethod
    def _names(cls, servers: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        for name in servers:
            if not SERVER_NAME.fullmatch(name):
                raise ValueError(
                    f"server name {name!r} must match {SERVER_NAME.pattern} "
                    "(lowercase letters, digits, '_' and '-', at most 32)"
                )
            if TOOL_SEPARATOR in name or name.endswith("_"):
                # Server `n` tool `x__y` and server `n__x` tool `y` would both be `n__x__y`
                # (and `a_` tool `t` would be `a___t`, as `a` tool `_t` is).
                raise ValueError(
                    f"server name {name!r} must not contain {TOOL_SEPARATOR!r} nor end in "
                    f"'_': {TOOL_SEPARATOR!r} separates the server from the tool in its "
                    "tools' names"
                )
        return servers

    def enabled_servers(self) -> dict[str, McpServerConfig]:
        """The servers Herald connects to, by name."""
        return {name: s for name, s in self.servers.items() if s.enabled}


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


#: A policy pattern naming one server's tools: ``mcp:<server>``.
SERVER_PATTERN_PREFIX: Final = "mcp:"


def policy_problems(
    servers: Iterable[str], layers: Iterable[tuple[str, Sequence[str] | None, Sequence[str]]]
) -> list[tuple[str, str]]:
    """(key, message) for each policy pattern naming an MCP server that is not configured:
    ``mcp:<server>`` or ``<server>__<tool>``. ``layers`` are (key path, allow, deny).

    An unknown tool of a configured server is no problem here: servers change their tools,
    and the gateway warns about it once they listed them.
    """
    known = set(servers)
    listed = ", ".join(sorted(known)) or "none"
    problems: list[tuple[str, str]] = []
    for key, allow, deny in layers:
        for field_name, patterns in (("allow", allow or ()), ("deny", deny)):
            for pattern in patterns:
                if pattern.startswith(SERVER_PATTERN_PREFIX):
                    server = pattern.removeprefix(SERVER_PATTERN_PREFIX)
                else:
                    server, sep, rest = pattern.partition(TOOL_SEPARATOR)
                    if not (sep and server and rest):
                        continue
                if server not in known:
                    problems.append(
                        (
                            f"{key}.{field_name}",
                            f"{pattern!r} names MCP server {server!r}, which is not in "
                            f"mcp.servers (configured: {listed})",
                        )
                    )
    return problems
