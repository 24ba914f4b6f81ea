"""The probe result every channel and provider reports, and the default probe of a channel."""

from __future__ import annotations

import aiohttp
import pytest

from channels.base import Channel
from channels.memory import MemoryChannel
from channels.probe import ProbeResult, scrub
from channels.webchat import WebchatChannel, WebchatConfig

SECRET = "xoxb-secret-value-0123"


@pytest.mark.parametrize("kind", ["memory", "webchat"])
async def test_a_channel_with_nothing_remote_has_nothing_to_check(kind: str) -> None:
    channel: Channel = MemoryChannel() if kind == "memory" else WebchatChannel(WebchatConfig())
    result = await channel.probe()
    assert result == ProbeResult("ok", "nothing to check")
    assert result.ok
    assert not channel.connected  # probing starts nothing


def test_only_ok_is_ok() -> None:
    assert not ProbeResult("unexpected", "HTTP 503").ok
    assert not ProbeResult("refused", "no").ok


def test_unreachable_names_the_url_the_reason_and_the_setting_without_the_secret() -> None:
    error = aiohttp.ClientConnectionError(f"connection reset while sending {SECRET}")
    result = ProbeResult.unreachable(
        "http://127.0.0.1:1/api/auth.test", error, secret=SECRET, setting="channels.x.url"
    )
    assert result.outcome == "unreachable"
    assert result.detail == (
        "cannot reach http://127.0.0.1:1/api/auth.test: connection reset while sending ***"
    )
    assert result.fix == "check channels.x.url; check the network, proxy and firewall"


def test_a_timeout_reads_as_no_answer_in_time() -> None:
    result = ProbeResult.unreachable(
        "http://h/x", aiohttp.ServerTimeoutError(), secret=None, setting="s"
    )
    assert result.detail == "cannot reach http://h/x: no answer in time"


def test_an_exception_without_words_is_named_by_its_type() -> None:
    result = ProbeResult.unreachable("http://h/x", aiohttp.ClientError(), secret=None, setting="s")
    assert result.detail == "cannot reach http://h/x: ClientError"


def test_scrub_masks_every_occurrence_and_leaves_text_alone_without_a_secret() -> None:
    assert scrub(f"{SECRET} and {SECRET}", SECRET) == "*** and ***"
    assert scrub("plain", None) == "plain"
    assert scrub("plain", "") == "plain"
