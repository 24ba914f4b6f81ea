"""Model providers over aiohttp (no vendor SDK) and the registry that resolves model refs.

A model ref is ``<provider>/<model id>``: the provider is a key of ``models.providers``,
the model id one of its ``models[].id`` (the id may itself contain ``/``). The runtime asks
:meth:`ProviderRegistry.resolve` for the provider and the model's config, then calls
``provider.complete(ModelRequest(model=model.id, max_tokens=model.max_tokens, …))``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp

from configbase import secret_value
from gateway.llm import Provider
from gateway.providers import anthropic, openai
from gateway.providers._retry import RetryPolicy, parse_retry_after
from gateway.providers.anthropic import AnthropicProvider
from gateway.providers.errors import (
    ContextWindowExceededError,
    ProviderConnectionError,
    ProviderError,
    ProviderResponseError,
    ProviderTimeoutError,
    ScriptError,
    StreamEventTooLargeError,
    UnknownModelError,
)
from gateway.providers.openai import OpenAIProvider
from gateway.providers.scripted import ScriptedProvider, default_script_path, load_script
from gateway.settings import ModelConfig, ProviderConfig

__all__ = [
    "AnthropicProvider",
    "ContextWindowExceededError",
    "OpenAIProvider",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderRegistry",
    "ProviderResponseError",
    "ProviderTimeoutError",
    "RetryPolicy",
    "ScriptError",
    "ScriptedProvider",
    "StreamEventTooLargeError",
    "UnknownModelError",
    "build_provider",
    "default_script_path",
    "load_script",
    "missing_api_key",
    "parse_model_ref",
    "parse_retry_after",
]

log = logging.getLogger(__name__)


def parse_model_ref(ref: str) -> tuple[str, str]:
    """``"openai/gpt-4o-mini"`` → ``("openai", "gpt-4o-mini")``; split at the first ``/``.

    Raises :class:`UnknownModelError` when either part is missing.
    """
    provider, sep, model = ref.partition("/")
    if not sep or not provider or not model:
        raise UnknownModelError(
            provider or "?", model or "?", f"{ref!r} is not of the form '<provider>/<model id>'"
        )
    return provider, model


def missing_api_key(config: ProviderConfig) -> str | None:
    """The variable a key is conventionally read from, when ``config`` points at the
    vendor's own API (no ``baseUrl``, or the vendor's host) without a key; else None. A
    local or proxy server may need none. One rule for ``config check``, ``herald run`` and
    ``herald doctor`` (whose probe refuses the same case before sending anything)."""
    if config.api == "openai-completions":
        default, env = openai.DEFAULT_BASE_URL, OpenAIProvider.API_KEY_ENV
    elif config.api == "anthropic-messages":
        default, env = anthropic.DEFAULT_BASE_URL, AnthropicProvider.API_KEY_ENV
    else:
        return None
    if secret_value(config.api_key) is not None:
        return None
    official = urlsplit(config.base_url or default).hostname == urlsplit(default).hostname
    return env if official else None


def build_provider(
    name: str,
    config: ProviderConfig,
    *,
    config_dir: Path,
    session: aiohttp.ClientSession | None = None,
    retry: RetryPolicy | None = None,
) -> Provider:
    """The provider ``config`` describes, named ``name`` (its key in ``models.providers``).

    ``session`` is shared and never closed by the provider; without it an HTTP provider
    opens its own on first use. ``retry`` overrides the backoff timing (tests make it
    instant). A scripted provider reads its rules file now, relative to ``config_dir``, so
    a bad file fails at start-up with :class:`ScriptError`.
    """
    if config.api == "openai-completions":
        return OpenAIProvider(name, config, session=session, retry=retry)
    if config.api == "anthropic-messages":
        return AnthropicProvider(name, config, session=session, retry=retry)
    path = (config_dir / config.script).expanduser() if config.script else default_script_path()
    return ScriptedProvider(name, load_script(path))


class ProviderRegistry:
    """Every configured provider, sharing ONE aiohttp session; rebuilt on reload.

    Construct it inside the running event loop when any HTTP provider is configured (an
    aiohttp session belongs to a loop). :meth:`close` is idempotent.
    """

    def __init__(
        self,
        providers: Mapping[str, ProviderConfig],
        *,
        config_dir: Path,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._config_dir = config_dir
        self._retry = retry
        self._session: aiohttp.ClientSession | None = None
        self._configs: dict[str, ProviderConfig] = {}
        self._providers: dict[str, Provider] = {}
        self._closed = False
        self.reconfigure(providers)

    def reconfigure(self, providers: Mapping[str, ProviderConfig]) -> None:
        """Build the providers of ``providers`` (a reloaded config) in place of the current ones.

        HTTP providers share this registry's one session and scripted ones hold only their
        parsed rules, so the replaced objects own nothing to close: turns in flight finish
        with the provider they resolved. A bad rules file raises :class:`ScriptError` and
        leaves the current providers in force.
        """
        configs = dict(providers)
        built: dict[str, Provider] = {}
        # Scripted providers first: their rules files may be bad, and failing before the
        # session exists leaves nothing to close.
        for name, config in configs.items():
            if config.api == "scripted":
                built[name] = build_provider(name, config, config_dir=self._config_dir)
        http = {n: c for n, c in configs.items() if c.api != "scripted"}
        if http and self._session is None:
            self._session = aiohttp.ClientSession()
        for name, config in http.items():
            built[name] = build_provider(
                name, config, config_dir=self._config_dir, session=self._session, retry=self._retry
            )
        self._configs, self._providers = configs, built

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<ProviderRegistry {', '.join(self._providers) or 'empty'}{state}>"

    @property
    def names(self) -> list[str]:
        return sorted(self._providers)

    def get(self, name: str) -> Provider:
        """The provider called ``name``; :class:`UnknownModelError` if there is none."""
        provider = self._providers.get(name)
        if provider is None:
            known = ", ".join(self.names) or "none"
            raise UnknownModelError(name, "?", f"unknown provider (configured: {known})")
        return provider

    def resolve(self, ref: str) -> tuple[Provider, ModelConfig]:
        """The provider and model config of ``<provider>/<model id>``.

        Raises :class:`UnknownModelError` naming what is configured when either is unknown.
        """
        provider_name, model_id = parse_model_ref(ref)
        provider = self.get(provider_name)
        model = self._configs[provider_name].model(model_id)
        if model is None:
            known = ", ".join(m.id for m in self._configs[provider_name].models) or "none"
            raise UnknownModelError(provider_name, model_id, f"no such model (configured: {known})")
        return provider, model

    async def close(self) -> None:
        """Close every provider, then the shared session."""
        if self._closed:
            return
        self._closed = True
        results = await asyncio.gather(
            *(p.close() for p in self._providers.values()), return_exceptions=True
        )
        for name, result in zip(self._providers, results, strict=True):
            if isinstance(result, Exception):
                log.warning("closing provider %s failed: %s", name, result)
        if self._session is not None:
            await self._session.close()
