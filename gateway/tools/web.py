"""``web_fetch``: GET an http(s) URL and return its text, within size and time limits.

The body is streamed and reading stops at the byte cap (after decompression, so a small
compressed body cannot expand without bound). Limits come from ``agent.webFetch``; the
model may ask for fewer bytes, never more. Only public addresses are reached unless
``agent.tools.webFetch.allowPrivateNetworks`` says otherwise (see :mod:`.netguard`).
"""

from __future__ import annotations

import codecs
import contextlib
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver
from pydantic import Field
from yarl import URL

from gateway.settings import WebFetchConfig
from gateway.tools.base import Tool, ToolContext, ToolOutput, ToolParams
from gateway.tools.errors import ToolError
from gateway.tools.netguard import BlockedAddressError, GuardedResolver, NetworkGuard

USER_AGENT: Final = "Herald-web_fetch/0.1"
CHUNK_BYTES: Final = 64 * 1024
#: Enough of an error page to show the model what went wrong.
ERROR_SNIPPET_BYTES: Final = 2048
MAX_REDIRECTS: Final = 5
_TEXT_TYPES: Final = (
    "application/json",
    "application/xml",
    "application/javascript",
    "application/ecmascript",
    "application/x-ndjson",
    "application/yaml",
)


class WebFetchParams(ToolParams):
    url: str = Field(min_length=1, description="The http:// or https:// URL to fetch.")
    max_bytes: int | None = Field(
        None, ge=1, description="Stop reading after this many bytes (capped by the gateway)."
    )


class WebFetchTool(Tool[WebFetchParams]):
    name = "web_fetch"
    group = "web"
    params = WebFetchParams
    description = (
        "Fetch a web page or API response over http(s) with GET and return its text. "
        "Large bodies are truncated; binary content is not returned."
    )

    def __init__(
        self,
        config: WebFetchConfig,
        *,
        guard: NetworkGuard | None = None,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self.config = config
        self.guard = guard or NetworkGuard(allow_private=False)
        #: Where names are resolved before the guard filters them (tests inject their own).
        self._resolver = resolver

    async def run(self, params: WebFetchParams, ctx: ToolContext) -> ToolOutput:
        url = _checked_url(params.url)
        limit = min(params.max_bytes or self.config.max_bytes, self.config.max_bytes)
        timeout = aiohttp.ClientTimeout(total=self.config.timeout_seconds)
        connector = aiohttp.TCPConnector(resolver=GuardedResolver(self.guard, self._resolver))
        try:
            async with aiohttp.ClientSession(
                timeout=timeout, headers={"User-Agent": USER_AGENT}, connector=connector
            ) as http:
                return await self._follow(http, url, limit)
        except BlockedAddressError as exc:
            raise ToolError(f"{url}: {exc}") from None
        except TimeoutError:
            raise ToolError(
                f"{url}: no complete response within {self.config.timeout_seconds:g}s"
            ) from None
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, BlockedAddressError):
                raise ToolError(f"{url}: {exc.os_error}") from None
            reason = exc.os_error.strerror or str(exc.os_error) or type(exc.os_error).__name__
            raise ToolError(f"{url}: cannot connect to {exc.host}: {reason}") from None
        except aiohttp.ClientError as exc:
            raise ToolError(f"{url}: request failed: {type(exc).__name__}: {exc}") from None

    async def _follow(self, http: aiohttp.ClientSession, url: str, limit: int) -> ToolOutput:
        """GET ``url``, following redirects one hop at a time so every hop is checked."""
        target = URL(url)
        for _ in range(MAX_REDIRECTS + 1):
            self.guard.check_literal(target.host or "")
            async with http.get(target, allow_redirects=False) as resp:
                location = resp.headers.get("Location")
                if resp.status in (301, 302, 303, 307, 308) and location:
                    target = target.join(URL(location))
                    _checked_url(str(target))
                    continue
                return await _response_output(resp, limit)
        raise ToolError(f"{url}: more than {MAX_REDIRECTS} redirects")


def _checked_url(raw: str) -> str:
    url = raw.strip()
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ToolError(f"invalid URL: {exc}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ToolError(f"only http and https URLs can be fetched, not {parts.scheme or url!r}")
    if not parts.hostname:
        raise ToolError(f"{url!r} has no host")
    return url


async def _response_output(resp: aiohttp.ClientResponse, limit: int) -> ToolOutput:
    final_url = str(resp.url)
    content_type = resp.content_type or ""
    if not 200 <= resp.status < 300:
        body, _ = await _read_capped(resp, ERROR_SNIPPET_BYTES)
        snippet = _decode(body, resp.charset).strip()
        message = f"HTTP {resp.status} {resp.reason or ''}".rstrip() + f" from {final_url}"
        return ToolOutput.error(
            message + (f"\n{snippet}" if snippet else ""),
            data={"url": final_url, "status": resp.status, "contentType": content_type},
        )
    body, truncated = await _read_capped(resp, limit)
    if not _is_text(content_type, body):
        raise ToolError(
            f"{final_url} returned binary content ({content_type or 'unknown type'}), "
            "which web_fetch does not return"
        )
    text = _decode(body, resp.charset)
    data: dict[str, Any] = {
        "url": final_url,
        "status": resp.status,
        "contentType": content_type,
        "content": text,
        "bytes": len(body),
        "truncated": truncated,
    }
    content = text
    if truncated:
        content += f"\n[truncated: only the first {len(body)} bytes were read]"
    return ToolOutput(content=content, data=data)


async def _read_capped(resp: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """Up to ``limit`` bytes of the body, and whether more was left unread."""
    buf = bytearray()
    async for chunk in resp.content.iter_chunked(CHUNK_BYTES):
        room = limit - len(buf)
        if len(chunk) > room:
            buf += chunk[:room]
            return bytes(buf), True
        buf += chunk
    return bytes(buf), False


def _is_text(content_type: str, body: bytes) -> bool:
    if content_type.startswith("text/") or content_type in _TEXT_TYPES:
        return True
    if content_type.endswith(("+json", "+xml")):
        return True
    # No or generic type: text unless it holds NUL bytes.
    generic = content_type in ("", "application/octet-stream")
    return generic and b"\x00" not in body[:8192]


def _decode(body: bytes, charset: str | None) -> str:
    encoding = "utf-8"
    if charset:
        with contextlib.suppress(LookupError):
            encoding = codecs.lookup(charset).name
    return body.decode(encoding, errors="replace")
