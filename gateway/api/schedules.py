"""The scheduled-job routes: ``GET|POST /v1/schedules``, ``GET|DELETE /v1/schedules/{jobId}``,
``POST /v1/schedules/{jobId}/run|pause|resume``.

A job is created as in the config file (``id`` optional: one is made); every mistake is a
400 whose ``field`` names the input (``cron``, ``every``, ``at``, ``timezone``, ``to``,
``agentId``, ``id``). Declared jobs can be run now, paused and resumed (kept across
restarts), not deleted (409 ``job_declared``).
"""

from __future__ import annotations

from typing import Final, cast

from aiohttp import web

from gateway.api.errors import json_error
from gateway.api.keys import SCHEDULES
from gateway.api.requests import JobPath
from gateway.api.routing import reply
from gateway.schedules.config import JobSpec
from gateway.schedules.service import ScheduleError, Schedules
from gateway.schedules.views import JobList, RunStarted, job_view
from gateway.shapes import ErrorCode
from gateway.state import StateError

_STATUS: Final = {
    "invalid_field": 400,
    "job_not_found": 404,
    "job_exists": 409,
    "job_declared": 409,
    "job_busy": 409,
}


def _failed(exc: ScheduleError) -> web.Response:
    code = cast(ErrorCode, exc.code)
    return json_error(_STATUS.get(exc.code, 400), code, str(exc), field=exc.field)


def _service(request: web.Request) -> Schedules | None:
    return request.app.get(SCHEDULES)


def _unavailable() -> web.Response:
    return json_error(503, "unavailable", "the scheduler is not running")


async def list_jobs(request: web.Request, _: None) -> web.Response:
    service = _service(request)
    if service is None:
        return _unavailable()
    return reply(JobList(jobs=[job_view(job) for job in await service.list()]))


async def create_job(request: web.Request, body: JobSpec) -> web.Response:
    service = _service(request)
    if service is None:
        return _unavailable()
    try:
        job = await service.create(body)
    except ScheduleError as exc:
        return _failed(exc)
    return reply(job_view(job, []), status=201)


async def get_job(request: web.Request, path: JobPath) -> web.Response:
    service = _service(request)
    if service is None:
        return _unavailable()
    try:
        detail = await service.get(path.job_id)
    except ScheduleError as exc:
        return _failed(exc)
    return reply(job_view(detail.job, detail.occurrences))


async def delete_job(request: web.Request, path: JobPath) -> web.Response:
    service = _service(request)
    if service is None:
        return _unavailable()
    try:
        job = await service.delete(path.job_id)
    except ScheduleError as exc:
        return _failed(exc)
    return reply(job_view(job))


async def run_job(request: web.Request, path: JobPath) -> web.Response:
    service = _service(request)
    if service is None:
        return _unavailable()
    try:
        run_id = await service.run_now(path.job_id)
    except ScheduleError as exc:
        return _failed(exc)
    except StateError as exc:
        return json_error(503, "unavailable", str(exc))
    return reply(RunStarted(job_id=path.job_id, run_id=run_id), status=202)


async def pause_job(request: web.Request, path: JobPath) -> web.Response:
    return await _set_paused(request, path, True)


async def resume_job(request: web.Request, path: JobPath) -> web.Response:
    return await _set_paused(request, path, False)


async def _set_paused(request: web.Request, path: JobPath, paused: bool) -> web.Response:
    service = _service(request)
    if service is None:
        return _unavailable()
    try:
        job = await service.set_paused(path.job_id, paused)
    except ScheduleError as exc:
        return _failed(exc)
    return reply(job_view(job))
