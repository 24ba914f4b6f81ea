"""Chat commands: ``/spawn <task>``, ``/subagents list|info|log|stop <run>``,
``/stop``, ``/compact``, ``/new``, ``/schedules``, ``/unschedule <job>`` and ``/help``.

Parsing only; the gateway carries them out. A message whose first word is ``/`` and letters
only but no command (``/bogus``, ``/status``) is answered "unknown command" and never reaches
the model (someone typing a command expects a command's answer, not the model's guess);
anything else (``/etc/hosts is broken``, ``!important``) is an ordinary message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

#: ``compact`` and ``new`` act on the conversation itself: the router queues them on the
#: session's lane, in order with its turns (never in the middle of one).
#: ``unknown`` carries the word typed as its argument.
CommandName = Literal[
    "spawn", "subagents", "stop", "help", "compact", "new", "schedules", "unschedule", "unknown"
]
SUBAGENT_ACTIONS = ("list", "info", "log", "stop")
#: Accepted where a chat's own UI claims "/" (``!spawn`` in Slack's composer, say).
PREFIXES = ("/", "!")

HELP_TEXT = (
    "Commands:\n"
    "/spawn <task> - run <task> as a background sub-agent; its result is posted here\n"
    "/subagents list - this conversation's sub-agent runs\n"
    "/subagents info <run> - one run's status, usage and cost\n"
    "/subagents log <run> - the last lines of a run's transcript\n"
    "/subagents stop <run>|all - stop a run (or all of them) and the runs it spawned\n"
    "/stop - stop the current reply and this conversation's sub-agents\n"
    "/compact - summarise the older part of this conversation now, to make room\n"
    "/new - start a fresh conversation here (the old one is archived)\n"
    "/schedules - this chat's scheduled jobs and their next runs\n"
    "/unschedule <job> - cancel one of this chat's scheduled jobs\n"
    "/help - this list"
)
#: A word that looks like a command: "/" and letters only.
_COMMAND_WORD = re.compile(r"/([A-Za-z]+)")


@dataclass(frozen=True, slots=True)
class ChatCommand:
    name: CommandName
    action: str | None = None
    argument: str = ""


@dataclass(frozen=True, slots=True)
class CommandUsageError:
    """A command was recognised but used wrongly; ``message`` says how to use it."""

    message: str


def parse_command(text: str) -> ChatCommand | CommandUsageError | None:
    """The command in ``text``, a usage error, or None when ``text`` is no command."""
    stripped = text.strip()
    if not stripped or stripped[0] not in PREFIXES:
        return None
    head, _, rest = stripped[1:].partition(" ")
    name = head.lower()
    rest = rest.strip()
    if name == "spawn":
        if not rest:
            return CommandUsageError("usage: /spawn <task>")
        return ChatCommand("spawn", argument=rest)
    if name == "stop":
        return ChatCommand("stop")
    if name == "help":
        return ChatCommand("help")
    if name in ("compact", "new"):
        return ChatCommand("compact" if name == "compact" else "new")
    if name == "schedules":
        return ChatCommand("schedules")
    if name == "unschedule":
        if not rest:
            return CommandUsageError("usage: /unschedule <job>")
        return ChatCommand("unschedule", argument=rest.split()[0])
    if name == "subagents":
        action, _, argument = rest.partition(" ")
        action = action.lower() or "list"
        argument = argument.strip()
        if action not in SUBAGENT_ACTIONS:
            return CommandUsageError("usage: /subagents list|info|log|stop <run> (stop <run>|all)")
        if action != "list" and not argument:
            return CommandUsageError(f"usage: /subagents {action} <run>")
        return ChatCommand("subagents", action=action, argument=argument)
    word = stripped.split(maxsplit=1)[0]
    if unknown := _COMMAND_WORD.fullmatch(word):
        return ChatCommand("unknown", argument=unknown.group(1))
    return None
