"""Fixtures of the tool tests: contexts on a temporary workspace, a registry, a caller."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import pytest

from gateway.llm import ToolCall
from gateway.settings import HeraldSettings
from gateway.tools import ToolContext, ToolOutput, ToolRegistry, default_registry


class MakeCtx(Protocol):
    def __call__(self, *, is_subagent: bool = ..., workspace: Path = ...) -> ToolContext: ...


CallTool = Callable[..., Awaitable[ToolOutput]]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The agent's workspace; it does not exist yet (the tools create it)."""
    return tmp_path / "ws"


@pytest.fixture
def make_ctx(workspace: Path) -> MakeCtx:
    settings = HeraldSettings()

    def make(*, is_subagent: bool = False, workspace: Path = workspace) -> ToolContext:
        key = "agent:main:subagent:1234" if is_subagent else "agent:main:main"
        return ToolContext(
            agent_id="main",
            session_key=key,
            workspace=workspace,
            settings=settings,
            session_id="sid",
            is_subagent=is_subagent,
        )

    return make


@pytest.fixture
def registry() -> ToolRegistry:
    return default_registry(HeraldSettings())


@pytest.fixture
def call_tool(registry: ToolRegistry, make_ctx: MakeCtx) -> CallTool:
    """Invoke a tool the way the runtime does, with every registered tool allowed."""

    async def call(name: str, _subagent: bool = False, **args: Any) -> ToolOutput:
        ctx = make_ctx(is_subagent=_subagent)
        return await registry.invoke(ToolCall("c1", name, args), ctx, registry.names())

    return call
