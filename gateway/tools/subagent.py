"""``submit_result`` and ``submit_error``: a sub-agent ends its run explicitly (seed 002).

Both return an output with ``ends_run=True``; the runtime stops the loop after the call and
takes the run's result from ``data``: ``{"result": …}`` or ``{"error": …}``. Without them
the last assistant text is the result. The policy offers them to sub-agent
sessions only; they refuse to run anywhere else as a second line of defence.
"""

from __future__ import annotations

from pydantic import Field

from gateway.tools.base import Tool, ToolContext, ToolOutput, ToolParams
from gateway.tools.errors import ToolError


class SubmitResultParams(ToolParams):
    result: str = Field(min_length=1, description="Your final result, summary, or output")


class SubmitErrorParams(ToolParams):
    error: str = Field(
        min_length=1, description="Description of why the task could not be completed"
    )


def _require_subagent(ctx: ToolContext, name: str) -> None:
    if not ctx.is_subagent:
        raise ToolError(f"{name} is only available in sub-agent sessions")


class SubmitResultTool(Tool[SubmitResultParams]):
    name = "submit_result"
    group = "subagent"
    params = SubmitResultParams
    description = (
        "Submit your final result to the parent conversation. Call this when you have "
        "completed your assigned task. After calling this, your conversation ends."
    )

    async def run(self, params: SubmitResultParams, ctx: ToolContext) -> ToolOutput:
        _require_subagent(ctx, self.name)
        return ToolOutput(
            content="Result submitted.", data={"result": params.result}, ends_run=True
        )


class SubmitErrorTool(Tool[SubmitErrorParams]):
    name = "submit_error"
    group = "subagent"
    params = SubmitErrorParams
    description = (
        "Report that you cannot complete the assigned task. Call this if you encounter an "
        "unrecoverable error or determine the task is impossible. After calling this, your "
        "conversation ends."
    )

    async def run(self, params: SubmitErrorParams, ctx: ToolContext) -> ToolOutput:
        _require_subagent(ctx, self.name)
        return ToolOutput(content="Error submitted.", data={"error": params.error}, ends_run=True)
