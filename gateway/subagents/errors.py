"""Typed errors of the sub-agent layer."""

from __future__ import annotations

from gateway.errors import HeraldError
from gateway.state import RunRecord


class RunNotFoundError(HeraldError, LookupError):
    """No run has this id."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no sub-agent run {run_id!r}")
        self.run_id = run_id


class RunFinishedError(HeraldError):
    """The run has finished, or is already stopping: it cannot be stopped again."""

    def __init__(self, run: RunRecord, *, stopping: bool = False) -> None:
        what = "is already stopping" if stopping else f"already finished ({run.progress.status})"
        super().__init__(f"run {run.run_id} {what}")
        self.run = run
        self.stopping = stopping


class InboxClosedError(HeraldError):
    """The run takes no messages now: it is not in its child phase (queued, or ending)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id} is not running")
        self.run_id = run_id


class InboxFullError(HeraldError):
    """Too many messages wait for the run's next model call."""

    def __init__(self, run_id: str, limit: int) -> None:
        super().__init__(f"run {run_id} already has {limit} messages waiting")
        self.run_id = run_id
        self.limit = limit
