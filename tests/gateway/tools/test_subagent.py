"""submit_result / submit_error: end a sub-agent run; refused elsewhere (seed 002)."""

from __future__ import annotations

from gateway.tools import ToolOutput, ToolRegistry
from tests.gateway.tools.conftest import CallTool


async def test_submit_result_ends_the_run(call_tool: CallTool) -> None:
    out = await call_tool("submit_result", _subagent=True, result="Found 3 issues")
    assert out == ToolOutput(
        content="Result submitted.", data={"result": "Found 3 issues"}, ends_run=True
    )


async def test_submit_error_ends_the_run(call_tool: CallTool) -> None:
    out = await call_tool("submit_error", _subagent=True, error="codebase too large")
    assert out == ToolOutput(
        content="Error submitted.", data={"error": "codebase too large"}, ends_run=True
    )


async def test_refused_outside_sub_agent_sessions(call_tool: CallTool) -> None:
    for name, args in [("submit_result", {"result": "x"}), ("submit_error", {"error": "x"})]:
        out = await call_tool(name, **args)
        assert out.is_error
        assert not out.ends_run
        assert "only available in sub-agent sessions" in out.content


async def test_empty_or_missing_text_is_an_argument_error(call_tool: CallTool) -> None:
    out = await call_tool("submit_result", _subagent=True, result="")
    assert out.is_error
    assert not out.ends_run
    assert "args.result" in out.content
    out = await call_tool("submit_error", _subagent=True)
    assert "args.error: Field required" in out.content


def test_schemas_match_seed_002(registry: ToolRegistry) -> None:
    specs = {spec.name: spec for spec in registry.specs(["submit_result", "submit_error"])}
    assert specs["submit_result"].parameters["required"] == ["result"]
    assert specs["submit_error"].parameters["required"] == ["error"]
    assert specs["submit_result"].parameters["properties"]["result"]["type"] == "string"
    assert "your conversation ends" in specs["submit_result"].description
