"""How a sub-agent run is shown: one presenter for the HTTP API, the CLI and chat commands."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from gateway.sessions import optional_iso
from gateway.shapes import Announce, Origin, Run, RunChild, RunDetail, Usage
from gateway.state import Delivery, RunRecord
from gateway.usage import format_cost, format_runtime, format_tokens

#: Longest task excerpt used as a run's name when it has no label.
NAME_CHARS = 40
#: Characters of a run or batch id shown in lists (as on the batch stats line).
SHORT_ID = 8


def run_name(run: RunRecord) -> str:
    """How people see a run: its label, else the start of its task."""
    if run.request.label:
        return run.request.label
    task = " ".join(run.request.task.split())
    return task if len(task) <= NAME_CHARS else task[: NAME_CHARS - 1] + "…"


def runtime_seconds(run: RunRecord) -> float | None:
    """Seconds from start to end, once the run has both."""
    if run.progress.ended_at is None or run.progress.started_at is None:
        return None
    return run.progress.ended_at - run.progress.started_at


def run_view(run: RunRecord, *, transcript_path: str | None = None) -> Run:
    """A run as the API, the CLI and chat commands show it; ``transcript_path`` overrides
    the recorded live path (an archived run's transcript has moved)."""
    return Run(
        run_id=run.run_id,
        status=run.progress.status,
        label=run.request.label,
        task=run.request.task,
        agent_id=run.request.agent_id,
        requester_agent_id=run.request.requester_agent_id,
        parent_session_key=run.request.parent_session_key,
        parent_run_id=run.request.parent_run_id,
        depth=run.request.depth,
        batch_id=run.delivery.batch_id,
        job_id=run.request.job_id,
        occurrence_at=optional_iso(run.request.occurrence_at),
        delivery=run.delivery.state.value,
        child_session_key=run.child_session_key,
        child_session_id=run.child_session_id,
        model=run.request.model,
        model_applied=run.request.model_applied,
        cleanup=run.request.cleanup,
        run_timeout_seconds=run.request.run_timeout_seconds,
        origin=Origin.of(run.request.origin),
        created_at=optional_iso(run.progress.created_at),
        started_at=optional_iso(run.progress.started_at),
        ended_at=optional_iso(run.progress.ended_at),
        runtime_seconds=runtime_seconds(run),
        usage=Usage.of(run.progress.usage),
        cost_usd=run.progress.cost_usd,
        result=run.progress.result_text,
        error=run.progress.error,
        announce=Announce(
            state=announce_state(run),
            error=run.delivery.announce_error,
            text=run.delivery.announce_text,
        ),
        transcript_path=transcript_path or run.progress.transcript_path,
    )


def announce_state(run: RunRecord) -> str | None:
    """What became of the run's announce: as recorded, or ``held`` while a wait holds a
    final run's announce back."""
    if (
        run.delivery.announce_state is None
        and run.progress.finished
        and run.delivery.state == Delivery.HELD
    ):
        return "held"
    return run.delivery.announce_state


def run_detail(
    run: RunRecord, children: Iterable[RunRecord], *, transcript_path: str | None = None
) -> RunDetail:
    """One run as ``GET /v1/runs/{runId}`` shows it: :func:`run_view` plus its children."""
    view = run_view(run, transcript_path=transcript_path)
    briefs = [
        RunChild(
            run_id=c.run_id, label=c.request.label, status=c.progress.status, depth=c.request.depth
        )
        for c in children
    ]
    return RunDetail(**dict(view), children=briefs)


def run_json(run: RunRecord, *, transcript_path: str | None = None) -> dict[str, Any]:
    """:func:`run_view` as JSON data (camelCase keys), for the CLI's ``--json``."""
    return run_view(run, transcript_path=transcript_path).wire()


def run_tree(runs: Sequence[RunRecord]) -> list[tuple[int, RunRecord]]:
    """``runs`` as a tree, each with its level (0 = top): every run is followed by the runs
    it spawned, oldest first. A run whose parent is not among ``runs`` is at the top; the
    top keeps the given order."""
    ids = {run.run_id for run in runs}
    below: dict[str, list[RunRecord]] = {}
    top: list[RunRecord] = []
    for run in runs:
        if run.request.parent_run_id is not None and run.request.parent_run_id in ids:
            below.setdefault(run.request.parent_run_id, []).append(run)
        else:
            top.append(run)
    for children in below.values():
        children.sort(key=lambda child: (child.progress.created_at, child.run_id))
    tree: list[tuple[int, RunRecord]] = []
    seen: set[str] = set()
    for root in top:
        stack = [(0, root)]
        while stack:
            level, run = stack.pop()
            seen.add(run.run_id)
            tree.append((level, run))
            stack.extend((level + 1, c) for c in reversed(below.get(run.run_id, [])))
    # Rows edited by hand could make a loop no root reaches; its runs are still shown.
    tree.extend((0, run) for run in runs if run.run_id not in seen)
    return tree


def tree_name(run: RunRecord, level: int, *, shown: Collection[str] = ()) -> str:
    """A run's name in a tree listing: indented by ``level``, then its batch, and for a run
    shown at the top although it was spawned by another run (not in ``shown``), its parent."""
    indent = "  " * level + ("↳ " if level else "")
    notes = []
    if run.delivery.batch_id is not None:
        notes.append(f"batch {run.delivery.batch_id[:SHORT_ID]}")
    if (
        level == 0
        and run.request.parent_run_id is not None
        and run.request.parent_run_id not in shown
    ):
        notes.append(f"under {run.request.parent_run_id[:SHORT_ID]}")
    return indent + run_name(run) + "".join(f"  [{note}]" for note in notes)


def run_lines(runs: Sequence[RunRecord], now: float) -> list[str]:
    """A chat's ``/subagents list``: one line per run, the runs they spawned indented below
    them, with their batch."""
    ids = {run.run_id for run in runs}
    lines = []
    for level, run in run_tree(runs):
        age = format_runtime(max(0.0, now - run.progress.created_at))
        name = tree_name(run, level, shown=ids)
        lines.append(f"{run.run_id[:SHORT_ID]} {run.progress.status:<11} {age} ago  {name}")
    return lines


def usage_text(run: RunRecord) -> str:
    """``12.3k (in 10.0k / out 2.3k)``."""
    usage = run.progress.usage
    return (
        f"{format_tokens(usage.total)} (in {format_tokens(usage.input)} / "
        f"out {format_tokens(usage.output)})"
    )


def run_info(run: RunRecord) -> str:
    """A chat's ``/subagents info``: status, agent, model, runtime, tokens, cost, depth,
    parent run and batch, announce."""
    cost = (
        f" • est {format_cost(run.progress.cost_usd)}" if run.progress.cost_usd is not None else ""
    )
    seconds = runtime_seconds(run)
    runtime = format_runtime(seconds) if seconds is not None else "n/a"
    return (
        f"Run {run.run_id} ({run_name(run)}): {run.progress.status}\n"
        f"agent {run.request.agent_id} • model {run.request.model} • runtime {runtime} • tokens "
        f"{usage_text(run)}{cost}\n"
        f"depth {run.request.depth}"
        + (f" • parent run {run.request.parent_run_id}" if run.request.parent_run_id else "")
        + (f" • batch {run.delivery.batch_id}" if run.delivery.batch_id else "")
        + "\n"
        f"announce: {announce_state(run) or 'pending'}"
        + (f" ({run.delivery.announce_error})" if run.delivery.announce_error else "")
    )
