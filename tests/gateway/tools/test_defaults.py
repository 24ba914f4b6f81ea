"""default_registry: the built-in tools, their groups, and config wiring."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway.config import load_settings
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


def test_the_old_exec_key_still_loads_under_the_new_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "herald.json5"
    config.write_text(
        "{ agent: { exec: { timeoutSeconds: 3, maxOutputBytes: 10 },"
        " tools: { exec: { timeoutSeconds: 5 } } } }"
    )
    with caplog.at_level(logging.WARNING):
        loaded = load_settings(config, environ={})
    exec_config = loaded.settings.agent.tools.exec
    assert exec_config.timeout_seconds == 5  # the new key wins
    assert exec_config.max_output_bytes == 10
    assert "agent.exec is deprecated: write agent.tools.exec instead" in caplog.messages
