"""A web chat's scheduled jobs: what the page lists, and cancelling one of them.

The channel knows nothing of schedules: the gateway gives it a :class:`ChatJobs` that answers
for one client (one browser's chat) at a time, and decides which jobs are that chat's and
which of them it may cancel (the same rule as the agent's ``schedule`` tool and the
``/unschedule`` command). A page asks with a ``jobs`` frame and gets its chat's list;
an ``unschedule`` frame cancels one job, and every open page of the client gets the new
list (see :mod:`channels.webchat.protocol`); :func:`answer_jobs` answers both frames.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from channels.errors import JobRefusedError, JobsUnavailableError
from channels.webchat.protocol import ListJobs, Unschedule, error_frame, jobs_frame

if TYPE_CHECKING:  # annotations only: the config's import of this package needs no aiohttp
    from channels.webchat.clients import ClientState
    from channels.webchat.connection import Connection

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ChatJob:
    """One scheduled job of a chat, as its page shows it."""

    job_id: str
    label: str | None
    task: str
    #: ``{"cron": …, "timezone": …}``, ``{"every": "15m"}`` or ``{"at": <ISO-8601>}``.
    trigger: Mapping[str, str]
    #: Unix seconds; None when it will not run (again, or while disabled).
    next_run_at: float | None
    paused: bool
    #: Declared in the config file: listed, never cancelled from a chat.
    declared: bool


class ChatJobs(Protocol):
    """The jobs of one web chat client, as the gateway decides them."""

    async def list(self, client_id: str) -> Sequence[ChatJob]:
        """The client's chat's jobs; :class:`~channels.errors.JobsUnavailableError` when
        they cannot be read."""
        ...

    async def cancel(self, client_id: str, job_id: str) -> None:
        """Delete ``job_id`` when it is one of the client's chat's jobs; raise
        :class:`~channels.errors.JobRefusedError` otherwise (another chat's job is as
        unknown as a missing one) and :class:`~channels.errors.JobsUnavailableError` when
        jobs cannot be changed now."""
        ...


async def answer_jobs(
    jobs: ChatJobs | None,
    client: ClientState,
    connection: Connection,
    frame: ListJobs | Unschedule,
) -> None:
    """List the client's chat's jobs to this page; after an unschedule, to every page
    of the client (its other tabs show the job gone too)."""
    if jobs is None:  # nothing schedules here: no job to show, none to cancel
        if isinstance(frame, Unschedule):
            connection.push(
                error_frame("job_not_found", "this chat has no jobs", job_id=frame.job_id)
            )
        else:
            connection.push(jobs_frame([]))
        return
    try:
        if isinstance(frame, Unschedule):
            await jobs.cancel(client.client_id, frame.job_id)
        listed = await jobs.list(client.client_id)
    except JobRefusedError as exc:
        job_id = frame.job_id if isinstance(frame, Unschedule) else None
        connection.push(error_frame(exc.code, str(exc), job_id=job_id))
        return
    except JobsUnavailableError as exc:
        connection.push(error_frame("jobs_unavailable", str(exc)))
        return
    except Exception:
        log.exception("web chat jobs request failed", extra={"client": client.client_id})
        connection.push(error_frame("jobs_unavailable", "scheduled jobs could not be read"))
        return
    if isinstance(frame, Unschedule):
        client.broadcast(jobs_frame(listed))
    else:
        connection.push(jobs_frame(listed))
