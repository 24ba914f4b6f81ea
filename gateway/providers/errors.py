"""Typed errors of model providers. Each names the provider, the model and what went wrong.

The text is safe to log and to show in a chat: it never carries an API key (providers scrub
their own key from anything the server echoes back).
"""

from __future__ import annotations

from http import HTTPStatus

from gateway.errors import ConfigError, ConfigIssue, HeraldError


def status_phrase(status: int) -> str:
    """``401`` → ``"Unauthorized"``; unknown codes (Anthropic's 529) get a short name."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Overloaded" if status == 529 else "Error"


class ProviderError(HeraldError):
    """A model call failed.

    ``status`` is the HTTP status when the server answered; ``retryable`` says whether the
    same request may succeed later (429, 5xx, timeouts, dropped connections);
    ``retry_after`` is the server's own hint in seconds; ``error_type`` is the provider's
    error kind (``rate_limit_error``, ``invalid_api_key``…); ``attempts`` is how many
    requests were made before giving up; ``partial`` is the text a streamed call had
    already shown when it broke ("" when none).
    """

    def __init__(
        self,
        provider: str,
        model: str,
        message: str,
        status: int | None = None,
        retryable: bool = False,
        *,
        retry_after: float | None = None,
        error_type: str | None = None,
    ) -> None:
        self.provider = provider
        self.model = model
        self.message = message
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        self.error_type = error_type
        self.attempts = 1
        self.partial = ""
        super().__init__(message)

    def __str__(self) -> str:
        where = f"{self.provider}/{self.model}: "
        if self.status is not None:
            where += f"HTTP {self.status} {status_phrase(self.status)}: "
        tries = f" (after {self.attempts} attempts)" if self.attempts > 1 else ""
        return f"{where}{self.message}{tries}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({str(self)!r}, status={self.status}, "
            f"retryable={self.retryable})"
        )


class ProviderTimeoutError(ProviderError):
    """The provider did not answer within ``timeoutSeconds`` (retryable)."""


class ProviderConnectionError(ProviderError):
    """The connection failed or dropped before a full answer arrived (retryable)."""


class ProviderResponseError(ProviderError):
    """The provider answered 2xx with something that is not a valid reply (garbage, no
    choices, wrong shape). Not retryable: a server that says this once usually says it again.
    """


class StreamEventTooLargeError(ProviderResponseError):
    """One event of a streamed answer was over the size Herald reads (``limit`` bytes); the
    call fails without holding it, and is not retried."""

    def __init__(self, provider: str, model: str, limit: int) -> None:
        super().__init__(
            provider,
            model,
            f"a stream event exceeded {limit} bytes, the most one event may carry (no "
            "model's event is that large)",
        )
        self.limit = limit


class ContextWindowExceededError(ProviderError):
    """The provider refused the request because the prompt does not fit the model's context
    window (OpenAI's ``context_length_exceeded``, Anthropic's "prompt is too long").
    Not retryable as is: the conversation must shrink first. ``limit`` is the window the
    provider stated, when its message says it."""

    def __init__(
        self,
        provider: str,
        model: str,
        message: str,
        status: int | None = None,
        *,
        error_type: str | None = None,
        limit: int | None = None,
    ) -> None:
        super().__init__(provider, model, message, status, False, error_type=error_type)
        self.limit = limit


class UnknownModelError(ProviderError):
    """A model ref names no configured provider or model."""


class ScriptError(ConfigError):
    """The scripted provider's rules file cannot be used; ``issues`` say file, line:column
    or the rule's key path."""

    def __init__(self, issues: list[ConfigIssue]) -> None:
        super().__init__(issues)
