"""The orchestration tools: ``sessions_yield`` (wait for this session's runs, then answer
once) and ``subagents`` (list, wait for, cancel and steer this session's runs). They reach
the batch coordinator through :data:`YIELDS` and the run control through
:data:`SUBAGENT_RUNS` in their tool context, and see only the runs of their own session."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, Protocol, Self

from pydantic import Field, model_validator

from gateway.state import BatchRecord, Origin
from gateway.tools import ServiceKey, Tool, ToolContext, ToolOutput, ToolParams, ToolRegistry

#: Bounds of ``sessions_yield``.
MAX_YIELD_MESSAGE_CHARS = 2_000
DEFAULT_YIELD_TIMEOUT_SECONDS = 3_600.0
MAX_YIELD_TIMEOUT_SECONDS = 7 * 24 * 3_600.0
#: Bounds of ``subagents``: a wait is part of a turn, so it is short and names few runs.
MAX_WAIT_RUNS = 32
DEFAULT_WAIT_SECONDS = 30.0
MAX_WAIT_SECONDS = 60.0
MAX_STEER_CHARS = 4_000
#: Longer than any run id (a UUID), short enough to keep an error message readable.
MAX_RUN_ID_CHARS = 64


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


class SubagentsService(Protocol):
    """What ``subagents`` needs: :class:`gateway.subagents.SubagentControl`. Each method
    raises ``ToolError`` for a run the session did not spawn, naming it."""

    async def listing(self, session_key: str) -> list[dict[str, Any]]: ...

    async def wait(
        self, session_key: str, run_ids: Sequence[str], timeout_seconds: float
    ) -> dict[str, Any]: ...

    async def cancel(self, session_key: str, run_id: str) -> dict[str, Any]: ...

    async def steer(self, session_key: str, run_id: str, message: str) -> dict[str, Any]: ...


SUBAGENT_RUNS: ServiceKey[SubagentsService] = ServiceKey("subagents")


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


RunId = Annotated[str, Field(min_length=1, max_length=MAX_RUN_ID_CHARS)]
#: What each action needs besides ``action``.
NEEDS: dict[str, tuple[str, ...]] = {
    "list": (),
    "wait": ("run_ids",),
    "cancel": ("run_id",),
    "steer": ("run_id", "message"),
}


class SubagentsParams(ToolParams):
    action: Literal["list", "wait", "cancel", "steer"] = Field(
        description=(
            "list: your runs; wait: until runIds end (their results come back here); "
            "cancel: stop runId (or 'all') and what it spawned; steer: tell running runId "
            "something before its next step"
        )
    )
    run_ids: list[RunId] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_WAIT_RUNS,
        description="wait: the runs to wait for",
    )
    run_id: RunId | None = Field(default=None, description="cancel ('all' = every run), steer")
    timeout_seconds: float = Field(
        default=DEFAULT_WAIT_SECONDS,
        ge=0,
        le=MAX_WAIT_SECONDS,
        description="wait: return after this many seconds with what has ended",
    )
    message: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_STEER_CHARS,
        pattern=r"\S",
        description="steer: what to tell the run",
    )

    @model_validator(mode="after")
    def _complete(self) -> Self:
        missing = [name for name in NEEDS[self.action] if getattr(self, name) is None]
        if missing:
            names = " and ".join(SubagentsParams.model_fields[n].alias or n for n in missing)
            raise ValueError(f"action {self.action!r} needs {names}")
        return self


class SubagentsTool(Tool[SubagentsParams]):
    name = "subagents"
    group = "sessions"
    params = SubagentsParams
    description = (
        "Manage the sub-agents you spawned. list: id, label, status, runtime. wait: block up "
        "to timeoutSeconds (max 60) until the given runs end and get their results here (they "
        "then post nothing of their own). cancel: stop a run (or 'all') and every run it "
        "spawned. steer: give a running sub-agent a message before its next step."
    )

    async def run(self, params: SubagentsParams, ctx: ToolContext) -> ToolOutput:
        service = ctx.service(SUBAGENT_RUNS)
        key = ctx.session_key
        if params.action == "list":
            return ToolOutput.json({"runs": await service.listing(key)})
        if params.action == "wait":
            ids = params.run_ids or []
            return ToolOutput.json(await service.wait(key, ids, params.timeout_seconds))
        if params.action == "cancel":
            return ToolOutput.json(await service.cancel(key, params.run_id or ""))
        return ToolOutput.json(await service.steer(key, params.run_id or "", params.message or ""))


def register_orchestration_tools(registry: ToolRegistry) -> None:
    """Add the orchestration tools to ``registry``."""
    registry.register(SessionsYieldTool())
    registry.register(SubagentsTool())
