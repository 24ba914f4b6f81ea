"""Where a final run's result goes (``destination``) and the delivery states it moves through.

``destination`` is checked over every shape a run can have; the transition table pair by
pair; and every legal move is made by the real writes on each backend (the writes' own
checks refuse the rest: an illegal move raises and writes nothing).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.delivery import UNCERTAIN
from gateway.state import (
    FINISHED_STATUSES,
    TRANSITIONS,
    Delivery,
    Destination,
    IllegalTransitionError,
    Origin,
    OutboxRecord,
    RunDelivery,
    RunProgress,
    RunRecord,
    RunRequest,
    StateDB,
    check_transition,
    destination,
)
from gateway.state.runends import move, select_runs
from tests.gateway.state.conftest import Requester
from tests.gateway.state.records import REQUESTER

README = Path(__file__).resolve().parents[3] / "README.md"


def shaped(
    *,
    batched: bool,
    held: bool,
    depth: int,
    origin: bool,
    status: str,
) -> RunRecord:
    return RunRecord(
        run_id="r",
        child_session_key="agent:main:subagent:x",
        child_session_id="x",
        request=RunRequest(
            requester_agent_id="main",
            agent_id="main",
            task="t",
            parent_session_key=REQUESTER,
            parent_run_id="p" if depth > 1 else None,
            depth=depth,
            origin=Origin(channel="memory", account="default", chat_id="c1") if origin else None,
        ),
        progress=RunProgress(created_at=0.0, status=status),  # type: ignore[arg-type]
        delivery=RunDelivery(
            state=Delivery.HELD if held else Delivery.LIVE, batch_id="b" if batched else None
        ),
    )


@given(
    batched=st.booleans(),
    held=st.booleans(),
    depth=st.integers(min_value=1, max_value=5),
    origin=st.booleans(),
    requester_live=st.booleans(),
    status=st.sampled_from(sorted(FINISHED_STATUSES)),
)
def test_destination_over_every_shape_a_run_can_have(
    batched: bool, held: bool, depth: int, origin: bool, requester_live: bool, status: str
) -> None:
    run = shaped(batched=batched, held=held, depth=depth, origin=origin, status=status)
    where = destination(run, requester_live=requester_live)
    if batched:  # a batch's follow-up speaks for its runs, waited for or not
        assert where is Destination.BATCH
    elif held:
        assert where is Destination.WAITER
    elif depth > 1:  # a nested run never posts to a chat: its requester gets it
        assert where is (Destination.REQUESTER if requester_live else Destination.UP_CHAIN)
    else:
        assert where is (Destination.CHAT if origin else Destination.REQUESTER)
    # Only a run a person's session spawned, with a chat, is announced there.
    assert where.announces == (where is Destination.CHAT)
    assert where.announces <= (depth == 1 and origin)
    # A result a batch or a wait takes never also becomes a completion of its own.
    assert where.completes == (where not in (Destination.BATCH, Destination.WAITER))
    # How the run ended never changes where its result goes.
    for other in FINISHED_STATUSES:
        again = shaped(batched=batched, held=held, depth=depth, origin=origin, status=other)
        assert destination(again, requester_live=requester_live) is where
    # A wait that lets the run go leaves it where it would have gone without the wait.
    free = shaped(batched=batched, held=False, depth=depth, origin=origin, status=status)
    assert destination(run, requester_live=requester_live, waited=False) is destination(
        free, requester_live=requester_live
    )


@pytest.mark.parametrize(("old", "new"), list(itertools.product(Delivery, Delivery)))
def test_the_transition_table_allows_its_moves_and_refuses_the_rest(
    old: Delivery, new: Delivery
) -> None:
    if new in TRANSITIONS[old]:
        check_transition("r", old, new)
        return
    with pytest.raises(IllegalTransitionError) as refused:
        check_transition("r", old, new)
    assert (refused.value.old, refused.value.new) == (old, new)
    assert f"from {old} to {new}" in str(refused.value)


def test_a_result_once_given_never_moves_again() -> None:
    for final in (Delivery.DELIVERED, Delivery.CONSUMED):
        assert TRANSITIONS[final] == frozenset()
    # Nothing ever goes back to live but a wait letting go of a live run.
    assert {old for old, news in TRANSITIONS.items() if Delivery.LIVE in news} == {Delivery.HELD}


def test_the_readme_describes_the_delivery_states_as_the_table_has_them() -> None:
    """The README's list (``- `old` → `new`, `new` …``) is the table, line for line."""
    text = README.read_text("utf-8")
    start = text.index("<!-- delivery-states -->")
    end = text.index("<!-- /delivery-states -->")
    described: dict[Delivery, frozenset[Delivery]] = {}
    for line in text[start:end].splitlines():
        if not line.startswith("- `"):
            continue
        head, _, tail = line.partition("→")
        old = Delivery(head.strip("- `").split("`")[0])
        news = tail.split("—")[0] if tail else ""
        described[old] = frozenset(
            Delivery(word.strip(" `,.")) for word in news.split(",") if word.strip(" `,.")
        )
    assert described == dict(TRANSITIONS)


async def _delivery(db: StateDB, run_id: str) -> Delivery:
    run = await db.runs.get(run_id)
    assert run is not None
    return run.delivery.state


async def test_every_legal_move_is_made_by_the_writes_that_own_it(
    db: StateDB, requester: Requester
) -> None:
    a, b, c, d, e = await requester.spawn(5)
    seen: set[tuple[Delivery, Delivery]] = set()

    async def step(run_id: str, before: Delivery, after: Delivery) -> None:
        assert await _delivery(db, run_id) == after
        seen.add((before, after))

    done = {"status": "done", "announce_text": "announce"}
    # a: live → held (a wait), held → live (it ended with the run still live), live → pending
    # (the run ended), pending → delivered (written into the requester's conversation).
    await db.ends.hold([a])
    await step(a, Delivery.LIVE, Delivery.HELD)
    assert await db.ends.release([a]) == []
    await step(a, Delivery.HELD, Delivery.LIVE)
    await db.ends.finish_run(a, done, now=1.0)
    await step(a, Delivery.LIVE, Delivery.PENDING)
    assert await db.ends.mark_delivered(a)
    await step(a, Delivery.PENDING, Delivery.DELIVERED)
    # b: held → consumed (the run ended while waited for; the wait took it).
    await db.ends.hold([b])
    await db.ends.finish_run(b, done, now=1.0)
    assert await _delivery(db, b) == Delivery.HELD
    assert [r.run_id for r in await db.ends.consume([b])] == [b]
    await step(b, Delivery.HELD, Delivery.CONSUMED)
    # c: held → pending (the wait ended without taking it: its announce goes out now).
    await db.ends.hold([c])
    await db.ends.finish_run(c, done, now=1.0)
    (released,) = await db.ends.release([c])
    assert await db.ends.release_final(released.run_id, "queued", None) is not None
    await step(c, Delivery.HELD, Delivery.PENDING)
    # pending → consumed (a wait took a completion still on its way).
    assert [r.run_id for r in await db.ends.consume([c])] == [c]
    await step(c, Delivery.PENDING, Delivery.CONSUMED)
    # d, e: live → batched (ended inside a batch), batched → consumed (its follow-up done);
    # batched → pending (the batch dissolved: its yielding run ended first).
    formed = await db.batches.form(requester.batch("b1"))
    assert formed is not None
    assert set(formed.run_ids) == {d, e}
    await db.ends.finish_run(d, done, now=1.0)
    await step(d, Delivery.LIVE, Delivery.BATCHED)
    await db.ends.finish_run(e, done, now=1.0)
    await db.batches.finish("b1", "reply", 2.0, None)
    await step(d, Delivery.BATCHED, Delivery.CONSUMED)
    f, _live = await requester.spawn(2, prefix="more", origin=False)
    assert await db.batches.form(requester.batch("b2")) is not None
    await db.ends.finish_run(f, done, now=1.0)
    assert [r.run_id for r in await db.batches.dissolve("b2", 3.0)] == [f]
    await step(f, Delivery.BATCHED, Delivery.PENDING)
    legal = {(old, new) for old, news in TRANSITIONS.items() for new in news}
    assert seen == legal


async def test_an_illegal_move_raises_and_writes_nothing(db: StateDB, requester: Requester) -> None:
    (run_id,) = await requester.spawn(1)
    await db.ends.finish_run(run_id, {"status": "done", "announce_text": "x"}, now=1.0)
    assert await db.ends.mark_delivered(run_id)

    def back_to_pending(conn: object) -> None:
        runs = select_runs(conn, "run_id = ?", [run_id])  # type: ignore[arg-type]
        move(conn, runs, Delivery.PENDING)  # type: ignore[arg-type]

    with pytest.raises(IllegalTransitionError):
        await db.write(back_to_pending)
    assert await _delivery(db, run_id) == Delivery.DELIVERED
    # The writes that own the moves never make one: a second delivery finds nothing to do.
    assert not await db.ends.mark_delivered(run_id)
    assert await db.ends.consume([run_id]) == []


async def test_the_final_write_queues_the_announce_only_where_the_chat_gets_it(
    db: StateDB, requester: Requester
) -> None:
    chat, waited = await requester.spawn(2)
    (silent,) = await requester.spawn(1, prefix="more", origin=False)  # nowhere to post
    await db.ends.hold([waited])
    for run_id in (chat, waited, silent):
        await db.ends.finish_run(run_id, {"status": "done", "announce_text": "hi"}, now=1.0)
    item = await db.outbox.get_by_run(chat)
    assert item is not None
    assert (item.text, item.chat_id) == ("hi", "c1")
    assert await db.outbox.get_by_run(waited) is None  # the wait decides first
    assert await db.outbox.get_by_run(silent) is None
    runs = {r.run_id: r for r in await db.runs.list()}
    assert (runs[chat].delivery.announce_state, runs[chat].delivery.state) == ("queued", "pending")
    assert (runs[waited].delivery.announce_state, runs[waited].delivery.state) == (None, "held")
    assert (runs[silent].delivery.announce_state, runs[silent].delivery.state) == (
        "no_origin",
        "pending",
    )


@pytest.mark.parametrize("origin", [True, False])
async def test_an_announce_queued_before_the_final_write_keeps_the_state_its_item_gave_it(
    db: StateDB, requester: Requester, origin: bool
) -> None:
    """An older version queued the announce and made the run final in two writes; a crash
    lost the second. At the restart the outbox may settle the item (here: a send cut off,
    its chat unable to tell) before the run's final write lands: that write keeps the
    item's state and queues no second item, whether or not the run has a chat."""

    async def queued_before(run_id: str) -> OutboxRecord:
        """The run's announce queued, the run left ``announcing`` (the lost write)."""
        item = OutboxRecord("memory", "default", "c1", f"to {run_id}", 0.0, run_id=run_id)
        queued = {"status": "announcing", "outcome": "done", "announce_state": "queued"}
        return await db.outbox.insert_for_run(item, queued)

    (run_id,) = await requester.spawn(1, origin=origin)
    item = await queued_before(run_id)
    assert item.id is not None
    uncertain = {"announce_state": "uncertain", "announce_error": UNCERTAIN}
    await db.outbox.settle(item.id, {"state": "failed", "last_error": UNCERTAIN}, uncertain)
    final = await db.ends.finish_run(run_id, {"status": "done"}, now=1.0)
    assert (final.progress.status, final.delivery.announce_state) == ("done", "uncertain")
    (only,) = await db.outbox.list()
    assert only.id == item.id
    # The item not settled yet: the run stays queued, with that one item.
    (other,) = await requester.spawn(1, prefix="more", origin=origin)
    await queued_before(other)
    final = await db.ends.finish_run(other, {"status": "done", "announce_text": "u"}, now=1.0)
    assert final.delivery.announce_state == "queued"
    assert [i.run_id for i in await db.outbox.list()] == [run_id, other]
