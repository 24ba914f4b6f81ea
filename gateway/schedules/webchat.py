"""The web chat's scheduled jobs (:class:`channels.webchat.ChatJobs`), answered by the
schedules service.

A browser client's chat is one :class:`~gateway.schedules.service.ChatScope`: the session
the router files its messages in (the web chat agent's) and its chat target
``webchat:<clientId>``, exactly what a turn in that chat hands the agent's ``schedule`` tool.
So the page lists and cancels the same jobs as the tool and ``/unschedule``: those created
in the chat or aimed at it, declared ones listed but never cancelled.
"""

from __future__ import annotations

from aiohttp import web

from channels.errors import JobRefusal, JobRefusedError, JobsUnavailableError
from channels.webchat import ChatJob
from gateway.reload import settings_of
from gateway.schedules.service import ChatScope, ScheduleError, Schedules
from gateway.schedules.setup import SCHEDULES
from gateway.schedules.store import JobRecord
from gateway.schema.targets import written_target
from gateway.sessions import agent_of_channel, key_for_inbound


def chat_job(job: JobRecord) -> ChatJob:
    """``job`` as its chat's page shows it; a disabled job has no next run (it will not
    fire until the file enables it)."""
    return ChatJob(
        job_id=job.job_id,
        label=job.label,
        task=job.task,
        trigger=job.trigger.to_json(),
        next_run_at=job.next_run_at if job.enabled else None,
        paused=job.paused,
        declared=job.declared,
    )


class WebchatJobs:
    """Jobs of web chat clients through ``app``'s schedules service. The channel is built
    before the service starts, so each call looks it up (and answers "not available"
    until the scheduler runs)."""

    def __init__(self, app: web.Application, *, channel: str = "webchat") -> None:
        self._app = app
        self._channel = channel

    def __repr__(self) -> str:
        return f"<WebchatJobs {self._channel}>"

    def _service(self) -> Schedules:
        service = self._app.get(SCHEDULES)
        if service is None:
            raise JobsUnavailableError("scheduled jobs are not available yet; try again soon")
        return service

    def scope(self, client_id: str) -> ChatScope:
        """The client's chat as the owner of jobs."""
        agent = agent_of_channel(settings_of(self._app), self._channel)
        key = key_for_inbound(agent, self._channel, "dm", client_id, None, client_id)
        return ChatScope(str(key), written_target(self._channel, client_id))

    async def list(self, client_id: str) -> list[ChatJob]:
        jobs = await self._service().chat_jobs(self.scope(client_id))
        return [chat_job(job) for job in jobs]

    async def cancel(self, client_id: str, job_id: str) -> None:
        service = self._service()
        try:
            await service.cancel_for_chat(job_id, self.scope(client_id))
        except ScheduleError as exc:
            code: JobRefusal = "job_declared" if exc.code == "job_declared" else "job_not_found"
            raise JobRefusedError(code, str(exc)) from None
