"""Tool policy: tables of cases, seed 001's example, and properties."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.settings import (
    AgentConfig,
    AgentDefaults,
    AgentToolsConfig,
    HeraldSettings,
    RoutingConfig,
    SubagentDefaults,
    ToolPolicyConfig,
)
from gateway.tools import (
    NESTING_TOOLS,
    SESSION_TOOLS,
    SUBAGENT_ONLY_TOOLS,
    Tool,
    ToolContext,
    ToolOutput,
    ToolParams,
    ToolRegistry,
    UnknownAgentError,
    default_registry,
    effective_tools,
    policy_issues,
    tools_for_agent,
    tools_for_subagent,
)
from gateway.tools.policy import policy_groups

FS = {"read", "write", "edit", "ls"}


class _NoParams(ToolParams):
    pass


class FakeTool(Tool[_NoParams]):
    description = "A stand-in."
    params = _NoParams

    def __init__(self, name: str, group: str) -> None:
        self.name = name
        self.group = group

    async def run(self, params: _NoParams, ctx: ToolContext) -> ToolOutput:
        return ToolOutput(content=self.name)


def full_registry() -> ToolRegistry:
    """The built-ins, stand-ins for the session tools, and a custom ``neo4j`` tool."""
    registry = default_registry(HeraldSettings())
    for name in sorted(SESSION_TOOLS):
        registry.register(FakeTool(name, "sessions"))
    registry.register(FakeTool("neo4j", "graph"))
    return registry


REGISTRY = full_registry()
NAMES = REGISTRY.names()
GROUPS = policy_groups(REGISTRY)
CAPABILITIES = NAMES - SUBAGENT_ONLY_TOOLS


def P(allow: list[str] | None = None, deny: list[str] | None = None) -> ToolPolicyConfig:  # noqa: N802
    return ToolPolicyConfig(allow=allow, deny=deny or [])


def make_settings(
    agents: Mapping[str, ToolPolicyConfig],
    global_policy: ToolPolicyConfig | None = None,
    subagent_policy: ToolPolicyConfig | None = None,
    max_spawn_depth: int = 1,
) -> HeraldSettings:
    # The web chat (enabled by default) needs its agent, "main", to exist.
    agents = {"main": P(), **agents}
    return HeraldSettings(
        agent=AgentDefaults(
            tools=AgentToolsConfig.model_validate((global_policy or P()).model_dump()),
            subagents=SubagentDefaults(
                tools=subagent_policy or P(), max_spawn_depth=max_spawn_depth
            ),
        ),
        routing=RoutingConfig(
            default_agent="main",
            agents={agent_id: AgentConfig(tools=policy) for agent_id, policy in agents.items()},
        ),
    )


def agent_tools(agent: ToolPolicyConfig, global_policy: ToolPolicyConfig | None = None) -> set[str]:
    return set(effective_tools(NAMES, global_policy or P(), agent, groups=GROUPS))


# --- an agent's own sessions ------------------------------------------------------------


@pytest.mark.parametrize(
    ("global_policy", "agent", "expected"),
    [
        # Defaults: everything but exec (off unless allowed) and the sub-agent-only tools.
        (P(), P(), CAPABILITIES - {"exec"}),
        (P(allow=["group:fs"]), P(), FS),
        (P(allow=["read", "write"]), P(deny=["write"]), {"read"}),
        (P(allow=["read", "write"], deny=["write"]), P(allow=["write"]), set()),
        (P(allow=["group:fs", "web_fetch"]), P(allow=["web_fetch", "neo4j"]), {"web_fetch"}),
        (P(deny=["group:sessions", "group:web"]), P(deny=["neo4j"]), FS),
        (P(allow=["*"]), P(deny=["*"]), set()),
        # exec: named explicitly or by group:runtime, by either layer; `*` does not enable it.
        (P(allow=["*"]), P(), CAPABILITIES - {"exec"}),
        (P(), P(allow=["exec"]), {"exec"}),
        (P(allow=["group:runtime", "read"]), P(), {"exec", "read"}),
        (P(allow=["exec", "read"]), P(allow=["read"]), {"read"}),
        (P(allow=["exec"]), P(deny=["group:runtime"]), set()),
        (P(allow=["*", "exec"]), P(), CAPABILITIES),
        # Sub-agent-only tools are never offered to an agent's own session.
        (P(allow=["submit_result", "group:subagent", "read"]), P(), {"read"}),
        # Unknown names are ignored.
        (P(allow=["read", "nope", "group:nope"]), P(deny=["zzz"]), {"read"}),
    ],
)
def test_agent_policy_table(
    global_policy: ToolPolicyConfig, agent: ToolPolicyConfig, expected: set[str]
) -> None:
    assert agent_tools(agent, global_policy) == expected


def test_registry_limits_the_set() -> None:
    assert effective_tools({"read", "exec"}, P(allow=["*", "exec"]), P()) == {"read", "exec"}


def test_tools_for_agent_uses_both_layers() -> None:
    settings = make_settings(
        {"main": P(allow=["group:fs", "exec"]), "other": P()},
        global_policy=P(deny=["write"]),
    )
    assert tools_for_agent(settings, "main", REGISTRY) == {"read", "edit", "ls", "exec"}
    assert "exec" not in tools_for_agent(settings, "other", REGISTRY)
    with pytest.raises(UnknownAgentError):
        tools_for_agent(settings, "ghost", REGISTRY)


# --- sub-agent sessions -----------------------------------------------------------------


def test_subagents_lose_session_tools_and_gain_submit_tools() -> None:
    settings = make_settings({"main": P()})
    parent = tools_for_agent(settings, "main", REGISTRY)
    child = tools_for_subagent(settings, "main", "main", REGISTRY)
    assert parent >= SESSION_TOOLS
    assert child == (parent - SESSION_TOOLS) | SUBAGENT_ONLY_TOOLS


def test_subagent_allow_only_keeps_submit_tools_but_deny_removes_them() -> None:
    settings = make_settings({"main": P()}, subagent_policy=P(allow=["read"]))
    assert tools_for_subagent(settings, "main", "main", REGISTRY) == {"read"} | SUBAGENT_ONLY_TOOLS
    settings = make_settings({"main": P()}, subagent_policy=P(deny=["submit_error"]))
    assert "submit_error" not in tools_for_subagent(settings, "main", "main", REGISTRY)
    settings = make_settings({"main": P(deny=["group:subagent"])})
    assert not tools_for_subagent(settings, "main", "main", REGISTRY) & SUBAGENT_ONLY_TOOLS


def test_subagent_policy_cannot_enable_exec() -> None:
    settings = make_settings({"main": P()}, subagent_policy=P(allow=["exec", "read"]))
    assert tools_for_subagent(settings, "main", "main", REGISTRY) == {"read"} | SUBAGENT_ONLY_TOOLS
    settings = make_settings({"main": P(allow=["exec", "read"])})
    assert "exec" in tools_for_subagent(settings, "main", "main", REGISTRY)


def test_subagent_of_another_agent_needs_both_agents_tools() -> None:
    settings = make_settings(
        {"main": P(allow=["group:fs", "exec"]), "helper": P(allow=["read", "web_fetch", "exec"])}
    )
    assert (
        tools_for_subagent(settings, "main", "helper", REGISTRY)
        == {
            "read",
            "exec",
        }
        | SUBAGENT_ONLY_TOOLS
    )


def test_seed_001_example() -> None:
    """Global allows [neo4j, web, filesystem]; parent allows [neo4j, web] and denies
    filesystem; the sub-agent allows [neo4j] and denies web → neo4j only."""
    settings = make_settings(
        {
            "research-coordinator": P(allow=["neo4j", "group:web"], deny=["group:fs"]),
            "data-analyst": P(allow=["neo4j"], deny=["group:web"]),
        },
        global_policy=P(allow=["neo4j", "group:web", "group:fs"]),
    )
    got = tools_for_subagent(settings, "research-coordinator", "data-analyst", REGISTRY)
    assert got == {"neo4j"} | SUBAGENT_ONLY_TOOLS
    assert tools_for_agent(settings, "research-coordinator", REGISTRY) == {"neo4j", "web_fetch"}


def test_tools_for_subagent_unknown_agents() -> None:
    settings = make_settings({"main": P()})
    with pytest.raises(UnknownAgentError):
        tools_for_subagent(settings, "main", "ghost", REGISTRY)
    with pytest.raises(UnknownAgentError):
        tools_for_subagent(settings, "ghost", "main", REGISTRY)


# --- unknown names ----------------------------------------------------------------------


def test_policy_issues_name_unknown_tools_and_groups() -> None:
    settings = make_settings(
        {"main": P(allow=["read", "nope"])},
        global_policy=P(deny=["group:nope", "*", "sessions_spawn"]),
        subagent_policy=P(allow=["group:sessions", "also_nope"]),
    )
    # The session tools are known even before the runtime registers them.
    issues = policy_issues(settings, default_registry(settings))
    assert [(i.key, i.message) for i in issues] == [
        ("agent.tools", "unknown group 'group:nope'"),
        ("agent.subagents.tools", "unknown tool 'also_nope'"),
        ("routing.agents.main.tools", "unknown tool 'nope'"),
    ]


def test_a_near_miss_gets_a_did_you_mean() -> None:
    settings = make_settings({"main": P(deny=["web-fetch", "group:session", "reed"])})
    issues = policy_issues(settings, default_registry(settings))
    assert [i.message for i in issues] == [
        "unknown tool 'web-fetch'; did you mean 'web_fetch'?",
        "unknown group 'group:session'; did you mean 'group:sessions'?",
        "unknown tool 'reed'; did you mean 'read'?",
    ]


def test_no_issues_for_a_clean_config() -> None:
    assert policy_issues(HeraldSettings(), REGISTRY) == []


# --- properties -------------------------------------------------------------------------

PATTERNS = sorted(NAMES) + ["*", "group:nope", "unknown"] + [f"group:{g}" for g in GROUPS]
policies = st.builds(
    ToolPolicyConfig,
    allow=st.none() | st.lists(st.sampled_from(PATTERNS), max_size=4),
    deny=st.lists(st.sampled_from(PATTERNS), max_size=3),
)


def matches(pattern: str, name: str) -> bool:
    if pattern == "*":
        return True
    if pattern.startswith("group:"):
        return name in GROUPS.get(pattern[6:], frozenset())
    return pattern == name


def check_layer(result: frozenset[str], policy: ToolPolicyConfig) -> None:
    for name in result:
        assert not any(matches(p, name) for p in policy.deny), f"{name} denied by {policy}"
        if policy.allow is not None and name not in SUBAGENT_ONLY_TOOLS:
            assert any(matches(p, name) for p in policy.allow), f"{name} not allowed by {policy}"


@settings(max_examples=300, deadline=None)
@given(global_=policies, parent=policies, target=policies, sub=policies)
def test_policy_properties(
    global_: ToolPolicyConfig,
    parent: ToolPolicyConfig,
    target: ToolPolicyConfig,
    sub: ToolPolicyConfig,
) -> None:
    config = make_settings({"parent": parent, "target": target}, global_, sub)
    parent_set = tools_for_agent(config, "parent", REGISTRY)
    target_set = tools_for_agent(config, "target", REGISTRY)
    child = tools_for_subagent(config, "parent", "target", REGISTRY)

    # A sub-agent never gets a tool its parent (or its own agent) lacks.
    assert child <= parent_set | SUBAGENT_ONLY_TOOLS
    assert child <= target_set | SUBAGENT_ONLY_TOOLS
    # Session tools never reach sub-agents; submit tools never reach agents' own sessions.
    assert not child & SESSION_TOOLS
    assert not (parent_set | target_set) & SUBAGENT_ONLY_TOOLS
    # Deny wins and a set allow is allow-only, in every layer that applies.
    for layer in (global_, parent):
        check_layer(parent_set, layer)
    for layer in (global_, parent, target, sub):
        check_layer(child, layer)
    # exec only when an agent layer names it (itself or by group), never by `*` alone.
    for agent_set, layer in ((parent_set, parent), (target_set, target)):
        if "exec" in agent_set:
            assert any(
                p != "*" and matches(p, "exec") for p in (global_.allow or []) + (layer.allow or [])
            )
    # Submit tools are only missing from a sub-agent when some layer denies them.
    for name in SUBAGENT_ONLY_TOOLS - child:
        assert any(matches(p, name) for layer in (global_, parent, target, sub) for p in layer.deny)


# --- nested sub-agents ------------------------------------------------------------------


def test_below_the_depth_cap_a_subagent_keeps_the_orchestration_tools_only() -> None:
    settings = make_settings({"main": P()}, max_spawn_depth=3)
    parent = tools_for_agent(settings, "main", REGISTRY)
    for lineage in [(), ("main",)]:  # depth 1 and 2 of 3
        tools = tools_for_subagent(settings, "main", "main", REGISTRY, lineage=lineage)
        assert tools & SESSION_TOOLS == NESTING_TOOLS
        assert tools == (parent - SESSION_TOOLS) | NESTING_TOOLS | SUBAGENT_ONLY_TOOLS
    at_cap = tools_for_subagent(settings, "main", "main", REGISTRY, lineage=("main", "main"))
    assert at_cap == (parent - SESSION_TOOLS) | SUBAGENT_ONLY_TOOLS
    # The default cap of 1 is v1: no session tool below a person's session.
    v1 = make_settings({"main": P()})
    assert tools_for_subagent(v1, "main", "main", REGISTRY) & SESSION_TOOLS == set()


def test_a_run_never_gets_a_tool_any_session_above_it_lacks() -> None:
    # The person's agent lacks web_fetch and agents_list; the helper's own policy has all.
    settings = make_settings(
        {"main": P(deny=["web_fetch", "agents_list"]), "helper": P(allow=["*"])},
        max_spawn_depth=3,
    )
    person = tools_for_agent(settings, "main", REGISTRY)
    first = tools_for_subagent(settings, "main", "helper", REGISTRY)
    second = tools_for_subagent(settings, "helper", "helper", REGISTRY, lineage=("main",))
    third = tools_for_subagent(settings, "helper", "helper", REGISTRY, lineage=("main", "helper"))
    assert first <= person | SUBAGENT_ONLY_TOOLS
    assert second <= first
    assert third <= second
    for tools in (first, second, third):
        assert not tools & {"web_fetch", "agents_list"}
    assert "sessions_spawn" in second
    assert "sessions_spawn" not in third
    # Without the chain (a helper spawned by a helper), web_fetch would come back.
    assert "web_fetch" in tools_for_subagent(settings, "helper", "helper", REGISTRY)
    # A deny of the submit tools anywhere up the chain reaches the bottom.
    denied = make_settings({"main": P(deny=["submit_error"]), "helper": P()}, max_spawn_depth=3)
    assert "submit_error" not in tools_for_subagent(
        denied, "helper", "helper", REGISTRY, lineage=("main",)
    )
