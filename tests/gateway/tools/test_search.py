"""``web_search`` against wire fakes of Brave, Tavily and SearXNG: results in one shape, the
count asked for, each provider's error answers as tool errors naming provider and status,
and the key never shown. Off until configured; in ``group:web``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.settings import HeraldSettings
from gateway.tools import ToolContext, default_registry, tools_for_agent
from gateway.tools.errors import ToolError
from gateway.tools.search import WebSearchParams, WebSearchTool
from tests.fakes.search import SearchFake, search_server


@pytest.fixture
async def fake() -> AsyncIterator[SearchFake]:
    async with search_server() as server:
        yield server


def settings_for(fake: SearchFake, provider: str, **extra: Any) -> HeraldSettings:
    base = {
        "brave": f"{fake.base}/res/v1",
        "tavily": fake.base,
        "searxng": f"{fake.base}/searx",
    }[provider]
    config: dict[str, Any] = {"provider": provider, "baseUrl": base, **extra}
    if provider != "searxng":
        config.setdefault("apiKey", fake.key)
    return HeraldSettings.model_validate({"agent": {"tools": {"webSearch": config}}})


def tool_of(settings: HeraldSettings) -> WebSearchTool:
    return WebSearchTool(settings.agent.tools.web_search)


def context(settings: HeraldSettings, tmp_path: Path) -> ToolContext:
    return ToolContext("main", "agent:main:main", tmp_path, settings)


async def search(settings: HeraldSettings, tmp_path: Path, **params: Any) -> Any:
    output = await tool_of(settings).run(
        WebSearchParams.model_validate(params), context(settings, tmp_path)
    )
    assert not output.is_error
    return orjson.loads(output.content)


@pytest.mark.parametrize("provider", ["brave", "tavily", "searxng"])
async def test_each_provider_answers_title_url_snippet(
    fake: SearchFake, tmp_path: Path, provider: str
) -> None:
    settings = settings_for(fake, provider, maxResults=3)
    answer = await search(settings, tmp_path, query="telegraph history")
    assert answer == {
        "results": [
            {
                "title": f"telegraph history #{i}",
                "url": f"https://example.com/{i}",
                "snippet": f"about {i}",
            }
            for i in (1, 2, 3)
        ]
    }
    assert fake.requests[-1]["provider"] == provider


@pytest.mark.parametrize("provider", ["brave", "tavily", "searxng"])
async def test_the_count_asked_for_wins_over_max_results(
    fake: SearchFake, tmp_path: Path, provider: str
) -> None:
    settings = settings_for(fake, provider, maxResults=3)
    answer = await search(settings, tmp_path, query="q", count=7)
    assert len(answer["results"]) == 7
    sent = fake.requests[-1]
    if provider == "brave":
        assert sent["query"]["count"] == "7"
    elif provider == "tavily":
        assert sent["body"]["max_results"] == 7


@pytest.mark.parametrize("provider", ["brave", "tavily"])
async def test_a_wrong_key_is_a_tool_error_naming_provider_and_status_not_the_key(
    fake: SearchFake, tmp_path: Path, provider: str
) -> None:
    settings = settings_for(fake, provider, apiKey="wrong-key-987654")
    with pytest.raises(ToolError) as raised:
        await search(settings, tmp_path, query="q")
    message = str(raised.value)
    assert message.startswith(f"{provider} answered HTTP 401")
    assert "wrong-key-987654" not in message
    assert fake.key not in message


@pytest.mark.parametrize("provider", ["brave", "tavily", "searxng"])
async def test_rate_limits_and_server_errors_are_tool_errors(
    fake: SearchFake, tmp_path: Path, provider: str
) -> None:
    settings = settings_for(fake, provider)
    fake.fail_with = (429, {"error": "rate limited"})
    with pytest.raises(ToolError, match=f"^{provider} answered HTTP 429"):
        await search(settings, tmp_path, query="q")
    fake.fail_with = (503, {"error": f"upstream down (key {fake.key})"})
    with pytest.raises(ToolError) as raised:
        await search(settings, tmp_path, query="q")
    assert str(raised.value).startswith(f"{provider} answered HTTP 503")
    if provider != "searxng":  # searxng has no key
        assert fake.key not in str(raised.value)  # even when the provider echoes it


async def test_searxng_without_its_json_format_says_so(fake: SearchFake, tmp_path: Path) -> None:
    fake.json_enabled = False
    with pytest.raises(ToolError, match=r"^searxng answered HTTP 403"):
        await search(settings_for(fake, "searxng"), tmp_path, query="q")


async def test_an_unreachable_provider_is_a_tool_error(tmp_path: Path) -> None:
    settings = HeraldSettings.model_validate(
        {
            "agent": {
                "tools": {"webSearch": {"provider": "searxng", "baseUrl": "http://127.0.0.1:9"}}
            }
        }
    )
    with pytest.raises(ToolError, match=r"^searxng unreachable"):
        await search(settings, tmp_path, query="q")


def test_web_search_is_off_until_configured_and_in_group_web(fake: SearchFake) -> None:
    assert "web_search" not in default_registry(HeraldSettings())
    settings = settings_for(fake, "brave")
    registry = default_registry(settings)
    assert "web_search" in registry
    web_only = HeraldSettings.model_validate(
        {
            "agent": {
                "tools": settings.agent.tools.model_dump(by_alias=True) | {"allow": ["group:web"]}
            },
        }
    )
    assert tools_for_agent(web_only, "main", default_registry(web_only)) == {
        "web_fetch",
        "web_search",
    }


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"provider": "searxng"}, "baseUrl is required for searxng"),
        ({"provider": "brave"}, "apiKey is required for brave"),
        ({"provider": "tavily", "apiKey": " "}, "apiKey is required for tavily"),
    ],
)
def test_config_mistakes_are_named(config: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        HeraldSettings.model_validate({"agent": {"tools": {"webSearch": config}}})
