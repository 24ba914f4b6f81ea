"""The scripted provider: rules, templates, tool rounds, usage estimate, bad rules files."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from gateway.errors import ConfigError
from gateway.llm import ChatMessage, ModelRequest, ToolCall, ToolSpec, Usage
from gateway.providers import ScriptedProvider, ScriptError, default_script_path, load_script
from tests.gateway.providers.conftest import LS_TOOL, Sleeps

REPO = Path(__file__).resolve().parents[3]
SPAWN_TOOL = ToolSpec(
    name="sessions_spawn",
    description="Start a background sub-agent.",
    parameters={"type": "object", "properties": {"task": {"type": "string"}}},
)

RULES = """{
  // comments and trailing commas are fine: JSON5
  rules: [
    { match: "(?i)^hello (\\\\w+)", reply: "Hi $1! You said: {message}" },
    { match: "^price (?P<item>\\\\w+)", reply: "${item} costs $$5" },
    {
      match: "^list (?P<dir>\\\\S+)",
      reply: "Looking.",
      toolCalls: [{ name: "ls", arguments: { path: "${dir}", deep: [1, "${dir}/x"] } }],
      afterTool: "In ${dir}: {result} (via {tool}, count {result.count}, gone {result.nope})",
      afterToolError: "ls failed: {result.error}",
    },
    { match: "^spawn (.+)", toolCalls: [{ name: "sessions_spawn", arguments: { task: "$1" } }] },
    { match: "^slow", reply: "done", delaySeconds: 2.5 },
    { match: "^\\\\[announce\\\\]", reply: "Summary: {lastAssistant}" },
    { match: "task", system: "(?i)sub-agent", reply: "sub-agent rule" },
  ],
  default: { reply: "no idea" },
}
"""


@pytest.fixture
def make_scripted(tmp_path: Path) -> Callable[..., ScriptedProvider]:
    def make(text: str = RULES, sleep: Sleeps | None = None) -> ScriptedProvider:
        path = tmp_path / "rules.json5"
        path.write_text(text, encoding="utf-8")
        if sleep is None:
            return ScriptedProvider("demo", load_script(path))
        return ScriptedProvider("demo", load_script(path), sleep=sleep)

    return make


def request(
    *messages: ChatMessage, system: str = "", tools: tuple[ToolSpec, ...] = ()
) -> ModelRequest:
    return ModelRequest(model="scripted", system=system, messages=messages, tools=tools)


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


async def test_first_matching_rule_answers_with_groups_substituted(
    make_scripted: Callable[..., ScriptedProvider],
) -> None:
    provider = make_scripted()
    reply = await provider.complete(request(user("HELLO World and more")))
    assert reply.text == "Hi World! You said: HELLO World and more"
    assert reply.tool_calls == ()
    assert reply.stop_reason == "end_turn"
    assert reply.model == "scripted"
    assert (await provider.complete(request(user("price tea")))).text == "tea costs $5"
    assert (await provider.complete(request(user("something else")))).text == "no idea"


async def test_latest_user_message_picks_the_rule(
    make_scripted: Callable[..., ScriptedProvider],
) -> None:
    reply = await make_scripted().complete(
        request(user("hello Ann"), ChatMessage(role="assistant", content="Hi"), user("price jam"))
    )
    assert reply.text == "jam costs $5"


async def test_tool_round_then_text_never_loops(
    make_scripted: Callable[..., ScriptedProvider],
) -> None:
    provider = make_scripted()
    first = await provider.complete(request(user("list docs"), tools=(LS_TOOL,)))
    assert first.text == "Looking."
    assert first.stop_reason == "tool_use"
    assert first.tool_calls == (
        ToolCall(id="call_1_0", name="ls", arguments={"path": "docs", "deep": [1, "docs/x"]}),
    )

    result = ChatMessage(
        role="tool", content=orjson.dumps({"count": 2}).decode(), tool_call_id="call_1_0"
    )
    history = (
        user("list docs"),
        ChatMessage(role="assistant", content="", tool_calls=first.tool_calls),
    )
    second = await provider.complete(request(*history, result, tools=(LS_TOOL,)))
    assert second.tool_calls == ()
    assert second.text == 'In docs: {"count":2} (via ls, count 2, gone n/a)'


async def test_error_results_use_after_tool_error(
    make_scripted: Callable[..., ScriptedProvider],
) -> None:
    provider = make_scripted()
    call = ToolCall(id="c1", name="ls", arguments={"path": "x"})
    history = (user("list x"), ChatMessage(role="assistant", content="", tool_calls=(call,)))
    flagged = ChatMessage(
        role="tool", content='{"error": "no such dir"}', tool_call_id="c1", is_error=True
    )
    reply = await provider.complete(request(*history, flagged, tools=(LS_TOOL,)))
    assert reply.text == "ls failed: no such dir"


async def test_generic_after_tool_when_the_rule_has_none(
    make_scripted: Callable[..., ScriptedProvider],
) -> None:
    provider = make_scripted()
    call = ToolCall(id="c1", name="sessions_spawn", arguments={"task": "x"})
    history = (user("spawn x"), ChatMessage(role="assistant", content="", tool_calls=(call,)))
    accepted = ChatMessage(role="tool", content='{"status":"accepted"}', tool_call_id="c1")
    reply = await provider.complete(request(*history, accepted, tools=(SPAWN_TOOL,)))
    assert reply.text == 'Done. The sessions_spawn tool answered: {"status":"accepted"}'
    forbidden = ChatMessage(
        role="tool", content='{"status":"forbidden"}', tool_call_id="c1", tool_name="sessions_spawn"
    )
    reply = await provider.complete(request(*history, forbidden, tools=(SPAWN_TOOL,)))
    assert reply.text == 'The sessions_spawn tool failed: {"status":"forbidden"}'


async def test_tools_not_offered_are_not_called(
    make_scripted: Callable[..., ScriptedProvider],
) -> None:
    provider = make_scripted()
    spawn = await provider.complete(request(user("spawn research"), tools=(LS_TOOL,)))
    assert spawn.tool_calls == ()
    # This rule has no text of its own: the generic line says what is missing.
    assert (
        spawn.text == "(I would use sessions_spawn for that, but it is not available to me here.)"
    )
    listing = await provider.complete(request(user("list src")))
    assert listing.tool_calls == ()
    assert listing.text == "In src: n/a (via n/a, count n/a, gone n/a)"


async def test_announce_quotes_the_last_assistant_text(
    make_scripted: Callable[..., ScriptedProvider],
) -> None:
    reply = await make_scripted().complete(
        request(
            user("do the task"),
            ChatMessage(role="assistant", content="Found three things."),
            user("[announce] Reply with the result to post."),
        )
    )
    assert reply.text == "Summary: Found three things."


async def test_system_regex_scopes_a_rule(make_scripted: Callable[..., ScriptedProvider]) -> None:
    provider = make_scripted()
    assert (await provider.complete(request(user("task"), system="You are a sub-agent."))).text == (
        "sub-agent rule"
    )
    assert (await provider.complete(request(user("task"), system="Main agent."))).text == "no idea"


async def test_usage_is_the_stated_estimate(make_scripted: Callable[..., ScriptedProvider]) -> None:
    provider = make_scripted()
    reply = await provider.complete(request(user("price tea"), system="abcd"))
    # Prompt: "abcd" + "price tea" = 13 chars; output: "tea costs $5" = 12 chars.
    assert reply.usage == Usage(input=math.ceil(13 / 4), output=3)

    with_tools = await provider.complete(request(user("list a"), tools=(LS_TOOL,)))
    tool_chars = len("ls") + len(LS_TOOL.description) + len(orjson.dumps(LS_TOOL.parameters))
    call_chars = len("ls") + len(orjson.dumps({"path": "a", "deep": [1, "a/x"]}))
    assert with_tools.usage == Usage(
        input=math.ceil((len("list a") + tool_chars) / 4),
        output=math.ceil((len("Looking.") + call_chars) / 4),
    )


async def test_rule_delay_is_awaited(make_scripted: Callable[..., ScriptedProvider]) -> None:
    sleeps = Sleeps()
    provider = make_scripted(sleep=sleeps)
    await provider.complete(request(user("hello Bo")))
    assert sleeps.delays == []
    await provider.complete(request(user("slow please")))
    assert sleeps.delays == [2.5]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.json5"
    path.write_text(text, encoding="utf-8")
    return path


def test_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, '{\n  rules: [\n    { match: "a", reply: "b" },,\n  ],\n}\n')
    with pytest.raises(ScriptError) as caught:
        load_script(path)
    [issue] = caught.value.issues
    assert (issue.file, issue.line, issue.column) == (str(path), 3, 32)
    assert str(issue).startswith(f"{path}:3:32: JSON5 syntax:")
    assert isinstance(caught.value, ConfigError)


@pytest.mark.parametrize(
    ("rules", "key", "message"),
    [
        ('{ rules: [{ match: "(", reply: "x" }] }', "rules.0.match", "invalid regex"),
        ('{ rules: [{ match: "a", replyy: "x" }] }', "rules.0.replyy", "Extra inputs"),
        ('{ rules: [{ reply: "x" }] }', "rules.0.match", "Field required"),
        ('{ rules: [{ match: "a" }] }', "rules.0", "needs a reply or toolCalls"),
        ('{ rules: [{ match: "(a)", reply: "$2" }] }', "rules.0", "$2 but match has 1 group"),
        ('{ rules: [{ match: "a", reply: "${who}" }] }', "rules.0", "${who} is not a named"),
        ('{ rules: [], default: { reply: "$1" } }', "default", "$1 but match has 0"),
        ('{ rules: [{ match: "a", reply: "x", delaySeconds: -1 }] }', "rules.0.delaySeconds", ""),
        ("[1, 2]", "", "valid dictionary"),
    ],
)
def test_schema_problems_name_the_rule(tmp_path: Path, rules: str, key: str, message: str) -> None:
    with pytest.raises(ScriptError) as caught:
        load_script(write(tmp_path, rules))
    [issue] = caught.value.issues
    assert (issue.key or "") == key
    assert message in issue.message


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="cannot read rules file"):
        load_script(tmp_path / "nope.json5")


def test_packaged_and_example_demo_scripts_are_the_same() -> None:
    packaged = default_script_path()
    assert packaged.read_bytes() == (REPO / "config" / "demo-script.json5").read_bytes()
    assert load_script(packaged).rules


async def test_demo_script_walks_the_whole_sub_agent_story() -> None:
    demo = ScriptedProvider("demo", load_script(default_script_path()), sleep=Sleeps())

    hello = await demo.complete(request(user("Hello!")))
    assert "demo model" in hello.text
    assert hello.tool_calls == ()

    ask = user("research the history of the telegraph in the background")
    spawn = await demo.complete(request(ask, tools=(SPAWN_TOOL, LS_TOOL)))
    [call] = spawn.tool_calls
    assert call.name == "sessions_spawn"
    assert call.arguments == {"task": "Research the history of the telegraph", "label": "research"}

    accepted = ChatMessage(
        role="tool",
        content='{"status":"accepted","runId":"run-42","childSessionKey":"agent:main:subagent:x"}',
        tool_call_id=call.id,
        tool_name="sessions_spawn",
    )
    spawned = ChatMessage(role="assistant", content="", tool_calls=spawn.tool_calls)
    ack = await demo.complete(request(ask, spawned, accepted, tools=(SPAWN_TOOL, LS_TOOL)))
    assert "run-42" in ack.text
    assert ack.tool_calls == ()

    # The sub-agent: its task is its first user message, and it has no sessions_spawn.
    task = user(call.arguments["task"])
    look = await demo.complete(request(task, tools=(LS_TOOL,)))
    [ls_call] = look.tool_calls
    assert ls_call.name == "ls"
    listing = ChatMessage(role="tool", content="notes.md  (12 bytes)", tool_call_id=ls_call.id)
    looked = ChatMessage(role="assistant", content=look.text, tool_calls=look.tool_calls)
    notes = await demo.complete(request(task, looked, listing, tools=(LS_TOOL,)))
    assert "the history of the telegraph" in notes.text
    assert "notes.md" in notes.text

    finished = ChatMessage(role="assistant", content=notes.text)
    announce = await demo.complete(
        request(task, looked, listing, finished, user("[announce] Summarise your result."))
    )
    assert notes.text in announce.text

    other = await demo.complete(request(user("what's the weather?")))
    assert "research" in other.text
