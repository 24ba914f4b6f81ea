"""Finding a session from any reference to it, and where its transcript is now.

People and models hold a session by what a stats line or ``herald runs`` gave them: its
key, its id, the run's id, or its transcript path. Archiving renames the transcript
(``<id>.jsonl`` → ``<id>.jsonl.deleted.<stamp>``), so a path copied earlier goes stale.
:func:`locate` resolves each of these to the session and its transcript as it is now, and
:meth:`Location.note` says when it was archived. Every reader (the CLI, the API, the
``sessions_history`` tool) goes through here.

A path is never opened as given: only its file name is read, the session id in it is
looked up in the state database, and the file shown is the one the state directory holds
for that session. A path with folders must name the session's own folder in the state
directory (the directory as configured, or with its symlinks resolved).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from gateway.constants import TRANSCRIPT_SUFFIX
from gateway.sessions.errors import InvalidIdError, SessionNotFoundError, SessionRefError
from gateway.sessions.keys import SessionKey, is_uuid
from gateway.sessions.paths import ARCHIVED_NAME_RE, sessions_dir
from gateway.sessions.transcript import iso_timestamp
from gateway.sessions.views import current_transcript_path
from gateway.state import SessionRecord, StateDB

RefKind = Literal["key", "id", "path"]
#: A live transcript's file name (an archived one is :data:`ARCHIVED_NAME_RE`).
_LIVE_NAME_RE: Final = re.compile(
    r"^(?P<session_id>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    + re.escape(TRANSCRIPT_SUFFIX)
    + "$"
)
#: The forms a reference may take, for error messages.
REF_FORMS: Final = "a session key (agent:…), a session id, a run id or a transcript path"


@dataclass(frozen=True)
class SessionRef:
    """A reference, classified: a session key (canonical), a uuid (a session id or a run
    id: both are uuids), or a transcript path with the session id its file name holds."""

    kind: RefKind
    value: str
    session_id: str | None = None


def parse_ref(ref: str) -> SessionRef:
    """Classify ``ref``; raises :class:`SessionKeyError` for a malformed ``agent:`` key and
    :class:`SessionRefError` for anything that is none of the forms."""
    if ref.startswith("agent:"):
        return SessionRef("key", str(SessionKey.parse(ref)))
    if is_uuid(ref.lower()):
        return SessionRef("id", ref.lower())
    name = ref.rsplit("/", 1)[-1]
    match = _LIVE_NAME_RE.match(name) or ARCHIVED_NAME_RE.match(name)
    if match is None or "\x00" in ref:
        raise SessionRefError(ref, f"not {REF_FORMS}")
    return SessionRef("path", ref, match["session_id"])


@dataclass(frozen=True)
class Location:
    """A session found from a reference, and where its transcript is now (None when the
    file was already gone when it was archived). ``run_id`` is set when a run's id named it.
    """

    session: SessionRecord
    path: Path | None
    run_id: str | None = None

    @property
    def archived(self) -> bool:
        return self.session.archived

    @property
    def archived_at(self) -> str | None:
        """When the session was archived (UTC ISO-8601), or None."""
        at = self.session.archived_at
        return iso_timestamp(at) if at is not None else None

    def note(self) -> str | None:
        """``session … was archived at …; its transcript is now …`` — None unless archived."""
        if self.archived_at is None:
            return None
        where = (
            f"its transcript is now {self.path}"
            if self.path is not None
            else "its transcript was already gone"
        )
        return f"session {self.session.key} was archived at {self.archived_at}; {where}"


def location_of(state_dir: Path, session: SessionRecord, run_id: str | None = None) -> Location:
    """The :class:`Location` of a session already in hand."""
    return Location(session, current_transcript_path(state_dir, session), run_id)


async def locate(state_dir: Path, db: StateDB, ref: str) -> Location:
    """The session ``ref`` names — a key, a session id, a run id or a transcript path —
    archived sessions included, with where its transcript is now.

    Raises :class:`SessionNotFoundError` (``ref`` unknown here), :class:`SessionKeyError`
    (a malformed key) or :class:`SessionRefError` (none of the forms, or a path outside
    the state directory).
    """
    parsed = parse_ref(ref)
    if parsed.kind == "key":
        session = await db.sessions.get(parsed.value)
        if session is None:
            raise SessionNotFoundError(ref)
        return location_of(state_dir, session)
    if parsed.kind == "id":
        session = await db.sessions.get_by_id(parsed.value)
        if session is not None:
            return location_of(state_dir, session)
        run = await db.runs.get(parsed.value)
        session = await db.sessions.get(run.child_session_key) if run is not None else None
        if run is None or session is None:
            raise SessionNotFoundError(ref)
        return location_of(state_dir, session, run.run_id)
    folder = _folder(ref)
    roots = _roots(state_dir)
    if folder is not None and not any(_inside(folder, root) for root in roots):
        raise SessionRefError(ref, f"not a transcript of the state directory {roots[0]}")
    assert parsed.session_id is not None  # a path always carries one
    session = await db.sessions.get_by_id(parsed.session_id)
    if session is None or (folder is not None and not _own_folder(folder, roots, session)):
        raise SessionNotFoundError(ref)
    return location_of(state_dir, session)


def _folder(ref: str) -> str | None:
    """The folder a path names (absolute, lexically normalised), or None for a bare name."""
    if "/" not in ref:
        return None
    return os.path.dirname(os.path.normpath(os.path.abspath(os.path.expanduser(ref))))


def _roots(state_dir: Path) -> list[str]:
    """The state directory as configured and with its symlinks resolved."""
    configured = os.path.abspath(state_dir)
    return list(dict.fromkeys((configured, os.path.realpath(configured))))


def _inside(folder: str, root: str) -> bool:
    return folder == root or folder.startswith(root.rstrip(os.sep) + os.sep)


def _own_folder(folder: str, roots: list[str], session: SessionRecord) -> bool:
    """Whether ``folder`` is the session's transcript folder under one of ``roots``."""
    for root in roots:
        try:
            if folder == os.fspath(sessions_dir(Path(root), session.agent_id)):
                return True
        except InvalidIdError:  # a row edited by hand
            return False
    return False
