"""The README's research example, end to end on wire fakes: a chat asks for research, the
agent spawns a sub-agent, the sub-agent calls ``web_search`` (SearXNG's wire fake), then
``web_fetch`` on the first result, and its announce brings the finding back to the chat."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tests.fakes.openai import FakeOpenAI, Step, last_user_text, openai_server
from tests.fakes.search import search_server
from tests.gateway.harness import fake_model_config, running_gateway


def tool_results(body: Any) -> list[str]:
    """The tool results after the last user message of a request."""
    messages = body["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    return [str(m["content"]) for m in messages[last_user:] if m["role"] == "tool"]


def researcher(fake: FakeOpenAI) -> Any:
    """The model: the chat's agent spawns; the sub-agent searches, fetches, then reports."""

    def call(name: str, arguments: dict[str, Any]) -> Step:
        body = fake.completion(content=None, tool_calls=[(f"call_{name}", name, arguments)])
        return Step(body=orjson.dumps(body))

    def respond(body: Any) -> Step:
        text, results = last_user_text(body), tool_results(body)
        if text.startswith("[announce]"):
            assistant = [m for m in body["messages"] if m["role"] == "assistant"]
            return fake.text_step(f"Research done. {assistant[-1]['content']}")
        if text.startswith("research:"):  # the sub-agent's task
            if not results:
                return call("web_search", {"query": "telegraph history", "count": 2})
            if len(results) == 1:
                first = orjson.loads(results[0])["results"][0]["url"]
                return call("web_fetch", {"url": first})
            return fake.text_step(f"Finding: {results[1][:200]}")
        if not results:
            return call("sessions_spawn", {"task": "research: the telegraph", "label": "research"})
        return fake.text_step("A sub-agent is on it.")

    return respond


async def test_a_sub_agent_searches_then_fetches_and_announces(tmp_path: Path) -> None:
    async with openai_server() as model, search_server() as search:
        search.local_pages = True
        model.responder = researcher(model)
        tools = {
            "webSearch": {"provider": "searxng", "baseUrl": f"{search.base}/searx"},
            # The fake's pages are on loopback, which web_fetch refuses by default.
            "webFetch": {"allowPrivateNetworks": True},
        }
        config = fake_model_config(model, {"agent": {"tools": tools}})
        async with running_gateway(tmp_path, config=config) as gw:
            await gw.say("research the history of the telegraph in the background")
            assert (await gw.reply()).text == "A sub-agent is on it."
            (announce,) = await gw.announce()
    assert [r["provider"] for r in search.requests] == ["searxng", "page"]
    assert search.requests[0]["query"]["q"] == "telegraph history"
    assert search.requests[1]["n"] == "1"
    assert announce.text.startswith("Research done. Finding: ")
    assert "the first telegraph line opened in 1844" in announce.text
