"""The notify protocol against real AF_UNIX datagram sockets, path and abstract."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import pytest

from gateway.sdnotify import Notifier

SocketKind = Literal["path", "abstract"]

# Guards against a hang when something is broken; no test measures speed with it.
HANG_GUARD_SECONDS = 10.0


class Receiver:
    """A bound datagram socket playing the service manager's end of $NOTIFY_SOCKET."""

    def __init__(self, sock: socket.socket, notify_socket: str) -> None:
        self.sock = sock
        self.notify_socket = notify_socket

    def env(self, **extra: str) -> dict[str, str]:
        return {"NOTIFY_SOCKET": self.notify_socket, **extra}

    async def receive(self) -> str:
        loop = asyncio.get_running_loop()
        data = await asyncio.wait_for(loop.sock_recv(self.sock, 8192), HANG_GUARD_SECONDS)
        return data.decode()

    def pending(self) -> list[str]:
        """Every datagram already queued, without waiting."""
        received: list[str] = []
        while True:
            try:
                received.append(self.sock.recv(8192).decode())
            except BlockingIOError:
                return received

    def close(self) -> None:
        self.sock.close()


MakeReceiver = Callable[[SocketKind], Receiver]


@pytest.fixture
def make_receiver(tmp_path: Path) -> Iterator[MakeReceiver]:
    made: list[Receiver] = []

    def make(kind: SocketKind) -> Receiver:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
        if kind == "path":
            path = tmp_path / f"notify-{len(made)}"
            sock.bind(os.fspath(path))
            notify_socket = os.fspath(path)
        else:
            name = f"herald-test-{uuid.uuid4().hex}"
            sock.bind(b"\0" + name.encode())
            notify_socket = "@" + name
        receiver = Receiver(sock, notify_socket)
        made.append(receiver)
        return receiver

    yield make
    for receiver in made:
        receiver.close()


@pytest.fixture(params=["path", "abstract"])
def receiver(request: pytest.FixtureRequest, make_receiver: MakeReceiver) -> Receiver:
    kind: SocketKind = request.param
    return make_receiver(kind)


async def test_ready_sends_exactly_ready(receiver: Receiver) -> None:
    notifier = Notifier.from_env(receiver.env())

    assert notifier.enabled
    assert notifier.ready() is True
    assert await receiver.receive() == "READY=1"


async def test_ready_with_status(receiver: Receiver) -> None:
    notifier = Notifier.from_env(receiver.env())

    notifier.ready("serving on 127.0.0.1:8787")

    assert await receiver.receive() == "READY=1\nSTATUS=serving on 127.0.0.1:8787"


async def test_stopping_status_and_watchdog_datagrams(receiver: Receiver) -> None:
    notifier = Notifier.from_env(receiver.env())

    assert notifier.stopping() is True
    assert notifier.stopping("draining 2 runs") is True
    assert notifier.status("3 channels connected") is True
    assert notifier.watchdog() is True

    assert [await receiver.receive() for _ in range(4)] == [
        "STOPPING=1",
        "STOPPING=1\nSTATUS=draining 2 runs",
        "STATUS=3 channels connected",
        "WATCHDOG=1",
    ]


async def test_reloading_carries_the_monotonic_clock(receiver: Receiver) -> None:
    notifier = Notifier.from_env(receiver.env())

    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert notifier.reloading() is True
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000

    lines = (await receiver.receive()).split("\n")
    assert lines[0] == "RELOADING=1"
    key, _, value = lines[1].partition("=")
    assert key == "MONOTONIC_USEC"
    assert before <= int(value) <= after
    assert len(lines) == 2


async def test_status_cannot_inject_assignments(receiver: Receiver) -> None:
    notifier = Notifier.from_env(receiver.env())

    notifier.status("bad\nWATCHDOG=1\0tail")
    notifier.status("x" * 5000)

    assert await receiver.receive() == "STATUS=bad WATCHDOG=1 tail"
    long_status = await receiver.receive()
    assert long_status.startswith("STATUS=xxx")
    assert long_status.endswith("…")
    assert len(long_status.encode()) < 4096


@pytest.mark.parametrize(
    "environ",
    [{}, {"NOTIFY_SOCKET": ""}, {"WATCHDOG_USEC": "20000"}],
    ids=["unset", "empty", "watchdog-without-socket"],
)
async def test_no_socket_is_a_no_op(environ: dict[str, str]) -> None:
    notifier = Notifier.from_env(environ)

    assert not notifier.enabled
    assert notifier.watchdog_interval is None
    assert notifier.ready("x") is False
    assert notifier.stopping() is False
    assert notifier.status("x") is False
    assert notifier.watchdog() is False
    assert notifier.reloading() is False
    # With no watchdog the loop returns instead of running forever.
    await asyncio.wait_for(notifier.watchdog_loop(), HANG_GUARD_SECONDS)
    assert repr(notifier) == "<Notifier disabled>"


def test_unsupported_socket_kind_is_a_logged_no_op(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="gateway.sdnotify"):
        notifier = Notifier.from_env({"NOTIFY_SOCKET": "vsock:2:1234"})

    assert not notifier.enabled
    assert notifier.ready() is False
    assert "vsock:2:1234" in caplog.text


def test_unreachable_socket_never_raises_and_logs_once(
    tmp_path: Path, make_receiver: MakeReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "notify-0"
    notifier = Notifier.from_env({"NOTIFY_SOCKET": os.fspath(missing)})

    with caplog.at_level(logging.DEBUG, logger="gateway.sdnotify"):
        results = [notifier.ready(), notifier.watchdog(), notifier.stopping()]

    assert results == [False, False, False]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert os.fspath(missing) in warnings[0].getMessage()

    # Once the socket exists again sends succeed, and a later failure is reported anew.
    receiver = make_receiver("path")
    assert receiver.notify_socket == os.fspath(missing)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="gateway.sdnotify"):
        assert notifier.watchdog() is True
        receiver.close()
        os.unlink(missing)
        assert notifier.watchdog() is False
    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.WARNING]


async def test_full_manager_queue_drops_instead_of_blocking(receiver: Receiver) -> None:
    notifier = Notifier.from_env(receiver.env())

    # The receiver never reads, so its queue fills; a blocking send would hang here.
    sending = asyncio.to_thread(lambda: [notifier.watchdog() for _ in range(300)])
    try:
        results = await asyncio.wait_for(sending, HANG_GUARD_SECONDS)
    finally:
        received = receiver.pending()
        receiver.close()

    assert results[0] is True
    assert False in results
    assert len(received) == results.count(True)


async def test_watchdog_loop_pings_every_half_period(receiver: Receiver) -> None:
    notifier = Notifier.from_env(receiver.env(WATCHDOG_USEC="20000", WATCHDOG_PID=str(os.getpid())))
    assert notifier.watchdog_interval == pytest.approx(0.01)

    task = asyncio.create_task(notifier.watchdog_loop())
    try:
        assert await receiver.receive() == "WATCHDOG=1"
        assert await receiver.receive() == "WATCHDOG=1"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_watchdog_interval_is_half_of_watchdog_usec(receiver: Receiver) -> None:
    notifier = Notifier.from_env(receiver.env(WATCHDOG_USEC="30000000"))

    assert notifier.watchdog_interval == 15.0
    assert repr(notifier) == f"<Notifier socket={receiver.notify_socket!r} watchdog=15s>"


async def test_watchdog_pid_of_another_process_means_no_pings(receiver: Receiver) -> None:
    notifier = Notifier.from_env(
        receiver.env(WATCHDOG_USEC="20000", WATCHDOG_PID=str(os.getpid() + 1))
    )

    assert notifier.watchdog_interval is None
    await asyncio.wait_for(notifier.watchdog_loop(), HANG_GUARD_SECONDS)
    assert receiver.pending() == []
    # The watchdog variables don't bind READY=1 and friends to a pid.
    assert notifier.ready() is True
    assert await receiver.receive() == "READY=1"


@pytest.mark.parametrize("usec", ["abc", "0", "-5"])
def test_malformed_watchdog_usec_disables_the_watchdog(
    receiver: Receiver, usec: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gateway.sdnotify"):
        notifier = Notifier.from_env(receiver.env(WATCHDOG_USEC=usec))

    assert notifier.watchdog_interval is None
    assert "watchdog disabled" in caplog.text


async def test_unhealthy_check_withholds_pings(make_receiver: MakeReceiver) -> None:
    receiver = make_receiver("abstract")
    notifier = Notifier.from_env(receiver.env(WATCHDOG_USEC="20000"))
    healthy = False
    calls = 0
    three_calls = asyncio.Event()

    def check() -> bool:
        nonlocal calls
        calls += 1
        if calls == 3:
            three_calls.set()
        return healthy

    task = asyncio.create_task(notifier.watchdog_loop(check))
    try:
        await asyncio.wait_for(three_calls.wait(), HANG_GUARD_SECONDS)
        assert receiver.pending() == []
        healthy = True
        assert await receiver.receive() == "WATCHDOG=1"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_raising_check_withholds_pings_and_logs_once(
    make_receiver: MakeReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver = make_receiver("path")
    notifier = Notifier.from_env(receiver.env(WATCHDOG_USEC="20000"))
    calls = 0
    three_calls = asyncio.Event()

    def check() -> bool:
        nonlocal calls
        calls += 1
        if calls >= 3:
            three_calls.set()
        raise ValueError("event loop lag unknown")

    with caplog.at_level(logging.WARNING, logger="gateway.sdnotify"):
        task = asyncio.create_task(notifier.watchdog_loop(check))
        try:
            await asyncio.wait_for(three_calls.wait(), HANG_GUARD_SECONDS)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    assert receiver.pending() == []
    raised = [r for r in caplog.records if "health check raised" in r.getMessage()]
    assert len(raised) == 1
