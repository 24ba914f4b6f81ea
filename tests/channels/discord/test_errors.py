"""How discord.py's failures read as Herald's channel errors."""

from __future__ import annotations

import aiohttp

from channels.discord.errors import send_error, start_error


def test_a_failure_raised_while_handling_a_connection_error_reports_that_error() -> None:
    # discord.py 2.7 fails with AttributeError while handling a failed first gateway dial.
    try:
        try:
            raise aiohttp.ClientConnectionError("Cannot connect to host 127.0.0.1:9")
        except aiohttp.ClientError:
            raise AttributeError("'NoneType' object has no attribute 'sequence'") from None
    except AttributeError as exc:
        exc.__suppress_context__ = False
        error = start_error(exc, "the Discord gateway at ws://127.0.0.1:9/")

    assert str(error) == (
        "cannot reach the Discord gateway at ws://127.0.0.1:9/: "
        "ClientConnectionError: Cannot connect to host 127.0.0.1:9"
    )


def test_unknown_start_failures_still_name_their_type() -> None:
    assert str(start_error(KeyError("x"), "anywhere")) == "Discord client failed: KeyError: 'x'"


def test_connection_errors_on_send_are_retryable_and_others_are_not_send_errors() -> None:
    error = send_error(aiohttp.ServerDisconnectedError())

    assert error is not None
    assert error.retryable
    assert send_error(KeyError("not a send failure")) is None
