"""One agent turn: model call → tool calls → model call … until a reply, a submit tool or
``maxIterations``; at most ten ``sessions_spawn`` calls honoured per model turn.

The model is the wire-level OpenAI fake behind the gateway's own provider; the tools are
the gateway's registry, with a recording spawner behind ``sessions_spawn``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gateway.agent import Injected, TurnSetup, run_turn
from gateway.agent.setup import build_request
from gateway.agent.turn import run_tools
from gateway.catalog import build_tools
from gateway.constants import MAX_SPAWNS_PER_TURN
from gateway.llm import ChatMessage, ToolCall, Usage
from gateway.providers import OpenAIProvider, ProviderError
from gateway.settings import HeraldSettings
from gateway.subagents import SPAWNER, SpawnAccepted, SpawnRequest, SpawnResult
from gateway.tools import ToolContext, ToolRegistry
from tests.fakes.openai import FakeOpenAI, FakeToolCall
from tests.gateway.agent.conftest import MODEL_ID

CHAT_TOOLS = frozenset({"ls", "read", "sessions_spawn"})
SUBAGENT_TOOLS = frozenset({"ls", "submit_result", "submit_error"})


@dataclass
class RecordingSpawner:
    """The spawn service ``sessions_spawn`` calls: accepts every request, keeps them."""

    requests: list[SpawnRequest] = field(default_factory=list)

    async def spawn(self, requester: ToolContext, request: SpawnRequest) -> SpawnResult:
        self.requests.append(request)
        n = len(self.requests)
        return SpawnAccepted(run_id=f"run-{n}", child_session_key=f"agent:main:subagent:{n}")

    def allowed_targets(self, agent_id: str) -> set[str]:
        return {agent_id}


@dataclass
class RecordingSink:
    """A transcript sink that keeps what the turn recorded, in order."""

    lines: list[tuple[str, Any]] = field(default_factory=list)
    metas: list[dict[str, Any]] = field(default_factory=list)

    async def message(
        self,
        message: ChatMessage,
        *,
        model: str | None = None,
        usage: Usage | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        self.lines.append(("message", (message, model, usage)))
        if meta is not None:
            self.metas.append(meta)

    async def event(self, name: str, data: dict[str, Any]) -> None:
        self.lines.append(("event", (name, data)))

    @property
    def messages(self) -> list[ChatMessage]:
        return [line[0] for kind, line in self.lines if kind == "message"]

    @property
    def events(self) -> list[tuple[str, dict[str, Any]]]:
        return [line for kind, line in self.lines if kind == "event"]


@pytest.fixture
def registry() -> ToolRegistry:
    return build_tools(HeraldSettings())


@pytest.fixture
def spawner() -> RecordingSpawner:
    return RecordingSpawner()


def make_setup(
    provider: OpenAIProvider,
    spawner: RecordingSpawner,
    workspace: Path,
    *,
    subagent: bool = False,
    max_iterations: int = 5,
) -> TurnSetup:
    context = ToolContext(
        agent_id="main",
        session_key="agent:main:subagent:1" if subagent else "agent:main:main",
        workspace=workspace,
        settings=HeraldSettings(),
        is_subagent=subagent,
        services={SPAWNER: spawner},
    )
    return TurnSetup(
        provider=provider,
        model_id=MODEL_ID,
        max_tokens=512,
        system="Be brief.",
        tools=SUBAGENT_TOOLS if subagent else CHAT_TOOLS,
        max_iterations=max_iterations,
        tool_context=context,
    )


def spawn_calls(count: int, first: int = 1) -> list[FakeToolCall]:
    return [
        (f"call_{n}", "sessions_spawn", {"task": f"job {n}"}) for n in range(first, first + count)
    ]


def test_the_request_carries_the_conversation_and_the_offered_tools_only(
    provider: OpenAIProvider, spawner: RecordingSpawner, registry: ToolRegistry, tmp_path: Path
) -> None:
    setup = make_setup(provider, spawner, tmp_path)
    history = [ChatMessage(role="user", content="hi")]
    request = build_request(setup, registry, history)
    assert (request.model, request.system, request.max_tokens) == (MODEL_ID, "Be brief.", 512)
    assert request.messages == (ChatMessage(role="user", content="hi"),)
    assert sorted(t.name for t in request.tools) == sorted(CHAT_TOOLS)
    unknown = dataclasses.replace(setup, tools=frozenset({"ls", "no_such_tool"}))
    assert [t.name for t in build_request(unknown, registry, history).tools] == ["ls"]


async def test_a_text_reply_ends_the_turn_after_one_call(
    model: FakeOpenAI,
    provider: OpenAIProvider,
    spawner: RecordingSpawner,
    registry: ToolRegistry,
    tmp_path: Path,
) -> None:
    model.reply_text("hello there", prompt_tokens=12, completion_tokens=3)
    sink = RecordingSink()
    history = [ChatMessage(role="user", content="hi")]
    outcome = await run_turn(make_setup(provider, spawner, tmp_path), registry, history, sink)
    assert (outcome.text, outcome.ended_by, outcome.iterations) == ("hello there", "reply", 1)
    assert (outcome.usage.input, outcome.usage.output) == (12, 3)
    assert history[-1] == ChatMessage(role="assistant", content="hello there")
    ((kind, (message, model_name, usage)),) = sink.lines
    assert (kind, message, model_name) == ("message", history[-1], MODEL_ID)
    assert usage is not None
    assert (usage.input, usage.output) == (12, 3)


async def test_tool_results_go_back_to_the_model_until_it_replies(
    model: FakeOpenAI,
    provider: OpenAIProvider,
    spawner: RecordingSpawner,
    registry: ToolRegistry,
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.txt").write_text("x")
    model.reply_tool_calls([("call_1", "ls", {"path": "."})], prompt_tokens=10, completion_tokens=4)
    model.reply_text("one file", prompt_tokens=30, completion_tokens=2)
    sink = RecordingSink()
    history = [ChatMessage(role="user", content="what is here?")]
    outcome = await run_turn(make_setup(provider, spawner, tmp_path), registry, history, sink)
    assert (outcome.text, outcome.ended_by, outcome.iterations) == ("one file", "reply", 2)
    assert outcome.usage == Usage(input=40, output=6)
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[1].tool_calls[0].name == "ls"
    result = history[2]
    assert (result.tool_call_id, result.tool_name, result.is_error) == ("call_1", "ls", False)
    assert "notes.txt" in result.content
    # The sink saw each message as it happened, the call before its result.
    assert sink.messages == history[1:]
    sent = model.requests[1].body["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": "call_1", "content": result.content}


async def test_spawns_past_ten_in_one_model_turn_get_an_error_instead_of_running(
    model: FakeOpenAI,
    provider: OpenAIProvider,
    spawner: RecordingSpawner,
    registry: ToolRegistry,
    tmp_path: Path,
) -> None:
    assert MAX_SPAWNS_PER_TURN == 10
    calls = spawn_calls(12)
    calls.insert(5, ("call_ls", "ls", {"path": "."}))  # other tools do not count
    model.reply_tool_calls(calls)
    model.reply_tool_calls(spawn_calls(3, first=13))  # a new model turn: a new allowance
    model.reply_text("spawned")
    sink = RecordingSink()
    history = [ChatMessage(role="user", content="fan out")]
    outcome = await run_turn(make_setup(provider, spawner, tmp_path), registry, history, sink)
    assert outcome.text == "spawned"
    ran = [r.task for r in spawner.requests]
    assert ran == [f"job {n}" for n in [*range(1, 11), 13, 14, 15]]
    results = [m for m in history if m.role == "tool"]
    assert [r.tool_call_id for r in results] == [c[0] for c in calls] + [
        f"call_{n}" for n in (13, 14, 15)
    ]
    refused = {r.tool_call_id: r for r in results if r.is_error}
    assert set(refused) == {"call_11", "call_12"}
    assert refused["call_11"].content == (
        "sessions_spawn: at most 10 calls are honoured per model turn; this one was not run"
    )


async def test_run_tools_alone_honours_ten_spawns_of_one_reply(
    provider: OpenAIProvider, spawner: RecordingSpawner, registry: ToolRegistry, tmp_path: Path
) -> None:
    setup = make_setup(provider, spawner, tmp_path)
    calls = tuple(ToolCall(f"c{n}", "sessions_spawn", {"task": f"t{n}"}) for n in range(11))
    history: list[ChatMessage] = []
    ending = await run_tools(calls, setup, registry, history, RecordingSink())
    assert ending is None
    assert len(spawner.requests) == 10
    assert [m.is_error for m in history] == [False] * 10 + [True]


async def test_submit_result_ends_the_run_and_later_calls_do_not_run(
    model: FakeOpenAI,
    provider: OpenAIProvider,
    spawner: RecordingSpawner,
    registry: ToolRegistry,
    tmp_path: Path,
) -> None:
    model.reply_tool_calls(
        [("call_1", "submit_result", {"result": "42"}), ("call_2", "ls", {"path": "."})]
    )
    setup = make_setup(provider, spawner, tmp_path, subagent=True)
    history = [ChatMessage(role="user", content="compute")]
    outcome = await run_turn(setup, registry, history, RecordingSink())
    assert (outcome.text, outcome.ended_by, outcome.iterations) == ("42", "submit_result", 1)
    assert outcome.submitted == {"result": "42"}
    late = history[-1]
    assert (late.tool_call_id, late.is_error) == ("call_2", True)
    assert late.content == "ls: not run, the run already ended"
    assert len(model.requests) == 1


async def test_submit_error_ends_the_run_as_an_error(
    model: FakeOpenAI,
    provider: OpenAIProvider,
    spawner: RecordingSpawner,
    registry: ToolRegistry,
    tmp_path: Path,
) -> None:
    model.reply_tool_calls([("call_1", "submit_error", {"error": "no access"})])
    setup = make_setup(provider, spawner, tmp_path, subagent=True)
    outcome = await run_turn(
        setup, registry, [ChatMessage(role="user", content="x")], RecordingSink()
    )
    assert (outcome.text, outcome.ended_by) == ("no access", "submit_error")
    assert outcome.submitted == {"error": "no access"}


async def test_out_of_iterations_keeps_the_last_text_and_records_why(
    model: FakeOpenAI,
    provider: OpenAIProvider,
    spawner: RecordingSpawner,
    registry: ToolRegistry,
    tmp_path: Path,
) -> None:
    model.reply_tool_calls([("call_1", "ls", {"path": "."})], text="Looking around.")
    model.reply_tool_calls([("call_2", "ls", {"path": "."})])
    sink = RecordingSink()
    setup = make_setup(provider, spawner, tmp_path, max_iterations=2)
    outcome = await run_turn(setup, registry, [ChatMessage(role="user", content="x")], sink)
    assert (outcome.text, outcome.ended_by, outcome.iterations) == (
        "Looking around.",
        "max_iterations",
        2,
    )
    assert sink.events == [("max_iterations", {"maxIterations": 2})]
    assert len(model.requests) == 2


async def test_an_empty_reply_is_recorded_as_such(
    model: FakeOpenAI,
    provider: OpenAIProvider,
    spawner: RecordingSpawner,
    registry: ToolRegistry,
    tmp_path: Path,
) -> None:
    model.reply_text(None)
    sink = RecordingSink()
    setup = make_setup(provider, spawner, tmp_path)
    outcome = await run_turn(setup, registry, [ChatMessage(role="user", content="x")], sink)
    assert (outcome.text, outcome.ended_by) == ("", "reply")
    assert sink.events == [("empty_reply", {"model": MODEL_ID})]


async def test_a_provider_error_propagates_with_nothing_recorded(
    model: FakeOpenAI,
    provider: OpenAIProvider,
    spawner: RecordingSpawner,
    registry: ToolRegistry,
    tmp_path: Path,
) -> None:
    model.reply_error(400, "bad request", kind="invalid_request_error")
    sink = RecordingSink()
    history = [ChatMessage(role="user", content="x")]
    with pytest.raises(ProviderError, match="bad request"):
        await run_turn(make_setup(provider, spawner, tmp_path), registry, history, sink)
    assert history == [ChatMessage(role="user", content="x")]
    assert sink.lines == []


@dataclass
class ListInbox:
    """An inbox that gives its messages at the second model call (after a tool ran)."""

    items: list[Injected]
    calls: int = 0

    async def take(self) -> list[Injected]:
        self.calls += 1
        if self.calls < 2:
            return []
        items, self.items = self.items, []
        return items


async def test_an_inbox_message_reaches_the_next_model_call_after_the_tool_results(
    model: FakeOpenAI,
    provider: OpenAIProvider,
    spawner: RecordingSpawner,
    registry: ToolRegistry,
    tmp_path: Path,
) -> None:
    model.reply_tool_calls([("call_1", "ls", {"path": "."})])
    model.reply_text("steered")
    steer = ChatMessage(role="user", content="focus on tea")
    inbox = ListInbox([Injected(steer, {"kind": "steer"})])
    sink = RecordingSink()
    history = [ChatMessage(role="user", content="research drinks")]
    setup = make_setup(provider, spawner, tmp_path)
    outcome = await run_turn(setup, registry, history, sink, inbox)
    assert outcome.text == "steered"
    assert [m.role for m in history] == ["user", "assistant", "tool", "user", "assistant"]
    assert history[3] == steer
    assert sink.metas == [{"kind": "steer"}]
    sent = model.requests[1].body["messages"]
    assert sent[-1] == {"role": "user", "content": "focus on tea"}
    assert sent[-2]["role"] == "tool"
