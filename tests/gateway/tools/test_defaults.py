"""default_registry: the built-in tools, their groups, and config wiring."""

from __future__ import annotations

from gateway.settings import AgentDefaults, ExecConfig, HeraldSettings, WebFetchConfig
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
            exec=ExecConfig(timeout_seconds=3, max_output_bytes=10),
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
