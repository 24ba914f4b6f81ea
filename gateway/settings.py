"""The configuration schema: every key a config file may set.

Files use camelCase keys; Python uses snake_case attributes. Every section rejects unknown
keys. Loading (file, environment, ``${VAR}``, command-line overrides) lives in
:mod:`gateway.config`; this module only says what a valid configuration is.

Each field's docstring is its description for users (Markdown, keys in camelCase): the JSON
Schema of ``herald config schema`` carries it, and ``docs/configuration.md`` is generated
from it (``make docs``).
"""

from __future__ import annotations

import functools
import logging
import os
import socket
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import Field, SecretStr, StrictBool, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from channels.discord.config import DiscordConfig
from channels.slack.config import SlackConfig
from channels.webchat.config import WebchatConfig
from configbase import ConfigModel, SecretUrl, secrets_in
from gateway.constants import (
    DEFAULT_MAX_RESULT_CHARS,
    DEFAULT_STATE_DIR,
    ID_PATTERN,
    KNOWN_CONTEXT_WINDOWS,
    LOOPBACK_HOSTS,
    MAX_CONTEXT_WINDOW,
    MAX_SPAWN_DEPTH,
    MIN_CONTEXT_WINDOW,
    MIN_RESULT_CHARS,
    REPLICA_ID_PATTERN,
)
from gateway.schema.mcp import McpConfig, policy_problems
from gateway.schema.sandbox import SandboxConfig
from gateway.schema.schedules import KeyPath, SchedulesConfig, job_problems
from gateway.schema.state import StateConfig
from gateway.schema.targets import ChatTargetError, parse_target

logger = logging.getLogger(__name__)

PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]
ContextWindow = Annotated[int, Field(ge=MIN_CONTEXT_WINDOW, le=MAX_CONTEXT_WINDOW)]

DEFAULT_SYSTEM_PROMPT = (
    "You are Herald's assistant, chatting with people in their chat app. Answer briefly. "
    "For long or slow work, hand it to a background sub-agent with the sessions_spawn tool; "
    "its result is posted back to this chat when it finishes."
)


class CrossReferenceError(ValueError):
    """Problems that span sections, each as (dotted key path, message).

    Raised from the root validator; the loader turns each into its own ConfigIssue.
    """

    def __init__(self, problems: list[tuple[str | KeyPath, str]]) -> None:
        #: A key path is dotted, or a tuple where it goes through a list (an int index).
        self.problems = problems
        super().__init__("; ".join(f"{_dotted(key)}: {message}" for key, message in problems))


def _dotted(key: str | KeyPath) -> str:
    return key if isinstance(key, str) else ".".join(str(part) for part in key)


@functools.lru_cache(maxsize=64)
def _resolve_dir(raw: str) -> Path:
    # Resolving stats every path component; agent turns ask for it often. systemd may pass
    # several colon-separated directories in STATE_DIRECTORY: the first is ours.
    return Path(raw.split(":")[0]).expanduser().resolve()


class AuthConfig(ConfigModel):
    token: SecretStr | None = None
    """Bearer token every HTTP route asks for (`Authorization: Bearer <token>`), except
    `/healthz`, `/readyz`, the web chat page and `/slack/events`. Required when
    `gateway.host` is not a loopback address."""


class GatewayConfig(ConfigModel):
    host: str = "127.0.0.1"
    """Address the HTTP server (API, web chat, Slack events) listens on."""
    port: Annotated[int, Field(ge=1, le=65535)] = 8787
    """Port the HTTP server listens on."""
    auth: AuthConfig = AuthConfig()
    """Authentication of the HTTP API."""
    state_dir: str | None = None
    """Where the state database, transcripts and workspaces live. Default:
    `$STATE_DIRECTORY` (systemd's `StateDirectory=`), else `~/.herald`."""
    shutdown_drain_seconds: NonNegativeFloat = 10.0
    """Seconds running work may take to finish on shutdown before it is cancelled."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """The least severe log lines written."""

    @property
    def is_loopback(self) -> bool:
        return self.host in LOOPBACK_HOSTS or self.host.startswith("127.")

    def resolved_state_dir(self) -> Path:
        """The state directory as an absolute path."""
        raw = self.state_dir or os.environ.get("STATE_DIRECTORY") or DEFAULT_STATE_DIR
        return _resolve_dir(raw)


class ToolPolicyConfig(ConfigModel):
    """``allow`` set means allow-only; ``deny`` always wins."""

    allow: list[str] | None = None
    """Tools allowed, by name, `group:<name>` (`sessions`, `fs`, `web`, `runtime`,
    `mcp`), `mcp:<server>` (one MCP server's tools) or `*`; when set, only these.
    Null: every tool. `exec` runs only where `agent.tools.allow` or the agent's own
    `tools.allow` names it (or its group)."""
    deny: list[str] = []
    """Tools refused, by name or group; a denied tool stays refused whatever `allow` says."""


class ExecConfig(ConfigModel):
    timeout_seconds: PositiveFloat = 30.0
    """Seconds an `exec` command may run before it is killed (a call may ask for less)."""
    max_output_bytes: PositiveInt = 64 * 1024
    """Bytes of a command's output returned to the model; the rest is cut."""
    sandbox: SandboxConfig = SandboxConfig()
    """The sandbox commands run in."""


class WebFetchAccessConfig(ConfigModel):
    allow_private_networks: StrictBool = False
    """Let `web_fetch` reach loopback, link-local, private, CGNAT and multicast addresses
    (refused by default, after DNS resolution and on every redirect)."""


#: The search API root each provider defaults to (SearXNG has none: it is self-hosted).
WEB_SEARCH_BASE_URLS: Final = {
    "brave": "https://api.search.brave.com/res/v1",
    "tavily": "https://api.tavily.com",
}


class WebSearchConfig(ConfigModel):
    provider: Literal["brave", "tavily", "searxng"] | None = None
    """The search API: `"brave"` (Brave Search API), `"tavily"` or `"searxng"` (a SearXNG
    instance with its JSON format enabled); null: no `web_search` tool."""
    api_key: SecretStr | None = None
    """The provider's key (Brave, Tavily); never shown in errors or logs."""
    base_url: Annotated[str, Field(pattern=r"^https?://")] | None = None
    """The API root. Default: `https://api.search.brave.com/res/v1` (Brave),
    `https://api.tavily.com` (Tavily); required for SearXNG: the instance's root. The
    operator's choice, so `web_fetch`'s private-network guard does not apply to it."""
    max_results: Annotated[int, Field(ge=1, le=20)] = 5
    """Results a search returns when the call does not ask for a number."""
    timeout_seconds: PositiveFloat = 15.0
    """Seconds one search may take."""

    @model_validator(mode="after")
    def _provider_needs(self) -> WebSearchConfig:
        if self.provider is None:
            return self
        if self.provider == "searxng" and self.base_url is None:
            raise ValueError("baseUrl is required for searxng: the instance's root URL")
        key = self.api_key.get_secret_value().strip() if self.api_key is not None else ""
        if self.provider != "searxng" and not key:
            raise ValueError(f"apiKey is required for {self.provider}")
        return self

    def resolved_base_url(self) -> str:
        """The API root without a trailing slash."""
        default = WEB_SEARCH_BASE_URLS.get(self.provider or "", "")
        return (self.base_url or default).rstrip("/")


class AgentToolsConfig(ToolPolicyConfig):
    """``agent.tools``: the global tool policy layer, plus settings of the tools themselves."""

    web_fetch: WebFetchAccessConfig = WebFetchAccessConfig()
    """Where `web_fetch` may connect."""
    web_search: WebSearchConfig = WebSearchConfig()
    """The `web_search` tool: off until `provider` is set."""
    exec: ExecConfig = ExecConfig()
    """The `exec` tool (off unless a tool policy's `allow` names it): its limits and its
    sandbox."""
    # The floor leaves room for the cut's marker to make sense.
    max_result_chars: Annotated[int, Field(ge=MIN_RESULT_CHARS)] = DEFAULT_MAX_RESULT_CHARS
    """A tool result longer than this many characters is cut, with a marker, in what the
    model is sent; the transcript keeps it whole."""


class WebFetchConfig(ConfigModel):
    timeout_seconds: PositiveFloat = 15.0
    """Seconds a `web_fetch` may take for the whole response."""
    max_bytes: PositiveInt = 1024 * 1024
    """Bytes of a response `web_fetch` reads at most (a call may ask for less)."""


class SubagentDefaults(ConfigModel):
    max_concurrent: PositiveInt = 1
    """Sub-agent runs at once: the width of the `subagent` lane (in a cluster, per
    replica)."""
    archive_after_minutes: NonNegativeFloat = 60
    """Minutes after its spawn a sub-agent's transcript is archived (renamed); 0 disables
    the automatic archive."""
    model: str | None = None
    """`<provider>/<model id>` sub-agents run on; null: the target agent's model."""
    run_timeout_seconds: NonNegativeFloat = 0
    """Seconds a sub-agent run may take before it ends as `timeout`, when its spawn does
    not say; 0: no limit."""
    tools: ToolPolicyConfig = ToolPolicyConfig()
    """Tool policy for every sub-agent, intersected with its parent's tools."""
    on_restart: Literal["resume", "fail"] = "resume"
    """What a restart does with runs that were running: resume them from their transcript,
    or announce them as `interrupted`."""
    max_spawn_depth: Annotated[int, Field(ge=1, le=MAX_SPAWN_DEPTH)] = 1
    """How deep sub-agents may nest: a person's session is depth 0, its sub-agents depth 1.
    1: sub-agents cannot spawn; sessions below the cap may."""
    max_children_per_session: PositiveInt = 10
    """Runs not yet final that one session may have; past it `sessions_spawn` refuses."""


class CompactionConfig(ConfigModel):
    """``agent.compaction``: what happens when a conversation would outgrow the model's
    context window (``models.providers.*.models[].contextWindow``)."""

    mode: Literal["summary", "truncate", "off"] = "summary"
    """`"summary"`: the oldest turns become one summary the agent's model writes;
    `"truncate"`: they are left out; `"off"`: everything is sent (the provider may
    refuse it)."""
    reserve_tokens: Annotated[int, Field(ge=0, le=1_000_000)] | None = None
    """Tokens kept free for the reply: compaction starts when the prompt (system prompt and
    tool schemas included) would exceed `contextWindow` less this (or less the model's
    `maxTokens`, if larger). Null: the smaller of 4,000 and a quarter of the model's window,
    so a 4,096-token local model works on defaults. On a window too small for both the
    reserve and `maxTokens`, a call asks for at most the reserve."""
    keep_recent_turns: Annotated[int, Field(ge=1, le=1000)] = 4
    """The most recent turns (a person's message and everything answering it) kept whole."""


class SessionToolsConfig(ConfigModel):
    visibility: Literal["tree", "agent", "all"] = "tree"
    """Sessions the session tools see: `"tree"` (the session itself and the runs it
    spawned, down the tree), `"agent"` (every session of the same agent), `"all"`."""


class AgentDefaults(ConfigModel):
    model: str = "demo/scripted"
    """`<provider>/<model id>` of a provider under `models.providers`."""
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    """The system prompt of every agent that sets none of its own."""
    max_iterations: PositiveInt = 20
    """Model calls one turn may make (each followed by its tool calls) before it ends."""
    timeout_seconds: PositiveFloat = 600
    """Seconds a chat turn may take before it is stopped and answered with an apology."""
    max_concurrent: PositiveInt = 4
    """Chat turns at once: the width of the `main` lane."""
    streaming: bool = True
    """Show a chat turn's reply as the model writes it, where the chat can (the web chat
    always can); `false` posts each reply whole when it is done."""
    tools: AgentToolsConfig = AgentToolsConfig()
    """The tool policy every agent starts from, and settings of the tools themselves."""
    session_tools: SessionToolsConfig = SessionToolsConfig()
    """What the session tools (`sessions_list`, `sessions_history`, `sessions_send`)
    may see."""
    compaction: CompactionConfig = CompactionConfig()
    """What happens when a conversation would outgrow the model's context window."""
    subagents: SubagentDefaults = SubagentDefaults()
    """Sub-agent runs started with `sessions_spawn`."""
    web_fetch: WebFetchConfig = WebFetchConfig()
    """Limits of the `web_fetch` tool."""

    @model_validator(mode="before")
    @classmethod
    def _legacy_exec(cls, data: object) -> object:
        # `agent.exec` moved to `agent.tools.exec`; the old key keeps loading (the new one
        # wins key by key) with a warning naming where it went.
        if not isinstance(data, dict) or "exec" not in data:
            return data
        data = dict(data)
        legacy, tools = _as_dict(data.pop("exec")), _as_dict(data.get("tools") or {})
        current = _as_dict(tools.get("exec") or {}) if tools is not None else None
        if legacy is None or tools is None or current is None:
            raise ValueError("agent.exec moved to agent.tools.exec (a section)")
        data["tools"] = tools | {"exec": legacy | current}
        logger.warning("agent.exec is deprecated: write agent.tools.exec instead")
        return data


def _as_dict(value: object) -> dict[str, object] | None:
    """A section as a dict (a model: the fields it was given), or None if it is not one."""
    if isinstance(value, ConfigModel):
        return value.model_dump(exclude_unset=True)
    return dict(value) if isinstance(value, dict) else None


class AgentSubagentsConfig(ConfigModel):
    allow_agents: list[str] = []
    """Agent ids this agent may target with `sessions_spawn`'s `agentId`: `["*"]` any,
    `[]` only itself."""


class AgentConfig(ConfigModel):
    name: str | None = None
    """Display name (`agents_list`); null: the agent id."""
    model: str | None = None
    """`<provider>/<model id>`; null: `agent.model`."""
    system_prompt: str | None = None
    """The agent's system prompt; null: `agent.systemPrompt`."""
    workspace: str | None = None
    """The folder the file and `exec` tools work in. Default:
    `<stateDir>/workspaces/<agentId>`."""
    tools: ToolPolicyConfig = ToolPolicyConfig()
    """The agent's own tool policy, intersected with `agent.tools`."""
    subagents: AgentSubagentsConfig = AgentSubagentsConfig()
    """Which agents this agent may spawn sub-agents of."""


def _default_agents() -> dict[str, AgentConfig]:
    return {"main": AgentConfig(name="Main")}


class RoutingConfig(ConfigModel):
    default_agent: str = "main"
    """The agent of the API's and the CLI's default session (the default agent's main
    session); one of `routing.agents`."""
    agents: dict[str, AgentConfig] = Field(default_factory=_default_agents)
    """The agents, by id (lowercase letters, digits, `_` and `-`)."""

    @field_validator("agents")
    @classmethod
    def _ids_are_normal(cls, agents: dict[str, AgentConfig]) -> dict[str, AgentConfig]:
        for agent_id in agents:
            if not ID_PATTERN.fullmatch(agent_id):
                raise ValueError(
                    f"agent id {agent_id!r} must match {ID_PATTERN.pattern} "
                    "(lowercase letters, digits, '_' and '-')"
                )
        return agents

    @model_validator(mode="after")
    def _default_agent_exists(self) -> RoutingConfig:
        if self.default_agent not in self.agents:
            raise ValueError(
                f"defaultAgent {self.default_agent!r} is not one of routing.agents "
                f"({', '.join(sorted(self.agents)) or 'none'})"
            )
        return self


class ModelCost(ConfigModel):
    """USD per million tokens."""

    input: NonNegativeFloat = 0
    """USD per million prompt tokens (not read from or written to the cache)."""
    output: NonNegativeFloat = 0
    """USD per million generated tokens."""
    cache_read: NonNegativeFloat = 0
    """USD per million prompt tokens read from the provider's cache."""
    cache_write: NonNegativeFloat = 0
    """USD per million prompt tokens written to the provider's cache."""


class ModelConfig(ConfigModel):
    id: Annotated[str, Field(min_length=1)]
    """The provider's model id (`gpt-4o-mini`); agents name it `<provider>/<id>`."""
    cost: ModelCost | None = None
    """Prices, for the `est $` of stats lines; null: no cost figure."""
    max_tokens: PositiveInt = 4096
    """Tokens a reply may have at most."""
    context_window: Annotated[int, Field(ge=MIN_CONTEXT_WINDOW, le=MAX_CONTEXT_WINDOW)] | None = (
        None
    )
    """Tokens the model reads at most (prompt and reply). Null: known for the OpenAI and
    Anthropic models of the example, else unknown (then the newest 200 messages are sent)."""


ProviderApi = Literal["openai-completions", "anthropic-messages", "scripted"]


class ProviderConfig(ConfigModel):
    api: ProviderApi
    """The wire protocol: `"openai-completions"` (OpenAI and compatible servers),
    `"anthropic-messages"`, or `"scripted"` (the offline demo model)."""
    base_url: str | None = None
    """The API root (an OpenAI-compatible one ends in `/v1`); null: the vendor's own."""
    api_key: SecretStr | None = None
    """The provider's API key; usually `"${OPENAI_API_KEY}"` or the like."""
    script: str | None = None
    """`scripted` only: the rules file, relative to the config file. Default: the demo
    script."""
    models: list[ModelConfig] = []
    """The models agents may name as `<provider>/<id>`."""
    timeout_seconds: PositiveFloat = 120
    """Seconds one model call may take."""
    max_retries: NonNegativeInt = 4
    """Retries of a call that failed transiently (408, 409, 429, 5xx, timeouts, dropped
    connections), with exponential backoff honouring `Retry-After`."""

    def model(self, model_id: str) -> ModelConfig | None:
        return next((m for m in self.models if m.id == model_id), None)

    def context_window(self, model: ModelConfig) -> int | None:
        """``model``'s context window: its own, else the known one of an OpenAI or
        Anthropic model id (only for those APIs), else None (unknown)."""
        if model.context_window is not None:
            return model.context_window
        if self.api == "scripted":
            return None
        return KNOWN_CONTEXT_WINDOWS.get(model.id)


def _default_providers() -> dict[str, ProviderConfig]:
    return {
        "demo": ProviderConfig(
            api="scripted",
            models=[
                ModelConfig(
                    id="scripted",
                    cost=ModelCost(input=0.15, output=0.6, cache_read=0.075, cache_write=0),
                )
            ],
        )
    }


class ModelsConfig(ConfigModel):
    providers: dict[str, ProviderConfig] = Field(default_factory=_default_providers)
    """Model providers, by the name agents use in `<provider>/<model id>`."""


class ChannelsConfig(ConfigModel):
    webchat: WebchatConfig = WebchatConfig()
    """The built-in web chat at `/`."""
    slack: SlackConfig = SlackConfig()
    """Slack, through slack-bolt (Socket Mode or HTTP events)."""
    discord: DiscordConfig = DiscordConfig()
    """Discord, through discord.py."""


#: URL schemes libpq accepts for a PostgreSQL connection.
DATABASE_URL_SCHEMES: Final = ("postgresql", "postgres")


class ClusterConfig(ConfigModel):
    """Several replicas on one PostgreSQL database; without ``databaseUrl``, one process on
    SQLite."""

    database_url: SecretUrl | None = None
    """`postgresql://user:password@host:port/database`: the state lives in PostgreSQL,
    shared by every replica (only the password is masked); null: SQLite in `stateDir`."""
    replica_id: Annotated[str, Field(pattern=REPLICA_ID_PATTERN.pattern)] | None = None
    """This replica's name in logs and in `pg_stat_activity` (`herald:<replicaId>`): up to 64
    letters, digits, `.`, `_` and `-`, starting with a letter or digit. Checked with or
    without `databaseUrl`. Default: `<hostname>-<pid>`."""

    @field_validator("database_url")
    @classmethod
    def _postgresql_url(cls, value: SecretUrl | None) -> SecretUrl | None:
        if value is None:
            return None
        url = value.get_secret_value()
        scheme = url.partition("://")[0].lower() if "://" in url else ""
        if scheme not in DATABASE_URL_SCHEMES:
            raise ValueError(
                "must be a PostgreSQL URL: postgresql://user:password@host:port/database"
            )
        return value

    def resolved_replica_id(self) -> str:
        """``replicaId``, or ``<hostname>-<pid>`` when unset."""
        return self.replica_id or f"{socket.gethostname()}-{os.getpid()}"


class HeraldSettings(BaseSettings):
    """The whole configuration. Sources: CLI > environment > file > defaults."""

    model_config = SettingsConfigDict(
        alias_generator=ConfigModel.model_config["alias_generator"],
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        validate_default=True,
        allow_inf_nan=ConfigModel.model_config["allow_inf_nan"],
        use_attribute_docstrings=True,
    )

    gateway: GatewayConfig = GatewayConfig()
    """The HTTP server and the state directory."""
    agent: AgentDefaults = AgentDefaults()
    """Defaults for every agent: model, prompt, limits, tools, sub-agents."""
    routing: RoutingConfig = RoutingConfig()
    """The agents and which one answers by default."""
    models: ModelsConfig = ModelsConfig()
    """Model providers and their models."""
    channels: ChannelsConfig = ChannelsConfig()
    """The chat surfaces: web chat, Slack, Discord."""
    cluster: ClusterConfig = ClusterConfig()
    """Several replicas on one PostgreSQL database."""
    mcp: McpConfig = McpConfig()
    """MCP servers whose tools agents get, and Herald's own MCP endpoint."""
    schedules: SchedulesConfig = SchedulesConfig()
    """Scheduled runs: jobs that start sub-agent runs on their own and announce to a chat."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # BaseSettings would otherwise read any variable named like a section (``AGENT``,
        # ``MODELS``...) from the environment. Constructing this class only validates what it
        # is given; gateway.config layers the file, ``HERALD_*`` and flags itself.
        return (init_settings,)

    @model_validator(mode="after")
    def _cross_references(self) -> HeraldSettings:
        problems: list[tuple[str | KeyPath, str]] = []
        refs: list[tuple[str, str | None]] = [
            ("agent.model", self.agent.model),
            ("agent.subagents.model", self.agent.subagents.model),
        ]
        refs += [(f"routing.agents.{k}.model", a.model) for k, a in self.routing.agents.items()]
        for key, ref in refs:
            if ref is not None and (problem := self.model_ref_problem(ref)):
                problems.append((key, problem))
        for name in ("slack", "discord", "webchat"):
            channel = getattr(self.channels, name)
            # A disabled channel keeps its default agent ("main") even where no agent has
            # that id; only a channel that will run needs a real target.
            if channel.enabled and channel.agent not in self.routing.agents:
                problems.append(
                    (f"channels.{name}.agent", f"{channel.agent!r} is not one of routing.agents")
                )
        problems += self._window_problems()
        problems += policy_problems(self.mcp.servers, self._policy_layers())
        problems += job_problems(
            self.schedules, agents=self.routing.agents, check_target=self._target_problem
        )
        token = self.gateway.auth.token
        if not self.gateway.is_loopback and (token is None or not token.get_secret_value().strip()):
            problems.append(
                (
                    "gateway.auth.token",
                    f"required when gateway.host ({self.gateway.host}) is not a loopback address",
                )
            )
        if problems:
            raise CrossReferenceError(problems)
        return self

    def _target_problem(self, text: str) -> str | None:
        try:
            on = [n for n in ("webchat", "slack", "discord") if getattr(self.channels, n).enabled]
            parse_target(text, dict.fromkeys(on, ""))
        except ChatTargetError as exc:
            return str(exc)
        return None

    def _policy_layers(self) -> list[tuple[str, list[str] | None, list[str]]]:
        """Every tool policy as (key path, allow, deny)."""
        layers = [
            ("agent.tools", self.agent.tools),
            ("agent.subagents.tools", self.agent.subagents.tools),
        ]
        layers += [(f"routing.agents.{i}.tools", a.tools) for i, a in self.routing.agents.items()]
        return [(key, policy.allow, policy.deny) for key, policy in layers]

    def _window_problems(self) -> list[tuple[str, str]]:
        """``agent.compaction.reserveTokens`` must leave every model's window some room."""
        reserve = self.agent.compaction.reserve_tokens
        if reserve is None:  # the default is a quarter of each window at most
            return []
        small = [
            f"{name}/{model.id} has {model.context_window}"
            for name, provider in self.models.providers.items()
            for model in provider.models
            if model.context_window is not None and model.context_window <= reserve
        ]
        if not small:
            return []
        message = f"{reserve} leaves no room for a prompt: contextWindow of {', '.join(small)}"
        return [("agent.compaction.reserveTokens", message)]

    def model_ref_problem(self, ref: str) -> str | None:
        """Why ``ref`` (``<provider>/<model id>``) names no configured model, or None."""
        provider_name, sep, model_id = ref.partition("/")
        if not sep or not provider_name or not model_id:
            return f"{ref!r} is not of the form '<provider>/<model id>'"
        provider = self.models.providers.get(provider_name)
        if provider is None:
            known = ", ".join(sorted(self.models.providers)) or "none"
            return f"unknown provider {provider_name!r} (configured: {known})"
        if provider.model(model_id) is None:
            known = ", ".join(m.id for m in provider.models) or "none"
            return f"provider {provider_name!r} has no model {model_id!r} (configured: {known})"
        return None

    def state_config(self) -> StateConfig:
        """What the state database needs of this configuration."""
        return StateConfig(
            state_dir=self.gateway.resolved_state_dir(),
            database_url=self.cluster.database_url,
            replica_id=self.cluster.resolved_replica_id(),
        )

    def agent_ids(self) -> list[str]:
        return sorted(self.routing.agents)

    def secret_values(self) -> list[str]:
        """Every configured secret's value (for masking logs and scrubbing environments).

        Every SecretStr field of the schema counts, wherever it sits; nothing is listed here.
        """
        return secrets_in(self)
