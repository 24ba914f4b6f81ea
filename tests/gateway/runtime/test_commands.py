from __future__ import annotations

import pytest

from gateway.runtime.commands import HELP_TEXT, ChatCommand, CommandUsageError, parse_command


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/spawn research tides", ChatCommand("spawn", argument="research tides")),
        ("  !spawn  research tides ", ChatCommand("spawn", argument="research tides")),
        ("/stop", ChatCommand("stop")),
        ("/STOP now", ChatCommand("stop")),
        ("/help", ChatCommand("help")),
        ("/subagents", ChatCommand("subagents", action="list")),
        ("/subagents list", ChatCommand("subagents", action="list")),
        ("/subagents info 1a2b", ChatCommand("subagents", action="info", argument="1a2b")),
        ("/subagents log 1a2b", ChatCommand("subagents", action="log", argument="1a2b")),
        ("/subagents stop 1a2b", ChatCommand("subagents", action="stop", argument="1a2b")),
        ("/compact", ChatCommand("compact")),
        ("!compact please", ChatCommand("compact")),
        ("/new", ChatCommand("new")),
        ("/NEW", ChatCommand("new")),
        # "/" and letters only, but no command: answered as unknown, never the model's.
        ("/bogus", ChatCommand("unknown", argument="bogus")),
        ("/status please", ChatCommand("unknown", argument="status")),
        ("/shrug", ChatCommand("unknown", argument="shrug")),
        ("/subagents stop all", ChatCommand("subagents", action="stop", argument="all")),
    ],
)
def test_commands_parse(text: str, expected: ChatCommand) -> None:
    assert parse_command(text) == expected


@pytest.mark.parametrize(
    "text",
    ["hello", "", "   ", "what is /spawn?", "spawn x", "/etc/hosts is broken", "!important", "/2"],
)
def test_ordinary_text_is_no_command(text: str) -> None:
    assert parse_command(text) is None


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("/spawn", "usage: /spawn <task>"),
        ("/spawn    ", "usage: /spawn <task>"),
        ("/subagents info", "usage: /subagents info <run>"),
        ("/subagents stop", "usage: /subagents stop <run>"),
        ("/subagents frobnicate", "usage: /subagents list|info|log|stop <run> (stop <run>|all)"),
    ],
)
def test_misused_commands_say_how(text: str, hint: str) -> None:
    assert parse_command(text) == CommandUsageError(hint)


def test_help_lists_the_conversation_commands() -> None:
    assert "/compact - " in HELP_TEXT
    assert "/new - " in HELP_TEXT
