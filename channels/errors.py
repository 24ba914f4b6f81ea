"""Errors raised by channels; delivery retries live once, in the gateway's outbox."""

from __future__ import annotations

from typing import Literal


class ChannelError(Exception):
    """Base class of every channel failure."""


class ChannelSendError(ChannelError):
    """A send failed. ``retryable`` tells the outbox whether trying again can help.

    ``retry_after`` is the provider's own hint in seconds (Slack/Discord 429), when given.
    """

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after

    def __repr__(self) -> str:
        return f"ChannelSendError({str(self)!r}, retryable={self.retryable})"


class ChannelStartError(ChannelError):
    """A channel could not connect at start-up.

    ``fault`` says the cause is outside the configuration and may pass (the API
    unreachable: DNS, a refused connection, a timeout, a 5xx): the channel is retried in
    the background (:class:`channels.reconnecting.Reconnecting`). Otherwise it is a mistake
    to fix (credentials refused, a missing token) and the gateway exits 78.
    """

    def __init__(self, message: str, *, fault: bool = False) -> None:
        super().__init__(message)
        self.fault = fault

    def __repr__(self) -> str:
        return f"ChannelStartError({str(self)!r}, fault={self.fault})"


#: Why the gateway refused to cancel a chat's job: not the chat's (or gone), or declared in
#: the config file.
JobRefusal = Literal["job_not_found", "job_declared"]


class JobRefusedError(ChannelError):
    """A chat's request to cancel a scheduled job, refused; ``str()`` says why, for people."""

    def __init__(self, code: JobRefusal, message: str) -> None:
        super().__init__(message)
        self.code: JobRefusal = code


class JobsUnavailableError(ChannelError):
    """The gateway cannot answer about scheduled jobs now (starting, or its database failed)."""
