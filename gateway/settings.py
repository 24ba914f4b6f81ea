"""The configuration schema: every key a config file may set.

Files use camelCase keys; Python uses snake_case attributes. Every section rejects unknown
keys. Loading (file, environment, ``${VAR}``, command-line overrides) lives in
:mod:`gateway.config`; this module only says what a valid configuration is.
"""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from channels.config_base import ConfigModel, SecretUrl, secrets_in
from channels.discord.config import DiscordConfig
from channels.slack.config import SlackConfig
from channels.webchat.config import WebchatConfig
from gateway.constants import (
    DEFAULT_MAX_RESULT_CHARS,
    DEFAULT_STATE_DIR,
    ID_PATTERN,
    KNOWN_CONTEXT_WINDOWS,
    LOOPBACK_HOSTS,
    MAX_SPAWN_DEPTH,
    MIN_CONTEXT_WINDOW,
    MIN_RESULT_CHARS,
)

PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]

DEFAULT_SYSTEM_PROMPT = (
    "You are Herald's assistant, chatting with people in their chat app. Answer briefly. "
    "For long or slow work, hand it to a background sub-agent with the sessions_spawn tool; "
    "its result is posted back to this chat when it finishes."
)


class CrossReferenceError(ValueError):
    """Problems that span sections, each as (dotted key path, message).

    Raised from the root validator; the loader turns each into its own ConfigIssue.
    """

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{key}: {message}" for key, message in problems))


@functools.lru_cache(maxsize=64)
def _resolve_dir(raw: str) -> Path:
    # Resolving stats every path component; agent turns ask for it often. systemd may pass
    # several colon-separated directories in STATE_DIRECTORY: the first is ours.
    return Path(raw.split(":")[0]).expanduser().resolve()


class AuthConfig(ConfigModel):
    token: SecretStr | None = None


class GatewayConfig(ConfigModel):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)] = 8787
    auth: AuthConfig = AuthConfig()
    #: Default: ``$STATE_DIRECTORY`` (systemd's StateDirectory=), else ``~/.herald``.
    state_dir: str | None = None
    #: Seconds running work may take to finish on shutdown before it is cancelled.
    shutdown_drain_seconds: NonNegativeFloat = 10.0
    log_level: Literal["debug", "info", "warning", "error"] = "info"

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
    deny: list[str] = []


class ExecConfig(ConfigModel):
    timeout_seconds: PositiveFloat = 30.0
    max_output_bytes: PositiveInt = 64 * 1024


class WebFetchAccessConfig(ConfigModel):
    #: Let ``web_fetch`` reach loopback, link-local, private, CGNAT and multicast addresses.
    allow_private_networks: bool = False


class AgentToolsConfig(ToolPolicyConfig):
    """``agent.tools``: the global tool policy layer, plus settings of the tools themselves."""

    web_fetch: WebFetchAccessConfig = WebFetchAccessConfig()
    #: A tool result longer than this is cut (with a marker) in the conversation sent to the
    #: model; the transcript keeps it whole. The floor leaves room for the marker to make sense.
    max_result_chars: Annotated[int, Field(ge=MIN_RESULT_CHARS)] = DEFAULT_MAX_RESULT_CHARS


class WebFetchConfig(ConfigModel):
    timeout_seconds: PositiveFloat = 15.0
    max_bytes: PositiveInt = 1024 * 1024


class SubagentDefaults(ConfigModel):
    max_concurrent: PositiveInt = 1
    archive_after_minutes: NonNegativeFloat = 60
    model: str | None = None
    run_timeout_seconds: NonNegativeFloat = 0
    tools: ToolPolicyConfig = ToolPolicyConfig()
    #: What a restart does with runs that were running: resume them from their transcript,
    #: or announce them as ``interrupted``.
    on_restart: Literal["resume", "fail"] = "resume"
    #: How deep sub-agents may nest: a person's session is depth 0, its sub-agents depth 1.
    #: 1 = sub-agents cannot spawn; sessions below the cap may.
    max_spawn_depth: Annotated[int, Field(ge=1, le=MAX_SPAWN_DEPTH)] = 1
    #: Runs not yet final that one session may have; past it ``sessions_spawn`` refuses.
    max_children_per_session: PositiveInt = 10


class CompactionConfig(ConfigModel):
    """``agent.compaction``: what happens when a conversation would outgrow the model's
    context window (``models.providers.*.models[].contextWindow``)."""

    #: "summary": the oldest turns become one summary the model writes; "truncate": they are
    #: dropped; "off": everything is sent (the provider may refuse it).
    mode: Literal["summary", "truncate", "off"] = "summary"
    #: Tokens kept free for the reply: compaction starts above ``contextWindow - this``.
    reserve_tokens: Annotated[int, Field(ge=0, le=1_000_000)] = 4000
    #: The most recent turns (a person's message and everything answering it) kept whole.
    keep_recent_turns: Annotated[int, Field(ge=1, le=1000)] = 4


class SessionToolsConfig(ConfigModel):
    #: Sessions the session tools see: "tree" (this one and its sub-agents), "agent", "all".
    visibility: Literal["tree", "agent", "all"] = "tree"


class AgentDefaults(ConfigModel):
    model: str = "demo/scripted"
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    max_iterations: PositiveInt = 20
    timeout_seconds: PositiveFloat = 600
    max_concurrent: PositiveInt = 4
    tools: AgentToolsConfig = AgentToolsConfig()
    session_tools: SessionToolsConfig = SessionToolsConfig()
    compaction: CompactionConfig = CompactionConfig()
    subagents: SubagentDefaults = SubagentDefaults()
    exec: ExecConfig = ExecConfig()
    web_fetch: WebFetchConfig = WebFetchConfig()


class AgentSubagentsConfig(ConfigModel):
    #: Agent ids this agent may target with ``sessions_spawn``; ``["*"]`` = any, ``[]`` = itself.
    allow_agents: list[str] = []


class AgentConfig(ConfigModel):
    name: str | None = None
    model: str | None = None
    system_prompt: str | None = None
    #: Default: ``<stateDir>/workspaces/<agentId>``.
    workspace: str | None = None
    tools: ToolPolicyConfig = ToolPolicyConfig()
    subagents: AgentSubagentsConfig = AgentSubagentsConfig()


def _default_agents() -> dict[str, AgentConfig]:
    return {"main": AgentConfig(name="Main")}


class RoutingConfig(ConfigModel):
    default_agent: str = "main"
    agents: dict[str, AgentConfig] = Field(default_factory=_default_agents)

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
    output: NonNegativeFloat = 0
    cache_read: NonNegativeFloat = 0
    cache_write: NonNegativeFloat = 0


class ModelConfig(ConfigModel):
    id: Annotated[str, Field(min_length=1)]
    cost: ModelCost | None = None
    max_tokens: PositiveInt = 4096
    #: Tokens the model reads at most (prompt and reply). None: a known default for the
    #: OpenAI and Anthropic models (:data:`KNOWN_CONTEXT_WINDOWS`), else unknown.
    context_window: Annotated[int, Field(ge=MIN_CONTEXT_WINDOW)] | None = None


ProviderApi = Literal["openai-completions", "anthropic-messages", "scripted"]


class ProviderConfig(ConfigModel):
    api: ProviderApi
    base_url: str | None = None
    api_key: SecretStr | None = None
    #: ``scripted`` only: the rules file, relative to the config file. Default: the demo script.
    script: str | None = None
    models: list[ModelConfig] = []
    timeout_seconds: PositiveFloat = 120
    max_retries: NonNegativeInt = 4

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


class ChannelsConfig(ConfigModel):
    webchat: WebchatConfig = WebchatConfig()
    slack: SlackConfig = SlackConfig()
    discord: DiscordConfig = DiscordConfig()


#: URL schemes libpq accepts for a PostgreSQL connection.
DATABASE_URL_SCHEMES: Final = ("postgresql", "postgres")


class ClusterConfig(ConfigModel):
    """Several replicas on one PostgreSQL database; without ``databaseUrl``, one process on
    SQLite."""

    #: ``postgresql://user:password@host:port/database``: the state lives in PostgreSQL.
    database_url: SecretUrl | None = None
    #: This replica's name (logs, the database's ``application_name``); default
    #: ``<hostname>-<pid>``.
    replica_id: Annotated[str, Field(min_length=1, max_length=64)] | None = None

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
    )

    gateway: GatewayConfig = GatewayConfig()
    agent: AgentDefaults = AgentDefaults()
    routing: RoutingConfig = RoutingConfig()
    models: ModelsConfig = ModelsConfig()
    channels: ChannelsConfig = ChannelsConfig()
    cluster: ClusterConfig = ClusterConfig()

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
        problems: list[tuple[str, str]] = []
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

    def _window_problems(self) -> list[tuple[str, str]]:
        """``agent.compaction.reserveTokens`` must leave every model's window some room."""
        reserve = self.agent.compaction.reserve_tokens
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

    def agent_ids(self) -> list[str]:
        return sorted(self.routing.agents)

    def secret_values(self) -> list[str]:
        """Every configured secret's value (for masking logs and scrubbing environments).

        Every SecretStr field of the schema counts, wherever it sits; nothing is listed here.
        """
        return secrets_in(self)
