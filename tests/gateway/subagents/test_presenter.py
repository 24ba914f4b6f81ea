"""How runs are listed as a tree (``herald runs list``, ``/subagents list``)."""

from __future__ import annotations

from gateway.state import RunDelivery, RunProgress, RunRecord, RunRequest
from gateway.subagents import run_tree, tree_name


def run(
    run_id: str, parent: str | None = None, at: float = 0.0, batch_id: str | None = None
) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        child_session_key=f"agent:main:subagent:{run_id}",
        child_session_id=run_id,
        request=RunRequest(
            requester_agent_id="main",
            agent_id="main",
            task=f"task {run_id}",
            parent_run_id=parent,
            label=run_id,
        ),
        progress=RunProgress(created_at=at),
        delivery=RunDelivery(batch_id=batch_id),
    )


def test_children_follow_their_parent_oldest_first_and_the_top_keeps_its_order() -> None:
    runs = [run("new", at=9), run("old", at=1), run("b", "old", 3), run("a", "old", 2)]
    runs.append(run("a1", "a", 4))
    assert [(level, r.run_id) for level, r in run_tree(runs)] == [
        (0, "new"),
        (0, "old"),
        (1, "a"),
        (2, "a1"),
        (1, "b"),
    ]


def test_a_run_whose_parent_is_not_listed_is_at_the_top_and_says_whose_it_is() -> None:
    orphan = run("child", "gone", batch_id="0123456789ab")
    assert run_tree([orphan]) == [(0, orphan)]
    assert tree_name(orphan, 0, shown=set()) == "child  [batch 01234567]  [under gone]"
    assert tree_name(orphan, 2, shown={"gone"}) == "    ↳ child  [batch 01234567]"


def test_runs_in_a_loop_of_hand_edited_rows_are_still_listed() -> None:
    runs = [run("x", "y"), run("y", "x"), run("top")]
    assert sorted(r.run_id for _, r in run_tree(runs)) == ["top", "x", "y"]
