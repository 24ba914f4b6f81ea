"""The ``scripted`` provider: offline, deterministic replies from a JSON5 rules file.

(One module, a little over 400 lines: the rules file's schema, its matching and its
template expansion are one small language, read together.)

It needs no key and no network, so Herald runs on a fresh machine and tests get a model that
always says the same thing. The rules file (``script`` in the provider's config, relative to
the config file; default: the packaged ``gateway/templates/demo-script.json5``)::

    {
      rules: [
        {
          match: "(?i)^research (?P<topic>.+) in the background",  // Python regex, searched
          system: "sub-agent",        // optional: a regex the system prompt must match too
          reply: "On it.",            // text of the first answer (may be "" beside toolCalls)
          toolCalls: [{ name: "sessions_spawn",
                        arguments: { task: "Research ${topic}", label: "research" } }],
          afterTool: "Started a background sub-agent (run {result.runId}).",
          afterToolError: "That did not work: {result.error}",
          delaySeconds: 1.5,          // optional: wait before every answer of this rule
        },
      ],
      default: { reply: "I only know a few lines…" },   // when no rule matches
    }

How a call is answered. The *latest user message* picks the rule: the first whose ``match``
is found in it (``re.search``) and whose ``system`` (if any) is found in the system prompt;
else ``default``. Then:

- If the conversation ends with a tool result (the rule asked for tools and they ran), the
  answer is text only — ``afterToolError`` when that result is an error (``is_error``, or a
  JSON object with ``error`` or a ``status`` of ``error``/``forbidden``), else ``afterTool``,
  else a generic line quoting the result. So a scripted agent never loops on tools.
- Otherwise the answer is ``reply`` plus ``toolCalls`` — only the tools the request offers.
  When none of its tools is offered, it answers ``afterTool`` (or ``reply``) as text instead.

Templates: ``$1``…``$9`` and ``${name}`` are the match's groups (``$$`` is a dollar sign);
``{message}`` the latest user message; ``{tool}`` and ``{result}`` the name and text of the
latest tool result, ``{result.a.b}`` a field of it read as JSON (``n/a`` when missing);
``{lastAssistant}`` the last assistant text before the latest user message (for the announce
turn, whose user message starts with ``[announce]``). Strings inside ``toolCalls`` arguments
are templates too.

Token usage is an estimate, stated here because it feeds the stats line and cost: about four
characters per token, rounded up. Input = ceil(chars / 4) over the system prompt, every
message's text, every tool call's name and JSON arguments, and every offered tool's name,
description and JSON parameters. Output = ceil(chars / 4) over the reply text and its tool
calls' names and JSON arguments. No cache tokens.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import pyjson5
from pydantic import Field, ValidationError

from configbase import ConfigModel
from gateway.errors import ConfigIssue
from gateway.llm import (
    PROBE_TIMEOUT_SECONDS,
    ChatMessage,
    ModelReply,
    ModelRequest,
    ProviderProbe,
    TextListener,
    ToolCall,
    ToolSpec,
    Usage,
)
from gateway.providers.errors import ScriptError

log = logging.getLogger(__name__)

#: The usual rule of thumb for English text with GPT- and Claude-style tokenizers.
CHARS_PER_TOKEN = 4
#: ``{result}`` is cut here so a huge tool output does not become a huge chat message.
RESULT_CHARS = 2000
MISSING = "n/a"
GENERIC_AFTER_TOOL = "Done. The {tool} tool answered: {result}"
GENERIC_AFTER_TOOL_ERROR = "The {tool} tool failed: {result}"
GENERIC_DEFAULT = "(The scripted model has no rule for that message.)"
GENERIC_NO_TOOL = "(I would use {tools} for that, but it is not available to me here.)"

_TOKEN = re.compile(r"\$\$|\$(\d)|\$\{(\w+)\}|\{(message|tool|lastAssistant|result(?:\.[\w-]+)*)\}")
_NEAR = re.compile(r"near (\d+)")


class ScriptToolCall(ConfigModel):
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = {}


class ScriptReply(ConfigModel):
    reply: str | None = None
    tool_calls: list[ScriptToolCall] = []
    after_tool: str | None = None
    after_tool_error: str | None = None
    delay_seconds: float = Field(default=0, ge=0)


class ScriptRule(ScriptReply):
    match: str
    system: str | None = None


class ScriptFile(ConfigModel):
    rules: list[ScriptRule] = []
    default: ScriptReply = ScriptReply(reply=GENERIC_DEFAULT)


@dataclass(frozen=True, slots=True)
class _Rule:
    spec: ScriptReply
    pattern: re.Pattern[str] | None = None
    system: re.Pattern[str] | None = None


@dataclass(frozen=True, slots=True)
class Script:
    """A loaded rules file: the rules in order and the default answer."""

    path: Path
    rules: tuple[_Rule, ...]
    default: _Rule

    def pick(self, message: str, system: str) -> tuple[_Rule, re.Match[str] | None]:
        """The rule answering ``message`` under ``system``, and its match."""
        for rule in self.rules:
            if rule.system is not None and not rule.system.search(system):
                continue
            if rule.pattern is not None and (found := rule.pattern.search(message)):
                return rule, found
        return self.default, None


def default_script_path() -> Path:
    """The packaged demo script, used when a scripted provider sets no ``script``."""
    return Path(str(resources.files("gateway") / "templates" / "demo-script.json5"))


def _line_column(text: str, offset: int) -> tuple[int, int]:
    # pyjson5 reports "near N": N is the 1-based character position of the problem.
    index = max(0, min(len(text), offset) - 1)
    line_start = text.rfind("\n", 0, index) + 1
    return text.count("\n", 0, index) + 1, index - line_start + 1


def _templates(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _templates(item)]
    if isinstance(value, list):
        return [t for item in value for t in _templates(item)]
    return []


def _compile(rule: ScriptReply, key: str, file: str) -> tuple[_Rule | None, list[ConfigIssue]]:
    issues: list[ConfigIssue] = []

    def regex(source: str | None, field: str) -> re.Pattern[str] | None:
        if source is None:
            return None
        try:
            return re.compile(source)
        except re.error as exc:
            issues.append(ConfigIssue(f"invalid regex: {exc}", file=file, key=f"{key}.{field}"))
            return None

    pattern = regex(rule.match, "match") if isinstance(rule, ScriptRule) else None
    system = regex(rule.system, "system") if isinstance(rule, ScriptRule) else None
    if rule.reply is None and not rule.tool_calls:
        issues.append(ConfigIssue("needs a reply or toolCalls", file=file, key=key))
    groups = pattern.groups if pattern else 0
    names = pattern.groupindex if pattern else {}
    texts = [rule.reply, rule.after_tool, rule.after_tool_error]
    texts += [a for call in rule.tool_calls for a in _templates(call.arguments)]
    for text in filter(None, texts):
        for token in _TOKEN.finditer(text):
            number, name = token.group(1), token.group(2)
            if number is not None and int(number) > groups:
                issues.append(
                    ConfigIssue(f"${number} but match has {groups} group(s)", file=file, key=key)
                )
            if name is not None and name not in names:
                issues.append(ConfigIssue(f"${{{name}}} is not a named group", file=file, key=key))
    if issues:
        return None, issues
    return _Rule(spec=rule, pattern=pattern, system=system), []


def load_script(path: Path) -> Script:
    """Read and check a rules file; :class:`ScriptError` names every problem found.

    Syntax errors give file:line:column; schema and regex errors give the key path
    (``rules.2.match``).
    """
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScriptError([ConfigIssue(f"cannot read rules file: {exc}", file=file)]) from None
    try:
        data = pyjson5.loads(text)
    except pyjson5.Json5Exception as exc:
        message = str(exc.args[0]) if exc.args else str(exc)
        found = _NEAR.search(message)
        line, column = _line_column(text, int(found.group(1))) if found else (None, None)
        raise ScriptError(
            [ConfigIssue(f"JSON5 syntax: {message}", file=file, line=line, column=column)]
        ) from None
    try:
        parsed = ScriptFile.model_validate(data)
    except ValidationError as exc:
        raise ScriptError(
            [
                ConfigIssue(
                    error["msg"], file=file, key=".".join(str(p) for p in error["loc"]) or None
                )
                for error in exc.errors()
            ]
        ) from None
    issues: list[ConfigIssue] = []
    rules: list[_Rule] = []
    for index, spec in enumerate(parsed.rules):
        rule, problems = _compile(spec, f"rules.{index}", file)
        issues += problems
        if rule is not None:
            rules.append(rule)
    default, problems = _compile(parsed.default, "default", file)
    issues += problems
    if issues or default is None:
        raise ScriptError(issues)
    return Script(path=path, rules=tuple(rules), default=default)


@dataclass(frozen=True, slots=True)
class _Context:
    """What templates can refer to in one call."""

    match: re.Match[str] | None
    message: str
    last_assistant: str
    tool: ChatMessage | None
    tool_name: str = MISSING

    def result_field(self, path: list[str]) -> str:
        if self.tool is None:
            return MISSING
        value: Any = _json_or_none(self.tool.content)
        for key in path:
            if isinstance(value, dict) and key in value:
                value = value[key]
            elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
                value = value[int(key)]
            else:
                return MISSING
        if value is None:
            return MISSING
        return value if isinstance(value, str) else orjson.dumps(value).decode()

    def value(self, token: re.Match[str]) -> str:
        number, name, field = token.group(1), token.group(2), token.group(3)
        if number is not None or name is not None:
            if self.match is None:
                return ""
            return self.match.group(int(number) if number is not None else name) or ""
        if field == "message":
            return self.message
        if field == "lastAssistant":
            return self.last_assistant
        if self.tool is None:
            return MISSING
        if field == "tool":
            return self.tool_name
        if field == "result":
            text = self.tool.content
            return text if len(text) <= RESULT_CHARS else text[:RESULT_CHARS] + "…"
        return self.result_field(field.split(".")[1:])

    def render(self, template: str) -> str:
        return _TOKEN.sub(lambda t: "$" if t.group(0) == "$$" else self.value(t), template)

    def render_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.render(value)
        if isinstance(value, dict):
            return {k: self.render_value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.render_value(v) for v in value]
        return value


def _json_or_none(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


def _is_error(result: ChatMessage) -> bool:
    if result.is_error:
        return True
    data = _json_or_none(result.content)
    return isinstance(data, dict) and (
        "error" in data or data.get("status") in ("error", "forbidden")
    )


def _tool_name(result: ChatMessage | None, messages: tuple[ChatMessage, ...]) -> str:
    """The tool a result answers: its own ``tool_name``, else the call it answers."""
    if result is None:
        return MISSING
    if result.tool_name:
        return result.tool_name
    for message in reversed(messages):
        for call in message.tool_calls:
            if call.id == result.tool_call_id:
                return call.name
    return MISSING


def _call_chars(calls: tuple[ToolCall, ...]) -> int:
    return sum(len(c.name) + len(orjson.dumps(c.arguments)) for c in calls)


def _tool_chars(tools: tuple[ToolSpec, ...]) -> int:
    return sum(len(t.name) + len(t.description) + len(orjson.dumps(t.parameters)) for t in tools)


def estimate_usage(request: ModelRequest, text: str, calls: tuple[ToolCall, ...]) -> Usage:
    """The stated estimate (module docstring): ceil(chars / 4) in and out."""
    prompt = len(request.system) + _tool_chars(request.tools)
    prompt += sum(len(m.content) + _call_chars(m.tool_calls) for m in request.messages)
    output = len(text) + _call_chars(calls)
    return Usage(
        input=math.ceil(prompt / CHARS_PER_TOKEN), output=math.ceil(output / CHARS_PER_TOKEN)
    )


def answer(script: Script, request: ModelRequest) -> tuple[str, tuple[ToolCall, ...], float]:
    """(text, tool calls, delay seconds) the script gives to ``request``; see the module doc."""
    messages = request.messages
    user_at = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), -1)
    message = messages[user_at].content if user_at >= 0 else ""
    rule, found = script.pick(message, request.system)
    spec = rule.spec
    last_assistant = next(
        (
            m.content
            for m in reversed(messages[: max(user_at, 0)])
            if m.role == "assistant" and m.content
        ),
        "",
    )
    last = messages[-1] if messages else None
    tool = (
        last if last is not None and last.role == "tool" and user_at < len(messages) - 1 else None
    )
    context = _Context(found, message, last_assistant, tool, _tool_name(tool, messages))
    if tool is not None:
        if _is_error(tool):
            template = spec.after_tool_error or GENERIC_AFTER_TOOL_ERROR
        else:
            template = spec.after_tool or GENERIC_AFTER_TOOL
        return context.render(template), (), spec.delay_seconds
    offered = {t.name for t in request.tools}
    calls = tuple(
        ToolCall(
            id=f"call_{len(messages)}_{n}",
            name=call.name,
            arguments=context.render_value(call.arguments),
        )
        for n, call in enumerate(c for c in spec.tool_calls if c.name in offered)
    )
    if spec.tool_calls and not calls:
        # The tools this rule wants are not offered here: answer as if they had run.
        wanted = ", ".join(dict.fromkeys(c.name for c in spec.tool_calls))
        text = spec.after_tool or spec.reply or GENERIC_NO_TOOL.format(tools=wanted)
    else:
        text = spec.reply or ""
    return context.render(text), calls, spec.delay_seconds


class ScriptedProvider:
    """A :class:`gateway.llm.Provider` answering from a :class:`Script`; no network."""

    def __init__(
        self,
        name: str,
        script: Script,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.name = name
        self.script = script
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"<ScriptedProvider {self.name} {self.script.path}>"

    async def complete(
        self, request: ModelRequest, *, on_text: TextListener | None = None
    ) -> ModelReply:
        """Answer ``request`` from the script, after the rule's delay if it has one; with
        ``on_text``, the text goes to it word by word first, as a streaming model's would."""
        text, calls, delay = answer(self.script, request)
        if delay:
            await self._sleep(delay)
        if on_text is not None:
            for piece in re.findall(r"\S+\s*|\s+", text):
                on_text(piece)
                await asyncio.sleep(0)  # let the chat show each piece as a model's would
        return ModelReply(
            text=text,
            tool_calls=calls,
            usage=estimate_usage(request, text, calls),
            model=request.model,
            stop_reason="tool_use" if calls else "end_turn",
        )

    async def probe(self, *, timeout_seconds: float = PROBE_TIMEOUT_SECONDS) -> ProviderProbe:
        """Nothing remote to check: the rules were read when this provider was built (a bad
        file fails there, with :class:`ScriptError`). No model ids: any id gets an answer."""
        return ProviderProbe("ok", f"scripted rules load ({self.script.path})")

    async def close(self) -> None:
        """Nothing to release."""
