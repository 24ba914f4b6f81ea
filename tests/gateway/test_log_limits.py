"""A flood of identical warnings becomes a few lines a minute, with a count of the rest."""

from __future__ import annotations

import io
import logging

import orjson

from gateway.logs import JsonFormatter, RepeatLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def logger_with(limiter: RepeatLimiter) -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(limiter)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(f"test.limits.{id(limiter)}")
    logger.propagate = False
    logger.handlers = [handler]
    logger.setLevel(logging.INFO)
    return logger, out


def lines(out: io.StringIO) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def test_a_thousand_identical_warnings_log_five_lines_then_a_count() -> None:
    clock = Clock()
    logger, out = logger_with(RepeatLimiter(burst=5, window=60.0, clock=clock))
    for n in range(1000):
        logger.warning("bad request from %s", f"client-{n}")  # one template, many values
    assert len(lines(out)) == 5
    clock.now += 61
    logger.warning("bad request from %s", "client-x")
    last = lines(out)[-1]
    assert last["msg"] == "bad request from client-x"
    assert last["suppressed"] == 995


def test_different_messages_and_errors_are_not_held_back() -> None:
    logger, out = logger_with(RepeatLimiter(burst=1, window=60.0, clock=Clock()))
    logger.warning("one")
    logger.warning("two")
    logger.warning("one")
    for _ in range(3):
        logger.error("broken")
    assert [line["msg"] for line in lines(out)] == ["one", "two", "broken", "broken", "broken"]
