"""Typed rows of the state database: frozen dataclasses and their column mapping.

Sessions are shaped for callers (``origin`` and ``usage`` are objects); outbox items and
batches mirror their columns one to one (field name = column name), so generic
``update(id, **changes)`` helpers stay simple. Runs are ``gateway.state.runrows``'.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, Literal, get_args

import orjson

from gateway.llm import Usage
from gateway.state.connection import Row

SessionKind = Literal["main", "chat", "subagent"]
RunStatus = Literal[
    "queued", "running", "announcing", "done", "error", "timeout", "cancelled", "interrupted"
]
RUN_STATUSES: Final[tuple[RunStatus, ...]] = get_args(RunStatus)
#: A run in one of these states has finished; the rest are still live.
FINISHED_STATUSES: Final[frozenset[RunStatus]] = frozenset(
    {"done", "error", "timeout", "cancelled", "interrupted"}
)
Cleanup = Literal["delete", "keep"]


class Delivery(StrEnum):
    """Who has a run's result; its legal moves are ``gateway.state.lifecycle.TRANSITIONS``."""

    #: Not final, and no wait holds it.
    LIVE = "live"
    #: A ``subagents wait`` holds it (live or final): the waiter takes the result.
    HELD = "held"
    #: Final inside a ``sessions_yield`` batch: the batch's follow-up speaks for it.
    BATCHED = "batched"
    #: Final; its completion is on its way to its nearest live requester.
    PENDING = "pending"
    #: Its completion was written into the requester's conversation.
    DELIVERED = "delivered"
    #: Taken by a wait or a batch's follow-up turn.
    CONSUMED = "consumed"


#: How a run's conversation began: the task only, or a copy of the requester's first.
RunContext = Literal["isolated", "fork"]
BatchState = Literal["waiting", "following", "done"]
#: ``sending`` is written before a send and left behind only by a crash mid-send; such an
#: item goes back to ``pending`` with ``in_doubt`` set, and is sent again only once its
#: channel has said the cut-off send is not in the chat.
OutboxState = Literal["pending", "sending", "delivered", "failed"]


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a conversation lives on a chat surface: replies and announces go here.

    ``thread_id`` is the raw provider value (a Slack ts keeps its ``.``), never normalised.
    """

    channel: str
    account: str
    chat_id: str
    thread_id: str | None = None
    chat_type: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {
            "channel": self.channel,
            "account": self.account,
            "chatId": self.chat_id,
            "threadId": self.thread_id,
            "chatType": self.chat_type,
        }


def origin_from_columns(row: Row | Mapping[str, Any]) -> Origin | None:
    """The origin stored in ``origin_*`` columns, or None when there is none."""
    if row["origin_channel"] is None:
        return None
    return Origin(
        channel=row["origin_channel"],
        account=row["origin_account"] or "",
        chat_id=row["origin_chat_id"] or "",
        thread_id=row["origin_thread_id"],
        chat_type=row["origin_chat_type"],
    )


def origin_columns(origin: Origin | None) -> dict[str, str | None]:
    """``origin_*`` column values for ``origin`` (all NULL for None)."""
    if origin is None:
        return dict.fromkeys(ORIGIN_COLUMNS)
    return {
        "origin_channel": origin.channel,
        "origin_account": origin.account,
        "origin_chat_id": origin.chat_id,
        "origin_thread_id": origin.thread_id,
        "origin_chat_type": origin.chat_type,
    }


ORIGIN_COLUMNS: Final = (
    "origin_channel",
    "origin_account",
    "origin_chat_id",
    "origin_thread_id",
    "origin_chat_type",
)
USAGE_COLUMNS: Final = ("usage_input", "usage_output", "usage_cache_read", "usage_cache_write")


def usage_from_columns(row: Row | Mapping[str, Any]) -> Usage:
    return Usage(
        input=row["usage_input"],
        output=row["usage_output"],
        cache_read=row["usage_cache_read"],
        cache_write=row["usage_cache_write"],
    )


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One session of the index. ``archived_path`` is None until archived (or if the
    transcript was already gone when it was archived)."""

    key: str
    session_id: str
    agent_id: str
    kind: SessionKind
    created_at: float
    updated_at: float
    parent_key: str | None = None
    label: str | None = None
    model: str | None = None
    origin: Origin | None = None
    usage: Usage = field(default_factory=Usage)
    #: None until some usage had a known price.
    cost_usd: float | None = None
    archive_due_at: float | None = None
    archived_at: float | None = None
    archived_path: str | None = None

    @property
    def archived(self) -> bool:
        return self.archived_at is not None

    @property
    def is_subagent(self) -> bool:
        return self.kind == "subagent"


SESSION_COLUMNS: Final = (
    "key",
    "session_id",
    "agent_id",
    "kind",
    "parent_key",
    "label",
    "model",
    *ORIGIN_COLUMNS,
    "created_at",
    "updated_at",
    *USAGE_COLUMNS,
    "cost_usd",
    "archive_due_at",
    "archived_at",
    "archived_path",
)


def session_from_row(row: Row) -> SessionRecord:
    return SessionRecord(
        key=row["key"],
        session_id=row["session_id"],
        agent_id=row["agent_id"],
        kind=row["kind"],
        parent_key=row["parent_key"],
        label=row["label"],
        model=row["model"],
        origin=origin_from_columns(row),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        usage=usage_from_columns(row),
        cost_usd=row["cost_usd"],
        archive_due_at=row["archive_due_at"],
        archived_at=row["archived_at"],
        archived_path=row["archived_path"],
    )


def session_to_columns(record: SessionRecord) -> dict[str, Any]:
    return {
        "key": record.key,
        "session_id": record.session_id,
        "agent_id": record.agent_id,
        "kind": record.kind,
        "parent_key": record.parent_key,
        "label": record.label,
        "model": record.model,
        **origin_columns(record.origin),
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "usage_input": record.usage.input,
        "usage_output": record.usage.output,
        "usage_cache_read": record.usage.cache_read,
        "usage_cache_write": record.usage.cache_write,
        "cost_usd": record.cost_usd,
        "archive_due_at": record.archive_due_at,
        "archived_at": record.archived_at,
        "archived_path": record.archived_path,
    }


@dataclass(frozen=True, slots=True)
class OutboxRecord:
    """An announce (or other message) waiting for delivery; fields are ``outbox`` columns.

    ``id`` is None until inserted.
    """

    channel: str
    account: str
    chat_id: str
    text: str
    created_at: float
    id: int | None = None
    run_id: str | None = None
    thread_id: str | None = None
    kind: str = "announce"
    state: OutboxState = "pending"
    attempts: int = 0
    next_attempt_at: float | None = None
    last_error: str | None = None
    delivered_at: float | None = None
    message_ids: tuple[str, ...] = ()
    #: The batch whose follow-up reply this item posts.
    batch_id: str | None = None
    #: When the first send began (None: never tried).
    first_attempt_at: float | None = None
    #: A send was cut off by a crash: ask the chat before sending again.
    in_doubt: bool = False
    #: The replica (process) delivering it now; None while nobody has claimed it.
    claimed_by: str | None = None

    @classmethod
    def to_origin(
        cls,
        origin: Origin,
        text: str,
        created_at: float,
        *,
        kind: str,
        run_id: str | None = None,
        batch_id: str | None = None,
    ) -> OutboxRecord:
        """An item posting ``text`` to the chat and thread of ``origin``: a run's announce
        (``run_id``), a batch's follow-up (``batch_id``) or a scheduled job's notice."""
        return cls(
            channel=origin.channel,
            account=origin.account,
            chat_id=origin.chat_id,
            thread_id=origin.thread_id,
            text=text,
            created_at=created_at,
            kind=kind,
            run_id=run_id,
            batch_id=batch_id,
        )


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """A ``sessions_yield`` batch; fields are the ``batches`` columns. ``run_ids`` is in
    spawn order; ``run_id`` is the yielding run when the requester is a sub-agent."""

    batch_id: str
    session_key: str
    run_ids: tuple[str, ...]
    first_spawn_at: float
    created_at: float
    deadline_at: float
    run_id: str | None = None
    message: str | None = None
    origin_channel: str | None = None
    origin_account: str | None = None
    origin_chat_id: str | None = None
    origin_thread_id: str | None = None
    origin_chat_type: str | None = None
    state: BatchState = "waiting"
    followup_started_at: float | None = None
    ended_at: float | None = None
    reply_text: str | None = None
    #: The replica running the follow-up (set when the batch becomes ``following``).
    claimed_by: str | None = None
    #: When a ``/stop`` (or ``subagents cancel all``) stopped the batch's runs: that answer
    #: told the chat, so the batch closes without a line of its own.
    stopped_at: float | None = None

    @property
    def origin(self) -> Origin | None:
        return origin_from_columns(dataclasses.asdict(self))


def field_names(cls: type[Any]) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


OUTBOX_COLUMNS: Final = field_names(OutboxRecord)
BATCH_COLUMNS: Final = field_names(BatchRecord)


def outbox_from_row(row: Row) -> OutboxRecord:
    values = {name: row[name] for name in OUTBOX_COLUMNS}
    ids = values["message_ids"]
    values["message_ids"] = tuple(orjson.loads(ids)) if ids else ()
    values["in_doubt"] = bool(values["in_doubt"])
    return OutboxRecord(**values)


def batch_from_row(row: Row) -> BatchRecord:
    values = {name: row[name] for name in BATCH_COLUMNS}
    values["run_ids"] = tuple(orjson.loads(values["run_ids"]))
    return BatchRecord(**values)


def to_column_value(value: Any) -> Any:
    """A Python value as SQLite stores it (bools as 0/1, tuples/lists as JSON text)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, StrEnum):  # its value: a driver may adapt an enum by its name
        return value.value
    if isinstance(value, (tuple, list)):
        return orjson.dumps(list(value)).decode()
    return value
