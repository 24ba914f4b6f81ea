"""The agent's ``schedule`` tool (group ``group:schedule``; sub-agents never get it):
``create`` a job for this chat, ``list`` this chat's jobs, ``cancel`` one of them.

``create`` aims the job at this chat and thread, or with ``to`` at this chat or another of
its threads — never at another chat (a stranger's DM is not the agent's to post in); an agent
creates at most ``schedules.maxPerChat`` jobs per chat, its threads together. ``list`` and
``cancel`` see only the jobs of this chat (created here, or aimed at it or its threads):
another chat's jobs are invisible. Declared jobs are refused. Every mistake is a tool error
naming the field, in Herald's own words (never a host path).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationError

from gateway.schedules.service import ChatScope, ScheduleError, Schedules
from gateway.schema.schedules import JobSpec
from gateway.sessions import optional_iso, target_of_origin
from gateway.tools import ServiceKey, Tool, ToolContext, ToolError, ToolOutput, ToolParams

SCHEDULE_JOBS: ServiceKey[Schedules] = ServiceKey("schedules")


class ScheduleParams(ToolParams):
    # Terse descriptions: every tool's schema is sent with every request (a 4k-token
    # model's window has room for little else).
    action: Literal["create", "list", "cancel"]
    cron: str | None = Field(default=None, description='crontab, "0 9 * * 1-5"')
    every: str | None = Field(default=None, description='"15m", "1d"')
    at: str | None = Field(default=None, description="once, ISO-8601 with offset")
    task: str | None = None
    label: str | None = None
    timezone: str | None = Field(default=None, description="of cron")
    to: str | None = Field(default=None, description="this chat's thread; default: here")
    job_id: str | None = None


def scope_of(ctx: ToolContext) -> ChatScope:
    return ChatScope(ctx.session_key, target_of_origin(ctx.origin))


class ScheduleTool(Tool[ScheduleParams]):
    name = "schedule"
    group = "schedule"
    params = ScheduleParams
    description = (
        "Recurring or later work posted to this chat: create (one of cron, every, at; and "
        "task), list, cancel (jobId)."
    )

    async def run(self, params: ScheduleParams, ctx: ToolContext) -> ToolOutput:
        if ctx.is_subagent:
            raise ToolError("schedule is not available in sub-agent sessions")
        service = ctx.service(SCHEDULE_JOBS)
        scope = scope_of(ctx)
        try:
            if params.action == "list":
                jobs = await service.chat_jobs(scope)
                return ToolOutput.json(
                    {
                        "jobs": [
                            {
                                "jobId": job.job_id,
                                "trigger": job.trigger.to_json(),
                                "task": job.task,
                                "to": job.to_target,
                                "nextRunAt": optional_iso(job.next_run_at),
                                "paused": job.paused,
                                "declared": job.declared,
                            }
                            for job in jobs
                        ]
                    }
                )
            if params.action == "cancel":
                if not params.job_id:
                    raise ToolError("cancel needs jobId")
                job = await service.cancel_for_chat(params.job_id, scope)
                return ToolOutput.json({"cancelled": job.job_id})
            return await self._create(service, params, scope)
        except ScheduleError as exc:
            field = f"{exc.field}: " if exc.field else ""
            raise ToolError(f"{field}{exc}") from None

    async def _create(
        self, service: Schedules, params: ScheduleParams, scope: ChatScope
    ) -> ToolOutput:
        if not params.task:
            raise ToolError("create needs task")
        if scope.target is None:
            raise ToolError("to: this session has no chat to post to; jobs are made in a chat")
        to = params.to or scope.target
        try:
            spec = JobSpec.model_validate(
                {
                    "cron": params.cron,
                    "every": params.every,
                    "at": params.at,
                    "task": params.task,
                    "label": params.label,
                    "timezone": params.timezone,
                    "to": to,
                }
            )
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            field = ".".join(str(part) for part in first["loc"]) or "cron"
            raise ToolError(f"{field}: {first['msg'].removeprefix('Value error, ')}") from None
        job = await service.create_for_chat(spec, scope)
        return ToolOutput.json({"jobId": job.job_id, "nextRunAt": optional_iso(job.next_run_at)})
