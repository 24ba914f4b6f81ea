"""The thread a state connection lives on: operations run one at a time, in the order they
were handed over, each outcome (result or exception) reaching its own caller; one whose
caller gave up before it began never runs; a shut-down thread finishes what it was given
and refuses more."""

from __future__ import annotations

import asyncio
import functools
import threading

import pytest

from gateway.state.thread import StateThread


async def test_operations_run_in_order_on_the_thread_and_answer_their_callers() -> None:
    thread = StateThread("test-state")
    ran: list[tuple[int, str]] = []

    def op(n: int) -> int:
        ran.append((n, threading.current_thread().name))
        return n * n

    try:
        results = await asyncio.gather(
            *(thread.submit(functools.partial(op, n)) for n in range(50))
        )
    finally:
        await asyncio.to_thread(thread.shutdown)
    assert results == [n * n for n in range(50)]
    assert ran == [(n, "test-state") for n in range(50)]


async def test_an_exception_reaches_its_own_caller_only() -> None:
    thread = StateThread("test-state")

    def fail() -> int:
        raise LookupError("not there")

    try:
        failing = thread.submit(fail)
        fine = thread.submit(lambda: "fine")
        with pytest.raises(LookupError, match="not there"):
            await failing
        assert await fine == "fine"
    finally:
        await asyncio.to_thread(thread.shutdown)


async def test_an_operation_cancelled_before_it_began_never_runs() -> None:
    thread = StateThread("test-state")
    gate = threading.Event()
    ran: list[str] = []
    try:
        blocking = thread.submit(gate.wait)  # holds the thread
        later = thread.submit(lambda: ran.append("later"))
        later.cancel()
        gate.set()
        assert await blocking is True
        await thread.submit(lambda: None)  # everything before it has been dealt with
    finally:
        await asyncio.to_thread(thread.shutdown)
    assert ran == []


async def test_shutdown_finishes_what_was_queued_and_refuses_more() -> None:
    thread = StateThread("test-state")
    gate = threading.Event()
    done: list[int] = []
    first = thread.submit(gate.wait)  # holds the thread until the timer opens the gate
    queued = [thread.submit(functools.partial(done.append, n)) for n in range(3)]
    opener = threading.Timer(0.05, gate.set)
    opener.start()
    thread.shutdown()  # returns once the thread has run everything queued before it
    assert done == [0, 1, 2]
    with pytest.raises(RuntimeError, match="shutdown"):
        thread.submit(lambda: None)
    await asyncio.gather(first, *queued)  # their outcomes reach their callers all the same
    opener.join()
