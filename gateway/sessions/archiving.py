"""Archiving sessions and renewing them (``/new``): the row and the renamed file in step.

Archiving renames the transcript in its folder to ``<sessionId>.jsonl.deleted.<UTC
timestamp>`` and records the time and path; the session leaves listings and its row, usage
and transcript stay readable. The archive is claimed in the database first (under the
replica's id), so of several replicas archiving one session exactly one renames it;
:meth:`Archiver.heal_archive_claims` finishes archives whose claimant died between its
claim and its record. Archiving twice is a no-op; a transcript already gone is recorded
(path None, or the archived file found beside it after a crash between rename and commit),
not raised.

A session being renamed is *retired* first (:class:`RetiredSessions`): from then on the
store refuses appends to it, so no line can follow the rename and no file reappear headless
under the old name.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Final

from gateway.sessions.errors import SessionArchivedError
from gateway.sessions.keys import new_session_id
from gateway.sessions.paths import rename_to_archived, transcript_path
from gateway.sessions.transcript import header_record
from gateway.sessions.writer import TranscriptWriter
from gateway.state import SessionRecord, StateDB

log = logging.getLogger(__name__)

#: The claimant's name of a process alone on its database (SQLite).
LOCAL_REPLICA: Final = "local"
#: Session ids remembered as retired: sessions are archived after their last turn, so only
#: recent ones can be raced by an append.
_RETIRED_KEPT: Final = 4096


class RetiredSessions:
    """Session ids archived (or renewed) by this process: appends to them are refused,
    even through a record read before the rename. Bounded; the oldest fall out."""

    def __init__(self, kept: int = _RETIRED_KEPT) -> None:
        self._kept = kept
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, session_id: str) -> None:
        self._ids[session_id] = None
        self._ids.move_to_end(session_id)
        while len(self._ids) > self._kept:
            self._ids.popitem(last=False)

    def discard(self, session_id: str) -> None:
        self._ids.pop(session_id, None)


class Archiver:
    """Archives and renewals of one state directory's sessions.

    ``live_path`` is the store's (cached) live transcript path of a record; ``begun`` tells
    the store a new transcript has its header. ``replica_id`` names the claimant (None:
    alone on the database); ``clock`` returns epoch seconds.
    """

    def __init__(
        self,
        state_dir: Path,
        db: StateDB,
        writer: TranscriptWriter,
        *,
        live_path: Callable[[SessionRecord], Path],
        begun: Callable[[str], None],
        retired: RetiredSessions,
        replica_id: str | None,
        clock: Callable[[], float],
    ) -> None:
        self._state_dir = state_dir
        self._db = db
        self._writer = writer
        self._live_path = live_path
        self._begun = begun
        self._retired = retired
        self._replica_id = replica_id
        self._clock = clock

    def __repr__(self) -> str:
        return f"<Archiver {self._state_dir} retired={len(self._retired)}>"

    async def archive(self, record: SessionRecord) -> Path | None:
        """Archive one session; see :meth:`SessionStore.archive`."""
        if record.archived:
            return Path(record.archived_path) if record.archived_path else None
        results, errors = await self._archive_records([record])
        if record.key in errors:
            raise errors[record.key]
        # Not among the results: another replica holds the claim and reports the rename.
        return results.get(record.key)

    async def archive_many(self, keys: Iterable[str]) -> dict[str, Path | None]:
        """Archive many sessions in one pass; see :meth:`SessionStore.archive_many`."""
        wanted = builtins.list(dict.fromkeys(keys))
        found = await self._db.sessions.get_many(wanted)
        for key in wanted:
            if key not in found:
                log.warning("archive: no session %s", key)
        done = {
            r.key: (Path(r.archived_path) if r.archived_path else None)
            for r in found.values()
            if r.archived
        }
        results, _ = await self._archive_records([r for r in found.values() if not r.archived])
        return done | results

    async def archive_due(self, now: float | None = None) -> dict[str, Path | None]:
        """Archive every session whose archive time has come."""
        due = await self._db.sessions.due_for_archive(self._clock() if now is None else now)
        results, _ = await self._archive_records(due)
        return results

    async def heal_archive_claims(
        self, *, own: bool = True, cutoff: float | None = None
    ) -> dict[str, Path | None]:
        """Finish archives claimed but never recorded; see
        :meth:`SessionStore.heal_archive_claims`."""
        if self._replica_id is None:
            keys = await self._db.sessions.take_stale_archive_claims()
        elif own or cutoff is not None:
            keys = await self._db.sessions.take_stale_archive_claims(
                replica_id=self._replica_id if own else None, cutoff=cutoff
            )
        else:
            return {}
        if not keys:
            return {}
        log.warning("archive: finishing %d archive(s) cut off before they were recorded", len(keys))
        return await self.archive_many(keys)

    async def _archive_records(
        self, candidates: Sequence[SessionRecord]
    ) -> tuple[dict[str, Path | None], dict[str, OSError]]:
        if not candidates:
            return {}, {}
        claimant = self._replica_id or LOCAL_REPLICA
        keys = [r.key for r in candidates]
        records = await self._db.sessions.claim_archive(keys, claimant, now=self._clock())
        results: dict[str, Path | None] = {}
        errors: dict[str, OSError] = {}
        claimed = {r.key for r in records}
        if len(claimed) < len(keys):
            # Archived meanwhile, or being archived by another replica (whose it is to report).
            others = await self._db.sessions.get_many([k for k in keys if k not in claimed])
            for other in others.values():
                self._retired.add(other.session_id)
                if other.archived:
                    results[other.key] = Path(other.archived_path) if other.archived_path else None
        if not records:
            return results, errors
        # From here on appends to these sessions fail, so no line can follow the rename.
        for record in records:
            self._retired.add(record.session_id)
        lives = [self._live_path(r) for r in records]
        await self._writer.release(lives)
        at = self._clock()
        outcomes = await asyncio.to_thread(rename_to_archived, lives, at)
        entries: builtins.list[tuple[str, float, str | None]] = []
        for record, outcome in zip(records, outcomes, strict=True):
            if isinstance(outcome, OSError):
                log.error("archive %s: %s", record.key, outcome)
                self._retired.discard(record.session_id)
                errors[record.key] = outcome
                continue
            results[record.key] = outcome
            entries.append((record.key, at, os.fspath(outcome) if outcome else None))
        await self._db.sessions.release_archive_claims(builtins.list(errors), claimant)
        await self._db.sessions.mark_archived(entries)
        log.info("archived %d session(s)", len(entries))
        return results, errors

    async def renew(self, record: SessionRecord) -> Path | None:
        """A fresh session id and transcript for ``record``'s key; see
        :meth:`SessionStore.renew`."""
        if record.archived:
            raise SessionArchivedError(record.key)
        session_id = new_session_id()
        now = self._clock()
        header = header_record(
            session_id=session_id,
            key=record.key,
            agent_id=record.agent_id,
            parent_key=record.parent_key,
            at=now,
        )
        await self._writer.append(
            transcript_path(self._state_dir, record.agent_id, session_id), header, wait=True
        )
        self._begun(session_id)
        await self._db.sessions.renew(record.key, session_id, at=now)
        self._retired.add(record.session_id)
        live = self._live_path(record)
        await self._writer.release([live])
        (outcome,) = await asyncio.to_thread(rename_to_archived, [live], now)
        if isinstance(outcome, OSError):
            log.error("new session for %s: old transcript not archived: %s", record.key, outcome)
            return None
        log.info("session %s renewed (%s → %s)", record.key, record.session_id, session_id)
        return outcome
