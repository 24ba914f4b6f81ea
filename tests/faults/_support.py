"""What every fault test shares: the seed, spawning runs in a chat, and the three checks.

The checks are the fault suite's goals: every run reaches a final status, every announce
that was not skipped is delivered exactly once, and every transcript is valid JSONL (a torn
last line excepted: a crash mid-write may leave one, and the writer cuts it before the next
append).

Seeds: each test draws its faults from ``random.Random`` seeded with :func:`fault_seed`
(``HERALD_FAULT_SEED`` overrides the test's default), and the seed is printed, so pytest
shows it with a failure and ``HERALD_FAULT_SEED=<seed> pytest <test>`` repeats the faults.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import orjson

from gateway.sessions import key_for_inbound
from gateway.state import FINISHED_STATUSES, Origin, OutboxRecord, RunRecord
from gateway.subagents import SpawnRequest
from gateway.tools import ToolContext
from tests.gateway.harness import Harness

K = TypeVar("K")

SEED_ENV = "HERALD_FAULT_SEED"


def fault_seed(default: int) -> int:
    """The seed of a test's faults: ``$HERALD_FAULT_SEED`` or ``default``; printed, so a
    failing test's captured output names it."""
    raw = os.environ.get(SEED_ENV)
    seed = int(raw) if raw else default
    print(f"fault seed {seed} (repeat with {SEED_ENV}={seed})")
    return seed


async def chat_context(gw: Harness, origin: Origin, agent_id: str = "main") -> ToolContext:
    """The tool context of the chat at ``origin`` (its session made as the router would)."""
    key = key_for_inbound(
        agent_id,
        origin.channel,
        origin.chat_type or "channel",
        origin.chat_id,
        origin.thread_id,
        "u1",
    )
    session = await gw.store.ensure(key, origin=origin)
    return gw.contexts.for_session(session)


async def plant_delivered_announce(
    gw: Harness, run_id: str, run_changes: dict[str, object]
) -> None:
    """Write what a kill mid-way through the announce step leaves: the run's announce
    recorded as delivered to chat ``c1`` of the memory channel, the run as ``run_changes``."""
    await gw.db.outbox.insert_for_run(
        OutboxRecord(
            channel="memory",
            account="default",
            chat_id="c1",
            text="the announce",
            created_at=0.0,
            run_id=run_id,
            state="delivered",
        ),
        run_changes,
    )


async def spawn_runs(
    gw: Harness,
    ctx: ToolContext,
    tasks: Iterable[str],
    *,
    refusals: list[str] | None = None,
) -> list[str]:
    """Spawn one run per task from ``ctx``; returns the run ids. Every spawn must be
    accepted, unless ``refusals`` is given: then refused spawns' errors are collected there."""
    ids: list[str] = []
    for task in tasks:
        result = await gw.spawn(ctx, SpawnRequest(task=task, label=task))
        if result["status"] != "accepted":
            if refusals is None:
                raise AssertionError(f"spawn of {task!r} not accepted: {result}")
            refusals.append(str(result.get("error")))
            continue
        ids.append(str(result["runId"]))
    return ids


async def wait_final(gw: Harness, run_ids: Sequence[str], guard: float) -> list[RunRecord]:
    """Wait (at most ``guard`` seconds, a hang guard) until every run has a final status.

    On timeout, raises AssertionError listing the runs still unfinished and their status.
    """
    try:
        async with asyncio.timeout(guard):
            return list(await asyncio.gather(*(gw.runs.wait(r) for r in run_ids)))
    except TimeoutError:
        stuck = [
            f"{run.run_id[:8]}={run.progress.status}"
            for run in await gw.db.runs.list(limit=len(run_ids) + 10)
            if run.run_id in run_ids and run.progress.status not in FINISHED_STATUSES
        ]
        raise AssertionError(f"runs without a final status after {guard:g}s: {stuck}") from None


def duplicates(counts: Counter[K]) -> dict[K, int]:
    """Entries seen more than once."""
    return {key: n for key, n in counts.items() if n > 1}


@dataclass
class TranscriptAudit:
    """What :func:`audit_transcripts` found: files, complete lines, and what is wrong."""

    files: int = 0
    lines: int = 0
    #: (file, 1-based line number) of complete lines that are not a JSON object.
    invalid: list[tuple[str, int]] = field(default_factory=list)
    #: Files whose last line is cut short (tolerated: a crash or a failed write mid-line).
    torn: list[str] = field(default_factory=list)
    #: Files whose first complete line is not a session header.
    headless: list[str] = field(default_factory=list)


def audit_transcripts(state_dir: Path) -> TranscriptAudit:
    """Check every transcript under ``state_dir/agents/*/sessions`` (live and archived)."""
    audit = TranscriptAudit()
    for path in sorted((state_dir / "agents").glob("*/sessions/*.jsonl*")):
        audit.files += 1
        lines = path.read_bytes().split(b"\n")
        tail = lines.pop()
        first: object = None
        for number, line in enumerate(lines, 1):
            audit.lines += 1
            try:
                value = orjson.loads(line)
            except orjson.JSONDecodeError:
                value = None
            if not isinstance(value, dict):
                audit.invalid.append((path.name, number))
            elif first is None:
                first = value
        if tail and _not_object(tail):
            audit.torn.append(path.name)
        if lines and not (isinstance(first, dict) and first.get("type") == "session"):
            audit.headless.append(path.name)
    return audit


def _not_object(data: bytes) -> bool:
    try:
        return not isinstance(orjson.loads(data), dict)
    except orjson.JSONDecodeError:
        return True
