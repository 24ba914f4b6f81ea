"""Bounded in-process asyncio lanes: FIFO job queues with a width, keys and a drain.

A small standalone library (it imports nothing of Herald). See ``lanes.lane`` for the
ordering rules and how to compose lanes.
"""

from lanes.errors import (
    InvalidWidthError,
    JobCancelled,
    JobNotFinishedError,
    LaneClosed,
    LaneError,
    LaneFullError,
)
from lanes.job import JobHandle, JobState
from lanes.lane import KeyGuard, Lane, LaneStats

__all__ = [
    "InvalidWidthError",
    "JobCancelled",
    "JobHandle",
    "JobNotFinishedError",
    "JobState",
    "KeyGuard",
    "Lane",
    "LaneClosed",
    "LaneError",
    "LaneFullError",
    "LaneStats",
]
