"""The scheduled-job routes: ``GET|POST /v1/schedules``, ``GET|DELETE /v1/schedules/{jobId}``,
``POST /v1/schedules/{jobId}/run|pause|resume``.

A job is created as in the config file (``id`` optional: one is made); every mistake is a
400 whose ``field`` names the input (``cron``, ``every``, ``at``, ``timezone``, ``to``,
``agentId``, ``id``). Declared jobs can be run now, paused and resumed (kept across
restarts), not deleted (409 ``job_declared``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, cast

from aiohttp import web

from gateway.api.errors import json_error
from gateway.api.requests import JobPath
from gateway.api.routing import reply
from gateway.schedules.service import ScheduleError, Schedules
from gateway.schedules.setup import SCHEDULES
from gateway.schedules.views import Job, JobList, RunStarted, job_view
from gateway.schema.schedules import JobSpec
from gateway.shapes import ErrorCode, WireModel
from gateway.state import StateError

_STATUS: Final = {
    "invalid_field": 400,
    "job_not_found": 404,
    "job_exists": 409,
    "job_declared": 409,
    "job_busy": 409,
}


async def _answer(
    request: web.Request,
    act: Callable[[Schedules], Awaitable[WireModel]],
    status: int = 200,
) -> web.Response:
    """Every route's answer: 503 while the scheduler is not running, a refused act's
    :class:`ScheduleError` as its code says (``field`` naming the input), else what ``act``
    made of the service, with ``status``."""
    service = request.app.get(SCHEDULES)
    if service is None:
        return json_error(503, "unavailable", "the scheduler is not running")
    try:
        body = await act(service)
    except ScheduleError as exc:
        code = cast(ErrorCode, exc.code)
        return json_error(_STATUS.get(exc.code, 400), code, str(exc), field=exc.field)
    return reply(body, status=status)


async def list_jobs(request: web.Request, _: None) -> web.Response:
    async def act(service: Schedules) -> JobList:
        return JobList(jobs=[job_view(job) for job in await service.list()])

    return await _answer(request, act)


async def create_job(request: web.Request, body: JobSpec) -> web.Response:
    async def act(service: Schedules) -> Job:
        return job_view(await service.create(body), [])

    return await _answer(request, act, status=201)


async def get_job(request: web.Request, path: JobPath) -> web.Response:
    async def act(service: Schedules) -> Job:
        detail = await service.get(path.job_id)
        return job_view(detail.job, detail.occurrences)

    return await _answer(request, act)


async def delete_job(request: web.Request, path: JobPath) -> web.Response:
    async def act(service: Schedules) -> Job:
        return job_view(await service.delete(path.job_id))

    return await _answer(request, act)


async def run_job(request: web.Request, path: JobPath) -> web.Response:
    async def act(service: Schedules) -> RunStarted:
        return RunStarted(job_id=path.job_id, run_id=await service.run_now(path.job_id))

    try:
        return await _answer(request, act, status=202)
    except StateError as exc:  # the run could not be recorded: try again later
        return json_error(503, "unavailable", str(exc))


async def pause_job(request: web.Request, path: JobPath) -> web.Response:
    return await _set_paused(request, path, True)


async def resume_job(request: web.Request, path: JobPath) -> web.Response:
    return await _set_paused(request, path, False)


async def _set_paused(request: web.Request, path: JobPath, paused: bool) -> web.Response:
    async def act(service: Schedules) -> Job:
        return job_view(await service.set_paused(path.job_id, paused))

    return await _answer(request, act)
