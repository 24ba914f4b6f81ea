"""The announce message (DESIGN §8, pinned): the sub-agent's reply, then the stats line.

A run whose status is not ``done`` starts with one line saying so. When the model cannot
give an announce (provider down, timeout), the gateway posts a system announce: that line
and the stats line, so a finished run is never silently dropped.
"""

from __future__ import annotations

import functools
from importlib import resources

from gateway.constants import ANNOUNCE_SKIP
from gateway.state import RunRecord
from gateway.usage import format_runtime, format_stats_line


def run_name(run: RunRecord) -> str:
    """How people see a run: its label, else the start of its task."""
    if run.label:
        return run.label
    task = " ".join(run.task.split())
    return task if len(task) <= 40 else task[:39] + "…"


def status_line(run: RunRecord, status: str, runtime_seconds: float | None) -> str | None:
    """The first line of a run that did not end ``done``; None for ``done``."""
    name = f'Sub-agent "{run_name(run)}"'
    after = f" after {format_runtime(runtime_seconds)}" if runtime_seconds is not None else ""
    if status == "done":
        return None
    if status == "timeout":
        return f"{name} timed out{after}."
    if status == "cancelled":
        return f"{name} was cancelled{after}."
    if status == "interrupted":
        return f"{name} was interrupted by a gateway restart{after}."
    detail = f": {run.error}" if run.error else "."
    return f"{name} failed{after}{detail}"


@functools.cache
def _announce_template() -> str:
    return resources.files("gateway.templates").joinpath("announce.md").read_text("utf-8")


def announce_prompt(status: str, result: str | None, error: str | None) -> str:
    """The user message of the announce turn, from ``templates/announce.md``."""
    template = _announce_template()
    if error:
        detail = f"The run's error: {error}"
    elif result:
        detail = f"The run's result:\n{result}"
    else:
        detail = "The run gave no result text."
    return template.format(status=status, detail=detail).strip()


def is_skip(reply: str) -> bool:
    """Exactly ``ANNOUNCE_SKIP`` (surrounding whitespace aside) posts nothing."""
    return reply.strip() == ANNOUNCE_SKIP


def compose_announce(
    run: RunRecord,
    *,
    status: str,
    reply: str | None,
    runtime_seconds: float | None,
    transcript_path: str | None,
) -> str:
    """The message posted to the origin chat: status line, reply, blank line, stats line."""
    parts: list[str] = []
    line = status_line(run, status, runtime_seconds)
    if line:
        parts.append(line)
    if reply and reply.strip():
        parts.append(reply.strip())
    body = "\n".join(parts) if parts else f'Sub-agent "{run_name(run)}" finished.'
    stats = format_stats_line(
        runtime_seconds,
        run.usage,
        run.cost_usd,
        run.child_session_key,
        run.child_session_id,
        transcript_path,
    )
    return f"{body}\n\n{stats}"
