"""What a probe reports: is a remote service reachable, and does it accept our credentials?

A probe is one cheap request a chat channel or a model provider makes to check its
configuration without doing any work (Slack ``auth.test``, Discord ``GET /users/@me``, a
model list). Probes never raise for network or HTTP failures: every failure is a
:class:`ProbeResult` whose ``detail`` says what happened in words a person can act on, and
whose ``fix`` names the setting to change when the probe can tell. Neither ever carries a
secret: anything the remote side echoes back is masked with :func:`scrub`.

Model providers probe too, and their result (``gateway.llm.ProviderProbe``) extends
:class:`ProbeResult` with the models they list. The base type lives here, in the lower
layer both build on, so that whoever asks reads every probe's outcome the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, Self

#: How a probe ended. ``ok``: reachable, credentials accepted. ``missing``: a credential the
#: service needs is not configured, so nothing was sent. ``misconfigured``: the configuration
#: cannot work as written (seen before sending, or from an answer that is not the service's
#: API). ``unreachable``: no answer (connection failure, timeout). ``refused``: the service
#: answered and rejected the credentials. ``unexpected``: the service answered without a
#: verdict on the credentials (a server error, a rate limit, an endpoint it lacks); the same
#: probe may well pass later.
ProbeOutcome = Literal["ok", "missing", "misconfigured", "unreachable", "refused", "unexpected"]

#: Seconds a probe waits for its one answer by default. A probe asks for almost nothing, so
#: a service slower than this is worth reporting; callers with a person waiting pass less.
DEFAULT_PROBE_TIMEOUT: Final = 10.0

#: The mask every probe puts where a secret was.
MASK: Final = "***"


def scrub(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` masked."""
    return text.replace(secret, MASK) if secret else text


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One probe's verdict. ``detail`` and ``fix`` are secret-free sentences for people."""

    outcome: ProbeOutcome
    #: What was found: "bot token accepted (@herald in Acme)", "cannot reach …: …".
    detail: str
    #: What to change, naming the setting, when the probe can tell; else None.
    fix: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @classmethod
    def unreachable(cls, url: str, exc: BaseException, *, secret: str | None, setting: str) -> Self:
        """The result for a request to ``url`` that got no answer; ``exc`` says why and
        ``setting`` is the configuration key that points at the service."""
        if isinstance(exc, TimeoutError):  # aiohttp's timeouts are TimeoutErrors too
            reason = "no answer in time"
        else:
            reason = str(exc) or type(exc).__name__
        return cls(
            "unreachable",
            f"cannot reach {url}: {scrub(reason, secret)}",
            f"check {setting}; check the network, proxy and firewall",
        )
