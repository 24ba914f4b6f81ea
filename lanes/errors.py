"""Typed errors of the lanes package. Each carries the lane's name and prints well."""

from __future__ import annotations


class LaneError(Exception):
    """Base class of every error the lanes package raises."""


# LaneClosed and JobCancelled are named by the design (STYLE.md); hence no Error suffix.
class LaneClosed(LaneError):  # noqa: N818
    """The lane is shut down: it takes no new work and starts nothing more.

    Raised by ``Lane.submit`` and ``Lane.slot`` after ``shutdown`` began, and by awaiting a
    job that shutdown left queued (``cancel_queued=False``): that job will never start here.
    """

    def __init__(self, lane: str) -> None:
        self.lane = lane
        super().__init__(f"lane {lane!r} is shut down and starts no new work")


class JobCancelled(LaneError):  # noqa: N818
    """The job was cancelled, while queued (it never started) or while running.

    Deliberately not an ``asyncio.CancelledError``: awaiting a cancelled job must not look
    as if the awaiting task itself had been cancelled.
    """

    def __init__(self, lane: str) -> None:
        self.lane = lane
        super().__init__(f"job on lane {lane!r} was cancelled")


class JobNotFinishedError(LaneError):
    """``JobHandle.result()`` was called before the job ended."""

    def __init__(self, lane: str, state: str) -> None:
        self.lane = lane
        self.state = state
        super().__init__(f"job on lane {lane!r} has not finished (state {state})")


class LaneFullError(LaneError):
    """``submit`` found ``max_queued`` jobs already waiting; the job was not queued."""

    def __init__(self, lane: str, max_queued: int) -> None:
        self.lane = lane
        self.max_queued = max_queued
        super().__init__(f"lane {lane!r} is full: {max_queued} jobs already wait")


class InvalidWidthError(LaneError, ValueError):
    """``max_concurrent`` (and ``max_queued``) must be an int ≥ 0; width 0 pauses the lane."""

    def __init__(self, lane: str, value: object) -> None:
        self.lane = lane
        self.value = value
        super().__init__(f"lane {lane!r}: expected an int >= 0, got {value!r}")
