"""Where a finished run's result goes, and the states its delivery passes through.

A run's *status* says how far it got (``queued → running → announcing → done | error |
timeout | cancelled | interrupted``). Its *delivery* says who has its result, one column
with one table of legal moves (:data:`TRANSITIONS`)::

    live ──▶ held ──▶ consumed            a subagents wait holds it, then takes it
      │        └────▶ live | pending      …or lets it go (still live, or final: announce now)
      ├────▶ batched ──▶ consumed         its sessions_yield batch's follow-up speaks for it
      │        └─────▶ pending            …or the batch dissolved (its yielding run ended)
      └────▶ pending ──▶ delivered        written into its nearest live requester's conversation
               └──────▶ consumed          …or taken by a subagents wait first

Every write of the column goes through :func:`check_transition` inside the transaction that
reads the row, so an illegal move raises instead of being written.

:func:`destination` is the one place that decides where a final run's result goes; the
write that makes a run final (``RunEndsTable.finish_run``), the announce step, the hand-on
after it and a wait's release all ask it.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final

from gateway.state.rows import Delivery, OutboxRecord
from gateway.state.runrows import RunRecord

TRANSITIONS: Final[Mapping[Delivery, frozenset[Delivery]]] = {
    Delivery.LIVE: frozenset({Delivery.HELD, Delivery.BATCHED, Delivery.PENDING}),
    Delivery.HELD: frozenset({Delivery.LIVE, Delivery.CONSUMED, Delivery.PENDING}),
    Delivery.BATCHED: frozenset({Delivery.CONSUMED, Delivery.PENDING}),
    Delivery.PENDING: frozenset({Delivery.DELIVERED, Delivery.CONSUMED}),
    Delivery.DELIVERED: frozenset(),
    Delivery.CONSUMED: frozenset(),
}
#: Delivery states of a run that is not final yet (the others belong to final runs).
BEFORE_FINAL: Final = frozenset({Delivery.LIVE, Delivery.HELD})
DELIVERY_SQL: Final = ", ".join(f"'{state.value}'" for state in Delivery)


class IllegalTransitionError(Exception):
    """A write would move a run's delivery where :data:`TRANSITIONS` does not allow."""

    def __init__(self, run_id: str, old: Delivery, new: Delivery) -> None:
        super().__init__(f"run {run_id}: delivery cannot go from {old} to {new}")
        self.run_id = run_id
        self.old = old
        self.new = new


def check_transition(run_id: str, old: Delivery | str, new: Delivery | str) -> None:
    """Raise :class:`IllegalTransitionError` unless ``old → new`` is in the table."""
    before, after = Delivery(old), Delivery(new)
    if after not in TRANSITIONS[before]:
        raise IllegalTransitionError(run_id, before, after)


class Destination(StrEnum):
    """Where a final run's result goes."""

    #: Its ``sessions_yield`` batch: the follow-up turn speaks for it, nothing is posted.
    BATCH = "batch"
    #: A ``subagents wait`` holding it takes it; its announce waits for the wait's end.
    WAITER = "waiter"
    #: A run a person's session spawned, with a chat: announced there, and its completion
    #: written into that session.
    CHAT = "chat"
    #: Its completion only, to its requester: a live orchestrator run (a nested run), or a
    #: session with no chat to announce in.
    REQUESTER = "requester"
    #: Its requester run has ended: the completion goes to the nearest live one above.
    UP_CHAIN = "up_chain"

    @property
    def announces(self) -> bool:
        """Whether the result is posted to a chat (the announce goes to the outbox)."""
        return self is Destination.CHAT

    @property
    def completes(self) -> bool:
        """Whether a completion is handed on to a requester's conversation."""
        return self in (Destination.CHAT, Destination.REQUESTER, Destination.UP_CHAIN)


def destination(
    run: RunRecord, *, requester_live: bool = True, waited: bool | None = None
) -> Destination:
    """Where ``run``'s result goes once final. ``requester_live``: whether the run that
    spawned it (for a nested run) is still live; ``waited``: whether a wait holds it
    (default: as its delivery says; a wait releasing it passes False)."""
    if run.delivery.batch_id is not None:
        return Destination.BATCH
    held = run.delivery.state == Delivery.HELD if waited is None else waited
    if held:
        return Destination.WAITER
    if run.request.depth > 1:
        return Destination.REQUESTER if requester_live else Destination.UP_CHAIN
    if run.request.origin is None:
        return Destination.REQUESTER
    return Destination.CHAT


#: ``announce_state`` written on a run that has not started when its end is to post
#: nothing (:meth:`~gateway.state.RunsTable.withdraw_queued`: a deleted or paused job's
#: occurrence): the announce step makes it final with this state, posts nothing, and its
#: completion is taken, never written into a conversation.
WITHDRAWN: Final = "skipped"

#: The states an announce's outbox item gives its run (queued, then as the send ended).
ITEM_STATES: Final = frozenset({"queued", "delivered", "failed", "uncertain"})


def announce_state_for(where: Destination, run: RunRecord) -> str | None:
    """What the run's ``announce_state`` records for ``where`` when it becomes final (None:
    nothing yet, a wait decides). An announce queued already (by an older version, which
    made the run final in a later write that a crash lost) keeps the state its item gave
    it: the outbox may have settled it first."""
    if run.delivery.announce_state in ITEM_STATES:
        return run.delivery.announce_state
    if where is Destination.BATCH:
        return "consumed"
    if where is Destination.WAITER:
        return None
    if where is Destination.CHAT:
        return "queued"
    return "nested" if run.request.depth > 1 else "no_origin"


def delivery_for(where: Destination) -> Delivery:
    """The delivery state a run takes as it becomes final with result going ``where``."""
    if where is Destination.BATCH:
        return Delivery.BATCHED
    if where is Destination.WAITER:
        return Delivery.HELD
    return Delivery.PENDING


def announce_item(run: RunRecord, text: str, now: float) -> OutboxRecord | None:
    """The outbox item posting ``text`` to ``run``'s chat (None when it has no chat)."""
    if run.request.origin is None:
        return None
    return OutboxRecord.to_origin(run.request.origin, text, now, kind="announce", run_id=run.run_id)
