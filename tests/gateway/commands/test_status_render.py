"""``herald status``'s report of the channels of one replica of a cluster."""

from __future__ import annotations

from gateway.commands.status import Status, render


def test_a_channel_standing_by_is_named_so_and_the_gateway_stays_ready() -> None:
    state = Status(config="c", state_dir="/s", url="http://127.0.0.1:8787", pid=42)
    state.answering = state.ready = True
    state.channels = {"discord": True, "webchat": True}
    state.channel_states = {"discord": "standby", "webchat": "connected"}
    lines = render(state).splitlines()
    assert lines[0] == "herald: running (pid 42), ready"
    assert (
        "channels   discord standby (another replica holds its connection), webchat connected"
        in lines
    )
    assert state.to_json()["channelStates"] == {"discord": "standby", "webchat": "connected"}


def test_a_channel_down_is_not_connected() -> None:
    state = Status(config="c", state_dir="/s", url="http://127.0.0.1:8787", pid=42)
    state.answering = True
    state.channels = {"discord": False}
    state.channel_states = {"discord": "disconnected"}
    assert "channels   discord not connected" in render(state).splitlines()
