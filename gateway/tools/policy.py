"""Tool policy: which tools a session may see and call.

Each policy layer (a ``ToolPolicyConfig``) is applied to the registry's names on its own:

* ``allow`` unset (null): every name, minus ``deny``;
* ``allow`` set: only the names it matches (allow-only), minus ``deny``.

Patterns are a tool name, ``*`` (every name) or ``group:<name>`` (``sessions``, ``fs``,
``web``, ``runtime``, plus any group a registered tool declares). Deny wins in every layer.
The layers are intersected:

* an agent's session: registry ∩ ``agent.tools`` ∩ ``routing.agents.<id>.tools``;
* a sub-agent session: its target agent's set ∩ ``agent.subagents.tools`` ∩ its parent
  session's set, minus the session tools (``sessions_spawn``, ``sessions_yield``,
  ``subagents``, ``sessions_list``, ``sessions_history``, ``sessions_send``,
  ``agents_list``), so a sub-agent never gets a tool its parent lacks (seed 001). Below
  ``agent.subagents.maxSpawnDepth`` it keeps the orchestration tools (:data:`NESTING_TOOLS`)
  its parent has. The parent's set is itself computed this way, so the intersection runs
  down the whole chain, from the person's session to the deepest run.

``exec`` is off unless allowed: it is in an agent's set only when ``agent.tools.allow`` or
the agent's own ``tools.allow`` names it, as ``exec`` or through a group holding it
(``group:runtime``); ``*`` alone does not enable it, and every other rule (deny, allow-only
layers) still applies. ``agent.subagents.tools`` can only narrow, never enable it.

``submit_result`` and ``submit_error`` exist for sub-agent sessions only: never offered
elsewhere, always offered there unless some layer denies them (deny still wins; an
allow-only layer does not need to name them).

A name in allow/deny that matches no tool or group is a configuration error (a typo in a
``deny`` list would otherwise leave the tool callable): :func:`policy_issues` lists them,
with a "did you mean", for the start-up checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from difflib import get_close_matches
from typing import Final

from gateway.errors import ConfigIssue
from gateway.schema.mcp import TOOL_SEPARATOR as MCP_SEPARATOR
from gateway.settings import HeraldSettings, ToolPolicyConfig
from gateway.tools.errors import UnknownAgentError
from gateway.tools.registry import ToolRegistry

WILDCARD: Final = "*"
GROUP_PREFIX: Final = "group:"

SESSION_TOOLS: Final = frozenset(
    {
        "sessions_spawn",
        "sessions_yield",
        "subagents",
        "sessions_list",
        "sessions_history",
        "sessions_send",
        "agents_list",
    }
)
#: What a sub-agent below the depth cap keeps of the session tools: it may orchestrate.
NESTING_TOOLS: Final = frozenset({"sessions_spawn", "sessions_yield", "subagents", "agents_list"})
SUBAGENT_ONLY_TOOLS: Final = frozenset({"submit_result", "submit_error"})
#: Tools a sub-agent never has, whatever its policy: a schedule belongs to a chat.
NEVER_SUBAGENT_TOOLS: Final = frozenset({"schedule"})
#: Tools that a layer's allow list must name (directly or by group) to be available at all.
OPT_IN_TOOLS: Final = frozenset({"exec"})

DEFAULT_GROUPS: Final[Mapping[str, frozenset[str]]] = {
    "sessions": SESSION_TOOLS,
    "fs": frozenset({"read", "write", "edit", "ls"}),
    "web": frozenset({"web_fetch", "web_search"}),
    "runtime": frozenset({"exec"}),
    "subagent": SUBAGENT_ONLY_TOOLS,
    # Every MCP server's tools; they register as their servers list them.
    "mcp": frozenset(),
}
#: ``mcp:<server>``: the tools of one MCP server (a group the tools declare as written).
SERVER_GROUP_PREFIX: Final = "mcp:"


def expand(
    patterns: Iterable[str], names: frozenset[str], groups: Mapping[str, Iterable[str]]
) -> frozenset[str]:
    """The members of ``names`` that ``patterns`` match (``*``, ``group:x``, exact names)."""
    out: set[str] = set()
    for pattern in patterns:
        if pattern == WILDCARD:
            return names
        if pattern.startswith(GROUP_PREFIX):
            out.update(groups.get(pattern.removeprefix(GROUP_PREFIX), ()))
        elif pattern.startswith(SERVER_GROUP_PREFIX):
            out.update(groups.get(pattern, ()))
        else:
            out.add(pattern)
    return names & out


def apply_layer(
    names: frozenset[str], policy: ToolPolicyConfig, groups: Mapping[str, Iterable[str]]
) -> frozenset[str]:
    """The names one policy layer lets through: allow-only when ``allow`` is set; deny wins."""
    allowed = names if policy.allow is None else expand(policy.allow, names, groups)
    return allowed - expand(policy.deny, names, groups)


def _names_explicitly(
    name: str, policy: ToolPolicyConfig, groups: Mapping[str, Iterable[str]]
) -> bool:
    """Whether ``policy.allow`` names ``name`` itself or by group (``*`` does not count)."""
    for pattern in policy.allow or ():
        if pattern == name:
            return True
        if pattern.startswith(GROUP_PREFIX) and name in groups.get(
            pattern.removeprefix(GROUP_PREFIX), ()
        ):
            return True
    return False


def effective_tools(
    registry_names: Iterable[str],
    global_policy: ToolPolicyConfig,
    agent_policy: ToolPolicyConfig,
    *,
    subagent_policy: ToolPolicyConfig | None = None,
    keep: frozenset[str] = frozenset(),
    groups: Mapping[str, Iterable[str]] = DEFAULT_GROUPS,
) -> frozenset[str]:
    """The tool names a session may use (see the module doc for the rules).

    Without ``subagent_policy``: an agent's own session. With it: a sub-agent session of
    that agent (session tools removed but those in ``keep``, submit tools added). A
    sub-agent also needs its parent's set: use :func:`tools_for_subagent`.
    """
    names = frozenset(registry_names)
    capability = names - SUBAGENT_ONLY_TOOLS
    layers = [global_policy, agent_policy]
    result = capability
    for layer in layers:
        result &= apply_layer(capability, layer, groups)
    result = frozenset(
        name
        for name in result
        if name not in OPT_IN_TOOLS or any(_names_explicitly(name, p, groups) for p in layers)
    )
    if subagent_policy is None:
        return result
    result = (result & apply_layer(capability, subagent_policy, groups)) - (SESSION_TOOLS - keep)
    result -= NEVER_SUBAGENT_TOOLS
    submit = names & SUBAGENT_ONLY_TOOLS
    for layer in (*layers, subagent_policy):
        submit -= expand(layer.deny, names, groups)
    return result | submit


def policy_groups(registry: ToolRegistry) -> dict[str, frozenset[str]]:
    """The built-in groups merged with the groups the registry's tools declare."""
    merged = {group: frozenset(members) for group, members in DEFAULT_GROUPS.items()}
    for group, members in registry.groups().items():
        merged[group] = merged.get(group, frozenset()) | members
    return merged


def _agent_policy(settings: HeraldSettings, agent_id: str) -> ToolPolicyConfig:
    agent = settings.routing.agents.get(agent_id)
    if agent is None:
        raise UnknownAgentError(agent_id)
    return agent.tools


def tools_for_agent(
    settings: HeraldSettings, agent_id: str, registry: ToolRegistry
) -> frozenset[str]:
    """The tools of ``agent_id``'s own (non-sub-agent) sessions.

    Raises :class:`UnknownAgentError` when ``agent_id`` is not in ``routing.agents``.
    """
    return effective_tools(
        registry.names(),
        settings.agent.tools,
        _agent_policy(settings, agent_id),
        groups=policy_groups(registry),
    )


def tools_for_subagent(
    settings: HeraldSettings,
    parent_agent_id: str,
    target_agent_id: str,
    registry: ToolRegistry,
    *,
    lineage: Sequence[str] = (),
) -> frozenset[str]:
    """The tools of a sub-agent run of ``target_agent_id`` spawned by ``parent_agent_id``.

    ``lineage`` holds the agents of the sessions above the parent, the person's session's
    first (empty when the parent is a person's session), so the run's depth is
    ``len(lineage) + 1`` and the cap ``agent.subagents.maxSpawnDepth``. At each level down:
    registry ∩ global ∩ the level's own agent set ∩ ``agent.subagents.tools``, minus the
    session tools (but :data:`NESTING_TOOLS` below the cap), plus the submit tools — and ∩
    the level above's set. So a run's set is always a subset of its parent's plus
    ``submit_result``/``submit_error``. Raises :class:`UnknownAgentError`.
    """
    groups = policy_groups(registry)
    names = registry.names()
    cap = settings.agent.subagents.max_spawn_depth
    chain = [*lineage, parent_agent_id, target_agent_id]
    above = effective_tools(
        names, settings.agent.tools, _agent_policy(settings, chain[0]), groups=groups
    )
    for depth in range(1, len(chain)):
        own = effective_tools(
            names,
            settings.agent.tools,
            _agent_policy(settings, chain[depth]),
            subagent_policy=settings.agent.subagents.tools,
            keep=NESTING_TOOLS if depth < cap else frozenset(),
            groups=groups,
        )
        if depth == 1:
            # A person's session has no submit tools to pass on, yet its deny list reaches
            # them too: deny wins in every layer. Below, the parent run's set has them.
            denied = expand(_agent_policy(settings, chain[0]).deny, names, groups)
            above |= SUBAGENT_ONLY_TOOLS - denied
        above = own & above
    return above


def unknown_policy_names(
    policy: ToolPolicyConfig, known: Iterable[str], groups: Mapping[str, Iterable[str]]
) -> list[str]:
    """Patterns in ``policy`` that match no known tool or group, in their order."""
    known_names = set(known)
    out: list[str] = []
    for pattern in [*(policy.allow or ()), *policy.deny]:
        if pattern == WILDCARD:
            continue
        if pattern.startswith(GROUP_PREFIX):
            if pattern.removeprefix(GROUP_PREFIX) not in groups:
                out.append(pattern)
        elif pattern.startswith(SERVER_GROUP_PREFIX) or MCP_SEPARATOR in pattern:
            # An MCP server's tools: the settings check that the server is configured; its
            # tools are known only once it has listed them.
            continue
        elif pattern not in known_names:
            out.append(pattern)
    return out


def policy_issues(settings: HeraldSettings, registry: ToolRegistry) -> list[ConfigIssue]:
    """One issue per unknown tool or group name in any tool policy of ``settings``.

    Known names are the registry's plus every built-in group member (the session tools
    count as known before they are registered).
    """
    groups = policy_groups(registry)
    known = set(registry.names()).union(*groups.values())
    layers: list[tuple[str, ToolPolicyConfig]] = [
        ("agent.tools", settings.agent.tools),
        ("agent.subagents.tools", settings.agent.subagents.tools),
    ]
    layers += [(f"routing.agents.{i}.tools", a.tools) for i, a in settings.routing.agents.items()]
    issues: list[ConfigIssue] = []
    for key, policy in layers:
        for name in unknown_policy_names(policy, known, groups):
            if name.startswith(GROUP_PREFIX):
                bare = name.removeprefix(GROUP_PREFIX)
                hint = _did_you_mean(bare, sorted(groups), prefix=GROUP_PREFIX)
                issues.append(ConfigIssue(f"unknown group {name!r}{hint}", key=key))
            else:
                hint = _did_you_mean(name, sorted(known))
                issues.append(ConfigIssue(f"unknown tool {name!r}{hint}", key=key))
    return issues


def _did_you_mean(name: str, choices: Iterable[str], *, prefix: str = "") -> str:
    # Tool names use "_"; a "-" typo ("web-fetch") should still find its tool.
    close = get_close_matches(name.replace("-", "_"), list(choices), n=1, cutoff=0.6)
    return f"; did you mean {prefix + close[0]!r}?" if close else ""
