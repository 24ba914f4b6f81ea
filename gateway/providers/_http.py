"""One POST to a model API (a JSON answer or an SSE stream), with every failure turned into a
typed ProviderError in one place (``_failures``); and the probe, one GET of the model list
read as a :class:`ProviderProbe`.

Shared by the OpenAI and Anthropic providers: both put a human message at
``error.message`` of their error bodies, both send Retry-After, both mark retryable answers
with ``x-should-retry``, both list their models at ``GET …/models`` behind the same key.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

import aiohttp
import orjson

from configbase import secret_value
from gateway.llm import PROBE_TIMEOUT_SECONDS, ModelReply, ProviderProbe
from gateway.providers._retry import (
    DEFAULT_RETRY_POLICY,
    RetryPolicy,
    parse_retry_after,
    with_retries,
)
from gateway.providers._sse import EVENT_STREAM, StreamAssembler, read_events
from gateway.providers.errors import (
    ContextWindowExceededError,
    ProviderConnectionError,
    ProviderError,
    ProviderResponseError,
    ProviderTimeoutError,
)
from gateway.settings import ProviderConfig

#: What one attempt of a request answers (a decoded JSON object, an assembled reply).
Answer = TypeVar("Answer")

#: Seconds to wait for the end of a streamed body after its end mark (see ``_drain``).
DRAIN_SECONDS = 1.0
#: 408 request timeout and 409 lock conflict are transient too (both vendors retry them).
RETRYABLE_STATUSES = frozenset({408, 409, 429})
#: Enough of a non-JSON body to recognise it (an HTML error page, a proxy message).
BODY_EXCERPT_CHARS = 200
#: OpenAI answers 429 for an exhausted quota too; waiting does not refill it.
NON_RETRYABLE_ERROR_TYPES = frozenset({"insufficient_quota"})
#: OpenAI's error code for a prompt over the model's context window.
CONTEXT_EXCEEDED_CODE = "context_length_exceeded"
#: How each vendor says "the prompt does not fit" in a 400's message, capturing the window:
#: OpenAI (and compatible servers such as vLLM) "This model's maximum context length is
#: 8192 tokens. …"; Anthropic "prompt is too long: 208310 tokens > 200000 maximum" and
#: "input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, …".
CONTEXT_EXCEEDED_MESSAGES = (
    re.compile(r"maximum context length is (\d+)"),
    re.compile(r"prompt is too long: \d+ tokens > (\d+) maximum"),
    re.compile(r"exceed context limit: \d+ \+ \d+ > (\d+)"),
    re.compile(r"prompt is too long"),
)


def scrub(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` masked."""
    if secret and secret in text:
        return text.replace(secret, "***")
    return text


def _excerpt(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").strip()
    if len(text) > BODY_EXCERPT_CHARS:
        text = text[:BODY_EXCERPT_CHARS] + "…"
    return text or "(empty body)"


def _error_details(raw: bytes) -> tuple[str, str | None, str | None]:
    """(message, error type, error code) from an error body of either vendor, or an
    excerpt of it."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _excerpt(raw), None, None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        message = error.get("message")
        kind = error.get("type") or error.get("code")
        code = error.get("code")
        return (
            str(message) if message else _excerpt(raw),
            str(kind) if kind else None,
            str(code) if isinstance(code, str) else None,
        )
    if isinstance(error, str) and error:
        return error, None, None
    return _excerpt(raw), None, None


def context_exceeded(status: int, message: str, code: str | None) -> tuple[bool, int | None]:
    """Whether an error answer says the prompt is over the context window, and the window
    it states (None when it states none)."""
    if status != 400 and code != CONTEXT_EXCEEDED_CODE:
        return False, None
    for pattern in CONTEXT_EXCEEDED_MESSAGES:
        if found := pattern.search(message):
            return True, int(found.group(1)) if found.groups() else None
    return code == CONTEXT_EXCEEDED_CODE, None


def _masked(raw: bytes, secret: str | None) -> bytes:
    # Mask before any excerpt is cut: a key cut in half would escape the mask.
    return raw.replace(secret.encode(), b"***") if secret else raw


def http_error(
    provider: str,
    model: str,
    status: int,
    headers: Any,
    raw: bytes,
    secret: str | None,
) -> ProviderError:
    """The ProviderError for a non-2xx answer."""
    message, kind, code = _error_details(_masked(raw, secret))
    exceeded, limit = context_exceeded(status, message, code)
    if exceeded:
        return ContextWindowExceededError(
            provider, model, scrub(message, secret), status, error_type=kind, limit=limit
        )
    retryable = status in RETRYABLE_STATUSES or status >= 500
    if kind in NON_RETRYABLE_ERROR_TYPES:
        retryable = False
    should_retry = headers.get("x-should-retry")
    if should_retry in ("true", "false"):
        retryable = should_retry == "true"
    return ProviderError(
        provider,
        model,
        scrub(message, secret),
        status,
        retryable,
        retry_after=parse_retry_after(headers),
        error_type=kind,
    )


@dataclass(frozen=True, slots=True)
class Post:
    """One POST to a model API: where, what (``body``, already JSON), within what time, and
    the key every error is masked of."""

    session: aiohttp.ClientSession
    url: str
    headers: dict[str, str]
    body: bytes
    timeout: aiohttp.ClientTimeout
    provider: str
    model: str
    secret: str | None

    @contextlib.asynccontextmanager
    async def answered(self) -> AsyncIterator[aiohttp.ClientResponse]:
        """Send the POST; the response of a 2xx answer, else :func:`http_error` raised."""
        async with self.session.post(
            self.url, data=self.body, headers=self.headers, timeout=self.timeout
        ) as response:
            if response.status >= 300:
                raw = await response.read()
                raise http_error(
                    self.provider, self.model, response.status, response.headers, raw, self.secret
                )
            yield response


async def post_json(post: Post) -> dict[str, Any]:
    """Send ``post`` and return the decoded JSON object of a 2xx answer.

    Raises :class:`ProviderTimeoutError` or :class:`ProviderConnectionError` (retryable),
    :class:`ProviderError` with the status for non-2xx answers, and
    :class:`ProviderResponseError` for a 2xx answer that is not a JSON object.
    """
    waited = f"no answer within {post.timeout.total:g}s"
    with _failures(post.provider, post.model, post.secret, waited):
        async with post.answered() as response:
            raw = await response.read()
    return _json_object(raw, post.provider, post.model, post.secret)


@contextlib.contextmanager
def _failures(
    provider: str,
    model: str,
    secret: str | None,
    timed_out: str,
    *,
    shown: Callable[[], str] = lambda: "",
) -> Iterator[None]:
    """Turn a request's transport failures into typed provider errors (timeouts and
    connection failures retryable), each cut at what ``shown()`` says already reached the
    person (:func:`_cut`); ``timed_out`` is the timeout's message."""
    try:
        yield
    except ProviderError as failed:
        raise _cut(failed, shown()) from None
    except TimeoutError:
        error = ProviderTimeoutError(provider, model, timed_out, retryable=True)
        raise _cut(error, shown()) from None
    except aiohttp.InvalidURL as exc:
        raise ProviderError(provider, model, f"invalid base URL: {exc}") from None
    except aiohttp.ClientError as exc:
        detail = scrub(str(exc) or type(exc).__name__, secret)
        dropped = ProviderConnectionError(
            provider, model, f"connection failed: {detail}", retryable=True
        )
        raise _cut(dropped, shown()) from None


def _cut(error: ProviderError, shown: str) -> ProviderError:
    """``error`` as it stands once ``shown`` reached the person: kept, not retried."""
    if shown:
        error.retryable = False
        error.partial = shown
    return error


async def post_stream(post: Post, assembler: StreamAssembler) -> ModelReply:
    """Send ``post`` (a streaming request) and assemble the SSE answer; raises as
    :func:`post_json` does, with one difference: once text has gone to the listener, a
    failure is no longer retryable (a retry would show the person a second, different
    beginning) and carries that text in ``partial``, so the turn can end the message with
    what was said. A server that ignores ``stream`` and answers plain JSON still works."""
    provider, model, secret = post.provider, post.model, post.secret
    waited = f"no full answer within {post.timeout.total:g}s"
    with _failures(provider, model, secret, waited, shown=lambda: assembler.shown):
        async with post.answered() as response:
            if response.content_type != EVENT_STREAM:
                raw = await response.read()
                return assembler.whole(_json_object(raw, provider, model, secret))
            # Closed here, not by the garbage collector: a generator left at the end mark
            # would be finalised through the loop's self-pipe, a write and a wake-up more
            # per model call.
            reading = read_events(response.content, provider, model)
            async with contextlib.aclosing(reading) as events:
                async for event in events:
                    assembler.feed(event)
                    if assembler.complete:
                        await _drain(response)
                        break
                else:
                    assembler.ended()
    if not assembler.complete:
        error = ProviderConnectionError(
            provider, model, "the stream ended before the answer was complete", retryable=True
        )
        raise _cut(error, assembler.shown)
    return assembler.reply()


async def _drain(response: aiohttp.ClientResponse) -> None:
    """Read what follows the stream's end mark (the body's end, as a rule at once), so the
    connection goes back to the pool instead of being closed; a server that keeps the body
    open past its end mark is not waited for long."""
    with contextlib.suppress(TimeoutError, aiohttp.ClientError):
        async with asyncio.timeout(DRAIN_SECONDS):
            await response.read()


def _json_object(raw: bytes, provider: str, model: str, secret: str | None) -> dict[str, Any]:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ProviderResponseError(
            provider, model, f"answer is not JSON: {scrub(_excerpt(raw), secret)}"
        ) from None
    if not isinstance(data, dict):
        raise ProviderResponseError(provider, model, "answer is not a JSON object")
    return data


class HttpProvider:
    """What the HTTP providers share: the session, the key, the timeout, the retries and
    the probe.

    With ``session`` given (the registry's shared one) the provider never closes it;
    without, it opens its own on first use and closes it in :meth:`close`. A subclass sets
    the class attributes below, ``_models_url`` and ``_auth_headers``, and says what its
    model list settles in :meth:`_listed_models`.
    """

    #: The environment variable the vendor's own tools read the key from.
    API_KEY_ENV: ClassVar[str]
    #: What to check when the model list is not found (404), if there is a likely cause.
    NOT_FOUND_FIX: ClassVar[str | None] = None
    #: Where the model list is, and the headers that authenticate a request (set in
    #: the subclass's ``__init__``).
    _models_url: str
    _auth_headers: dict[str, str]

    def __init__(
        self,
        name: str,
        config: ProviderConfig,
        *,
        default_base_url: str,
        session: aiohttp.ClientSession | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.name = name
        self.base_url = (config.base_url or default_base_url).rstrip("/")
        #: The vendor's own API is the one its default URL names.
        self.official = urlsplit(self.base_url).hostname == urlsplit(default_base_url).hostname
        self._api_key = secret_value(config.api_key)
        self._max_retries = config.max_retries
        self._timeout = aiohttp.ClientTimeout(total=config.timeout_seconds)
        self._retry = retry or DEFAULT_RETRY_POLICY
        self._session = session
        self._owns_session = session is None
        self._closed = False

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<{type(self).__name__} {self.name} {self.base_url}{state}>"

    @property
    def session(self) -> aiohttp.ClientSession | None:
        """The HTTP session in use (the shared one, or this provider's own once opened)."""
        return self._session

    @property
    def closed(self) -> bool:
        return self._closed

    def _open_session(self, model: str) -> aiohttp.ClientSession:
        if self._closed:
            raise ProviderError(self.name, model, "provider is closed")
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    def _request(
        self, url: str, headers: dict[str, str], payload: dict[str, Any], model: str
    ) -> Post:
        return Post(
            self._open_session(model),
            url,
            headers,
            orjson.dumps(payload),
            self._timeout,
            self.name,
            model,
            self._api_key,
        )

    async def _post(
        self, url: str, headers: dict[str, str], payload: dict[str, Any], model: str
    ) -> dict[str, Any]:
        """POST ``payload`` with retries; the decoded 2xx answer."""
        post = self._request(url, headers, payload, model)
        return await self._retried(lambda: post_json(post))

    async def _stream(
        self,
        url: str,
        headers: dict[str, str],
        payload: dict[str, Any],
        model: str,
        assembler: Callable[[], StreamAssembler],
    ) -> ModelReply:
        """POST a streaming ``payload``; each attempt reads into a fresh ``assembler()``.
        Retried as :meth:`_post` is, until the first text was shown."""
        post = self._request(url, headers, payload, model)
        return await self._retried(lambda: post_stream(post, assembler()))

    async def _retried(self, attempt: Callable[[], Awaitable[Answer]]) -> Answer:
        """``attempt()`` under this provider's one retry policy (:func:`with_retries`)."""
        return await with_retries(attempt, max_retries=self._max_retries, policy=self._retry)

    async def probe(self, *, timeout_seconds: float = PROBE_TIMEOUT_SECONDS) -> ProviderProbe:
        """``GET`` the model list: free, generates nothing, and needs a valid key.

        One attempt, no retries: a probe reports what the API says now. A missing key for
        the vendor's own API fails before any request. Never raises for network or HTTP
        failures; a closed provider raises :class:`ProviderError` as :meth:`complete` does.
        """
        session = self._open_session("models")
        setting = f"models.providers.{self.name}"
        key_setting, key, env = f"{setting}.apiKey", self._api_key, self.API_KEY_ENV
        if key is None and self.official:
            fix = f'set {key_setting}, e.g. apiKey: "${{{env}}}", and export {env}'
            return ProviderProbe("missing", f"no API key ({key_setting} is unset)", fix)
        url = self._models_url
        try:
            async with session.get(
                url,
                headers=self._auth_headers,
                timeout=aiohttp.ClientTimeout(total=timeout_seconds),
            ) as response:
                status, raw = response.status, _masked(await response.read(), key)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return ProviderProbe.unreachable(url, exc, secret=key, setting=f"{setting}.baseUrl")
        if status in (401, 403):
            detail = f"the API key was refused (HTTP {status}: {_error_details(raw)[0]})"
            fix = f"check {key_setting}" + (f" ({env})" if self.official else "")
            return ProviderProbe("refused", scrub(detail, key), fix)
        if status == 404:
            detail = f"{url} answered 404: the server may not list models, or baseUrl is wrong"
            return ProviderProbe("unexpected", detail, self.NOT_FOUND_FIX)
        if status >= 300:
            detail = f"reachable, but answered HTTP {status}: {_error_details(raw)[0]}"
            return ProviderProbe("unexpected", scrub(detail, key))
        try:
            listing = orjson.loads(raw)
        except orjson.JSONDecodeError:
            listing = None
        accepted = "key accepted" if key else "no key needed"
        detail = f"reachable at {self.base_url}, {accepted}"
        return ProviderProbe("ok", detail, models=self._listed_models(listing))

    def _listed_models(self, listing: Any) -> tuple[str, ...] | None:
        """The ids in a decoded model list, if they settle which ids work. Default: None."""
        return None

    async def close(self) -> None:
        """Refuse new calls; close the session if this provider opened it. Idempotent."""
        self._closed = True
        if self._owns_session and self._session is not None:
            session, self._session = self._session, None
            await session.close()
