"""Logging: one line per event (JSON off a terminal), and no configured secret in any line."""

from __future__ import annotations

import asyncio
import io
import logging
import re
from collections.abc import Iterator

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.logs import (
    MIN_SECRET_LENGTH,
    REDACTED,
    JsonFormatter,
    SecretRedactor,
    TextFormatter,
    setup_logging,
)

TOKEN = "hgw-0123456789abcdef"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def capture() -> Iterator[tuple[logging.Logger, io.StringIO, SecretRedactor]]:
    """A logger writing JSON lines through its own redactor into a buffer."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    redactor = SecretRedactor()
    handler.addFilter(redactor)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("test.logs.capture")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, out, redactor
    logger.removeHandler(handler)
    logger.propagate = True


@pytest.fixture
def root_restored() -> Iterator[logging.Logger]:
    """The root logger, put back as it was (setup_logging replaces its handlers)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    access = logging.getLogger("aiohttp.access").level
    yield root
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(access)


def lines(out: io.StringIO) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def test_a_secret_is_masked_in_the_message_its_arguments_extras_and_tracebacks(
    capture: tuple[logging.Logger, io.StringIO, SecretRedactor],
) -> None:
    logger, out, redactor = capture
    redactor.set_secrets([TOKEN])
    logger.info(f"token {TOKEN} in the text")
    logger.info("token %s as an argument", TOKEN)
    logger.info("in an extra", extra={"header": f"Bearer {TOKEN}"})
    try:
        raise RuntimeError(f"Incorrect API key provided: {TOKEN}")
    except RuntimeError:
        logger.exception("provider failed")
    assert TOKEN not in out.getvalue()
    first, second, third, fourth = lines(out)
    assert first["msg"] == f"token {REDACTED} in the text"
    assert second["msg"] == f"token {REDACTED} as an argument"
    assert third["header"] == f"Bearer {REDACTED}"
    assert f"RuntimeError: Incorrect API key provided: {REDACTED}" in str(fourth["exc"])


def test_short_values_are_not_masked_and_a_longer_secret_is_masked_whole(
    capture: tuple[logging.Logger, io.StringIO, SecretRedactor],
) -> None:
    logger, out, redactor = capture
    short = "a" * (MIN_SECRET_LENGTH - 1)
    redactor.set_secrets([short, "secret", "secret-and-more", ""])
    logger.info(f"{short} secret-and-more secret")
    (line,) = lines(out)
    assert line["msg"] == f"{short} {REDACTED} {REDACTED}"


def test_new_secrets_replace_the_old_set(
    capture: tuple[logging.Logger, io.StringIO, SecretRedactor],
) -> None:
    logger, out, redactor = capture
    redactor.set_secrets(["first-secret"])
    redactor.set_secrets(["second-secret"])
    logger.info("first-secret second-secret")
    assert lines(out)[0]["msg"] == f"first-secret {REDACTED}"


def test_without_secrets_records_pass_untouched(
    capture: tuple[logging.Logger, io.StringIO, SecretRedactor],
) -> None:
    logger, _, redactor = capture
    record = logger.makeRecord(logger.name, logging.INFO, __file__, 1, "%s", ("x",), None)
    assert redactor.filter(record)
    assert (record.msg, record.args) == ("%s", ("x",))


def test_json_lines_carry_time_level_logger_message_and_extras(
    capture: tuple[logging.Logger, io.StringIO, SecretRedactor],
) -> None:
    logger, out, _ = capture
    logger.warning("lane %s full", "main", extra={"queued": 3, "path": object()})
    (line,) = lines(out)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", str(line["ts"]))
    assert (line["level"], line["logger"], line["msg"], line["queued"]) == (
        "warning",
        "test.logs.capture",
        "lane main full",
        3,
    )
    assert str(line["path"]).startswith("<object object")  # unserialisable: as text


def test_text_lines_are_readable_with_extras_after_the_message() -> None:
    record = logging.LogRecord("gateway.app", logging.INFO, __file__, 1, "gateway ready", (), None)
    record.__dict__["port"] = 8787
    text = TextFormatter().format(record)
    assert re.fullmatch(r"\d\d:\d\d:\d\d INFO    gateway\.app: gateway ready  port=8787", text)


def test_setup_logging_writes_json_off_a_terminal_and_text_on_one(
    root_restored: logging.Logger,
) -> None:
    pipe = io.StringIO()
    setup_logging("debug", stream=pipe)
    assert root_restored.level == logging.DEBUG
    assert logging.getLogger("aiohttp.access").level == logging.WARNING
    logging.getLogger("gateway.test").debug("to a pipe")
    assert lines(pipe)[0]["msg"] == "to a pipe"
    tty = Tty()
    setup_logging("warning", stream=tty)
    logging.getLogger("gateway.test").info("dropped: below the level")
    logging.getLogger("gateway.test").warning("to a terminal")
    assert "to a terminal" in tty.getvalue()
    assert "dropped" not in tty.getvalue()
    assert not tty.getvalue().startswith("{")
    assert pipe.getvalue().count("\n") == 1  # the first handler was replaced, not added to


async def test_a_request_line_over_8_kib_logs_one_warning_line_without_a_traceback(
    root_restored: logging.Logger,
) -> None:
    out = io.StringIO()
    setup_logging("info", stream=out)

    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", ok)
    async with TestServer(app) as server:
        reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        status = await reader.readline()
        writer.close()
        await writer.wait_closed()
    assert status.split()[1] == b"400"
    [line] = [r for r in lines(out) if r["logger"] == "aiohttp.server"]
    assert line["level"] == "warning"
    assert str(line["msg"]).startswith("malformed HTTP request from 127.0.0.1: 400 ")
    assert "Traceback" not in out.getvalue()
    assert len(str(line["msg"])) < 300
