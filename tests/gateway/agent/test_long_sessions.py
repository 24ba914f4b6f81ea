"""Long-lived sessions on a real gateway, whose model is the wire-level OpenAI fake with a
small context window that refuses what does not fit (as OpenAI does).

A 2,000-turn session keeps answering; after a restart the conversation read back from the
transcript is the one the gateway held in memory, so the next request is the same; a
sub-agent run whose tool results outgrow the window is compacted the same way.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from gateway.llm import ChatMessage, ModelRequest
from gateway.providers.openai import build_payload
from gateway.subagents import SpawnRequest
from tests.fakes.openai import FakeOpenAI, last_user_text, openai_server
from tests.fakes.provider_server import Step, prompt_tokens
from tests.gateway.harness import HANG_GUARD_SECONDS, running_gateway

KEY = "agent:main:memory:channel:c1"
SUMMARY = "Summary: the person counted messages and got an echo for each."


def answering(fake: FakeOpenAI) -> None:
    """Answer summary calls with :data:`SUMMARY` and chat calls with an echo, reporting the
    prompt size the fake counted (as a real server reports its tokenizer's count)."""

    def respond(body: Any) -> Step:
        text = last_user_text(body)
        reply = SUMMARY if text.startswith("[compaction]") else f"echo: {text[:40]}"
        return fake.text_step(reply, prompt_tokens=prompt_tokens(body), completion_tokens=12)

    fake.responder = respond


def small_window(fake: FakeOpenAI, window: int, **compaction: Any) -> dict[str, Any]:
    """Gateway config: the agents talk to ``fake``, whose model has ``window`` tokens."""
    return {
        "agent": {
            "model": "fake/gpt-4o-mini",
            "compaction": {"reserveTokens": 200, "keepRecentTurns": 2, **compaction},
        },
        "models": {
            "providers": {
                "fake": {
                    "api": "openai-completions",
                    "baseUrl": fake.base_url,
                    "apiKey": fake.api_key,
                    "maxRetries": 0,
                    "models": [{"id": "gpt-4o-mini", "maxTokens": 128, "contextWindow": window}],
                }
            }
        },
    }


def compactions(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r["data"] for r in records if r.get("type") == "event" and r["event"] == "compaction"]


async def test_a_two_thousand_turn_session_keeps_answering(tmp_path: Path) -> None:
    async with openai_server() as fake:
        fake.context_window = 3000
        answering(fake)
        config = small_window(fake, 3000)
        async with running_gateway(tmp_path, config=config) as gw:
            await gw.store.ensure(KEY)
            for n in range(2000):
                result = await gw.conversations.turn(KEY, f"message {n}")
                assert result.text == f"echo: message {n}", f"turn {n}: {result.text}"
            records = (await gw.store.read(KEY)).records
            sent = fake.requests[-1].body
    # Every message is in the transcript, however often the conversation was compacted.
    said = [
        r["message"]["content"]
        for r in records
        if r.get("type") == "message" and r["message"]["role"] == "user" and not r.get("meta")
    ]
    assert said == [f"message {n}" for n in range(2000)]
    done = compactions(records)
    assert len(done) > 10
    assert {d["mode"] for d in done} == {"summary"}
    # The last request is still small: a summary, the recent turns, the new message.
    assert prompt_tokens(sent) <= 3000
    assert SUMMARY in sent["messages"][1]["content"]


def wire(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """``messages`` as the OpenAI provider sends them."""
    payload = build_payload(ModelRequest(model="m", system="", messages=tuple(messages)))
    return list(payload["messages"])


async def test_after_a_restart_the_conversation_reads_back_as_it_was_sent(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    async with openai_server() as fake:
        fake.context_window = 2500
        answering(fake)
        async with running_gateway(
            tmp_path, config=small_window(fake, 2500), state_dir=state
        ) as gw:
            await gw.store.ensure(KEY)
            for n in range(40):
                await gw.conversations.turn(KEY, f"message {n} " + "x" * 60)
            held, _ = await gw.conversations.histories.take(KEY)
            assert compactions((await gw.store.read(KEY)).records)
        # Restarted, on a model with room to spare: nothing is compacted on the next turn.
        fake.context_window = None
        roomy = small_window(fake, 100_000)
        async with running_gateway(tmp_path, config=roomy, state_dir=state) as gw:
            before = len(fake.requests)
            result = await gw.conversations.turn(KEY, "after the restart")
            assert result.text == "echo: after the restart"
            (request,) = fake.requests[before:]
    next_request = request.body["messages"][1:]  # the system prompt aside
    assert next_request == wire([*held, ChatMessage(role="user", content="after the restart")])
    assert SUMMARY in next_request[0]["content"]


async def test_a_sub_agent_run_is_compacted_the_same_way(tmp_path: Path) -> None:
    reads = 8

    async with openai_server() as fake:
        fake.context_window = 3500
        calls = 0

        def respond(body: Any) -> Step:
            nonlocal calls
            text = last_user_text(body)
            usage: dict[str, Any] = {"prompt_tokens": prompt_tokens(body), "completion_tokens": 12}
            if text.startswith("[compaction]"):
                return fake.text_step(SUMMARY, **usage)
            if text.startswith("[announce]") or not body.get("tools"):
                return fake.text_step("read them all", **usage)
            calls += 1
            if calls > reads:
                return fake.text_step("read them all", **usage)
            call = {
                "id": f"call_{calls}",
                "type": "function",
                "function": {"name": "read", "arguments": '{"path": "big.txt"}'},
            }
            answer = fake.completion(content=None, **usage)
            answer["choices"][0]["message"]["tool_calls"] = [call]
            answer["choices"][0]["finish_reason"] = "tool_calls"
            return Step(body=orjson.dumps(answer))

        fake.responder = respond
        config = small_window(fake, 3500)
        config["agent"]["tools"] = {"maxResultChars": 2000}
        async with running_gateway(tmp_path, config=config) as gw:
            workspace = gw.settings.gateway.resolved_state_dir() / "workspaces" / "main"
            workspace.mkdir(parents=True, exist_ok=True)
            (workspace / "big.txt").write_text("line of text\n" * 400, encoding="utf-8")
            accepted = await gw.spawn(await gw.context(), SpawnRequest(task="read big.txt"))
            async with asyncio.timeout(HANG_GUARD_SECONDS):
                run = await gw.finished(accepted["runId"])
            records = (await gw.store.read(run.child_session_key)).records
    assert (run.progress.status, run.progress.result_text) == ("done", "read them all")
    assert calls == reads + 1
    done = compactions(records)
    assert done
    assert {d["reason"] for d in done} <= {"window", "refused"}
    # Whole in the transcript, cut in what the model read.
    results = [
        r["message"]["content"]
        for r in records
        if r.get("type") == "message" and r["message"]["role"] == "tool"
    ]
    assert len(results) == reads
    assert all(len(content) == len("line of text\n" * 400) for content in results)
    assert all(prompt_tokens(r.body) <= 3500 for r in fake.requests[-2:])


def _turn_numbers(body: Any) -> list[int]:
    return [
        int(m["content"].split()[1])
        for m in body["messages"]
        if m["role"] == "user" and str(m["content"]).startswith("turn ")
    ]


async def test_a_4096_token_model_on_defaults_keeps_its_recent_turns_and_is_never_refused(
    tmp_path: Path,
) -> None:
    # No reserveTokens, no maxTokens (4,096 by default, as large as the window): the prompt
    # counted against the window holds the system prompt and every tool's schema.
    window, turns, keep = 4096, 60, 4
    async with openai_server() as fake:
        fake.context_window = window
        answering(fake)
        config = {
            "agent": {"model": "fake/local"},
            "models": {
                "providers": {
                    "fake": {
                        "api": "openai-completions",
                        "baseUrl": fake.base_url,
                        "apiKey": fake.api_key,
                        "maxRetries": 0,
                        "models": [{"id": "local", "contextWindow": window}],
                    }
                }
            },
        }
        async with running_gateway(tmp_path, config=config) as gw:
            await gw.store.ensure(KEY)
            for n in range(turns):
                result = await gw.conversations.turn(KEY, f"turn {n} " + "words " * 20)
                assert (result.text or "").startswith(f"echo: turn {n} "), (
                    f"turn {n}: {result.text}"
                )
            records = (await gw.store.read(KEY)).records
        bodies = [r.body for r in fake.requests]
    assert compactions(records), "the window was never outgrown: the test proves nothing"
    chats = [b for b in bodies if b.get("tools")]
    assert len(chats) == turns
    assert len(bodies) <= 1.25 * turns
    for body in chats:
        numbers = _turn_numbers(body)
        current = numbers[-1]
        assert body["max_tokens"] + prompt_tokens(body) <= window
        # The last keepRecentTurns turns (the current one among them) are sent whole.
        assert numbers[-keep:] == list(range(max(0, current - keep + 1), current + 1))
