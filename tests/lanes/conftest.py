"""Fixtures for lane tests: lanes that are shut down after each test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from lanes import Lane

MakeLane = Callable[..., Lane]


class FakeClock:
    """A clock the test moves by hand, so wait figures are exact."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def make_lane() -> AsyncIterator[MakeLane]:
    """Make lanes; each is shut down (no drain) when the test ends."""
    made: list[Lane] = []

    def make(name: str = "test", max_concurrent: int = 1, **kwargs: Any) -> Lane:
        lane = Lane(name, max_concurrent, **kwargs)
        made.append(lane)
        return lane

    yield make
    for lane in made:
        await lane.shutdown(0)
