"""A web chat's scheduled jobs: what the page lists, and cancelling one of them.

The channel knows nothing of schedules: the gateway gives it a :class:`ChatJobs` that answers
for one client (one browser's chat) at a time, and decides which jobs are that chat's and
which of them it may cancel (the same rule as the agent's ``schedule`` tool and the
``/unschedule`` command). A page asks with a ``jobs`` frame and gets its chat's list;
an ``unschedule`` frame cancels one job, and every open page of the client gets the new
list (see :mod:`channels.webchat.protocol`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ChatJob:
    """One scheduled job of a chat, as its page shows it."""

    job_id: str
    label: str | None
    task: str
    #: ``{"cron": …, "timezone": …}``, ``{"every": "15m"}`` or ``{"at": <ISO-8601>}``.
    trigger: Mapping[str, str]
    #: Unix seconds; None when it will not run again.
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
