"""Typed errors of sessions, session keys and transcripts."""

from __future__ import annotations

from pathlib import Path

from gateway.errors import HeraldError


class SessionError(HeraldError):
    """Base class of session and transcript errors."""


class SessionKeyError(SessionError, ValueError):
    """A session key string is malformed or hostile; ``reason`` says what is wrong."""

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        # Hostile keys may be huge or hold control characters: show a bounded, escaped form.
        shown = repr(key[:80]) + ("…" if len(key) > 80 else "")
        super().__init__(f"invalid session key {shown}: {reason}")


class InvalidIdError(SessionError, ValueError):
    """An id cannot be used (empty, or not of the required form)."""


class UnsafePathError(SessionError, ValueError):
    """A transcript path would leave the state directory."""


class SessionNotFoundError(SessionError, LookupError):
    """No session has this key (or id)."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"no session {key!r}")


class SessionRefError(SessionError, ValueError):
    """A reference to a session is none of the accepted forms, or a transcript path lies
    outside the state directory; ``reason`` says which."""

    def __init__(self, ref: str, reason: str) -> None:
        self.ref = ref
        self.reason = reason
        shown = repr(ref[:120]) + ("…" if len(ref) > 120 else "")
        super().__init__(f"{shown}: {reason}")


class SessionArchivedError(SessionError):
    """The session was archived; its transcript takes no more lines."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"session {key!r} is archived")


class TranscriptWriterClosedError(SessionError):
    """The transcript writer was closed; nothing more can be appended."""


class TranscriptWriteError(SessionError):
    """Transcript writes failed; ``failures`` lists (path, OSError) for each."""

    def __init__(self, failures: list[tuple[Path, OSError]]) -> None:
        self.failures = failures
        detail = "; ".join(f"{path}: {exc.strerror or exc}" for path, exc in failures)
        super().__init__(f"transcript writes failed: {detail or 'writer error'}")
