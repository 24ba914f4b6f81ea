"""``web_search``: a web search through Brave, Tavily or SearXNG, as ``{"results": [...]}``.

Off until ``agent.tools.webSearch`` names a provider. Each provider speaks its own API plainly
(one small function each); all answer the same shape, ``{title, url, snippet}`` per result.
The API root is the operator's choice, so ``web_fetch``'s private-network guard does not apply
(a self-hosted SearXNG usually sits on a private network). A provider's error is a tool error
naming the provider and the HTTP status, never the key.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import aiohttp
from pydantic import Field

from gateway.settings import WebSearchConfig
from gateway.tools.base import Tool, ToolContext, ToolOutput, ToolParams
from gateway.tools.errors import ToolError

USER_AGENT: Final = "Herald-web_search/0.1"
#: Enough of an error body to say what the provider refused.
ERROR_SNIPPET_CHARS: Final = 300
MAX_COUNT: Final = 20


class WebSearchParams(ToolParams):
    query: str = Field(min_length=1, max_length=400, description="What to search the web for.")
    count: int | None = Field(
        None, ge=1, le=MAX_COUNT, description="How many results (1-20; default from config)."
    )


Result = dict[str, str]
Search = Callable[[aiohttp.ClientSession, WebSearchConfig, str, int], Awaitable[list[Result]]]


async def _brave(
    http: aiohttp.ClientSession, config: WebSearchConfig, query: str, count: int
) -> list[Result]:
    headers = {"Accept": "application/json", "X-Subscription-Token": _key(config)}
    url = f"{config.resolved_base_url()}/web/search"
    async with http.get(url, params={"q": query, "count": str(count)}, headers=headers) as resp:
        body = await _json(resp, "brave")
    web = body.get("web") if isinstance(body, dict) else None
    items = web.get("results") if isinstance(web, dict) else None
    return [_result(i, "description") for i in _dicts(items)]


async def _tavily(
    http: aiohttp.ClientSession, config: WebSearchConfig, query: str, count: int
) -> list[Result]:
    headers = {"Authorization": f"Bearer {_key(config)}"}
    url = f"{config.resolved_base_url()}/search"
    payload = {"query": query, "max_results": count}
    async with http.post(url, json=payload, headers=headers) as resp:
        body = await _json(resp, "tavily")
    items = body.get("results") if isinstance(body, dict) else None
    return [_result(i, "content") for i in _dicts(items)]


async def _searxng(
    http: aiohttp.ClientSession, config: WebSearchConfig, query: str, count: int
) -> list[Result]:
    url = f"{config.resolved_base_url()}/search"
    async with http.get(url, params={"q": query, "format": "json"}) as resp:
        body = await _json(resp, "searxng")
    items = body.get("results") if isinstance(body, dict) else None
    return [_result(i, "content") for i in _dicts(items)]


PROVIDERS: Final[dict[str, Search]] = {"brave": _brave, "tavily": _tavily, "searxng": _searxng}


class WebSearchTool(Tool[WebSearchParams]):
    name = "web_search"
    group = "web"
    params = WebSearchParams
    description = (
        "Search the web. Returns the top results as title, url and snippet; fetch a page "
        "with web_fetch to read it."
    )

    def __init__(self, config: WebSearchConfig) -> None:
        self.config = config

    async def run(self, params: WebSearchParams, ctx: ToolContext) -> ToolOutput:
        provider = self.config.provider or ""
        count = params.count or self.config.max_results
        timeout = aiohttp.ClientTimeout(total=self.config.timeout_seconds)
        try:
            async with aiohttp.ClientSession(
                timeout=timeout, headers={"User-Agent": USER_AGENT}
            ) as http:
                results = await PROVIDERS[provider](http, self.config, params.query, count)
        except ToolError as exc:  # an error body might echo what was sent
            raise ToolError(_scrub(str(exc), self.config)) from None
        except TimeoutError:
            raise ToolError(
                f"{provider} did not answer within {self.config.timeout_seconds:g}s"
            ) from None
        except aiohttp.ClientError as exc:
            raise ToolError(_scrub(f"{provider} unreachable: {exc}", self.config)) from None
        return ToolOutput.json({"results": results[:count]})


def _key(config: WebSearchConfig) -> str:
    return config.api_key.get_secret_value() if config.api_key is not None else ""


def _scrub(text: str, config: WebSearchConfig) -> str:
    key = _key(config)
    return text.replace(key, "********") if key else text


async def _json(resp: aiohttp.ClientResponse, provider: str) -> Any:
    """The response's JSON, or a :class:`ToolError` naming the provider and the status."""
    if resp.status >= 400:
        text = (await resp.text(errors="replace"))[:ERROR_SNIPPET_CHARS].strip()
        detail = f": {text}" if text else ""
        raise ToolError(f"{provider} answered HTTP {resp.status}{detail}")
    try:
        return await resp.json(content_type=None)
    except ValueError:
        raise ToolError(f"{provider} answered HTTP {resp.status} with no JSON") from None


def _dicts(items: object) -> list[dict[str, Any]]:
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def _result(item: dict[str, Any], snippet_key: str) -> Result:
    return {
        "title": str(item.get("title") or ""),
        "url": str(item.get("url") or ""),
        "snippet": str(item.get(snippet_key) or ""),
    }
