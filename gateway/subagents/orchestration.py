"""The orchestration tools: ``sessions_yield`` (wait for this session's runs, then answer
once). They reach the batch coordinator through :data:`YIELDS` in their tool context, and
see only the runs of their own session."""

from __future__ import annotations

from typing import Protocol

from pydantic import Field

from gateway.state import BatchRecord, Origin
from gateway.tools import ServiceKey, Tool, ToolContext, ToolOutput, ToolParams, ToolRegistry

#: Bounds of ``sessions_yield``.
MAX_YIELD_MESSAGE_CHARS = 2_000
DEFAULT_YIELD_TIMEOUT_SECONDS = 3_600.0
MAX_YIELD_TIMEOUT_SECONDS = 7 * 24 * 3_600.0


class YieldService(Protocol):
    """What ``sessions_yield`` needs: :class:`gateway.subagents.BatchCoordinator`."""

    async def form(
        self,
        session_key: str,
        *,
        message: str | None,
        timeout_seconds: float,
        origin: Origin | None,
        run_id: str | None = None,
    ) -> BatchRecord | None: ...


YIELDS: ServiceKey[YieldService] = ServiceKey("yields")


class YieldParams(ToolParams):
    message: str | None = Field(
        default=None,
        max_length=MAX_YIELD_MESSAGE_CHARS,
        description="Posted to the person now, e.g. 'Researching both; back shortly.'",
    )
    timeout_seconds: float = Field(
        default=DEFAULT_YIELD_TIMEOUT_SECONDS,
        gt=0,
        le=MAX_YIELD_TIMEOUT_SECONDS,
        description="Answer with what has finished after this many seconds at the latest",
    )


class SessionsYieldTool(Tool[YieldParams]):
    name = "sessions_yield"
    group = "sessions"
    params = YieldParams
    description = (
        "End this turn and wait for the sub-agents you spawned that are still running. When "
        "all have finished (or the timeout passes) you get every result in one message and "
        "answer the person once, combining them. Call it after your sessions_spawn calls."
    )

    async def run(self, params: YieldParams, ctx: ToolContext) -> ToolOutput:
        message = params.message.strip() if params.message and params.message.strip() else None
        batch = await ctx.service(YIELDS).form(
            ctx.session_key,
            message=message,
            timeout_seconds=params.timeout_seconds,
            origin=ctx.origin,
            run_id=ctx.run_id,
        )
        if batch is None:
            return ToolOutput.json({"status": "nothing_pending"})
        data = {"status": "yielded", "runIds": list(batch.run_ids), "batchId": batch.batch_id}
        output = ToolOutput.json(data)
        # The message rides in ``data`` only: the turn loop posts it as the turn's reply.
        return ToolOutput(content=output.content, data={**data, "message": message}, ends_run=True)


def register_orchestration_tools(registry: ToolRegistry) -> None:
    """Add the orchestration tools to ``registry``."""
    registry.register(SessionsYieldTool())
