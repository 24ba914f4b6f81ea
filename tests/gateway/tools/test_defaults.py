"""default_registry: the built-in tools, their groups, and config wiring."""

from __future__ import annotations

from gateway.settings import (
    AgentDefaults,
    AgentToolsConfig,
    ExecConfig,
    HeraldSettings,
    WebFetchConfig,
)
from gateway.tools import DEFAULT_GROUPS, default_registry
from gateway.tools.exec import ExecTool
from gateway.tools.web import WebFetchTool


def test_builtins_and_their_groups() -> None:
    registry = default_registry(HeraldSettings())
    assert registry.groups() == {
        "fs": frozenset({"read", "write", "edit", "ls"}),
        "web": frozenset({"web_fetch"}),
        "runtime": frozenset({"exec"}),
        "subagent": frozenset({"submit_result", "submit_error"}),
    }
    for group, names in registry.groups().items():
        assert names <= DEFAULT_GROUPS[group]


def test_limits_come_from_settings() -> None:
    settings = HeraldSettings(
        agent=AgentDefaults(
            tools=AgentToolsConfig(exec=ExecConfig(timeout_seconds=3, max_output_bytes=10)),
            web_fetch=WebFetchConfig(timeout_seconds=4, max_bytes=20),
        )
    )
    registry = default_registry(settings)
    exec_tool = registry.get("exec")
    web_tool = registry.get("web_fetch")
    assert isinstance(exec_tool, ExecTool)
    assert isinstance(web_tool, WebFetchTool)
    assert exec_tool.config.max_output_bytes == 10
    assert web_tool.config.max_bytes == 20


def test_the_old_exec_key_still_loads_under_the_new_one() -> None:
    legacy = AgentDefaults.model_validate(
        {
            "exec": {"timeoutSeconds": 3, "maxOutputBytes": 10},
            "tools": {"exec": {"timeoutSeconds": 5}},
        }
    )
    assert legacy.tools.exec.timeout_seconds == 5  # the new key wins
    assert legacy.tools.exec.max_output_bytes == 10
