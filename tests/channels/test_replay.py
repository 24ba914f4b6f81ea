"""MemorySeenKeys: the in-memory stand-in for the gateway's durable memory of events."""

from __future__ import annotations

from channels.replay import MemorySeenKeys


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_a_key_is_new_once_per_window_and_renewed_when_seen() -> None:
    clock = Clock()
    seen = MemorySeenKeys(10, clock=clock)
    assert await seen.first_sighting(["a", "b"], 10)
    clock.now = 5
    assert not await seen.first_sighting(["b", "c"], 10)  # b known; c remembered now too
    assert not await seen.first_sighting(["c"], 10)
    clock.now = 14
    assert not await seen.first_sighting(["b"], 10)  # renewed at 5 until 15
    assert await seen.first_sighting(["a"], 10)  # expired at 10


def test_the_oldest_keys_fall_out_past_capacity() -> None:
    seen = MemorySeenKeys(2)
    for key in ("a", "b", "c"):
        assert seen.first_sighting_now([key], 60)
    assert len(seen) == 2
    assert repr(seen) == "<MemorySeenKeys 2/2>"
    assert seen.first_sighting_now(["a"], 60)
    assert not seen.first_sighting_now(["c"], 60)
