"""A Slack channel whose API fails at start with a fault is retried in the background; one
whose credentials are refused is not (the gateway exits 78 on it)."""

from __future__ import annotations

import pytest

from channels import OutboundMessage
from channels.errors import ChannelSendError, ChannelStartError
from channels.reconnecting import Reconnecting
from channels.slack import SlackChannel
from tests.channels.slack.conftest import Inbox, slack_config
from tests.fakes.network import closed_port
from tests.fakes.slack import FakeSlack


async def test_a_5xx_at_start_is_retried_until_the_channel_connects(fake_slack: FakeSlack) -> None:
    fake_slack.fail("auth.test", status=503, times=2)
    channel = Reconnecting(SlackChannel(slack_config(fake_slack)), first_retry=0.01)
    try:
        await channel.start(Inbox())  # returns at once: the gateway goes on starting
        assert channel.connection_state == "disconnected"
        assert channel.last_error is not None
        assert "503" in channel.last_error
        await fake_slack.wait_connected()
        assert [c.method for c in fake_slack.calls].count("auth.test") == 3
    finally:
        await channel.stop()


async def test_while_retrying_sends_fail_as_retryable_and_stop_ends_the_retries(
    fake_slack: FakeSlack,
) -> None:
    unreachable = f"http://127.0.0.1:{closed_port()}/api/"
    config = slack_config(fake_slack, apiBaseUrl=unreachable)
    channel = Reconnecting(SlackChannel(config), first_retry=0.01, max_retry=0.02)
    await channel.start(Inbox())
    assert not channel.connected
    message = OutboundMessage("slack", "T1", "C1", None, "hi")
    with pytest.raises(ChannelSendError) as caught:
        await channel.send(message)
    assert caught.value.retryable
    await channel.stop()
    assert repr(channel).endswith(f"disconnected attempts={channel.attempts}>")
    assert fake_slack.connections == 0


async def test_refused_credentials_are_raised_not_retried(fake_slack: FakeSlack) -> None:
    channel = Reconnecting(SlackChannel(slack_config(fake_slack, botToken="xoxb-wrong")))
    with pytest.raises(ChannelStartError, match="invalid_auth") as caught:
        await channel.start(Inbox())
    assert not caught.value.fault
    assert channel.attempts == 1


def test_every_method_of_the_channel_interface_is_passed_through() -> None:
    """A method the interface gains (the reply's ``stream_reply``, say) must reach the
    wrapped channel: inherited from :class:`Channel`, it would silently answer its default
    (no stream) for every Slack and Discord reply."""
    from channels.base import Channel

    interface = {name for name in vars(Channel) if not name.startswith("_")}
    assert interface - set(vars(Reconnecting)) == set()
