"""ToolRegistry: provider schemas, validation, and invoke turning every bad input into a result."""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from gateway.llm import ToolCall
from gateway.state import DiskFullError
from gateway.tools import (
    DuplicateToolError,
    ServiceKey,
    Tool,
    ToolArgumentsError,
    ToolContext,
    ToolDefinitionError,
    ToolError,
    ToolOutput,
    ToolParams,
    ToolRegistry,
    UnknownToolError,
)
from tests.gateway.tools.conftest import MakeCtx


class Task(ToolParams):
    task: str = Field(description="What to do.")
    cwd: str | None = None


class SpawnParams(ToolParams):
    """Docstrings do not leak into the schema."""

    tasks: list[Task] = Field(min_length=1)
    mode: Literal["parallel", "sequential"] = "parallel"
    run_timeout_seconds: float | None = Field(None, ge=0)
    title: str | None = Field(None, description="A property may be called title.")


class SpawnLike(Tool[SpawnParams]):
    name = "spawn_like"
    description = "Takes nested parameters."
    group = "sessions"
    params = SpawnParams

    async def run(self, params: SpawnParams, ctx: ToolContext) -> ToolOutput:
        return ToolOutput.json({"count": len(params.tasks), "mode": params.mode})


class EchoParams(ToolParams):
    text: str


class Echo(Tool[EchoParams]):
    name = "echo"
    description = "Echo."
    group = "test"
    params = EchoParams

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def run(self, params: EchoParams, ctx: ToolContext) -> ToolOutput:
        self.started.set()
        if params.text == "boom":
            raise ValueError("kaboom")
        if params.text == "full":
            raise DiskFullError("the disk of herald.db is full")
        if params.text == "expected":
            raise ToolError("nothing to echo")
        if params.text == "wait":
            await asyncio.Event().wait()
        if params.text == "service":
            return ToolOutput(content=ctx.service(GREETER).greet())
        if params.text == "none":
            return None  # type: ignore[return-value]
        return ToolOutput(content=params.text)


class Greeter:
    def greet(self) -> str:
        return "hello from a service"


GREETER = ServiceKey[Greeter]("greeter")


@pytest.fixture
def reg() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(SpawnLike())
    registry.register(Echo())
    return registry


def call(name: str, arguments: dict[str, Any] | None = None, **kw: Any) -> ToolCall:
    return ToolCall("call-1", name, arguments or {}, **kw)


ALL = frozenset({"spawn_like", "echo"})


# --- schemas ----------------------------------------------------------------------------


def _walk(node: object) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        out = [node]
        for key, value in node.items():
            if key == "properties":
                for sub in value.values():
                    out += _walk(sub)
            else:
                out += _walk(value)
        return out
    if isinstance(node, list):
        return [n for item in node for n in _walk(item)]
    return []


def test_schema_is_inlined_clean_and_closed(reg: ToolRegistry) -> None:
    [spec] = reg.specs(["spawn_like"])
    assert spec.name == "spawn_like"
    assert spec.description == "Takes nested parameters."
    assert spec.parameters == {
        "type": "object",
        "properties": {
            "tasks": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "task": {"type": "string", "description": "What to do."},
                        "cwd": {"type": "string"},
                    },
                    "required": ["task"],
                    "additionalProperties": False,
                },
            },
            "mode": {"type": "string", "enum": ["parallel", "sequential"], "default": "parallel"},
            "runTimeoutSeconds": {"type": "number", "minimum": 0},
            "title": {"type": "string", "description": "A property may be called title."},
        },
        "required": ["tasks"],
        "additionalProperties": False,
    }
    nodes = _walk(spec.parameters)
    assert not [n for n in nodes if "$ref" in n or "$defs" in n or "anyOf" in n]


def test_schema_of_a_model_without_fields(reg: ToolRegistry) -> None:
    class Empty(ToolParams):
        pass

    class NoArgs(Echo):
        name = "no_args"
        params = Empty  # type: ignore[assignment]

    reg.register(NoArgs())
    [spec] = reg.specs(["no_args"])
    assert spec.parameters == {"type": "object", "properties": {}, "additionalProperties": False}


def test_recursive_params_are_refused_at_registration() -> None:
    class Node(BaseModel):
        children: list[Node] = []

    class TreeParams(ToolParams):
        root: Node

    class Tree(Echo):
        name = "tree"
        params = TreeParams  # type: ignore[assignment]

    with pytest.raises(ToolDefinitionError):
        ToolRegistry().register(Tree())


def test_registration_rules(reg: ToolRegistry) -> None:
    with pytest.raises(DuplicateToolError):
        reg.register(Echo())
    reg.register(Echo(), replace=True)
    assert reg.names() == ALL
    assert len(reg) == 2
    assert "echo" in reg
    assert reg.get("nope") is None
    assert reg.groups() == {"sessions": frozenset({"spawn_like"}), "test": frozenset({"echo"})}

    class Nameless(Echo):
        name = ""

    with pytest.raises(ToolDefinitionError):
        reg.register(Nameless())


def test_specs_keep_registration_order_and_skip_unknown(reg: ToolRegistry) -> None:
    assert [s.name for s in reg.specs(["echo", "nope", "spawn_like"])] == ["spawn_like", "echo"]
    assert reg.specs([]) == []


# --- validate ---------------------------------------------------------------------------


def test_validate_returns_typed_params(reg: ToolRegistry) -> None:
    params = reg.validate("spawn_like", {"tasks": [{"task": "a"}], "runTimeoutSeconds": 5})
    assert isinstance(params, SpawnParams)
    assert params.run_timeout_seconds == 5


F = "Input should be a finite number"


@pytest.mark.parametrize(
    ("args", "path", "message"),
    [
        ({}, "args.tasks", "Field required"),
        ({"tasks": [{}]}, "args.tasks[0].task", "Field required"),
        ({"tasks": [{"task": "a"}], "extra": 1}, "args.extra", "Extra inputs are not permitted"),
        ({"tasks": [{"task": "a"}], "mode": "x"}, "args.mode", "Input should be 'parallel'"),
        ([1, 2], "args", "must be a JSON object"),
        # Python's JSON reader turns 1e999 into infinity and reads NaN; neither is JSON again.
        ({"tasks": [{"task": "a"}], "runTimeoutSeconds": math.inf}, "args.runTimeoutSeconds", F),
        ({"tasks": [{"task": "a"}], "runTimeoutSeconds": math.nan}, "args.runTimeoutSeconds", F),
    ],
)
def test_validate_names_the_json_path(
    reg: ToolRegistry, args: object, path: str, message: str
) -> None:
    with pytest.raises(ToolArgumentsError) as info:
        reg.validate("spawn_like", args)
    assert info.value.path == path
    assert info.value.message.startswith(message)


def test_validate_lists_every_issue(reg: ToolRegistry) -> None:
    with pytest.raises(ToolArgumentsError) as info:
        reg.validate("spawn_like", {"tasks": [], "runTimeoutSeconds": -1})
    assert [p for p, _ in info.value.issues] == ["args.tasks", "args.runTimeoutSeconds"]


def test_validate_unknown_tool(reg: ToolRegistry) -> None:
    with pytest.raises(UnknownToolError) as info:
        reg.validate("nope", {})
    assert info.value.name == "nope"


# --- invoke -----------------------------------------------------------------------------


async def test_invoke_runs_the_tool(reg: ToolRegistry, make_ctx: MakeCtx) -> None:
    out = await reg.invoke(call("spawn_like", {"tasks": [{"task": "a"}]}), make_ctx(), ALL)
    assert out == ToolOutput(
        content='{"count":1,"mode":"parallel"}', data={"count": 1, "mode": "parallel"}
    )


@pytest.mark.parametrize(
    ("tool_call", "allowed", "expected"),
    [
        (call("nope"), ALL, "unknown tool: 'nope' (available tools: echo, spawn_like)"),
        (call("echo", {"text": "x"}), frozenset({"spawn_like"}), "tool not available here: 'echo'"),
        (
            call("echo", raw_arguments="{oops", arguments_error="Expecting property name"),
            ALL,
            "invalid arguments for echo: not a JSON object (Expecting property name)",
        ),
        (call("echo"), ALL, "invalid arguments for echo: args.text: Field required"),
        (call("echo", {"text": 3}), ALL, "invalid arguments for echo: args.text: Input should be"),
        (call("echo", {"text": "expected"}), ALL, "echo: nothing to echo"),
        (call("echo", {"text": "none"}), ALL, "tool echo failed: it returned no result"),
    ],
)
async def test_invoke_bad_input_becomes_an_error_result(
    reg: ToolRegistry,
    make_ctx: MakeCtx,
    tool_call: ToolCall,
    allowed: frozenset[str],
    expected: str,
) -> None:
    out = await reg.invoke(tool_call, make_ctx(), allowed)
    assert out.is_error
    assert out.content.startswith(expected)
    assert not out.ends_run


async def test_invoke_a_tool_that_raises(
    reg: ToolRegistry, make_ctx: MakeCtx, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="gateway.tools.registry"):
        out = await reg.invoke(call("echo", {"text": "boom"}), make_ctx(), ALL)
    assert out == ToolOutput.error("tool echo failed: ValueError: kaboom")
    [record] = caplog.records
    assert record.exc_info is not None
    assert "boom" not in record.getMessage()  # arguments are not logged


async def test_invoke_a_tool_the_full_disk_refused_logs_nothing(
    reg: ToolRegistry, make_ctx: MakeCtx, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="gateway.tools.registry"):
        out = await reg.invoke(call("echo", {"text": "full"}), make_ctx(), ALL)
    assert out == ToolOutput.error("tool echo failed: the gateway's disk is full")
    assert caplog.records == []  # the disk-full state logs it, once for every write


async def test_invoke_keeps_working_after_errors(reg: ToolRegistry, make_ctx: MakeCtx) -> None:
    ctx = make_ctx()
    await reg.invoke(call("echo", {"text": "boom"}), ctx, ALL)
    await reg.invoke(call("nope"), ctx, ALL)
    assert (await reg.invoke(call("echo", {"text": "fine"}), ctx, ALL)).content == "fine"


async def test_invoke_lets_cancellation_through(reg: ToolRegistry, make_ctx: MakeCtx) -> None:
    echo = Echo()
    reg.register(echo, replace=True)
    task = asyncio.create_task(reg.invoke(call("echo", {"text": "wait"}), make_ctx(), ALL))
    await echo.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_services_reach_tools(reg: ToolRegistry, make_ctx: MakeCtx) -> None:
    without = await reg.invoke(call("echo", {"text": "service"}), make_ctx(), ALL)
    assert without.is_error
    assert "'greeter' service" in without.content
    ctx = make_ctx()
    ctx = ToolContext(
        agent_id=ctx.agent_id,
        session_key=ctx.session_key,
        workspace=ctx.workspace,
        settings=ctx.settings,
        services={GREETER: Greeter()},
    )
    out = await reg.invoke(call("echo", {"text": "service"}), ctx, ALL)
    assert out.content == "hello from a service"


def test_output_result_json() -> None:
    assert ToolOutput("text").result_json() == {"content": "text"}
    assert ToolOutput("text", data={"a": 1}).result_json() == {"a": 1}
    assert ToolOutput.error("bad").is_error
