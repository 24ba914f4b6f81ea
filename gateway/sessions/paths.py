"""Where transcripts live and how an archived one is named.

``<stateDir>/agents/<agentId>/sessions/<sessionId>.jsonl``; archived:
``<sessionId>.jsonl.deleted.<UTC ISO-8601 with ':' → '-'>``, e.g.
``….jsonl.deleted.2026-01-31T14-55-37.123Z``. Only a validated agent id and a canonical
uuid session id ever become path segments, and the joined path is checked to stay under
the state directory (lexically: operators may symlink the state directory itself).
Directories are created ``0700`` and transcript files ``0600``: they hold conversations.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from gateway.constants import AGENTS_DIR, ARCHIVE_MARKER, SESSIONS_DIR, TRANSCRIPT_SUFFIX
from gateway.sessions.errors import InvalidIdError, UnsafePathError
from gateway.sessions.keys import require_id

FILE_MODE: Final = 0o600
_UUID_RE: Final = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_UUID_FULL: Final = re.compile(_UUID_RE)
#: What an archived transcript's file name looks like.
ARCHIVED_NAME_RE: Final = re.compile(
    rf"^(?P<session_id>{_UUID_RE})\.jsonl\.deleted\."
    r"(?P<stamp>\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}Z)$"
)


def sessions_dir(state_dir: Path, agent_id: str) -> Path:
    """``<stateDir>/agents/<agentId>/sessions`` for a validated agent id."""
    require_id(agent_id, "agent id")
    return Path(_under(state_dir, f"{AGENTS_DIR}/{agent_id}/{SESSIONS_DIR}"))


def transcript_path(state_dir: Path, agent_id: str, session_id: str) -> Path:
    """The live transcript path of a session; raises on an unsafe agent or session id."""
    require_id(agent_id, "agent id")
    if not _UUID_FULL.fullmatch(session_id):
        raise InvalidIdError(f"session id {session_id!r:.80} must be a lowercase uuid")
    relative = f"{AGENTS_DIR}/{agent_id}/{SESSIONS_DIR}/{session_id}{TRANSCRIPT_SUFFIX}"
    return Path(_under(state_dir, relative))


def archive_stamp(at: dt.datetime) -> str:
    """``2026-01-31T14-55-37.123Z``: UTC ISO-8601 with milliseconds, ':' replaced by '-'."""
    utc = at.astimezone(dt.UTC)
    return utc.strftime("%Y-%m-%dT%H-%M-%S.") + f"{utc.microsecond // 1000:03d}Z"


def archived_path(live: Path, at: dt.datetime) -> Path:
    """The archive name of ``live`` in the same folder, stamped with ``at``."""
    return live.with_name(f"{live.name}{ARCHIVE_MARKER}{archive_stamp(at)}")


def find_archived(live: Path) -> Path | None:
    """The newest archived sibling of ``live`` (``<name>.deleted.*``), if any.

    Used when the database lost track of a rename (a crash between rename and commit).
    """
    try:
        names = os.listdir(live.parent)
    except FileNotFoundError:
        return None
    prefix = f"{live.name}{ARCHIVE_MARKER}"
    found = sorted(n for n in names if n.startswith(prefix) and ARCHIVED_NAME_RE.match(n))
    return live.parent / found[-1] if found else None


def _under(state_dir: Path, relative: str) -> str:
    """``relative`` joined to the state directory, refused unless it stays inside it.

    Plain string work: this runs for every session archived at start-up.
    """
    root = os.path.abspath(state_dir)
    prefix = root if root.endswith(os.sep) else root + os.sep
    candidate = prefix + relative
    if os.path.normpath(candidate) != candidate.rstrip(os.sep) or not candidate.startswith(prefix):
        raise UnsafePathError(f"{candidate!r} is not under the state directory {root!r}")
    return candidate


def rename_to_archived(lives: Sequence[Path], at: float) -> list[Path | OSError | None]:
    """Rename each live transcript to its archive name stamped ``at`` (epoch seconds).

    Returns, per file, the new path; for a file already gone, an archived sibling found by
    :func:`find_archived` (or None); for another failure, the ``OSError``. Blocking: run
    it in a thread.
    """
    # The name archived_path() gives, with the stamp formatted once: this loop is the
    # start-up cost of archiving thousands of overdue sessions.
    suffix = ARCHIVE_MARKER + archive_stamp(dt.datetime.fromtimestamp(at, dt.UTC))
    out: list[Path | OSError | None] = []
    for live in lives:
        target = os.fspath(live) + suffix
        try:
            os.rename(live, target)
        except FileNotFoundError:
            # Gone already: perhaps renamed by a run that crashed before recording it.
            out.append(find_archived(live))
        except OSError as exc:
            out.append(exc)
        else:
            out.append(Path(target))
    return out
